/*
 * test_ctx_threads.c — one attn_ctx shared by several threads (attn.h "Thread safety"): a compute call made
 * while another thread's call uses the ctx fails with INVALID_ARGUMENT naming ctx and writes nothing, instead
 * of sharing the scratch (before the claim, 3 Python threads on one Context crashed or returned wrong bits).
 * Every call that succeeds returns the bits of the single-threaded reference; thread-count changes are refused
 * while a call runs. With one ctx per thread nothing ever fails. The collisions are racy by nature: the test
 * asserts on every outcome it sees (it cannot pass with a corrupted result) and prints how many calls collided.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/ctx.h" /* the small-call rule's state (test_small_call_rule_learns) */
#include "harness.h"

#define CT_THREADS 3
#define CT_CALLS 120
/* calls per worker: CT_CALLS, a fifth of them under emulation (th_test_emulated: `make test-arm64` runs this
   under qemu-user, where 3 workers × 120 calls take minutes) */
static int ct_calls(void) { return th_test_emulated() ? CT_CALLS / 5 : th_test_small() ? CT_CALLS / 3 : CT_CALLS; }

typedef struct ct_shared {
    attn_ctx *shared; /* NULL: each worker creates its own */
    attn_tensor tq, tk, tv;
    const float *ref;
    size_t n;
    attn_params p;
} ct_shared;

typedef struct ct_worker {
    const ct_shared *sh;
    int ok, busy, wrong, bad_message, wrote_on_failure;
} ct_worker;

static void *ct_run(void *arg) {
    ct_worker *w = (ct_worker *)arg;
    const ct_shared *sh = w->sh;
    attn_ctx *own = NULL;
    if (!sh->shared && attn_ctx_create(&own) != ATTN_STATUS_OK) return NULL;
    attn_ctx *ctx = sh->shared ? sh->shared : own;
    float *o = malloc(sh->n * sizeof(float));
    attn_tensor to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, sh->tq.shape);
    for (int i = 0; i < ct_calls(); i++) {
        memset(o, 0x7f, sh->n * sizeof(float));
        const attn_status st = attn_forward(ctx, ATTN_LAYOUT_BSND, &sh->tq, &sh->tk, &sh->tv, &sh->p, &to, NULL);
        if (st == ATTN_STATUS_OK) {
            w->ok++;
            w->wrong += memcmp(o, sh->ref, sh->n * sizeof(float)) != 0;
            continue;
        }
        w->busy++;
        w->bad_message += st != ATTN_STATUS_INVALID_ARGUMENT || !strstr(attn_last_error(), "ctx: is in use");
        for (size_t e = 0; e < sh->n; e++) {
            uint32_t u;
            memcpy(&u, &o[e], 4);
            if (u != 0x7f7f7f7fu) {
                w->wrote_on_failure++;
                break;
            }
        }
    }
    free(o);
    attn_ctx_destroy(own);
    return NULL;
}

static void ct_case(attn_ctx *shared, int *collisions) {
    th_rng rng;
    th_rng_seed(&rng, 5);
    /* sanitizer and emulator tiers (th_test_small): shorter calls, still long enough for threads to collide */
    const int64_t B = 2, Sq = 64, Sk = th_test_small() ? 130 : 700, H = 8, Hk = 2, D = 64;
    static int64_t qs[4], ks[4];
    qs[0] = B, qs[1] = Sq, qs[2] = H, qs[3] = D, ks[0] = B, ks[1] = Sk, ks[2] = Hk, ks[3] = D;
    ct_shared sh;
    memset(&sh, 0, sizeof sh);
    sh.shared = shared;
    sh.n = (size_t)(B * Sq * H * D);
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, sh.n, -2, 2);
    float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * Sk * Hk * D), -2, 2);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * Sk * Hk * D), -1, 1);
    float *ref = malloc(sh.n * sizeof(float));
    sh.tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs);
    sh.tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks), sh.tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks);
    attn_params_init(&sh.p);
    sh.p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_ctx *solo = NULL;
    assert_int_equal(attn_ctx_create(&solo), ATTN_STATUS_OK);
    attn_tensor tr = attn_tensor_make(ref, ATTN_DTYPE_F32, 4, qs);
    assert_int_equal(attn_forward(solo, ATTN_LAYOUT_BSND, &sh.tq, &sh.tk, &sh.tv, &sh.p, &tr, NULL), ATTN_STATUS_OK);
    attn_ctx_destroy(solo);
    sh.ref = ref;
    pthread_t t[CT_THREADS];
    ct_worker w[CT_THREADS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < CT_THREADS; i++) {
        w[i].sh = &sh;
        assert_int_equal(pthread_create(&t[i], NULL, ct_run, &w[i]), 0);
    }
    for (int i = 0; i < CT_THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
    *collisions = 0;
    for (int i = 0; i < CT_THREADS; i++) {
        assert_int_equal(w[i].ok + w[i].busy, ct_calls());
        assert_int_equal(w[i].wrong, 0);            /* every result that came back is the reference's */
        assert_int_equal(w[i].bad_message, 0);      /* every refusal names ctx */
        assert_int_equal(w[i].wrote_on_failure, 0); /* and wrote nothing */
        *collisions += w[i].busy;
    }
    free(q), free(k), free(v), free(ref);
}

