/*
 * test_quant_codes.c — the code path of attn_forward_quant (Q/K/V kept as 8/4-bit codes + scales,
 * src/attention/fwd_quant.c; docs/DIFFUSION.md §5), per quant kernel table:
 *   "avx2" (a context on the avx2 table): bitwise equal to the fake-quantization path (ATTN_QUANT_KERNELS=fake)
 *   on the same table, out and LSE;
 *   "avx512bf16" and "amx" (the bf16 path; where the CPU has AVX512-BF16, and AMX for the second; skipped with
 *   the reason printed elsewhere): within th_tol_for_quant_bf16 of the double oracle attn_ref_forward_quant;
 * both over random shapes (head sizes 64..256 and odd 33 / 7, rotation on where a power of two, GQA, BSND/BNSD, partial
 * scale blocks, head_size_v != head_size, f32/f16/bf16 inputs, LSE), and bitwise the same for 1, 2 and 3 threads. REPRO
 * lines give the seed; ATTN_TEST_SEED reruns one case.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn/attn_experimental.h"
#include "dispatch/dispatch.h"
#include "harness.h"
#include "kernels/generic/quant_prep.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

typedef struct qcase {
    int fmt, rot;
    attn_layout layout;
    attn_dtype dt;
    int64_t B, Sq, Sk, H, Hk, D, Dv;
    int32_t qbr, kvbr;
} qcase;

static qcase qcase_draw(th_rng *r, int small) {
    static const int64_t ds[7] = {64, 96, 128, 192, 256, 33, 7}; /* and odd ones: a pad element, partial MX blocks */
    qcase c;
    c.fmt = (int)th_rng_int(r, 0, 3);
    c.D = ds[th_rng_int(r, 0, 6)];
    c.rot = (c.D & (c.D - 1)) == 0 ? (int)th_rng_int(r, 0, 1) : 0;
    c.Dv = th_rng_int(r, 0, 2) == 0 ? th_rng_int(r, 1, 200) : c.D;
    c.layout = th_rng_int(r, 0, 1) ? ATTN_LAYOUT_BNSD : ATTN_LAYOUT_BSND;
    static const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    c.dt = dts[th_rng_int(r, 0, 2)];
    c.B = th_rng_int(r, 1, 2);
    c.Hk = th_rng_int(r, 1, 2);
    c.H = c.Hk * th_rng_int(r, 1, 3);
    c.Sq = th_rng_int(r, 1, small ? 70 : 150);
    c.Sk = th_rng_int(r, 1, small ? 300 : 700);
    c.qbr = (int32_t)th_rng_int(r, 1, 160);
    c.kvbr = (int32_t)th_rng_int(r, 1, 300);
    return c;
}

typedef struct qbufs {
    void *q, *k, *v;
    attn_tensor tq, tk, tv;
    int64_t os[4], ls[3];
} qbufs;

static void qbufs_make(th_rng *r, const qcase *c, qbufs *b) {
    int64_t qs[4] = {c->B, c->Sq, c->H, c->D}, ks[4] = {c->B, c->Sk, c->Hk, c->D}, vs[4] = {c->B, c->Sk, c->Hk, c->Dv};
    int64_t os[4] = {c->B, c->Sq, c->H, c->Dv};
    if (c->layout == ATTN_LAYOUT_BNSD) {
        qs[1] = c->H, qs[2] = c->Sq, ks[1] = vs[1] = c->Hk, ks[2] = vs[2] = c->Sk, os[1] = c->H, os[2] = c->Sq;
    }
    b->q = th_alloc_fill(r, c->dt, (size_t)(c->B * c->Sq * c->H * c->D), -3, 3);
    b->k = th_alloc_fill(r, c->dt, (size_t)(c->B * c->Sk * c->Hk * c->D), -3, 3);
    b->v = th_alloc_fill(r, c->dt, (size_t)(c->B * c->Sk * c->Hk * c->Dv), -1, 1);
    b->tq = attn_tensor_make(b->q, c->dt, 4, qs);
    b->tk = attn_tensor_make(b->k, c->dt, 4, ks);
    b->tv = attn_tensor_make(b->v, c->dt, 4, vs);
    memcpy(b->os, os, sizeof os);
    b->ls[0] = c->B, b->ls[1] = c->H, b->ls[2] = c->Sq;
}

typedef struct qout {
    void *o;
    float *l;
    attn_tensor to, tl;
} qout;

static void qout_make(const qcase *c, qbufs *b, qout *o) {
    o->o = th_alloc_nan(c->dt, (size_t)(c->B * c->Sq * c->H * c->Dv));
    o->l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(c->B * c->H * c->Sq));
    o->to = attn_tensor_make(o->o, c->dt, 4, b->os);
    o->tl = attn_tensor_make(o->l, ATTN_DTYPE_F32, 3, b->ls);
}

static attn_status qrun(attn_ctx *ctx, const qcase *c, qbufs *b, qout *o) {
    attn_quant_params qp;
    attn_quant_params_init(&qp, (attn_quant_format)c->fmt);
    qp.rotate = c->rot, qp.q_block_rows = c->qbr, qp.kv_block_rows = c->kvbr;
    size_t ws;
    attn_status st = attn_forward_quant_workspace_size(c->layout, &b->tq, &b->tk, &b->tv, &ws);
    if (st != ATTN_STATUS_OK)
        return st;
    void *w = malloc(ws ? ws : 1);
    st = attn_forward_quant(ctx, c->layout, &b->tq, &b->tk, &b->tv, &qp, NULL, &o->to, &o->tl, w, ws);
    free(w);
    return st;
}

/* The workspace of the code path without the wide operands (one byte per element plus the scales, each part
 * rounded up to 64 bytes: api_diffusion.c): enough to run, so the driver stages every K/V tile itself. */
static size_t codes_only_bytes(const qcase *c) {
    const int64_t mats[3] = {c->B * c->H, c->B * c->Hk, c->B * c->Hk}, seqs[3] = {c->Sq, c->Sk, c->Sk};
    const int64_t widths[3] = {c->D, c->D, c->Dv};
    size_t total = 0;
    for (int t = 0; t < 3; t++) {
        const int64_t per_row = (widths[t] + 31) / 32 < 4 ? 4 : (widths[t] + 31) / 32;
        int64_t sc = mats[t] * seqs[t] * per_row;
        const int64_t sv = mats[t] * ((seqs[t] + 31) / 32) * widths[t];
        if (t == 2 && sv > sc)
            sc = sv;
        total += (size_t)((sc + 63) & ~(int64_t)63) + (size_t)((mats[t] * seqs[t] * widths[t] + 63) & ~(int64_t)63);
    }
    return total;
}

