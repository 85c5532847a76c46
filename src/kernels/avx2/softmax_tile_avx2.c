/*
 * softmax_tile_avx2.c — the online-softmax update of one kv tile, one ymm per 8 query rows
 * (cpu-kernel-design.md §2.4). Lane for lane the rule of k_softmax_w in generic/tile_kernels.h (see
 * softmax_tile_avx512.c for the statement): lazy rescale with threshold 8 (log2 units), α = 1 when m is
 * kept or was −inf, P exactly +0 where s = −inf, l = α·l + Σ_k P (k ascending), Oᵀ *= α when some α ≠ 1.
 * An all-masked tile leaves m, l and Oᵀ bitwise unchanged.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "softmax_tile_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>
#include <math.h>

#include "kernels/avx2/exp2_avx2.h"
#include "kernels/kernels.h"

void attn_k_softmax_tile_avx2(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t,
                              int64_t head_size_v) {
    const int nv = (int)((num_rows + 7) / 8);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 alpha[ATTN_QB / 8];
    int rescale = 0;
    for (int v = 0; v < nv; v++) {
        float *sv = s + 8 * v;
        __m256 tmax = neg_inf;
        for (int64_t k = 0; k < num_keys; k++) tmax = _mm256_max_ps(_mm256_loadu_ps(sv + k * ATTN_QB), tmax);
        const __m256 m_old = _mm256_loadu_ps(m + 8 * v);
        const __m256 empty = _mm256_cmp_ps(m_old, neg_inf, _CMP_EQ_OQ);
        const __m256 grow =
            _mm256_cmp_ps(tmax, _mm256_add_ps(m_old, _mm256_set1_ps(ATTN_RESCALE_THRESHOLD)), _CMP_GT_OQ);
        const __m256 m_new = _mm256_blendv_ps(m_old, tmax, _mm256_or_ps(grow, empty));
        const __m256 keep = _mm256_or_ps(_mm256_cmp_ps(m_new, m_old, _CMP_EQ_OQ), empty);
        alpha[v] = _mm256_blendv_ps(k256_exp2(_mm256_sub_ps(m_old, m_new)), one, keep);
        if (_mm256_movemask_ps(_mm256_cmp_ps(alpha[v], one, _CMP_NEQ_UQ))) rescale = 1;
        _mm256_storeu_ps(m + 8 * v, m_new);

        __m256 sum = _mm256_setzero_ps();
        for (int64_t k = 0; k < num_keys; k++) {
            const __m256 x = _mm256_loadu_ps(sv + k * ATTN_QB);
            const __m256 dead = _mm256_cmp_ps(x, neg_inf, _CMP_EQ_OQ);
            const __m256 pe = _mm256_andnot_ps(dead, k256_exp2(_mm256_sub_ps(x, m_new)));
            _mm256_storeu_ps(sv + k * ATTN_QB, pe);
            sum = _mm256_add_ps(sum, pe);
        }
        _mm256_storeu_ps(l + 8 * v, _mm256_fmadd_ps(alpha[v], _mm256_loadu_ps(l + 8 * v), sum));
    }
    if (rescale) {
        for (int64_t d = 0; d < head_size_v; d++)
            for (int v = 0; v < nv; v++) {
                float *o = o_t + d * ATTN_QB + 8 * v;
                _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), alpha[v]));
            }
    }
}
