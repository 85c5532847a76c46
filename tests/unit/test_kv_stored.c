/*
 * test_kv_stored.c — the per-layer "KV stored" notification of disaggregated prefill (seed
 * reshape_and_cache records reshape_cache_event for a KV producer): a producer that copies each layer's
 * written rows out as the layer completes (through attn_kv_stored_next) and whole blocks into a host pool
 * (attn_swap_blocks, called from the callback). Asserted: one call per layer in layer order, the counts, the
 * copied rows equal the key/value inputs and the copied blocks equal the cache, runs split at pads, block
 * boundaries and slot jumps, and no call (and no write) on any validation failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define KS_LAYERS 3
#define KS_TOKENS 23
#define KS_BLOCKS 12
#define KS_BS 4
#define KS_HK 2
#define KS_D 16
#define KS_HOST_BLOCKS 40

/* The producer: per layer, the rows it received (token-major, like the key/value inputs) and a host pool of
 * whole blocks (host block = layer·KS_BLOCKS + device block). */
typedef struct ks_producer {
    attn_ctx *ctx;
    attn_dtype dt;
    int calls;
    int32_t order[8];
    int64_t num_written[8], num_runs[8], runs_seen[8];
    char *rows_k[KS_LAYERS], *rows_v[KS_LAYERS]; /* [KS_TOKENS][KS_HK][KS_D] each         */
    unsigned char got[KS_LAYERS][KS_TOKENS];     /* token t arrived for the layer         */
    void *host;                                  /* [2, KS_HOST_BLOCKS, KS_BS, KS_HK, KS_D] */
    attn_tensor thost;
    attn_status swap_status;
} ks_producer;

static void ks_on_stored(void *user, const attn_kv_stored *ev) {
    ks_producer *pr = (ks_producer *)user;
    const int c = pr->calls++;
    if (c < 8) pr->order[c] = ev->layer_idx, pr->num_written[c] = ev->num_written, pr->num_runs[c] = ev->num_runs;
    const attn_tensor *kc = ev->kv_cache;
    const size_t es = attn_dtype_size(kc->dtype), row_bytes = (size_t)(KS_HK * KS_D) * es;
    const int32_t L = ev->layer_idx;
    int64_t cursor = 0, n = 0, blocks[KS_TOKENS];
    int64_t num_blocks = 0;
    attn_kv_block_rows run;
    while (attn_kv_stored_next(ev, &cursor, &run)) {
        assert_true(run.row_start < run.row_end && run.row_end <= ev->block_size);
        for (int64_t i = 0; i < run.row_end - run.row_start; i++) { /* copy the rows out, token by token */
            const int64_t t = run.token_start + i, row = run.row_start + i;
            const char *kp = (const char *)kc->data + (run.block_idx * kc->strides[1] + row * kc->strides[2]) * es;
            const char *vp = kp + kc->strides[0] * es;
            memcpy(pr->rows_k[L] + t * row_bytes, kp, row_bytes);
            memcpy(pr->rows_v[L] + t * row_bytes, vp, row_bytes);
            pr->got[L][t] = 1;
        }
        int seen = 0;
        for (int64_t b = 0; b < num_blocks; b++) seen |= blocks[b] == run.block_idx;
        if (!seen) blocks[num_blocks++] = run.block_idx;
        n++;
    }
    if (c < 8) pr->runs_seen[c] = n;
    /* and the blocks as a whole into the host pool, with an attn entry called from inside the callback */
    int64_t map[KS_TOKENS][2];
    for (int64_t b = 0; b < num_blocks; b++) map[b][0] = blocks[b], map[b][1] = L * KS_BLOCKS + blocks[b];
    int64_t ms[2] = {num_blocks, 2};
    attn_tensor tm = attn_tensor_make(map, ATTN_DTYPE_I64, 2, ms);
    if (num_blocks) pr->swap_status = attn_swap_blocks(pr->ctx, kc, &pr->thost, &tm);
}

/* Independent run count: a new run starts at every stored token whose predecessor is not the row before it. */
static int64_t ks_expected_runs(const int64_t *slots, int64_t n) {
    int64_t runs = 0;
    for (int64_t t = 0; t < n; t++) {
        if (slots[t] < 0) continue;
        const int cont = t > 0 && slots[t - 1] >= 0 && slots[t] == slots[t - 1] + 1 && slots[t] % KS_BS != 0;
        runs += !cont;
    }
    return runs;
}

