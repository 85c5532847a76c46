/*
 * test_fp8_encode.c — the fast float → FP8 encoders against the scalar one, bit for bit. The oracle is
 * attn_fp8_from_float (src/quant/quant_formats.c: the value in double, frexp / ldexp / nearbyint), which the
 * fp8 cache write used element by element before; the fast ones are the integer encoder of core/dtype.h
 * (attn_f32_to_fp8_e4m3 / _e5m2) and the cvt_to_fp8 entry of every usable kernel table (generic, avx2, avx512,
 * the opt-in tables, neon: whichever this CPU runs), for E4M3 and E5M2:
 *   (a) every float whose high 16 bits take all 65536 values, each with the low halves 0, 1, 0x7FFF, 0x8000,
 *       0x8001, 0xFFFF (zeros, f32 subnormals, every binade and sign, ±inf, NaNs, huge values), scale 1, cut
 *       into rows of 1..40 elements so every tail of the vector loops runs;
 *   (b) the exact midpoint between every two neighbouring finite codes of each sign (ties to even, subnormal
 *       ties included, 0 and the smallest subnormal), one ulp either side, and the saturation boundary: the
 *       largest finite value, the midpoint to the next binade step past it, their neighbours, FLT_MAX, ±inf;
 *   (c) random values (log-uniform magnitudes over 2^-40 .. 2^24 and uniform bit patterns) divided by each scale
 *       of {1, 0.5, 3.7, 1e-3, 448};
 *   (d) f16 and bf16 rows: all 65536 codes of each, the same scales.
 * Then the cache write end to end: attn_reshape_and_cache_scaled on a ctx set to each usable table, both fp8
 * dtypes, f32 / f16 / bf16 strided key/value rows, head sizes across the vector tails, a skipped slot:
 * the cache bytes equal those of the scalar encoder applied element by element, the rest of the cache
 * untouched.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "harness.h"
#include "kernels/kernels.h"

static const attn_dtype fmts[2] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
static const float scales[5] = {1.0f, 0.5f, 3.7f, 1e-3f, 448.0f};

/* Every usable table: the default list's variants, then the opt-in tables runnable here. */
static int fp8_tables(const struct attn_kernels **tables, const char **names) {
    int n = 0;
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *why_not = NULL;
        const int nv = attn_dispatch_variants(attn_isa_name(i), tables + n, &why_not);
        for (int v = 0; v < nv; v++)
            names[n + v] = attn_isa_name(i);
        n += nv;
    }
    for (int32_t i = 0; attn_isa_opt_in_name(i); i++) {
        const struct attn_kernels *t = attn_dispatch_by_name(attn_isa_opt_in_name(i));
        if (t)
            tables[n] = t, names[n] = attn_isa_opt_in_name(i), n++;
    }
    return n;
}

static uint8_t oracle(attn_dtype fmt, float x, float scale) {
    return attn_fp8_from_float(fmt, x / scale);
}

static uint8_t inline_enc(attn_dtype fmt, float x) {
    return fmt == ATTN_DTYPE_FP8_E4M3 ? attn_f32_to_fp8_e4m3(x) : attn_f32_to_fp8_e5m2(x);
}

/* Encodes src[0..n) (dtype) / scale with every table in rows of 1..40 elements and the inline encoder,
 * and compares each code with the oracle on the widened value. Returns the number of mismatches. */
