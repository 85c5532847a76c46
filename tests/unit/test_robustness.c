/*
 * test_robustness.c — regression tests of the fuzzing findings (docs/ROBUSTNESS.md "Findings, fixes, tests"),
 * one test per class: F1 legal empty views with NULL data (NULL + 0), F3 NaN through the generic exp2, F5/F7 plan limits
 * refused quickly, F6 workspace overlap on the plan entry, F8 validate before measuring, and the seq_k = 2^40
 * stride-0 view, F9 unchecked products in a workspace-size function. The bad-input table (status, message, canaries) is tests/unit/test_bad_inputs.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "attn/attn_experimental.h"
#include "harness.h"
#include "core/tensor.h"
#include "kernels/generic/tile_kernels.h"

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- F3: k_exp2 is defined for NaN / ±inf and unchanged for finite inputs ---------------------------- */
/* The function as it was before the fix, for finite inputs only (there it is well defined). */
static float k_exp2_before(float t) {
    const float lo = -126.0f, hi = 127.0f;
    float tc = t < lo ? lo : (t > hi ? hi : t);
    const float shifter = 12582912.0f;
    float n = (tc + shifter) - shifter;
    float f = tc - n;
    float p = 1.5252733804059840e-5f;
    p = p * f + 1.5403530393381609e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    float r = p * scale;
    return t < lo ? 0.0f : r;
}

static void test_exp2_nan(void **state) {
    (void)state;
    assert_true(isnan(k_exp2(NAN)));
    assert_true(isnan(k_exp2(-NAN)));
    assert_true(k_exp2(-INFINITY) == 0.0f);
    assert_true(k_exp2(INFINITY) == k_exp2_before(INFINITY));
    th_rng r;
    th_rng_seed(&r, 11);
    for (int i = 0; i < 200000; i++) {
        float t = (float)th_rng_range(&r, -140.0, 140.0);
        if (i < 600) t = -150.0f + 0.5f * (float)i; /* a regular sweep through both clamps */
        const float a = k_exp2(t), b = k_exp2_before(t);
        assert_memory_equal(&a, &b, sizeof a);
    }
    const float edges[] = {-126.0f, 127.0f, -125.99999f, 126.99999f, 0.0f, -0.0f, 1e-30f, -1e-30f, 3.4e38f, -3.4e38f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        const float a = k_exp2(edges[i]), b = k_exp2_before(edges[i]);
        assert_memory_equal(&a, &b, sizeof a);
    }
}

/* NaN in q through the generic kernel table: OK status, no undefined conversion (UBSan with
 * float-cast-overflow in the sanitizer tier). */
static void test_nan_query_generic(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_isa(ctx, "generic"), ATTN_STATUS_OK);
    float q[1 * 3 * 1 * 8], k[1 * 5 * 1 * 8], v[1 * 5 * 1 * 8], out[1 * 3 * 1 * 8];
    for (int i = 0; i < 24; i++) q[i] = 0.1f * (float)i;
    for (int i = 0; i < 40; i++) k[i] = 0.05f * (float)i, v[i] = 1.0f;
    q[0] = NAN;
    const int64_t qs[4] = {1, 3, 1, 8}, ks[4] = {1, 5, 1, 8};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks);
    attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, qs);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, NULL), ATTN_STATUS_OK);
    /* row 0's value is the driver's NaN rule (not asserted); the other rows are unaffected (all values 1) */
    for (int i = 8; i < 24; i++) assert_true(out[i] == 1.0f);
    /* logits that overflow to inf: scale 1e30 */
    q[0] = 1.0f;
    attn_params p;
    attn_params_init(&p);
    p.softmax_scale = 3e38f;
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, NULL), ATTN_STATUS_OK);
    attn_ctx_destroy(ctx);
}

