/*
 * test_dtype.c — scalar f16/bf16 conversions (src/core/dtype.h) against hand-computed values: round to
 * nearest even on ties, subnormals, ±0, ±inf, NaN, overflow; exhaustive round trips; a nearest-value
 * property check over random floats. Also attn_dtype_size/name, attn_status_string and the version macros.
 */
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

static float f_bits(uint32_t u) { return attn_bits_f32(u); }

static void test_f16_hand_values(void **state) {
    (void)state;
    const struct {
        float in;
        uint16_t out;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {0.5f, 0x3800},
        {65504.0f, 0x7BFF},            /* max finite */
        {65519.0f, 0x7BFF},            /* just below the rounding midpoint to inf */
        {65520.0f, 0x7C00},            /* midpoint between 65504 and 65536 → even → inf */
        {1e6f, 0x7C00},                /* overflow → inf */
        {-1e6f, 0xFC00},
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
        {6.103515625e-05f, 0x0400},    /* 2^-14, min normal */
        {6.0975551605224609e-05f, 0x03FF}, /* max subnormal */
        {5.9604644775390625e-08f, 0x0001}, /* 2^-24, min subnormal */
        {2.98023223876953125e-08f, 0x0000}, /* 2^-25: tie between 0 and 2^-24 → even 0 */
        {4.4703483581542969e-08f, 0x0001}, /* 1.5·2^-25 → rounds up */
        {1.7881393432617188e-07f, 0x0003}, /* 3·2^-24 exact */
        {1.4901161193847656e-07f, 0x0002}, /* 2.5·2^-24: tie between 2 and 3 → even 2 */
        {2.0861625671386719e-07f, 0x0004}, /* 3.5·2^-24: tie between 3 and 4 → even 4 */
        {1.00048828125f, 0x3C00},      /* 1 + 2^-11: tie → even 0x3C00 */
        {1.00146484375f, 0x3C02},      /* 1 + 3·2^-11: tie → even 0x3C02 */
        {1.0009765625f, 0x3C01},       /* 1 + 2^-10 exact */
        {0x1.002002p+0f, 0x3C01},      /* one f32 ulp above the tie → up */
        {2049.0f, 0x6800},             /* 2048 + 1: tie (spacing 2) → even 2048 */
        {2051.0f, 0x6802},             /* 2048 + 3: tie → even 2052 */
        {3.14159265f, 0x4248},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = attn_f32_to_f16(cases[i].in);
        if (got != cases[i].out)
            fprintf(stderr, "f32→f16 %a: got 0x%04x want 0x%04x\n", (double)cases[i].in, got, cases[i].out);
        assert_int_equal(got, cases[i].out);
    }
    /* NaN stays NaN (quiet), with its sign; a NaN with only low payload bits does not become inf */
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const uint16_t h = attn_f32_to_f16(f_bits(nans[i]));
        assert_int_equal(h & 0x7C00, 0x7C00);
        assert_true((h & 0x03FF) != 0);
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
    /* f16 → f32 */
    assert_true(attn_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    assert_true(attn_f16_to_f32(0x03FF) == 6.0975551605224609e-05f);
    assert_true(attn_f16_to_f32(0x8001) == -5.9604644775390625e-08f);
    assert_true(attn_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(attn_f16_to_f32(0x3555) == 0.333251953125f);
    assert_true(isinf(attn_f16_to_f32(0x7C00)) && attn_f16_to_f32(0x7C00) > 0);
    assert_true(isinf(attn_f16_to_f32(0xFC00)) && attn_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(attn_f16_to_f32(0x7E00)) && isnan(attn_f16_to_f32(0x7C01)));
    assert_true(attn_f16_to_f32(0x8000) == 0.0f && signbit(attn_f16_to_f32(0x8000)));
}

static void test_bf16_hand_values(void **state) {
    (void)state;
    const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3F800000u, 0x3F80}, /* 1 */
        {0x80000000u, 0x8000}, /* −0 */
        {0x3F808000u, 0x3F80}, /* 1 + 2^-8: tie → even */
        {0x3F818000u, 0x3F82}, /* 1 + 3·2^-8: tie → even (up) */
        {0x3F808001u, 0x3F81}, /* just above the tie */
        {0x3F807FFFu, 0x3F80}, /* just below the tie */
        {0x7F7FFFFFu, 0x7F80}, /* FLT_MAX rounds to inf */
        {0x7F7F7FFFu, 0x7F7F}, /* stays the max finite bf16 */
        {0x7F800000u, 0x7F80}, /* inf */
        {0xFF800000u, 0xFF80}, /* −inf */
        {0x00010000u, 0x0001}, /* subnormal, exact */
        {0x00008000u, 0x0000}, /* subnormal tie → even 0 */
        {0x00018000u, 0x0002}, /* subnormal tie → even 2 */
        {0x40490FDBu, 0x4049}, /* pi */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint16_t got = attn_f32_to_bf16(f_bits(cases[i].in));
        if (got != cases[i].out) fprintf(stderr, "f32→bf16 0x%08x: got 0x%04x want 0x%04x\n", cases[i].in, got, cases[i].out);
        assert_int_equal(got, cases[i].out);
    }
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const uint16_t h = attn_f32_to_bf16(f_bits(nans[i]));
        assert_true(isnan(attn_bf16_to_f32(h)));
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
    assert_true(attn_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(attn_bf16_to_f32(0xC040) == -3.0f);
    assert_true(attn_bf16_to_f32(0x0001) == f_bits(0x00010000u));
}

/* Exhaustive: every non-NaN 16-bit pattern survives f16/bf16 → f32 → f16/bf16 bit for bit. */
static void test_round_trips(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = attn_f16_to_f32(h);
        if (isnan(f)) assert_true((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
        else assert_int_equal(attn_f32_to_f16(f), h);
        const float b = attn_bf16_to_f32(h);
        if (!isnan(b)) assert_int_equal(attn_f32_to_bf16(b), h);
    }
}

/* Property: the converted value is a nearest representable value, and on an exact tie the even one. */
static void test_nearest_even_property(void **state) {
    (void)state;
    th_rng r;
    th_rng_seed(&r, 42);
    for (int i = 0; i < 200000; i++) {
        /* finite floats with f16-relevant exponents (2^-27 .. 2^17) and some exact ties */
        const double mag = ldexp(th_rng_range(&r, 1.0, 2.0), (int)th_rng_int(&r, -27, 17));
        float x = (float)(th_rng_int(&r, 0, 1) ? mag : -mag);
        if (i % 4 == 0) { /* the midpoint of two neighbouring f16 values */
            uint16_t h = (uint16_t)th_rng_int(&r, 0, 0x7BFE);
            x = (float)(((double)attn_f16_to_f32(h) + (double)attn_f16_to_f32((uint16_t)(h + 1))) / 2.0);
        }
        const uint16_t h = attn_f32_to_f16(x);
        const double ax = fabs((double)x);
        const uint16_t mag_bits = h & 0x7FFF;
        if (mag_bits == 0x7C00) { /* inf: only if |x| >= 65520 */
            assert_true(ax >= 65520.0);
            continue;
        }
        const double got = fabs((double)attn_f16_to_f32(h));
        const double err = fabs(got - ax);
        if (mag_bits > 0) assert_true(err <= fabs(ax - fabs((double)attn_f16_to_f32((uint16_t)(mag_bits - 1)))));
        if (mag_bits < 0x7BFF) {
            const double up = fabs(ax - (double)attn_f16_to_f32((uint16_t)(mag_bits + 1)));
            assert_true(err <= up);
            if (err == up) assert_int_equal(mag_bits & 1, 0); /* tie → even */
        }
        assert_int_equal(h >> 15, signbit(x) ? 1 : 0);
        /* bf16 likewise, against its neighbours */
        const uint16_t b = attn_f32_to_bf16(x);
        const double gb = fabs((double)attn_bf16_to_f32(b));
        const double eb = fabs(gb - ax);
        const uint16_t bm = b & 0x7FFF;
        const double dn = fabs(ax - fabs((double)attn_bf16_to_f32((uint16_t)(bm - 1))));
        const double dup = fabs(ax - fabs((double)attn_bf16_to_f32((uint16_t)(bm + 1))));
        assert_true(eb <= dn && eb <= dup);
        if (eb == dup || eb == dn) assert_int_equal(bm & 1, 0);
    }
}

static void test_names_sizes_status(void **state) {
    (void)state;
    const struct {
        attn_dtype d;
        size_t size;
        const char *name;
    } dts[] = {
        {ATTN_DTYPE_F32, 4, "f32"},       {ATTN_DTYPE_F16, 2, "f16"},           {ATTN_DTYPE_BF16, 2, "bf16"},
        {ATTN_DTYPE_I32, 4, "i32"},       {ATTN_DTYPE_I64, 8, "i64"},           {ATTN_DTYPE_BOOL, 1, "bool"},
        {ATTN_DTYPE_FP8_E4M3, 1, "fp8_e4m3"}, {ATTN_DTYPE_FP8_E5M2, 1, "fp8_e5m2"}, {ATTN_DTYPE_FP4_E2M1, 0, "fp4_e2m1"},
        {ATTN_DTYPE_E8M0, 1, "e8m0"},     {ATTN_DTYPE_U8, 1, "u8"},
    };
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        assert_int_equal(attn_dtype_size(dts[i].d), dts[i].size);
        assert_string_equal(attn_dtype_name(dts[i].d), dts[i].name);
    }
    assert_int_equal(attn_dtype_size((attn_dtype)99), 0);
    assert_string_equal(attn_dtype_name((attn_dtype)99), "unknown");
    assert_int_equal(attn_dtype_size((attn_dtype)-1), 0);

    /* status values are pinned forever */
    assert_int_equal(ATTN_STATUS_OK, 0);
    assert_int_equal(ATTN_STATUS_INVALID_ARGUMENT, 1);
    assert_int_equal(ATTN_STATUS_UNSUPPORTED, 2);
    assert_int_equal(ATTN_STATUS_OUT_OF_MEMORY, 3);
    assert_int_equal(ATTN_STATUS_OVERFLOW, 4);
    assert_int_equal(ATTN_STATUS_WORKSPACE_TOO_SMALL, 5);
    assert_int_equal(ATTN_STATUS_INTERNAL, 6);
    assert_string_equal(attn_status_string(ATTN_STATUS_OK), "ATTN_STATUS_OK");
    assert_string_equal(attn_status_string(ATTN_STATUS_INVALID_ARGUMENT), "ATTN_STATUS_INVALID_ARGUMENT");
    assert_string_equal(attn_status_string(ATTN_STATUS_UNSUPPORTED), "ATTN_STATUS_UNSUPPORTED");
    assert_string_equal(attn_status_string(ATTN_STATUS_OUT_OF_MEMORY), "ATTN_STATUS_OUT_OF_MEMORY");
    assert_string_equal(attn_status_string(ATTN_STATUS_OVERFLOW), "ATTN_STATUS_OVERFLOW");
    assert_string_equal(attn_status_string(ATTN_STATUS_WORKSPACE_TOO_SMALL), "ATTN_STATUS_WORKSPACE_TOO_SMALL");
    assert_string_equal(attn_status_string(ATTN_STATUS_INTERNAL), "ATTN_STATUS_INTERNAL");
    assert_string_equal(attn_status_string((attn_status)42), "ATTN_STATUS_UNKNOWN");
    assert_string_equal(attn_status_string((attn_status)-1), "ATTN_STATUS_UNKNOWN");
}

static void test_version(void **state) {
    (void)state;
    assert_int_equal(attn_version_number(), ATTN_VERSION_NUMBER);
    assert_int_equal(ATTN_VERSION_NUMBER, ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH);
    assert_string_equal(attn_version_string(), ATTN_VERSION_STRING);
    char buf[32];
    snprintf(buf, sizeof buf, "%d.%d.%d", ATTN_VERSION_MAJOR, ATTN_VERSION_MINOR, ATTN_VERSION_PATCH);
    assert_string_equal(buf, ATTN_VERSION_STRING);
}

static void test_tensor_make(void **state) {
    (void)state;
    float x[24];
    int64_t shape[3] = {2, 3, 4};
    attn_tensor t = attn_tensor_make(x, ATTN_DTYPE_F32, 3, shape);
    assert_ptr_equal(t.data, x);
    assert_int_equal(t.ndim, 3);
    assert_int_equal(t.strides[0], 12);
    assert_int_equal(t.strides[1], 4);
    assert_int_equal(t.strides[2], 1);
    assert_int_equal(t.shape[3], 0);
    attn_tensor c = attn_tensor_make(x, ATTN_DTYPE_F32, 9, NULL); /* clamped, zero shape */
    assert_int_equal(c.ndim, ATTN_MAX_DIMS);
    attn_tensor n = attn_tensor_make(x, ATTN_DTYPE_F32, -1, shape);
    assert_int_equal(n.ndim, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_hand_values),    cmocka_unit_test(test_bf16_hand_values),
        cmocka_unit_test(test_round_trips),        cmocka_unit_test(test_nearest_even_property),
        cmocka_unit_test(test_names_sizes_status), cmocka_unit_test(test_version),
        cmocka_unit_test(test_tensor_make),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
