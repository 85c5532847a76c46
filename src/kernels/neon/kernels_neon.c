/*
 * kernels_neon.c — the aarch64 Advanced SIMD kernel table. Hand-written kernels live one per
 * file in this folder: cvt_neon.c, qk_tile_neon.c, softmax_tile_neon.c, pv_tile_neon.c, tile_kv_neon.c
 * (K/V in their storage dtype); helpers in neon_common.h / neon_qk.h. Every entry keeps the FMA chains of
 * the AVX2 / AVX-512 tables (docs/ADDING_AN_ISA.md), so this table, like those, is lane invariant, and its
 * bits equal theirs for the same inputs. Selected when HWCAP reports FP + ASIMD (src/dispatch/dispatch.c).
 *
 * attn_kernels_neon_bf16 (compiled when the compiler takes +bf16: ATTN_HAVE_NEON_BF16): the same table,
 * name and bits, with the FEAT_BF16 conversion cvt_neon_bf16.c; dispatch gives it for "neon" (default or
 * ATTN_ISA=neon) on a CPU whose HWCAP2 reports BF16.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "kernels_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include "kernels/kernels.h"

const struct attn_kernels attn_kernels_neon = {
    .name = "neon",
    .cvt_to_f32 = attn_k_cvt_to_f32_neon,
    .cvt_from_f32 = attn_k_cvt_from_f32_neon,
    .cvt_to_fp8 = attn_k_cvt_to_fp8_generic,
    .qk_tile = attn_k_qk_tile_neon,
    .softmax_tile = attn_k_softmax_tile_neon,
    .pv_tile = attn_k_pv_tile_neon,
    .qk_tile_kv = attn_k_qk_tile_kv_neon,
    .pv_rows_kv = attn_k_pv_rows_kv_neon,
    .transpose = attn_k_transpose_generic,
    .scale_tile = attn_k_scale_tile_generic,
    .fp8_kv = 1,
};

#if defined(ATTN_HAVE_NEON_BF16)
const struct attn_kernels attn_kernels_neon_bf16 = {
    .name = "neon",
    .cvt_to_f32 = attn_k_cvt_to_f32_neon,
    .cvt_from_f32 = attn_k_cvt_from_f32_neon_bf16,
    .cvt_to_fp8 = attn_k_cvt_to_fp8_generic,
    .qk_tile = attn_k_qk_tile_neon,
    .softmax_tile = attn_k_softmax_tile_neon,
    .pv_tile = attn_k_pv_tile_neon,
    .qk_tile_kv = attn_k_qk_tile_kv_neon,
    .pv_rows_kv = attn_k_pv_rows_kv_neon,
    .transpose = attn_k_transpose_generic,
    .scale_tile = attn_k_scale_tile_generic,
    .fp8_kv = 1,
};
#endif
