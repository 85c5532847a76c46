/*
 * mask.c — per-row key ranges from causal/window, tile classification, and the element mask that folds in
 * the boolean keep-masks (key padding, explicit [B|1, H|1, Sq, Sk] / [Sq, Sk]).
 */
#include "attention/mask.h"

#include <math.h>

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
    if (p->opts.mask || p->opts.key_padding_mask) return 0;
    for (int32_t r = 0; r < blk->num_rows; r++)
        if (blk->row_lo[r] > a || blk->row_hi[r] < b) return 0;
    return 1;
}

void attn_mask_apply(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, float *s) {
    const attn_tensor *kpm = p->opts.key_padding_mask;
    const attn_tensor *em = p->opts.mask;
    for (int64_t j = a; j < b; j++) {
        float *row = s + (j - a) * ATTN_QB;
        int key_ok = 1;
        if (kpm) key_ok = ((const unsigned char *)kpm->data)[blk->seq.batch_idx * kpm->strides[0] +
                                                             j * kpm->strides[1]] != 0;
        for (int32_t r = 0; r < blk->num_rows; r++) {
            int ok = key_ok && j >= blk->row_lo[r] && j < blk->row_hi[r];
            if (ok && em) {
                const unsigned char *d = (const unsigned char *)em->data;
                int64_t i = blk->row_token[r];
                int64_t off;
                if (em->ndim == 2) {
                    off = i * em->strides[0] + j * em->strides[1];
                } else {
                    off = (em->shape[0] == 1 ? 0 : blk->seq.batch_idx) * em->strides[0] +
                          (em->shape[1] == 1 ? 0 : blk->row_head[r]) * em->strides[1] + i * em->strides[2] +
                          j * em->strides[3];
                }
                ok = d[off] != 0;
            }
            if (!ok) row[r] = -INFINITY;
        }
    }
}
