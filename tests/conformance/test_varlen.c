/*
 * test_varlen.c — attn_forward_varlen (packed sequences, cu_seqlens) against the oracle, on every usable ISA:
 * zero-length sequences, many sequences, causal per sequence, GQA, LSE [num_heads, total_q], rows past
 * cu_seqlens_q[last] left untouched. The expected answer is built sequence by sequence with the DENSE oracle
 * on slices of the packed buffers (an independent path through the packing), and the packed fast path must
 * equal the dense fast path bit for bit (one driver, so one set of bits). ATTN_TEST_SEED=<seed> reruns one
 * random case.
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

#include "harness.h"

#define MAX_SEQS 32

typedef struct vcase {
    uint64_t seed;
    int64_t num_seqs;
    int64_t len_q[MAX_SEQS], len_k[MAX_SEQS];
    int64_t extra_q, extra_k; /* packed rows past the last cu_seqlens entry */
    int64_t H, Hk, D, Dv;
    attn_dtype q_dtype, kv_dtype;
    int32_t causal, window_left, window_right;
    int alibi, sinks;
    float softcap;
} vcase;

static void vcase_print(const vcase *c, const char *isa, const char *what) {
    char lens[512];
    size_t off = 0;
    for (int64_t b = 0; b < c->num_seqs && off < sizeof lens - 24; b++)
        off += (size_t)snprintf(lens + off, sizeof lens - off, "%s%lld/%lld", b ? "," : "", (long long)c->len_q[b],
                                (long long)c->len_k[b]);
    fprintf(stderr,
            "REPRO test_varlen %s: seed=%llu isa=%s q=%s kv=%s lens(q/k)=[%s] extra=(%lld,%lld) H=%lld Hk=%lld "
            "D=%lld Dv=%lld causal=%d window=(%d,%d) alibi=%d softcap=%g sinks=%d\n",
            what, (unsigned long long)c->seed, isa, attn_dtype_name(c->q_dtype), attn_dtype_name(c->kv_dtype), lens,
            (long long)c->extra_q, (long long)c->extra_k, (long long)c->H, (long long)c->Hk, (long long)c->D,
            (long long)c->Dv, (int)c->causal, (int)c->window_left, (int)c->window_right, c->alibi,
            (double)c->softcap, c->sinks);
}

static int64_t count_written(const void *buf, size_t esize, size_t first, size_t nelem) {
    const unsigned char *p = (const unsigned char *)buf;
    int64_t n = 0;
    for (size_t i = first; i < nelem; i++)
        for (size_t b = 0; b < esize; b++)
            if (p[i * esize + b] != 0xFF) {
                n++;
                break;
            }
    return n;
}

/* A [1, len, heads, size] BSND view of packed rows [row0, row0 + len) of a [total, heads, size] buffer. */
static attn_tensor seq_view(void *base, attn_dtype dtype, int64_t row0, int64_t len, int64_t heads, int64_t size) {
    int64_t shape[4] = {1, len, heads, size};
    attn_tensor t = attn_tensor_make((char *)base + (size_t)(row0 * heads * size) * attn_dtype_size(dtype), dtype,
                                     4, shape);
    return t;
}

