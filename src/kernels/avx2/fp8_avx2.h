/*
 * fp8_avx2.h — float32 → FP8 E4M3 / E5M2 on 8 lanes of 32-bit integers, the steps of attn_f32_to_fp8_bits
 * (core/dtype.h) lane by lane, and the row loop behind the tables' cvt_to_fp8 entry. Only `static inline`
 * functions: cvt_avx2.c includes it for the avx2 table, and avx512/cvt_avx512.c includes it for the avx512
 * tables, each compiling its own copy with its own flags (AVX-512F implies AVX2, F16C is in both flag sets),
 * so no code of one ISA folder runs from another's object file.
 */
#ifndef ATTN_KERNELS_AVX2_FP8_AVX2_H
#define ATTN_KERNELS_AVX2_FP8_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "core/dtype.h"

/* Codes (0..255, in the low byte of each lane) of the 8 floats x, man_bits M and bias B as in
 * attn_f32_to_fp8_bits. Every comparison is signed: the magnitudes are <= 0x7fffffff. */
static inline __m256i k256_f32_to_fp8(__m256 x, const int man_bits, const int bias) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
    const int sh = 23 - man_bits;
    /* normal: round at bit sh (ties to even), rebias */
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, sh), _mm256_set1_epi32(1));
    const __m256i normal = _mm256_sub_epi32(
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32((1 << (sh - 1)) - 1)), lsb), sh),
        _mm256_set1_epi32((127 - bias) << man_bits));
    /* subnormal: significand shifted right by s = 151 − B − M − e, clamped to [21, 25], ties to even */
    const __m256i e = _mm256_srli_epi32(a, 23);
    __m256i s = _mm256_sub_epi32(_mm256_set1_epi32(151 - bias - man_bits), e);
    s = _mm256_min_epi32(_mm256_max_epi32(s, _mm256_set1_epi32(21)), _mm256_set1_epi32(25));
    const __m256i m = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7fffff)), _mm256_set1_epi32(0x800000));
    const __m256i half_m1 = _mm256_sub_epi32(
        _mm256_sllv_epi32(_mm256_set1_epi32(1), _mm256_sub_epi32(s, _mm256_set1_epi32(1))), _mm256_set1_epi32(1));
    const __m256i slsb = _mm256_and_si256(_mm256_srlv_epi32(m, s), _mm256_set1_epi32(1));
    const __m256i sub = _mm256_srlv_epi32(_mm256_add_epi32(_mm256_add_epi32(m, half_m1), slsb), s);
    /* select: subnormal below 2^(1−B), saturation at and above the largest finite value, NaN */
    const __m256i min_normal = _mm256_set1_epi32((128 - bias) << 23);
    const __m256i is_sub = _mm256_cmpgt_epi32(min_normal, a);
    __m256i r = _mm256_blendv_epi8(normal, sub, is_sub);
    const __m256i max_bits = _mm256_set1_epi32(man_bits == 3 ? 0x43e00000 : 0x47600000);
    const __m256i sat = _mm256_cmpgt_epi32(a, _mm256_sub_epi32(max_bits, _mm256_set1_epi32(1)));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(man_bits == 3 ? 0x7e : 0x7b), sat);
    const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7f), nan);
    return _mm256_or_si256(r, sign);
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

/* dst[0..n) = code of float(src[i]) / scale: 32 elements a step, then 8, then the scalar encoder. The quotient
 * is vdivps, correctly rounded like the scalar division, so every code is attn_fp8_from_float's. */
static inline void k256_cvt_to_fp8_m(const void *src, attn_dtype src_dtype, float scale, uint8_t *dst, int64_t n,
                                     const int man_bits, const int bias) {
    const char *s = (const char *)src;
    const int64_t es = src_dtype == ATTN_DTYPE_F32 ? 4 : 2;
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i r0 = k256_f32_to_fp8(_mm256_div_ps(k256_load_as_f32(s + i * es, src_dtype), vs), man_bits, bias);
        const __m256i r1 =
            k256_f32_to_fp8(_mm256_div_ps(k256_load_as_f32(s + (i + 8) * es, src_dtype), vs), man_bits, bias);
        const __m256i r2 =
            k256_f32_to_fp8(_mm256_div_ps(k256_load_as_f32(s + (i + 16) * es, src_dtype), vs), man_bits, bias);
        const __m256i r3 =
            k256_f32_to_fp8(_mm256_div_ps(k256_load_as_f32(s + (i + 24) * es, src_dtype), vs), man_bits, bias);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), k256_pack_bytes(r0, r1, r2, r3));
    }
    for (; i + 8 <= n; i += 8) {
        const __m256i r = k256_f32_to_fp8(_mm256_div_ps(k256_load_as_f32(s + i * es, src_dtype), vs), man_bits, bias);
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
