/*
 * softmax_tile_avx2.c — the online-softmax update of one kv tile, one ymm per 8 query rows
 * (docs/KERNELS.md §4). Lane for lane the rule of k_softmax_w in generic/tile_kernels.h (see
 * softmax_tile_avx512.c for the statement): lazy rescale with threshold 8·ln 2 (natural units; the log2 e
 * factor applies to s − m), α = 1 when m is
 * kept or was −inf, P exactly +0 where s = −inf, l = α·l + Σ_k P (k ascending), Oᵀ *= α when some α ≠ 1.
 * An all-masked tile leaves m, l and Oᵀ bitwise unchanged. ≤ 4 rows pack two keys per vector
 * (k256_softmax_rows4): the same per-lane operations on fewer vectors.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "softmax_tile_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>
#include <math.h>

#include "kernels/avx2/exp2_avx2.h"
#include "kernels/kernels.h"

/* ≤ 4 rows (decode: one token × GQA 4): the same per-lane rule with two keys per vector for the max and the
 * exp2 (half the exp2 work), the sum then taken over P in key order (the same sequence of adds). Only lanes
 * [0, 4) of s, m, l and Oᵀ are read or written. */
static void k256_softmax_rows4(float *s, int64_t num_keys, float *m, float *l, float *o_t, int64_t head_size_v) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    __m256 tmax2 = neg_inf;
    int64_t k = 0;
    for (; k + 2 <= num_keys; k += 2)
        tmax2 = _mm256_max_ps(_mm256_loadu2_m128(s + (k + 1) * ATTN_QB, s + k * ATTN_QB), tmax2);
    /* partial maxima are never NaN (NaN scores are ignored above) */
    __m128 tmax = _mm_max_ps(_mm256_castps256_ps128(tmax2), _mm256_extractf128_ps(tmax2, 1));
    for (; k < num_keys; k++) tmax = _mm_max_ps(_mm_loadu_ps(s + k * ATTN_QB), tmax);

    const __m128 m_old = _mm_loadu_ps(m), ninf4 = _mm_set1_ps(-INFINITY), one4 = _mm_set1_ps(1.0f);
    const __m128 empty = _mm_cmp_ps(m_old, ninf4, _CMP_EQ_OQ);
    const __m128 grow = _mm_cmp_ps(tmax, _mm_add_ps(m_old, _mm_set1_ps(ATTN_RESCALE_THRESHOLD)), _CMP_GT_OQ);
    const __m128 m_new = _mm_blendv_ps(m_old, tmax, _mm_or_ps(grow, empty));
    const __m128 keep = _mm_or_ps(_mm_cmp_ps(m_new, m_old, _CMP_EQ_OQ), empty);
    const __m128 e = _mm256_castps256_ps128(k256_exp2(_mm256_castps128_ps256(_mm_mul_ps(_mm_sub_ps(m_old, m_new), _mm_set1_ps(ATTN_LOG2E_F)))));
    const __m128 alpha = _mm_blendv_ps(e, one4, keep);
    const int rescale = _mm_movemask_ps(_mm_cmp_ps(alpha, one4, _CMP_NEQ_UQ)) != 0;
    _mm_storeu_ps(m, m_new);

    /* the sum over P in key order runs beside the exp2 of the next keys (one add chain, started early) */
    const __m256 m2 = _mm256_set_m128(m_new, m_new), log2e = _mm256_set1_ps(ATTN_LOG2E_F);
    __m128 sum = _mm_setzero_ps();
    for (k = 0; k + 2 <= num_keys; k += 2) {
        const __m256 x = _mm256_loadu2_m128(s + (k + 1) * ATTN_QB, s + k * ATTN_QB);
        const __m256 dead = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
        const __m256 pe = _mm256_andnot_ps(dead, k256_exp2(_mm256_mul_ps(_mm256_sub_ps(x, m2), log2e)));
        _mm256_storeu2_m128(s + (k + 1) * ATTN_QB, s + k * ATTN_QB, pe);
        sum = _mm_add_ps(_mm_add_ps(sum, _mm256_castps256_ps128(pe)), _mm256_extractf128_ps(pe, 1));
    }
    for (; k < num_keys; k++) {
        const __m256 x = _mm256_castps128_ps256(_mm_loadu_ps(s + k * ATTN_QB));
        const __m256 dead = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
        const __m256 pe = _mm256_andnot_ps(dead, k256_exp2(_mm256_mul_ps(_mm256_sub_ps(x, m2), log2e)));
        _mm_storeu_ps(s + k * ATTN_QB, _mm256_castps256_ps128(pe));
        sum = _mm_add_ps(sum, _mm256_castps256_ps128(pe));
    }
    _mm_storeu_ps(l, _mm_fmadd_ps(alpha, _mm_loadu_ps(l), sum));
    if (rescale)
        for (int64_t d = 0; d < head_size_v; d++)
            _mm_storeu_ps(o_t + d * ATTN_QB, _mm_mul_ps(_mm_loadu_ps(o_t + d * ATTN_QB), alpha));
}

