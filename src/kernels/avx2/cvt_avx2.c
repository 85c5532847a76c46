/*
 * cvt_avx2.c — row conversions float32 ↔ F32/F16/BF16 with ymm vectors and scalar tails (the scalar
 * helpers of core/dtype.h). F16 by vcvtph2ps / vcvtps2ph (round to nearest even) with signalling NaNs
 * rebuilt by bits so every input converts exactly as attn_f16_to_f32 does; BF16 by a 16-bit shift and the
 * integer round-to-nearest-even of attn_f32_to_bf16 (quiet NaN kept). F32/F16/BF16 → FP8 (the fp8 KV cache
 * write) by the 8-lane encoder of fp8_avx2.h.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "cvt_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/avx2/fp8_avx2.h"
#include "kernels/avx2/transpose_avx2.h"
#include "kernels/kernels.h"

static inline __m256 k256_f16_to_f32(__m128i h) {
    const __m256 r = _mm256_cvtph_ps(h);
    const __m256i w = _mm256_cvtepu16_epi32(h);
    const __m256i is_nan_exp = _mm256_cmpeq_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7e00)), _mm256_set1_epi32(0x7c00));
    const __m256i man = _mm256_and_si256(w, _mm256_set1_epi32(0x3ff));
    const __m256i snan = _mm256_andnot_si256(_mm256_cmpeq_epi32(man, _mm256_setzero_si256()), is_nan_exp);
    if (__builtin_expect(_mm256_testz_si256(snan, snan), 1)) return r;
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x8000)), 16);
    const __m256i bits = _mm256_or_si256(_mm256_or_si256(sign, _mm256_slli_epi32(man, 13)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_ps(r, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(snan));
}

void attn_k_cvt_to_f32_avx2(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2) { /* fp8 KV: the scalar exact widening */
        const uint8_t *b = (const uint8_t *)src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = dtype == ATTN_DTYPE_FP8_E4M3 ? attn_fp8_e4m3_to_f32(b[i]) : attn_fp8_e5m2_to_f32(b[i]);
        return;
    }
    const uint16_t *s = (const uint16_t *)src;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 8 <= n; i += 8) {
            const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s + i)));
            _mm256_storeu_si256((__m256i *)(void *)(dst + i), _mm256_slli_epi32(w, 16));
        }
        for (; i < n; i++) dst[i] = attn_bf16_to_f32(s[i]);
    } else {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, k256_f16_to_f32(_mm_loadu_si128((const __m128i *)(const void *)(s + i))));
        for (; i < n; i++) dst[i] = attn_f16_to_f32(s[i]);
    }
}

/* 8 floats → 8 bf16 in the low halves of 32-bit lanes, round to nearest even, NaN → quiet NaN. */
static inline __m256i k256_bf16_round(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    /* |u| > 0x7f800000 as signed 32-bit compare: both sides are non-negative */
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}

void attn_k_cvt_from_f32_avx2(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 8 <= n; i += 8) {
            const __m256i r = k256_bf16_round(_mm256_loadu_ps(src + i));
            /* pack the 8 low halves: packus within 128-bit lanes, then gather lanes 0 and 2 */
            const __m256i pk = _mm256_packus_epi32(r, r);
            _mm_storeu_si128((__m128i *)(void *)(d + i),
                             _mm256_castsi256_si128(_mm256_permute4x64_epi64(pk, 0x08)));
        }
        for (; i < n; i++) d[i] = attn_f32_to_bf16(src[i]);
    } else {
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(void *)(d + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (; i < n; i++) d[i] = attn_f32_to_f16(src[i]);
    }
}

/* F32/F16/BF16 → FP8 E4M3 / E5M2 of x / scale: fp8_avx2.h (8-lane encoder, bitwise the scalar one). */
void attn_k_cvt_to_fp8_avx2(const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype, uint8_t *dst,
                            int64_t n) {
    k256_cvt_to_fp8(src, src_dtype, scale, fp8_dtype, dst, n);
}

/* kernel_list.h transpose: whole 8 × 8 blocks through k256_transpose8, the partial ones element by element. */
void attn_k_transpose_avx2(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,
                           int64_t dst_stride) {
    const int64_t r8 = rows & ~(int64_t)7, c8 = cols & ~(int64_t)7;
    for (int64_t r0 = 0; r0 < r8; r0 += 8)
        for (int64_t c0 = 0; c0 < c8; c0 += 8) {
            __m256 x[8];
            for (int i = 0; i < 8; i++)
                x[i] = _mm256_loadu_ps(src + (r0 + i) * src_stride + c0);
            k256_transpose8(x); /* x[c] lane r = src[r0 + r][c0 + c] */
            for (int i = 0; i < 8; i++)
                _mm256_storeu_ps(dst + (c0 + i) * dst_stride + r0, x[i]);
        }
    for (int64_t r = 0; r < rows; r++) /* the rows past r8 (all columns) and the columns past c8 */
        for (int64_t c = r < r8 ? c8 : 0; c < cols; c++)
            dst[c * dst_stride + r] = src[r * src_stride + c];
}
