/*
 * softmax_tile_avx512.c — the online-softmax update of one kv tile, one zmm per 16 query rows
 * (docs/KERNELS.md §4). Lane for lane the same rule as k_softmax_w in generic/tile_kernels.h:
 *   tmax = max_k s (−inf start; NaN scores ignored as by `s > tmax ? s : tmax`);
 *   m_new = tmax if tmax > m_old + 8·ln 2 or m_old = −inf, else m_old (lazy rescale; natural units);
 *   α = 1 if m_new = m_old or m_old = −inf, else exp2((m_old − m_new)·log2 e);
 *   P = exp2((s − m_new)·log2 e), exactly 0 where s = −inf; l = α·l + Σ_k P (k ascending); Oᵀ *= α when some α ≠ 1.
 * An all-masked tile therefore leaves m, l and Oᵀ bitwise unchanged. Does not handle masks itself.
 * ≤ 4 rows pack four keys per vector (k512_softmax_rows4): the same per-lane operations on fewer vectors.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "softmax_tile_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/exp2_avx512.h"
#include "kernels/avx512/softmax_step_avx512.h"
#include "kernels/kernels.h"

/* Lanes 4g + r of the result = s[k + g][r] for g, r < 4: four keys of up to four rows in one zmm. */
static inline __m512 k512_pack4(const float *s, int64_t k) {
    __m512 x = _mm512_castps128_ps512(_mm_loadu_ps(s + k * ATTN_QB));
    x = _mm512_insertf32x4(x, _mm_loadu_ps(s + (k + 1) * ATTN_QB), 1);
    x = _mm512_insertf32x4(x, _mm_loadu_ps(s + (k + 2) * ATTN_QB), 2);
    return _mm512_insertf32x4(x, _mm_loadu_ps(s + (k + 3) * ATTN_QB), 3);
}

/* ≤ 4 rows (decode: one token × GQA 4): the same per-lane rule with four keys per vector for the max and the
 * exp2 (a quarter of the exp2 work of the one-row-block layout), the sum then taken over P in key order
 * (the same sequence of adds). Only lanes [0, 4) of s, m, l and Oᵀ are read or written. */
static void k512_softmax_rows4(float *s, int64_t num_keys, float *m, float *l, float *o_t, int64_t head_size_v) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    __m512 tmax4 = neg_inf;
    int64_t k = 0;
    for (; k + 4 <= num_keys; k += 4) tmax4 = _mm512_max_ps(k512_pack4(s, k), tmax4);
    /* max over the four key groups (partial maxima are never NaN: NaN scores are ignored above) */
    tmax4 = _mm512_max_ps(tmax4, _mm512_shuffle_f32x4(tmax4, tmax4, 0x4E));
    tmax4 = _mm512_max_ps(tmax4, _mm512_shuffle_f32x4(tmax4, tmax4, 0xB1));
    __m128 tmax = _mm512_castps512_ps128(tmax4);
    for (; k < num_keys; k++) tmax = _mm_max_ps(_mm_loadu_ps(s + k * ATTN_QB), tmax);

    const __m128 m_old = _mm_loadu_ps(m);
    const __m128 ninf4 = _mm_set1_ps(-INFINITY), one4 = _mm_set1_ps(1.0f);
    const __mmask8 empty = _mm_cmp_ps_mask(m_old, ninf4, _CMP_EQ_OQ);
    const __mmask8 grow = _mm_cmp_ps_mask(tmax, _mm_add_ps(m_old, _mm_set1_ps(ATTN_RESCALE_THRESHOLD)), _CMP_GT_OQ);
    const __m128 m_new = _mm_mask_mov_ps(m_old, (__mmask8)(grow | empty), tmax);
    const __mmask8 keep = (__mmask8)(_mm_cmp_ps_mask(m_new, m_old, _CMP_EQ_OQ) | empty);
    const __m128 e = _mm512_castps512_ps128(k512_exp2(_mm512_castps128_ps512(_mm_mul_ps(_mm_sub_ps(m_old, m_new), _mm_set1_ps(ATTN_LOG2E_F)))));
    const __m128 alpha = _mm_mask_mov_ps(e, keep, one4);
    const int rescale = (_mm_cmp_ps_mask(alpha, one4, _CMP_NEQ_UQ) & 0xF) != 0;
    _mm_storeu_ps(m, m_new);

    /* the sum over P in key order runs beside the exp2 of the next keys (one add chain, started early) */
    const __m512 m4 = _mm512_broadcast_f32x4(m_new), log2e = _mm512_set1_ps(ATTN_LOG2E_F);
    __m128 sum = _mm_setzero_ps();
    for (k = 0; k + 4 <= num_keys; k += 4) {
        const __m512 x = k512_pack4(s, k);
        /* s = −inf gives exactly +0 even when m_new = −inf too (t would be NaN there) */
        const __m512 pe = k512_exp2_masked(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_UQ), _mm512_mul_ps(_mm512_sub_ps(x, m4), log2e));
        const __m128 p0 = _mm512_castps512_ps128(pe), p1 = _mm512_extractf32x4_ps(pe, 1);
        const __m128 p2 = _mm512_extractf32x4_ps(pe, 2), p3 = _mm512_extractf32x4_ps(pe, 3);
        _mm_storeu_ps(s + k * ATTN_QB, p0);
        _mm_storeu_ps(s + (k + 1) * ATTN_QB, p1);
        _mm_storeu_ps(s + (k + 2) * ATTN_QB, p2);
        _mm_storeu_ps(s + (k + 3) * ATTN_QB, p3);
        sum = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(sum, p0), p1), p2), p3);
    }
    for (; k < num_keys; k++) {
        const __m512 x = _mm512_castps128_ps512(_mm_loadu_ps(s + k * ATTN_QB));
        const __m512 pe = k512_exp2_masked(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_UQ) & 0xF, _mm512_mul_ps(_mm512_sub_ps(x, m4), log2e));
        _mm_storeu_ps(s + k * ATTN_QB, _mm512_castps512_ps128(pe));
        sum = _mm_add_ps(sum, _mm512_castps512_ps128(pe));
    }
    _mm_storeu_ps(l, _mm_fmadd_ps(alpha, _mm_loadu_ps(l), sum));
    if (rescale)
        for (int64_t d = 0; d < head_size_v; d++)
            _mm_storeu_ps(o_t + d * ATTN_QB, _mm_mul_ps(_mm_loadu_ps(o_t + d * ATTN_QB), alpha));
}

