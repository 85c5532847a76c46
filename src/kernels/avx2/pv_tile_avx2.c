/*
 * pv_tile_avx2.c — Oᵀ += P·V for one (query block × kv tile), query rows in ymm lanes
 * (docs/KERNELS.md §2). Lanes in groups of 16 rows with register tiles of 6 output columns × 2 ymm,
 * or 8 columns × 1 ymm for a group of ≤ 8 rows; 4/1-column tails. V rows are read in place as broadcasts.
 *
 * Lane invariance: every lane computes o[d] = fma(v[k][d], p[k], o[d]) for k = 0, 1, … ascending from the
 * o_t it was given, whatever the group or panel shape.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "pv_tile_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include "kernels/kernels.h"

/* o[d0 + b][8·v + lane] += Σ_k v_rows[k][d0 + b]·p[k][8·v + lane] for b < NB columns, v < NV ymm. */
static inline __attribute__((always_inline)) void k256_pv_panel(const float *restrict p, int64_t num_keys,
                                                                const float *const *v_rows, int64_t d0,
                                                                float *restrict o_t, const int NB,
                                                                const int NV) {
    __m256 acc[8][2];
    float *o = o_t + d0 * ATTN_QB;
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm256_loadu_ps(o + b * ATTN_QB + 8 * v);
    for (int64_t k = 0; k < num_keys; k++) {
        const float *vr = v_rows[k] + d0;
        __m256 pk[2];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) pk[v] = _mm256_loadu_ps(p + k * ATTN_QB + 8 * v);
        _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) {
            const __m256 x = _mm256_broadcast_ss(vr + b);
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm256_fmadd_ps(x, pk[v], acc[b][v]);
        }
    }
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) _mm256_storeu_ps(o + b * ATTN_QB + 8 * v, acc[b][v]);
}

void attn_k_pv_tile_avx2(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                         int64_t head_size_v, float *o_t) {
    for (int64_t r0 = 0; r0 < num_rows; r0 += 16) {
        const float *pr = p + r0;
        float *o = o_t + r0;
        int64_t d = 0;
        if (num_rows - r0 > 8) {
            for (; d + 6 <= head_size_v; d += 6) k256_pv_panel(pr, num_keys, v_rows, d, o, 6, 2);
            for (; d + 4 <= head_size_v; d += 4) k256_pv_panel(pr, num_keys, v_rows, d, o, 4, 2);
            for (; d < head_size_v; d++) k256_pv_panel(pr, num_keys, v_rows, d, o, 1, 2);
        } else {
            for (; d + 8 <= head_size_v; d += 8) k256_pv_panel(pr, num_keys, v_rows, d, o, 8, 1);
            for (; d + 4 <= head_size_v; d += 4) k256_pv_panel(pr, num_keys, v_rows, d, o, 4, 1);
            for (; d < head_size_v; d++) k256_pv_panel(pr, num_keys, v_rows, d, o, 1, 1);
        }
    }
}
