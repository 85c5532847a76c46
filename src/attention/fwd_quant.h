/*
 * fwd_quant.h — the quantized-attention driver (attn_forward_quant's fast path, docs/DIFFUSION.md §5): Q, K and
 * V as 8/4-bit codes with their scales (filled by src/quant/quant_codes.c), attention per (batch, kv head, up to
 * eight query blocks) with the online softmax of fwd.c, each K/V tile widened once per item by the quant kernel
 * table (kernels.h, struct attn_quant_kernels). Non-causal, unmasked problems only (the API refuses the rest).
 */
#ifndef ATTN_ATTENTION_FWD_QUANT_H
#define ATTN_ATTENTION_FWD_QUANT_H

#include <stdint.h>

#include "attention/fwd.h"
#include "core/dtype.h" /* attn_e8m0_factor */

/* One quantized operand, BNSD order: matrix m = batch·heads + head. */
typedef struct attn_qoperand {
    uint8_t *codes;     /* [num_mats][seq][row_bytes]: one byte per FP8 element, two E2M1 per byte (2i low)  */
    int64_t row_bytes;  /* width (FP8) or (width + 1) / 2 (FP4)                                            */
    float *fscale;      /* FP8: [num_mats][ceil(seq / block_rows)] scale (amax / max) per row block; MX: NULL */
    int64_t block_rows; /* FP8 rows per scale block                                                         */
    uint8_t *escale;    /* MX E8M0: Q/K [num_mats][seq][ceil(width / 32)]; V [num_mats][ceil(seq / 32)][width] */
} attn_qoperand;

typedef struct attn_qattn {
    attn_dtype elem; /* FP8_E4M3, FP8_E5M2 or FP4_E2M1                                       */
    int32_t mx;      /* 1: E8M0 scales (MXFP8 / MXFP4), 0: float block scales             */
    int32_t wide;    /* 1: `codes` holds the bf16 operands of a bf16 table (attn_fq_wide_*)  */
    attn_qoperand q, k, v;
    int64_t seq_q, seq_k; /* every batch row has these lengths (dense)                         */
} attn_qattn;

/* The padded row stride (elements) of a staged K/V tile: never a multiple of 1 KiB (fwd.c attn_fwd_rows). */
static inline int64_t attn_fq_tile_row(int64_t width) {
    int64_t t = ((width + 15) & ~(int64_t)15) + 16;
    if (t % 256 == 0)
        t += 16;
    return t;
}

/* Wide operands (qa->wide): for FP8 elements (block scales or MXFP8) on a table with fp8_bf16_row, the
 * quantization writes the bf16 operands of the bf16 kernels — bf16(decode(code)), unscaled for FP8 block scales,
 * times the MX factor for MXFP8, as the driver would widen the codes — instead of the codes, so no work item
 * widens a K/V tile and no code is formed. Q and K:
 * [num_mats][seq][attn_fq_wide_row(width)] bf16 (a zero pad element for odd width); V:
 * [num_mats][ceil(seq / 2)][width] 32-bit words, key 2j in the low and 2j + 1 in the high half (0 past the end).
 * The same values as the codes path, so the same bits. Below: whether a table runs them for elem, the row stride
 * in elements, the byte sizes of a row, and the addresses every writer and reader of the layout goes through. */
static inline int attn_fq_wide_table(const struct attn_quant_kernels *qk, attn_dtype elem) {
    return qk != NULL && qk->fp8_bf16_row != NULL && qk->qk_bf16 != NULL &&
           (elem == ATTN_DTYPE_FP8_E4M3 || elem == ATTN_DTYPE_FP8_E5M2);
}
static inline int64_t attn_fq_wide_row(int64_t width) {
    return (width + 1) & ~(int64_t)1;
}
static inline int64_t attn_fq_wide_qk_row_bytes(int64_t width) {
    return attn_fq_wide_row(width) * 2;
}
static inline int64_t attn_fq_wide_v_pair_bytes(int64_t width) {
    return width * 4;
}
/* Q/K: the bf16 row r of matrix mat of operand o (seq rows of width per matrix) */
static inline uint16_t *attn_fq_wide_qk_at(const attn_qoperand *o, int64_t mat, int64_t seq, int64_t r, int64_t width) {
    return (uint16_t *)(void *)o->codes + (mat * seq + r) * attn_fq_wide_row(width);
}
/* V: the row of key pairs holding key `key` of matrix mat */
static inline uint32_t *attn_fq_wide_pair_at(const attn_qoperand *o, int64_t mat, int64_t seq, int64_t key,
                                             int64_t width) {
    return (uint32_t *)(void *)o->codes + (mat * ((seq + 1) / 2) + key / 2) * width;
}

/* Runs problem p (its q/k/v views unused; out, LSE, heads, sizes, softmax_scale, soft-cap, ALiBi, sinks read) on
 * the codes in qa with quant table qk, the float table ex->kern (f32-staging quant tables), ex's threads and
 * per-thread scratch. Bitwise the same for any thread count. */
void attn_fwd_quant_run(const attn_problem *p, const attn_qattn *qa, const struct attn_quant_kernels *qk,
                        const attn_exec *ex);

#endif
