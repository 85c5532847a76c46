/*
 * bf16_pairs_avx512.h — the bf16 pair operand both opt-in tables feed to their dot-product instructions
 * (VDPBF16PS in avx512bf16's decode kernels, TDPBF16PS in amx's prefill tiles): two consecutive rows of a
 * [n][ATTN_QB] float tile (q_t's head dimensions, P's keys) rounded to bf16 and interleaved per lane. Only static
 * inline functions (docs/CONTRIBUTING.md §7): every file that includes it is compiled with -mavx512bf16.
 */
#ifndef ATTN_KERNELS_BF16_PAIRS_AVX512_H
#define ATTN_KERNELS_BF16_PAIRS_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* 16 f32 → 16 bf16 (round to nearest even, VCVTNEPS2BF16) zero-extended into the low halves of 32-bit lanes. */
static inline __attribute__((always_inline)) __m512i kbf_round_lo(__m512 x) {
    return _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x));
}

/* bf16(lo[i]) | bf16(hi[i]) << 16 per lane (round to nearest even): one VCVTNE2PS2BF16 (lo in elements 0..15, hi
 * in 16..31) and one word permute that interleaves them — the bits of kbf_round_lo on each. */
static inline __attribute__((always_inline)) __m512i kbf_pair(__m512 lo, __m512 hi) {
    const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    /* dword i of the index: words i and 16 + i */
    const __m512i idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                                          0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001A000A, 0x001B000B,
                                          0x001C000C, 0x001D000D, 0x001E000E, 0x001F000F);
    return _mm512_permutexvar_epi16(idx, w);
}

/* Lanes [16h, 16h + 16) of rows 2j and 2j + 1 of x (row stride ATTN_QB floats) as bf16 pairs: lane i =
 * bf16(x[2j][16h + i]) | bf16(x[2j + 1][16h + i]) << 16, a row at or past n reading as zeros. */
static inline __attribute__((always_inline)) __m512i kbf_row_pair(const float *x, int64_t j, int h, int64_t n) {
    const __m512 lo = 2 * j < n ? _mm512_loadu_ps(x + 2 * j * ATTN_QB + 16 * h) : _mm512_setzero_ps();
    const __m512 hi = 2 * j + 1 < n ? _mm512_loadu_ps(x + (2 * j + 1) * ATTN_QB + 16 * h) : _mm512_setzero_ps();
    return kbf_pair(lo, hi);
}

#endif