static void test_shared_ctx_refuses_concurrent_calls(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    int collisions = 0;
    ct_case(ctx, &collisions);
    fprintf(stderr, "shared ctx: %d of %d calls refused (busy), the rest bitwise the reference\n", collisions,
            CT_THREADS * ct_calls());
    assert_true(collisions < CT_THREADS * ct_calls()); /* some calls ran */
    attn_ctx_destroy(ctx);
}

static void test_own_ctx_never_refuses(void **state) {
    (void)state;
    int collisions = -1;
    ct_case(NULL, &collisions);
    assert_int_equal(collisions, 0);
}

/* The claim is released on every path: failures before it (bad arguments) and after it leave ctx usable. */
static void test_claim_released(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float q[4 * 8] = {0}, o[4 * 8];
    int64_t s4[4] = {1, 4, 1, 8}, bad[4] = {1, 4, 3, 8};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, s4), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, s4);
    attn_tensor tb = attn_tensor_make(q, ATTN_DTYPE_F32, 4, bad);
    attn_params p;
    attn_params_init(&p);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tb, &tb, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tq, &tq, &p, &to, NULL), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_num_threads(ctx, 1 + i % 2), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_isa(ctx, "generic"), ATTN_STATUS_OK);
    }
    attn_ctx_destroy(ctx);
}

/* ATTN_PARALLEL_MIN_FLOPS as the suite set it (1 and its value in keep, or 0 when unset), and back. */
static int ct_env_save(char keep[64]) {
    const char *v = getenv("ATTN_PARALLEL_MIN_FLOPS");
    snprintf(keep, 64, "%s", v ? v : "");
    return v != NULL;
}

static void ct_env_restore(int saved, const char keep[64]) {
    if (saved)
        setenv("ATTN_PARALLEL_MIN_FLOPS", keep, 1);
    else
        unsetenv("ATTN_PARALLEL_MIN_FLOPS");
}

/* Small calls run alone or on every thread by the context's rule (ATTN_PARALLEL_MIN_FLOPS, read when a ctx is
 * created, fixes it; the C suites set it to 0 so that their small shapes still run on every thread): a decode call
 * of 9 query / 3 kv heads × 64 over 100 keys (2.3e5 flop, below the default 2^18) and one of 12 / 4 heads over 700
 * keys (above it) give the same bits with the rule off, fixed, at the default and with a malformed value (the
 * default: learned), on 2 threads, as on 1. */
