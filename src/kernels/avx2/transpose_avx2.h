/*
 * transpose_avx2.h — the 8 × 8 register transpose shared by the AVX2 kernels. Only static inline functions
 * (docs/CONTRIBUTING.md §7): every file that includes it is compiled with the AVX2 flags.
 */
#ifndef ATTN_KERNELS_AVX2_TRANSPOSE_H
#define ATTN_KERNELS_AVX2_TRANSPOSE_H

#include <immintrin.h>

/* In-register transpose of an 8×8 float block: on return r[i] lane j holds what r[j] lane i held. */
static inline __attribute__((always_inline)) void k256_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}

#endif
