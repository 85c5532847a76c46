/*
 * test_serving_invariance.c — the serving determinism contract, asserted bitwise:
 *   - chunked prefill: a prompt processed in 1, 2 or 7 chunks (each chunk a plan step that writes its keys
 *     with reshape_and_cache and attends over the cache) gives identical rows;
 *   - batch invariance: a request's rows do not change when other requests join the batch (before or
 *     after it, decodes or prefills) — including a long decode that runs split-KV;
 *   - thread invariance: 1, 2, 3 and 7 threads give identical bits, plan path and plan-less path, for a mixed batch
 *     and for one long decode (2 threads: its split-KV items hold every kv head; 3 and 7: the heads are split).
 * Token values depend only on (request id, position), so the same request sees the same inputs anywhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serving_fixture.h"

#define NUM_HEADS 8
#define NUM_KV_HEADS 2
#define HEAD_SIZE 64
#define BLOCK_SIZE 16
#define NUM_BLOCKS 1200

static int32_t g_blocks[8][NUM_BLOCKS / 8]; /* disjoint block lists, one per request slot */
static int64_t g_max_blocks = NUM_BLOCKS / 8; /* the plans' max_blocks_per_req */

static void setup_blocks(void) {
    th_rng rng;
    th_rng_seed(&rng, 77);
    int32_t all[NUM_BLOCKS];
    sf_shuffled_blocks(&rng, NUM_BLOCKS, NUM_BLOCKS, all);
    for (int i = 0; i < 8; i++) memcpy(g_blocks[i], all + i * (NUM_BLOCKS / 8), sizeof g_blocks[i]);
}

static void config(attn_plan_config *cfg) {
    attn_plan_config_init(cfg);
    cfg->num_blocks = NUM_BLOCKS, cfg->block_size = BLOCK_SIZE, cfg->num_heads = NUM_HEADS;
    cfg->num_kv_heads = NUM_KV_HEADS, cfg->head_size = HEAD_SIZE, cfg->max_blocks_per_req = g_max_blocks;
    cfg->num_speculative_tokens = 3;
}

static sf_req req(int64_t id, int slot, int64_t computed, int64_t scheduled) {
    sf_req r = {id, computed, scheduled, 0, ATTN_REQUEST_DECODER, 0, g_blocks[slot], NUM_BLOCKS / 8};
    return r;
}

/* Copies the out rows and LSE columns of request `id` from a step into row-major buffers. */
static void extract(const sf_step *s, const sf_req *reqs, int64_t id, float *rows, float *lse) {
    const int64_t i = sf_find(s, reqs, id), T = s->info.num_tokens, W = NUM_HEADS * HEAD_SIZE;
    assert_true(i >= 0);
    const int64_t q0 = s->info.query_start_loc[i], n = s->info.query_start_loc[i + 1] - q0;
    memcpy(rows, (const float *)s->out + q0 * W, (size_t)(n * W) * sizeof(float));
    for (int64_t h = 0; h < NUM_HEADS; h++)
        for (int64_t t = 0; t < n; t++) lse[h * n + t] = s->lse[h * T + q0 + t];
}

