/*
 * fp8_avx2.h — float32 → FP8 E4M3 / E5M2 on 8 lanes, bitwise attn_f32_to_fp8_bits (core/dtype.h) lane by lane,
 * and the row loop behind the avx2 table's cvt_to_fp8 entry. Only `static inline` functions (cvt_avx2.c
 * includes it), so no code of this ISA folder runs from another's object file.
 */
#ifndef ATTN_KERNELS_AVX2_FP8_AVX2_H
#define ATTN_KERNELS_AVX2_FP8_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "core/dtype.h"

/* Codes (0..255, in the low byte of each lane) of the 8 floats x, man_bits M and bias B as in
 * attn_f32_to_fp8_bits, by float rounding: for |x| in binade E the format's grid spacing is 2^(max(E, 1 − B) − M)
 * (subnormals share the smallest normal binade's), the float spacing at T = 2^(max(E, 1 − B) − M + 23), so
 * (|x| + T) − T rounds |x| onto the grid with ties to even (a carry gives the next binade's first value). E is
 * clamped from above so T stays finite; larger magnitudes (±inf included) stay above the largest finite value
 * and min(·, max) saturates them. A rounded r >= 2^(1 − B) is coded by its float bits shifted and rebiased, a
 * smaller one by the exact integer r·2^(B − 1 + M). NaN → 0x7F; the sign bit ORed in. Integer comparisons are
 * signed: the magnitudes are <= 0x7fffffff. */
static inline __m256i k256_f32_to_fp8(__m256 x, const int man_bits, const int bias) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i e = _mm256_min_epi32(_mm256_max_epi32(_mm256_srli_epi32(a, 23), _mm256_set1_epi32(128 - bias)),
                                       _mm256_set1_epi32(127 + bias + 2));
    const __m256 t = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(23 - man_bits)), 23));
    const __m256 r = _mm256_min_ps(_mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), t), t),
                                   _mm256_set1_ps(man_bits == 3 ? 448.0f : 57344.0f));
    const __m256i rb = _mm256_castps_si256(r);
    const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(rb, 23 - man_bits),
                                            _mm256_set1_epi32((127 - bias) << man_bits));
    const __m256i sub = _mm256_cvttps_epi32(
        _mm256_mul_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32((127 + bias - 1 + man_bits) << 23))));
    __m256i c = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32((128 - bias) << 23), rb));
    c = _mm256_blendv_epi8(c, _mm256_set1_epi32(0x7f), _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
    return _mm256_or_si256(c, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
}

/* 8 source elements at p (F32, F16 or BF16) as float32. F16 by vcvtph2ps, which quiets a signalling NaN where
 * attn_f16_to_f32 keeps it: either way a NaN, and the fp8 code of a NaN depends on its sign only. */
static inline __m256 k256_load_as_f32(const void *p, attn_dtype dtype) {
    if (dtype == ATTN_DTYPE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    if (dtype == ATTN_DTYPE_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    return _mm256_loadu_ps((const float *)p);
}

/* The low bytes of the 32 lanes of r0..r3 in lane order (each lane < 256, so the saturating packs are exact). */
static inline __m256i k256_pack_bytes(__m256i r0, __m256i r1, __m256i r2, __m256i r3) {
    const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(r0, r1), _mm256_packus_epi32(r2, r3));
    /* dwords now hold r0[0..3] r1[0..3] r2[0..3] r3[0..3] | r0[4..7] r1[4..7] r2[4..7] r3[4..7] */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 8 source elements at p as float32, divided by the scale unless it is 1 (x / 1 is x; a NaN stays a NaN). */
static inline __m256 k256_load_scaled(const void *p, attn_dtype dtype, __m256 vs, int unit) {
    const __m256 x = k256_load_as_f32(p, dtype);
    return unit ? x : _mm256_div_ps(x, vs);
}

/* dst[0..n) = code of float(src[i]) / scale: 32 elements a step, then 8, then the scalar encoder. The quotient
 * is vdivps, correctly rounded like the scalar division, so every code is attn_fp8_from_float's. */
static inline void k256_cvt_to_fp8_m(const void *src, attn_dtype src_dtype, float scale, uint8_t *dst, int64_t n,
                                     const int man_bits, const int bias) {
    const char *s = (const char *)src;
    const int64_t es = src_dtype == ATTN_DTYPE_F32 ? 4 : 2;
    const __m256 vs = _mm256_set1_ps(scale);
    const int unit = scale == 1.0f;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i r[4];
        for (int j = 0; j < 4; j++)
            r[j] = k256_f32_to_fp8(k256_load_scaled(s + (i + 8 * j) * es, src_dtype, vs, unit), man_bits, bias);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), k256_pack_bytes(r[0], r[1], r[2], r[3]));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256i r = k256_f32_to_fp8(k256_load_scaled(s + i * es, src_dtype, vs, unit), man_bits, bias);
        _mm_storel_epi64((__m128i *)(void *)(dst + i), _mm256_castsi256_si128(k256_pack_bytes(r, r, r, r)));
    }
    for (; i < n; i++)
        dst[i] = attn_f32_to_fp8_bits(attn_f32_bits(attn_load_f(src, src_dtype, i) / scale), man_bits, bias);
}

static inline void k256_cvt_to_fp8(const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype,
                                   uint8_t *dst, int64_t n) {
    if (fp8_dtype == ATTN_DTYPE_FP8_E5M2)
        k256_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 2, 15);
    else
        k256_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 3, 7);
}

#endif