/* NV vectors of 16 rows side by side (independent max and sum chains per key: at 32 rows the two halves overlap,
 * Intel Xeon L1 bench 535 → 462 ns a 64-key tile); per lane the same operations in the same order as one half alone. */
static inline __attribute__((always_inline)) void k512_softmax_rows(float *s, int64_t num_keys, float *m, float *l,
                                                                    float *o_t, int64_t head_size_v, const int NV) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    const __m512 log2e = _mm512_set1_ps(ATTN_LOG2E_F);
    __m512 tmax[2] = {neg_inf, neg_inf}, m_new[2], alpha[2], sum[2];
    int rescale = 0;
    for (int64_t k = 0; k < num_keys; k++)
        for (int v = 0; v < NV; v++)
            tmax[v] = _mm512_max_ps(_mm512_loadu_ps(s + k * ATTN_QB + 16 * v), tmax[v]);
    for (int v = 0; v < NV; v++) {
        m_new[v] = k512_softmax_max_step(tmax[v], m + 16 * v, &alpha[v], &rescale);
        sum[v] = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < num_keys; k++)
        for (int v = 0; v < NV; v++) {
            float *x_at = s + k * ATTN_QB + 16 * v;
            const __m512 x = _mm512_loadu_ps(x_at);
            /* s = −inf gives exactly +0 even when m_new = −inf too (t would be NaN there) */
            const __m512 pe = k512_exp2_masked(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_UQ),
                                               _mm512_mul_ps(_mm512_sub_ps(x, m_new[v]), log2e));
            _mm512_storeu_ps(x_at, pe);
            sum[v] = _mm512_add_ps(sum[v], pe);
        }
    for (int v = 0; v < NV; v++)
        _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(alpha[v], _mm512_loadu_ps(l + 16 * v), sum[v]));
    if (rescale)
        k512_rescale_o(o_t, head_size_v, alpha, NV);
}

void attn_k_softmax_tile_avx512(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t,
                                int64_t head_size_v) {
    if (num_rows <= 4)
        k512_softmax_rows4(s, num_keys, m, l, o_t, head_size_v);
    else if (num_rows <= 16)
        k512_softmax_rows(s, num_keys, m, l, o_t, head_size_v, 1);
    else
        k512_softmax_rows(s, num_keys, m, l, o_t, head_size_v, 2);
}

/* kernel_list.h scale_tile: 16 rows per vector (the lanes past num_rows of a partial vector keep their values). */
void attn_k_scale_tile_avx512(float *s, int64_t num_keys, int64_t num_rows, float scale) {
    const __m512 f = _mm512_set1_ps(scale);
    const __mmask16 m0 = num_rows >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << num_rows) - 1u);
    const __mmask16 m1 =
        num_rows >= 32 ? (__mmask16)0xFFFF : num_rows > 16 ? (__mmask16)((1u << (num_rows - 16)) - 1u) : 0;
    for (int64_t k = 0; k < num_keys; k++) {
        float *x = s + k * ATTN_QB;
        _mm512_mask_storeu_ps(x, m0, _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, x), f));
        if (m1)
            _mm512_mask_storeu_ps(x + 16, m1, _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, x + 16), f));
    }
}
