/*
 * test_quant.c — FP8 E4M3/E5M2, FP4 E2M1, E8M0 and MX block quantization against hand-computed values
 * (saturation, NaN, subnormals, ties, E8M0 scale edges, block-max clipping, packing), full code-table
 * round trips, the Hadamard sign vector against vllm-omni's and the rotation's orthogonality, and
 * every error path of the public codecs.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "attn/attn_experimental.h"
#include "harness.h"

#define E4M3 ATTN_DTYPE_FP8_E4M3
#define E5M2 ATTN_DTYPE_FP8_E5M2
#define E2M1 ATTN_DTYPE_FP4_E2M1

static void test_e4m3_values(void **state) {
    (void)state;
    const struct {
        float x;
        uint8_t code;
    } cases[] = {
        {0.0f, 0x00},
        {-0.0f, 0x80},
        {1.0f, 0x38},
        {-2.0f, 0xC0},
        {448.0f, 0x7E},
        {449.0f, 0x7E},
        {500.0f, 0x7E},
        {1e30f, 0x7E}, /* saturation */
        {INFINITY, 0x7E},
        {-INFINITY, 0xFE},
        {-1000.0f, 0xFE},
        {0x1p-6f, 0x08},
        /* min normal */ {0x1p-9f, 0x01}, /* min subnormal */
        {0x1p-10f, 0x00},
        /* tie 0 / 2^-9 → even 0 */ {0x1.8p-10f, 0x01},
        {0x1.8p-9f, 0x02},
        /* tie 1/2 subnormal codes → even 2 */ {0x7p-9f, 0x07}, /* max subnormal */
        {1.0625f, 0x38},
        /* tie 1 / 1.125 → even */ {1.1875f, 0x3A}, /* tie → 1.25 */
        {240.0f, 0x77},
        {232.0f, 0x76}, /* tie 224 (0x76) / 240 (0x77) → even 0x76 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t c = attn_fp8_from_float(E4M3, cases[i].x);
        if (c != cases[i].code)
            print_error("e4m3(%a) = 0x%02X, expected 0x%02X\n", (double)cases[i].x, c, cases[i].code);
        assert_int_equal(c, cases[i].code);
    }
    assert_true(isnan(attn_fp8_to_float(E4M3, 0x7F)));
    assert_true(isnan(attn_fp8_to_float(E4M3, 0xFF)));
    assert_int_equal(attn_fp8_from_float(E4M3, NAN) & 0x7F, 0x7F);
    assert_true(attn_fp8_to_float(E4M3, 0x7E) == 448.0f);
    assert_true(attn_fp8_to_float(E4M3, 0xFE) == -448.0f);
    assert_true(attn_fp8_to_float(E4M3, 0x01) == 0x1p-9f);
    assert_true(attn_fp8_to_float(E4M3, 0x07) == 0x7p-9f);
    assert_true(attn_fp8_to_float(E4M3, 0x08) == 0x1p-6f);
    assert_true(attn_fp8_to_float(E4M3, 0x78) == 256.0f); /* S.1111.000 is finite in E4M3FN */
}