static long check_all(const void *src, attn_dtype dtype, size_t n, attn_dtype fmt, float scale, const char *what) {
    const struct attn_kernels *tables[16];
    const char *names[16];
    const int nt = fp8_tables(tables, names);
    uint8_t *want = malloc(n), *got = malloc(n + 1);
    assert_non_null(want), assert_non_null(got);
    const size_t es = attn_dtype_size(dtype);
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float x = attn_load_f(src, dtype, (int64_t)i);
        want[i] = oracle(fmt, x, scale);
        if (inline_enc(fmt, x / scale) != want[i] && bad++ < 5)
            fprintf(stderr, "REPRO test_fp8_encode inline %s %s: bits 0x%08x / %a -> 0x%02x, oracle 0x%02x\n",
                    attn_dtype_name(fmt), what, attn_f32_bits(x), (double)scale, inline_enc(fmt, x / scale), want[i]);
    }
    for (int t = 0; t < nt; t++) {
        memset(got, 0xA5, n + 1);
        size_t i = 0, len = 1;
        while (i < n) { /* rows of 1..40 elements: every tail of the 32- and 8-lane loops */
            const size_t m = len < n - i ? len : n - i;
            tables[t]->cvt_to_fp8((const char *)src + i * es, dtype, scale, fmt, got + i, (int64_t)m);
            i += m, len = len % 40 + 1;
        }
        tables[t]->cvt_to_fp8(src, dtype, scale, fmt, got, 0); /* n = 0 writes nothing */
        assert_int_equal(got[n], 0xA5);
        for (size_t j = 0; j < n; j++)
            if (got[j] != want[j] && bad++ < 10)
                fprintf(stderr,
                        "REPRO test_fp8_encode %s cvt_to_fp8 %s %s %s: element %zu bits 0x%08x / %a -> 0x%02x, "
                        "oracle 0x%02x\n",
                        names[t], attn_dtype_name(dtype), attn_dtype_name(fmt), what, j,
                        attn_f32_bits(attn_load_f(src, dtype, (int64_t)j)), (double)scale, got[j], want[j]);
        /* one call over everything: the 32-lane loop on long rows */
        memset(got, 0xA5, n);
        tables[t]->cvt_to_fp8(src, dtype, scale, fmt, got, (int64_t)n);
        if (memcmp(got, want, n) != 0 && bad++ < 10)
            fprintf(stderr, "REPRO test_fp8_encode %s cvt_to_fp8 %s %s %s: one long row differs\n", names[t],
                    attn_dtype_name(dtype), attn_dtype_name(fmt), what);
    }
    free(want), free(got);
    return bad;
}

/* (a) all high halves × 6 low halves, scale 1. */
static void test_fp8_high_halves(void **state) {
    (void)state;
    static const uint32_t lows[6] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    const size_t n = 65536u * 6u;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (uint32_t hi = 0; hi < 65536u; hi++)
        for (int l = 0; l < 6; l++)
            x[hi * 6 + (uint32_t)l] = attn_bits_f32(hi << 16 | lows[l]);
    for (int f = 0; f < 2; f++)
        assert_int_equal(check_all(x, ATTN_DTYPE_F32, n, fmts[f], 1.0f, "high halves"), 0);
    /* the sweep reaches every kind of input: spot-check a few codes against their definitions */
    assert_int_equal(attn_f32_to_fp8_e4m3(-0.0f), 0x80);
    assert_int_equal(attn_f32_to_fp8_e4m3(INFINITY), 0x7E), assert_int_equal(attn_f32_to_fp8_e4m3(-INFINITY), 0xFE);
    assert_int_equal(attn_f32_to_fp8_e5m2(INFINITY), 0x7B), assert_int_equal(attn_f32_to_fp8_e5m2(-1e30f), 0xFB);
    assert_int_equal(attn_f32_to_fp8_e4m3(-NAN), 0xFF), assert_int_equal(attn_f32_to_fp8_e5m2(NAN), 0x7F);
    assert_int_equal(attn_f32_to_fp8_e4m3(0.001953125f), 0x01);       /* 2^-9: smallest E4M3 subnormal */
    assert_int_equal(attn_f32_to_fp8_e5m2(1.52587890625e-05f), 0x01); /* 2^-16 */
    assert_int_equal(attn_f32_to_fp8_e4m3(attn_bits_f32(1)), 0x00);   /* f32 subnormal → +0 */
    assert_int_equal(attn_f32_to_fp8_e5m2(attn_bits_f32(0x80000001u)), 0x80);
    free(x);
}

