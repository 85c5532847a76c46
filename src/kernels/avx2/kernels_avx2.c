/*
 * kernels_avx2.c — the AVX2+FMA+F16C kernel table. Hand-written kernels (docs/KERNELS.md §2–§4,
 * 256-bit vectors, 16 registers) live one per file in this folder: cvt_avx2.c, qk_tile_avx2.c,
 * softmax_tile_avx2.c, pv_tile_avx2.c, tile_kv_avx2.c (K/V in their storage dtype). (The generic bodies
 * compiled for AVX2 were not lane-invariant: the compiler vectorised W = 8 and W = 32 differently.)
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include "kernels/kernels.h"

const struct attn_kernels attn_kernels_avx2 = {
    .name = "avx2",
    .cvt_to_f32 = attn_k_cvt_to_f32_avx2,
    .cvt_from_f32 = attn_k_cvt_from_f32_avx2,
    .cvt_to_fp8 = attn_k_cvt_to_fp8_avx2,
    .qk_tile = attn_k_qk_tile_avx2,
    .softmax_tile = attn_k_softmax_tile_avx2,
    .pv_tile = attn_k_pv_tile_avx2,
    .qk_tile_kv = attn_k_qk_tile_kv_avx2,
    .pv_rows_kv = attn_k_pv_rows_kv_avx2,
    .transpose = attn_k_transpose_avx2,
    .scale_tile = attn_k_scale_tile_avx2,
    .fp8_kv = 1,
    .qk_tile_kv_pf = attn_k_qk_tile_kv_pf_avx2,
    .pv_rows_kv_pf = attn_k_pv_rows_kv_pf_avx2,
};

/* The quantized-attention table on AVX2 (f32 staging: the driver runs the context's float kernels on the widened
 * rows; src/dispatch/dispatch.c attn_dispatch_quant, docs/DIFFUSION.md §5). */
const struct attn_quant_kernels attn_quant_kernels_avx2 = {
    .name = "avx2",
    .dequant_row = attn_k_dequant_row_avx2,
    .hadamard_row = attn_k_hadamard_row_avx2,
    .absmax_bits = attn_k_absmax_bits_avx2,
    .absmax_cols = attn_k_absmax_cols_avx2,
    .encode_e2m1 = attn_k_encode_e2m1_avx2,
    .mx_scale_row = attn_k_mx_scale_row_avx2,
};