/* ---- F1: legal empty views with data NULL are accepted by every entry, with no NULL + 0 ------------- */
static void test_empty_null_views(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float k[2 * 3 * 2 * 8] = {0}, v[2 * 3 * 2 * 8] = {0};
    const int64_t q0[4] = {2, 0, 4, 8}, ks[4] = {2, 3, 2, 8}, l0[3] = {2, 4, 0};
    attn_tensor tq = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, q0), to = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, q0);
    attn_tensor tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks), tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks);
    attn_tensor tl = attn_tensor_make(NULL, ATTN_DTYPE_F32, 3, l0);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, &tl), ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, NULL, &to, &tl), ATTN_STATUS_OK);
    /* everything empty (batch 0) and NULL, workspaces NULL of size 0 */
    const int64_t e4[4] = {0, 4, 2, 8};
    attn_tensor eq = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, e4), ek = eq, ev = eq, eo = eq;
    const int64_t m0[2] = {0, 4};
    attn_tensor kpm = attn_tensor_make(NULL, ATTN_DTYPE_U8, 2, m0);
    assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &eq, &ek, &ev, &kpm, NULL, &eo, NULL, NULL, 0),
                     ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward_padded(ATTN_LAYOUT_BSND, &eq, &ek, &ev, &kpm, NULL, &eo, NULL, NULL, 0),
                     ATTN_STATUS_OK);
    size_t need = 1;
    assert_int_equal(attn_forward_prescaled_workspace_size(&eq, &ek, &ev, &need), ATTN_STATUS_OK);
    assert_int_equal(need, 0);
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &eq, &ek, &ev, 2, NULL, &eo, NULL, NULL, 0),
                     ATTN_STATUS_OK);
    attn_quant_params qp;
    attn_quant_params_init(&qp, ATTN_QUANT_FP8_E4M3);
    assert_int_equal(attn_forward_quant_workspace_size(ATTN_LAYOUT_BSND, &eq, &ek, &ev, &need), ATTN_STATUS_OK);
    assert_int_equal(need, 0);
    assert_int_equal(attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &eq, &ek, &ev, &qp, NULL, &eo, NULL, NULL, 0),
                     ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward_quant(ATTN_LAYOUT_BSND, &eq, &ek, &ev, &qp, NULL, &eo, NULL), ATTN_STATUS_OK);
    /* varlen: one empty sequence, q/out NULL */
    const int64_t v0[3] = {0, 4, 8}, vk[3] = {3, 2, 8}, c2[1] = {2};
    int32_t cuq[2] = {0, 0}, cuk[2] = {0, 3};
    attn_tensor vq = attn_tensor_make(NULL, ATTN_DTYPE_F32, 3, v0), vo = vq;
    attn_tensor vkk = attn_tensor_make(k, ATTN_DTYPE_F32, 3, vk), vvv = attn_tensor_make(v, ATTN_DTYPE_F32, 3, vk);
    attn_tensor tcq = attn_tensor_make(cuq, ATTN_DTYPE_I32, 1, c2), tck = attn_tensor_make(cuk, ATTN_DTYPE_I32, 1, c2);
    assert_int_equal(attn_forward_varlen(ctx, &vq, &vkk, &vvv, &tcq, &tck, NULL, &vo, NULL), ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward_varlen(&vq, &vkk, &vvv, &tcq, &tck, NULL, &vo, NULL), ATTN_STATUS_OK);
    /* paged: an empty cache (num_blocks 0, data NULL), one request with no keys and no queries */
    const int64_t c0[5] = {2, 0, 4, 2, 8}, pq0[3] = {0, 4, 8}, one[1] = {1}, two[1] = {2}, bt0[2] = {1, 0};
    int32_t qsl[2] = {0, 0}, sl[1] = {0};
    attn_tensor cache = attn_tensor_make(NULL, ATTN_DTYPE_F32, 5, c0), pq = attn_tensor_make(NULL, ATTN_DTYPE_F32, 3, pq0);
    attn_tensor po = pq, tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, two);
    attn_tensor tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, one), tbt = attn_tensor_make(NULL, ATTN_DTYPE_I32, 2, bt0);
    assert_int_equal(attn_paged_attention(ctx, &pq, &cache, &tqsl, &tsl, &tbt, NULL, &po, NULL), ATTN_STATUS_OK);
    assert_int_equal(attn_ref_paged_attention(&pq, &cache, &tqsl, &tsl, &tbt, NULL, &po, NULL), ATTN_STATUS_OK);
    attn_ctx_destroy(ctx);
}

/* ---- F11: quantized attention on empty sequences (batch and heads > 0, seq_q = seq_k = 0) with a NULL
 * workspace of size 0 formed NULL + 0 in the fake-quantization pass (UB; found by the 10M campaign). The class:
 * an empty matrix is never touched, in the fast path and in the oracle. Fails under the sanitizer tier's UBSan on
 * the old code; the statuses and the untouched output are checked in every build. */
