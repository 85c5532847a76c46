/*
 * test_paged.c — paged attention conformance: the plan path and the plan-less path over random
 * block tables (shuffled blocks, shared prefix blocks, partial last blocks, unused entries holding
 * garbage) equal attn_forward_varlen on the gathered contiguous keys BITWISE and the oracle within
 * th_tol_for; every option (GQA/MQA, window, ALiBi, soft-cap, sinks, LSE), every cache dtype, block sizes
 * 1..128; a batch holding every state and kind at once; validation of bad metadata with nothing written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "serving_fixture.h"

/* Assigns shuffled distinct blocks (plus `spare` unused ids) to each request; request i > 0 with
 * share_prefix shares request 0's full prefix blocks that lie inside both cached prefixes. */
static int32_t *assign_blocks(th_rng *rng, sf_req *reqs, int64_t n, int64_t block_size, int64_t num_blocks,
                              int share_prefix) {
    int32_t *pool = (int32_t *)malloc((size_t)num_blocks * sizeof(int32_t));
    sf_shuffled_blocks(rng, num_blocks, num_blocks, pool);
    int32_t *ids = (int32_t *)malloc((size_t)num_blocks * 4 * sizeof(int32_t));
    int64_t next = 0, used = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t kv = reqs[i].kind == ATTN_REQUEST_CROSS ? reqs[i].enc_len
                           : reqs[i].kind == ATTN_REQUEST_ENCODER_ONLY ? 0 : reqs[i].computed + reqs[i].scheduled;
        const int64_t need = (kv + block_size - 1) / block_size, spare = th_rng_int(rng, 0, 2);
        int32_t *row = ids + used;
        int64_t shared = 0;
        if (share_prefix && i > 0 && reqs[i].kind == ATTN_REQUEST_DECODER && reqs[0].kind == ATTN_REQUEST_DECODER) {
            const int64_t c = reqs[i].computed < reqs[0].computed ? reqs[i].computed : reqs[0].computed;
            shared = c / block_size;
            memcpy(row, reqs[0].blocks, (size_t)shared * sizeof(int32_t));
        }
        for (int64_t b = shared; b < need + spare; b++) row[b] = pool[next++];
        reqs[i].blocks = row;
        reqs[i].num_blocks = need + spare;
        used += need + spare;
    }
    free(pool);
    return ids;
}

static int64_t blocks_needed(const sf_req *reqs, int64_t n, int64_t block_size) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t kv = reqs[i].kind == ATTN_REQUEST_CROSS ? reqs[i].enc_len : reqs[i].computed + reqs[i].scheduled;
        total += (kv + block_size - 1) / block_size + 2;
    }
    return total + 3;
}

/* Runs one scenario through the plan path, checks it, then (decoder-only batches) runs the plan-less entry
 * with a block table whose unused entries hold garbage and checks it is bitwise equal to the plan path. */
