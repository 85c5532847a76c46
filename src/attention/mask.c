/*
 * mask.c — per-row key ranges from causal/window, tile classification, and the element mask that folds in
 * the boolean keep-masks (key padding, explicit masks broadcast to [B, H, Sq, Sk]) and the additive float
 * mask (torch SDPA's float attn_mask: −inf hides a key, finite values are added to the logits).
 */
#include "attention/mask.h"

#include <float.h>
#include <math.h>

#include "core/dtype.h"


int64_t attn_mask_piecewise_pos(const attn_opts *o, int64_t i) {
    int64_t lo = 0, hi = o->num_query_ranges; /* last range with local_start <= i */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (o->query_ranges[mid].local_start <= i) lo = mid;
        else hi = mid;
    }
    /* ranges may be empty (local_end == local_start); skip forward to the one that holds i */
    while (lo + 1 < o->num_query_ranges && o->query_ranges[lo].local_end <= i) lo++;
    return o->query_ranges[lo].global_start + (i - o->query_ranges[lo].local_start);
}

int64_t attn_mask_piecewise_limit(const attn_opts *o, int64_t pos) {
    int64_t lo = 0, hi = o->num_spans; /* first span with end > pos */
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (o->spans[mid].end <= pos) lo = mid + 1;
        else hi = mid;
    }
    if (lo < o->num_spans && o->spans[lo].start <= pos) return o->spans[lo].end;
    return pos + 1;
}

void attn_mask_row_range(const attn_problem *p, int64_t pos, int64_t seq_k, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b = seq_k;
    if (p->opts.causal != ATTN_CAUSAL_NONE && pos + 1 < b) b = pos + 1;
    if (p->opts.piecewise) {
        const int64_t limit = attn_mask_piecewise_limit(&p->opts, pos);
        if (limit < b) b = limit;
    }
    if (p->opts.window_left >= 0 && pos - p->opts.window_left > a) a = pos - p->opts.window_left;
    if (p->opts.window_right >= 0 && pos + p->opts.window_right + 1 < b) b = pos + p->opts.window_right + 1;
    if (b < a) b = a;
    *lo = a;
    *hi = b;
}

int attn_mask_tile_is_full(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b) {
    if (p->opts.mask || p->opts.key_padding_mask || p->opts.additive_mask) return 0;
    for (int32_t r = 0; r < blk->num_rows; r++)
        if (blk->row_lo[r] > a || blk->row_hi[r] < b) return 0;
    return 1;
}

/* Offset of row r's (b, h, i, 0) element in mask t and the element step per key (0 when Sk broadcasts). */
static void attn_mask_row_base(const attn_tensor *t, const attn_fwd_block *blk, int32_t r, int64_t *base,
                               int64_t *key_step) {
    *base = attn_mask_offset(t, blk->seq.batch_idx, blk->row_head[r], attn_seq_q_row(&blk->seq, blk->row_token[r]), 0);
    *key_step = t->shape[t->ndim - 1] == 1 ? 0 : t->strides[t->ndim - 1];
}

/* score + bias (both natural units): a sum that overflows to −inf saturates at −FLT_MAX, so a finite bias
 * never hides a key (only −inf does, handled by the caller); NaN and +inf propagate. */
static float attn_mask_add_bias(float score, float bias) {
    float x = score + bias;
    if (x == -INFINITY && score != -INFINITY) x = -FLT_MAX;
    return x;
}

void attn_mask_apply(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, float *s) {
    const attn_tensor *kpm = p->opts.key_padding_mask;
    const attn_tensor *em = p->opts.mask;
    const attn_tensor *am = p->opts.additive_mask;
    if (!kpm && !em && !am) { /* causal / window only: per row, −inf outside its visible range [row_lo, row_hi) */
        for (int32_t r = 0; r < blk->num_rows; r++) {
            const int64_t lo = blk->row_lo[r] > a ? (blk->row_lo[r] < b ? blk->row_lo[r] : b) : a;
            const int64_t hi = blk->row_hi[r] < b ? (blk->row_hi[r] > lo ? blk->row_hi[r] : lo) : b;
            for (int64_t j = a; j < lo; j++) s[(j - a) * ATTN_QB + r] = -INFINITY;
            for (int64_t j = hi; j < b; j++) s[(j - a) * ATTN_QB + r] = -INFINITY;
        }
        return;
    }
    int64_t em_base[ATTN_QB], am_base[ATTN_QB], em_step = 0, am_step = 0;
    for (int32_t r = 0; r < blk->num_rows; r++) {
        if (em) attn_mask_row_base(em, blk, r, &em_base[r], &em_step);
        if (am) attn_mask_row_base(am, blk, r, &am_base[r], &am_step);
    }
    for (int64_t j = a; j < b; j++) {
        float *row = s + (j - a) * ATTN_QB;
        const int64_t jt = attn_seq_k_token(&blk->seq, j); /* the masks' key coordinate */
        int key_ok = 1;
        if (kpm) key_ok = ((const unsigned char *)kpm->data)[blk->seq.batch_idx * kpm->strides[0] +
                                                             jt * kpm->strides[1]] != 0;
        for (int32_t r = 0; r < blk->num_rows; r++) {
            int ok = key_ok && j >= blk->row_lo[r] && j < blk->row_hi[r];
            if (ok && em) ok = ((const unsigned char *)em->data)[em_base[r] + jt * em_step] != 0;
            if (!ok) {
                row[r] = -INFINITY;
            } else if (am) {
                const float bias = attn_load_f(am->data, am->dtype, am_base[r] + jt * am_step);
                row[r] = bias == -INFINITY ? -INFINITY : attn_mask_add_bias(row[r], bias);
            }
        }
    }
}
