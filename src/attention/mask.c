/*
 * mask.c — per-row key ranges from causal/window, tile classification, and the element mask that folds in
 * the boolean keep-masks (key padding, explicit masks broadcast to [B, H, Sq, Sk]) and the additive float
 * mask (torch SDPA's float attn_mask: −inf hides a key, finite values are added to the logits).
 */
#include "attention/mask.h"

#include <float.h>
#include <math.h>
#include <string.h>

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

/* The masks over keys [a, a + n), n <= ATTN_KV_TILE, of a block. A keep or additive mask whose rows of the block
 * are one row (it broadcasts over the query and head dimensions, e.g. [B, 1, 1, Sk]) is folded per key: kept[k]
 * = 0 where key padding, such a keep-mask or such an additive −inf hides key a + k from every row, bias[k] that
 * additive value; a mask whose rows differ is read per row (em_rows / am_rows). */
typedef struct attn_mask_keys {
    int64_t a, n;
    int em_rows, am_rows, am_key; /* per-row keep-mask, per-row additive mask, per-key additive mask */
    int64_t em_step, am_step;
    int64_t em_base[ATTN_QB], am_base[ATTN_QB];
    int64_t jt[ATTN_KV_TILE];
    unsigned char kept[ATTN_KV_TILE];
    float bias[ATTN_KV_TILE];
} attn_mask_keys;

/* Values of a float mask at elements base + jt[k]·step, k < n. */
static void attn_mask_load(const attn_tensor *t, int64_t base, int64_t step, const int64_t *jt, int64_t n, float *out) {
    if (t->dtype == ATTN_DTYPE_F32) {
        const float *row = (const float *)t->data + base;
        for (int64_t k = 0; k < n; k++)
            out[k] = row[jt[k] * step];
    } else {
        for (int64_t k = 0; k < n; k++)
            out[k] = attn_load_f(t->data, t->dtype, base + jt[k] * step);
    }
}

static void attn_mask_keys_of(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t n,
                              attn_mask_keys *mk) {
    const attn_tensor *kpm = p->opts.key_padding_mask, *em = p->opts.mask, *am = p->opts.additive_mask;
    mk->a = a, mk->n = n, mk->em_step = mk->am_step = 0;
    mk->em_rows = mk->am_rows = mk->am_key = 0;
    for (int32_t r = 0; r < blk->num_rows; r++) {
        if (em)
            attn_mask_row_base(em, blk, r, &mk->em_base[r], &mk->em_step);
        if (am)
            attn_mask_row_base(am, blk, r, &mk->am_base[r], &mk->am_step);
        if (em && mk->em_base[r] != mk->em_base[0])
            mk->em_rows = 1;
        if (am && mk->am_base[r] != mk->am_base[0])
            mk->am_rows = 1;
    }
    for (int64_t k = 0; k < n; k++) {
        const int64_t jt = attn_seq_k_token(&blk->seq, a + k);
        mk->jt[k] = jt;
        mk->kept[k] =
            !kpm ||
            ((const unsigned char *)kpm->data)[blk->seq.batch_idx * kpm->strides[0] + jt * kpm->strides[1]] != 0;
    }
    if (blk->num_rows == 0)
        return;
    if (em && !mk->em_rows) {
        const unsigned char *row = (const unsigned char *)em->data + mk->em_base[0];
        for (int64_t k = 0; k < n; k++)
            mk->kept[k] &= row[mk->jt[k] * mk->em_step] != 0;
    }
    if (am && !mk->am_rows) {
        mk->am_key = 1;
        attn_mask_load(am, mk->am_base[0], mk->am_step, mk->jt, n, mk->bias);
        for (int64_t k = 0; k < n; k++)
            mk->kept[k] &= mk->bias[k] != -INFINITY;
    }
}

/* Row r's visible keys [lo, hi) of mk (its causal/window range, clipped). */
static void attn_mask_row_span(const attn_fwd_block *blk, int32_t r, const attn_mask_keys *mk, int64_t *lo,
                               int64_t *hi) {
    int64_t l = blk->row_lo[r] - mk->a, h = blk->row_hi[r] - mk->a;
    l = l < 0 ? 0 : l > mk->n ? mk->n : l;
    h = h < l ? l : h > mk->n ? mk->n : h;
    *lo = l, *hi = h;
}

/* Row r over keys [lo, hi) of mk with its own mask rows: vis[k] = 1 where key a + k is visible (kept, the
 * row's keep-mask, its additive value other than −inf), bias[k] its additive value (am_rows). */
static void attn_mask_row(const attn_problem *p, int32_t r, const attn_mask_keys *mk, int64_t lo, int64_t hi,
                          unsigned char *vis, float *bias) {
    for (int64_t k = lo; k < hi; k++)
        vis[k] = mk->kept[k];
    if (mk->em_rows) {
        const unsigned char *row = (const unsigned char *)p->opts.mask->data + mk->em_base[r];
        for (int64_t k = lo; k < hi; k++)
            vis[k] &= row[mk->jt[k] * mk->em_step] != 0;
    }
    if (mk->am_rows) {
        attn_mask_load(p->opts.additive_mask, mk->am_base[r], mk->am_step, mk->jt + lo, hi - lo, bias + lo);
        for (int64_t k = lo; k < hi; k++)
            vis[k] &= bias[k] != -INFINITY;
    }
}