static void run_scenario(attn_ctx *ctx, uint64_t seed, attn_dtype kv_dtype, attn_dtype q_dtype, int64_t block_size,
                         int64_t num_heads, int64_t num_kv_heads, int64_t head_size, sf_req *reqs, int64_t n,
                         const attn_params *params, int share_prefix) {
    th_rng rng;
    th_rng_seed(&rng, seed);
    const int64_t num_blocks = blocks_needed(reqs, n, block_size);
    int32_t *ids = assign_blocks(&rng, reqs, n, block_size, num_blocks, share_prefix);
    sf_cache c;
    sf_cache_init(&c, &rng, kv_dtype, num_blocks, block_size, num_kv_heads, head_size);
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = (int32_t)num_blocks;
    cfg.block_size = (int32_t)block_size;
    cfg.num_heads = (int32_t)num_heads;
    cfg.num_kv_heads = (int32_t)num_kv_heads;
    cfg.head_size = (int32_t)head_size;
    cfg.max_blocks_per_req = 0;
    for (int64_t i = 0; i < n; i++)
        if (reqs[i].num_blocks > cfg.max_blocks_per_req) cfg.max_blocks_per_req = (int32_t)reqs[i].num_blocks;
    cfg.num_speculative_tokens = 3;
    sf_step s;
    attn_status st = sf_run_step(ctx, &c, &cfg, reqs, n, q_dtype, params, &s);
    if (st != ATTN_STATUS_OK) fprintf(stderr, "step failed: %s\n", attn_last_error());
    assert_int_equal(st, ATTN_STATUS_OK);
    int fails = sf_check_step(ctx, &c, &s, params);
    if (fails)
        fprintf(stderr, "repro: seed=%llu kv=%s q=%s bs=%lld H=%lld/%lld D=%lld\n", (unsigned long long)seed,
                attn_dtype_name(kv_dtype), attn_dtype_name(q_dtype), (long long)block_size, (long long)num_heads,
                (long long)num_kv_heads, (long long)head_size);
    assert_int_equal(fails, 0);

    int all_decoder = 1;
    for (int64_t i = 0; i < n; i++) all_decoder &= reqs[i].kind == ATTN_REQUEST_DECODER;
    if (all_decoder) { /* plan-less path, garbage past the used entries of a wider table */
        const int64_t R = s.info.num_reqs, T = s.info.num_tokens, W = s.info.max_blocks_per_req + 3;
        int32_t *bt = (int32_t *)malloc((size_t)(R * W) * sizeof(int32_t));
        for (int64_t r = 0; r < R; r++)
            for (int64_t b = 0; b < W; b++) {
                const int64_t used = (s.info.seq_lens[r] + block_size - 1) / block_size;
                bt[r * W + b] = b < used ? s.info.block_table[r * s.info.max_blocks_per_req + b]
                                         : (b % 2 ? 0x7fffffff : -12345);
            }
        int64_t qs[3] = {T, num_heads, head_size}, one[1] = {R + 1}, rs[1] = {R}, bs2[2] = {R, W}, ls[2] = {num_heads, T};
        void *o2 = th_alloc_nan(q_dtype, (size_t)(T * num_heads * head_size));
        float *l2 = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(num_heads * T));
        attn_tensor tq = attn_tensor_make(s.q, q_dtype, 3, qs), to = attn_tensor_make(o2, q_dtype, 3, qs);
        attn_tensor tp = attn_tensor_make(s.out, q_dtype, 3, qs);
        attn_tensor tqsl = attn_tensor_make((void *)s.info.query_start_loc, ATTN_DTYPE_I32, 1, one);
        attn_tensor tsl = attn_tensor_make((void *)s.info.seq_lens, ATTN_DTYPE_I32, 1, rs);
        attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bs2);
        attn_tensor tl = attn_tensor_make(l2, ATTN_DTYPE_F32, 2, ls), tpl = attn_tensor_make(s.lse, ATTN_DTYPE_F32, 2, ls);
        assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, params, &to, &tl), ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&to, &tp));
        assert_true(th_bitwise_equal(&tl, &tpl));
        if (seed % 4 == 0) { /* the oracle through block tables (slow: some scenarios only) */
            assert_int_equal(attn_ref_paged_attention(&tq, &c.t, &tqsl, &tsl, &tbt, params, &to, &tl), ATTN_STATUS_OK);
            size_t bad = 0;
            th_compare(&tp, &to, th_tol_for(q_dtype), 1.0, &bad);
            assert_int_equal(bad, 0);
            th_compare_lse(&tpl, &tl, th_tol_for(q_dtype), &bad);
            assert_int_equal(bad, 0);
        }
        free(o2), free(l2), free(bt);
    }
    sf_step_free(&s);
    free(ids);
    free(c.data);
}

/* A mixed decoder batch: decodes (one long enough to split), spec decode, chunked prefill over a cached
 * prefix, fresh prefill. ids distinguish token values. */
static int64_t mixed_batch(sf_req *r) {
    const sf_req m[] = {
        {1, 700, 1, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},  {2, 37, 1, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},
        {3, 90, 40, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},  {4, 1100, 3, 2, ATTN_REQUEST_DECODER, 0, NULL, 0},
        {5, 0, 45, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},   {6, 200, 2, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},
        {7, 1000, 12, 0, ATTN_REQUEST_DECODER, 0, NULL, 0}, /* chunked prefill over 2 partitions */
    };
    memcpy(r, m, sizeof m);
    if (th_test_emulated()) { /* emulated: shorter contexts, the long ones still over 2 partitions */
        r[0].computed = 530, r[2].computed = 50, r[3].computed = 600, r[5].computed = 100;
        r[6].computed = 540;
    }
    return (int64_t)(sizeof m / sizeof m[0]);
}

