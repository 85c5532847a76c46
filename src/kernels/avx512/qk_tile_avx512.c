/*
 * qk_tile_avx512.c — S = Q·Kᵀ for one (query block × kv tile), query rows in zmm lanes
 * (cpu-kernel-design.md §2.1–2.2). K rows are read in place as scalar broadcasts; register tiles of
 * 8 keys × 2 zmm (32 rows) or 16 keys × 1 zmm (≤ 16 rows), with 4/2/1-key tails.
 *
 * Lane invariance (the determinism contract): every lane computes s = fma(k[d], q[d], s) for d = 0, 1, …
 * starting from s = 0, whatever the panel shape or the key's position in it, so a row's bits do not depend
 * on num_rows, on its neighbours or on key grouping. No reduction trees over d.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "qk_tile_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/kernels.h"

/* s[b][16·v + lane] = Σ_d k_rows[b][d]·q_t[d][16·v + lane] for b < NB keys, v < NV vectors. */
static inline __attribute__((always_inline)) void k512_qk_panel(const float *restrict q_t, int64_t head_size,
                                                                const float *const *k_rows,
                                                                float *restrict s, const int NB,
                                                                const int NV) {
    __m512 acc[16][2];
    const float *kp[16];
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++) {
        kp[b] = k_rows[b];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_setzero_ps();
    }
    for (int64_t d = 0; d < head_size; d++) {
        __m512 q[2];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) q[v] = _mm512_loadu_ps(q_t + d * ATTN_QB + 16 * v);
        _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++) {
            const __m512 x = _mm512_set1_ps(kp[b][d]);
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_fmadd_ps(x, q[v], acc[b][v]);
        }
    }
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) _mm512_storeu_ps(s + b * ATTN_QB + 16 * v, acc[b][v]);
}

void attn_k_qk_tile_avx512(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                           int64_t num_keys, float *s) {
    int64_t k = 0;
    if (num_rows > 16) {
        for (; k + 8 <= num_keys; k += 8) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 8, 2);
        for (; k + 4 <= num_keys; k += 4) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 4, 2);
        for (; k < num_keys; k++) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 1, 2);
    } else {
        for (; k + 16 <= num_keys; k += 16) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 16, 1);
        for (; k + 4 <= num_keys; k += 4) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 4, 1);
        for (; k < num_keys; k++) k512_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 1, 1);
    }
}