/* Vectors [v0, v0 + NV) of 8 rows side by side (independent max and sum chains per key; per lane the same
 * operations in the same order as one vector alone). Their α into alpha[v0 ...]; *rescale = 1 when some α ≠ 1. */
static inline __attribute__((always_inline)) void k256_softmax_vecs(float *s, int64_t num_keys, float *m, float *l,
                                                                    int v0, __m256 *alpha, int *rescale, const int NV) {
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    const __m256 one = _mm256_set1_ps(1.0f), log2e = _mm256_set1_ps(ATTN_LOG2E_F);
    __m256 tmax[2] = {neg_inf, neg_inf}, m_new[2], sum[2];
    for (int64_t k = 0; k < num_keys; k++)
        for (int v = 0; v < NV; v++)
            tmax[v] = _mm256_max_ps(_mm256_loadu_ps(s + k * ATTN_QB + 8 * (v0 + v)), tmax[v]);
    for (int v = 0; v < NV; v++) {
        const __m256 m_old = _mm256_loadu_ps(m + 8 * (v0 + v));
        const __m256 empty = _mm256_cmp_ps(m_old, neg_inf, _CMP_EQ_OQ);
        const __m256 grow =
            _mm256_cmp_ps(tmax[v], _mm256_add_ps(m_old, _mm256_set1_ps(ATTN_RESCALE_THRESHOLD)), _CMP_GT_OQ);
        m_new[v] = _mm256_blendv_ps(m_old, tmax[v], _mm256_or_ps(grow, empty));
        const __m256 keep = _mm256_or_ps(_mm256_cmp_ps(m_new[v], m_old, _CMP_EQ_OQ), empty);
        alpha[v0 + v] = _mm256_blendv_ps(k256_exp2(_mm256_mul_ps(_mm256_sub_ps(m_old, m_new[v]), log2e)), one, keep);
        if (_mm256_movemask_ps(_mm256_cmp_ps(alpha[v0 + v], one, _CMP_NEQ_UQ)))
            *rescale = 1;
        _mm256_storeu_ps(m + 8 * (v0 + v), m_new[v]);
        sum[v] = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < num_keys; k++)
        for (int v = 0; v < NV; v++) {
            float *x_at = s + k * ATTN_QB + 8 * (v0 + v);
            const __m256 x = _mm256_loadu_ps(x_at);
            const __m256 dead = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
            const __m256 pe = _mm256_andnot_ps(dead, k256_exp2(_mm256_mul_ps(_mm256_sub_ps(x, m_new[v]), log2e)));
            _mm256_storeu_ps(x_at, pe);
            sum[v] = _mm256_add_ps(sum[v], pe);
        }
    for (int v = 0; v < NV; v++)
        _mm256_storeu_ps(l + 8 * (v0 + v), _mm256_fmadd_ps(alpha[v0 + v], _mm256_loadu_ps(l + 8 * (v0 + v)), sum[v]));
}

void attn_k_softmax_tile_avx2(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t,
                              int64_t head_size_v) {
    if (num_rows <= 4) {
        k256_softmax_rows4(s, num_keys, m, l, o_t, head_size_v);
        return;
    }
    const int nv = (int)((num_rows + 7) / 8);
    __m256 alpha[ATTN_QB / 8];
    int rescale = 0, v = 0;
    for (; v + 2 <= nv; v += 2)
        k256_softmax_vecs(s, num_keys, m, l, v, alpha, &rescale, 2);
    if (v < nv)
        k256_softmax_vecs(s, num_keys, m, l, v, alpha, &rescale, 1);
    if (rescale) {
        for (int64_t d = 0; d < head_size_v; d++)
            for (v = 0; v < nv; v++) {
                float *o = o_t + d * ATTN_QB + 8 * v;
                _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), alpha[v]));
            }
    }
}

/* kernel_list.h scale_tile: 8 rows per vector, a partial vector's other lanes left alone (maskload/maskstore). */
void attn_k_scale_tile_avx2(float *s, int64_t num_keys, int64_t num_rows, float scale) {
    const __m256 f = _mm256_set1_ps(scale);
    for (int64_t k = 0; k < num_keys; k++) {
        float *x = s + k * ATTN_QB;
        int64_t r = 0;
        for (; r + 8 <= num_rows; r += 8)
            _mm256_storeu_ps(x + r, _mm256_mul_ps(_mm256_loadu_ps(x + r), f));
        if (r < num_rows) {
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(num_rows - r)),
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            _mm256_maskstore_ps(x + r, m, _mm256_mul_ps(_mm256_maskload_ps(x + r, m), f));
        }
    }
}
