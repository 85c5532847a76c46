/*
 * exp2_avx512.h — 16-lane exp2 for the AVX-512 softmax (static inline only, docs/CONTRIBUTING.md §7).
 *
 * Same recipe and coefficients as k_exp2 in generic/tile_kernels.h, lane for lane: n = round to nearest
 * even (vrndscaleps), f = t − n ∈ [−½, ½], degree-7 Taylor of 2^f (ln2^k/k!) by Horner with FMAs, p·2^n by
 * vscalefps (an exact power-of-two scaling, the same rounding as the generic multiply by the exponent
 * bits), and 0 for t < −126. NaN propagates as in the scalar code.
 */
#ifndef ATTN_KERNELS_AVX512_EXP2_AVX512_H
#define ATTN_KERNELS_AVX512_EXP2_AVX512_H

#include <immintrin.h>

/* The steps both polynomials share: lanes outside `keep` or with t < −126 give +0; n = rne(t), f = t − n, the
 * polynomial c[0] + f·(c[1] + f·(…c[deg])) by Horner with FMAs from the top, then p·2^n by vscalefps. */
static inline __attribute__((always_inline)) __m512 k512_exp2_poly(__mmask16 keep, __m512 t, const float *c,
                                                                   const int deg) {
    const __mmask16 live = _mm512_mask_cmp_ps_mask(keep, t, _mm512_set1_ps(-126.0f), _CMP_NLT_UQ);
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(c[deg]);
    for (int i = deg - 1; i >= 0; i--)
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c[i]));
    return _mm512_maskz_scalef_ps(live, p, n);
}

/* 2^t where the caller already knows which lanes are live (`keep`): lanes outside `keep` or with
 * t < −126 give +0. Without the clamps of the scalar code: vscalefps needs none (n far below −126 just
 * underflows, and those lanes are zeroed anyway), and t > 127 cannot occur in the softmax (t <= 8 there).
 * For t in [−126, 127] the bits equal k_exp2's (same n, same degree-7 Taylor polynomial, exact power-of-two
 * scaling). */
static inline __m512 k512_exp2_masked(__mmask16 keep, __m512 t) {
    static const float c[8] = {1.0f,
                               6.9314718055994531e-1f,
                               2.4022650695910071e-1f,
                               5.5504108664821580e-2f,
                               9.6181291076284772e-3f,
                               1.3333558146428443e-3f,
                               1.5403530393381609e-4f,
                               1.5252733804059840e-5f};
    return k512_exp2_poly(keep, t, c, 7);
}

/* k512_exp2_masked with a degree-5 polynomial instead of 7 (1 + f·q(f), q fitted for relative error on [−½, ½], so
 * 2^0 is exactly 1): within 1.9e-7 of 2^t relative (float32 evaluation included), two FMAs fewer. Only for the
 * quantized-attention kernels, whose P is rounded to bf16 or bytes right after and whose contract is a
 * tolerance; the float tables keep k512_exp2_masked (their bits are pinned). */
static inline __m512 k512_exp2_masked_q(__mmask16 keep, __m512 t) {
    static const float c[6] = {1.0f,
                               0.6931470036506653f,
                               0.24022242426872253f,
                               0.05550733953714371f,
                               0.009671512991189957f,
                               0.0013264714507386088f};
    return k512_exp2_poly(keep, t, c, 5);
}

/* 2^t with k_exp2's full semantics (clamp to 127 above, 0 below −126, NaN propagates). */
static inline __m512 k512_exp2(__m512 t) {
    /* min returns its second operand when one is NaN: keep t last so NaN stays NaN */
    return k512_exp2_masked((__mmask16)0xffff, _mm512_min_ps(_mm512_set1_ps(127.0f), t));
}

#endif
