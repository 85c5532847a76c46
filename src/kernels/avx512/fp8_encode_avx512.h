/*
 * fp8_encode_avx512.h — float32 → FP8 E4M3 / E5M2 codes on 16 lanes, shared by the avx512 row conversions
 * (cvt_avx512.c: fp8 cache writes, quantized-attention codes) and the avx512bf16 quant table's fused MX row
 * (quant_prep_avx512bf16.c). Needs AVX-512 F (any file that includes it is compiled with it).
 */
#ifndef ATTN_KERNELS_FP8_ENCODE_AVX512_H
#define ATTN_KERNELS_FP8_ENCODE_AVX512_H

#include <immintrin.h>

/* float32 → FP8 (man_bits M, bias B: E4M3 3/7, E5M2 2/15) on 16 lanes, codes in the low byte of each lane: the
 * result of attn_f32_to_fp8_bits, by float rounding instead of its integer steps (k512_fp8_round_abs: |x| onto the
 * grid, saturated; k512_f32_to_fp8: the code). Round to nearest even onto the
 * format's grid is one float addition: for |x| in binade E the grid spacing is 2^(max(E, 1 − B) − M) (the
 * subnormals share the smallest normal binade's spacing), which is the float spacing at T = 2^(max(E, 1 − B) −
 * M + 23), so (|x| + T) − T rounds |x| there with ties to even (a carry into the next binade gives its first
 * grid value, exactly). E is clamped from above so T stays finite: a larger |x| (±inf included) stays above the
 * largest finite value, and min(·, max) saturates it. The rounded r is then a format value: ≥ 2^(1 − B) its
 * code is its float bits shifted (exponent rebiased), below it r·2^(B − 1 + M) is the subnormal code, an exact
 * small integer. NaN gives 0x7F; the sign bit is ORed in (−0 → 0x80, a negative that rounds to 0 → 0x80). */
static inline __attribute__((always_inline)) __m512 k512_fp8_round_abs(__m512i a, const int man_bits, const int bias) {
    const __m512i e = _mm512_min_epi32(_mm512_max_epi32(_mm512_srli_epi32(a, 23), _mm512_set1_epi32(128 - bias)),
                                       _mm512_set1_epi32(127 + bias + 2));
    const __m512 t = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(23 - man_bits)), 23));
    const float fmax = man_bits == 3 ? 448.0f : 57344.0f;
    return _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(a), t), t), _mm512_set1_ps(fmax));
}

/* k512_fp8_round_abs of |x| (a: the bits of |x|), then the code. */
static inline __attribute__((always_inline)) __m512i k512_f32_to_fp8(__m512 x, const int man_bits, const int bias) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __m512 r = k512_fp8_round_abs(a, man_bits, bias);
    const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(r), 23 - man_bits),
                                            _mm512_set1_epi32((127 - bias) << man_bits));
    const __m512i sub = _mm512_cvttps_epi32(
        _mm512_mul_ps(r, _mm512_castsi512_ps(_mm512_set1_epi32((127 + bias - 1 + man_bits) << 23))));
    const __mmask16 is_sub = _mm512_cmplt_epi32_mask(_mm512_castps_si512(r), _mm512_set1_epi32((128 - bias) << 23));
    __m512i c = _mm512_mask_mov_epi32(normal, is_sub, sub);
    c = _mm512_mask_mov_epi32(c, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7f));
    return _mm512_or_si512(c, _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
}

/* The FP8 value k512_f32_to_fp8 encodes x as — what decoding its code gives — as float32: the same rounding onto
 * the grid (min(·, max) saturating ±inf too) with the code's sign (a negative value that rounds to 0 is −0),
 * NaN as the positive quiet NaN 0x7FC00000 (the decoders' NaN whatever the code's sign). */
static inline __attribute__((always_inline)) __m512 k512_fp8_grid(__m512 x, const int man_bits, const int bias) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __m512 r = k512_fp8_round_abs(a, man_bits, bias);
    const __m512i v = _mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)));
    return _mm512_castsi512_ps(_mm512_mask_mov_epi32(v, _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f800000)),
                                                     _mm512_set1_epi32(0x7FC00000)));
}

#endif
