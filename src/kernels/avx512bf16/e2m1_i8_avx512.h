/*
 * e2m1_i8_avx512.h — what the MXFP4 int8 kernels of the avx512bf16 quant table share (qk_e2m1_i8_avx512bf16.c,
 * pv_e2m1_i8_avx512bf16.c): E2M1 codes widened to the bytes 2·value + bias, and VPDPBUSD. Only static inline
 * functions (docs/CONTRIBUTING.md §7); the files that include it are compiled with the avx512bf16 folder's flags
 * and reach VPDPBUSD through the function target attribute KI8_TARGET.
 */
#ifndef ATTN_KERNELS_E2M1_I8_AVX512_H
#define ATTN_KERNELS_E2M1_I8_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#define KI8_TARGET __attribute__((target("avx512vnni")))

/* m <= 32 E2M1 codes (two per byte, element 2i in the low nibble) from codes as the bytes 2·e2m1 + bias (a nibble
 * table, VPSHUFB), lanes >= m zero. */
static inline __attribute__((always_inline)) __m256i ki8_e2m1x32(const uint8_t *codes, int m, int bias) {
    const __m256i lut = _mm256_add_epi8(_mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1,
                                                         2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12),
                                        _mm256_set1_epi8((char)bias));
    const __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << ((m + 1) / 2)) - 1u), codes);
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i t = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi16(0x0F)),
                                      _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0xF0)), 4));
    return _mm256_maskz_shuffle_epi8((__mmask32)(m >= 32 ? 0xFFFFFFFFu : (1u << m) - 1u), lut, t);
}

/* acc += VPDPBUSD(u8 quads u, s8 quads s). Written as inline assembly: GCC 12 expands _mm512_dpbusd_epi32 on an
 * accumulator array with a register copy in and out of every instruction (two extra moves per multiply-add,
 * which left the kernel front-end bound); the instruction is the same. */
static inline __attribute__((always_inline)) KI8_TARGET __m512i ki8_dp(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}

#endif
