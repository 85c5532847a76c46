/*
 * transpose_avx512.h — register transposes shared by the AVX-512 kernels. Only static inline functions
 * (docs/CONTRIBUTING.md §7): every file that includes it is compiled with the AVX-512 flags.
 */
#ifndef ATTN_KERNELS_AVX512_TRANSPOSE_H
#define ATTN_KERNELS_AVX512_TRANSPOSE_H

#include <immintrin.h>

/* In-register transpose of a 16×16 float block: on return r[i] lane j holds what r[j] lane i held. */
static inline __attribute__((always_inline)) void k512_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(u[i], u[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(u[8 + i], u[12 + i], 0xDD);
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
    }
}

/* 8×8 transposes within both 256-bit halves: on return x[j] lane b = old x[b] lane j and lane 8 + b = old x[b]
 * lane 8 + j (b, j < 8). With x[b] from k512_rows8_pair: x[j] lane b = element j of key b, for 16 keys. */
static inline __attribute__((always_inline)) void k512_transpose8x2(__m512 x[8]) {
    __m512 t[8], u[8];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]);
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    /* u[i] / u[4 + i]: 128-bit lanes 0, 1 (rows 0..3 / 4..7 of the low half) and 2, 3 (the high half) hold element
     * i resp. 4 + i ... of four rows each; the permutes gather the eight rows of each element */
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi_idx = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        x[i] = _mm512_permutex2var_ps(u[i], lo_idx, u[4 + i]);
        x[4 + i] = _mm512_permutex2var_ps(u[i], hi_idx, u[4 + i]);
    }
}

/* A 4 × 4 transpose in each 128-bit lane: out[i] lane L = (in[0], in[1], in[2], in[3]) element 4L + i. */
static inline __attribute__((always_inline)) void k512_transpose4_lanes(const __m512 in[4], __m512 out[4]) {
    const __m512 t0 = _mm512_unpacklo_ps(in[0], in[1]), t1 = _mm512_unpackhi_ps(in[0], in[1]);
    const __m512 t2 = _mm512_unpacklo_ps(in[2], in[3]), t3 = _mm512_unpackhi_ps(in[2], in[3]);
    out[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    out[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    out[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    out[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
}

#endif