static void test_e5m2_values(void **state) {
    (void)state;
    const struct {
        float x;
        uint8_t code;
    } cases[] = {
        {1.0f, 0x3C},     {57344.0f, 0x7B}, {60000.0f, 0x7B},
        {1e9f, 0x7B},     {INFINITY, 0x7B}, {-INFINITY, 0xFB},
        {0x1p-14f, 0x04}, {0x1p-16f, 0x01}, {0x1p-17f, 0x00},
        {0x3p-16f, 0x03}, {1.125f, 0x3C},   /* tie 1 / 1.25 → even */ {1.375f, 0x3E}, /* tie 1.25/1.5 → 1.5 */
        {-0.0f, 0x80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t c = attn_fp8_from_float(E5M2, cases[i].x);
        if (c != cases[i].code)
            print_error("e5m2(%a) = 0x%02X, expected 0x%02X\n", (double)cases[i].x, c, cases[i].code);
        assert_int_equal(c, cases[i].code);
    }
    assert_true(isinf(attn_fp8_to_float(E5M2, 0x7C)) && attn_fp8_to_float(E5M2, 0x7C) > 0);
    assert_true(isinf(attn_fp8_to_float(E5M2, 0xFC)) && attn_fp8_to_float(E5M2, 0xFC) < 0);
    for (uint8_t c = 0x7D; c <= 0x7F; c++)
        assert_true(isnan(attn_fp8_to_float(E5M2, c)));
    assert_true(isnan(attn_fp8_to_float(E5M2, attn_fp8_from_float(E5M2, NAN))));
    assert_true(attn_fp8_to_float(E5M2, 0x7B) == 57344.0f);
    assert_true(attn_fp8_to_float(E5M2, 0x03) == 0x3p-16f);
}

static void test_e2m1_values(void **state) {
    (void)state;
    const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (uint8_t c = 0; c < 16; c++) {
        const float v = attn_fp4_e2m1_to_float(c);
        assert_true(v == (c & 8 ? -grid[c & 7] : grid[c & 7]));
    }
    const struct {
        float x;
        uint8_t code;
    } cases[] = {
        {6.0f, 0x7},
        {7.0f, 0x7},
        {100.0f, 0x7},
        {INFINITY, 0x7},
        {-INFINITY, 0xF}, /* saturation */
        {5.0f, 0x6},
        /* tie 4/6 → even 4 */ {2.5f, 0x4},
        /* tie 2/3 → 2 */ {3.5f, 0x6}, /* tie 3/4 → 4 */
        {0.25f, 0x0},
        /* tie 0/0.5 → 0 */ {0.75f, 0x2},
        /* tie 0.5/1 → 1 */ {0.3f, 0x1},
        {-3.0f, 0xD},
        {1.25f, 0x2},
        /* tie 1/1.5 → 1 */ {1.75f, 0x4},
        /* tie 1.5/2 → 2 */ {NAN, 0x0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t c = attn_fp4_e2m1_from_float(cases[i].x);
        if (c != cases[i].code)
            print_error("e2m1(%a) = 0x%X, expected 0x%X\n", (double)cases[i].x, c, cases[i].code);
        assert_int_equal(c, cases[i].code);
    }
}

static void test_e8m0_edges(void **state) {
    (void)state;
    assert_true(attn_e8m0_to_float(127) == 1.0f);
    assert_true(attn_e8m0_to_float(128) == 2.0f);
    assert_true(attn_e8m0_to_float(0) == 0x1p-127f); /* OCP: 2^-127, a float32 subnormal, not zero */
    assert_true(attn_e8m0_to_float(1) == 0x1p-126f);
    assert_true(attn_e8m0_to_float(254) == 0x1p127f);
    assert_true(isnan(attn_e8m0_to_float(0xFF)));
}

static void test_code_table_round_trip(void **state) {
    (void)state;
    for (int c = 0; c < 256; c++) {
        const float v4 = attn_fp8_to_float(E4M3, (uint8_t)c);
        if (!isnan(v4))
            assert_int_equal(attn_fp8_from_float(E4M3, v4), c);
        const float v5 = attn_fp8_to_float(E5M2, (uint8_t)c);
        if (isfinite(v5))
            assert_int_equal(attn_fp8_from_float(E5M2, v5), c);
    }
    for (int c = 0; c < 16; c++)
        assert_int_equal(attn_fp4_e2m1_from_float(attn_fp4_e2m1_to_float((uint8_t)c)), c);
    /* monotone: magnitude codes 0..max decode increasing (what a nearest-value search relies on) */
    for (int c = 1; c < 0x7F; c++)
        assert_true(attn_fp8_to_float(E4M3, (uint8_t)c) > attn_fp8_to_float(E4M3, (uint8_t)(c - 1)));
}

static void test_scaled_fp8(void **state) {
    (void)state;
    const float src[5] = {1.0f, -3.0f, 900.0f, 0.0f, 2.0f};
    uint8_t codes[5];
    float back[5];
    assert_int_equal(attn_quantize_fp8(E4M3, src, 5, 2.0f, codes), ATTN_STATUS_OK);
    assert_int_equal(codes[0], 0x30); /* 0.5 */
    assert_int_equal(codes[1], 0xBC); /* -1.5 */
    assert_int_equal(codes[2], 0x7E); /* 450 → saturates to 448 */
    assert_int_equal(attn_dequantize_fp8(E4M3, codes, 5, 2.0f, back), ATTN_STATUS_OK);
    assert_true(back[0] == 1.0f && back[1] == -3.0f && back[2] == 896.0f && back[3] == 0.0f && back[4] == 2.0f);
    /* error paths */
    assert_int_equal(attn_quantize_fp8(ATTN_DTYPE_F16, src, 5, 1.0f, codes), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "format"));
    assert_int_equal(attn_quantize_fp8(E4M3, src, -1, 1.0f, codes), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "n=-1"));
    assert_int_equal(attn_quantize_fp8(E4M3, NULL, 5, 1.0f, codes), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "src"));
    assert_int_equal(attn_quantize_fp8(E4M3, src, 5, 0.0f, codes), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "scale"));
    assert_int_equal(attn_dequantize_fp8(E5M2, codes, 5, NAN, back), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_dequantize_fp8(E5M2, codes, 5, 1.0f, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_quantize_fp8(E4M3, NULL, 0, 1.0f, NULL), ATTN_STATUS_OK); /* empty is fine */
}