static void ks_run(attn_dtype dt, int32_t threads, int use_i32) {
    th_rng rng;
    th_rng_seed(&rng, 31 + (uint64_t)dt);
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
    const size_t es = attn_dtype_size(dt), row_bytes = (size_t)(KS_HK * KS_D) * es;
    const size_t cache_elems = (size_t)(2 * KS_BLOCKS * KS_BS * KS_HK * KS_D);
    int64_t cs[5] = {2, KS_BLOCKS, KS_BS, KS_HK, KS_D}, hs[5] = {2, KS_HOST_BLOCKS, KS_BS, KS_HK, KS_D};
    int64_t kvs[3] = {KS_TOKENS + 2, KS_HK, KS_D}; /* two trailing padded rows the write ignores */
    ks_producer pr;
    memset(&pr, 0, sizeof pr);
    pr.ctx = ctx, pr.dt = dt;
    pr.host = th_alloc_nan(dt, (size_t)(2 * KS_HOST_BLOCKS * KS_BS * KS_HK * KS_D));
    pr.thost = attn_tensor_make(pr.host, dt, 5, hs);
    void *caches[KS_LAYERS], *keys[KS_LAYERS], *vals[KS_LAYERS];
    attn_tensor tc[KS_LAYERS];
    /* a prefill batch of 3 requests: 9 tokens from row 2 of block 5 (crossing into block 7), a pad, 6 tokens
     * in block 0 then 1, a duplicate slot (the later token wins), and a jump inside block 10 */
    int64_t slots[KS_TOKENS] = {22, 23, 28, 29, 30, 31, 32, 33, 34, -1, 0, 1, 2, 3, 4, 5, 6, 40, 41, 41, 43, -1, 47};
    int32_t slots32[KS_TOKENS];
    for (int t = 0; t < KS_TOKENS; t++) slots32[t] = (int32_t)slots[t];
    int64_t sn[1] = {KS_TOKENS};
    attn_tensor tsl = use_i32 ? attn_tensor_make(slots32, ATTN_DTYPE_I32, 1, sn) : attn_tensor_make(slots, ATTN_DTYPE_I64, 1, sn);
    for (int L = 0; L < KS_LAYERS; L++) {
        caches[L] = th_alloc_nan(dt, cache_elems);
        tc[L] = attn_tensor_make(caches[L], dt, 5, cs);
        keys[L] = th_alloc_fill(&rng, dt, (size_t)((KS_TOKENS + 2) * KS_HK * KS_D), -1, 1);
        vals[L] = th_alloc_fill(&rng, dt, (size_t)((KS_TOKENS + 2) * KS_HK * KS_D), -1, 1);
        pr.rows_k[L] = calloc(KS_TOKENS, row_bytes);
        pr.rows_v[L] = calloc(KS_TOKENS, row_bytes);
    }
    /* the model's layer loop: write layer L, its transfer starts in the callback before layer L+1 runs */
    for (int L = 0; L < KS_LAYERS; L++) {
        attn_tensor tk = attn_tensor_make(keys[L], dt, 3, kvs), tv = attn_tensor_make(vals[L], dt, 3, kvs);
        attn_kv_notify nt = {ks_on_stored, &pr, L};
        assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc[L], &tsl, &nt), ATTN_STATUS_OK);
        assert_int_equal(pr.calls, L + 1); /* synchronous: done before the entry returns */
    }
    assert_int_equal(pr.calls, KS_LAYERS);
    assert_int_equal(pr.swap_status, ATTN_STATUS_OK);
    const int64_t want_runs = ks_expected_runs(slots, KS_TOKENS);
    assert_int_equal(want_runs, 9); /* 22-23 | 28-31 | 32-34 (block boundary) | 0-3 | 4-6 | 40-41 | 41 | 43 | 47 */
    for (int L = 0; L < KS_LAYERS; L++) {
        assert_int_equal(pr.order[L], L);
        assert_int_equal(pr.num_written[L], KS_TOKENS - 2);
        assert_int_equal(pr.num_runs[L], want_runs);
        assert_int_equal(pr.runs_seen[L], want_runs);
        for (int t = 0; t < KS_TOKENS; t++) {
            assert_int_equal(pr.got[L][t], slots[t] >= 0);
            if (slots[t] < 0) continue;
            /* the row copied out equals the cache row, and equals the input unless a later token overwrote it */
            const char *crow = (const char *)caches[L] + (size_t)slots[t] * row_bytes;
            assert_memory_equal(pr.rows_k[L] + (size_t)t * row_bytes, crow, row_bytes);
            assert_memory_equal(pr.rows_v[L] + (size_t)t * row_bytes,
                                crow + (size_t)(KS_BLOCKS * KS_BS) * row_bytes, row_bytes);
            int overwritten = 0;
            for (int u = t + 1; u < KS_TOKENS; u++) overwritten |= slots[u] == slots[t];
            if (!overwritten) {
                assert_memory_equal(pr.rows_k[L] + (size_t)t * row_bytes, (char *)keys[L] + (size_t)t * row_bytes,
                                    row_bytes);
                assert_memory_equal(pr.rows_v[L] + (size_t)t * row_bytes, (char *)vals[L] + (size_t)t * row_bytes,
                                    row_bytes);
            }
        }
        /* every written block reached the host pool whole (key and value halves) */
        const size_t blk_bytes = (size_t)KS_BS * row_bytes;
        for (int64_t b = 0; b < KS_BLOCKS; b++) {
            int written = 0;
            for (int t = 0; t < KS_TOKENS; t++) written |= slots[t] >= 0 && slots[t] / KS_BS == b;
            const char *hk = (const char *)pr.host + (size_t)(L * KS_BLOCKS + b) * blk_bytes;
            const char *ck = (const char *)caches[L] + (size_t)b * blk_bytes;
            const size_t half_h = (size_t)KS_HOST_BLOCKS * blk_bytes, half_c = (size_t)KS_BLOCKS * blk_bytes;
            if (written) {
                assert_memory_equal(hk, ck, blk_bytes);
                assert_memory_equal(hk + half_h, ck + half_c, blk_bytes);
            } else {
                for (size_t i = 0; i < blk_bytes; i++) assert_int_equal((unsigned char)hk[i], 0xFF); /* untouched */
            }
        }
    }
    for (int L = 0; L < KS_LAYERS; L++) free(caches[L]), free(keys[L]), free(vals[L]), free(pr.rows_k[L]), free(pr.rows_v[L]);
    free(pr.host);
    attn_ctx_destroy(ctx);
}

