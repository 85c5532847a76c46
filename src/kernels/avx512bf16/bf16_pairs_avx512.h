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

/* Lanes [16h, 16h + 16) of rows 2j and 2j + 1 of x (row stride ATTN_QB floats) as bf16 pairs: lane i =
 * bf16(x[2j][16h + i]) | bf16(x[2j + 1][16h + i]) << 16, a row at or past n reading as zeros. */
static inline __attribute__((always_inline)) __m512i kbf_row_pair(const float *x, int64_t j, int h, int64_t n) {
    const __m512 lo = 2 * j < n ? _mm512_loadu_ps(x + 2 * j * ATTN_QB + 16 * h) : _mm512_setzero_ps();
    const __m512 hi = 2 * j + 1 < n ? _mm512_loadu_ps(x + (2 * j + 1) * ATTN_QB + 16 * h) : _mm512_setzero_ps();
    return _mm512_or_si512(kbf_round_lo(lo), _mm512_slli_epi32(kbf_round_lo(hi), 16));
}

#endif
