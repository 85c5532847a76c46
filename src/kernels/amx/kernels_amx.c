/*
 * kernels_amx.c — the opt-in "amx" kernel table: the prefill kernels qk_tile / pv_tile and the few-row Q·Kᵀ
 * qk_tile_kv on AMX tiles (tile_amx.c) for bf16 K/V, the avx512 table's P·V of few rows (on the cores that have
 * AMX, VDPBF16PS runs at half the FMA rate, so avx512bf16's P·V would be slower and round P) and its few-row Q·Kᵀ
 * of f32 / f16 / fp8 K, avx512bf16's q form (qk_prep_kv: the bf16 pairs TDPBF16PS reads) and its fallbacks. Like
 * avx512, a vbmi variant (the avx512 entries of tile_kv_avx512_vbmi.c) is handed out where the CPU has VBMI. Selected
 * by name only (ATTN_ISA=amx, attn_ctx_set_isa), usable where CPUID reports AMX-TILE and AMX-BF16, XCR0 enables the
 * tile state and Linux grants the tile-data permission (arch_prctl ARCH_REQ_XCOMP_PERM; src/dispatch/cpu_features.c).
 */
/* GCC spells the feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__ */
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__)) || \
    !defined(__AVX512BF16__)
#error "kernels_amx.c must be compiled with -mamx-tile -mamx-bf16 -mavx512bf16"
#endif
#include "kernels/kernels.h"

/* The table with the few-row decode entries QK (Q·Kᵀ) and PV (P·V) and their prefetching forms QK_PF, PV_PF. */
#define ATTN_AMX_TABLE(QK, QK_PF, PV, PV_PF)                                                                           \
    {                                                                                                                  \
        .name = "amx", .cvt_to_f32 = attn_k_cvt_to_f32_avx512, .cvt_from_f32 = attn_k_cvt_from_f32_avx512,             \
        .cvt_to_fp8 = attn_k_cvt_to_fp8_avx512, .qk_tile = attn_k_qk_tile_amx,                                         \
        .softmax_tile = attn_k_softmax_tile_avx512, .pv_tile = attn_k_pv_tile_amx, .qk_tile_kv = QK, .pv_rows_kv = PV, \
        .qk_tile_kv_pf = QK_PF, .pv_rows_kv_pf = PV_PF, .transpose = attn_k_transpose_avx512,                          \
        .scale_tile = attn_k_scale_tile_avx512, .qk_prep_kv = attn_k_qk_prep_kv_avx512bf16,                            \
        .kv_tile_prep = attn_k_kv_tile_prep_amx, .qk_tile_prep = attn_k_qk_tile_prep_amx,                              \
        .pv_tile_prep = attn_k_pv_tile_prep_amx,                                                                       \
        .fp8_kv = 1, /* fp8 few-row blocks: avx512's in-place kernels (through the fallbacks) */                       \
    }

const struct attn_kernels attn_kernels_amx = ATTN_AMX_TABLE(attn_k_qk_tile_kv_amx, attn_k_qk_tile_kv_pf_amx,
                                                            attn_k_pv_rows_kv_avx512, attn_k_pv_rows_kv_pf_avx512);

#if defined(ATTN_HAVE_AVX512_VBMI)
/* The vbmi variant (dispatch hands it out as "amx" where CPUID reports AVX512_VBMI): f32 / f16 / fp8 K and every V
 * through the avx512 table's vbmi entries (fp8 widened through VPERMI2B byte tables), the same bits as the plain
 * table; bf16 K on the tiles as there. */
static void kamx_qk_tile_kv_pf_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                    attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf) {
    if (kv_dtype == ATTN_DTYPE_BF16)
        attn_k_qk_tile_kv_pf_amx(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf);
    else
        attn_k_qk_tile_kv_pf_avx512_vbmi(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf);
}

static void kamx_qk_tile_kv_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                 attn_dtype kv_dtype, int64_t num_keys, float *s) {
    attn_kv_prefetch none = {0};
    kamx_qk_tile_kv_pf_vbmi(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, &none);
}

const struct attn_kernels attn_kernels_amx_vbmi = ATTN_AMX_TABLE(
    kamx_qk_tile_kv_vbmi, kamx_qk_tile_kv_pf_vbmi, attn_k_pv_rows_kv_avx512_vbmi, attn_k_pv_rows_kv_pf_avx512_vbmi);
#endif

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