static void test_producer_f32(void **state) {
    (void)state;
    ks_run(ATTN_DTYPE_F32, 1, 0);
}

static void test_producer_bf16_threads_i32(void **state) {
    (void)state;
    ks_run(ATTN_DTYPE_BF16, 2, 1);
}

static int ks_count_calls;
static void ks_count(void *user, const attn_kv_stored *ev) {
    (void)user;
    ks_count_calls++;
    assert_int_equal(ev->layer_idx, 7);
}

static void test_no_call_on_failure(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 33);
    int64_t cs[5] = {2, KS_BLOCKS, KS_BS, KS_HK, KS_D}, kvs[3] = {3, KS_HK, KS_D}, sn[1] = {3}, s0[1] = {0};
    const size_t cache_elems = (size_t)(2 * KS_BLOCKS * KS_BS * KS_HK * KS_D);
    float *cache = th_alloc_nan(ATTN_DTYPE_F32, cache_elems);
    float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, 3 * KS_HK * KS_D, -1, 1);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, 3 * KS_HK * KS_D, -1, 1);
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, cs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 3, kvs);
    attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_F32, 3, kvs);
    int64_t bad[3] = {1, 9001, 2}, good[3] = {4, 5, -1};
    attn_tensor tbad = attn_tensor_make(bad, ATTN_DTYPE_I64, 1, sn), tgood = attn_tensor_make(good, ATTN_DTYPE_I64, 1, sn);
    attn_tensor tnone = attn_tensor_make(good, ATTN_DTYPE_I64, 1, s0);
    attn_tensor tv_bad = tv;
    tv_bad.shape[2] = KS_D / 2;
    attn_kv_notify nt = {ks_count, NULL, 7}, nt_null = {NULL, NULL, 7}, nt_neg = {ks_count, NULL, -1};
    ks_count_calls = 0;
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tbad, &nt), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "slot_mapping: entry 1 = 9001"));
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv_bad, &tc, &tgood, &nt), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "value"));
    assert_int_equal(attn_reshape_and_cache_notify(NULL, &tk, &tv, &tc, &tgood, &nt), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tgood, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "notify: is NULL"));
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tgood, &nt_null), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "notify: on_stored is NULL"));
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tgood, &nt_neg), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "notify: layer_idx=-1"));
    assert_int_equal(ks_count_calls, 0);
    for (size_t i = 0; i < cache_elems; i++) { /* nothing written */
        uint32_t u;
        memcpy(&u, cache + i, 4);
        assert_int_equal(u, 0xFFFFFFFFu);
    }
    /* a write that stores nothing still notifies once (the layer is done) */
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tnone, &nt), ATTN_STATUS_OK);
    assert_int_equal(ks_count_calls, 1);
    assert_int_equal(attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tgood, &nt), ATTN_STATUS_OK);
    assert_int_equal(ks_count_calls, 2);
    /* the iterator refuses NULLs */
    attn_kv_block_rows run;
    int64_t cur = 0;
    attn_kv_stored ev;
    memset(&ev, 0, sizeof ev);
    assert_int_equal(attn_kv_stored_next(NULL, &cur, &run), 0);
    assert_int_equal(attn_kv_stored_next(&ev, &cur, &run), 0);
    ev.slot_mapping = &tgood, ev.num_tokens = 3, ev.block_size = KS_BS;
    assert_int_equal(attn_kv_stored_next(&ev, NULL, &run), 0);
    assert_int_equal(attn_kv_stored_next(&ev, &cur, &run), 1); /* slots 4, 5 = block 1 rows 0..2 */
    assert_int_equal(run.block_idx, 1);
    assert_int_equal(run.row_start, 0);
    assert_int_equal(run.row_end, 2);
    assert_int_equal(run.token_start, 0);
    assert_int_equal(attn_kv_stored_next(&ev, &cur, &run), 0);
    free(cache), free(k), free(v);
    attn_ctx_destroy(ctx);
}

