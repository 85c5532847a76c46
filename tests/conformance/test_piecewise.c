/*
 * test_piecewise.c — piecewise causal/full attention (docs/DIFFUSION.md §2) against the oracle run with the
 * equivalent explicit mask (tril + mask[a:e, :e] = true, rows of the query ranges): the three worked
 * examples of §B.5, random span layouts and query-range shards over head sizes 64..256 and dtypes, window
 * and ALiBi on global positions, the oracle twin, thread invariance, and every validation error
 * (unsorted/overlapping spans — vllm-omni's silent wrong-length output — ranges, causal, masks).
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

/* The §B.2 keep matrix of the local queries: [Sq][Sk]. */
static unsigned char *pw_mask(const attn_span *spans, int64_t ns, const attn_query_range *r, int64_t nr, int64_t Sq,
                              int64_t Sk) {
    unsigned char *full = calloc((size_t)(Sk * Sk), 1), *m = calloc((size_t)(Sq * Sk) + 1, 1);
    for (int64_t i = 0; i < Sk; i++)
        for (int64_t j = 0; j <= i; j++)
            full[i * Sk + j] = 1; /* tril */
    for (int64_t t = 0; t < ns; t++)
        for (int64_t i = spans[t].start; i < spans[t].end; i++)
            for (int64_t j = 0; j < spans[t].end; j++)
                full[i * Sk + j] = 1;
    for (int64_t t = 0; t < nr; t++)
        for (int64_t i = r[t].local_start; i < r[t].local_end; i++)
            memcpy(m + i * Sk, full + (r[t].global_start + i - r[t].local_start) * Sk, (size_t)Sk);
    free(full);
    return m;
}

typedef struct pw_case {
    attn_dtype dt;
    int64_t B, Sq, Sk, H, Hk, D;
    const attn_span *spans;
    int64_t ns;
    const attn_query_range *ranges; /* NULL = default */
    int64_t nr;
    int32_t window_left, window_right;
    int alibi;
} pw_case;

/* Runs one case fast, oracle-with-mask and oracle twin; asserts agreement. */
static void pw_run(attn_ctx *ctx, th_rng *rng, const pw_case *c) {
    const int64_t B = c->B, Sq = c->Sq, Sk = c->Sk, H = c->H, Hk = c->Hk, D = c->D;
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, Sq}, ms[2] = {Sq, Sk};
    const size_t nq = (size_t)(B * Sq * H * D), nk = (size_t)(B * Sk * Hk * D), nl = (size_t)(B * H * Sq);
    void *q = th_alloc_fill(rng, c->dt, nq, -2, 2), *k = th_alloc_fill(rng, c->dt, nk, -2, 2);
    void *v = th_alloc_fill(rng, c->dt, nk, -1, 1), *o = th_alloc_nan(c->dt, nq), *o2 = th_alloc_nan(c->dt, nq);
    void *orf = th_alloc_nan(c->dt, nq), *l = th_alloc_nan(ATTN_DTYPE_F32, nl), *lr = th_alloc_nan(ATTN_DTYPE_F32, nl);
    attn_tensor tq = attn_tensor_make(q, c->dt, 4, qs), tk = attn_tensor_make(k, c->dt, 4, ks);
    attn_tensor tv = attn_tensor_make(v, c->dt, 4, ks), to = attn_tensor_make(o, c->dt, 4, qs);
    attn_tensor to2 = attn_tensor_make(o2, c->dt, 4, qs), tor = attn_tensor_make(orf, c->dt, 4, qs);
    attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls), tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 3, ls);
    attn_query_range def = {0, Sq, Sk - Sq};
    unsigned char *m = pw_mask(c->spans, c->ns, c->ranges ? c->ranges : &def, c->ranges ? c->nr : 1, Sq, Sk);
    attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
    float slopes[16];
    for (int h = 0; h < 16; h++)
        slopes[h] = 0.05f * (float)(h + 1);
    attn_params p, pe;
    attn_params_init(&p);
    p.window_left = c->window_left, p.window_right = c->window_right;
    if (c->alibi)
        p.alibi_slopes = slopes;
    pe = p;
    pe.mask = &tm;
    assert_int_equal(
        attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, c->spans, c->ns, c->ranges, c->nr, &p, &to, &tl),
        ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &pe, &tor, &tlr), ATTN_STATUS_OK);
    size_t bad = 0, bad_l = 0;
    double err = th_compare(&to, &tor, th_tol_for(c->dt), 1.0, &bad);
    double err_l = th_compare_lse(&tl, &tlr, th_tol_for(c->dt), &bad_l);
    if (bad || bad_l)
        print_error("piecewise %s Sq=%lld Sk=%lld D=%lld spans=%lld: %zu/%zu bad (err %g / %g)\n",
                    attn_dtype_name(c->dt), (long long)Sq, (long long)Sk, (long long)D, (long long)c->ns, bad, bad_l,
                    err, err_l);
    assert_int_equal(bad, 0);
    assert_int_equal(bad_l, 0);
    /* the oracle twin (literal span predicate) agrees as well */
    assert_int_equal(
        attn_ref_forward_piecewise(ATTN_LAYOUT_BSND, &tq, &tk, &tv, c->spans, c->ns, c->ranges, c->nr, &p, &tor, &tlr),
        ATTN_STATUS_OK);
    th_compare(&to, &tor, th_tol_for(c->dt), 1.0, &bad);
    assert_int_equal(bad, 0);
    /* thread-count invariance */
    const int32_t nt = attn_ctx_num_threads(ctx);
    assert_int_equal(attn_ctx_set_num_threads(ctx, nt == 1 ? 3 : 1), ATTN_STATUS_OK);
    assert_int_equal(
        attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, c->spans, c->ns, c->ranges, c->nr, &p, &to2, NULL),
        ATTN_STATUS_OK);
    assert_true(th_bitwise_equal(&to, &to2));
    assert_int_equal(attn_ctx_set_num_threads(ctx, nt), ATTN_STATUS_OK);
    free(q), free(k), free(v), free(o), free(o2), free(orf), free(l), free(lr), free(m);
}