/* The same call on a workspace of exactly `ws` bytes. */
static attn_status qrun_ws(attn_ctx *ctx, const qcase *c, qbufs *b, qout *o, size_t ws) {
    attn_quant_params qp;
    attn_quant_params_init(&qp, (attn_quant_format)c->fmt);
    qp.rotate = c->rot, qp.q_block_rows = c->qbr, qp.kv_block_rows = c->kvbr;
    void *w = malloc(ws ? ws : 1);
    const attn_status st = attn_forward_quant(ctx, c->layout, &b->tq, &b->tk, &b->tv, &qp, NULL, &o->to, &o->tl, w, ws);
    free(w);
    return st;
}

static void qrepro(uint64_t seed, const qcase *c) {
    print_message("REPRO ATTN_TEST_SEED=%llu fmt=%d rot=%d layout=%d dt=%d B=%lld Sq=%lld Sk=%lld H=%lld Hk=%lld "
                  "D=%lld Dv=%lld qbr=%d kvbr=%d\n",
                  (unsigned long long)seed, c->fmt, c->rot, (int)c->layout, (int)c->dt, (long long)c->B,
                  (long long)c->Sq, (long long)c->Sk, (long long)c->H, (long long)c->Hk, (long long)c->D,
                  (long long)c->Dv, (int)c->qbr, (int)c->kvbr);
}

static int num_cases(void) {
    return th_test_emulated() ? 4 : th_test_small() ? 12 : 40;
}

static uint64_t case_seed(int i) {
    const char *env = getenv("ATTN_TEST_SEED");
    return env ? strtoull(env, NULL, 10) : 9000u + (uint64_t)i;
}

/* Thread counts 1, 2, 3 give the same bits as `ref` (out and LSE). */
static void check_threads(attn_ctx *ctx, const qcase *c, qbufs *b, const qout *ref) {
    for (int32_t t = 1; t <= 3; t++) {
        qout o;
        qout_make(c, b, &o);
        assert_int_equal(attn_ctx_set_num_threads(ctx, t), ATTN_STATUS_OK);
        assert_int_equal(qrun(ctx, c, b, &o), ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&o.to, &ref->to));
        assert_true(th_bitwise_equal(&o.tl, &ref->tl));
        free(o.o), free(o.l);
    }
    assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
}

static void test_avx2_bitwise_fake(void **state) {
    (void)state;
    if (!attn_isa_available("avx2")) {
        print_message("skipped: the avx2 table is not usable on this machine\n");
        skip();
    }
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_isa(ctx, "avx2"), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
    assert_string_equal(attn_forward_quant_kernels(ctx), "avx2");
    const int n = getenv("ATTN_TEST_SEED") ? 1 : num_cases();
    for (int i = 0; i < n; i++) {
        const uint64_t seed = case_seed(i);
        th_rng rng;
        th_rng_seed(&rng, seed);
        qcase c = qcase_draw(&rng, th_test_small());
        qbufs b;
        qbufs_make(&rng, &c, &b);
        qout fast, fake;
        qout_make(&c, &b, &fast);
        qout_make(&c, &b, &fake);
        assert_int_equal(qrun(ctx, &c, &b, &fast), ATTN_STATUS_OK);
        setenv("ATTN_QUANT_KERNELS", "fake", 1);
        assert_string_equal(attn_forward_quant_kernels(ctx), "fake");
        assert_int_equal(qrun(ctx, &c, &b, &fake), ATTN_STATUS_OK);
        unsetenv("ATTN_QUANT_KERNELS");
        const int eq = th_bitwise_equal(&fast.to, &fake.to) && th_bitwise_equal(&fast.tl, &fake.tl);
        if (!eq)
            qrepro(seed, &c);
        assert_true(eq);
        if (i < 3)
            check_threads(ctx, &c, &b, &fast);
        free(fast.o), free(fast.l), free(fake.o), free(fake.l), free(b.q), free(b.k), free(b.v);
    }
    attn_ctx_destroy(ctx);
}

/* The avx512bf16 quant table with its VPDPBUSD MXFP4 entries where the CPU has them: on a CPU with AMX the default
 * quant table is amx's, whose MXFP4 runs the bf16 path on tiles, so the table is asked for by name
 * (ATTN_QUANT_KERNELS=avx512bf16, read by attn_dispatch_quant). */
static const struct attn_quant_kernels *vnni_quant(const struct attn_kernels *f) {
    setenv("ATTN_QUANT_KERNELS", "avx512bf16", 1);
    const struct attn_quant_kernels *qk = attn_dispatch_quant(f);
    unsetenv("ATTN_QUANT_KERNELS");
    return qk;
}

static void bf16_vs_oracle(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    if (!th_quant_kernels_bf16(attn_forward_quant_kernels(ctx))) {
        print_message(
            "skipped: the bf16 quant kernels (avx512bf16, amx) do not run here (CPU without AVX512-BF16, or not "
            "compiled in); a default context runs \"%s\"\n",
            attn_forward_quant_kernels(ctx));
        attn_ctx_destroy(ctx);
        skip();
    }
    assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
    const int n = getenv("ATTN_TEST_SEED") ? 1 : num_cases();
    double worst = 0.0, worst_l = 0.0;
    for (int i = 0; i < n; i++) {
        const uint64_t seed = case_seed(i) + 100000u;
        th_rng rng;
        th_rng_seed(&rng, seed);
        qcase c = qcase_draw(&rng, th_test_small());
        qbufs b;
        qbufs_make(&rng, &c, &b);
        qout fast, ref;
        qout_make(&c, &b, &fast);
        qout_make(&c, &b, &ref);
        assert_int_equal(qrun(ctx, &c, &b, &fast), ATTN_STATUS_OK);
        attn_quant_params qp;
        attn_quant_params_init(&qp, (attn_quant_format)c.fmt);
        qp.rotate = c.rot, qp.q_block_rows = c.qbr, qp.kv_block_rows = c.kvbr;
        assert_int_equal(attn_ref_forward_quant(c.layout, &b.tq, &b.tk, &b.tv, &qp, NULL, &ref.to, &ref.tl),
                         ATTN_STATUS_OK);
        size_t bad, bad_l;
        const th_tol tol = th_tol_for_quant_kernels(c.dt, c.fmt);
        const double err = th_compare(&fast.to, &ref.to, tol, 1.0, &bad);
        const double err_l = th_compare_lse(&fast.tl, &ref.tl, tol, &bad_l);
        if (err > worst)
            worst = err;
        if (err_l > worst_l)
            worst_l = err_l;
        if (bad || bad_l) {
            qrepro(seed, &c);
            print_error("%zu bad outputs (max err %g), %zu bad LSE (max err %g)\n", bad, err, bad_l, err_l);
        }
        assert_int_equal(bad, 0);
        assert_int_equal(bad_l, 0);
        { /* a workspace of the codes only: every tile staged by the driver, not the wide operands — same bits */
            qout staged;
            qout_make(&c, &b, &staged);
            const size_t ws = codes_only_bytes(&c);
            assert_int_equal(qrun_ws(ctx, &c, &b, &staged, ws - 1), ATTN_STATUS_WORKSPACE_TOO_SMALL);
            assert_int_equal(qrun_ws(ctx, &c, &b, &staged, ws), ATTN_STATUS_OK);
            const int eq = th_bitwise_equal(&staged.to, &fast.to) && th_bitwise_equal(&staged.tl, &fast.tl);
            if (!eq)
                qrepro(seed, &c);
            assert_true(eq);
            free(staged.o), free(staged.l);
        }
        if (i < 3)
            check_threads(ctx, &c, &b, &fast);
        free(fast.o), free(fast.l), free(ref.o), free(ref.l), free(b.q), free(b.k), free(b.v);
    }
    print_message("%s vs oracle over %d cases: max |out err| %.3g, max |LSE err| %.3g\n",
                  attn_forward_quant_kernels(ctx), n, worst, worst_l);
    attn_ctx_destroy(ctx);
}

