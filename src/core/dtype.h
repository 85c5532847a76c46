/*
 * dtype.h — scalar conversions between float32 and the 16-bit storage types (round to nearest even, NaN preserved,
 * overflow to inf as IEEE). static inline so every ISA folder gets its own copy (docs/CONTRIBUTING.md §7). Vector
 * row conversions used on hot paths live in the kernel tables, not here.
 */
#ifndef ATTN_CORE_DTYPE_H
#define ATTN_CORE_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "attn/attn.h"

static inline uint32_t attn_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float attn_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The shared exponent of an MX block from the bits of its finite max |x|: floor(log2 amax) − emax clamped to
 * [−127, 127], −127 for 0 (the exponent field, or the leading bit of a subnormal's mantissa: value m·2^-149).
 * The integer form of attn_mx_shared_exp (src/quant/quant_formats.c), shared by the code quantization of src/quant
 * and the kernel tables' MX scaling. */
static inline int32_t attn_mx_shared_exp_bits(int32_t emax, uint32_t amax_bits) {
    if (amax_bits == 0)
        return -127;
    const int32_t e = (int32_t)(amax_bits >> 23);
    const int32_t fl = e ? e - 127 : (31 - __builtin_clz(amax_bits)) - 149;
    const int32_t s = fl - emax;
    return s < -127 ? -127 : s > 127 ? 127 : s;
}

/* 2^k for k in [−127, 127], exact (2^-127 is the float32 subnormal 0x00400000). */
static inline float attn_pow2_f32(int32_t k) {
    return attn_bits_f32(k >= -126 ? (uint32_t)(k + 127) << 23 : 0x00400000u);
}

/* E8M0 byte → its float factor 2^(e − 127) (0x00: the float32 subnormal 2^-127; 0xFF: NaN), as OCP MX. */
static inline float attn_e8m0_factor(uint8_t e) {
    return attn_bits_f32(e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23);
}

static inline float attn_bf16_to_f32(uint16_t h) { return attn_bits_f32((uint32_t)h << 16); }

static inline uint16_t attn_f32_to_bf16(float f) {
    uint32_t u = attn_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float attn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return attn_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return attn_bits_f32(sign);
        /* subnormal: man · 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return attn_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t attn_f32_to_f16(float f) {
    uint32_t u = attn_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520 → inf */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        if (a < 0x33000000u) return sign;                     /* < 2^-25 rounds to 0 */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u; /* rebias 127 → 15, round */
    return (uint16_t)(sign | (r >> 13));
}

/* Exact FP8 → float32 (OCP OFP8 rev 1.0; the values of attn_fp8_to_float, a NaN code gives a quiet NaN).
 * E4M3FN: bias 7, no inf, S.1111.111 = NaN; subnormals m·2^-9. */
static inline float attn_fp8_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = (uint32_t)(b & 0x80u) << 24, mag = b & 0x7Fu;
    if (mag == 0x7Fu) return attn_bits_f32(sign | 0x7fc00000u);
    if (mag < 0x08u) { /* zero or subnormal: mag · 2^-9 */
        const float v = (float)mag * 0.001953125f;
        return sign ? -v : v;
    }
    return attn_bits_f32(sign | ((mag + (120u << 3)) << 20)); /* rebias 7 → 127 */
}
/* E5M2 is the upper byte of an IEEE binary16 (bias 15, inf S.11111.00, NaN S.11111.{01,10,11}). */
static inline float attn_fp8_e5m2_to_f32(uint8_t b) {
    if ((b & 0x7Fu) > 0x7Cu) return attn_bits_f32(((uint32_t)(b & 0x80u) << 24) | 0x7fc00000u);
    return attn_f16_to_f32((uint16_t)((uint16_t)b << 8));
}