static void test_small_calls_one_thread(void **state) {
    (void)state;
    char keep[64];
    const int saved = ct_env_save(keep);
    th_rng rng;
    th_rng_seed(&rng, 77);
    const int64_t shapes[2][3] = {{9, 3, 100}, {12, 4, 700}}; /* num_heads, num_kv_heads, keys */
    const char *values[4] = {"0", "262144", "1e30", "many"};
    for (int si = 0; si < 2; si++) {
        const int64_t H = shapes[si][0], Hk = shapes[si][1], Sk = shapes[si][2], D = 64;
        int64_t qs[4] = {2, 1, H, D}, ks[4] = {2, Sk, Hk, D};
        float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(2 * H * D), -2, 2);
        float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(2 * Sk * Hk * D), -2, 2);
        float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(2 * Sk * Hk * D), -1, 1);
        float ref[2 * 12 * 64], out[2 * 12 * 64];
        attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks),
                    tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks);
        attn_tensor tr = attn_tensor_make(ref, ATTN_DTYPE_F32, 4, qs),
                    to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, qs);
        attn_ctx *one = NULL;
        assert_int_equal(attn_ctx_create(&one), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_num_threads(one, 1), ATTN_STATUS_OK);
        assert_int_equal(attn_forward(one, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &tr, NULL), ATTN_STATUS_OK);
        attn_ctx_destroy(one);
        for (int vi = 0; vi < 4; vi++) {
            setenv("ATTN_PARALLEL_MIN_FLOPS", values[vi], 1);
            attn_ctx *ctx = NULL;
            assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
            assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
            memset(out, 0xFF, sizeof out);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, NULL), ATTN_STATUS_OK);
            assert_memory_equal(out, ref, (size_t)(2 * H * D) * sizeof(float));
            attn_ctx_destroy(ctx);
        }
        free(q), free(k), free(v);
    }
    ct_env_restore(saved, keep);
}

/* The small-call rule on synthetic samples (attn_fwd_small_threads / attn_fwd_small_record): the first
 * 2 × SAMPLES calls alternate alone / every thread, each timed; then the way with the lower median (every thread
 * only below 0.9 of alone's) runs, one call in 4 timed, and every EXPLORE calls a burst of BURST runs the other
 * way, timed after its first call; the choice follows the samples both ways. */
static void test_small_rule_decides(void **state) {
    (void)state;
    enum { S = ATTN_FWD_SMALL_SAMPLES, E = ATTN_FWD_SMALL_EXPLORE, B = ATTN_FWD_SMALL_BURST, T = 3 };
    attn_fwd_small_rule r;
    memset(&r, 0, sizeof r);
    attn_exec ex;
    memset(&ex, 0, sizeof ex);
    ex.num_threads = T;
    ex.small = &r;
    /* ns per flop of each way: every thread at 0.85 of alone (below 0.9: it wins), later alone at 0.5 (alone wins) */
    double cost[2] = {1.0, 0.85};
    int64_t runs[2] = {0, 0};
    for (int64_t n = 0; n < 2 * S + 6 * E; n++) {
        int way = -7;
        double t0 = 0.0;
        const int32_t threads = attn_fwd_small_threads(&ex, &way, &t0);
        assert_true(threads == 1 || threads == T);
        const int w = threads == T;
        runs[w]++;
        if (n < 2 * S) { /* learning: alternated, alone first, every call timed */
            assert_int_equal(w, (int)(n % 2));
            assert_int_equal(way, w);
        } else {
            const int64_t e = n % E; /* n counts the learning calls too */
            const int chosen = r.way;
            if (e < B) {
                assert_int_equal(w, r.burst_way);
                assert_int_equal(way, e > 0 ? w : -1);
            } else {
                assert_int_equal(w, chosen);
                assert_int_equal(way, e % 4 == 0 ? w : -1);
            }
        }
        if (way >= 0) {
            assert_true(t0 > 0.0); /* the monotonic clock ran */
            attn_fwd_small_record(&r, way, cost[way]);
        }
        if (n == 2 * S - 1)
            assert_int_equal(r.way, 1); /* 0.85 < 0.9 · 1.0 */
        if (n == 2 * S + 2 * E - 1) {   /* the second burst has refreshed part of alone's ring: still every thread */
            assert_int_equal(r.way, 1);
            cost[0] = 0.5; /* from now on alone is cheaper: its bursts move the median */
        }
    }
    assert_int_equal(r.way, 0); /* after 4 more bursts (12 samples of alone at 0.5) alone won */
    assert_true(runs[0] > 0 && runs[1] > 0);
    /* a tie-ish case: every thread at 0.95 of alone is not enough */
    memset(&r, 0, sizeof r);
    cost[0] = 1.0, cost[1] = 0.95;
    for (int64_t n = 0; n < 2 * S; n++) {
        int way;
        double t0;
        const int32_t threads = attn_fwd_small_threads(&ex, &way, &t0);
        attn_fwd_small_record(&r, threads == T, cost[threads == T]);
    }
    assert_int_equal(r.way, 0);
    /* a fixed rule never times and always runs alone; no rule (NULL) runs alone */
    r.fixed = 1;
    int way;
    double t0;
    assert_int_equal(attn_fwd_small_threads(&ex, &way, &t0), 1);
    assert_int_equal(way, -1);
    ex.small = NULL;
    assert_int_equal(attn_fwd_small_threads(&ex, &way, &t0), 1);
    assert_int_equal(way, -1);
}

