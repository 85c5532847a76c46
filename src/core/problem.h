/*
 * problem.h — the internal, validated description of one attention call, shared by the fast driver
 * (src/attention) and the oracle (src/ref). The API layer builds it after validation; both consumers walk
 * the same sequences, so dense, packed (varlen) and paged calls reach one code path each.
 * Strides here are in BYTES (q/k/v/out) or float elements (lse); they are already validated.
 */
#ifndef ATTN_CORE_PROBLEM_H
#define ATTN_CORE_PROBLEM_H

#include <stdint.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h" /* attn_span, attn_query_range, attn_quant_params */

/* Options resolved from attn_params (scale filled in, windows widened to int64). */
typedef struct attn_opts {
    float softmax_scale;        /* resolved: never 0                                            */
    int32_t causal;             /* attn_causal                                                  */
    int64_t window_left;        /* −1 = unbounded                                               */
    int64_t window_right;       /* −1 = unbounded                                               */
    float softcap;              /* 0 = off                                                      */
    const float *alibi_slopes;  /* [num_heads] or NULL                                          */
    const float *sinks;         /* [num_heads] or NULL                                          */
    const attn_tensor *mask;    /* validated keep-mask, ndim 1..4, right-aligned to [B, H, Sq, Sk],
                                   every dimension 1 (broadcast) or full                          */
    const attn_tensor *key_padding_mask; /* validated [B, Sk] or NULL                           */
    const attn_tensor *additive_mask;    /* validated f32/f16/bf16 bias added to the logits (natural
                                            units), broadcast like `mask`; NULL = none */
    /* Piecewise attention (docs/DIFFUSION.md §2): num_spans >= 0 turns it on when piecewise != 0.
     * A query at global position p sees keys j < e if p lies in a span [a, e), else j <= p. */
    int32_t piecewise;                   /* 0 = off                                              */
    const attn_span *spans;              /* [num_spans] sorted, non-overlapping, validated       */
    int64_t num_spans;
    const attn_query_range *query_ranges; /* [num_query_ranges] contiguous over [0, Sq); 0 ranges =
                                             each sequence's last Sq positions (paged piecewise) */
    int64_t num_query_ranges;
    /* fp8 KV: a K/V element of an FP8 kv_dtype is decode(bits)·k_scale / ·v_scale. Read only when
     * kv_dtype is FP8_E4M3 / FP8_E5M2 (validated finite > 0 then); 1 from attn_opts_resolve. */
    float k_scale, v_scale;
    /* Per-head fp8 scales [num_kv_heads] or NULL (attn_params.k_scales / v_scales): when set they replace the
     * scalar for kv head g (validated finite > 0); NULL from attn_opts_resolve. */
    const float *k_scales, *v_scales;
} attn_opts;

/* The fp8 scale of kv head g: the per-head entry when set, else the scalar. */
static inline float attn_opts_k_scale(const attn_opts *o, int64_t g) { return o->k_scales ? o->k_scales[g] : o->k_scale; }
static inline float attn_opts_v_scale(const attn_opts *o, int64_t g) { return o->v_scales ? o->v_scales[g] : o->v_scale; }

/* One sequence of the call: seq_q query rows attending over seq_k keys. */
typedef struct attn_seq_view {
    int64_t batch_idx;          /* index into the masks' batch dimension                        */
    int64_t seq_q;              /* query rows                                                   */
    int64_t seq_k;              /* keys                                                         */
    const char *q;              /* row i, head h at q + i*q_row_stride + h*q_head_stride        */
    int64_t q_row_stride, q_head_stride;
    const char *k;              /* contiguous: key j, kv head g at k + j*k_row_stride + g*k_head_stride */
    const char *v;
    int64_t k_row_stride, k_head_stride, v_row_stride, v_head_stride;
    int64_t k_dim_stride;       /* bytes between head dimensions of a K row; 0 = the element size (contiguous
                                   rows). Else a key cache stored by dimension (attn_paged_attention_kv):
                                   dimension d of key j at attn_seq_k_row(s, j, g) + d·k_dim_stride        */
    const int32_t *block_table; /* paged: NULL = contiguous; else key j lives in block
                                   block_table[j / block_size] at row j % block_size            */
    int64_t block_size;
    int64_t k_block_stride, v_block_stride;
    char *out;                  /* row i, head h at out + i*out_row_stride + h*out_head_stride  */
    int64_t out_row_stride, out_head_stride;
    float *lse;                 /* NULL or element lse[i*lse_row_stride + h*lse_head_stride]    */
    int64_t lse_row_stride, lse_head_stride;
    const int32_t *q_rows;      /* NULL, or [seq_q]: compacted query row i reads q row, writes out
                                   and LSE row q_rows[i] (self-attention unpad → pad)   */
    const int32_t *k_tokens;    /* NULL, or [seq_k]: compacted key j is token k_tokens[j] of the
                                   masks' key dimension (self-attention unpad; with q_rows)      */
} attn_seq_view;

/* Index of compacted key j in the masks' key dimension (identity unless k_tokens is set). */
static inline int64_t attn_seq_k_token(const attn_seq_view *s, int64_t j) {
    return s->k_tokens ? (int64_t)s->k_tokens[j] : j;
}

/* Physical q/out/LSE row of compacted query row i (identity unless q_rows is set). */
static inline int64_t attn_seq_q_row(const attn_seq_view *s, int64_t i) {
    return s->q_rows ? (int64_t)s->q_rows[i] : i;
}

typedef struct attn_problem attn_problem;
typedef void (*attn_get_seq_fn)(const attn_problem *p, int64_t idx, attn_seq_view *out);

struct attn_problem {
    int64_t num_heads;          /* query heads                                                  */
    int64_t num_kv_heads;       /* key/value heads (divides num_heads)                          */
    int64_t head_size;          /* query/key head size, 1..256                                  */
    int64_t head_size_v;        /* value head size, 1..256                                      */
    attn_dtype q_dtype, kv_dtype, out_dtype;
    attn_opts opts;
    int64_t num_seqs;
    int64_t max_seq_q;          /* max over sequences (for work partitioning)                   */
    attn_get_seq_fn get_seq;    /* fills the view of sequence idx in [0, num_seqs)              */
    const void *user[8];        /* get_seq's data (tensors, cu_seqlens, plan arrays)            */
};

/* Byte address of key j (kv head g) of a sequence: contiguous or through the block table. */
static inline const char *attn_seq_k_row(const attn_seq_view *s, int64_t j, int64_t g) {
    if (s->block_table) {
        int64_t blk = s->block_table[j / s->block_size];
        return s->k + blk * s->k_block_stride + (j % s->block_size) * s->k_row_stride + g * s->k_head_stride;
    }
    return s->k + j * s->k_row_stride + g * s->k_head_stride;
}
static inline const char *attn_seq_v_row(const attn_seq_view *s, int64_t j, int64_t g) {
    if (s->block_table) {
        int64_t blk = s->block_table[j / s->block_size];
        return s->v + blk * s->v_block_stride + (j % s->block_size) * s->v_row_stride + g * s->v_head_stride;
    }
    return s->v + j * s->v_row_stride + g * s->v_head_stride;
}

#endif