static void test_paged_equals_contiguous(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    const int64_t sizes[] = {16, 7, 1, 128, 32};
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_F32, ATTN_DTYPE_BF16};
    for (int i = 0; i < 5; i++) {
        sf_req reqs[8];
        const int64_t n = mixed_batch(reqs);
        run_scenario(ctx, 100 + (uint64_t)i, dts[i], dts[i], sizes[i], 8, 2, 64, reqs, n, &p, i % 2);
    }
    attn_ctx_destroy(ctx);
}

static void test_paged_options(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float slopes[8], sinks[8];
    for (int h = 0; h < 8; h++) slopes[h] = (float)(1.0 / (1 << (h + 1))), sinks[h] = (float)(0.3 * h - 1.0);
    for (int opt = 0; opt < 5; opt++) {
        attn_params p;
        attn_params_init(&p);
        p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        int64_t hq = 8, hk = 2, d = 64;
        switch (opt) {
        case 0: p.window_left = 99, p.window_right = 0; break; /* sliding window W = 100 */
        case 1: p.alibi_slopes = slopes; break;
        case 2: p.softcap = 5.0f, p.softmax_scale = 0.5f; break;
        case 3: p.sinks = sinks, hk = 1, d = 40; break;       /* MQA, odd head size */
        default: p.window_left = 300, p.sinks = sinks, hk = 8, d = 128; break; /* MHA */
        }
        sf_req reqs[8];
        const int64_t n = mixed_batch(reqs);
        run_scenario(ctx, 200 + (uint64_t)opt, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 16, hq, hk, d, reqs, n, &p, 1);
    }
    attn_ctx_destroy(ctx);
}

/* One batch with every state and kind: decode, spec decode, chunked prefill, cached-prefix prefill, fresh
 * prefill, encoder-only (pooling) rows and encoder-decoder cross attention. */
static void test_every_state_batch(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    sf_req reqs[] = {
        {11, 0, 30, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},        /* fresh prefill                 */
        {12, 600, 1, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},       /* decode (split over 2 parts)    */
        {13, 64, 100, 0, ATTN_REQUEST_DECODER, 0, NULL, 0},      /* chunked prefill / cache hit   */
        {14, 0, 25, 0, ATTN_REQUEST_ENCODER_ONLY, 0, NULL, 0},   /* pooling encoder               */
        {15, 1030, 4, 3, ATTN_REQUEST_DECODER, 0, NULL, 0},      /* spec decode: 1 + 3 drafts     */
        {16, 5, 3, 0, ATTN_REQUEST_CROSS, 77, NULL, 0},          /* cross over 77 encoder keys    */
        {17, 9, 20, 0, ATTN_REQUEST_CROSS, 600, NULL, 0},        /* cross, longer                 */
    };
    run_scenario(ctx, 300, ATTN_DTYPE_F16, ATTN_DTYPE_F16, 16, 8, 2, 64, reqs, 7, &p, 0);
    run_scenario(ctx, 301, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 13, 6, 3, 32, reqs, 7, &p, 0);
    attn_ctx_destroy(ctx);
}

