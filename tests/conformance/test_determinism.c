/*
 * test_determinism.c — bitwise reproducibility (docs/CONTRIBUTING.md §9): out and LSE are identical for 1 to 4
 * threads on every usable ISA (dense, varlen, causal, window, Sk spanning > 2 split-KV partitions, GQA 7, decode
 * calls with fewer items than threads, split over lanes in one or more rounds),
 * and a sequence's bits do not depend on the batch around it: adding other sequences to a varlen or dense
 * batch, or splitting its queries into chunks (bottom-right alignment keeps each row's position), leaves
 * every one of its rows bit-identical.
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

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * --------------------------------------------------------------------------------------------- */
typedef struct pack {
    int64_t num_seqs, H, Hk, D, Dv;
    int32_t cu_q[17], cu_k[17];
    attn_dtype q_dtype, kv_dtype;
    void *q, *k, *v; /* [total_q, H, D], [total_k, Hk, D], [total_k, Hk, Dv] */
} pack;

/* Packs sequences with lengths lq/lk and random data (seeded). */
static pack pack_make(uint64_t seed, int64_t n, const int64_t *lq, const int64_t *lk, int64_t H, int64_t Hk,
                      int64_t D, int64_t Dv, attn_dtype q_dtype, attn_dtype kv_dtype) {
    pack p;
    memset(&p, 0, sizeof p);
    p.num_seqs = n, p.H = H, p.Hk = Hk, p.D = D, p.Dv = Dv, p.q_dtype = q_dtype, p.kv_dtype = kv_dtype;
    for (int64_t b = 0; b < n; b++) {
        p.cu_q[b + 1] = p.cu_q[b] + (int32_t)lq[b];
        p.cu_k[b + 1] = p.cu_k[b] + (int32_t)lk[b];
    }
    th_rng r;
    th_rng_seed(&r, seed);
    p.q = th_alloc_fill(&r, q_dtype, (size_t)(p.cu_q[n] * H * D), -2, 2);
    p.k = th_alloc_fill(&r, kv_dtype, (size_t)(p.cu_k[n] * Hk * D), -2, 2);
    p.v = th_alloc_fill(&r, kv_dtype, (size_t)(p.cu_k[n] * Hk * Dv), -1, 1);
    return p;
}

static void pack_free(pack *p) { free(p->q), free(p->k), free(p->v); }

typedef struct result {
    void *out;  /* [total_q, H, Dv] */
    float *lse; /* [H, total_q]     */
    size_t out_bytes;
    int64_t total_q;
} result;

static void result_free(result *r) { free(r->out), free(r->lse); }

static result run_varlen(attn_ctx *ctx, const pack *p, const attn_params *params) {
    result r;
    const int64_t tq = p->cu_q[p->num_seqs], tk = p->cu_k[p->num_seqs];
    r.total_q = tq;
    r.out_bytes = (size_t)(tq * p->H * p->Dv) * attn_dtype_size(p->q_dtype);
    r.out = th_alloc_nan(p->q_dtype, (size_t)(tq * p->H * p->Dv));
    r.lse = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(p->H * tq));
    int64_t qs[3] = {tq, p->H, p->D}, ks[3] = {tk, p->Hk, p->D}, vs[3] = {tk, p->Hk, p->Dv};
    int64_t os[3] = {tq, p->H, p->Dv}, ls[2] = {p->H, tq}, cs[1] = {p->num_seqs + 1};
    attn_tensor q = attn_tensor_make(p->q, p->q_dtype, 3, qs), k = attn_tensor_make(p->k, p->kv_dtype, 3, ks);
    attn_tensor v = attn_tensor_make(p->v, p->kv_dtype, 3, vs), o = attn_tensor_make(r.out, p->q_dtype, 3, os);
    attn_tensor l = attn_tensor_make(r.lse, ATTN_DTYPE_F32, 2, ls);
    attn_tensor cq = attn_tensor_make((void *)p->cu_q, ATTN_DTYPE_I32, 1, cs);
    attn_tensor ck = attn_tensor_make((void *)p->cu_k, ATTN_DTYPE_I32, 1, cs);
    assert_int_equal(attn_forward_varlen(ctx, &q, &k, &v, &cq, &ck, params, &o, &l), ATTN_STATUS_OK);
    return r;
}