/* float32 → FP8 by integer operations on the bits, bitwise equal to attn_fp8_from_float (the double-precision
 * encoder of src/quant/quant_formats.c, the oracle): round to nearest even onto the format's grid (its
 * subnormals included), |x| >= the largest finite value (448 / 57344, ±inf included) saturates to it, NaN gives
 * sign|0x7F, the sign bit is kept (−0 → 0x80, a negative that rounds to 0 → 0x80). No branch on the value:
 * every case is computed and selected, so vector versions (cvt_to_fp8 in the kernel tables) follow the same
 * steps lane by lane. man_bits M, bias B; the callers below pass constants.
 *   normal (|x| >= 2^(1−B)): the f32 bits rounded at bit 23−M (the carry may step the exponent), rebiased;
 *   subnormal: code = RNE(m · 2^(e − 151 + B + M)) for the f32 significand m (implicit bit set) and biased
 *   exponent e, a right shift by s = 151 − B − M − e >= 21, clamped to 25 (m < 2^24: any s >= 25 gives 0, and
 *   f32 zeros and subnormals, whose m is then wrong, land there). */
static inline uint8_t attn_f32_to_fp8_bits(uint32_t u, const int man_bits, const int bias) {
    const uint32_t a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
    const int sh = 23 - man_bits;
    const uint32_t min_normal = (uint32_t)(128 - bias) << 23;
    const uint32_t max_bits = man_bits == 3 ? 0x43e00000u : 0x47600000u; /* 448, 57344: 1.75 · 2^emax */
    const uint32_t max_code = man_bits == 3 ? 0x7eu : 0x7bu;
    const uint32_t normal =
        ((a + (1u << (sh - 1)) - 1u + ((a >> sh) & 1u)) >> sh) - ((uint32_t)(127 - bias) << man_bits);
    int32_t s = 151 - bias - man_bits - (int32_t)(a >> 23);
    s = s < 21 ? 21 : s > 25 ? 25 : s;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t sub = (m + (1u << (s - 1)) - 1u + ((m >> s) & 1u)) >> s;
    uint32_t r = a < min_normal ? sub : normal;
    r = a >= max_bits ? max_code : r;
    r = a > 0x7f800000u ? 0x7fu : r;
    return (uint8_t)(sign | r);
}
static inline uint8_t attn_f32_to_fp8_e4m3(float x) { return attn_f32_to_fp8_bits(attn_f32_bits(x), 3, 7); }
static inline uint8_t attn_f32_to_fp8_e5m2(float x) { return attn_f32_to_fp8_bits(attn_f32_bits(x), 2, 15); }

static inline int attn_dtype_is_fp8(attn_dtype d) { return d == ATTN_DTYPE_FP8_E4M3 || d == ATTN_DTYPE_FP8_E5M2; }

/* Element `i` of a float row of `dtype` (F32/F16/BF16, or FP8 widened exactly without its scale) as float. */
static inline float attn_load_f(const void *row, attn_dtype dtype, int64_t i) {
    switch (dtype) {
    case ATTN_DTYPE_F16: return attn_f16_to_f32(((const uint16_t *)row)[i]);
    case ATTN_DTYPE_BF16: return attn_bf16_to_f32(((const uint16_t *)row)[i]);
    case ATTN_DTYPE_FP8_E4M3: return attn_fp8_e4m3_to_f32(((const uint8_t *)row)[i]);
    case ATTN_DTYPE_FP8_E5M2: return attn_fp8_e5m2_to_f32(((const uint8_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

static inline void attn_store_f(void *row, attn_dtype dtype, int64_t i, float x) {
    switch (dtype) {
    case ATTN_DTYPE_F16: ((uint16_t *)row)[i] = attn_f32_to_f16(x); break;
    case ATTN_DTYPE_BF16: ((uint16_t *)row)[i] = attn_f32_to_bf16(x); break;
    default: ((float *)row)[i] = x; break;
    }
}

static inline int attn_dtype_is_float(attn_dtype d) {
    return d == ATTN_DTYPE_F32 || d == ATTN_DTYPE_F16 || d == ATTN_DTYPE_BF16;
}

#endif
