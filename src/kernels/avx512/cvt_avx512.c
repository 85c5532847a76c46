/*
 * cvt_avx512.c — row conversions float32 ↔ F32/F16/BF16 with zmm vectors and masked tails, FP8 E4M3/E5M2
 * → float32 (exact, for fp8 KV caches) and F32/F16/BF16 → FP8 (the fp8 cache write and quantized attention).
 * F16 uses vcvtph2ps / vcvtps2ph (round to nearest even; bit-identical to attn_f16_to_f32 /
 * attn_f32_to_f16 for every input, signalling NaNs included). BF16 widens by a 16-bit shift and narrows with the
 * integer round-to-nearest-even of attn_f32_to_bf16 (quiet NaN kept), not vcvtneps2bf16, which flushes
 * subnormals and would need AVX512-BF16.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "cvt_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>
#include <string.h>

#include "kernels/avx512/fp8_encode_avx512.h"
#include "kernels/avx512/transpose_avx512.h"
#include "kernels/kernels.h"

static inline __mmask16 k512_tail_mask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

/* 16 f16 → 16 f32. vcvtph2ps quiets signalling NaNs; attn_f16_to_f32 keeps them as they are, so the rare
 * sNaN lanes (exponent 31, quiet bit 0, mantissa ≠ 0) are rebuilt by bits to stay identical to generic. */
static inline __m512 k512_f16_to_f32(__m256i h) {
    const __m512 r = _mm512_cvtph_ps(h);
    const __m512i w = _mm512_cvtepu16_epi32(h);
    const __mmask16 snan =
        _mm512_mask_test_epi32_mask(_mm512_cmpeq_epi32_mask(_mm512_and_si512(w, _mm512_set1_epi32(0x7e00)),
                                                            _mm512_set1_epi32(0x7c00)),
                                    w, _mm512_set1_epi32(0x3ff));
    if (__builtin_expect(snan == 0, 1)) return r;
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16);
    const __m512i man = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13);
    const __m512i bits = _mm512_or_si512(_mm512_or_si512(sign, man), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_mov_ps(r, snan, _mm512_castsi512_ps(bits));
}

/* 16 fp8 codes (zero-extended to 32 bits) → 16 f32, bitwise attn_fp8_e4m3_to_f32 / attn_fp8_e5m2_to_f32:
 * normals by rebiasing the exponent in the integer domain, subnormals as (float)mag·2^(1−bias−man_bits)
 * (exact), NaN codes as sign|0x7fc00000, E5M2 inf as sign|0x7f800000; then the sign bit OR-ed in. */
static inline __m512 k512_fp8_to_f32(__m512i w, int e5m2) {
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x80)), 24);
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi32(0x7F));
    const int man_bits = e5m2 ? 2 : 3;
    const __m512i normal = e5m2 ? _mm512_slli_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(112 << 2)), 21)
                                : _mm512_slli_epi32(_mm512_add_epi32(mag, _mm512_set1_epi32(120 << 3)), 20);
    const __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(e5m2 ? 1.52587890625e-05f : 0.001953125f));
    const __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(1 << man_bits));
    __m512i r = _mm512_mask_mov_epi32(normal, is_sub, _mm512_castps_si512(sub));
    if (e5m2) {
        r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7C)), _mm512_set1_epi32(0x7f800000));
        r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(0x7C)), _mm512_set1_epi32(0x7fc00000));
    } else {
        r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(0x7fc00000));
    }
    return _mm512_castsi512_ps(_mm512_or_si512(r, sign));
}