/* fp8 cache: the scaled notifying write stores exactly what attn_reshape_and_cache_scaled stores, then calls once;
 * a bad scale (or slot) writes nothing and makes no call. */
static uint8_t ks_seen[2 * KS_BLOCKS * KS_BS * KS_HK * KS_D];
static void ks_copy_fp8(void *user, const attn_kv_stored *ev) {
    (void)user;
    ks_count_calls++;
    assert_int_equal(ev->kv_cache->dtype, ATTN_DTYPE_FP8_E5M2);
    assert_int_equal(ev->num_written, 2);
    memcpy(ks_seen, ev->kv_cache->data, sizeof ks_seen); /* what a producer would send: the stored codes */
}

static void test_scaled_fp8(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 44);
    enum { N = 2 * KS_BLOCKS * KS_BS * KS_HK * KS_D };
    int64_t cs[5] = {2, KS_BLOCKS, KS_BS, KS_HK, KS_D}, kvs[3] = {3, KS_HK, KS_D}, sn[1] = {3};
    static uint8_t a[N], b[N];
    memset(a, 0x5A, sizeof a), memset(b, 0x5A, sizeof b);
    float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, 3 * KS_HK * KS_D, -20, 20);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, 3 * KS_HK * KS_D, -2, 2);
    attn_tensor ta = attn_tensor_make(a, ATTN_DTYPE_FP8_E5M2, 5, cs), tb = attn_tensor_make(b, ATTN_DTYPE_FP8_E5M2, 5, cs);
    attn_tensor tk = attn_tensor_make(k, ATTN_DTYPE_F32, 3, kvs), tv = attn_tensor_make(v, ATTN_DTYPE_F32, 3, kvs);
    int64_t slots[3] = {3, -1, 9}, bad[3] = {3, 99999, 9};
    attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, sn), tbad = attn_tensor_make(bad, ATTN_DTYPE_I64, 1, sn);
    attn_kv_notify nt = {ks_copy_fp8, NULL, 2};
    ks_count_calls = 0;
    const float bad_scales[] = {0.0f, -1.0f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        assert_int_equal(attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &ta, &ts, bad_scales[i], 0.5f, &nt),
                         ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "k_scale="));
        assert_int_equal(attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &ta, &ts, 0.25f, bad_scales[i], &nt),
                         ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "v_scale="));
    }
    assert_int_equal(attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &ta, &tbad, 0.25f, 0.5f, &nt),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &ta, &ts, 0.25f, 0.5f, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(ks_count_calls, 0);
    assert_memory_equal(a, b, sizeof a); /* nothing written */
    assert_int_equal(attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &ta, &ts, 0.25f, 0.5f, &nt), ATTN_STATUS_OK);
    assert_int_equal(ks_count_calls, 1);
    assert_int_equal(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tb, &ts, 0.25f, 0.5f), ATTN_STATUS_OK);
    assert_memory_equal(a, b, sizeof a);     /* the same codes as the plain scaled write */
    assert_memory_equal(ks_seen, a, sizeof a); /* complete when the callback ran */
    int changed = 0;
    for (size_t i = 0; i < sizeof a; i++) changed += a[i] != 0x5A;
    assert_true(changed > 0);
    free(k), free(v);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scaled_fp8),
        cmocka_unit_test(test_producer_f32),
        cmocka_unit_test(test_producer_bf16_threads_i32),
        cmocka_unit_test(test_no_call_on_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