/* The default bf16-path table (amx's where the CPU has AMX), then avx512bf16's by name where that is another one. */
static void test_bf16_vs_oracle(void **state) {
    (void)state;
    bf16_vs_oracle();
    if (strcmp(attn_forward_quant_kernels(NULL), "amx") == 0) {
        setenv("ATTN_QUANT_KERNELS", "avx512bf16", 1);
        bf16_vs_oracle();
        unsetenv("ATTN_QUANT_KERNELS");
    }
}

/* The rotation, the E2M1 encoder and the maxima of every usable quant table equal the scalar reference bit for bit (the
 * encoder on ties, signed zeros, saturation, NaN/inf, subnormals and random values; odd lengths); a table's fused
 * row quantization equals its steps run one after the other. */
static void test_quant_helpers(void **state) {
    (void)state;
    const struct attn_kernels *tabs[2] = {attn_dispatch_by_name("avx2"), attn_dispatch_by_name("avx512")};
    int ran = 0;
    for (int t = 0; t < 2; t++) {
        const struct attn_quant_kernels *qk = tabs[t] ? attn_dispatch_quant(tabs[t]) : NULL;
        if (!qk || (t == 1 && !th_quant_kernels_bf16(qk->name)))
            continue;
        ran++;
        enum { N = 4099 };
        static float y[N];
        static uint8_t got[(N + 1) / 2];
        const float special[] = {0.0f,  -0.0f, 0.25f,   0.75f,   1.25f,  1.75f,   2.5f,     3.5f,      5.0f,
                                 6.0f,  7.0f,  1e30f,   -0.25f,  -0.75f, -1.25f,  -1.75f,   -2.5f,     -3.5f,
                                 -5.0f, -6.0f, 0.2499f, 0.2501f, 1e-40f, -1e-40f, INFINITY, -INFINITY, NAN,
                                 -NAN,  0.5f,  1.0f,    1.5f,    2.0f,   3.0f,    4.0f};
        th_rng rng;
        th_rng_seed(&rng, 77);
        for (int i = 0; i < N; i++)
            y[i] = i < (int)(sizeof special / sizeof special[0]) ? special[i] : (float)th_rng_range(&rng, -8, 8);
        for (int64_t n = N - 3; n <= N; n++) {
            memset(got, 0xAA, sizeof got);
            qk->encode_e2m1(y, n, got);
            for (int64_t i = 0; i < n; i++) {
                const uint8_t c = (uint8_t)((got[i / 2] >> (4 * (i & 1))) & 0xF);
                if (c != attn_fp4_e2m1_from_float(y[i]))
                    print_error("%s: e2m1(%a) = %u, expected %u\n", qk->name, (double)y[i], c,
                                attn_fp4_e2m1_from_float(y[i]));
                assert_int_equal(c, attn_fp4_e2m1_from_float(y[i]));
            }
            if (n & 1)
                assert_int_equal(got[n / 2] >> 4, 0);
        }
        { /* a sweep of float bit patterns (every 4099th: all exponents, signs, NaNs) and ±2 ulps of each threshold */
            static float sw[4096];
            static uint8_t sg[2048];
            uint64_t bits = 0;
            for (int done = 0, batch = 0; !done; batch++) {
                int m = 0;
                for (; m < 4000 && !done; m++, bits += 4099) {
                    const uint32_t b = (uint32_t)bits;
                    memcpy(&sw[m], &b, 4);
                    done = bits + 4099 > 0xFFFFFFFFull;
                }
                if (batch == 0) /* the first batch also carries the neighbourhoods of the thresholds */
                    for (int ti = 0; ti < 9 && m + 10 <= 4096; ti++) {
                        const float th[9] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f};
                        uint32_t b;
                        memcpy(&b, &th[ti], 4);
                        for (int dlt = -2; dlt <= 2; dlt++) {
                            const uint32_t bb = b + (uint32_t)dlt, nb = bb | 0x80000000u;
                            memcpy(&sw[m++], &bb, 4);
                            memcpy(&sw[m++], &nb, 4);
                        }
                    }
                qk->encode_e2m1(sw, m, sg);
                for (int q = 0; q < m; q++) {
                    const uint8_t c = (uint8_t)((sg[q / 2] >> (4 * (q & 1))) & 0xF);
                    if (c != attn_fp4_e2m1_from_float(sw[q])) {
                        print_error("%s: e2m1(%a) = %u, expected %u\n", qk->name, (double)sw[q], c,
                                    attn_fp4_e2m1_from_float(sw[q]));
                        fail();
                    }
                }
            }
        }
        for (int64_t hs = 1; hs <= 256; hs *= 2) { /* the rotation: bitwise attn_hadamard_rotate */
            int8_t signs[256];
            double tmp[256];
            float rot[256], ref[256];
            assert_int_equal(attn_hadamard_signs(hs, ATTN_HADAMARD_SEED, signs), ATTN_STATUS_OK);
            assert_int_equal(attn_hadamard_rotate(y + 40, 1, hs, ATTN_HADAMARD_SEED, ref), ATTN_STATUS_OK);
            qk->hadamard_row(y + 40, signs, hs, tmp, rot, 1.0 / sqrt((double)hs));
            assert_memory_equal(rot, ref, (size_t)hs * sizeof(float));
        }
        /* the MX row scaling: bitwise the portable body; lengths with a partial block, and whole blocks (1..8,
         * the head sizes), with and without the NaN/inf/subnormal inputs, and all-subnormal / all-zero blocks */
        static const int64_t mx_lens[] = {1, 38, 75, 112, 149, 186, 223, 260, 297, 32, 64, 96, 128, 160, 192, 224, 256};
        for (size_t li = 0; li < sizeof mx_lens / sizeof mx_lens[0]; li++)
            for (int32_t emax = 2; emax <= 8; emax += 6)
                for (int64_t off = 0; off <= 80; off += 40) {
                    const int64_t n = mx_lens[li];
                    float xa[300], xb[300];
                    uint8_t ea[10], eb[10];
                    for (int64_t i = 0; i < n; i++) /* off 80: block 1 all zero, the others all subnormal */
                        xa[i] = xb[i] = off == 80 ? ((i / 32) % 4 == 1 ? 0.0f : y[40 + i % 200] * 1e-39f)
                                                  : y[off + i] * (i % 7 == 3 ? 1e-30f : 1.0f);
                    qk->mx_scale_row(xa, n, emax, ea);
                    kqp_mx_scale_row(xb, n, emax, eb);
                    assert_memory_equal(xa, xb, (size_t)n * sizeof(float));
                    assert_memory_equal(ea, eb, (size_t)(n + 31) / 32);
                }
        if (qk->mx_rot_row) { /* the fused row (widen, rotate, MX-scale, encode): bitwise the steps in sequence */
            const attn_dtype sdts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
            const attn_dtype els[3] = {ATTN_DTYPE_FP4_E2M1, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
            const int32_t emaxs[3] = {2, 8, 15}; /* the element formats' emax (MXFP4, MXFP8 E4M3 / E5M2) */
            int fused = 0, fused_bf16 = 0;
            for (int dei = 0; dei < 9; dei++) /* source dtype di × element format ei */
                for (int64_t n = 32; n <= 128; n *= 2)
                    for (int64_t off = 0; off <= 400; off += 200) { /* off 0: the NaN/inf/subnormal inputs */
                        const int di = dei % 3, ei = dei / 3;
                        int8_t signs[128];
                        double tmp[256];
                        float xf[128];
                        uint16_t x16[128];
                        uint8_t ca[129], cb[128], ea[4], eb[4];
                        memset(ca, 0xEE, sizeof ca), memset(ea, 0xEE, sizeof ea);
                        assert_int_equal(attn_hadamard_signs(n, ATTN_HADAMARD_SEED, signs), ATTN_STATUS_OK);
                        for (int64_t i = 0; i < n; i++) { /* the source row and its exact float32 values */
                            const float v = y[off + i] * (i % 5 == 2 ? 1e-3f : 1.0f);
                            if (sdts[di] == ATTN_DTYPE_F32)
                                xf[i] = v;
                            else {
                                th_set(x16, sdts[di], (size_t)i, v);
                                xf[i] = th_get(x16, sdts[di], (size_t)i);
                            }
                        }
                        const void *src = sdts[di] == ATTN_DTYPE_F32 ? (const void *)xf : (const void *)x16;
                        const double norm = 1.0 / sqrt((double)n);
                        assert_int_equal(qk->mx_rot_row(src, sdts[di], signs, n, norm, emaxs[ei], els[ei], ca, ea), 1);
                        float rot[128];
                        qk->hadamard_row(xf, signs, n, tmp, rot, norm);
                        qk->mx_scale_row(rot, n, emaxs[ei], eb);
                        const int64_t nbytes = ei == 0 ? n / 2 : n;
                        if (ei == 0)
                            qk->encode_e2m1(rot, n, cb);
                        else /* the scalar encoder every table's cvt_to_fp8 equals (scale 1) */
                            for (int64_t i = 0; i < n; i++)
                                cb[i] = ei == 1 ? attn_f32_to_fp8_e4m3(rot[i]) : attn_f32_to_fp8_e5m2(rot[i]);
                        assert_memory_equal(ca, cb, (size_t)nbytes);
                        assert_memory_equal(ea, eb, (size_t)n / 32);
                        assert_int_equal(ca[nbytes], 0xEE); /* nothing written past the row's codes */
                        fused++;
                        if (ei > 0 && qk->mx_rot_row_bf16) { /* the bf16 operands instead: dequant_row_bf16 of ca */
                            uint16_t wa[129], wb[128];
                            uint8_t e2[4];
                            float fac[4];
                            wa[n] = 0xEEEE;
                            assert_int_equal(
                                qk->mx_rot_row_bf16(src, sdts[di], signs, n, norm, emaxs[ei], els[ei], wa, e2), 1);
                            assert_memory_equal(e2, ea, (size_t)n / 32);
                            for (int64_t c = 0; c < n / 32; c++)
                                fac[c] = attn_e8m0_factor(ea[c]);
                            qk->dequant_row_bf16(ca, els[ei], n, fac, 5, wb);
                            assert_memory_equal(wa, wb, (size_t)n * sizeof(uint16_t));
                            assert_int_equal(wa[n], 0xEEEE);
                            fused_bf16++;
                        }
                    }
            uint8_t c1[64], e1[4];
            int8_t s1[96] = {0};
            assert_int_equal(qk->mx_rot_row(y, ATTN_DTYPE_F32, s1, 96, 0.1, 2, ATTN_DTYPE_FP4_E2M1, c1, e1), 0);
            assert_int_equal(qk->mx_rot_row(y, ATTN_DTYPE_F32, s1, 16, 0.25, 8, ATTN_DTYPE_FP8_E4M3, c1, e1), 0);
            assert_int_equal(qk->mx_rot_row(y, ATTN_DTYPE_F32, s1, 64, 0.125, 8, ATTN_DTYPE_U8, c1, e1), 0);
            assert_int_equal(fused, 81);
            assert_true(fused_bf16 == 0 || fused_bf16 == 54);
            if (qk->mx_rot_row_bf16)
                assert_int_equal(qk->mx_rot_row_bf16(y, ATTN_DTYPE_F32, s1, 16, 0.25, 8, ATTN_DTYPE_FP8_E4M3,
                                                     (uint16_t *)(void *)c1, e1),
                                 0);
        }
        uint32_t nf = 0;
        const uint32_t m = qk->absmax_bits(y + 12, 10, &nf); /* -0.25 .. -6, 0.2499, 0.2501 */
        float mf;
        memcpy(&mf, &m, 4);
        assert_true(mf == 6.0f);
        assert_int_equal(nf, 0);
        nf = 0;
        const uint32_t m2 = qk->absmax_bits(y, 30, &nf); /* includes ±inf and NaN: inf counts, NaN does not */
        memcpy(&mf, &m2, 4);
        assert_true(isinf(mf));
        assert_int_not_equal(nf, 0);
    }
    if (!ran) {
        print_message("skipped: no quant kernel table runs on this machine\n");
        skip();
    }
}