/* Without ATTN_PARALLEL_MIN_FLOPS a context times its small calls (the rule above, on the clock): its first
 * 2 × SAMPLES small calls alternate and are all recorded, later ones run the chosen way or a burst; a bound in
 * the environment fixes the rule (alone, nothing timed); a new thread count or kernel table learns again. Every
 * call's bits equal the one-thread call's, while learning and after (attn_forward). */
static void test_small_call_rule_learns(void **state) {
    (void)state;
    char keep[64];
    const int saved = ct_env_save(keep);
    th_rng rng;
    th_rng_seed(&rng, 78);
    enum { H = 9, HK = 3, D = 64, SK = 100, S = ATTN_FWD_SMALL_SAMPLES, E = ATTN_FWD_SMALL_EXPLORE };
    int64_t qs[4] = {1, 1, H, D}, ks[4] = {1, SK, HK, D};
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(H * D), -2, 2);
    float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(SK * HK * D), -2, 2);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(SK * HK * D), -1, 1);
    float ref[H * D], ref_generic[H * D], out[H * D];
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks),
                tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks);
    attn_tensor tr = attn_tensor_make(ref, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, qs);
    unsetenv("ATTN_PARALLEL_MIN_FLOPS");
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_num_threads(ctx, 1), ATTN_STATUS_OK);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &tr, NULL), ATTN_STATUS_OK);
    assert_int_equal(ctx->small.calls, 0); /* one thread: nothing to choose */
    for (int round = 0; round < 3; round++) {
        if (round < 2)
            assert_int_equal(attn_ctx_set_num_threads(ctx, 2 + round), ATTN_STATUS_OK);
        else
            assert_int_equal(attn_ctx_set_isa(ctx, "generic"), ATTN_STATUS_OK);
        assert_int_equal(ctx->small.calls + ctx->small.taken[0] + ctx->small.taken[1], 0);
        for (int i = 0; i < 2 * S + E; i++) {
            memset(out, 0xFF, sizeof out);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, NULL), ATTN_STATUS_OK);
            if (round == 2 && i == 0) /* the generic table's bits: its first call runs alone */
                memcpy(ref_generic, out, sizeof out);
            assert_memory_equal(out, round == 2 ? ref_generic : ref, sizeof out);
            if (i < 2 * S) { /* learning: alternated, every call a sample (a monotonic clock) */
                assert_int_equal(ctx->small.taken[0], (i + 2) / 2);
                assert_int_equal(ctx->small.taken[1], (i + 1) / 2);
            }
        }
        assert_int_equal(ctx->small.calls, 2 * S + E);
        /* after learning: a burst of BURST (BURST − 1 timed) and a quarter of the other E − BURST calls timed */
        assert_int_equal(ctx->small.taken[0] + ctx->small.taken[1],
                         2 * S + (ATTN_FWD_SMALL_BURST - 1) + (E - ATTN_FWD_SMALL_BURST) / 4);
    }
    attn_ctx_destroy(ctx);
    setenv("ATTN_PARALLEL_MIN_FLOPS", "262144", 1);
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(ctx->small.fixed, 1);
    assert_int_equal(attn_ctx_set_num_threads(ctx, 3), ATTN_STATUS_OK);
    assert_int_equal(ctx->small.fixed, 1);
    for (int i = 0; i < 3; i++) {
        memset(out, 0xFF, sizeof out);
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, NULL), ATTN_STATUS_OK);
        assert_memory_equal(out, ref, sizeof out);
    }
    assert_int_equal(ctx->small.calls + ctx->small.taken[0] + ctx->small.taken[1], 0);
    attn_ctx_destroy(ctx);
    free(q), free(k), free(v);
    ct_env_restore(saved, keep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_released),        cmocka_unit_test(test_shared_ctx_refuses_concurrent_calls),
        cmocka_unit_test(test_own_ctx_never_refuses), cmocka_unit_test(test_small_calls_one_thread),
        cmocka_unit_test(test_small_rule_decides),    cmocka_unit_test(test_small_call_rule_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
