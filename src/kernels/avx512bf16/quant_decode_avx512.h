/*
 * quant_decode_avx512.h — exact widening of 16 FP8 (E4M3, E5M2) or FP4 (E2M1) codes to float32 in a zmm, for the
 * quantized-attention kernels (quant_tile_avx512bf16.c). Only static inline functions (docs/CONTRIBUTING.md §7).
 * E4M3: the 7 magnitude bits placed at float bit 20 are the value times 2^-120 (subnormal codes land on float32
 * subnormals), so one exact multiply by 2^120 widens them; E5M2 likewise at bit 21 with 2^112; E2M1 by a 16-entry
 * table. NaN codes (E4M3 S.1111.111, E5M2 exponent 11111 with a mantissa) give a quiet NaN, E5M2 S.11111.00 ±inf,
 * as attn_qfmt_decode.
 */
#ifndef ATTN_KERNELS_QUANT_DECODE_AVX512_H
#define ATTN_KERNELS_QUANT_DECODE_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "attn/attn.h"

/* Elements [i0, i0 + n) (n <= 16, i0 even for FP4) of a code row as floats; lanes >= n are 0. */
static inline __attribute__((always_inline)) __m512 kq_decode16(const uint8_t *codes, attn_dtype elem, int64_t i0,
                                                                int n) {
    if (elem == ATTN_DTYPE_FP4_E2M1) {
        const int nb = (n + 1) / 2;
        const __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << nb) - 1u), codes + i0 / 2);
        const __m128i w = _mm_cvtepu8_epi16(b);
        const __m128i t = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(0x0F)),
                                       _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0xF0)), 4));
        const __m512i idx = _mm512_cvtepu8_epi32(t);
        const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f,
                                          -2.0f, -3.0f, -4.0f, -6.0f);
        return _mm512_maskz_permutexvar_ps((__mmask16)((1u << n) - 1u), idx, lut);
    }
    const __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << n) - 1u), codes + i0);
    const __m512i c = _mm512_cvtepu8_epi32(b);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    __m512 v;
    if (elem == ATTN_DTYPE_FP8_E4M3) {
        v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1p120f));
        v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
        v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)),
                               _mm512_set1_ps(__builtin_nanf("")));
    } else {
        v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 21)), _mm512_set1_ps(0x1p112f));
        const __mmask16 special = _mm512_cmpge_epi32_mask(mag, _mm512_set1_epi32(0x7C));
        v = _mm512_mask_mov_ps(v, special, _mm512_set1_ps(__builtin_inff()));
        v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
        v = _mm512_mask_mov_ps(v, _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7C)),
                               _mm512_set1_ps(__builtin_nanf("")));
    }
    return v;
}

/* The factors of elements [i0, i0 + 16) (i0 a multiple of 16): sc[i >> sc_shift]. */
static inline __attribute__((always_inline)) __m512 kq_factor16(const float *sc, int sc_shift, int64_t i0, int n) {
    if (sc_shift == 0)
        return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), sc + i0);
    return _mm512_set1_ps(sc[sc_shift >= 63 ? 0 : i0 >> sc_shift]);
}

#endif
