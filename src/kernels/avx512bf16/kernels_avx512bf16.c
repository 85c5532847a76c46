/*
 * kernels_avx512bf16.c — the opt-in "avx512bf16" kernel table: the avx512 table with the bf16 K/V
 * decode entries (qk_tile_kv, pv_rows_kv) on VDPBF16PS (tile_kv_avx512bf16.c). Never chosen by default (it is
 * not on the pinned chains: q and P are rounded to bf16); selected by name only (ATTN_ISA=avx512bf16 or
 * attn_ctx_set_isa), listed by attn_isa_opt_in_name. Tolerance and contract: docs/SEMANTICS.md.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512BF16__)
#error "kernels_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include "kernels/kernels.h"

const struct attn_kernels attn_kernels_avx512bf16 = {
    .name = "avx512bf16",
    .cvt_to_f32 = attn_k_cvt_to_f32_avx512,
    .cvt_from_f32 = attn_k_cvt_from_f32_avx512,
    .cvt_to_fp8 = attn_k_cvt_to_fp8_avx512,
    .qk_tile = attn_k_qk_tile_avx512,
    .softmax_tile = attn_k_softmax_tile_avx512,
    .pv_tile = attn_k_pv_tile_avx512,
    .qk_tile_kv = attn_k_qk_tile_kv_avx512bf16,
    .pv_rows_kv = attn_k_pv_rows_kv_avx512bf16,
    .transpose = attn_k_transpose_avx512,
    .scale_tile = attn_k_scale_tile_avx512,
    .qk_prep_kv = attn_k_qk_prep_kv_avx512bf16,
};

/* The quantized-attention table where the CPU has AVX512-BF16 (chosen by CPU features, not by name:
 * src/dispatch/dispatch.c attn_dispatch_quant; contract in docs/DIFFUSION.md §5): MXFP4 Q·Kᵀ on VPDPBUSD where
 * the CPU also has AVX512-VNNI, on VDPBF16PS otherwise. */
#define ATTN_QUANT_AVX512BF16_ENTRIES                                                                                  \
    .name = "avx512bf16", ATTN_QUANT_AVX512BF16_SHARED, .qk_bf16 = attn_k_qk_bf16_avx512bf16,                          \
    .pv_pairs_bf16 = attn_k_pv_pairs_bf16_avx512bf16

const struct attn_quant_kernels attn_quant_kernels_avx512bf16 = {
    ATTN_QUANT_AVX512BF16_ENTRIES,
    .qk_e2m1_i8 = attn_k_qk_e2m1_i8_avx512bf16,
    .e2m1_bytes = attn_k_e2m1_bytes_avx512bf16,
    .softmax_quads_u8 = attn_k_softmax_quads_u8_avx512bf16,
    .v_quads_e2m1 = attn_k_v_quads_e2m1_avx512bf16,
    .pv_e2m1_i8 = attn_k_pv_e2m1_i8_avx512bf16,
};

const struct attn_quant_kernels attn_quant_kernels_avx512bf16_novnni = {ATTN_QUANT_AVX512BF16_ENTRIES};