static void test_quant_empty_seq(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const int64_t qs[4] = {2, 0, 4, 8}, ks[4] = {2, 0, 2, 8}, ls[3] = {2, 4, 0};
    attn_tensor q = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, qs), o = q, lse = attn_tensor_make(NULL, ATTN_DTYPE_F32, 3, ls);
    attn_tensor k = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, ks), v = k;
    static const attn_quant_format fmts[3] = {ATTN_QUANT_FP8_E4M3, ATTN_QUANT_FP8_E5M2, ATTN_QUANT_MXFP4};
    for (int i = 0; i < 3; i++)
        for (int rot = 0; rot < 2; rot++) {
            attn_quant_params qp;
            attn_quant_params_init(&qp, fmts[i]);
            qp.rotate = rot;
            size_t need = 1;
            assert_int_equal(attn_forward_quant_workspace_size(ATTN_LAYOUT_BSND, &q, &k, &v, &need), ATTN_STATUS_OK);
            assert_int_equal(need, 0);
            assert_int_equal(attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &q, &k, &v, &qp, NULL, &o, &lse, NULL, 0),
                             ATTN_STATUS_OK);
            assert_int_equal(attn_ref_forward_quant(ATTN_LAYOUT_BSND, &q, &k, &v, &qp, NULL, &o, &lse), ATTN_STATUS_OK);
        }
    attn_ctx_destroy(ctx);
}

/* ---- F5 / F7: oversized plans are refused quickly, before any allocation ------------------------------ */
static void test_plan_limits_fast(void **state) {
    (void)state;
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = 4, cfg.block_size = 16, cfg.num_heads = INT32_MAX, cfg.num_kv_heads = INT32_MAX;
    cfg.head_size = 64, cfg.max_blocks_per_req = 4;
    const int32_t ids[4] = {0, 1, 2, 3};
    attn_request r;
    memset(&r, 0, sizeof r);
    r.kind = ATTN_REQUEST_DECODER, r.num_computed_tokens = 10, r.num_scheduled_tokens = 1, r.block_ids = ids;
    r.num_block_ids = 1;
    attn_plan *plan = NULL;
    double t0 = now_s();
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT); /* F7 */
    assert_non_null(strstr(attn_last_error(), "config.num_heads=2147483647 exceeds ATTN_MAX_HEADS"));
    cfg.num_heads = cfg.num_kv_heads = 8;
    cfg.max_blocks_per_req = INT32_MAX; /* F5 */
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "config.max_blocks_per_req=2147483647"));
    cfg.max_blocks_per_req = 4;
    r.kind = ATTN_REQUEST_ENCODER_ONLY, r.num_computed_tokens = 0, r.num_scheduled_tokens = INT32_MAX; /* F5 */
    r.num_block_ids = 0;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ATTN_MAX_PLAN_TOKENS"));
    /* within every count limit, but 4096 kv heads x 2^24 - 1 cross tokens are 2^31 work blocks: the closed-form
     * count refuses them without looping over the blocks */
    cfg.num_heads = cfg.num_kv_heads = ATTN_MAX_HEADS;
    r.kind = ATTN_REQUEST_CROSS, r.encoder_len = 0, r.num_scheduled_tokens = ATTN_MAX_PLAN_TOKENS;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OVERFLOW);
    assert_non_null(strstr(attn_last_error(), "ATTN_MAX_PLAN_BYTES"));
    /* score pairs beyond ATTN_MAX_WORK */
    r.encoder_len = INT32_MAX;
    r.num_block_ids = 4;
    cfg.block_size = 1 << 30;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OVERFLOW);
    assert_non_null(strstr(attn_last_error(), "ATTN_MAX_WORK"));
    assert_null(plan);
    assert_true(now_s() - t0 < 2.0); /* was ~22 s of planning and a 77 GB allocation */
}

/* The plan's count pass is closed-form: for many shapes it must agree with the fill pass (else INTERNAL). */
static void test_plan_count_matches_fill(void **state) {
    (void)state;
    const int32_t heads[][2] = {{1, 1}, {4, 2}, {32, 4}, {40, 1}, {64, 64}, {96, 3}, {7, 7}};
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = i;
    for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = 64, cfg.block_size = 16, cfg.num_heads = heads[h][0], cfg.num_kv_heads = heads[h][1];
        cfg.head_size = 16, cfg.max_blocks_per_req = 64, cfg.num_speculative_tokens = 3;
        attn_request r[5];
        memset(r, 0, sizeof r);
        const int64_t comp[5] = {1000, 3, 0, 600, 0}, sched[5] = {1, 4, 77, 40, 9};
        for (int i = 0; i < 5; i++) {
            r[i].kind = i == 4 ? ATTN_REQUEST_ENCODER_ONLY : ATTN_REQUEST_DECODER;
            r[i].num_computed_tokens = comp[i], r[i].num_scheduled_tokens = sched[i];
            r[i].block_ids = ids, r[i].num_block_ids = i == 4 ? 0 : 64;
        }
        attn_plan *plan = NULL;
        assert_int_equal(attn_plan_create(&cfg, r, 5, &plan), ATTN_STATUS_OK);
        attn_plan_info info;
        assert_int_equal(attn_plan_get_info(plan, &info), ATTN_STATUS_OK);
        assert_true(info.num_split_items > 0);
        assert_true(info.workspace_size > 0);
        attn_plan_free(plan);
    }
}