/* The MXFP4 Q·Kᵀ on VPDPBUSD (qk_e2m1_i8, where the CPU has AVX512-VNNI) bit for bit against a scalar model of its
 * contract (kernels.h): exact int32 block dots from the bias correction, then per block
 * fmaf(float(acc), qsc·ksc, s) in ascending block order, by exponent addition where every factor product is normal
 * and by the multiply always (products out of range included), lanes past the rows 0; and e2m1_bytes against the
 * scalar E2M1 decode. Odd head sizes (a partial last block, a partial last quad), 1..32 rows, key tails. */
static void test_e2m1_i8_model(void **state) {
    (void)state;
    const struct attn_kernels *f = attn_dispatch_by_name("avx512");
    const struct attn_quant_kernels *qk = f ? vnni_quant(f) : NULL;
    if (!qk || !qk->qk_e2m1_i8) {
        print_message("skipped: no quant table with the VPDPBUSD MXFP4 Q·Kᵀ here (CPU without AVX512-BF16 and "
                      "AVX512-VNNI, or not compiled in)\n");
        skip();
    }
    const attn_qfmt *fmt = attn_qfmt_of(ATTN_DTYPE_FP4_E2M1);
    th_rng rng;
    th_rng_seed(&rng, 4242);
    enum { HS = 256, NK = 64, KS = 272 };
    static uint8_t codes[NK][HS / 2], k8[NK * KS], qb[ATTN_QB][HS];
    static uint32_t qi[HS / 4 * ATTN_QB];
    static int32_t qcorr[HS / 32 * ATTN_QB];
    static float qsc[HS / 32 * ATTN_QB], ksc[NK * (HS / 32)], s[NK * ATTN_QB];
    static const int64_t hss[6] = {7, 33, 64, 100, 128, 256};
    int paths[2] = {0, 0};
    for (int it = 0; it < 24; it++) {
        const int64_t D = hss[it % 6], nb = (D + 31) / 32, nq = (D + 3) / 4;
        const int64_t nr = th_rng_int(&rng, 1, ATTN_QB), nk = th_rng_int(&rng, 1, NK);
        for (int64_t k = 0; k < nk; k++) {
            for (int64_t i = 0; i < (D + 1) / 2; i++)
                codes[k][i] = (uint8_t)th_rng_int(&rng, 0, 255);
            if (D & 1)
                codes[k][D / 2] &= 0x0F;
            memset(k8 + k * KS, 12, (size_t)(4 * nq));
            qk->e2m1_bytes(codes[k], D, 12, k8 + k * KS);
            for (int64_t i = 0; i < D; i++) { /* the widening: 2·value + 12 */
                const float v = attn_qfmt_decode(fmt, (uint8_t)((codes[k][i / 2] >> (4 * (i & 1))) & 0xF));
                assert_int_equal(k8[k * KS + i], (int)(2.0f * v) + 12);
            }
            for (int64_t b = 0; b < nb; b++) /* every 4th case: factors whose products leave the normal range */
                ksc[k * nb + b] =
                    ldexpf(1.0f, it % 4 == 3 ? (int)th_rng_int(&rng, -127, 127) : (int)th_rng_int(&rng, -20, 20));
        }
        memset(qi, 0, sizeof qi);
        for (int64_t r = 0; r < nr; r++) {
            memset(qb[r], 0, sizeof qb[r]);
            for (int64_t i = 0; i < D; i++)
                qb[r][i] = (uint8_t)(int8_t)(2 * (int)th_rng_int(&rng, -6, 6));
            for (int64_t j = 0; j < nq; j++)
                memcpy(&qi[j * ATTN_QB + r], qb[r] + 4 * j, 4);
            for (int64_t b = 0; b < nb; b++) {
                int32_t sum = 0;
                for (int64_t i = 32 * b; i < D && i < 32 * b + 32; i++)
                    sum += (int8_t)qb[r][i];
                qcorr[b * ATTN_QB + r] = -12 * sum;
                qsc[b * ATTN_QB + r] =
                    ldexpf(0.0883883f, it % 4 == 3 ? (int)th_rng_int(&rng, -120, 120) : (int)th_rng_int(&rng, -20, 20));
            }
        }
        /* exp_add may be promised when every factor product is a normal float (the driver's check) */
        int exp_ok = 1;
        for (int64_t k = 0; k < nk; k++)
            for (int64_t b = 0; b < nb; b++)
                for (int64_t r = 0; r < nr; r++) {
                    const float pr = qsc[b * ATTN_QB + r] * ksc[k * nb + b];
                    exp_ok &= isnormal(qsc[b * ATTN_QB + r]) && isnormal(ksc[k * nb + b]) && isnormal(pr);
                }
        for (int exp_add = 0; exp_add <= exp_ok; exp_add++) {
            for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
                s[i] = 1.0f;
            qk->qk_e2m1_i8(qi, qcorr, qsc, nr, D, k8, KS, ksc, nk, exp_add, s);
            for (int64_t k = 0; k < nk; k++)
                for (int64_t r = 0; r < (nr <= 16 ? 16 : ATTN_QB); r++) {
                    float want = 0.0f; /* lanes past the rows (of the vectors written): 0 */
                    for (int64_t b = 0; b < nb && r < nr; b++) {
                        int32_t acc = qcorr[b * ATTN_QB + r];
                        for (int64_t i = 32 * b; i < 32 * b + 32 && i < 4 * nq; i++)
                            acc += (int32_t)k8[k * KS + i] * (int32_t)(int8_t)qb[r][i];
                        want = fmaf((float)acc, qsc[b * ATTN_QB + r] * ksc[k * nb + b], want);
                    }
                    if (memcmp(&want, &s[k * ATTN_QB + r], 4) != 0)
                        print_error("D=%lld rows=%lld exp_add=%d key %lld row %lld: %a, model %a\n", (long long)D,
                                    (long long)nr, exp_add, (long long)k, (long long)r, (double)s[k * ATTN_QB + r],
                                    (double)want);
                    assert_memory_equal(&want, &s[k * ATTN_QB + r], 4);
                }
            paths[exp_add]++;
        }
    }
    print_message("qk_e2m1_i8: %d cases with exponent addition, %d with the multiply\n", paths[1], paths[0]);
    assert_true(paths[1] > 0 && paths[0] > paths[1]);
}

