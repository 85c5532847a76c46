/*
 * quant_formats.c — FP8 E4M3/E5M2, FP4 E2M1 and E8M0 encode/decode (OCP OFP8 rev 1.0, OCP MX v1.0) and the
 * scaled FP8 / MX block quantizers of the public API. Arithmetic is done in double, where scaling by powers
 * of two and the final rounding are exact. No allocation. Does not implement non-saturating conversion.
 */
#include <math.h>
#include <stddef.h>

#include "attn/attn_experimental.h"
#include "core/error.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------------------------------------
 * Formats
 * --------------------------------------------------------------------------------------------- */
static const attn_qfmt attn_qfmt_e4m3 = {4, 3, 7, 8, 448.0, 0x7F};
static const attn_qfmt attn_qfmt_e5m2 = {5, 2, 15, 15, 57344.0, 0x7F};
static const attn_qfmt attn_qfmt_e2m1 = {2, 1, 1, 2, 6.0, 0};

const attn_qfmt *attn_qfmt_of(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_FP8_E4M3:
        return &attn_qfmt_e4m3;
    case ATTN_DTYPE_FP8_E5M2:
        return &attn_qfmt_e5m2;
    case ATTN_DTYPE_FP4_E2M1:
        return &attn_qfmt_e2m1;
    default:
        return NULL;
    }
}

uint8_t attn_qfmt_encode(const attn_qfmt *f, float x) {
    const int nbits = 1 + f->exp_bits + f->man_bits;
    const uint8_t sign = signbit(x) ? (uint8_t)(1u << (nbits - 1)) : 0;
    if (isnan(x))
        return f->nan_code ? (uint8_t)(sign | f->nan_code) : 0;
    double a = fabs((double)x);
    if (a >= f->max)
        a = f->max;               /* saturation, ±inf included */
    const int emin = 1 - f->bias; /* exponent of the smallest normal */
    int e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (a == 0.0 || e < emin)
        e = emin;
    /* round to a multiple of the quantum 2^(e − man_bits), ties to even (exact: a power-of-two scale) */
    double q = nearbyint(ldexp(a, f->man_bits - e));
    double val = ldexp(q, e - f->man_bits);
    if (val > f->max)
        val = f->max;
    if (val == 0.0)
        return sign;
    int ev;
    frexp(val, &ev);
    ev -= 1;
    uint32_t exp_field, man_field;
    if (ev < emin) { /* subnormal: value = man · 2^(emin − man_bits) */
        exp_field = 0;
        man_field = (uint32_t)ldexp(val, f->man_bits - emin);
    } else {
        exp_field = (uint32_t)(ev + f->bias);
        man_field = (uint32_t)(ldexp(val, f->man_bits - ev) - ldexp(1.0, f->man_bits));
    }
    return (uint8_t)(sign | (exp_field << f->man_bits) | man_field);
}

float attn_qfmt_decode(const attn_qfmt *f, uint8_t code) {
    const int nbits = 1 + f->exp_bits + f->man_bits;
    const uint32_t mag_mask = (1u << (nbits - 1)) - 1u;
    const uint32_t mag = code & mag_mask;
    const int neg = (code >> (nbits - 1)) & 1;
    if (f->nan_code && mag == f->nan_code)
        return NAN;
    const uint32_t exp_field = mag >> f->man_bits, man_field = mag & ((1u << f->man_bits) - 1u);
    if (f == &attn_qfmt_e5m2 && exp_field == 31u) /* IEEE-like: S.11111.00 = inf, other mantissas NaN */
        return man_field == 0 ? (neg ? -INFINITY : INFINITY) : NAN;
    double v;
    if (exp_field == 0)
        v = ldexp((double)man_field, 1 - f->bias - f->man_bits);
    else
        v = ldexp((double)(man_field | (1u << f->man_bits)), (int)exp_field - f->bias - f->man_bits);
    return (float)(neg ? -v : v);
}

