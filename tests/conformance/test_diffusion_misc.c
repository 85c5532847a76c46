/*
 * test_diffusion_misc.c — packed batch-1 documents (any number, zero-length, causal per document) against
 * the oracle with the block-diagonal explicit mask; prefix K/V slicing against the oracle with the suffix
 * key-padding mask; power-of-two input pre-scaling: bitwise equal to plain attention while nothing leaves
 * the normal range, and measurably not once f16 values become subnormal; head sizes 64/96/128/192/256 in
 * every dtype; and the error paths of these entries.
 */
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
#include "harness.h"

static void expect_close(const attn_tensor *got, const attn_tensor *exp, attn_dtype dt, const char *what) {
    size_t bad = 0;
    const double err = th_compare(got, exp, th_tol_for(dt), 1.0, &bad);
    if (bad)
        print_error("%s: %zu elements out of tolerance, max err %g\n", what, bad, err);
    assert_int_equal(bad, 0);
}

/* ------------------------------------------------------------------------------------------- */
static void test_packed_documents(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 31);
    const int64_t H = 4, Hk = 2;
    for (int round = 0; round < 6; round++) {
        const int64_t D = (int64_t[]){64, 96, 128, 192, 256, 64}[round];
        const attn_dtype dt = round % 3 == 0 ? ATTN_DTYPE_F32 : round % 3 == 1 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16;
        const int causal = round % 2;
        int32_t cu_q[9] = {0}, cu_k[9] = {0};
        const int ndoc = round == 0 ? 2 : 1 + (int)th_rng_int(&rng, 1, 7);
        for (int d = 0; d < ndoc; d++) {
            int64_t lq = th_rng_int(&rng, 0, 150), lk = round % 3 == 2 ? th_rng_int(&rng, 0, 200) : lq;
            if (round == 0)
                lq = lk = d == 0 ? 3 : 2; /* A.2 worked example: cu = [0, 3, 5] */
            if (d == 1 && round > 0)
                lq = lk = 0; /* a zero-length document */
            cu_q[d + 1] = cu_q[d] + (int32_t)lq;
            cu_k[d + 1] = cu_k[d] + (int32_t)lk;
        }
        const int64_t Tq = cu_q[ndoc], Tk = cu_k[ndoc];
        int64_t qs[4] = {1, Tq, H, D}, ks[4] = {1, Tk, Hk, D}, cs[1] = {ndoc + 1}, ls[2] = {H, Tq}, ms[2] = {Tq, Tk};
        int64_t lrs[3] = {1, H, Tq};
        void *q = th_alloc_fill(&rng, dt, (size_t)(Tq * H * D), -2, 2),
             *k = th_alloc_fill(&rng, dt, (size_t)(Tk * Hk * D), -2, 2);
        void *v = th_alloc_fill(&rng, dt, (size_t)(Tk * Hk * D), -1, 1), *o = th_alloc_nan(dt, (size_t)(Tq * H * D));
        void *orf = th_alloc_nan(dt, (size_t)(Tq * H * D));
        float *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Tq)), *lr = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Tq));
        unsigned char *m = calloc((size_t)(Tq * Tk) + 1, 1);
        for (int d = 0; d < ndoc; d++) { /* block diagonal, bottom-right causal within each document */
            const int64_t lq = cu_q[d + 1] - cu_q[d], lk = cu_k[d + 1] - cu_k[d];
            for (int64_t i = 0; i < lq; i++)
                for (int64_t j = 0; j < lk; j++)
                    m[(cu_q[d] + i) * Tk + cu_k[d] + j] = !causal || j <= i + lk - lq;
        }
        attn_tensor tq = attn_tensor_make(q, dt, 4, qs), tk = attn_tensor_make(k, dt, 4, ks),
                    tv = attn_tensor_make(v, dt, 4, ks);
        attn_tensor to = attn_tensor_make(o, dt, 4, qs), tor = attn_tensor_make(orf, dt, 4, qs);
        attn_tensor tcq = attn_tensor_make(cu_q, ATTN_DTYPE_I32, 1, cs),
                    tck = attn_tensor_make(cu_k, ATTN_DTYPE_I32, 1, cs);
        attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 2, ls),
                    tlr3 = attn_tensor_make(lr, ATTN_DTYPE_F32, 3, lrs);
        attn_tensor tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 2, ls), tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
        attn_params p, pe;
        attn_params_init(&p);
        p.causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        attn_params_init(&pe);
        pe.mask = &tm;
        assert_int_equal(attn_forward_packed(ctx, &tq, &tk, &tv, &tcq, &tck, &p, &to, &tl), ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &pe, &tor, &tlr3), ATTN_STATUS_OK);
        char what[64];
        snprintf(what, sizeof what, "packed round %d (%d docs, D=%lld)", round, ndoc, (long long)D);
        expect_close(&to, &tor, dt, what);
        size_t bad;
        th_compare_lse(&tl, &tlr, th_tol_for(dt), &bad);
        assert_int_equal(bad, 0);
        free(q), free(k), free(v), free(o), free(orf), free(l), free(lr), free(m);
    }
    /* errors: batch 2, wrong rank */
    int64_t s2[4] = {2, 4, 2, 64}, s3[3] = {4, 2, 64}, cs[1] = {2};
    float *buf = calloc(2 * 4 * 2 * 64, 4);
    int32_t cu[2] = {0, 4};
    attn_tensor t2 = attn_tensor_make(buf, ATTN_DTYPE_F32, 4, s2), t3 = attn_tensor_make(buf, ATTN_DTYPE_F32, 3, s3);
    attn_tensor tc = attn_tensor_make(cu, ATTN_DTYPE_I32, 1, cs);
    assert_int_equal(attn_forward_packed(ctx, &t2, &t2, &t2, &tc, &tc, NULL, &t2, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "q: shape[0]=2, expected batch 1"));
    assert_int_equal(attn_forward_packed(ctx, &t3, &t3, &t3, &tc, &tc, NULL, &t3, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "q"));
    assert_int_equal(attn_forward_packed(NULL, &t2, &t2, &t2, &tc, &tc, NULL, &t2, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    free(buf);
    attn_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------- */
static void test_kv_prefix(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 32);
    /* A.11 shape, scaled up: Q keeps every row, K/V valid prefix `used` of Sk */
    const int64_t B = 1, S = 600, H = th_test_emulated() ? 1 : 2, D = 128; /* emulated: one head */
    for (int round = 0; round < 3; round++) {
        const int64_t used = (int64_t[]){5, 517, 600}[round];
        int64_t qs[4] = {B, S, H, D}, ls[3] = {B, H, S}, ks[2] = {B, S};
        const size_t n = (size_t)(B * S * H * D);
        float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -2, 2), *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -2, 2);
        float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -1, 1);
        for (size_t i = (size_t)(used * H * D); i < n; i++)
            v[i] = NAN, k[i] = INFINITY; /* pad is never read */
        float *o = th_alloc_nan(ATTN_DTYPE_F32, n), *orf = th_alloc_nan(ATTN_DTYPE_F32, n);
        float *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * S)),
              *lr = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * S));
        unsigned char kpm[600];
        for (int64_t j = 0; j < S; j++)
            kpm[j] = j < used;
        attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, qs);
        attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, qs);
        attn_tensor tor = attn_tensor_make(orf, ATTN_DTYPE_F32, 4, qs), tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls);
        attn_tensor tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 3, ls),
                    tkp = attn_tensor_make(kpm, ATTN_DTYPE_U8, 2, ks);
        /* the oracle reads the pad only through the mask: give it finite pad values */
        float *kf = malloc(n * 4), *vf = malloc(n * 4);
        memcpy(kf, k, n * 4), memcpy(vf, v, n * 4);
        for (size_t i = (size_t)(used * H * D); i < n; i++)
            kf[i] = 0.0f, vf[i] = 0.0f;
        attn_tensor tkf = attn_tensor_make(kf, ATTN_DTYPE_F32, 4, qs),
                    tvf = attn_tensor_make(vf, ATTN_DTYPE_F32, 4, qs);
        attn_params p, pe;
        attn_params_init(&p);
        p.softmax_scale = 0.5f;
        pe = p;
        pe.key_padding_mask = &tkp;
        assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, used, &p, &to, &tl),
                         ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tkf, &tvf, &pe, &tor, &tlr), ATTN_STATUS_OK);
        expect_close(&to, &tor, ATTN_DTYPE_F32, "kv prefix");
        size_t bad;
        th_compare_lse(&tl, &tlr, th_tol_for(ATTN_DTYPE_F32), &bad);
        assert_int_equal(bad, 0);
        /* the fast key-padding path over finite pads gives the same bits (masked keys contribute exact 0) */
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tkf, &tvf, &pe, &tor, NULL), ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&to, &tor));
        free(q), free(k), free(v), free(o), free(orf), free(l), free(lr), free(kf), free(vf);
    }
    /* errors */
    int64_t qs[4] = {1, 8, 2, 64}, ks[2] = {1, 8};
    float *buf = calloc(8 * 2 * 64, 4), *ob = malloc(8 * 2 * 64 * 4);
    memset(ob, 0x7f, 8 * 2 * 64 * 4);
    unsigned char kpm[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    attn_tensor t = attn_tensor_make(buf, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(ob, ATTN_DTYPE_F32, 4, qs);
    attn_tensor tkp = attn_tensor_make(kpm, ATTN_DTYPE_U8, 2, ks);
    attn_params pc, pm;
    attn_params_init(&pc);
    pc.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_params_init(&pm);
    pm.key_padding_mask = &tkp;
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 9, NULL, &to, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "valid_kv_length=9 is outside 0..seq_k=8"));
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, -1, NULL, &to, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 5, &pc, &to, NULL),
                     ATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "bottom-right causal diagonal"));
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 5, &pm, &to, NULL),
                     ATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "params.key_padding_mask"));
    for (size_t i = 0; i < 8 * 2 * 64; i++) {
        uint32_t u;
        memcpy(&u, ob + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    /* a zero-length prefix: every row sees no key → 0 */
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 0, NULL, &to, NULL), ATTN_STATUS_OK);
    for (size_t i = 0; i < 8 * 2 * 64; i++)
        assert_true(ob[i] == 0.0f);
    free(buf), free(ob);
    attn_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------- */