static void test_chunked_prefill_bitwise(void **state) {
    (void)state;
    setup_blocks();
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    const int64_t prefix = 100, L = 601, W = NUM_HEADS * HEAD_SIZE; /* cached prefix, then 601 new tokens */
    const int nchunks[3] = {1, 2, 7};
    float *rows[3], *lses[3];
    for (int v = 0; v < 3; v++) {
        th_rng rng;
        th_rng_seed(&rng, 9);
        sf_cache c;
        sf_cache_init(&c, &rng, ATTN_DTYPE_F32, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE);
        attn_plan_config cfg;
        config(&cfg);
        rows[v] = (float *)malloc((size_t)(L * W) * sizeof(float));
        lses[v] = (float *)malloc((size_t)(L * NUM_HEADS) * sizeof(float));
        int64_t done = 0;
        for (int k = 0; k < nchunks[v]; k++) {
            const int64_t len = (L * (k + 1)) / nchunks[v] - (L * k) / nchunks[v];
            /* the prompt, plus a decode from another request in the later chunks (batch varies too) */
            sf_req reqs[2] = {req(1, 0, prefix + done, len), req(2, 1, 300 + k, 1)};
            const int64_t n = k > 0 ? 2 : 1;
            sf_step s;
            assert_int_equal(sf_run_step(ctx, &c, &cfg, reqs, n, ATTN_DTYPE_F32, &p, &s), ATTN_STATUS_OK);
            float *lse = (float *)malloc((size_t)(len * NUM_HEADS) * sizeof(float));
            extract(&s, reqs, 1, rows[v] + done * W, lse);
            for (int64_t h = 0; h < NUM_HEADS; h++)
                memcpy(lses[v] + h * L + done, lse + h * len, (size_t)len * sizeof(float));
            free(lse);
            sf_step_free(&s);
            done += len;
        }
        free(c.data);
    }
    for (int v = 1; v < 3; v++) {
        assert_memory_equal(rows[0], rows[v], (size_t)(L * W) * sizeof(float));
        assert_memory_equal(lses[0], lses[v], (size_t)(L * NUM_HEADS) * sizeof(float));
    }
    for (int v = 0; v < 3; v++) free(rows[v]), free(lses[v]);
    attn_ctx_destroy(ctx);
}

/* Runs `reqs` on a fresh cache and returns request `id`'s rows. */
static void run_and_extract(attn_ctx *ctx, sf_req *reqs, int64_t n, int64_t id, float *rows, float *lse) {
    th_rng rng;
    th_rng_seed(&rng, 3);
    sf_cache c;
    sf_cache_init(&c, &rng, ATTN_DTYPE_F32, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE);
    attn_plan_config cfg;
    config(&cfg);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.alibi_slopes = NULL;
    sf_step s;
    assert_int_equal(sf_run_step(ctx, &c, &cfg, reqs, n, ATTN_DTYPE_F32, &p, &s), ATTN_STATUS_OK);
    extract(&s, reqs, id, rows, lse);
    sf_step_free(&s);
    free(c.data);
}

static void test_batch_invariance(void **state) {
    (void)state;
    setup_blocks();
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const int64_t W = NUM_HEADS * HEAD_SIZE;
    /* targets: a long decode (split over 3 partitions), a spec decode, a chunked prefill */
    const sf_req targets[3] = {req(10, 0, 1300, 1), req(11, 1, 777, 4), req(12, 2, 200, 70)};
    for (int t = 0; t < 3; t++) {
        const int64_t q_len = targets[t].scheduled;
        float *alone = malloc((size_t)(q_len * W) * 4), *la = malloc((size_t)(q_len * NUM_HEADS) * 4);
        float *mixed = malloc((size_t)(q_len * W) * 4), *lm = malloc((size_t)(q_len * NUM_HEADS) * 4);
        sf_req one[1] = {targets[t]};
        run_and_extract(ctx, one, 1, targets[t].id, alone, la);
        sf_req batch_a[5] = {req(20, 3, 50, 1), req(21, 4, 0, 90), targets[t], req(22, 5, 1000, 2), req(23, 6, 30, 33)};
        run_and_extract(ctx, batch_a, 5, targets[t].id, mixed, lm);
        assert_memory_equal(alone, mixed, (size_t)(q_len * W) * 4);
        assert_memory_equal(la, lm, (size_t)(q_len * NUM_HEADS) * 4);
        sf_req batch_b[3] = {targets[t], req(24, 7, 400, 1), req(25, 3, 10, 120)};
        run_and_extract(ctx, batch_b, 3, targets[t].id, mixed, lm);
        assert_memory_equal(alone, mixed, (size_t)(q_len * W) * 4);
        assert_memory_equal(la, lm, (size_t)(q_len * NUM_HEADS) * 4);
        free(alone), free(la), free(mixed), free(lm);
    }
    attn_ctx_destroy(ctx);
}