/* The MXFP4 P·V on VPDPBUSD (softmax_quads_u8, v_quads_e2m1, pv_e2m1_i8): the softmax update leaves m, l and Oᵀ
 * bitwise as softmax_pairs_bf16 does; every byte of P is within half a unit of its block (one unit where clamped
 * at 255) of exp(s − m) computed in double, the unit a power of two with the block's largest P in [128, 256)
 * units (or 0 below 2^-119); the staged V bytes are 2·E2M1; and the product is bit for bit the scalar model
 * fmaf(float(Σ), pfac·vfac, o) per block, ascending. Random rows 1..32, keys 1..64 (a partial last quad and
 * block), head sizes with a tail, −inf logits, empty and lazily rescaled rows. */
static void test_e2m1_pv_i8_model(void **state) {
    (void)state;
    const struct attn_kernels *f = attn_dispatch_by_name("avx512");
    const struct attn_quant_kernels *qk = f ? vnni_quant(f) : NULL;
    if (!qk || !qk->pv_e2m1_i8) {
        print_message("skipped: no quant table with the VPDPBUSD MXFP4 P·V here (CPU without AVX512-BF16 and "
                      "AVX512-VNNI, or not compiled in)\n");
        skip();
    }
    const attn_qfmt *fmt = attn_qfmt_of(ATTN_DTYPE_FP4_E2M1);
    th_rng rng;
    th_rng_seed(&rng, 4343);
    enum { DV = 160, NK = ATTN_KV_TILE, VQS = 176 };
    static float s[NK * ATTN_QB], m[2][ATTN_QB], l[2][ATTN_QB], o[2][DV * ATTN_QB], pfac[NK / 32 * ATTN_QB];
    static float vfac[NK / 32 * DV];
    static uint32_t pq[NK / 4 * ATTN_QB], pp[NK / 2 * ATTN_QB], vq[NK / 4 * VQS];
    static uint8_t codes[NK][DV / 2];
    static const int64_t dvs[5] = {7, 33, 64, 128, 160};
    int clamped = 0, dead = 0;
    for (int it = 0; it < 40; it++) {
        const int64_t Dv = dvs[it % 5], nr = th_rng_int(&rng, 1, ATTN_QB), nk = th_rng_int(&rng, 1, NK);
        const int lanes = nr <= 16 ? 16 : ATTN_QB;
        const double spread = it % 3 == 0 ? 2.0 : it % 3 == 1 ? 20.0 : 150.0; /* flat, peaked, beyond 2^-119 */
        for (int64_t k = 0; k < nk; k++)
            for (int r = 0; r < ATTN_QB; r++)
                s[k * ATTN_QB + r] =
                    th_rng_int(&rng, 0, 15) == 0 ? -INFINITY : (float)(th_rng_uniform(&rng) * spread - spread / 2);
        for (int r = 0; r < ATTN_QB; r++) { /* empty rows, a maximum above the tile's (no rescale), or below */
            const int kind = (int)th_rng_int(&rng, 0, 2);
            m[0][r] = kind == 0 ? -INFINITY : kind == 1 ? (float)(spread / 2 + 3) : (float)(-spread / 2);
            l[0][r] = kind == 0 ? 0.0f : (float)th_rng_uniform(&rng) * 4;
        }
        for (int64_t i = 0; i < Dv * ATTN_QB; i++)
            o[0][i] = (float)(th_rng_uniform(&rng) * 2 - 1);
        memcpy(m[1], m[0], sizeof m[0]), memcpy(l[1], l[0], sizeof l[0]), memcpy(o[1], o[0], sizeof o[0]);
        qk->softmax_quads_u8(s, nk, nr, m[0], l[0], o[0], Dv, pq, pfac);
        qk->softmax_pairs_bf16(s, nk, nr, NULL, m[1], l[1], o[1], Dv, pp);
        assert_memory_equal(m[0], m[1], sizeof m[0]);
        assert_memory_equal(l[0], l[1], sizeof l[0]);
        assert_memory_equal(o[0], o[1], (size_t)(Dv * ATTN_QB) * sizeof(float));
        for (int r = 0; r < lanes; r++)
            for (int64_t b = 0; 32 * b < nk; b++) {
                double pmax = 0.0;
                for (int64_t k = 32 * b; k < nk && k < 32 * b + 32; k++)
                    if (s[k * ATTN_QB + r] != -INFINITY)
                        pmax = fmax(pmax, exp((double)s[k * ATTN_QB + r] - (double)m[0][r]));
                const double u = pfac[b * ATTN_QB + r];
                if (pmax < 0x1p-119 * (1 - 1e-6)) {
                    assert_true(u == 0.0);
                    dead++;
                } else if (pmax > 0x1p-119 * (1 + 1e-6)) {
                    assert_true(u > 0.0 && frexp(u, &(int){0}) == 0.5); /* a power of two */
                    assert_true(pmax >= 128 * u * (1 - 1e-6) && pmax < 256 * u * (1 + 1e-6));
                }
                for (int64_t k = 32 * b; k < 32 * b + 32 && k < (nk + 3) / 4 * 4; k++) {
                    const int c = (int)((pq[(k / 4) * ATTN_QB + r] >> (8 * (k % 4))) & 0xFF);
                    const double p = k >= nk || s[k * ATTN_QB + r] == -INFINITY
                                         ? 0.0
                                         : exp((double)s[k * ATTN_QB + r] - (double)m[0][r]);
                    clamped += c == 255;
                    if (u == 0.0) {
                        assert_int_equal(c, 0);
                        continue;
                    }
                    const double err = fabs(c * u - p), lim = (c == 255 ? 1.0 : 0.5) * u * (1 + 1e-5) + 1e-6 * p;
                    if (err > lim)
                        print_error("row %d key %lld: byte %d × %a vs P %.9g\n", r, (long long)k, c, u, p);
                    assert_true(err <= lim);
                }
            }
        /* V: random E2M1 rows and factors (NaN-free, products of both factors in and out of the normal range) */
        for (int64_t k = 0; k < nk; k++)
            for (int64_t i = 0; i < (Dv + 1) / 2; i++)
                codes[k][i] = (uint8_t)th_rng_int(&rng, 0, 255);
        for (int64_t k = 0; k < nk; k += 4) {
            const uint8_t *rows[4];
            for (int i = 0; i < 4; i++)
                rows[i] = k + i < nk ? codes[k + i] : NULL;
            qk->v_quads_e2m1(rows, Dv, vq + (k / 4) * VQS);
            for (int64_t d = 0; d < Dv; d++)
                for (int i = 0; i < 4; i++) {
                    const int8_t got = (int8_t)((vq[(k / 4) * VQS + d] >> (8 * i)) & 0xFF);
                    const int want =
                        k + i < nk
                            ? (int)(2.0f *
                                    attn_qfmt_decode(fmt, (uint8_t)((codes[k + i][d / 2] >> (4 * (d & 1))) & 0xF)))
                            : 0;
                    assert_int_equal(got, want);
                }
        }
        for (int64_t i = 0; i < NK / 32 * DV; i++)
            vfac[i] = ldexpf(1.0f, it % 4 == 3 ? (int)th_rng_int(&rng, -149, 127) : (int)th_rng_int(&rng, -20, 20));
        memcpy(o[1], o[0], sizeof o[0]);
        qk->pv_e2m1_i8(pq, pfac, nk, nr, vq, VQS, vfac, Dv, Dv, o[0]);
        for (int64_t d = 0; d < Dv; d++)
            for (int r = 0; r < lanes; r++) {
                float want = o[1][d * ATTN_QB + r];
                for (int64_t b = 0; 32 * b < nk; b++) {
                    int32_t acc = 0;
                    for (int64_t k = 32 * b; k < 32 * b + 32 && k < (nk + 3) / 4 * 4; k++)
                        acc += (int32_t)((pq[(k / 4) * ATTN_QB + r] >> (8 * (k % 4))) & 0xFF) *
                               (int32_t)(int8_t)((vq[(k / 4) * VQS + d] >> (8 * (k % 4))) & 0xFF);
                    want = fmaf((float)acc, pfac[b * ATTN_QB + r] * vfac[b * Dv + d], want);
                }
                if (memcmp(&want, &o[0][d * ATTN_QB + r], 4) != 0)
                    print_error("Dv=%lld rows=%lld keys=%lld d=%lld row %d: %a, model %a\n", (long long)Dv,
                                (long long)nr, (long long)nk, (long long)d, r, (double)o[0][d * ATTN_QB + r],
                                (double)want);
                assert_memory_equal(&want, &o[0][d * ATTN_QB + r], 4);
            }
    }
    print_message("pv_e2m1_i8: %d bytes clamped at 255, %d blocks below 2^-119\n", clamped, dead);
    assert_true(dead > 0);
}

