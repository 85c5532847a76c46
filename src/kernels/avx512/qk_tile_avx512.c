/*
 * qk_tile_avx512.c — S = Q·Kᵀ for one (query block × kv tile), query rows in zmm lanes
 * (docs/KERNELS.md §2). K rows are read in place as scalar broadcasts; register tiles of
 * 8 keys × 2 zmm (32 rows) or 16 keys × 1 zmm (≤ 16 rows), with 4/2/1-key tails.
 *
 * Lane invariance (the determinism contract): every lane computes s = fma(k[d], q[d], s) for d = 0, 1, …
 * starting from s = 0, whatever the panel shape or the key's position in it, so a row's bits do not depend
 * on num_rows, on its neighbours or on key grouping. No reduction trees over d.
 *
 * Few rows (≤ K512_QK_FEW_ROWS, decode: 1 token × GQA group) leave most of the 16 lanes idle, so there
 * the lanes hold 16 keys instead: 16×16 blocks of K rows are transposed in registers and each row's
 * q[d] is broadcast. Every s[k][r] is still the same fma chain over d ascending from 0 (operands swapped,
 * which fma does not see), so the bits equal the row-lane path's; only which values share a vector changes.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "qk_tile_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/avx512/transpose_avx512.h"
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

/* Measured (bench, D = 64…256): keys-in-lanes wins up to 12 rows (4 rows: 2.3–2.5×), ties or loses from 13. */
#define K512_QK_FEW_ROWS 12

/* s[k][r] for 16 keys (nk valid) × R rows, keys in lanes. Lanes r ≥ R of the written s rows are set to 0. */
static inline __attribute__((always_inline)) void k512_qk_keys16(const float *restrict q_t, int64_t head_size,
                                                                 const float *const *k_rows, int nk,
                                                                 float *restrict s, const int R) {
    __m512 acc[K512_QK_FEW_ROWS];
    __m512 x[16];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int64_t d0 = 0;
    for (; d0 + 16 <= head_size; d0 += 16) {
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++)
            x[b] = b < nk ? _mm512_loadu_ps(k_rows[b] + d0) : _mm512_setzero_ps();
        k512_transpose16(x); /* x[j] lane b = K[b][d0 + j] */
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)
                acc[r] = _mm512_fmadd_ps(x[j], _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    if (d0 < head_size) {
        const int nd = (int)(head_size - d0);
        const __mmask16 dm = (__mmask16)((1u << nd) - 1u);
        float kt[16][16];
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++)
            x[b] = b < nk ? _mm512_maskz_loadu_ps(dm, k_rows[b] + d0) : _mm512_setzero_ps();
        k512_transpose16(x);
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) _mm512_storeu_ps(kt[j], x[j]);
        for (int j = 0; j < nd; j++) {
            const __m512 kj = _mm512_loadu_ps(kt[j]);
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)
                acc[r] = _mm512_fmadd_ps(kj, _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R ? acc[r] : _mm512_setzero_ps();
    k512_transpose16(x); /* x[b] lane r = s[b][r] */
    _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++)
        if (b < nk) _mm512_storeu_ps(s + b * ATTN_QB, x[b]);
}

static inline __attribute__((always_inline)) void k512_qk_few(const float *q_t, int64_t head_size,
                                                              const float *const *k_rows, int64_t num_keys,
                                                              float *s, const int R) {
    int64_t k = 0;
    for (; k + 16 <= num_keys; k += 16) k512_qk_keys16(q_t, head_size, k_rows + k, 16, s + k * ATTN_QB, R);
    if (k < num_keys) k512_qk_keys16(q_t, head_size, k_rows + k, (int)(num_keys - k), s + k * ATTN_QB, R);
}

void attn_k_qk_tile_avx512(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                           int64_t num_keys, float *s) {
    switch (num_rows) {
    case 1: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 1); return;
    case 2: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 2); return;
    case 3: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 3); return;
    case 4: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 4); return;
    case 5: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 5); return;
    case 6: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 6); return;
    case 7: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 7); return;
    case 8: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 8); return;
    case 9: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 9); return;
    case 10: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 10); return;
    case 11: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 11); return;
    case 12: k512_qk_few(q_t, head_size, k_rows, num_keys, s, 12); return;
    default: break;
    }
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