static void run_prescaled(attn_ctx *ctx, attn_dtype dt, double lo, double hi, int32_t k_log2, int softcap,
                          int expect_bitwise) {
    th_rng rng;
    th_rng_seed(&rng, 33 + (uint64_t)k_log2);
    const int64_t B = 2, Sq = 70, Sk = 300, H = 4, Hk = 2, D = 128;
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, Sq};
    void *q = th_alloc_fill(&rng, dt, (size_t)(B * Sq * H * D), lo, hi),
         *k = th_alloc_fill(&rng, dt, (size_t)(B * Sk * Hk * D), lo, hi);
    void *v = th_alloc_fill(&rng, dt, (size_t)(B * Sk * Hk * D), lo, hi);
    void *o = th_alloc_nan(dt, (size_t)(B * Sq * H * D)), *o2 = th_alloc_nan(dt, (size_t)(B * Sq * H * D));
    float *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * Sq)),
          *l2 = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * Sq));
    attn_tensor tq = attn_tensor_make(q, dt, 4, qs), tk = attn_tensor_make(k, dt, 4, ks),
                tv = attn_tensor_make(v, dt, 4, ks);
    attn_tensor to = attn_tensor_make(o, dt, 4, qs), to2 = attn_tensor_make(o2, dt, 4, qs);
    attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls), tl2 = attn_tensor_make(l2, ATTN_DTYPE_F32, 3, ls);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.softmax_scale = 1.0f / (float)(hi * hi) / 8.0f; /* keep the softmax sharp but finite for any range */
    if (softcap)
        p.softcap = 5.0f;
    size_t ws;
    assert_int_equal(attn_forward_prescaled_workspace_size(&tq, &tk, &tv, &ws), ATTN_STATUS_OK);
    void *w = malloc(ws);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, &tl), ATTN_STATUS_OK);
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, k_log2, &p, &to2, &tl2, w, ws),
                     ATTN_STATUS_OK);
    const int same = th_bitwise_equal(&to, &to2) && th_bitwise_equal(&tl, &tl2);
    if (same != expect_bitwise)
        print_error("prescaled %s range [%g,%g) k=%d: bitwise %d, expected %d\n", attn_dtype_name(dt), lo, hi,
                    (int)k_log2, same, expect_bitwise);
    assert_int_equal(same, expect_bitwise);
    if (!expect_bitwise) { /* inexact but still close: the subnormal loss is small (docs/DIFFUSION.md §4) */
        size_t bad;
        double err = th_compare(&to2, &to, th_tol_for(ATTN_DTYPE_BF16), hi, &bad);
        print_message("prescaled %s k=%d with subnormals: max |diff| %.3g (max |v| %.3g)\n", attn_dtype_name(dt),
                      (int)k_log2, err, hi);
        assert_true(err > 0.0);
        assert_int_equal(bad, 0);
    }
    free(q), free(k), free(v), free(o), free(o2), free(l), free(l2), free(w);
}

