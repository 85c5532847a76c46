/*
 * qk_tile_avx2.c — S = Q·Kᵀ for one (query block × kv tile), query rows in ymm lanes
 * (docs/KERNELS.md §2). 16 ymm registers: lanes are done in groups of 16 rows with register tiles
 * of 6 keys × 2 ymm (12 accumulators), or 8 keys × 1 ymm for a group of ≤ 8 rows; 4/1-key tails.
 * K rows are read in place as scalar broadcasts.
 *
 * Lane invariance: every lane computes s = fma(k[d], q[d], s) for d = 0, 1, … from s = 0, whatever the
 * group, the panel shape or the key's position in it (no reduction trees over d).
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "qk_tile_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include "kernels/kernels.h"

/* s[b][8·v + lane] = Σ_d k_rows[b][d]·q_t[d][8·v + lane] for b < NB keys, v < NV ymm (lane offsets
 * already applied to q_t and s). */
static inline __attribute__((always_inline)) void k256_qk_panel(const float *restrict q_t, int64_t head_size,
                                                                const float *const *k_rows,
                                                                float *restrict s, const int NB,
                                                                const int NV) {
    __m256 acc[8][2];
    const float *kp[8];
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) {
        kp[b] = k_rows[b];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm256_setzero_ps();
    }
    for (int64_t d = 0; d < head_size; d++) {
        __m256 q[2];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) q[v] = _mm256_loadu_ps(q_t + d * ATTN_QB + 8 * v);
        _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) {
            const __m256 x = _mm256_broadcast_ss(kp[b] + d);
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm256_fmadd_ps(x, q[v], acc[b][v]);
        }
    }
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) _mm256_storeu_ps(s + b * ATTN_QB + 8 * v, acc[b][v]);
}

void attn_k_qk_tile_avx2(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                         int64_t num_keys, float *s) {
    for (int64_t r0 = 0; r0 < num_rows; r0 += 16) {
        const float *q = q_t + r0;
        float *sr = s + r0;
        int64_t k = 0;
        if (num_rows - r0 > 8) {
            for (; k + 6 <= num_keys; k += 6) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 6, 2);
            for (; k + 4 <= num_keys; k += 4) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 4, 2);
            for (; k < num_keys; k++) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 1, 2);
        } else {
            for (; k + 8 <= num_keys; k += 8) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 8, 1);
            for (; k + 4 <= num_keys; k += 4) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 4, 1);
            for (; k < num_keys; k++) k256_qk_panel(q, head_size, k_rows + k, sr + k * ATTN_QB, 1, 1);
        }
    }
}