/* Bad metadata is rejected with a message naming the entry, and out is untouched. */
static void test_paged_validation(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 5);
    sf_cache c;
    sf_cache_init(&c, &rng, ATTN_DTYPE_F32, 10, 16, 2, 32);
    const int64_t T = 3, H = 4, D = 32;
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * H * D), -1, 1);
    float *o = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * H * D), 7, 7);
    int32_t qsl[3] = {0, 1, 3}, seq[2] = {40, 20}, bt[2][4] = {{1, 2, 3, 9001}, {4, 5, -1, 77}};
    int64_t qs[3] = {T, H, D}, one[1] = {3}, two[1] = {2}, bts[2] = {2, 4};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), to = attn_tensor_make(o, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one), tsl = attn_tensor_make(seq, ATTN_DTYPE_I32, 1, two);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bts);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    /* valid: entries past ceil(seq_len / block_size) (9001, -1, 77) are ignored */
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_OK);
    float *o2 = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * H * D), 7, 7);
    to.data = o2;
    seq[0] = 49; /* needs 4 blocks: entry [0][3] = 9001 is now used */
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "block_table: entry [0][3] = 9001 >= num_blocks=10"));
    seq[0] = 40, seq[1] = 33; /* entry [1][2] = -1 */
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "block_table: entry [1][2] = -1"));
    seq[1] = 65; /* beyond the table's capacity of 4 blocks */
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "seq_lens: entry 1 = 65 needs 5 blocks"));
    seq[1] = -1;
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "seq_lens: entry 1 = -1 is negative"));
    seq[1] = 20, qsl[2] = 4; /* beyond num_tokens */
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "query_start_loc: entry 2 = 4 exceeds num_tokens=3"));
    qsl[2] = 3;
    to.data = o; /* o2 stays the untouched canary */
    for (size_t i = 0; i < (size_t)(T * H * D); i++) assert_true(o2[i] == 7.0f); /* nothing written */

    /* q_len 2 > seq_len 1 (flash-attn semantics): bottom-right puts row 1 at key 0 and row 0 before it, so
     * token 1 sees no key (out 0, LSE -inf) and token 2 equals the oracle */
    seq[1] = 1;
    float *lse = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(H * T), 7, 7);
    float *o_ref = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * H * D), 7, 7);
    float *lse_ref = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(H * T), 7, 7);
    int64_t ls[2] = {H, T};
    attn_tensor tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls), tlr = attn_tensor_make(lse_ref, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tor = attn_tensor_make(o_ref, ATTN_DTYPE_F32, 3, qs);
    assert_int_equal(attn_paged_attention(ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_OK);
    assert_int_equal(attn_ref_paged_attention(&tq, &c.t, &tqsl, &tsl, &tbt, &p, &tor, &tlr), ATTN_STATUS_OK);
    for (int64_t h = 0; h < H; h++) {
        assert_true(isinf(lse[h * T + 1]) && lse[h * T + 1] < 0);
        for (int64_t d = 0; d < D; d++) assert_true(o[(1 * H + h) * D + d] == 0.0f);
    }
    size_t nbad = 0;
    th_compare(&to, &tor, th_tol_for(ATTN_DTYPE_F32), 1.0, &nbad);
    assert_int_equal(nbad, 0);
    th_compare_lse(&tl, &tlr, th_tol_for(ATTN_DTYPE_F32), &nbad);
    assert_int_equal(nbad, 0);
    seq[1] = 20;
    free(lse), free(o_ref), free(lse_ref);

    /* plan path: a too-small workspace and a mismatched q are rejected before anything is written */
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = 10, cfg.block_size = 16, cfg.num_heads = 4, cfg.num_kv_heads = 2, cfg.head_size = 32;
    cfg.max_blocks_per_req = 4;
    int32_t ids[4] = {1, 2, 3, 4};
    attn_request r = {600 - 3 - 540, 3, 0, ATTN_REQUEST_DECODER, ids, 4, 0};
    r.num_computed_tokens = 60; /* 63 keys */
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OK);
    float ws[4];
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &c.t, &p, &to, NULL, ws, sizeof ws), ATTN_STATUS_OK);
    int64_t qs_bad[3] = {2, H, D};
    attn_tensor tq_bad = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs_bad);
    assert_int_equal(attn_forward_paged(ctx, plan, &tq_bad, NULL, NULL, &c.t, &p, &to, NULL, NULL, 0),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "shape[0]="));
    attn_plan_free(plan);
    /* a long decode needs workspace for its split partitions */
    sf_cache big;
    sf_cache_init(&big, &rng, ATTN_DTYPE_F32, 80, 16, 2, 32);
    int32_t many[80];
    for (int i = 0; i < 80; i++) many[i] = i;
    cfg.num_blocks = 80, cfg.max_blocks_per_req = 80;
    attn_request rd = {1200, 1, 0, ATTN_REQUEST_DECODER, many, 80, 0};
    assert_int_equal(attn_plan_create(&cfg, &rd, 1, &plan), ATTN_STATUS_OK);
    assert_true(attn_plan_workspace_size(plan) > 0);
    int64_t q1s[3] = {1, H, D};
    attn_tensor tq1 = attn_tensor_make(q, ATTN_DTYPE_F32, 3, q1s), to1 = attn_tensor_make(o2, ATTN_DTYPE_F32, 3, q1s);
    assert_int_equal(attn_forward_paged(ctx, plan, &tq1, NULL, NULL, &big.t, &p, &to1, NULL, ws, sizeof ws),
                     ATTN_STATUS_WORKSPACE_TOO_SMALL);
    assert_non_null(strstr(attn_last_error(), "workspace_size=16 <"));
    for (size_t i = 0; i < (size_t)(T * H * D); i++) assert_true(o2[i] == 7.0f);
    attn_plan_free(plan);
    free(big.data);
    free(q), free(o), free(o2), free(c.data);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paged_equals_contiguous),
        cmocka_unit_test(test_paged_options),
        cmocka_unit_test(test_every_state_batch),
        cmocka_unit_test(test_paged_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
