/*
 * quant.h — internal low-precision formats of quantized diffusion attention: the small-float description shared by FP8 E4M3,
 * FP8 E5M2 and FP4 E2M1, saturating round-to-nearest-even encoding, exact decoding, MX (E8M0) shared
 * exponents, and the Hadamard sign vector. The public wrappers are in
 * attn_experimental.h (FP8 codecs: attn.h).
 */
#ifndef ATTN_QUANT_QUANT_H
#define ATTN_QUANT_QUANT_H

#include <stdint.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"

#define ATTN_MX_BLOCK 32 /* OCP MX v1.0 block size k */

/* A sign/exponent/mantissa small float without infinities in its finite code range. */
typedef struct attn_qfmt {
    int32_t exp_bits; /* 4 (E4M3), 5 (E5M2), 2 (E2M1)                               */
    int32_t man_bits; /* 3, 2, 1                                                     */
    int32_t bias;     /* 7, 15, 1                                                    */
    int32_t emax;     /* exponent of the largest normal: 8, 15, 2 (MX emax_elem)     */
    double max;       /* largest finite value: 448, 57344, 6                         */
    uint8_t nan_code; /* magnitude code of NaN (0x7F for FP8), 0 if none (E2M1)      */
} attn_qfmt;

/* The format of an element dtype (FP8_E4M3, FP8_E5M2, FP4_E2M1); NULL otherwise. */
const attn_qfmt *attn_qfmt_of(attn_dtype dtype);

/* Saturating RNE encode of x (sign in the top bit of the 1+exp+man-bit code). */
uint8_t attn_qfmt_encode(const attn_qfmt *f, float x);
/* Exact decode of a code (NaN code → NaN). */
float attn_qfmt_decode(const attn_qfmt *f, uint8_t code);

/* MX shared exponent of a block with max |v| = amax (finite): floor(log2 amax) − emax clamped to
 * [−127, 127]; amax == 0 → −127. */
int32_t attn_mx_shared_exp(const attn_qfmt *f, float amax);

/* Sign vector of the rotation: signs[i] = ±1 from MT19937(seed) word i (docs/DIFFUSION.md §5). */
void attn_hadamard_sign_vector(int64_t head_size, uint32_t seed, int8_t *signs);
/* One row x' = x·diag(s)·H/sqrt(d) via the fast Walsh–Hadamard transform in double (tmp: [d] doubles). */
void attn_hadamard_row(const float *src, const int8_t *signs, int64_t head_size, double *tmp, float *dst);

static inline int attn_is_pow2(int64_t x) {
    return x > 0 && (x & (x - 1)) == 0;
}


/* ---------------------------------------------------------------------------------------------
 * Fake quantization of attention operands (quantize then dequantize, float32 in place)
 * --------------------------------------------------------------------------------------------- */
typedef enum attn_qrole { ATTN_QROLE_Q = 0, ATTN_QROLE_K = 1, ATTN_QROLE_V = 2 } attn_qrole;

/* x: float32 [num_mats][seq][width] (one matrix per (batch, head)). Q/K: rotated along width if qp->rotate
 * (width a power of two), then FP8: one scale amax/max per block of q_block_rows (Q) / kv_block_rows (K, V)
 * rows of a matrix (amax 0 → scale 1); MX: blocks of 32 along width for Q/K, along seq for V.
 * Runs matrices in parallel on num_threads (each matrix's bits are independent of the thread count). */
void attn_quant_fake_tensor(float *x, int64_t num_mats, int64_t seq, int64_t width, attn_qrole role,
                            const attn_quant_params *qp, int32_t num_threads);

/* The element dtype of an attn_quant_format. */
attn_dtype attn_quant_elem_dtype(int32_t format);

/* ---------------------------------------------------------------------------------------------
 * Codes for the quantized-attention fast path (quant_codes.c)
 * --------------------------------------------------------------------------------------------- */
#include "attention/fwd_quant.h"

/* A source operand in the caller's layout: element (b, s, h, 0) at data + b·batch_stride + s·seq_stride +
 * h·head_stride (bytes), rows of F32/F16/BF16. */
typedef struct attn_qsrc {
    const char *data;
    attn_dtype dtype;
    int64_t batch_stride, seq_stride, head_stride;
} attn_qsrc;

/* Quantizes the three operands src[t] (t = Q, K, V: [batch][seq[t]][heads[t]][width[t]]) into out[t] (codes,
 * and fscale or escale as set; block_rows for FP8) with the rotation, scales and encodings of
 * attn_quant_fake_tensor for role t: decode(code)·scale is bitwise the value the fake quantization stores.
 * wide (FP8 and MXFP8, attn_fq_wide_table of qk): out[t].codes receives the wide bf16 operands of fwd_quant.h
 * instead of the codes (the scales as before).
 * All matrices of the three in one parallel loop on ex's threads and per-thread scratch slices; kern: the float
 * table (cvt_to_f32, cvt_to_fp8), qk: the quant table (rotation, maxima, E2M1 encoding, widening). */
void attn_quant_codes(const attn_qsrc src[3], int64_t batch, const int64_t heads[3], const int64_t seq[3],
                      const int64_t width[3], const attn_quant_params *qp, const struct attn_kernels *kern,
                      const struct attn_quant_kernels *qk, const attn_exec *ex, int wide, attn_qoperand *out[3]);

#endif