static void test_prescaling(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    run_prescaled(ctx, ATTN_DTYPE_F32, -300, 300, 8, 0, 1);   /* MiniMax-H3 c = 256 on outlier-sized values */
    run_prescaled(ctx, ATTN_DTYPE_F32, -2, 2, 8, 1, 1);       /* with soft-cap */
    run_prescaled(ctx, ATTN_DTYPE_BF16, -300, 300, 8, 0, 1);  /* bf16 has float32's exponent range */
    run_prescaled(ctx, ATTN_DTYPE_F16, 0.5, 4, 4, 0, 1);      /* f16: x/16, out/16 stay >= 2^-14 (normal) */
    run_prescaled(ctx, ATTN_DTYPE_F16, -0.01, 0.01, 8, 0, 0); /* f16 values /256 fall below 2^-14: inexact */
    /* errors */
    int64_t qs[4] = {1, 4, 1, 64};
    float *buf = calloc(4 * 64, 4), *ob = malloc(4 * 64 * 4);
    attn_tensor t = attn_tensor_make(buf, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(ob, ATTN_DTYPE_F32, 4, qs);
    size_t ws;
    assert_int_equal(attn_forward_prescaled_workspace_size(&t, &t, &t, &ws), ATTN_STATUS_OK);
    assert_int_equal(ws, 3 * 4 * 64 * 4);
    void *w = malloc(ws);
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 31, NULL, &to, NULL, w, ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "input_scale_log2=31 is outside 0..30"));
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 2, NULL, &to, NULL, w, ws - 1),
                     ATTN_STATUS_WORKSPACE_TOO_SMALL);
    attn_params big;
    attn_params_init(&big);
    big.softmax_scale = 1e30f;
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, 30, &big, &to, NULL, w, ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "leaves the float range"));
    assert_int_equal(attn_forward_prescaled_workspace_size(&t, &t, NULL, &ws), ATTN_STATUS_INVALID_ARGUMENT);
    free(buf), free(ob), free(w);
    attn_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------- */
