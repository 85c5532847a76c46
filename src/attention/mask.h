/*
 * mask.h — the driver's visibility rules (docs/SEMANTICS.md §2): the causal/window key
 * range of a row, whether a tile needs per-element masking, and the per-element mask of a score tile.
 * Adding a mask feature touches this file (and src/ref), never the kernels (docs/CONTRIBUTING.md §1).
 */
#ifndef ATTN_ATTENTION_MASK_H
#define ATTN_ATTENTION_MASK_H

#include "attention/fwd.h"

/* Global position of local query row i under piecewise query_ranges (docs/DIFFUSION.md §2). */
int64_t attn_mask_piecewise_pos(const attn_opts *o, int64_t i);

/* Absolute position of query row i: bottom-right Sk − Sq + i, or i for top-left causal; piecewise
 * attention maps i through its query_ranges (none: bottom-right per sequence, the paged rows of
 * attn_forward_paged_piecewise). */
static inline int64_t attn_mask_query_pos(const attn_problem *p, const attn_seq_view *s, int64_t i) {
    if (p->opts.piecewise && p->opts.num_query_ranges > 0) return attn_mask_piecewise_pos(&p->opts, i);
    return p->opts.causal == ATTN_CAUSAL_TOP_LEFT ? i : s->seq_k - s->seq_q + i;
}

/* Piecewise key limit of a query at global position pos: e if pos lies in a span [a, e), else pos + 1
 * (keys [0, limit) are visible). Spans are sorted and disjoint: binary search. */
int64_t attn_mask_piecewise_limit(const attn_opts *o, int64_t pos);

/* Causal/window visible key range [lo, hi) of a row at position pos (lo >= hi when empty). */
void attn_mask_row_range(const attn_problem *p, int64_t pos, int64_t seq_k, int64_t *lo, int64_t *hi);

/* 1 if keys [a, b) need no per-element masking for any row of the block: never with a keep-mask, key
 * padding or an additive mask, so such tiles always go through attn_mask_apply and count as hiding keys
 * (the driver's safe P·V, docs/SEMANTICS.md §7). */
int attn_mask_tile_is_full(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b);

/* The keys [*va, *vb) of [a, b) that some row of the block may see; 0 (none) when every (row, key) is hidden:
 * outside the row's causal/window range, a padded key, a keep-mask 0 or an additive −inf. Only a key padding,
 * keep or additive mask narrows the span (without one it is [a, b) and the result 1); *va stays a multiple of 32
 * keys from a (the key pairs of avx512bf16 and the 32-key groups of amx's tile products are those of [a, b)). Keys
 * outside the span are hidden from every row, and a hidden key adds +0 to l and P·V and never moves m (docs/KERNELS.md
 * §4), so the driver skips them: a tile with nothing visible is not read or computed, and a tile's Q·Kᵀ, softmax and
 * P·V run on its span. */
int attn_mask_tile_span(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, int64_t *va,
                        int64_t *vb);

/* Element offset of (b, h, i, j) in a mask broadcast to [B, H, Sq, Sk]: the view's ndim (1..4) is
 * right-aligned to those four dimensions (NumPy / torch SDPA broadcasting) and a size-1 dimension reads
 * index 0. i and j are the masks' coordinates (attn_seq_q_row / attn_seq_k_token of compacted rows). */
static inline int64_t attn_mask_offset(const attn_tensor *t, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t idx[4] = {b, h, i, j};
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        const int32_t a = 4 - t->ndim + d;
        if (t->shape[d] != 1) off += idx[a] * t->strides[d];
    }
    return off;
}

/* The mask step of the logits (after soft-cap and ALiBi, logits in natural units), for keys [a, b):
 * s[k][r] = −inf for every (row r, key a + k) hidden by causal/window, key padding or the keep-mask, or by an
 * additive-mask value of −inf; every other score gains the additive value (a sum that overflows saturates at −FLT_MAX,
 * never −inf, so a large negative bias stays a finite logit). */
void attn_mask_apply(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, float *s);

#endif
