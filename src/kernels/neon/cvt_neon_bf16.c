/*
 * cvt_neon_bf16.c — the BF16 variant of the neon table (FEAT_BF16, HWCAP2_BF16; compiled with
 * -march=armv8.2-a+bf16, cmake/attn_isa.cmake, and only ever called where dispatch saw HWCAP2_BF16):
 * float32 → BF16 rows by BFCVTN / BFCVTN2 (8 a step) and BFCVT (the tail). Every other entry of the
 * variant is the plain neon one (kernels_neon.c).
 *
 * Bit for bit attn_f32_to_bf16 (core/dtype.h), as the Arm ARM's FPConvertBF gives it with FPCR as Linux
 * starts a process (AH = 0, RMode = RNE, FZ = 0, DN = 0): round to nearest even of every finite value,
 * denormals included (not flushed: FZ = 0), overflow to ±inf; a NaN keeps its sign and the top 6 payload
 * bits, and comes back quiet (FPConvertNaN sets the quiet bit), which is `(u >> 16) | 0x40`. Checked on
 * every 16-bit top half × edge low halves (ties, ±0, denormals, ±max, ±inf, signalling and quiet NaNs with
 * payloads) against the scalar conversion and the other tables by tests/kernels/test_kernel_bits.c under
 * qemu -cpu max. A program that sets FPCR itself (FZ, DN, another rounding mode; e.g. linked with GCC's
 * -ffast-math crtfastmath) changes these results as it changes every FMLA/FCVTN of the neon table.
 *
 * Not used: BFDOT / BFMMLA / BFMLALB/T — see docs/ADDING_AN_ISA.md "arm64 BF16": none of them gives the
 * pinned bits of the float FMA chains.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__) || !defined(__ARM_FEATURE_BF16_VECTOR_ARITHMETIC)
#error "cvt_neon_bf16.c must be compiled for aarch64 with +bf16"
#endif
#include <arm_neon.h>
#include <string.h>

#include "kernels/kernels.h"

void attn_k_cvt_from_f32_neon_bf16(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    if (dtype != ATTN_DTYPE_BF16) {
        attn_k_cvt_from_f32_neon(src, dtype, dst, n);
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const bfloat16x8_t r = vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
        vst1q_u16(d + i, vreinterpretq_u16_bf16(r));
    }
    for (; i < n; i++) {
        const bfloat16_t h = vcvth_bf16_f32(src[i]);
        memcpy(d + i, &h, sizeof h);
    }
}