/* The backend's head sizes (64, 96, 128, 192, 256) through the generic driver, every dtype, both layouts. */
static void test_head_sizes(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 34);
    const int64_t heads[5] = {64, 96, 128, 192, 256};
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    for (int hi = 0; hi < 5; hi++)
        for (int di = 0; di < 3; di++) {
            /* emulated (th_test_emulated): one dtype per head size, rotating, so every head size, dtype, layout
               and the causal case still run */
            if (th_test_emulated() && di != hi % 3) continue;
            const int64_t B = 2, Sq = 45, Sk = 530, H = 3, D = heads[hi];
            const attn_dtype dt = dts[di];
            const attn_layout layout = (hi + di) % 2 ? ATTN_LAYOUT_BNSD : ATTN_LAYOUT_BSND;
            int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, H, D};
            if (layout == ATTN_LAYOUT_BNSD)
                qs[1] = H, qs[2] = Sq, ks[1] = H, ks[2] = Sk;
            void *q = th_alloc_fill(&rng, dt, (size_t)(B * Sq * H * D), -2, 2),
                 *k = th_alloc_fill(&rng, dt, (size_t)(B * Sk * H * D), -2, 2);
            void *v = th_alloc_fill(&rng, dt, (size_t)(B * Sk * H * D), -1, 1);
            void *o = th_alloc_nan(dt, (size_t)(B * Sq * H * D)), *orf = th_alloc_nan(dt, (size_t)(B * Sq * H * D));
            attn_tensor tq = attn_tensor_make(q, dt, 4, qs), tk = attn_tensor_make(k, dt, 4, ks),
                        tv = attn_tensor_make(v, dt, 4, ks);
            attn_tensor to = attn_tensor_make(o, dt, 4, qs), tor = attn_tensor_make(orf, dt, 4, qs);
            attn_params p;
            attn_params_init(&p);
            p.causal = di == 1 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
            assert_int_equal(attn_forward(ctx, layout, &tq, &tk, &tv, &p, &to, NULL), ATTN_STATUS_OK);
            assert_int_equal(attn_ref_forward(layout, &tq, &tk, &tv, &p, &tor, NULL), ATTN_STATUS_OK);
            char what[64];
            snprintf(what, sizeof what, "head_size %lld %s", (long long)D, attn_dtype_name(dt));
            expect_close(&to, &tor, dt, what);
            free(q), free(k), free(v), free(o), free(orf);
        }
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_documents),
        cmocka_unit_test(test_kv_prefix),
        cmocka_unit_test(test_prescaling),
        cmocka_unit_test(test_head_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
