/*
 * pv_tile_avx512.c — Oᵀ += P·V for one (query block × kv tile), query rows in zmm lanes
 * (cpu-kernel-design.md §2.1–2.2). V rows are read in place as scalar broadcasts; register tiles of
 * 8 output columns × 2 zmm (32 rows) or 16 columns × 1 zmm (≤ 16 rows), with 4/1-column tails.
 *
 * Lane invariance: every lane computes o[d] = fma(v[k][d], p[k], o[d]) for k = 0, 1, … in ascending
 * order starting from the o_t it was given, whatever the panel shape or num_rows.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "pv_tile_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/kernels.h"

/* o_t[d0 + b][16·v + lane] += Σ_k v_rows[k][d0 + b]·p[k][16·v + lane] for b < NB columns, v < NV. */
static inline __attribute__((always_inline)) void k512_pv_panel(const float *restrict p, int64_t num_keys,
                                                                const float *const *v_rows, int64_t d0,
                                                                float *restrict o_t, const int NB,
                                                                const int NV) {
    __m512 acc[16][2];
    float *o = o_t + d0 * ATTN_QB;
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_loadu_ps(o + b * ATTN_QB + 16 * v);
    for (int64_t k = 0; k < num_keys; k++) {
        const float *vr = v_rows[k] + d0;
        __m512 pk[2];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) pk[v] = _mm512_loadu_ps(p + k * ATTN_QB + 16 * v);
        _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++) {
            const __m512 x = _mm512_set1_ps(vr[b]);
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_fmadd_ps(x, pk[v], acc[b][v]);
        }
    }
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) _mm512_storeu_ps(o + b * ATTN_QB + 16 * v, acc[b][v]);
}

void attn_k_pv_tile_avx512(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                           int64_t head_size_v, float *o_t) {
    int64_t d = 0;
    if (num_rows > 16) {
        for (; d + 8 <= head_size_v; d += 8) k512_pv_panel(p, num_keys, v_rows, d, o_t, 8, 2);
        for (; d + 4 <= head_size_v; d += 4) k512_pv_panel(p, num_keys, v_rows, d, o_t, 4, 2);
        for (; d < head_size_v; d++) k512_pv_panel(p, num_keys, v_rows, d, o_t, 1, 2);
    } else {
        for (; d + 16 <= head_size_v; d += 16) k512_pv_panel(p, num_keys, v_rows, d, o_t, 16, 1);
        for (; d + 4 <= head_size_v; d += 4) k512_pv_panel(p, num_keys, v_rows, d, o_t, 4, 1);
        for (; d < head_size_v; d++) k512_pv_panel(p, num_keys, v_rows, d, o_t, 1, 1);
    }
}