/* ---- F6 on the plan entry: the split-KV workspace may overlap no input or output ------------------- */
static void test_paged_workspace_overlap(void **state) {
    (void)state;
    enum { NB = 48, BS = 16, H = 2, D = 8 };
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = NB, cfg.block_size = BS, cfg.num_heads = H, cfg.num_kv_heads = 1, cfg.head_size = D;
    cfg.max_blocks_per_req = NB;
    int32_t ids[NB];
    for (int i = 0; i < NB; i++) ids[i] = i;
    attn_request r;
    memset(&r, 0, sizeof r);
    r.kind = ATTN_REQUEST_DECODER, r.num_computed_tokens = 700, r.num_scheduled_tokens = 1;
    r.block_ids = ids, r.num_block_ids = NB;
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OK);
    const size_t ws_size = attn_plan_workspace_size(plan);
    assert_true(ws_size > 0);
    float *cache = (float *)calloc(2 * NB * BS * D, sizeof(float));
    float *big = (float *)aligned_alloc(64, ws_size + 1024 * sizeof(float));
    float out[H * D];
    memset(out, 0x5A, sizeof out);
    const int64_t cs[5] = {2, NB, BS, 1, D}, qs[3] = {1, H, D};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, cs);
    attn_tensor tq = attn_tensor_make(big, ATTN_DTYPE_F32, 3, qs), to = attn_tensor_make(out, ATTN_DTYPE_F32, 3, qs);
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    for (int i = 0; i < H * D; i++) big[i] = 0.25f;
    /* workspace = the q buffer */
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tc, NULL, &to, NULL, big, ws_size),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "workspace: overlaps q in memory"));
    for (int i = 0; i < H * D; i++) assert_true(big[i] == 0.25f);
    unsigned char canary[sizeof out];
    memset(canary, 0x5A, sizeof canary);
    assert_memory_equal(out, canary, sizeof out);
    /* a separate workspace works */
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tc, NULL, &to, NULL, big + 64, ws_size),
                     ATTN_STATUS_OK);
    attn_ctx_destroy(ctx);
    attn_plan_free(plan);
    free(cache), free(big);
}

/* ---- F8 + the stride-0 seq_k = 2^40 view: refused at once ------------------------------------------- */
static void test_huge_views_fast(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float q[8] = {0}, kv[8] = {0}, out[8] = {0};
    const int64_t qs[4] = {1, 1, 1, 8}, ks[4] = {1, (int64_t)1 << 40, 1, 8};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, qs);
    attn_tensor tk = attn_tensor_make(kv, ATTN_DTYPE_F32, 4, ks);
    tk.strides[0] = tk.strides[1] = tk.strides[2] = 0;
    const double t0 = now_s();
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tk, NULL, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "k: seq_k=1099511627776 exceeds ATTN_MAX_SEQ_LEN"));
    tk.shape[1] = ATTN_MAX_SEQ_LEN; /* allowed length, but with 2^31 - 1 queries too: beyond ATTN_MAX_WORK */
    attn_tensor tq2 = tq, to2 = to;
    tq2.shape[1] = to2.shape[1] = ATTN_MAX_SEQ_LEN;
    tq2.strides[1] = to2.strides[1] = 0;
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq2, &tk, &tk, NULL, &to2, NULL), ATTN_STATUS_OVERFLOW);
    assert_non_null(strstr(attn_last_error(), "ATTN_MAX_WORK"));
    assert_true(now_s() - t0 < 1.0);
    /* F8: an lse with ndim 64 reaches validation, never attn_tensor_span, on every workspace entry */
    float ws[256];
    attn_tensor lse = attn_tensor_make(out, ATTN_DTYPE_F32, 3, (const int64_t[]){1, 1, 1});
    lse.ndim = 64;
    tk.shape[1] = 1;
    assert_int_equal(attn_forward_prescaled(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tk, 1, NULL, &to, &lse, ws, sizeof ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "lse: ndim=64"));
    attn_quant_params qp;
    attn_quant_params_init(&qp, ATTN_QUANT_FP8_E4M3);
    assert_int_equal(attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tk, &qp, NULL, &to, &lse, ws, sizeof ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "lse: ndim=64"));
    attn_ctx_destroy(ctx);
}

