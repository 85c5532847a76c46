/*
 * kernels_avx512.c — the AVX-512 (F/BW/VL/DQ) kernel table. Hand-written kernels (docs/KERNELS.md
 * §2–§4) live one per file in this folder: cvt_avx512.c, qk_tile_avx512.c, softmax_tile_avx512.c,
 * pv_tile_avx512.c, tile_kv_avx512.c (K/V in their storage dtype). An entry that has no intrinsic version
 * yet would take the generic body compiled with this folder's flags (k_* from generic/tile_kernels.h);
 * today every entry is hand-written. attn_kernels_avx512_vbmi (compiled when the compiler takes -mavx512vbmi:
 * ATTN_HAVE_AVX512_VBMI) is the same table, name and bits with the decode entries of tile_kv_avx512_vbmi.c.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "kernels_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include "kernels/kernels.h"

/* The table with the decode entries (qk_tile_kv / pv_rows_kv) of tile_kv_avx512.c compiled as KV. */
#define ATTN_K512_TABLE(KV)                                                                                            \
    {                                                                                                                  \
        .name = "avx512", .cvt_to_f32 = attn_k_cvt_to_f32_avx512, .cvt_from_f32 = attn_k_cvt_from_f32_avx512,          \
        .cvt_to_fp8 = attn_k_cvt_to_fp8_avx512, .qk_tile = attn_k_qk_tile_avx512,                                      \
        .softmax_tile = attn_k_softmax_tile_avx512, .pv_tile = attn_k_pv_tile_avx512,                                  \
        .qk_tile_kv = attn_k_qk_tile_kv_##KV, .pv_rows_kv = attn_k_pv_rows_kv_##KV,                                    \
        .transpose = attn_k_transpose_avx512, .scale_tile = attn_k_scale_tile_avx512, .fp8_kv = 1,                     \
        .qk_tile_kv_pf = attn_k_qk_tile_kv_pf_##KV, .pv_rows_kv_pf = attn_k_pv_rows_kv_pf_##KV,                        \
        .qk_cols_kv = attn_k_qk_cols_kv_avx512,                                                                        \
    }

const struct attn_kernels attn_kernels_avx512 = ATTN_K512_TABLE(avx512);

#if defined(ATTN_HAVE_AVX512_VBMI)
/* The vbmi variant: the decode entries of tile_kv_avx512_vbmi.c (fp8 widening through VPERMI2B byte tables, the
 * same bits); dispatch hands it out as "avx512" where CPUID reports AVX512_VBMI. */
const struct attn_kernels attn_kernels_avx512_vbmi = ATTN_K512_TABLE(avx512_vbmi);
#endif