/* Dense BSND over B equal-length sequences of the pack (all lq equal, all lk equal). */
static result run_dense(attn_ctx *ctx, const pack *p, const attn_params *params) {
    result r;
    const int64_t B = p->num_seqs, Sq = p->cu_q[1], Sk = p->cu_k[1];
    r.total_q = B * Sq;
    r.out_bytes = (size_t)(B * Sq * p->H * p->Dv) * attn_dtype_size(p->q_dtype);
    r.out = th_alloc_nan(p->q_dtype, (size_t)(B * Sq * p->H * p->Dv));
    r.lse = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * p->H * Sq));
    int64_t qs[4] = {B, Sq, p->H, p->D}, ks[4] = {B, Sk, p->Hk, p->D}, vs[4] = {B, Sk, p->Hk, p->Dv};
    int64_t os[4] = {B, Sq, p->H, p->Dv}, ls[3] = {B, p->H, Sq};
    attn_tensor q = attn_tensor_make(p->q, p->q_dtype, 4, qs), k = attn_tensor_make(p->k, p->kv_dtype, 4, ks);
    attn_tensor v = attn_tensor_make(p->v, p->kv_dtype, 4, vs), o = attn_tensor_make(r.out, p->q_dtype, 4, os);
    attn_tensor l = attn_tensor_make(r.lse, ATTN_DTYPE_F32, 3, ls);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &q, &k, &v, params, &o, &l), ATTN_STATUS_OK);
    return r;
}

static int same_result(const result *a, const result *b) {
    return a->out_bytes == b->out_bytes && memcmp(a->out, b->out, a->out_bytes) == 0 &&
           memcmp(a->lse, b->lse, (size_t)a->total_q * 4) == 0 /* first head row; full check below */;
}

static int same_lse_all(const result *a, const result *b, int64_t H) {
    return memcmp(a->lse, b->lse, (size_t)(H * a->total_q) * 4) == 0;
}

/* Rows [row_a, row_a + n) of result a equal rows [row_b, row_b + n) of result b, bitwise (out + LSE).
 * LSE layout [H, total_q] (varlen) — for dense results use total_q = B·Sq with one batch only. */
static int same_rows(const result *a, int64_t row_a, const result *b, int64_t row_b, int64_t n, int64_t H,
                     int64_t Dv, attn_dtype dtype) {
    const size_t row_bytes = (size_t)(H * Dv) * attn_dtype_size(dtype);
    if (memcmp((const char *)a->out + (size_t)row_a * row_bytes, (const char *)b->out + (size_t)row_b * row_bytes,
               (size_t)n * row_bytes) != 0)
        return 0;
    for (int64_t h = 0; h < H; h++)
        if (memcmp(a->lse + h * a->total_q + row_a, b->lse + h * b->total_q + row_b, (size_t)n * 4) != 0) return 0;
    return 1;
}

static attn_ctx *new_ctx(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    return ctx;
}

typedef struct tcase {
    const char *name;
    int dense;
    int64_t n, lq[4], lk[4], H, Hk, D, Dv;
    attn_dtype q_dtype, kv_dtype;
    int32_t causal, window_left, window_right;
    int alibi, sinks;
} tcase;

/* ---------------------------------------------------------------------------------------------
 * Thread-count invariance
 * --------------------------------------------------------------------------------------------- */