/* (b) ties between neighbours, their ulp neighbours, and the saturation boundary. */
static void test_fp8_ties_and_saturation(void **state) {
    (void)state;
    for (int f = 0; f < 2; f++) {
        const attn_dtype fmt = fmts[f];
        float x[256 * 3 + 32];
        size_t n = 0;
        for (int sign = 0; sign < 2; sign++)
            for (int c = 0; c < 127; c++) {
                const uint8_t lo = (uint8_t)(sign << 7 | c), hi = (uint8_t)(lo + 1);
                const float v = attn_fp8_to_float(fmt, lo), w = attn_fp8_to_float(fmt, hi);
                if (!isfinite(v) || !isfinite(w))
                    continue;
                const float mid = (v + w) * 0.5f; /* exact: both have at most 4 significant bits */
                assert_true((double)mid == ((double)v + (double)w) * 0.5);
                x[n++] = mid, x[n++] = nextafterf(mid, 0.0f), x[n++] = nextafterf(mid, sign ? -INFINITY : INFINITY);
            }
        const float fmax = fmt == ATTN_DTYPE_FP8_E4M3 ? 448.0f : 57344.0f;
        const float step = fmt == ATTN_DTYPE_FP8_E4M3 ? 32.0f : 8192.0f; /* quantum of the top binade */
        const float edge[] = {fmax,
                              nextafterf(fmax, 0.0f),
                              nextafterf(fmax, INFINITY),
                              fmax + step * 0.5f,
                              nextafterf(fmax + step * 0.5f, 0.0f),
                              nextafterf(fmax + step * 0.5f, INFINITY),
                              fmax + step,
                              2.0f * fmax,
                              FLT_MAX,
                              INFINITY};
        for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
            x[n++] = edge[i], x[n++] = -edge[i];
        assert_true(n <= sizeof x / sizeof x[0]);
        assert_int_equal(check_all(x, ATTN_DTYPE_F32, n, fmt, 1.0f, "ties/saturation"), 0);
        /* the ties land on the even code: the midpoint of codes 1 and 2 encodes as 2, of 2 and 3 as 2 */
        const float m12 = (attn_fp8_to_float(fmt, 1) + attn_fp8_to_float(fmt, 2)) * 0.5f;
        const float m23 = (attn_fp8_to_float(fmt, 2) + attn_fp8_to_float(fmt, 3)) * 0.5f;
        assert_int_equal(inline_enc(fmt, m12), 2), assert_int_equal(inline_enc(fmt, m23), 2);
        assert_int_equal(inline_enc(fmt, attn_fp8_to_float(fmt, 1) * 0.5f), 0); /* half the smallest: → 0 */
        assert_int_equal(inline_enc(fmt, -(fmax + step * 0.5f)), fmt == ATTN_DTYPE_FP8_E4M3 ? 0xFE : 0xFB);
        /* the same ties reached through a scale: x / scale lands exactly on the midpoint */
        for (size_t i = 0; i < n; i++)
            x[i] *= 0.5f;
        assert_int_equal(check_all(x, ATTN_DTYPE_F32, n, fmt, 0.5f, "ties/saturation scale 0.5"), 0);
    }
}

/* (c) random values over the scales. */
static void test_fp8_random_scales(void **state) {
    (void)state;
    const size_t n = 50000;
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    th_rng rng;
    th_rng_seed(&rng, 2024);
    for (int si = 0; si < 5; si++)
        for (int f = 0; f < 2; f++) {
            for (size_t i = 0; i < n; i++) {
                if (i % 4 == 3) /* uniform bit patterns: NaNs, infinities, huge and tiny values */
                    x[i] = attn_bits_f32((uint32_t)th_rng_int(&rng, 0, 0xFFFF) << 16 |
                                         (uint32_t)th_rng_int(&rng, 0, 0xFFFF));
                else
                    x[i] = (float)((th_rng_int(&rng, 0, 1) ? -1.0 : 1.0) * pow(2.0, th_rng_range(&rng, -40.0, 24.0)));
            }
            char what[32];
            snprintf(what, sizeof what, "random scale %g", (double)scales[si]);
            assert_int_equal(check_all(x, ATTN_DTYPE_F32, n, fmts[f], scales[si], what), 0);
        }
    free(x);
}

/* (d) every f16 and bf16 code as the source row, over the scales. */
static void test_fp8_half_inputs(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h);
    assert_non_null(h);
    for (uint32_t i = 0; i < 65536u; i++)
        h[i] = (uint16_t)i;
    const attn_dtype srcs[2] = {ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    for (int d = 0; d < 2; d++)
        for (int si = 0; si < 5; si++)
            for (int f = 0; f < 2; f++) {
                char what[32];
                snprintf(what, sizeof what, "scale %g", (double)scales[si]);
                assert_int_equal(check_all(h, srcs[d], 65536, fmts[f], scales[si], what), 0);
            }
    free(h);
}