/* Runs one case on every usable ISA; returns the number of failures. */
static int check_case(attn_ctx *ctx, const vcase *c) {
    int failures = 0;
    th_rng rng;
    th_rng_seed(&rng, c->seed * 104729u + 3u);
    int32_t cu_q[MAX_SEQS + 1], cu_k[MAX_SEQS + 1];
    cu_q[0] = cu_k[0] = 0;
    for (int64_t b = 0; b < c->num_seqs; b++) {
        cu_q[b + 1] = cu_q[b] + (int32_t)c->len_q[b];
        cu_k[b + 1] = cu_k[b] + (int32_t)c->len_k[b];
    }
    const int64_t used_q = cu_q[c->num_seqs], used_k = cu_k[c->num_seqs];
    const int64_t total_q = used_q + c->extra_q, total_k = used_k + c->extra_k;
    const int64_t H = c->H, Hk = c->Hk, D = c->D, Dv = c->Dv;
    const size_t nq = (size_t)(total_q * H * D), nk = (size_t)(total_k * Hk * D), nv = (size_t)(total_k * Hk * Dv);
    const size_t no = (size_t)(total_q * H * Dv), nl = (size_t)(H * total_q);
    void *q = th_alloc_fill(&rng, c->q_dtype, nq, -2, 2);
    void *k = th_alloc_fill(&rng, c->kv_dtype, nk, -2, 2);
    void *v = th_alloc_fill(&rng, c->kv_dtype, nv, -1, 1);
    float alibi[MAX_SEQS * 8], sinks[MAX_SEQS * 8];
    for (int64_t h = 0; h < H; h++) {
        alibi[h] = (float)th_rng_range(&rng, 0.0, 0.3);
        sinks[h] = (float)th_rng_range(&rng, -2.0, 2.0);
    }
    attn_params p;
    attn_params_init(&p);
    p.causal = c->causal;
    p.window_left = c->window_left, p.window_right = c->window_right;
    p.softcap = c->softcap;
    p.alibi_slopes = c->alibi ? alibi : NULL;
    p.sinks = c->sinks ? sinks : NULL;

    int64_t qs[3] = {total_q, H, D}, ks[3] = {total_k, Hk, D}, vs[3] = {total_k, Hk, Dv};
    int64_t os[3] = {total_q, H, Dv}, ls[2] = {H, total_q}, cs[1] = {c->num_seqs + 1};
    attn_tensor tq = attn_tensor_make(q, c->q_dtype, 3, qs), tk = attn_tensor_make(k, c->kv_dtype, 3, ks);
    attn_tensor tv = attn_tensor_make(v, c->kv_dtype, 3, vs);
    attn_tensor tcq = attn_tensor_make(cu_q, ATTN_DTYPE_I32, 1, cs), tck = attn_tensor_make(cu_k, ATTN_DTYPE_I32, 1, cs);

    /* expected: the dense oracle per sequence, on slices (rows past used_q stay NaN and are not compared) */
    void *eo = th_alloc_nan(c->q_dtype, no);
    float *el = th_alloc_nan(ATTN_DTYPE_F32, nl);
    void *ro = th_alloc_nan(c->q_dtype, no); /* attn_ref_forward_varlen */
    float *rl = th_alloc_nan(ATTN_DTYPE_F32, nl);
    for (int64_t b = 0; b < c->num_seqs; b++) {
        attn_tensor sq = seq_view(q, c->q_dtype, cu_q[b], c->len_q[b], H, D);
        attn_tensor sk = seq_view(k, c->kv_dtype, cu_k[b], c->len_k[b], Hk, D);
        attn_tensor sv = seq_view(v, c->kv_dtype, cu_k[b], c->len_k[b], Hk, Dv);
        attn_tensor so = seq_view(eo, c->q_dtype, cu_q[b], c->len_q[b], H, Dv);
        int64_t sls[3] = {1, H, c->len_q[b]};
        attn_tensor sl = attn_tensor_make(el + cu_q[b], ATTN_DTYPE_F32, 3, sls);
        sl.strides[1] = total_q, sl.strides[0] = H * total_q;
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &sq, &sk, &sv, &p, &so, &sl), ATTN_STATUS_OK);
    }
    attn_tensor tro = attn_tensor_make(ro, c->q_dtype, 3, os), trl = attn_tensor_make(rl, ATTN_DTYPE_F32, 2, ls);
    assert_int_equal(attn_ref_forward_varlen(&tq, &tk, &tv, &tcq, &tck, &p, &tro, &trl), ATTN_STATUS_OK);
    /* the packed oracle and the per-sequence dense oracle are one computation: same bits */
    int64_t uos[3] = {used_q, H, Dv};
    attn_tensor eo_used = attn_tensor_make(eo, c->q_dtype, 3, uos), ro_used = attn_tensor_make(ro, c->q_dtype, 3, uos);
    int oracle_same = th_bitwise_equal(&eo_used, &ro_used);
    for (int64_t h = 0; h < H && oracle_same; h++)
        oracle_same = memcmp(el + h * total_q, rl + h * total_q, (size_t)used_q * 4) == 0;
    if (!oracle_same) {
        vcase_print(c, "oracle", "attn_ref_forward_varlen != per-sequence attn_ref_forward");
        failures++;
    }

    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *isa = attn_isa_name(i);
        if (!attn_isa_available(isa)) continue;
        assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
        void *o = th_alloc_nan(c->q_dtype, no);
        float *l = th_alloc_nan(ATTN_DTYPE_F32, nl);
        attn_tensor to = attn_tensor_make(o, c->q_dtype, 3, os), tl = attn_tensor_make(l, ATTN_DTYPE_F32, 2, ls);
        const attn_status st = attn_forward_varlen(ctx, &tq, &tk, &tv, &tcq, &tck, &p, &to, &tl);
        /* compare rows [0, used_q) with the oracle */
        attn_tensor o_used = attn_tensor_make(o, c->q_dtype, 3, uos);
        const th_tol tol = th_tol_for(c->q_dtype);
        size_t bad_out = 0, bad_lse = 0;
        const double err = th_compare(&o_used, &eo_used, tol, 1.0, &bad_out);
        double lerr = 0.0;
        for (int64_t h = 0; h < H; h++) {
            int64_t one[2] = {1, used_q};
            attn_tensor a = attn_tensor_make(l + h * total_q, ATTN_DTYPE_F32, 2, one);
            attn_tensor e = attn_tensor_make(el + h * total_q, ATTN_DTYPE_F32, 2, one);
            size_t bh = 0;
            const double eh = th_compare_lse(&a, &e, tol, &bh);
            bad_lse += bh;
            if (eh > lerr) lerr = eh;
        }
        /* rows past cu_seqlens_q[last] are untouched (out rows and LSE columns) */
        const size_t es = attn_dtype_size(c->q_dtype);
        int64_t stray = count_written(o, es, (size_t)(used_q * H * Dv), no);
        for (int64_t h = 0; h < H; h++)
            stray += count_written(l + h * total_q, 4, (size_t)used_q, (size_t)total_q);
        /* the dense fast path on each sequence gives the same bits */
        int dense_same = 1;
        void *dout = th_alloc_nan(c->q_dtype, no);
        float *dl = th_alloc_nan(ATTN_DTYPE_F32, nl);
        for (int64_t b = 0; b < c->num_seqs; b++) {
            attn_tensor sq = seq_view(q, c->q_dtype, cu_q[b], c->len_q[b], H, D);
            attn_tensor sk = seq_view(k, c->kv_dtype, cu_k[b], c->len_k[b], Hk, D);
            attn_tensor sv = seq_view(v, c->kv_dtype, cu_k[b], c->len_k[b], Hk, Dv);
            attn_tensor so = seq_view(dout, c->q_dtype, cu_q[b], c->len_q[b], H, Dv);
            int64_t sls[3] = {1, H, c->len_q[b]};
            attn_tensor sl = attn_tensor_make(dl + cu_q[b], ATTN_DTYPE_F32, 3, sls);
            sl.strides[1] = total_q, sl.strides[0] = H * total_q;
            if (attn_forward(ctx, ATTN_LAYOUT_BSND, &sq, &sk, &sv, &p, &so, &sl) != ATTN_STATUS_OK) dense_same = 0;
        }
        attn_tensor d_used = attn_tensor_make(dout, c->q_dtype, 3, uos);
        if (!th_bitwise_equal(&d_used, &o_used)) dense_same = 0;
        for (int64_t h = 0; h < H; h++)
            if (memcmp(dl + h * total_q, l + h * total_q, (size_t)used_q * 4) != 0) dense_same = 0;
        free(dout), free(dl);

        if (st != ATTN_STATUS_OK || bad_out || bad_lse || stray || !dense_same) {
            char what[256];
            snprintf(what, sizeof what, "status=%d bad_out=%zu maxerr=%.3g bad_lse=%zu lse_maxerr=%.3g stray=%lld "
                     "dense_bitwise=%d (%s)", (int)st, bad_out, err, bad_lse, lerr, (long long)stray, dense_same,
                     attn_last_error());
            vcase_print(c, isa, what);
            failures++;
        }
        free(o), free(l);
    }
    free(q), free(k), free(v), free(eo), free(el), free(ro), free(rl);
    return failures;
}