static void test_keep_matrix_example1(void **state) {
    (void)state;
    /* §B.5 example 1: Sk = Sq = 10, spans [(3, 6)] → row r keeps {0..hi_r} */
    const attn_span sp[1] = {{3, 6}};
    const attn_query_range r = {0, 10, 0};
    unsigned char *m = pw_mask(sp, 1, &r, 1, 10, 10);
    const int hi[10] = {0, 1, 2, 5, 5, 5, 6, 7, 8, 9};
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 10; j++)
            assert_int_equal(m[i * 10 + j], j <= hi[i]);
    free(m);
}

static void test_worked_examples(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 21);
    const attn_span ex1[1] = {{3, 6}}, ex2[1] = {{5, 8}}, ex3[1] = {{4, 12}};
    const attn_query_range r3[2] = {{0, 4, 2}, {4, 8, 10}};
    pw_case c1 = {ATTN_DTYPE_F32, 2, 10, 10, 2, 1, 64, ex1, 1, NULL, 0, -1, -1, 0};
    pw_case c2 = {ATTN_DTYPE_F32, 1, 6, 10, 2, 2, 64, ex2, 1, NULL, 0, -1, -1, 0};
    pw_case c3 = {ATTN_DTYPE_F32, 1, 8, 16, 4, 2, 64, ex3, 1, r3, 2, -1, -1, 0};
    pw_case c4 = {ATTN_DTYPE_F32, 1, 19, 19, 2, 1, 64, NULL, 0, NULL, 0, -1, -1, 0}; /* [[]] = pure causal */
    pw_run(ctx, &rng, &c1);
    pw_run(ctx, &rng, &c2);
    pw_run(ctx, &rng, &c3);
    pw_run(ctx, &rng, &c4);
    attn_ctx_destroy(ctx);
}

static void test_random_layouts(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 22);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t heads[5] = {64, 96, 128, 192, 256};
    /* emulated (th_test_emulated): rounds 0-4 still cover every dtype, head size, B, GQA, the shard ranges and
       window + ALiBi */
    const int rounds = th_test_emulated() ? 5 : 10;
    for (int round = 0; round < rounds; round++) {
        int64_t Sk = th_rng_int(&rng, 20, 1300);
        if (th_test_small()) Sk = 20 + (Sk - 20) / 2; /* sanitizer tier: up to 660 keys, still two partitions */
        attn_span spans[8];
        int64_t ns = 0, pos = th_rng_int(&rng, 0, 20);
        while (ns < 8 && pos < Sk - 1) { /* video-style: text, frame, text, frame ... */
            const int64_t len = th_rng_int(&rng, 1, Sk / 3 + 1);
            if (pos + len > Sk)
                break;
            spans[ns].start = pos, spans[ns].end = pos + len;
            ns++;
            pos += len + th_rng_int(&rng, 0, 40);
        }
        pw_case c;
        memset(&c, 0, sizeof c);
        c.dt = dts[round % 3], c.B = 1 + round % 2, c.H = 4, c.Hk = round % 2 ? 2 : 4, c.D = heads[round % 5];
        c.spans = spans, c.ns = ns, c.Sk = Sk;
        c.window_left = c.window_right = -1;
        attn_query_range r[3];
        if (round % 3 == 2) { /* a sequence-parallel shard: two global chunks */
            const int64_t a = th_rng_int(&rng, 1, Sk / 2), b = th_rng_int(&rng, 0, Sk / 2 - 1 > 0 ? Sk / 2 - 1 : 0);
            const int64_t g0 = th_rng_int(&rng, 0, Sk - a), g1 = th_rng_int(&rng, 0, Sk - b);
            r[0].local_start = 0, r[0].local_end = a, r[0].global_start = g0;
            r[1].local_start = a, r[1].local_end = a + b, r[1].global_start = g1;
            r[2].local_start = a + b, r[2].local_end = a + b, r[2].global_start = 0; /* an empty range */
            c.ranges = r, c.nr = 3, c.Sq = a + b;
        } else {
            c.Sq = round % 3 == 0 ? Sk : th_rng_int(&rng, 1, Sk);
            if (th_test_emulated() && round % 3 == 0 && c.Sq > 160)
                c.Sq = 160; /* emulated: the last 160 rows of the square case (no RNG draw changes) */
            if (round == 3)
                c.window_left = 50, c.window_right = 7, c.alibi = 1; /* default ranges only */
        }
        pw_run(ctx, &rng, &c);
    }
    attn_ctx_destroy(ctx);
}

