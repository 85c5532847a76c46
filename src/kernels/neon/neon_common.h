/*
 * neon_common.h — static inline helpers of the NEON kernel table (docs/CONTRIBUTING.md §7: only static inline here,
 * so no NEON-compiled copy can leak into other code): the 4-lane exp2, widening loads of F32/F16/BF16 rows and the
 * 4×4 in-register transpose.
 *
 * exp2: the recipe and coefficients of k_exp2 (generic/tile_kernels.h) lane for lane — clamp to
 * [−126, 127], n = round to nearest even (FRINTN), f = t − n, degree-7 Taylor of 2^f by Horner, p·2^n by
 * the exponent bits, 0 for t < −126, NaN propagated — with each Horner step one fused multiply-add, as in
 * the AVX2 and AVX-512 tables (exp2_avx2.h, exp2_avx512.h), so the three give the same bits.
 */
#ifndef ATTN_KERNELS_NEON_NEON_COMMON_H
#define ATTN_KERNELS_NEON_NEON_COMMON_H

#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "neon_common.h must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>
#include <stdint.h>

#include "attn/attn.h"
#include "core/dtype.h"

#define KN_ALWAYS_INLINE inline __attribute__((always_inline))

static KN_ALWAYS_INLINE float32x4_t kn_exp2(float32x4_t t) {
    const float32x4_t lo = vdupq_n_f32(-126.0f), hi = vdupq_n_f32(127.0f);
    /* tc = t > lo ? (t < hi ? t : hi) : lo — NaN gives lo, so the integer conversion sees a finite value */
    const float32x4_t tc = vbslq_f32(vcgtq_f32(t, lo), vbslq_f32(vcltq_f32(t, hi), t, hi), lo);
    const float32x4_t n = vrndnq_f32(tc);
    const float32x4_t f = vsubq_f32(tc, n);
    float32x4_t p = vdupq_n_f32(1.5252733804059840e-5f);
    p = vfmaq_f32(vdupq_n_f32(1.5403530393381609e-4f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.3333558146428443e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(9.6181291076284772e-3f), p, f);
    p = vfmaq_f32(vdupq_n_f32(5.5504108664821580e-2f), p, f);
    p = vfmaq_f32(vdupq_n_f32(2.4022650695910071e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(6.9314718055994531e-1f), p, f);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, f);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    const float32x4_t r = vmulq_f32(p, vreinterpretq_f32_s32(e));
    /* t >= lo ? r : (t < lo ? 0 : t): below the range +0, NaN returned as it came */
    const float32x4_t below = vbslq_f32(vcltq_f32(t, lo), vdupq_n_f32(0.0f), t);
    return vbslq_f32(vcgeq_f32(t, lo), r, below);
}

static KN_ALWAYS_INLINE int kn_is_fp8(attn_dtype dt) {
    return dt == ATTN_DTYPE_FP8_E4M3 || dt == ATTN_DTYPE_FP8_E5M2;
}

/* Four fp8 codes (zero-extended to 16 bits) widened exactly to float32, with the bits of cvt_to_f32
 * (attn_fp8_to_float) for every code. E5M2 is the high byte of the binary16 of the same value (same exponent
 * width and bias). E4M3's 7 magnitude bits placed in binary16 position read as the value times 2^-8 (its
 * subnormals m·2^-9 become binary16 subnormals), so the widened float times 2^8 is the value, exactly. NaN
 * codes become the binary16 quiet NaN sign | 0x7E00 first, which FCVTL widens (and the multiply keeps) as
 * sign | 0x7fc00000, the scalar widening's NaN. */
static KN_ALWAYS_INLINE float32x4_t kn_fp8x4(uint16x4_t w, attn_dtype dt) {
    const uint16x4_t sign = vshl_n_u16(vand_u16(w, vdup_n_u16(0x80)), 8);
    const uint16x4_t mag = vand_u16(w, vdup_n_u16(0x7F));
    const uint16x4_t qnan = vorr_u16(sign, vdup_n_u16(0x7E00));
    if (dt == ATTN_DTYPE_FP8_E5M2) {
        const uint16x4_t h = vbsl_u16(vcgt_u16(mag, vdup_n_u16(0x7C)), qnan, vshl_n_u16(w, 8));
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    }
    const uint16x4_t h = vbsl_u16(vceq_u16(mag, vdup_n_u16(0x7F)), qnan, vorr_u16(vshl_n_u16(mag, 7), sign));
    return vmulq_n_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)), 256.0f);
}

/* Four consecutive elements of a row of `dt` (F32/F16/BF16/FP8, a compile-time constant after inlining) as
 * float32: the exact widening (FCVTL for f16 — a signalling NaN comes back quiet, the only difference from
 * cvt_to_f32, and any arithmetic on it gives the same quiet NaN; fp8 by kn_fp8x4). */
static KN_ALWAYS_INLINE float32x4_t kn_load4(const void *row, int64_t i, attn_dtype dt) {
    if (kn_is_fp8(dt)) {
        uint32_t c;
        __builtin_memcpy(&c, (const uint8_t *)row + i, 4);
        return kn_fp8x4(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(c)))), dt);
    }
    if (dt == ATTN_DTYPE_BF16)
        return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)row + i), 16));
    if (dt == ATTN_DTYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + i)));
    return vld1q_f32((const float *)row + i);
}

/* One element of such a row as float32 (the scalar conversions of core/dtype.h). */
static KN_ALWAYS_INLINE float kn_load1(const void *row, int64_t i, attn_dtype dt) {
    if (dt == ATTN_DTYPE_FP8_E4M3) return attn_fp8_e4m3_to_f32(((const uint8_t *)row)[i]);
    if (dt == ATTN_DTYPE_FP8_E5M2) return attn_fp8_e5m2_to_f32(((const uint8_t *)row)[i]);
    if (dt == ATTN_DTYPE_BF16) {
        const uint32_t u = (uint32_t)((const uint16_t *)row)[i] << 16;
        return vgetq_lane_f32(vreinterpretq_f32_u32(vdupq_n_u32(u)), 0);
    }
    if (dt == ATTN_DTYPE_F16)
        return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(((const uint16_t *)row)[i]))), 0);
    return ((const float *)row)[i];
}

/* In-register 4×4 transpose: on return r[i] lane j holds what r[j] lane i held. */
static KN_ALWAYS_INLINE void kn_transpose4(float32x4_t r[4]) {
    const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
    const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
    r[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    r[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    r[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* acc[r] = fma(x, q[r], acc[r]) for r < R ≤ 4: q's lane r broadcast (FMLA by element). */
static KN_ALWAYS_INLINE void kn_fma_lanes(float32x4_t acc[4], float32x4_t x, float32x4_t q, const int R) {
    acc[0] = vfmaq_laneq_f32(acc[0], x, q, 0);
    if (R > 1) acc[1] = vfmaq_laneq_f32(acc[1], x, q, 1);
    if (R > 2) acc[2] = vfmaq_laneq_f32(acc[2], x, q, 2);
    if (R > 3) acc[3] = vfmaq_laneq_f32(acc[3], x, q, 3);
}

#endif
