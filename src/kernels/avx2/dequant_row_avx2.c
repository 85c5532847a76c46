/*
 * dequant_row_avx2.c — the avx2 quant table's one kernel (kernels.h, struct attn_quant_kernels): a row of FP8
 * (E4M3, E5M2) or FP4 (E2M1) codes widened exactly to float32 in registers and multiplied by its scale factor,
 * dst[i] = decode(code i)·sc[i >> sc_shift] (one float32 product, the value the fake-quantization path stores).
 * E4M3: the 7 magnitude bits at float bit 20 are the value times 2^-120 (subnormal codes land on float32
 * subnormals), one exact multiply by 2^120; E5M2 at bit 21 times 2^112; E2M1 by an 8-entry table. NaN codes give
 * a quiet NaN and E5M2 S.11111.00 ±inf, as attn_qfmt_decode. The driver feeds the rows to the float kernels.
 */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "dequant_row_avx2.c must be compiled with -mavx2 -mfma"
#endif
#include <immintrin.h>
#include <string.h>

#include "kernels/kernels.h"

static inline __attribute__((always_inline)) __m256 kq_decode8(const uint8_t *codes, attn_dtype elem, int64_t i0,
                                                               int n) {
    uint8_t buf[8] = {0};
    if (elem == ATTN_DTYPE_FP4_E2M1) {
        __m128i raw;
        if (n == 8) {
            int32_t w4;
            memcpy(&w4, codes + i0 / 2, 4);
            raw = _mm_cvtsi32_si128(w4);
        } else {
            memcpy(buf, codes + i0 / 2, (size_t)(n + 1) / 2);
            raw = _mm_loadl_epi64((const __m128i *)(const void *)buf);
        }
        const __m128i w = _mm_cvtepu8_epi16(raw);
        const __m128i t = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(0x0F)),
                                       _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0xF0)), 4));
        const __m256i c = _mm256_cvtepu8_epi32(t);
        const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
        const __m256 mag = _mm256_permutevar8x32_ps(lut, c); /* uses the low 3 bits */
        const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(8)), 28);
        __m256 v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(mag), sign));
        if (n < 8) {
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            v = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane)));
        }
        return v;
    }
    const uint8_t *src = codes + i0;
    if (n < 8) {
        memcpy(buf, codes + i0, (size_t)n);
        src = buf;
    }
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)src));
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256 qnan = _mm256_set1_ps(__builtin_nanf(""));
    __m256 v;
    if (elem == ATTN_DTYPE_FP8_E4M3) {
        v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 20)), _mm256_set1_ps(0x1p120f));
        v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
        v = _mm256_blendv_ps(v, qnan, _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F))));
    } else {
        v = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(mag, 21)), _mm256_set1_ps(0x1p112f));
        v = _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_inff()),
                             _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7B))));
        v = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(v), sign));
        v = _mm256_blendv_ps(v, qnan, _mm256_castsi256_ps(_mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7C))));
    }
    return v;
}

void attn_k_dequant_row_avx2(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                             float *dst) {
    for (int64_t i = 0; i < n; i += 8) {
        const int m = n - i < 8 ? (int)(n - i) : 8;
        __m256 f;
        if (sc_shift == 0 && m == 8) {
            f = _mm256_loadu_ps(sc + i);
        } else if (sc_shift == 0) {
            float t[8] = {0};
            memcpy(t, sc + i, (size_t)m * sizeof(float));
            f = _mm256_loadu_ps(t);
        } else {
            f = _mm256_set1_ps(sc[sc_shift >= 63 ? 0 : i >> sc_shift]);
        }
        const __m256 v = _mm256_mul_ps(kq_decode8(codes, elem, i, m), f);
        if (m == 8) {
            _mm256_storeu_ps(dst + i, v);
        } else {
            float t[8];
            _mm256_storeu_ps(t, v);
            memcpy(dst + i, t, (size_t)m * sizeof(float));
        }
    }
}