/* ---- F9 (campaign of the per-target fuzzers): every product of a workspace-size function is checked -------
 * attn_forward_padded_workspace_size computed batch·8 unchecked (signed overflow for batch = 2^62, seq 0). */
static void test_workspace_size_products(void **state) {
    (void)state;
    size_t b = 12345;
    const int64_t bad[][2] = {{(int64_t)1 << 62, 0}, {INT64_MAX, 0}, {(int64_t)1 << 61, 1}, {INT64_MAX / 8 + 1, 0},
                              {1, INT64_MAX}, {(int64_t)1 << 32, (int64_t)1 << 32}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_clear_error();
        assert_int_equal(attn_forward_padded_workspace_size(bad[i][0], bad[i][1], &b), ATTN_STATUS_OVERFLOW);
        assert_non_null(strstr(attn_last_error(), "workspace: batch="));
        assert_int_equal(b, 12345); /* nothing written */
    }
    /* exact sizes: 4 bytes per token + 8 per batch row */
    assert_int_equal(attn_forward_padded_workspace_size(2, 5, &b), ATTN_STATUS_OK);
    assert_int_equal(b, 2 * 5 * 4 + 2 * 8);
    assert_int_equal(attn_forward_padded_workspace_size(0, 0, &b), ATTN_STATUS_OK);
    assert_int_equal(b, 0);
    assert_int_equal(attn_forward_padded_workspace_size(1 << 20, 0, &b), ATTN_STATUS_OK);
    assert_int_equal(b, (size_t)8 << 20);
    assert_int_equal(attn_forward_padded_workspace_size(-1, 0, &b), ATTN_STATUS_INVALID_ARGUMENT);
}

/* ---- F10 (campaign): the element count of an empty view with huge other dims forms no product of them ------
 * attn_tensor_numel multiplied 4 · INT64_MAX before the 0 (signed overflow; via
 * attn_forward_prescaled_workspace_size on an empty q). UBSan (the sanitizer tier) fails the old code here. */
static void test_numel_no_overflow(void **state) {
    (void)state;
    const int64_t empty[4] = {4, INT64_MAX, 0, 8}, huge[4] = {(int64_t)1 << 32, (int64_t)1 << 32, 1, 1};
    attn_tensor t = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, empty);
    assert_int_equal(attn_tensor_numel(&t), 0);
    t = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, huge);
    assert_true(attn_tensor_numel(&t) == INT64_MAX); /* saturates (used to wrap to 0) */
    const int64_t ok[4] = {2, 3, 4, 5};
    t = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, ok);
    assert_int_equal(attn_tensor_numel(&t), 120);
    /* the entry that reached it: an empty q of huge dims measures 0 bytes, no UB */
    float buf[2 * 3 * 4 * 8];
    const int64_t kv[4] = {2, 3, 4, 8};
    attn_tensor q = attn_tensor_make(NULL, ATTN_DTYPE_F32, 4, empty), k = attn_tensor_make(buf, ATTN_DTYPE_F32, 4, kv);
    size_t bytes = 7;
    const attn_status st = attn_forward_prescaled_workspace_size(&q, &k, &k, &bytes);
    assert_true(st == ATTN_STATUS_OK || st == ATTN_STATUS_INVALID_ARGUMENT || st == ATTN_STATUS_OVERFLOW);
    if (st != ATTN_STATUS_OK) assert_int_equal(bytes, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numel_no_overflow),
        cmocka_unit_test(test_workspace_size_products),
        cmocka_unit_test(test_exp2_nan),          cmocka_unit_test(test_nan_query_generic),
        cmocka_unit_test(test_empty_null_views),  cmocka_unit_test(test_plan_limits_fast),
        cmocka_unit_test(test_plan_count_matches_fill), cmocka_unit_test(test_paged_workspace_overlap),
        cmocka_unit_test(test_huge_views_fast),   cmocka_unit_test(test_quant_empty_seq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