static void test_mx_blocks(void **state) {
    (void)state;
    float src[70];
    uint8_t el[70], sc[3];
    float back[70];
    for (int i = 0; i < 70; i++)
        src[i] = 0.0f;
    /* block 0: max 1.0 → shared exp 0 − 8 = −8 (byte 119); 1.0 → 256 = code 0x78; 0.5 → 0x70 */
    src[0] = 1.0f, src[1] = 0.5f, src[2] = -0.25f;
    /* block 1: max 1.875 (mantissa above 1.75) → 480 saturates to 448: decodes 1.75 (clipped) */
    src[32] = 1.875f, src[33] = 1.0f;
    /* block 2 (partial, 6 elements): all zero → shared exp −127 (byte 0) */
    assert_int_equal(attn_quantize_mx(E4M3, src, 70, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 119);
    assert_int_equal(el[0], 0x78);
    assert_int_equal(el[1], 0x70);
    assert_int_equal(el[2], 0xE8);
    assert_int_equal(sc[1], 119);
    assert_int_equal(el[32], 0x7E);
    assert_int_equal(sc[2], 0);
    assert_int_equal(attn_dequantize_mx(E4M3, el, sc, 70, back), ATTN_STATUS_OK);
    assert_true(back[0] == 1.0f && back[1] == 0.5f && back[2] == -0.25f);
    assert_true(back[32] == 1.75f && back[33] == 1.0f && back[69] == 0.0f);

    /* tiny block: amax 2^-140 → floor(log2) − 8 = −148, clamped to −127 (byte 0); 2^-140·2^127 = 2^-13 → 0 */
    float tiny[2] = {0x1p-140f, 0x1p-120f};
    assert_int_equal(attn_quantize_mx(E4M3, tiny, 1, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 0);
    assert_int_equal(el[0], 0x00);
    /* 2^-120 → shared −128 → clamped −127; element 2^7 = 128 → code 0x70 */
    assert_int_equal(attn_quantize_mx(E4M3, tiny + 1, 1, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 0);
    assert_int_equal(el[0], 0x70);
    assert_int_equal(attn_dequantize_mx(E4M3, el, sc, 1, back), ATTN_STATUS_OK);
    assert_true(back[0] == 0x1p-120f);
    /* huge block: amax 2^127 → 127 − 8 = 119 (byte 246) */
    float huge = 0x1p127f;
    assert_int_equal(attn_quantize_mx(E4M3, &huge, 1, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 246);
    /* NaN / inf in a block → scale 0xFF, the whole block decodes NaN */
    float withnan[3] = {1.0f, NAN, 2.0f};
    assert_int_equal(attn_quantize_mx(E5M2, withnan, 3, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 0xFF);
    assert_int_equal(attn_dequantize_mx(E5M2, el, sc, 3, back), ATTN_STATUS_OK);
    assert_true(isnan(back[0]) && isnan(back[2]));
    float withinf[2] = {1.0f, -INFINITY};
    assert_int_equal(attn_quantize_mx(E4M3, withinf, 2, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 0xFF);
    /* E5M2 elements: amax 1 → shared 0 − 15 = −15 (byte 112) */
    float one = 1.0f;
    assert_int_equal(attn_quantize_mx(E5M2, &one, 1, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 112);
    assert_int_equal(el[0], 0x78); /* 2^15: exp field 30, mantissa 0 */
}

static void test_mxfp4_packing(void **state) {
    (void)state;
    /* amax 6 → floor(log2 6) − 2 = 0 (byte 127); values on the grid stay exact; 7 → clipped to 6 */
    const float src[3] = {6.0f, -0.5f, 3.0f};
    uint8_t el[2] = {0xAA, 0xAA}, sc[1];
    float back[3];
    assert_int_equal(attn_quantize_mx(E2M1, src, 3, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 127);
    assert_int_equal(el[0], 0x97); /* low nibble 6.0 = 0x7, high nibble −0.5 = 0x9 */
    assert_int_equal(el[1], 0x05); /* 3.0 = 0x5, odd tail's high nibble 0 */
    assert_int_equal(attn_dequantize_mx(E2M1, el, sc, 3, back), ATTN_STATUS_OK);
    assert_true(back[0] == 6.0f && back[1] == -0.5f && back[2] == 3.0f);
    const float clip[2] = {7.0f, 1.0f}; /* 7/2^0 saturates to 6: the block-max clipping of C.2 */
    assert_int_equal(attn_quantize_mx(E2M1, clip, 2, el, sc), ATTN_STATUS_OK);
    assert_int_equal(attn_dequantize_mx(E2M1, el, sc, 2, back), ATTN_STATUS_OK);
    assert_true(back[0] == 6.0f && back[1] == 1.0f);
    const float big[1] = {100.0f}; /* floor(log2 100) = 6 → shared 4: 100/16 = 6.25 → 6 → 96 */
    assert_int_equal(attn_quantize_mx(E2M1, big, 1, el, sc), ATTN_STATUS_OK);
    assert_int_equal(sc[0], 131);
    assert_int_equal(attn_dequantize_mx(E2M1, el, sc, 1, back), ATTN_STATUS_OK);
    assert_true(back[0] == 96.0f);
    /* error paths */
    assert_int_equal(attn_quantize_mx(ATTN_DTYPE_BF16, src, 3, el, sc), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "element_format"));
    assert_int_equal(attn_quantize_mx(E2M1, src, -2, el, sc), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_quantize_mx(E2M1, src, 3, el, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_dequantize_mx(E2M1, NULL, sc, 3, back), ATTN_STATUS_INVALID_ARGUMENT);
}

static void test_hadamard(void **state) {
    (void)state;
    /* vllm-omni's rotation: the exact sign vectors of torch manual_seed(425500) randint(0, 2) */
    const char *s128 = "+++--+-++--++---++++-+--++++----++---+-----++--------+-+++-++++--+++-++--+--+-+--+---+----+--++"
                       "++++++-+++--+-+++-++-+-+--++--+-+";
    int8_t signs[256];
    assert_int_equal(attn_hadamard_signs(128, ATTN_HADAMARD_SEED, signs), ATTN_STATUS_OK);
    for (int i = 0; i < 128; i++)
        assert_int_equal(signs[i], s128[i] == '+' ? 1 : -1);
    assert_int_equal(attn_hadamard_signs(64, ATTN_HADAMARD_SEED, signs), ATTN_STATUS_OK);
    for (int i = 0; i < 64; i++)
        assert_int_equal(signs[i], s128[i] == '+' ? 1 : -1);
    /* e_0·R = s_0·H_0j/sqrt(d) = s_0/sqrt(d) for every j; e_1·R = s_1·(−1)^j/sqrt(d) */
    float rows[2 * 128] = {0}, rot[2 * 128];
    rows[0] = 1.0f, rows[128 + 1] = 1.0f;
    assert_int_equal(attn_hadamard_rotate(rows, 2, 128, ATTN_HADAMARD_SEED, rot), ATTN_STATUS_OK);
    for (int j = 0; j < 128; j++) {
        assert_true(rot[j] == (float)(1.0 / sqrt(128.0)));
        assert_true(rot[128 + j] == (float)((j % 2 ? 1.0 : -1.0) * -1.0 / sqrt(128.0)) * 1.0f);
    }
    /* orthogonality: dot products survive the rotation (q'·k' = q·k) */
    th_rng rng;
    th_rng_seed(&rng, 7);
    for (int64_t d = 1; d <= 256; d *= 2) {
        float x[2 * 256], y[2 * 256];
        for (int64_t i = 0; i < 2 * d; i++)
            x[i] = (float)th_rng_normal(&rng);
        assert_int_equal(attn_hadamard_rotate(x, 2, d, ATTN_HADAMARD_SEED, y), ATTN_STATUS_OK);
        double a = 0, b = 0, na = 0, nb = 0;
        for (int64_t i = 0; i < d; i++)
            a += (double)x[i] * x[d + i], b += (double)y[i] * y[d + i];
        for (int64_t i = 0; i < d; i++)
            na += (double)x[i] * x[i], nb += (double)y[i] * y[i];
        assert_true(fabs(a - b) <= 1e-5 * (1.0 + fabs(a)));
        assert_true(fabs(na - nb) <= 1e-5 * na);
    }
    /* in place equals out of place */
    float z[64], z2[64];
    for (int i = 0; i < 64; i++)
        z[i] = (float)th_rng_normal(&rng);
    assert_int_equal(attn_hadamard_rotate(z, 1, 64, 1234u, z2), ATTN_STATUS_OK);
    assert_int_equal(attn_hadamard_rotate(z, 1, 64, 1234u, z), ATTN_STATUS_OK);
    assert_memory_equal(z, z2, sizeof z);
    /* error paths */
    assert_int_equal(attn_hadamard_rotate(z, 1, 96, ATTN_HADAMARD_SEED, z2), ATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "head_size=96 is not a power of two"));
    assert_int_equal(attn_hadamard_rotate(z, 1, 512, ATTN_HADAMARD_SEED, z2), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_hadamard_rotate(NULL, 1, 64, ATTN_HADAMARD_SEED, z2), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_hadamard_rotate(z, -1, 64, ATTN_HADAMARD_SEED, z2), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_hadamard_signs(64, 1, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_hadamard_signs(0, 1, signs), ATTN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_values),
        cmocka_unit_test(test_e5m2_values),
        cmocka_unit_test(test_e2m1_values),
        cmocka_unit_test(test_e8m0_edges),
        cmocka_unit_test(test_code_table_round_trip),
        cmocka_unit_test(test_scaled_fp8),
        cmocka_unit_test(test_mx_blocks),
        cmocka_unit_test(test_mxfp4_packing),
        cmocka_unit_test(test_hadamard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
