/*
 * exp2_avx2.h — 8-lane exp2 for the AVX2 softmax (static inline only, docs/CONTRIBUTING.md §7).
 *
 * Lane for lane the recipe of k_exp2 in generic/tile_kernels.h: clamp t to [−126, 127], n = round to
 * nearest even (vroundps), f = t − n, degree-7 Taylor of 2^f by Horner with FMAs, times 2^n built from
 * exponent bits (exact), and 0 for t < −126. NaN propagates as in the scalar code.
 */
#ifndef ATTN_KERNELS_AVX2_EXP2_AVX2_H
#define ATTN_KERNELS_AVX2_EXP2_AVX2_H

#include <immintrin.h>

static inline __m256 k256_exp2(__m256 t) {
    const __m256 lo = _mm256_set1_ps(-126.0f);
    /* min/max return their second operand when one is NaN: keep t last so NaN stays NaN */
    const __m256 tc = _mm256_max_ps(lo, _mm256_min_ps(_mm256_set1_ps(127.0f), t));
    const __m256 n = _mm256_round_ps(tc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(tc, n);
    __m256 p = _mm256_set1_ps(1.5252733804059840e-5f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530393381609e-4f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    /* t < −126 → 0 (the ordered LT is false for NaN, which keeps r = NaN) */
    return _mm256_andnot_ps(_mm256_cmp_ps(t, lo, _CMP_LT_OQ), r);
}

#endif