/* dequant_row_bf16 of the bf16 quant table on E4M3 rows equals the truncation to bf16 of decode(code)·factor (the
 * float product) for every code: factor 1 (one scale), MX factors per 32 elements at and past the ends of the range
 * its exponent-add path takes (2^-117 / 2^-118, 2^119 / 2^120), a subnormal factor, NaN; odd lengths (the pad
 * element is 0, or NaN in a NaN block). */
/* fp8_bf16_row (the bf16 operands made without codes) bitwise what the codes path makes of the same row: the
 * float table's cvt_to_fp8 of x / scale, then dequant_row_bf16 (factor 1) for a row or v_pairs_bf16 for the two
 * halves of a row of key pairs — E4M3 and E5M2, scales 1 / random / tiny / huge, every special (ties of both
 * formats, saturation, ±inf, NaN, ±0, float and FP8 subnormals), odd and even lengths. A planted defect (the
 * rounding onto one mantissa bit too many) fails it. */
static void test_fp8_bf16_row(void **state) {
    (void)state;
    const struct attn_kernels *f = attn_dispatch_by_name("avx512");
    const struct attn_quant_kernels *qk = f ? attn_dispatch_quant(f) : NULL;
    if (!qk || !qk->fp8_bf16_row) {
        print_message("skipped: no table here makes FP8 bf16 operands (CPU without AVX512-BF16, or not compiled in)\n");
        skip();
    }
    enum { N = 301 };
    static float x[N], y[N];
    th_rng rng;
    th_rng_seed(&rng, 515);
    const float special[] = {0.0f,      -0.0f,    448.0f,   464.0f,    465.0f,    -480.0f,   1e30f,     INFINITY,
                             -INFINITY, NAN,      -NAN,     57344.0f,  61440.0f,  1e-40f,    -1e-40f,   0x1p-9f,
                             0x1p-10f,  0x3p-11f, 0x1p-7f,  0x1.1p-6f, 0x1.08p0f, 0x1.18p0f, 0x1.04p0f, 0x1.0cp0f,
                             0x1p-16f,  0x1p-17f, 0x3p-18f, 1.0f,      -2.5f};
    const int nsp = (int)(sizeof special / sizeof special[0]);
    const float scales[5] = {1.0f, 0.0123f, 3.7f, 1e-30f, 1e25f};
    int checked = 0;
    for (int ei = 0; ei < 2; ei++)
        for (int si = 0; si < 5; si++) {
            const attn_dtype el = ei ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_FP8_E4M3;
            for (int i = 0; i < N; i++) { /* specials times the scale (so they land where named), then random */
                x[i] = i < nsp ? special[i] * scales[si] : (float)th_rng_range(&rng, -500, 500) * scales[si];
                y[i] = i < nsp ? -special[nsp - 1 - i] * scales[si] : (float)th_rng_range(&rng, -2, 2) * scales[si];
            }
            for (int64_t n = N - 2; n <= N; n++) {
                static uint8_t cx[N], cy[N];
                static uint16_t want16[N + 1], got16[N + 1];
                static uint32_t want32[N], got32[N];
                f->cvt_to_fp8(x, ATTN_DTYPE_F32, scales[si], el, cx, n);
                f->cvt_to_fp8(y, ATTN_DTYPE_F32, scales[si], el, cy, n);
                const float one = 1.0f;
                memset(got16, 0xAB, sizeof got16);
                qk->dequant_row_bf16(cx, el, n, &one, 63, want16);
                qk->fp8_bf16_row(x, n, scales[si], el, NULL, 0, -1, got16);
                assert_memory_equal(got16, want16, (size_t)((n + 1) & ~(int64_t)1) * sizeof(uint16_t));
                for (int two = 0; two <= 1; two++) { /* the even key alone (the last of an odd count), or both */
                    memset(got32, 0xAB, sizeof got32);
                    qk->v_pairs_bf16(cx, two ? cy : NULL, el, n, &one, 63, want32);
                    qk->fp8_bf16_row(x, n, scales[si], el, NULL, 0, 0, got32);
                    if (two)
                        qk->fp8_bf16_row(y, n, scales[si], el, NULL, 0, 1, got32);
                    for (int64_t d = 0; d < n; d++)
                        if (got32[d] != want32[d])
                            print_error(
                                "%s scale %g n %lld pair %d: element %lld (%a, %a) -> 0x%08x, expected 0x%08x\n",
                                ei ? "e5m2" : "e4m3", (double)scales[si], (long long)n, two, (long long)d, (double)x[d],
                                (double)y[d], got32[d], want32[d]);
                    assert_memory_equal(got32, want32, (size_t)n * sizeof(uint32_t));
                    checked++;
                }
            }
        }
    assert_int_equal(checked, 2 * 5 * 3 * 2);
    /* with MX factors (scale 1): per 32 elements (Q/K rows, shift 5) and per element (V rows, shift 0), powers of
     * two at and past the exponent-field path's range, the subnormal 2^-127 and NaN (E8M0 0xFF) */
    const float facs[9] = {1.0f,
                           ldexpf(1.0f, -117),
                           ldexpf(1.0f, -118),
                           ldexpf(1.0f, 119),
                           ldexpf(1.0f, 120),
                           0.125f,
                           ldexpf(1.0f, -127),
                           NAN,
                           4.0f};
    for (int i = 0; i < N; i++) { /* the specials as named, then random values of both formats' ranges */
        x[i] = i < nsp ? special[i] : (float)th_rng_range(&rng, -500, 500);
        y[i] = i < nsp ? -special[nsp - 1 - i] : (float)th_rng_range(&rng, -2, 2);
    }
    for (int ei = 0; ei < 2; ei++)
        for (int fi = 0; fi < 9; fi++) {
            const attn_dtype el = ei ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_FP8_E4M3;
            float fac[N];
            for (int i = 0; i < N; i++)
                fac[i] = facs[(fi + i / 32 + i) % 9];
            const int64_t n = 256 + 32 * fi % 45; /* whole and partial last blocks */
            static uint8_t cx[N], cy[N];
            static uint16_t want16[N + 1], got16[N + 1];
            static uint32_t want32[N], got32[N];
            f->cvt_to_fp8(x, ATTN_DTYPE_F32, 1.0f, el, cx, n);
            f->cvt_to_fp8(y, ATTN_DTYPE_F32, 1.0f, el, cy, n);
            float blockfac[(N + 31) / 32];
            for (int b = 0; b < (N + 31) / 32; b++)
                blockfac[b] = fac[32 * b];
            qk->dequant_row_bf16(cx, el, n, blockfac, 5, want16);
            qk->fp8_bf16_row(x, n, 1.0f, el, blockfac, 5, -1, got16);
            for (int64_t i = 0; i < n; i++)
                if (got16[i] != want16[i])
                    print_error("%s factor set %d: element %lld (%a · %a) -> 0x%04x, expected 0x%04x\n",
                                ei ? "e5m2" : "e4m3", fi, (long long)i, (double)x[i], (double)blockfac[i / 32],
                                got16[i], want16[i]);
            assert_memory_equal(got16, want16, (size_t)n * sizeof(uint16_t));
            qk->v_pairs_bf16(cx, cy, el, n, fac, 0, want32);
            qk->fp8_bf16_row(x, n, 1.0f, el, fac, 0, 0, got32);
            qk->fp8_bf16_row(y, n, 1.0f, el, fac, 0, 1, got32);
            assert_memory_equal(got32, want32, (size_t)n * sizeof(uint32_t));
        }
}