int32_t attn_mx_shared_exp(const attn_qfmt *f, float amax) {
    if (amax == 0.0f)
        return -127;
    int e;
    frexp((double)amax, &e);
    int32_t s = (e - 1) - f->emax;
    if (s < -127)
        s = -127;
    if (s > 127)
        s = 127;
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Public scalar codecs
 * --------------------------------------------------------------------------------------------- */
uint8_t attn_fp8_from_float(attn_dtype format, float x) {
    if (format != ATTN_DTYPE_FP8_E4M3 && format != ATTN_DTYPE_FP8_E5M2)
        return 0;
    return attn_qfmt_encode(attn_qfmt_of(format), x);
}

float attn_fp8_to_float(attn_dtype format, uint8_t bits) {
    if (format != ATTN_DTYPE_FP8_E4M3 && format != ATTN_DTYPE_FP8_E5M2)
        return NAN;
    return attn_qfmt_decode(attn_qfmt_of(format), bits);
}

uint8_t attn_fp4_e2m1_from_float(float x) {
    return attn_qfmt_encode(&attn_qfmt_e2m1, x);
}

float attn_fp4_e2m1_to_float(uint8_t nibble) {
    return attn_qfmt_decode(&attn_qfmt_e2m1, (uint8_t)(nibble & 0xF));
}

float attn_e8m0_to_float(uint8_t bits) {
    if (bits == 0xFF)
        return NAN;
    return (float)ldexp(1.0, (int)bits - 127); /* 2^-127 is a float32 subnormal: exact */
}

/* ---------------------------------------------------------------------------------------------
 * Public vector quantizers
 * --------------------------------------------------------------------------------------------- */
static attn_status attn_check_fp8_args(attn_dtype format, const void *src, int64_t n, float scale, const void *dst) {
    ATTN_CHECK(format == ATTN_DTYPE_FP8_E4M3 || format == ATTN_DTYPE_FP8_E5M2, ATTN_STATUS_INVALID_ARGUMENT,
               "format: dtype %s, expected fp8_e4m3 or fp8_e5m2", attn_dtype_name(format));
    ATTN_CHECK(n >= 0, ATTN_STATUS_INVALID_ARGUMENT, "n=%lld, expected >= 0", (long long)n);
    ATTN_CHECK(n == 0 || src != NULL, ATTN_STATUS_INVALID_ARGUMENT, "src: is NULL");
    ATTN_CHECK(n == 0 || dst != NULL, ATTN_STATUS_INVALID_ARGUMENT, "dst: is NULL");
    ATTN_CHECK(isfinite(scale) && scale > 0.0f, ATTN_STATUS_INVALID_ARGUMENT, "scale=%g, expected a finite value > 0",
               (double)scale);
    return ATTN_STATUS_OK;
}

attn_status attn_quantize_fp8(attn_dtype format, const float *src, int64_t n, float scale, uint8_t *dst) {
    ATTN_TRY(attn_check_fp8_args(format, src, n, scale, dst));
    const attn_qfmt *f = attn_qfmt_of(format);
    for (int64_t i = 0; i < n; i++)
        dst[i] = attn_qfmt_encode(f, src[i] / scale);
    return ATTN_STATUS_OK;
}

attn_status attn_dequantize_fp8(attn_dtype format, const uint8_t *src, int64_t n, float scale, float *dst) {
    ATTN_TRY(attn_check_fp8_args(format, src, n, scale, dst));
    const attn_qfmt *f = attn_qfmt_of(format);
    for (int64_t i = 0; i < n; i++)
        dst[i] = attn_qfmt_decode(f, src[i]) * scale;
    return ATTN_STATUS_OK;
}

static attn_status attn_check_mx_args(attn_dtype format, const void *a, const void *b, const void *c, int64_t n) {
    ATTN_CHECK(format == ATTN_DTYPE_FP8_E4M3 || format == ATTN_DTYPE_FP8_E5M2 || format == ATTN_DTYPE_FP4_E2M1,
               ATTN_STATUS_INVALID_ARGUMENT, "element_format: dtype %s, expected fp8_e4m3, fp8_e5m2 or fp4_e2m1",
               attn_dtype_name(format));
    ATTN_CHECK(n >= 0, ATTN_STATUS_INVALID_ARGUMENT, "n=%lld, expected >= 0", (long long)n);
    ATTN_CHECK(n == 0 || (a && b && c), ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL",
               !a   ? "src/elements"
               : !b ? "elements/scales"
                    : "scales/dst");
    return ATTN_STATUS_OK;
}

static void attn_put_elem(attn_dtype format, uint8_t *elements, int64_t i, uint8_t code) {
    if (format != ATTN_DTYPE_FP4_E2M1) {
        elements[i] = code;
    } else if (i % 2 == 0) {
        elements[i / 2] = (uint8_t)(code & 0xF); /* high nibble written by the odd partner (or stays 0) */
    } else {
        elements[i / 2] = (uint8_t)(elements[i / 2] | (code << 4));
    }
}

static uint8_t attn_get_elem(attn_dtype format, const uint8_t *elements, int64_t i) {
    if (format != ATTN_DTYPE_FP4_E2M1)
        return elements[i];
    return (uint8_t)((elements[i / 2] >> (4 * (i % 2))) & 0xF);
}

attn_status attn_quantize_mx(attn_dtype element_format, const float *src, int64_t n, uint8_t *elements,
                             uint8_t *scales) {
    ATTN_TRY(attn_check_mx_args(element_format, src, elements, scales, n));
    const attn_qfmt *f = attn_qfmt_of(element_format);
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_MX_BLOCK) {
        const int64_t b1 = b0 + ATTN_MX_BLOCK < n ? b0 + ATTN_MX_BLOCK : n;
        float amax = 0.0f;
        int bad = 0;
        for (int64_t i = b0; i < b1; i++) {
            if (!isfinite(src[i]))
                bad = 1;
            else if (fabsf(src[i]) > amax)
                amax = fabsf(src[i]);
        }
        const int32_t se = attn_mx_shared_exp(f, amax);
        scales[b0 / ATTN_MX_BLOCK] = bad ? (uint8_t)0xFF : (uint8_t)(se + 127);
        for (int64_t i = b0; i < b1; i++)
            attn_put_elem(element_format, elements, i,
                          bad ? (uint8_t)0 : attn_qfmt_encode(f, (float)ldexp((double)src[i], -se)));
    }
    return ATTN_STATUS_OK;
}

attn_status attn_dequantize_mx(attn_dtype element_format, const uint8_t *elements, const uint8_t *scales, int64_t n,
                               float *dst) {
    ATTN_TRY(attn_check_mx_args(element_format, elements, scales, dst, n));
    const attn_qfmt *f = attn_qfmt_of(element_format);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t s = scales[i / ATTN_MX_BLOCK];
        const float e = attn_qfmt_decode(f, attn_get_elem(element_format, elements, i));
        dst[i] = s == 0xFF ? NAN : (float)ldexp((double)e, (int)s - 127);
    }
    return ATTN_STATUS_OK;
}