static void test_thread_counts(void **state) {
    (void)state;
    /* clang-format off */
    const tcase cases[] = {
        {"dense", 1, 2, {37, 37}, {100, 100}, 8, 2, 64, 64, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 0, -1, -1, 0, 0},
        {"dense causal bf16", 1, 2, {45, 45}, {45, 45}, 4, 4, 32, 32, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 1, -1, -1,
         0, 1},
        {"dense window", 1, 1, {70, 0}, {90, 0}, 4, 2, 16, 16, ATTN_DTYPE_F16, ATTN_DTYPE_F16, 1, 16, 0, 1, 0},
        {"long Sk > 2 partitions", 1, 1, {9, 0}, {1300, 0}, 2, 1, 32, 32, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 1, -1,
         -1, 0, 0},
        {"GQA 7", 1, 1, {11, 0}, {150, 0}, 14, 2, 16, 24, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, 0, -1, -1, 0, 1},
        {"varlen", 0, 4, {13, 0, 1, 40}, {13, 5, 1100, 60}, 7, 1, 16, 16, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 1, -1,
         -1, 1, 0},
        {"varlen window", 0, 3, {30, 2, 17}, {30, 600, 17}, 8, 2, 8, 8, ATTN_DTYPE_F16, ATTN_DTYPE_F16, 1, 5, 3,
         0, 0},
        /* fewer decode items than threads: split-KV lanes; 8 blocks of 256 dims hold 3 partitions per lane, so
         * 7 partitions take 2 rounds on 2 threads, 1 on 3 and 4 */
        {"lanes MQA rounds", 1, 1, {16, 0}, {3100, 0}, 16, 1, 256, 256, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, 1, -1, -1,
         1, 1},
        {"lanes window", 1, 1, {1, 0}, {5000, 0}, 8, 1, 64, 64, ATTN_DTYPE_F16, ATTN_DTYPE_F16, 1, 1500, 0, 0, 0},
        {"lanes GQA 2 kv heads", 0, 1, {3, 0}, {2100, 0}, 8, 2, 32, 32, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 1, -1, -1,
         0, 1},
        /* one decode token, eight kv heads: lanes over items of all eight heads (not items of half of them) */
        {"lanes decode 8 kv heads", 0, 1, {1, 0}, {6500, 0}, 32, 8, 128, 128, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, 1, -1,
         -1, 0, 0},
    };
    /* clang-format on */
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const tcase *c = &cases[ci];
        pack p = pack_make(11 + ci, c->n, c->lq, c->lk, c->H, c->Hk, c->D, c->Dv, c->q_dtype, c->kv_dtype);
        attn_params prm;
        attn_params_init(&prm);
        prm.causal = c->causal, prm.window_left = c->window_left, prm.window_right = c->window_right;
        float slopes[16], sinks[16];
        for (int h = 0; h < 16; h++) slopes[h] = 0.01f * (float)(h + 1), sinks[h] = 0.25f * (float)h - 1.0f;
        prm.alibi_slopes = c->alibi ? slopes : NULL;
        prm.sinks = c->sinks ? sinks : NULL;
        for (int32_t i = 0; i < attn_isa_count(); i++) {
            const char *isa = attn_isa_name(i);
            if (!attn_isa_available(isa)) continue;
            assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
            result base = {NULL, NULL, 0, 0};
            for (int32_t t = 1; t <= 4; t++) {
                assert_int_equal(attn_ctx_set_num_threads(ctx, t), ATTN_STATUS_OK);
                assert_int_equal(attn_ctx_num_threads(ctx), t);
                result r = c->dense ? run_dense(ctx, &p, &prm) : run_varlen(ctx, &p, &prm);
                if (t == 1) {
                    base = r;
                    continue;
                }
                if (!same_result(&base, &r) || !same_lse_all(&base, &r, c->H)) {
                    fprintf(stderr, "REPRO test_determinism thread_counts: case=\"%s\" isa=%s threads=%d differs "
                                    "from threads=1\n", c->name, isa, (int)t);
                    fails++;
                }
                result_free(&r);
            }
            result_free(&base);
        }
        pack_free(&p);
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* Split-KV lanes with no partition anywhere: request 0 has 513 keys and no query row, request 1 query rows and no
 * key. Its rows are out 0, LSE -inf on every thread count, also right after a call that left states in the
 * context's scratch (the lanes once finalized those). */
static void test_lanes_no_partition(void **state) {
    (void)state;
    const int64_t lq[2] = {0, 2}, lk_warm[2] = {0, 513}, lk[2] = {513, 0};
    pack warm = pack_make(41, 2, lq, lk_warm, 2, 1, 40, 40, ATTN_DTYPE_F32, ATTN_DTYPE_F32);
    pack cold = pack_make(42, 2, lq, lk, 2, 1, 40, 40, ATTN_DTYPE_F32, ATTN_DTYPE_F32);
    attn_params p;
    attn_params_init(&p);
    attn_ctx *ctx = new_ctx();
    for (int32_t t = 1; t <= 4; t++) {
        assert_int_equal(attn_ctx_set_num_threads(ctx, t), ATTN_STATUS_OK);
        result w = run_varlen(ctx, &warm, &p), r = run_varlen(ctx, &cold, &p);
        for (int64_t i = 0; i < r.total_q * cold.H * cold.Dv; i++)
            assert_true(((const float *)r.out)[i] == 0.0f);
        for (int64_t i = 0; i < cold.H * r.total_q; i++)
            assert_true(isinf(r.lse[i]) && r.lse[i] < 0);
        result_free(&w), result_free(&r);
    }
    attn_ctx_destroy(ctx);
    pack_free(&warm), pack_free(&cold);
}

/* ---------------------------------------------------------------------------------------------
 * Batch invariance
 * --------------------------------------------------------------------------------------------- */
/* Copies sequence `src_b` of pack `src` into sequence slot `dst_b` of `dst` (same head sizes). */
static void pack_copy_seq(pack *dst, int64_t dst_b, const pack *src, int64_t src_b) {
    const size_t qe = attn_dtype_size(src->q_dtype), ke = attn_dtype_size(src->kv_dtype);
    const int64_t lq = src->cu_q[src_b + 1] - src->cu_q[src_b], lk = src->cu_k[src_b + 1] - src->cu_k[src_b];
    assert_int_equal(dst->cu_q[dst_b + 1] - dst->cu_q[dst_b], lq);
    assert_int_equal(dst->cu_k[dst_b + 1] - dst->cu_k[dst_b], lk);
    memcpy((char *)dst->q + (size_t)(dst->cu_q[dst_b] * src->H * src->D) * qe,
           (const char *)src->q + (size_t)(src->cu_q[src_b] * src->H * src->D) * qe, (size_t)(lq * src->H * src->D) * qe);
    memcpy((char *)dst->k + (size_t)(dst->cu_k[dst_b] * src->Hk * src->D) * ke,
           (const char *)src->k + (size_t)(src->cu_k[src_b] * src->Hk * src->D) * ke,
           (size_t)(lk * src->Hk * src->D) * ke);
    memcpy((char *)dst->v + (size_t)(dst->cu_k[dst_b] * src->Hk * src->Dv) * ke,
           (const char *)src->v + (size_t)(src->cu_k[src_b] * src->Hk * src->Dv) * ke,
           (size_t)(lk * src->Hk * src->Dv) * ke);
}

static void test_batch_composition(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    const int32_t causal_modes[] = {ATTN_CAUSAL_NONE, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_CAUSAL_TOP_LEFT};
    for (int cm = 0; cm < 3; cm++)
        for (int32_t i = 0; i < attn_isa_count(); i++) {
            const char *isa = attn_isa_name(i);
            if (!attn_isa_available(isa)) continue;
            assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
            assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
            attn_params prm;
            attn_params_init(&prm);
            prm.causal = causal_modes[cm];
            prm.window_left = cm == 1 ? 200 : -1;
            float slopes[8] = {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f, 0.07f, 0.08f};
            prm.alibi_slopes = cm == 2 ? slopes : NULL;
            /* varlen: X alone vs [A, X, B, C] */
            const int64_t lq1[1] = {23}, lk1[1] = {600};
            const int64_t lq4[4] = {5, 23, 1, 40}, lk4[4] = {77, 600, 300, 40};
            pack alone = pack_make(100, 1, lq1, lk1, 8, 2, 32, 32, ATTN_DTYPE_F32, ATTN_DTYPE_BF16);
            pack batch = pack_make(200, 4, lq4, lk4, 8, 2, 32, 32, ATTN_DTYPE_F32, ATTN_DTYPE_BF16);
            pack_copy_seq(&batch, 1, &alone, 0);
            result ra = run_varlen(ctx, &alone, &prm), rb = run_varlen(ctx, &batch, &prm);
            if (!same_rows(&ra, 0, &rb, batch.cu_q[1], 23, 8, 32, ATTN_DTYPE_F32)) {
                fprintf(stderr, "REPRO test_determinism batch: varlen isa=%s causal=%d: sequence bits change "
                                "when other sequences join the batch\n", isa, (int)prm.causal);
                fails++;
            }
            result_free(&ra), result_free(&rb);
            pack_free(&alone), pack_free(&batch);
            /* dense: B = 1 vs B = 3 with the sequence in the middle */
            const int64_t dq1[1] = {19}, dk1[1] = {140}, dq3[3] = {19, 19, 19}, dk3[3] = {140, 140, 140};
            pack d1 = pack_make(300, 1, dq1, dk1, 7, 1, 16, 16, ATTN_DTYPE_F16, ATTN_DTYPE_F16);
            pack d3 = pack_make(400, 3, dq3, dk3, 7, 1, 16, 16, ATTN_DTYPE_F16, ATTN_DTYPE_F16);
            pack_copy_seq(&d3, 1, &d1, 0);
            result r1 = run_dense(ctx, &d1, &prm), r3 = run_dense(ctx, &d3, &prm);
            /* dense LSE is [B, H, Sq]: batch 1 starts at H·Sq */
            const size_t ob = (size_t)(19 * 7 * 16) * 2;
            int same = memcmp(r1.out, (char *)r3.out + ob, ob) == 0 &&
                       memcmp(r1.lse, r3.lse + 7 * 19, (size_t)(7 * 19) * 4) == 0;
            if (!same) {
                fprintf(stderr, "REPRO test_determinism batch: dense isa=%s causal=%d: sequence bits change with "
                                "the batch size\n", isa, (int)prm.causal);
                fails++;
            }
            result_free(&r1), result_free(&r3);
            pack_free(&d1), pack_free(&d3);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* Query chunking: rows of a sequence (Sq queries over Sk keys) computed in one call equal the same rows
 * computed as separate varlen calls: the last N rows with all Sk keys, or the first a rows with the first
 * Sk − Sq + a keys (chunked prefill). Bottom-right alignment gives each row the same absolute position. */
static void test_query_chunking(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    const int64_t Sq = 50, Sk = 700, H = 8, Hk = 2, D = 32, Dv = 32;
    const int64_t lq[1] = {Sq}, lk[1] = {Sk};
    pack full = pack_make(500, 1, lq, lk, H, Hk, D, Dv, ATTN_DTYPE_F32, ATTN_DTYPE_F32);
    for (int mode = 0; mode < 4; mode++)
        for (int32_t i = 0; i < attn_isa_count(); i++) {
            const char *isa = attn_isa_name(i);
            if (!attn_isa_available(isa)) continue;
            assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
            attn_params prm;
            attn_params_init(&prm);
            float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03f, 0.02f, 0.01f, 0.005f};
            float sinks[8] = {0.f, 1.f, -1.f, 2.f, 0.5f, -0.5f, 3.f, -3.f};
            prm.causal = mode == 0 ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_BOTTOM_RIGHT;
            if (mode == 2) prm.window_left = 100, prm.alibi_slopes = slopes;
            if (mode == 3) prm.window_left = 37, prm.window_right = 0, prm.sinks = sinks, prm.softcap = 20.0f;
            result rf = run_varlen(ctx, &full, &prm);
            const int64_t tails[] = {1, 7, 33, 49};
            for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
                const int64_t n = tails[t];
                /* the last n query rows, all keys */
                pack part = full;
                part.cu_q[1] = (int32_t)n;
                part.q = (char *)full.q + (size_t)((Sq - n) * H * D) * 4;
                result rp = run_varlen(ctx, &part, &prm);
                if (!same_rows(&rf, Sq - n, &rp, 0, n, H, Dv, ATTN_DTYPE_F32)) {
                    fprintf(stderr, "REPRO test_determinism chunking: isa=%s mode=%d last %lld of Sq=%lld rows "
                                    "(Sk=%lld) differ from the full call\n", isa, mode, (long long)n, (long long)Sq,
                            (long long)Sk);
                    fails++;
                }
                result_free(&rp);
                /* the first n query rows over the first Sk − Sq + n keys (causal only: later keys are invisible) */
                if (prm.causal == ATTN_CAUSAL_BOTTOM_RIGHT) {
                    pack head = full;
                    head.cu_q[1] = (int32_t)n;
                    head.cu_k[1] = (int32_t)(Sk - Sq + n);
                    result rh = run_varlen(ctx, &head, &prm);
                    if (!same_rows(&rf, 0, &rh, 0, n, H, Dv, ATTN_DTYPE_F32)) {
                        fprintf(stderr, "REPRO test_determinism chunking: isa=%s mode=%d first %lld rows over "
                                        "%lld keys differ from the full call\n", isa, mode, (long long)n,
                                (long long)(Sk - Sq + n));
                        fails++;
                    }
                    result_free(&rh);
                }
            }
            result_free(&rf);
        }
    pack_free(&full);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread_counts),
        cmocka_unit_test(test_lanes_no_partition),
        cmocka_unit_test(test_batch_composition),
        cmocka_unit_test(test_query_chunking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
