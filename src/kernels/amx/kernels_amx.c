/*
 * kernels_amx.c — the opt-in "amx" kernel table: the prefill kernels qk_tile / pv_tile and the few-row Q·Kᵀ
 * qk_tile_kv on AMX tiles (tile_amx.c) for bf16 K/V, the avx512 table's P·V of few rows (on the cores that have
 * AMX, VDPBF16PS runs at half the FMA rate, so avx512bf16's P·V would be slower and round P), avx512bf16's q form
 * (qk_prep_kv: the bf16 pairs TDPBF16PS reads) and its fallbacks. Selected by name only (ATTN_ISA=amx,
 * attn_ctx_set_isa), usable where CPUID reports AMX-TILE and AMX-BF16, XCR0 enables the tile state and Linux
 * grants the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM; src/dispatch/cpu_features.c).
 */
/* GCC spells the feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__ */
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__)) || \
    !defined(__AVX512BF16__)
#error "kernels_amx.c must be compiled with -mamx-tile -mamx-bf16 -mavx512bf16"
#endif
#include "kernels/kernels.h"

const struct attn_kernels attn_kernels_amx = {
    .name = "amx",
    .cvt_to_f32 = attn_k_cvt_to_f32_avx512,
    .cvt_from_f32 = attn_k_cvt_from_f32_avx512,
    .cvt_to_fp8 = attn_k_cvt_to_fp8_avx512,
    .qk_tile = attn_k_qk_tile_amx,
    .softmax_tile = attn_k_softmax_tile_avx512,
    .pv_tile = attn_k_pv_tile_amx,
    .qk_tile_kv = attn_k_qk_tile_kv_amx,
    .pv_rows_kv = attn_k_pv_rows_kv_avx512,
    .qk_tile_kv_pf = attn_k_qk_tile_kv_pf_amx,
    .pv_rows_kv_pf = attn_k_pv_rows_kv_pf_avx512,
    .transpose = attn_k_transpose_avx512,
    .scale_tile = attn_k_scale_tile_avx512,
    .qk_prep_kv = attn_k_qk_prep_kv_avx512bf16,
    .kv_tile_prep = attn_k_kv_tile_prep_amx,
    .qk_tile_prep = attn_k_qk_tile_prep_amx,
    .pv_tile_prep = attn_k_pv_tile_prep_amx,
    .fp8_kv = 1, /* fp8 few-row blocks: avx512's in-place kernels (through the fallbacks) */
};

/* The quantized-attention table where the CPU has AMX (chosen by CPU features like avx512bf16's, src/dispatch/
 * dispatch.c attn_dispatch_quant): avx512bf16's entries, with the bf16 path's Q·Kᵀ and P·V on TDPBF16PS
 * (quant_amx.c; P·V on the pairs transposed once per kv tile, v_pairs_t). On the cores that have AMX, VDPBF16PS runs at
 * half the FMA rate; a tile product does 16 × 16 × 32 multiply-adds. Contract (tolerance against the oracle):
 * docs/DIFFUSION.md §5. */
const struct attn_quant_kernels attn_quant_kernels_amx = {
    .name = "amx",
    ATTN_QUANT_AVX512BF16_SHARED,
    .qk_bf16 = attn_k_qk_bf16_amx,
    .pv_pairs_bf16 = attn_k_pv_pairs_bf16_avx512bf16, /* the shapes v_pairs_t does not take */
    .v_pairs_t = attn_k_v_pairs_t_amx,
    .pv_pairs_t_bf16 = attn_k_pv_pairs_t_bf16_amx,
};