static void thread_invariance(const sf_req *reqs, int64_t num_reqs) {
    setup_blocks();
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    p.window_left = 700;
    const int threads[4] = {1, 2, 3, 7};
    void *ref_out = NULL;
    float *ref_lse = NULL;
    size_t out_bytes = 0, lse_bytes = 0;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(attn_ctx_set_num_threads(ctx, threads[i]), ATTN_STATUS_OK);
        th_rng rng;
        th_rng_seed(&rng, 4);
        sf_cache c;
        sf_cache_init(&c, &rng, ATTN_DTYPE_BF16, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE);
        attn_plan_config cfg;
        config(&cfg);
        sf_step s;
        assert_int_equal(sf_run_step(ctx, &c, &cfg, reqs, num_reqs, ATTN_DTYPE_BF16, &p, &s), ATTN_STATUS_OK);
        out_bytes = (size_t)(s.info.num_tokens * NUM_HEADS * HEAD_SIZE) * 2;
        lse_bytes = (size_t)(s.info.num_tokens * NUM_HEADS) * 4;
        if (i == 0) {
            ref_out = malloc(out_bytes), ref_lse = malloc(lse_bytes);
            memcpy(ref_out, s.out, out_bytes), memcpy(ref_lse, s.lse, lse_bytes);
            assert_int_equal(sf_check_step(ctx, &c, &s, &p), 0);
        } else {
            assert_memory_equal(ref_out, s.out, out_bytes);
            assert_memory_equal(ref_lse, s.lse, lse_bytes);
        }
        /* the plan-less entry (sequential fold) gives the same bits at this thread count */
        const int64_t R = s.info.num_reqs, T = s.info.num_tokens;
        int64_t qs[3] = {T, NUM_HEADS, HEAD_SIZE}, one[1] = {R + 1}, rs[1] = {R}, bs[2] = {R, s.info.max_blocks_per_req};
        attn_tensor tq = attn_tensor_make(s.q, ATTN_DTYPE_BF16, 3, qs);
        void *o2 = th_alloc_nan(ATTN_DTYPE_BF16, (size_t)(T * NUM_HEADS * HEAD_SIZE));
        attn_tensor to = attn_tensor_make(o2, ATTN_DTYPE_BF16, 3, qs);
        attn_tensor tqsl = attn_tensor_make((void *)s.info.query_start_loc, ATTN_DTYPE_I32, 1, one);
        attn_tensor tsl = attn_tensor_make((void *)s.info.seq_lens, ATTN_DTYPE_I32, 1, rs);
        attn_tensor tbt = attn_tensor_make((void *)s.info.block_table, ATTN_DTYPE_I32, 2, bs);
        assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_OK);
        assert_memory_equal(ref_out, o2, out_bytes);
        free(o2);
        sf_step_free(&s);
        free(c.data);
    }
    free(ref_out), free(ref_lse);
    attn_ctx_destroy(ctx);
}

static void test_thread_invariance(void **state) {
    (void)state;
    const sf_req reqs[5] = {req(30, 0, 1500, 1), req(31, 1, 20, 1), req(32, 2, 300, 45), req(33, 3, 0, 64),
                            req(34, 4, 900, 3)};
    thread_invariance(reqs, 5);
}

/* One decode over 4200 keys (9 partitions, the blocks of slots 0 and 1): on 2 threads split-KV alone gives enough
 * items and each holds both kv heads, on 3 and 7 the kv heads go to separate items. */
static void test_thread_invariance_long_decode(void **state) {
    (void)state;
    g_max_blocks = 2 * (NUM_BLOCKS / 8);
    sf_req r = req(40, 0, 4200, 1);
    r.num_blocks = g_max_blocks; /* g_blocks[0] and g_blocks[1] are contiguous */
    thread_invariance(&r, 1);
    g_max_blocks = NUM_BLOCKS / 8;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunked_prefill_bitwise),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_thread_invariance_long_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
