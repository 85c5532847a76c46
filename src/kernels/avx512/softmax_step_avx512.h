/*
 * softmax_step_avx512.h — the running-maximum step of the online softmax for 16 query rows and the Oᵀ rescale
 * that follows it (static inline only, docs/CONTRIBUTING.md §7), shared by the avx512 softmax_tile and the
 * avx512bf16 quant table's fused update. Lane for lane the rule of k_softmax_w in generic/tile_kernels.h:
 *   m_new = tmax if tmax > m_old + 8·ln 2 or m_old = −inf, else m_old (lazy rescale; natural units);
 *   α = 1 if m_new = m_old or m_old = −inf, else exp2((m_old − m_new)·log2 e).
 */
#ifndef ATTN_KERNELS_AVX512_SOFTMAX_STEP_AVX512_H
#define ATTN_KERNELS_AVX512_SOFTMAX_STEP_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/exp2_avx512.h"
#include "kernels/kernels.h"

/* Replaces m[0..16) by m_new for the tile maximum tmax and returns it; α into *alpha, and *rescale = 1 when some
 * lane's α is not 1 (left alone otherwise). */
static inline __m512 k512_softmax_max_step(__m512 tmax, float *m, __m512 *alpha, int *rescale) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    const __m512 m_old = _mm512_loadu_ps(m);
    const __mmask16 empty = _mm512_cmp_ps_mask(m_old, neg_inf, _CMP_EQ_OQ);
    const __mmask16 grow =
        _mm512_cmp_ps_mask(tmax, _mm512_add_ps(m_old, _mm512_set1_ps(ATTN_RESCALE_THRESHOLD)), _CMP_GT_OQ);
    const __m512 m_new = _mm512_mask_mov_ps(m_old, (__mmask16)(grow | empty), tmax);
    const __mmask16 keep = (__mmask16)(_mm512_cmp_ps_mask(m_new, m_old, _CMP_EQ_OQ) | empty);
    *alpha = _mm512_mask_mov_ps(k512_exp2(_mm512_mul_ps(_mm512_sub_ps(m_old, m_new), _mm512_set1_ps(ATTN_LOG2E_F))),
                                keep, one);
    if (_mm512_cmp_ps_mask(*alpha, one, _CMP_NEQ_UQ))
        *rescale = 1;
    _mm512_storeu_ps(m, m_new);
    return m_new;
}

/* Lane-wise maximum of the logit rows [k0, k1) of s (rows ATTN_QB floats apart; −inf for none), over four
 * interleaved partial maxima (the same value as one chain; only which of +0 / −0 is kept may differ). */
static inline __m512 k512_rows_max(const float *s, int64_t k0, int64_t k1) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    __m512 t[4] = {neg_inf, neg_inf, neg_inf, neg_inf};
    int64_t k = k0;
    for (; k + 4 <= k1; k += 4)
        for (int i = 0; i < 4; i++)
            t[i] = _mm512_max_ps(_mm512_loadu_ps(s + (k + i) * ATTN_QB), t[i]);
    for (; k < k1; k++)
        t[0] = _mm512_max_ps(_mm512_loadu_ps(s + k * ATTN_QB), t[0]);
    return _mm512_max_ps(_mm512_max_ps(t[3], t[2]), _mm512_max_ps(t[1], t[0]));
}

/* Oᵀ[d][16h, 16h + 16) *= alpha[h] for d < head_size_v, h < nv (rows ATTN_QB floats apart). */
static inline void k512_rescale_o(float *o_t, int64_t head_size_v, const __m512 *alpha, int nv) {
    for (int64_t d = 0; d < head_size_v; d++)
        for (int h = 0; h < nv; h++) {
            float *o = o_t + d * ATTN_QB + 16 * h;
            _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), alpha[h]));
        }
}

#endif
