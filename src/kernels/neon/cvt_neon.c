/*
 * cvt_neon.c — row conversions float32 ↔ F32/F16/BF16 on Advanced SIMD, 8 elements a step with scalar tails
 * (the helpers of core/dtype.h), bit for bit the scalar conversions:
 *   F16 → f32 by FCVTL, with signalling NaNs (which FCVTL quiets) rebuilt by bits as attn_f16_to_f32 does;
 *   f32 → F16 by FCVTN (round to nearest even from FPCR, which Linux leaves at its reset value: RNE, no
 *   flush-to-zero, no default NaN — so NaN payloads come out as attn_f32_to_f16 makes them);
 *   BF16 by a 16-bit shift, and the integer round-to-nearest-even of attn_f32_to_bf16 (quiet NaN kept).
 * Any other dtype (e.g. FP8 rows, once cvt_to_f32 accepts them) goes to the generic table's entry.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "cvt_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/kernels.h"

/* 4 f16 → 4 f32 exactly as attn_f16_to_f32 (signalling NaNs kept signalling). */
static inline float32x4_t kn_f16_to_f32(uint16x4_t h) {
    const float32x4_t r = vcvt_f32_f16(vreinterpret_f16_u16(h));
    const uint32x4_t w = vmovl_u16(h);
    const uint32x4_t is_nan_exp = vceqq_u32(vandq_u32(w, vdupq_n_u32(0x7e00)), vdupq_n_u32(0x7c00));
    const uint32x4_t man = vandq_u32(w, vdupq_n_u32(0x3ff));
    const uint32x4_t snan = vandq_u32(is_nan_exp, vtstq_u32(man, man));
    if (__builtin_expect(vmaxvq_u32(snan) == 0, 1)) return r;
    const uint32x4_t sign = vshlq_n_u32(vandq_u32(w, vdupq_n_u32(0x8000)), 16);
    const uint32x4_t bits = vorrq_u32(vorrq_u32(sign, vshlq_n_u32(man, 13)), vdupq_n_u32(0x7f800000));
    return vbslq_f32(snan, vreinterpretq_f32_u32(bits), r);
}

void attn_k_cvt_to_f32_neon(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    if (dtype != ATTN_DTYPE_BF16 && dtype != ATTN_DTYPE_F16) {
        attn_k_cvt_to_f32_generic(src, dtype, dst, n);
        return;
    }
    const uint16_t *s = (const uint16_t *)src;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 8 <= n; i += 8) {
            const uint16x8_t h = vld1q_u16(s + i);
            vst1q_u32((uint32_t *)(void *)(dst + i), vshll_n_u16(vget_low_u16(h), 16));
            vst1q_u32((uint32_t *)(void *)(dst + i + 4), vshll_high_n_u16(h, 16));
        }
        for (; i < n; i++) dst[i] = attn_bf16_to_f32(s[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            const uint16x8_t h = vld1q_u16(s + i);
            vst1q_f32(dst + i, kn_f16_to_f32(vget_low_u16(h)));
            vst1q_f32(dst + i + 4, kn_f16_to_f32(vget_high_u16(h)));
        }
        for (; i < n; i++) dst[i] = attn_f16_to_f32(s[i]);
    }
}

/* 4 floats → 4 bf16, round to nearest even, NaN → quiet NaN (attn_f32_to_bf16). */
static inline uint16x4_t kn_bf16_round(float32x4_t x) {
    const uint32x4_t u = vreinterpretq_u32_f32(x);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint16x4_t r = vshrn_n_u32(vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7fff)), lsb), 16);
    const uint16x4_t q = vorr_u16(vshrn_n_u32(u, 16), vdup_n_u16(0x40));
    const uint16x4_t nan = vmovn_u32(vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000)));
    return vbsl_u16(nan, q, r);
}

void attn_k_cvt_from_f32_neon(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    if (dtype != ATTN_DTYPE_BF16 && dtype != ATTN_DTYPE_F16) {
        attn_k_cvt_from_f32_generic(src, dtype, dst, n);
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    if (dtype == ATTN_DTYPE_BF16) {
        for (; i + 8 <= n; i += 8)
            vst1q_u16(d + i, vcombine_u16(kn_bf16_round(vld1q_f32(src + i)), kn_bf16_round(vld1q_f32(src + i + 4))));
        for (; i < n; i++) d[i] = attn_f32_to_bf16(src[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            const float16x4_t lo = vcvt_f16_f32(vld1q_f32(src + i)), hi = vcvt_f16_f32(vld1q_f32(src + i + 4));
            vst1q_u16(d + i, vcombine_u16(vreinterpret_u16_f16(lo), vreinterpret_u16_f16(hi)));
        }
        for (; i < n; i++) d[i] = attn_f32_to_f16(src[i]);
    }
}