/* The cache write: every usable table gives the scalar encoder's bytes. */
static void test_fp8_cache_write_tables(void **state) {
    (void)state;
    const struct attn_kernels *tables[16];
    const char *names[16];
    const int nt = fp8_tables(tables, names);
    const attn_dtype ins[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t heads[] = {1, 7, 8, 31, 33, 40, 64, 100, 128, 256};
    const int64_t T = 9, HK = 2, NB = 3, BS = 4, PAD = 5; /* rows padded: strided views */
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 99);
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
        for (int di = 0; di < 3; di++)
            for (int f = 0; f < 2; f++) {
                const int64_t D = heads[hi], DP = D + PAD;
                const attn_dtype in = ins[di], fmt = fmts[f];
                const size_t n_rows = (size_t)(T * HK * DP), n_cache = (size_t)(2 * NB * BS * HK * D);
                void *kr = th_alloc_nan(in, n_rows), *vr = th_alloc_nan(in, n_rows);
                for (size_t i = 0; i < n_rows; i++) {
                    th_set(kr, in, i, (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -24, 18))));
                    th_set(vr, in, i, (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -24, 18))));
                }
                th_set(kr, in, 1, NAN), th_set(vr, in, 2, INFINITY), th_set(vr, in, 3, -0.0f);
                int64_t slots[9] = {5, 0, -1, 11, 3, 7, 2, 9, 4};
                const int64_t rs[3] = {T, HK, D}, cs[5] = {2, NB, BS, HK, D}, ss[1] = {T};
                attn_tensor tk = attn_tensor_make(kr, in, 3, rs), tv = attn_tensor_make(vr, in, 3, rs);
                tk.strides[0] = tv.strides[0] = HK * DP, tk.strides[1] = tv.strides[1] = DP;
                attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
                const float k_scale = scales[(hi + 1) % 5], v_scale = scales[(hi + 3) % 5];
                uint8_t *init = malloc(n_cache), *expect = malloc(n_cache), *cache = malloc(n_cache);
                for (size_t i = 0; i < n_cache; i++)
                    init[i] = (uint8_t)th_rng_int(&rng, 0, 255);
                memcpy(expect, init, n_cache);
                for (int64_t t = 0; t < T; t++) {
                    if (slots[t] < 0)
                        continue;
                    for (int64_t g = 0; g < HK; g++)
                        for (int64_t d = 0; d < D; d++) {
                            const size_t src = (size_t)((t * HK + g) * DP + d);
                            const size_t dst = (size_t)((slots[t] * HK + g) * D + d); /* block-major = slot-major */
                            expect[dst] = oracle(fmt, th_get(kr, in, src), k_scale);
                            expect[(size_t)(NB * BS * HK * D) + dst] = oracle(fmt, th_get(vr, in, src), v_scale);
                        }
                }
                for (int t = 0; t < nt; t++) {
                    assert_int_equal(attn_ctx_set_isa(ctx, names[t]), ATTN_STATUS_OK);
                    memcpy(cache, init, n_cache);
                    attn_tensor tc = attn_tensor_make(cache, fmt, 5, cs);
                    assert_int_equal(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, k_scale, v_scale),
                                     ATTN_STATUS_OK);
                    if (memcmp(cache, expect, n_cache) != 0)
                        fprintf(stderr, "REPRO test_fp8_encode cache write: isa=%s in=%s fmt=%s D=%lld differs\n",
                                names[t], attn_dtype_name(in), attn_dtype_name(fmt), (long long)D);
                    assert_memory_equal(cache, expect, n_cache);
                }
                free(kr), free(vr), free(init), free(expect), free(cache);
            }
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_high_halves),        cmocka_unit_test(test_fp8_ties_and_saturation),
        cmocka_unit_test(test_fp8_random_scales),      cmocka_unit_test(test_fp8_half_inputs),
        cmocka_unit_test(test_fp8_cache_write_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
