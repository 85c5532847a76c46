/*
 * quant_prep.h — portable bodies of the quantization helpers of the quant kernel tables (kernels.h, struct
 * attn_quant_kernels): the Hadamard rotation of a row, absolute maxima and the E2M1 encoder. Written as plain
 * loops that the compiler vectorizes with each ISA folder's flags (quant_prep_<isa>.c includes this header);
 * every lane does the scalar operation of the reference code, so the results are bitwise those of
 * src/quant/hadamard.c attn_hadamard_row and attn_qfmt_encode (IEEE add/sub/multiply in double, integer
 * maxima, comparisons). Only static inline functions (docs/CONTRIBUTING.md §7).
 */
#ifndef ATTN_KERNELS_GENERIC_QUANT_PREP_H
#define ATTN_KERNELS_GENERIC_QUANT_PREP_H

#include <stdint.h>
#include <string.h>

#include "core/dtype.h"

/* dst = src·diag(signs)·H_n/sqrt(n) (n a power of two <= 256): sign flip and unnormalised fast Walsh–Hadamard
 * transform in double, times 1/sqrt(n), rounded once to float; tmp [n] doubles; dst may equal src. */
static inline void kqp_hadamard_row(const float *restrict src, const int8_t *restrict signs, int64_t n,
                                    double *restrict tmp, float *dst, double norm) {
    for (int64_t i = 0; i < n; i++)
        tmp[i] = (double)signs[i] * (double)src[i];
    if (n >= 2)
        for (int64_t i = 0; i < n; i += 2) {
            const double a = tmp[i], b = tmp[i + 1];
            tmp[i] = a + b, tmp[i + 1] = a - b;
        }
    if (n >= 4)
        for (int64_t i = 0; i < n; i += 4) {
            const double a0 = tmp[i], a1 = tmp[i + 1], b0 = tmp[i + 2], b1 = tmp[i + 3];
            tmp[i] = a0 + b0, tmp[i + 1] = a1 + b1, tmp[i + 2] = a0 - b0, tmp[i + 3] = a1 - b1;
        }
    for (int64_t len = 4; len < n; len *= 2)
        for (int64_t i = 0; i < n; i += 2 * len) {
            double *restrict lo = tmp + i, *restrict hi = tmp + i + len;
            for (int64_t j = 0; j < len; j++) {
                const double a = lo[j], b = hi[j];
                lo[j] = a + b, hi[j] = a - b;
            }
        }
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)(tmp[i] * norm);
}

/* max |x[i]| as float bits over the values that are not NaN (±inf counts, as fabsf(x) > amax does); *nonfinite
 * gets a nonzero value if some x[i] is NaN or ±inf. */
static inline uint32_t kqp_absmax_bits(const float *restrict x, int64_t n, uint32_t *nonfinite) {
    uint32_t m = 0, nf = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        const uint32_t a = u & 0x7FFFFFFFu;
        nf |= a >= 0x7F800000u;
        const uint32_t c = a <= 0x7F800000u ? a : 0u;
        m = c > m ? c : m;
    }
    *nonfinite |= nf;
    return m;
}

/* The MX scaling of one row along its length: per block of 32 elements (the last one partial), e8[c] = the E8M0
 * byte of the shared exponent of the block's max |x| (0xFF when it holds NaN/inf) and x ← x·2^-shared_exp
 * (0 for a NaN/inf block), as attn_qfmt's MX quantization. */
static inline void kqp_mx_scale_row(float *restrict x, int64_t n, int32_t emax, uint8_t *restrict e8) {
    for (int64_t c0 = 0; c0 < n; c0 += 32) {
        const int64_t m = n - c0 < 32 ? n - c0 : 32;
        uint32_t nf = 0;
        const uint32_t amax_bits = kqp_absmax_bits(x + c0, m, &nf);
        const int bad = nf != 0;
        const int32_t se = bad ? 0 : attn_mx_shared_exp_bits(emax, amax_bits);
        e8[c0 / 32] = bad ? 0xFF : (uint8_t)(se + 127);
        const float inv = bad ? 0.0f : attn_pow2_f32(-se); /* exact: 2^-se in [2^-127, 2^127] */
        for (int64_t i = 0; i < m; i++)
            x[c0 + i] *= inv; /* x·2^-se, one rounding as ldexp → float */
    }
}

/* Per column d < width of rows x[r·width + d], r < rows: amax[d] = max(amax[d], |x|) in bits as above,
 * nonfinite[d] |= NaN/inf seen. */
static inline void kqp_absmax_cols(const float *restrict x, int64_t rows, int64_t width, uint32_t *restrict amax,
                                   uint32_t *restrict nonfinite) {
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *restrict u = (const uint32_t *)(const void *)(x + r * width);
        for (int64_t d = 0; d < width; d++) {
            const uint32_t a = u[d] & 0x7FFFFFFFu;
            nonfinite[d] |= a >= 0x7F800000u;
            const uint32_t c = a <= 0x7F800000u ? a : 0u;
            amax[d] = c > amax[d] ? c : amax[d];
        }
    }
}

/* E2M1 code of y (saturating, ties to even; NaN → 0, as attn_qfmt_encode): the magnitude code counts the
 * rounding thresholds below |y| (ties 0.25 → 0, 0.75 → 1, 1.25 → 1, 1.75 → 2, 2.5 → 2, 3.5 → 4, 5 → 4). */
static inline uint32_t kqp_e2m1(float y) {
    uint32_t u;
    memcpy(&u, &y, 4);
    const uint32_t abits = u & 0x7FFFFFFFu;
    float a;
    memcpy(&a, &abits, 4);
    const uint32_t c = (uint32_t)(a > 0.25f) + (uint32_t)(a >= 0.75f) + (uint32_t)(a > 1.25f) + (uint32_t)(a >= 1.75f) +
                       (uint32_t)(a > 2.5f) + (uint32_t)(a >= 3.5f) + (uint32_t)(a > 5.0f);
    const uint32_t code = ((u >> 28) & 8u) | c;
    return abits > 0x7F800000u ? 0u : code;
}

/* dst[i / 2] = E2M1 codes of y[i] (even i: low nibble), n elements; an odd tail's high nibble is 0. */
static inline void kqp_encode_e2m1(const float *restrict y, int64_t n, uint8_t *restrict dst) {
    for (int64_t i = 0; i + 1 < n; i += 2)
        dst[i / 2] = (uint8_t)(kqp_e2m1(y[i]) | kqp_e2m1(y[i + 1]) << 4);
    if (n & 1)
        dst[n / 2] = (uint8_t)kqp_e2m1(y[n - 1]);
}

#endif