static vcase vcase_default(void) {
    vcase c;
    memset(&c, 0, sizeof c);
    c.seed = 1;
    c.H = 4, c.Hk = 2, c.D = 16, c.Dv = 16;
    c.q_dtype = c.kv_dtype = ATTN_DTYPE_F32;
    c.window_left = c.window_right = -1;
    return c;
}

static void set_lens(vcase *c, int64_t n, const int64_t *lq, const int64_t *lk) {
    c->num_seqs = n;
    for (int64_t b = 0; b < n; b++) c->len_q[b] = lq[b], c->len_k[b] = lk[b];
}

static attn_ctx *new_ctx(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    return ctx;
}

/* ---------------------------------------------------------------------------------------------
 * Tests
 * --------------------------------------------------------------------------------------------- */
static void test_zero_length_sequences(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const int64_t lq[] = {0, 3, 5, 0, 1, 4, 0};
    const int64_t lk[] = {0, 0, 9, 6, 1, 4, 0};
    int fails = 0;
    for (int cm = 0; cm < 3; cm++)
        for (int sinks = 0; sinks < 2; sinks++) {
            vcase c = vcase_default();
            c.seed = 10 + (uint64_t)(cm * 2 + sinks);
            set_lens(&c, 7, lq, lk);
            c.extra_q = 3, c.extra_k = 2;
            c.causal = cm, c.sinks = sinks;
            fails += check_case(ctx, &c);
        }
    /* a batch of only empty sequences, and batch 0 (cu_seqlens = {0}) */
    vcase c = vcase_default();
    const int64_t z[] = {0, 0};
    set_lens(&c, 2, z, z);
    c.extra_q = 4;
    fails += check_case(ctx, &c);
    c.num_seqs = 0;
    fails += check_case(ctx, &c);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_causal_per_sequence(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    /* chunked prefill (q < k), fresh prefill (q == k), more queries than keys (leading rows empty), decode */
    const int64_t lq[] = {7, 12, 9, 1, 1, 20};
    const int64_t lk[] = {30, 12, 4, 70, 1, 20};
    int fails = 0;
    const int32_t wins[][2] = {{-1, -1}, {3, 0}, {0, 0}, {2, 5}, {100, -1}};
    for (int cm = 0; cm < 3; cm++)
        for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++) {
            vcase c = vcase_default();
            c.seed = 20 + (uint64_t)cm * 8 + w;
            set_lens(&c, 6, lq, lk);
            c.causal = cm;
            c.window_left = wins[w][0], c.window_right = wins[w][1];
            fails += check_case(ctx, &c);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_gqa_and_dtypes(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const int64_t cfg[][2] = {{3, 3}, {8, 2}, {7, 1}, {14, 2}};
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t lq[] = {5, 1, 17, 0, 33};
    const int64_t lk[] = {5, 40, 17, 3, 65};
    int fails = 0, n = 0;
    for (size_t g = 0; g < sizeof cfg / sizeof cfg[0]; g++)
        for (int a = 0; a < 3; a++) {
            vcase c = vcase_default();
            c.seed = 50 + (uint64_t)n++;
            set_lens(&c, 5, lq, lk);
            c.H = cfg[g][0], c.Hk = cfg[g][1];
            c.q_dtype = dts[a], c.kv_dtype = dts[(a + (int)g) % 3];
            c.D = g == 3 ? 128 : 24, c.Dv = g == 2 ? 40 : c.D;
            c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            c.alibi = (n % 3) == 0, c.softcap = (n % 4) == 1 ? 10.0f : 0.0f, c.sinks = (n % 5) == 2;
            fails += check_case(ctx, &c);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static vcase random_case(uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    vcase c = vcase_default();
    static const int64_t ratios[] = {1, 2, 4, 7};
    static const int64_t ds[] = {1, 4, 8, 16, 33, 64, 128};
    static const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    c.seed = seed;
    c.num_seqs = th_rng_int(&r, 1, 12);
    for (int64_t b = 0; b < c.num_seqs; b++) {
        c.len_q[b] = th_rng_int(&r, 0, 3) == 0 ? 0 : th_rng_int(&r, 1, 24);
        c.len_k[b] = th_rng_int(&r, 0, 5) == 0 ? 0 : th_rng_int(&r, 1, 64);
        if (th_rng_int(&r, 0, 2) == 0) c.len_q[b] = 1; /* decode */
    }
    c.extra_q = th_rng_int(&r, 0, 3), c.extra_k = th_rng_int(&r, 0, 3);
    c.Hk = th_rng_int(&r, 1, 2);
    c.H = c.Hk * ratios[th_rng_int(&r, 0, 3)];
    c.D = ds[th_rng_int(&r, 0, 6)];
    c.Dv = th_rng_int(&r, 0, 3) == 0 ? ds[th_rng_int(&r, 0, 6)] : c.D;
    c.q_dtype = dts[th_rng_int(&r, 0, 2)];
    c.kv_dtype = th_rng_int(&r, 0, 2) == 0 ? dts[th_rng_int(&r, 0, 2)] : c.q_dtype;
    c.causal = (int32_t)th_rng_int(&r, 0, 2);
    c.window_left = th_rng_int(&r, 0, 3) == 0 ? (int32_t)th_rng_int(&r, 0, 20) : -1;
    c.window_right = th_rng_int(&r, 0, 3) == 0 ? (int32_t)th_rng_int(&r, 0, 20) : -1;
    c.alibi = th_rng_int(&r, 0, 4) == 0;
    c.sinks = th_rng_int(&r, 0, 4) == 0;
    c.softcap = th_rng_int(&r, 0, 4) == 0 ? 15.0f : 0.0f;
    return c;
}

static void test_random(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const char *only = getenv("ATTN_TEST_SEED");
    int fails = 0;
    if (only && *only) {
        vcase c = random_case(strtoull(only, NULL, 10));
        fails += check_case(ctx, &c);
    } else {
        for (uint64_t s = 1; s <= 24; s++) {
            vcase c = random_case(s);
            fails += check_case(ctx, &c);
        }
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_length_sequences),
        cmocka_unit_test(test_causal_per_sequence),
        cmocka_unit_test(test_gqa_and_dtypes),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