void attn_k_cvt_to_f32_avx512(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    if (dtype == ATTN_DTYPE_FP8_E4M3 || dtype == ATTN_DTYPE_FP8_E5M2) {
        const uint8_t *b = (const uint8_t *)src;
        const int e5m2 = dtype == ATTN_DTYPE_FP8_E5M2;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, k512_fp8_to_f32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b + i))), e5m2));
        if (i < n) {
            const __mmask16 k = k512_tail_mask(n - i);
            _mm512_mask_storeu_ps(dst + i, k, k512_fp8_to_f32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, b + i)), e5m2));
        }
        return;
    }
    const uint16_t *s = (const uint16_t *)src;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 16 <= n; i += 16) {
            const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(s + i)));
            _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
        }
        if (i < n) {
            const __mmask16 k = k512_tail_mask(n - i);
            const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, s + i));
            _mm512_mask_storeu_epi32(dst + i, k, _mm512_slli_epi32(w, 16));
        }
    } else {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, k512_f16_to_f32(_mm256_loadu_si256((const __m256i *)(const void *)(s + i))));
        if (i < n) {
            const __mmask16 k = k512_tail_mask(n - i);
            _mm512_mask_storeu_ps(dst + i, k, k512_f16_to_f32(_mm256_maskz_loadu_epi16(k, s + i)));
        }
    }
}

/* 16 floats → 16 bf16 (as the low halves of 32-bit lanes), round to nearest even, NaN → quiet NaN. */
static inline __m512i k512_bf16_round(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(r, nan, q);
}

void attn_k_cvt_from_f32_avx512(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(void *)(d + i), _mm512_cvtepi32_epi16(k512_bf16_round(_mm512_loadu_ps(src + i))));
        if (i < n) {
            const __mmask16 k = k512_tail_mask(n - i);
            _mm512_mask_cvtepi32_storeu_epi16(d + i, k, k512_bf16_round(_mm512_maskz_loadu_ps(k, src + i)));
        }
    } else {
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256((__m256i *)(void *)(d + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        if (i < n) {
            const __mmask16 k = k512_tail_mask(n - i);
            const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm256_mask_storeu_epi16(d + i, k, h);
        }
    }
}

/* 16 elements (masked by k) of a F32/F16/BF16 row from element i, widened exactly to f32. */
static inline __m512 k512_load_f32(const void *src, attn_dtype dt, int64_t i, __mmask16 k) {
    if (dt == ATTN_DTYPE_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)src + i);
    const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)src + i);
    if (dt == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

static inline void k512_cvt_to_fp8_m(const void *src, attn_dtype dt, float scale, uint8_t *dst, int64_t n,
                                     const int man_bits, const int bias) {
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;
    if (scale == 1.0f) /* x / 1 is x (a NaN stays a NaN, which is all the encoder looks at) */
        for (; i + 16 <= n; i += 16)
            _mm_storeu_si128((__m128i *)(void *)(dst + i),
                             _mm512_cvtepi32_epi8(k512_f32_to_fp8(k512_load_f32(src, dt, i, 0xFFFF), man_bits, bias)));
    for (; i + 16 <= n; i += 16) {
        const __m512i c = k512_f32_to_fp8(_mm512_div_ps(k512_load_f32(src, dt, i, 0xFFFF), vs), man_bits, bias);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm512_cvtepi32_epi8(c));
    }
    if (i < n) {
        const __mmask16 k = k512_tail_mask(n - i);
        const __m512 x = _mm512_div_ps(k512_load_f32(src, dt, i, k), vs);
        _mm_mask_storeu_epi8(dst + i, k, _mm512_cvtepi32_epi8(k512_f32_to_fp8(x, man_bits, bias)));
    }
}

/* F32/F16/BF16 → FP8 E4M3 / E5M2 of x / scale (the quantized-attention codes, fp8 cache writes) on 16 lanes:
 * rows widened exactly to f32, the correctly rounded quotient (vdivps; skipped for scale 1), then
 * k512_f32_to_fp8, so every code is the scalar encoder's (attn_f32_to_fp8_bits). */
void attn_k_cvt_to_fp8_avx512(const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype, uint8_t *dst,
                              int64_t n) {
    if (fp8_dtype == ATTN_DTYPE_FP8_E5M2)
        k512_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 2, 15);
    else
        k512_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 3, 7);
}

/* A source of at most 4 rows (a decode block's queries into q_t): per 16 columns, one 4 × 4 transpose in each
 * 128-bit lane (lane L of u[i] = rows 0..3 of column 4L + i) and a 4-float store per column, instead of a
 * 16 × 16 transpose of mostly zero rows. */