static void test_dequant_bf16_e4m3(void **state) {
    (void)state;
    const struct attn_kernels *f = attn_dispatch_by_name("avx512");
    const struct attn_quant_kernels *qk = f ? attn_dispatch_quant(f) : NULL;
    if (!qk || !qk->dequant_row_bf16) {
        print_message("skipped: no bf16 quant table here (CPU without AVX512-BF16, or not compiled in)\n");
        skip();
    }
    const attn_qfmt *fmt = attn_qfmt_of(ATTN_DTYPE_FP8_E4M3);
    static uint8_t codes[356];
    for (int i = 0; i < 356; i++)
        codes[i] = (uint8_t)(i * 37 + 11); /* every code once in the first 256, in a scrambled order */
    const float nanf_ = NAN;
    const float facs[9] = {1.0f, ldexpf(1.0f, -117), ldexpf(1.0f, -118), ldexpf(1.0f, 119), ldexpf(1.0f, 120),
                           0.125f, ldexpf(1.0f, -127), nanf_, 4.0f};
    for (int shift = 5; shift <= 63; shift += 58)
        for (int64_t n = 253; n <= 256; n++)
            for (int fi = 0; fi < 9; fi++) {
                float sc[8];
                for (int b = 0; b < 8; b++)
                    sc[b] = shift == 63 ? facs[fi] : facs[(fi + b) % 9];
                uint16_t got[258];
                memset(got, 0xAB, sizeof got);
                qk->dequant_row_bf16(codes, ATTN_DTYPE_FP8_E4M3, n, sc, shift, got);
                for (int64_t i = 0; i < ((n + 1) & ~(int64_t)1); i++) {
                    uint16_t want = 0;
                    if (i >= n && isnan(sc[shift == 63 ? 0 : i >> 5]))
                        continue; /* the pad of a NaN block may be NaN: the block's dot is NaN anyway */
                    if (i < n) {
                        const float v = attn_qfmt_decode(fmt, codes[i]) * sc[shift == 63 ? 0 : i >> 5];
                        uint32_t u;
                        memcpy(&u, &v, 4);
                        want = (uint16_t)(u >> 16);
                        if (isnan(v)) { /* any NaN */
                            assert_true((got[i] & 0x7F80) == 0x7F80 && (got[i] & 0x7F) != 0);
                            continue;
                        }
                    }
                    if (got[i] != want)
                        print_error("shift %d n %lld factor #%d: element %lld code 0x%02x -> 0x%04x, expected 0x%04x\n",
                                    shift, (long long)n, fi, (long long)i, codes[i], got[i], want);
                    assert_int_equal(got[i], want);
                }
            }
    /* v_pairs_bf16 of unscaled E4M3 rows (FP8 block scales), with a second row or none */
    for (int64_t n = 1; n <= 256; n += 17)
        for (int two = 0; two <= 1; two++) {
            uint32_t vtp[257];
            const float one = 1.0f;
            memset(vtp, 0xAB, sizeof vtp);
            qk->v_pairs_bf16(codes, two ? codes + 100 : NULL, ATTN_DTYPE_FP8_E4M3, n, &one, 63, vtp);
            for (int64_t d = 0; d < n; d++) {
                uint32_t want = 0;
                for (int h = 0; h <= two; h++) {
                    const float v = attn_qfmt_decode(fmt, codes[(h ? 100 : 0) + d]);
                    uint32_t u;
                    memcpy(&u, &v, 4);
                    want |= (isnan(v) ? 0x7FC0u : u >> 16) << (16 * h);
                }
                assert_int_equal(vtp[d], want);
            }
            assert_int_equal(vtp[n], 0xABABABABu);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_helpers),    cmocka_unit_test(test_avx2_bitwise_fake),
        cmocka_unit_test(test_bf16_vs_oracle),   cmocka_unit_test(test_e2m1_i8_model),
        cmocka_unit_test(test_e2m1_pv_i8_model), cmocka_unit_test(test_dequant_bf16_e4m3),
        cmocka_unit_test(test_fp8_bf16_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