static void test_errors(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 23);
    const int64_t Sq = 10, Sk = 10, H = 2, D = 64;
    int64_t qs[4] = {1, Sq, H, D}, big[4] = {1, 12, H, D}, ms[2] = {Sq, Sk};
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(Sq * H * D), -1, 1);
    float *qb = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(12 * H * D), -1, 1);
    float *o = malloc((size_t)(Sq * H * D) * 4), *ob = malloc((size_t)(12 * H * D) * 4);
    memset(o, 0x7f, (size_t)(Sq * H * D) * 4);
    attn_tensor t = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, qs);
    attn_tensor tqb = attn_tensor_make(qb, ATTN_DTYPE_F32, 4, big), tob = attn_tensor_make(ob, ATTN_DTYPE_F32, 4, big);
    unsigned char m[100] = {0};
    attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
    const attn_span unsorted[2] = {{5, 8}, {2, 4}}, overlap[2] = {{2, 6}, {5, 8}}, empty[1] = {{4, 4}};
    const attn_span past[1] = {{4, 11}}, neg[1] = {{-1, 3}}, ok[1] = {{3, 6}};
    const attn_query_range gap[2] = {{0, 4, 0}, {5, 10, 5}}, shortr[1] = {{0, 9, 0}}, outside[1] = {{0, 10, 1}};
    const attn_query_range backwards[1] = {{0, -1, 0}};
    attn_params causal, masked, kpm;
    attn_params_init(&causal);
    causal.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_params_init(&masked);
    masked.mask = &tm;
    attn_params_init(&kpm);
    kpm.key_padding_mask = &tm;
    struct {
        const attn_span *s;
        int64_t ns;
        const attn_query_range *r;
        int64_t nr;
        const attn_params *p;
        attn_status st;
        const char *msg;
    } cases[] = {
        {unsorted, 2, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "spans[1]=(2,4) starts before spans[0] ends at 8: spans must be sorted and non-overlapping"},
        {overlap, 2, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans[1]=(5,8) starts before spans[0] ends at 6"},
        {empty, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans[0]=(4,4): expected 0 <= start < end"},
        {past, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans[0]=(4,11)"},
        {neg, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans[0]=(-1,3)"},
        {NULL, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans: is NULL"},
        {ok, -1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "num_spans=-1"},
        {ok, 1, gap, 2, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "query_ranges[1]=(5,10,5): must cover local query rows contiguously from 4"},
        {ok, 1, shortr, 1, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "cover local rows [0, 9), expected the full query [0, 10)"},
        {ok, 1, outside, 1, NULL, ATTN_STATUS_INVALID_ARGUMENT, "global positions fall outside the keys"},
        {ok, 1, backwards, 1, NULL, ATTN_STATUS_INVALID_ARGUMENT, "query_ranges[0]"},
        {ok, 1, shortr, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "num_query_ranges=0"},
        {ok, 1, NULL, 0, &causal, ATTN_STATUS_UNSUPPORTED, "params.causal=1: piecewise spans define causality"},
        {ok, 1, NULL, 0, &masked, ATTN_STATUS_UNSUPPORTED, "params.mask: explicit masks cannot be combined"},
        {ok, 1, NULL, 0, &kpm, ATTN_STATUS_UNSUPPORTED, "params.key_padding_mask"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_status st = attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &t, &t, &t, cases[i].s, cases[i].ns, cases[i].r,
                                                cases[i].nr, cases[i].p, &to, NULL);
        if (st != cases[i].st || !strstr(attn_last_error(), cases[i].msg))
            print_error("case %zu: status %d, message '%s'\n", i, (int)st, attn_last_error());
        assert_int_equal(st, cases[i].st);
        assert_non_null(strstr(attn_last_error(), cases[i].msg));
        st = attn_ref_forward_piecewise(ATTN_LAYOUT_BSND, &t, &t, &t, cases[i].s, cases[i].ns, cases[i].r, cases[i].nr,
                                        cases[i].p, &to, NULL);
        assert_int_equal(st, cases[i].st);
    }
    /* Sq > Sk without query ranges (B.7): rejected */
    assert_int_equal(attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &tqb, &t, &t, ok, 1, NULL, 0, NULL, &tob, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "seq_q=12 > seq_k=10 without query_ranges"));
    assert_int_equal(attn_forward_piecewise(NULL, ATTN_LAYOUT_BSND, &t, &t, &t, ok, 1, NULL, 0, NULL, &to, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    for (size_t i = 0; i < (size_t)(Sq * H * D); i++) { /* nothing written */
        uint32_t u;
        memcpy(&u, o + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    free(q), free(qb), free(o), free(ob);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_matrix_example1),
        cmocka_unit_test(test_worked_examples),
        cmocka_unit_test(test_random_layouts),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