static void k512_transpose_rows4(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,
                                 int64_t dst_stride) {
    const __mmask8 rm = (__mmask8)((1u << rows) - 1u);
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
        const int nc = cols - c0 < 16 ? (int)(cols - c0) : 16;
        const __mmask16 cm = k512_tail_mask(nc);
        __m512 x[4];
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) x[i] =
            i < rows ? _mm512_maskz_loadu_ps(cm, src + i * src_stride + c0) : _mm512_setzero_ps();
        __m512 u[4];
        k512_transpose4_lanes(x, u);
        float *d = dst + c0 * dst_stride;
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            if (i < nc)
                _mm_mask_storeu_ps(d + i * dst_stride, rm, _mm512_castps512_ps128(u[i]));
            if (4 + i < nc)
                _mm_mask_storeu_ps(d + (4 + i) * dst_stride, rm, _mm512_extractf32x4_ps(u[i], 1));
            if (8 + i < nc)
                _mm_mask_storeu_ps(d + (8 + i) * dst_stride, rm, _mm512_extractf32x4_ps(u[i], 2));
            if (12 + i < nc)
                _mm_mask_storeu_ps(d + (12 + i) * dst_stride, rm, _mm512_extractf32x4_ps(u[i], 3));
        }
    }
}

/* A source of at most 4 columns (o_t's columns into output rows): per 16 rows, four rows' 4 floats in the
 * 128-bit lanes of each of 4 vectors (lane L of z[i] = row 4L + i), then one 4 × 4 transpose in each lane, which
 * leaves column c's 16 rows in order in w[c]. */
static void k512_transpose_cols4(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,
                                 int64_t dst_stride) {
    const __mmask8 cm = (__mmask8)((1u << cols) - 1u);
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
        __m512 z[4];
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
            __m128 q[4];
            _Pragma("GCC unroll 4") for (int L = 0; L < 4; L++) q[L] =
                4 * L + i < nr ? _mm_maskz_loadu_ps(cm, src + (r0 + 4 * L + i) * src_stride) : _mm_setzero_ps();
            z[i] = _mm512_insertf32x4(
                _mm512_insertf32x4(_mm512_insertf32x4(_mm512_castps128_ps512(q[0]), q[1], 1), q[2], 2), q[3], 3);
        }
        __m512 w[4];
        k512_transpose4_lanes(z, w);
        const __mmask16 rm = k512_tail_mask(nr);
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) if (c < cols)
            _mm512_mask_storeu_ps(dst + c * dst_stride + r0, rm, w[c]);
    }
}

/* kernel_list.h transpose: 16 × 16 blocks through k512_transpose16, partial blocks by masked loads and stores
 * (a missing source row reads as zeros and its column is not stored); sources of at most 4 rows or 4 columns
 * (decode's q_t and output rows) through 4 × 4 transposes in the 128-bit lanes. */
void attn_k_transpose_avx512(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,
                             int64_t dst_stride) {
    if (rows <= 4) {
        if (rows > 0)
            k512_transpose_rows4(src, src_stride, rows, cols, dst, dst_stride);
        return;
    }
    if (cols <= 4) {
        if (cols > 0)
            k512_transpose_cols4(src, src_stride, rows, cols, dst, dst_stride);
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
        const __mmask16 rm = k512_tail_mask(nr);
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            const int nc = cols - c0 < 16 ? (int)(cols - c0) : 16;
            const __mmask16 cm = k512_tail_mask(nc);
            __m512 x[16];
            for (int i = 0; i < 16; i++)
                x[i] = i < nr ? _mm512_maskz_loadu_ps(cm, src + (r0 + i) * src_stride + c0) : _mm512_setzero_ps();
            k512_transpose16(x); /* x[c] lane r = src[r0 + r][c0 + c] */
            for (int i = 0; i < nc; i++)
                _mm512_mask_storeu_ps(dst + (c0 + i) * dst_stride + r0, rm, x[i]);
        }
    }
}
