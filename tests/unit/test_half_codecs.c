/*
 * test_half_codecs.c — the exported f16 / bf16 codecs (attn_f16_from_float, attn_f16_to_float,
 * attn_bf16_from_float, attn_bf16_to_float) against a literal reference: decoding every one of the 65536 codes
 * of each format (the value read from the bit fields in double), and encoding by a search for the nearest code
 * (ties to the even code, beyond max + half an ulp to inf) over every decoded value, every midpoint between
 * neighbouring codes and its float32 neighbours, and a million random floats over the whole exponent range.
 * NaN stays NaN with its sign; the codecs equal the library's internal ones (core/dtype.h) bit for bit.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "harness.h"

static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Literal value of an f16 code (IEEE binary16 fields), in double; NaN for NaN codes. */
static double ref_f16_value(uint16_t c) {
    const int e = (c >> 10) & 0x1F, m = c & 0x3FF;
    const double sign = (c & 0x8000) ? -1.0 : 1.0;
    if (e == 31)
        return m ? NAN : sign * INFINITY;
    return sign * (e == 0 ? ldexp((double)m, -24) : ldexp(1024.0 + m, e - 25));
}
/* bfloat16: the upper half of a binary32. */
static double ref_bf16_value(uint16_t c) {
    return (double)float_of((uint32_t)c << 16);
}

/* Nearest code by binary search over the positive codes [0, inf_code) (monotonic), ties to even; the value
 * of inf_code taken as max + ulp (the IEEE overflow threshold is max + ulp/2). */
static uint16_t ref_encode(float x, double (*value)(uint16_t), uint16_t inf_code, double next_after_max) {
    const uint16_t sign = signbit(x) ? 0x8000 : 0;
    const double a = fabs((double)x);
    uint16_t lo = 0, hi = inf_code; /* value(lo) <= a < value(hi) */
    if (a >= next_after_max)
        return (uint16_t)(sign | inf_code);
    while (hi - lo > 1) {
        const uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    const double vlo = value(lo), vhi = hi == inf_code ? next_after_max : value(hi);
    const double dlo = a - vlo, dhi = vhi - a;
    uint16_t c = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) == 0 ? lo : hi);
    return (uint16_t)(sign | c);
}
static uint16_t ref_f16_encode(float x) {
    return ref_encode(x, ref_f16_value, 0x7C00, 65536.0);
}
static uint16_t ref_bf16_encode(float x) {
    return ref_encode(x, ref_bf16_value, 0x7F80, ldexp(1.0, 128));
}

static void check_f16(float x) {
    const uint16_t got = attn_f16_from_float(x);
    if (isnan(x)) {
        assert_true(isnan(attn_f16_to_float(got)));
        assert_int_equal(got & 0x8000, signbit(x) ? 0x8000 : 0);
        assert_int_equal(got & 0x0200, 0x0200); /* quiet */
    } else {
        const uint16_t want = ref_f16_encode(x);
        if (got != want)
            fprintf(stderr, "f16(%a) = 0x%04x, expected 0x%04x\n", (double)x, got, want);
        assert_int_equal(got, want);
    }
    assert_int_equal(got, attn_f32_to_f16(x));
}
static void check_bf16(float x) {
    const uint16_t got = attn_bf16_from_float(x);
    if (isnan(x)) {
        assert_true(isnan(attn_bf16_to_float(got)));
        assert_int_equal(got & 0x8000, signbit(x) ? 0x8000 : 0);
        assert_int_equal(got & 0x0040, 0x0040); /* quiet */
    } else {
        const uint16_t want = ref_bf16_encode(x);
        if (got != want)
            fprintf(stderr, "bf16(%a) = 0x%04x, expected 0x%04x\n", (double)x, got, want);
        assert_int_equal(got, want);
    }
    assert_int_equal(got, attn_f32_to_bf16(x));
}

static void test_decode_every_code(void **state) {
    (void)state;
    for (uint32_t c = 0; c < 65536; c++) {
        const uint16_t h = (uint16_t)c;
        const float f = attn_f16_to_float(h), b = attn_bf16_to_float(h);
        const double rf = ref_f16_value(h), rb = ref_bf16_value(h);
        if (isnan(rf)) {
            assert_true(isnan(f));
            assert_int_equal(bits_of(f) >> 31, c >> 15);
        } else {
            assert_true((double)f == rf);
            assert_int_equal(signbit(f) != 0, (c >> 15) != 0); /* -0 stays -0 */
        }
        if (isnan(rb))
            assert_true(isnan(b));
        else
            assert_true((double)b == rb);
        assert_int_equal(bits_of(b), c << 16); /* bf16 decode is exact and keeps the bits */
        assert_int_equal(bits_of(f), bits_of(attn_f16_to_f32(h)));
        /* encode(decode(c)) == c for every non-NaN code, NaN codes stay NaN */
        check_f16(f);
        check_bf16(b);
        if (!isnan(rf))
            assert_int_equal(attn_f16_from_float(f), h);
        if (!isnan(rb))
            assert_int_equal(attn_bf16_from_float(b), h);
    }
}

static void test_encode_midpoints_and_random(void **state) {
    (void)state;
    /* midpoints between neighbouring positive codes (exact in float32 for f16; for bf16 the midpoint has 9
     * significant bits, exact too) and their float32 neighbours: the rounding ties and the values beside them */
    for (uint32_t c = 0; c + 1 < 0x7C00; c++) {
        const float m = (float)((ref_f16_value((uint16_t)c) + ref_f16_value((uint16_t)(c + 1))) / 2);
        const float s[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int i = 0; i < 3; i++)
            check_f16(s[i]), check_f16(-s[i]);
    }
    for (uint32_t c = 0; c + 1 < 0x7F80; c++) {
        const float m = (float)((ref_bf16_value((uint16_t)c) + ref_bf16_value((uint16_t)(c + 1))) / 2);
        const float s[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int i = 0; i < 3; i++)
            check_bf16(s[i]), check_bf16(-s[i]);
    }
    /* the overflow thresholds: 65520 = 65504 + ulp/2 rounds to inf (ties to even: 65504's mantissa is odd) */
    const float specials[] = {65504.0f,
                              65519.99f,
                              65520.0f,
                              1e30f,
                              INFINITY,
                              -INFINITY,
                              0.0f,
                              -0.0f,
                              5.9604645e-8f,
                              2.9802322e-8f,
                              2.9802326e-8f,
                              3.3895314e38f,
                              3.3961776e38f,
                              FLT_MAX,
                              NAN,
                              -NAN,
                              float_of(0x7F800001u),
                              float_of(0xFFC12345u),
                              FLT_MIN,
                              1e-45f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        check_f16(specials[i]), check_bf16(specials[i]);
    assert_int_equal(attn_f16_from_float(65520.0f), 0x7C00);
    assert_int_equal(attn_f16_from_float(65519.99f), 0x7BFF);
    th_rng rng;
    th_rng_seed(&rng, 2024);
    const int n = th_test_small() ? 100000 : 1000000;
    for (int i = 0; i < n; i++) { /* random bit patterns: every exponent, subnormals, NaN payloads */
        const float x = float_of((uint32_t)th_rng_int(&rng, 0, 0xFFFFFFFFLL));
        check_f16(x);
        check_bf16(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_every_code),
        cmocka_unit_test(test_encode_midpoints_and_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