int attn_mask_tile_span(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, int64_t *va,
                        int64_t *vb) {
    *va = a, *vb = b;
    if (!p->opts.key_padding_mask && !p->opts.mask && !p->opts.additive_mask)
        return 1;
    int64_t first = b, last = a - 1; /* the first and last key some row sees */
    for (int64_t c = a; c < b; c += ATTN_KV_TILE) {
        attn_mask_keys mk;
        attn_mask_keys_of(p, blk, c, b - c < ATTN_KV_TILE ? b - c : ATTN_KV_TILE, &mk);
        int64_t plo = -1, phi = -1; /* the previous row's range: rows of one range see the same keys */
        for (int32_t r = 0; r < blk->num_rows; r++) {
            int64_t lo, hi;
            attn_mask_row_span(blk, r, &mk, &lo, &hi);
            if (!mk.em_rows && !mk.am_rows && lo == plo && hi == phi)
                continue;
            plo = lo, phi = hi;
            int64_t f = lo, l = hi - 1; /* the row's first and last visible key in [lo, hi) */
            while (f < hi && !mk.kept[f])
                f++;
            if (f >= hi)
                continue;
            while (!mk.kept[l])
                l--;
            if (mk.em_rows || mk.am_rows) {
                unsigned char vis[ATTN_KV_TILE];
                float bias[ATTN_KV_TILE];
                attn_mask_row(p, r, &mk, f, l + 1, vis, bias);
                while (f <= l && !vis[f])
                    f++;
                if (f > l)
                    continue;
                while (!vis[l])
                    l--;
            }
            if (c + f < first)
                first = c + f;
            if (c + l > last)
                last = c + l;
        }
    }
    if (first > last)
        return 0;
    *va = a + (first - a) / 32 * 32; /* a multiple of 32 keys from a: key pairs and the opt-in tables' 32-key
                                        tile groups stay what they are on the whole tile */
    *vb = last + 1;
    return 1;
}

/* −inf on row r of score tile s outside keys [lo, hi) (tile-relative, n keys). */
static void attn_mask_outside(float *s, int32_t r, int64_t lo, int64_t hi, int64_t n) {
    for (int64_t k = 0; k < lo; k++)
        s[k * ATTN_QB + r] = -INFINITY;
    for (int64_t k = hi; k < n; k++)
        s[k * ATTN_QB + r] = -INFINITY;
}

void attn_mask_apply(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, float *s) {
    const int32_t nr = blk->num_rows;
    if (!p->opts.key_padding_mask && !p->opts.mask && !p->opts.additive_mask) {
        /* causal / window only: per row, −inf outside its visible range [row_lo, row_hi) */
        for (int32_t r = 0; r < nr; r++) {
            const int64_t lo = blk->row_lo[r] > a ? (blk->row_lo[r] < b ? blk->row_lo[r] : b) : a;
            const int64_t hi = blk->row_hi[r] < b ? (blk->row_hi[r] > lo ? blk->row_hi[r] : lo) : b;
            attn_mask_outside(s, r, lo - a, hi - a, b - a);
        }
        return;
    }
    for (int64_t c = a; c < b; c += ATTN_KV_TILE) {
        attn_mask_keys mk;
        attn_mask_keys_of(p, blk, c, b - c < ATTN_KV_TILE ? b - c : ATTN_KV_TILE, &mk);
        float *sc = s + (c - a) * ATTN_QB;
        /* per key (every row alike): hidden keys, the broadcast additive value; vectorised over the rows */
        for (int64_t k = 0; k < mk.n; k++) {
            float *x = sc + k * ATTN_QB;
            if (!mk.kept[k])
                for (int32_t r = 0; r < nr; r++)
                    x[r] = -INFINITY;
            else if (mk.am_key)
                for (int32_t r = 0; r < nr; r++)
                    x[r] = attn_mask_add_bias(x[r], mk.bias[k]);
        }
        /* per row: its causal/window range, then the mask rows of its own */
        for (int32_t r = 0; r < nr; r++) {
            int64_t lo, hi;
            attn_mask_row_span(blk, r, &mk, &lo, &hi);
            attn_mask_outside(sc, r, lo, hi, mk.n);
            if (!mk.em_rows && !mk.am_rows)
                continue;
            unsigned char vis[ATTN_KV_TILE];
            float bias[ATTN_KV_TILE];
            attn_mask_row(p, r, &mk, lo, hi, vis, bias);
            for (int64_t k = lo; k < hi; k++) {
                float *x = &sc[k * ATTN_QB + r];
                if (!vis[k])
                    *x = -INFINITY;
                else if (mk.am_rows)
                    *x = attn_mask_add_bias(*x, bias[k]);
            }
        }
    }
}
