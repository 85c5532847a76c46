/*
 * test_kvcache.c — attn_forward_kvcache (flash_attn_with_kvcache): new rows land at cache_seqlens through the block
 * table or the cache rows (cache_batch_idx), nothing else in the cache changes, and every sequence's output and LSE
 * equal attn_forward_varlen on its gathered keys BITWISE (cache_leftpad, per-sequence ALiBi, GQA, causal, window,
 * soft-cap; LSE through a view and through scratch) and the oracle within th_tol_for; a refused call writes nothing.
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

enum { H = 4, HK = 2, D = 32 };

typedef struct kvc_case {
    attn_dtype dt;
    int paged, leftpad, slopes, batch_idx, want_lse;
    int64_t batch, seqlen_q, seqlen_new;
} kvc_case;

static void run_case(attn_ctx *ctx, uint64_t seed, const kvc_case *k) {
    th_rng rng;
    th_rng_seed(&rng, seed);
    const int64_t B = k->batch, SQ = k->seqlen_q, SN = k->seqlen_new, es = (int64_t)attn_dtype_size(k->dt);
    const int64_t bs = k->paged ? 8 : 40, mb = k->paged ? 5 : 1, nb = k->paged ? B * mb + 2 : B + 1;
    const int64_t cap = bs * mb, row = HK * D, cache_n = 2 * nb * bs * row;
    void *cache = th_alloc_fill(&rng, k->dt, (size_t)cache_n, -1, 1), *cache0 = malloc((size_t)(cache_n * es));
    void *q = th_alloc_fill(&rng, k->dt, (size_t)(B * SQ * H * D), -1, 1);
    void *kn = th_alloc_fill(&rng, k->dt, (size_t)(B * SN * row), -1, 1);
    void *vn = th_alloc_fill(&rng, k->dt, (size_t)(B * SN * row), -1, 1);
    void *out = th_alloc_nan(k->dt, (size_t)(B * SQ * H * D));
    float *lse = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * SQ));
    float *slopes = (float *)th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * H), 0.01, 0.5);
    int32_t *cs = malloc((size_t)B * 4), *lp = malloc((size_t)B * 4), *bi = malloc((size_t)B * 4);
    int32_t *bt = malloc((size_t)(B * mb) * 4);
    for (int64_t i = 0; i < B * mb; i++) /* distinct blocks, reversed: not in sequence order */
        bt[i] = (int32_t)(nb - 1 - i);
    for (int64_t b = 0; b < B; b++) {
        cs[b] = (int32_t)th_rng_int(&rng, 0, cap - SN);
        lp[b] = k->leftpad ? (int32_t)th_rng_int(&rng, 0, cs[b]) : 0;
        bi[b] = (int32_t)((b + 1) % (B + 1)); /* rows 1..B-1, then 0 */
    }
    memcpy(cache0, cache, (size_t)(cache_n * es));
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = (seed & 1) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    prm.window_left = (seed & 2) ? 7 : -1;
    prm.softcap = (seed & 4) ? 20.0f : 0.0f;
    const int64_t sq[4] = {B, SQ, H, D}, sk[4] = {B, SN, HK, D}, sc[5] = {2, nb, bs, HK, D}, sl[3] = {B, H, SQ};
    const int64_t sb[1] = {B}, sbt[2] = {B, mb}, ssl[2] = {B, H};
    attn_tensor tq = attn_tensor_make(q, k->dt, 4, sq), to = attn_tensor_make(out, k->dt, 4, sq);
    attn_tensor tk = attn_tensor_make(kn, k->dt, 4, sk), tv = attn_tensor_make(vn, k->dt, 4, sk);
    attn_tensor tc = attn_tensor_make(cache, k->dt, 5, sc), tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, sl);
    attn_tensor tcs = attn_tensor_make(cs, ATTN_DTYPE_I32, 1, sb), tlp = attn_tensor_make(lp, ATTN_DTYPE_I32, 1, sb);
    attn_tensor tbi = attn_tensor_make(bi, ATTN_DTYPE_I32, 1, sb), tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, sbt);
    attn_tensor tsl = attn_tensor_make(slopes, ATTN_DTYPE_F32, 2, ssl);
    const attn_status st = attn_forward_kvcache(
        ctx, &tq, &tc, SN ? &tk : NULL, SN ? &tv : NULL, &tcs, k->batch_idx ? &tbi : NULL, k->leftpad ? &tlp : NULL,
        k->paged ? &tbt : NULL, k->slopes ? &tsl : NULL, &prm, &to, k->want_lse ? &tl : NULL);
    if (st != ATTN_STATUS_OK)
        fprintf(stderr, "seed %llu: %s\n", (unsigned long long)seed, attn_last_error());
    assert_int_equal(st, ATTN_STATUS_OK);

    /* the cache: cache0 with the new rows at their slots */
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < SN; s++) {
            const int64_t pos = cs[b] + s;
            const int64_t blk = k->paged ? bt[b * mb + pos / bs] : (k->batch_idx ? bi[b] : b);
            const int64_t at = (blk * bs + pos % bs) * row;
            memcpy((char *)cache0 + at * es, (char *)kn + (b * SN + s) * row * es, (size_t)(row * es));
            memcpy((char *)cache0 + (nb * bs * row + at) * es, (char *)vn + (b * SN + s) * row * es,
                   (size_t)(row * es));
        }
    assert_memory_equal(cache, cache0, (size_t)(cache_n * es));

    /* each sequence against attn_forward_varlen on its gathered keys (bitwise) and the oracle */
    for (int64_t b = 0; b < B; b++) {
        const int64_t L = cs[b] + SN - lp[b];
        char *kk = malloc((size_t)((L + 1) * row * es)), *vv = malloc((size_t)((L + 1) * row * es));
        for (int64_t j = 0; j < L; j++) {
            const int64_t pos = lp[b] + j;
            const int64_t blk = k->paged ? bt[b * mb + pos / bs] : (k->batch_idx ? bi[b] : b);
            const int64_t at = (blk * bs + pos % bs) * row;
            memcpy(kk + j * row * es, (char *)cache + at * es, (size_t)(row * es));
            memcpy(vv + j * row * es, (char *)cache + (nb * bs * row + at) * es, (size_t)(row * es));
        }
        const int64_t s3q[3] = {SQ, H, D}, s3k[3] = {L, HK, D}, s2l[2] = {H, SQ}, two[1] = {2};
        int32_t cq[2] = {0, (int32_t)SQ}, ck[2] = {0, (int32_t)L};
        void *o2 = th_alloc_nan(k->dt, (size_t)(SQ * H * D));
        float *l2 = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * SQ));
        attn_tensor q3 = attn_tensor_make((char *)q + b * SQ * H * D * es, k->dt, 3, s3q);
        attn_tensor o3 = attn_tensor_make((char *)out + b * SQ * H * D * es, k->dt, 3, s3q);
        attn_tensor l3 = attn_tensor_make(lse + b * H * SQ, ATTN_DTYPE_F32, 2, s2l);
        attn_tensor k3 = attn_tensor_make(kk, k->dt, 3, s3k), v3 = attn_tensor_make(vv, k->dt, 3, s3k);
        attn_tensor e3 = attn_tensor_make(o2, k->dt, 3, s3q), el = attn_tensor_make(l2, ATTN_DTYPE_F32, 2, s2l);
        attn_tensor tcq = attn_tensor_make(cq, ATTN_DTYPE_I32, 1, two),
                    tck = attn_tensor_make(ck, ATTN_DTYPE_I32, 1, two);
        attn_params pb = prm;
        if (k->slopes)
            pb.alibi_slopes = slopes + b * H;
        assert_int_equal(attn_forward_varlen(ctx, &q3, &k3, &v3, &tcq, &tck, &pb, &e3, &el), ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&o3, &e3));
        if (k->want_lse)
            assert_true(th_bitwise_equal(&l3, &el));
        assert_int_equal(attn_ref_forward_varlen(&q3, &k3, &v3, &tcq, &tck, &pb, &e3, &el), ATTN_STATUS_OK);
        size_t bad = 0;
        th_compare(&o3, &e3, th_tol_for(k->dt), 1.0, &bad);
        assert_int_equal(bad, 0);
        free(kk), free(vv), free(o2), free(l2);
    }
    free(cache), free(cache0), free(q), free(kn), free(vn), free(out), free(lse), free(slopes);
    free(cs), free(lp), free(bi), free(bt);
}

static void test_kvcache_equals_varlen(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    uint64_t seed = 1;
    for (int d = 0; d < 3; d++)
        for (int paged = 0; paged < 2; paged++)
            for (int opt = 0; opt < 8; opt++, seed++) {
                /* opt bits: leftpad, per-sequence slopes, LSE; seqlen_q 1 (decode: LSE a view) or 3 (scratch) */
                const kvc_case k = {
                    dts[d],         paged, opt & 1,          (opt >> 1) & 1,       !paged && (seed % 3 == 0),
                    (opt >> 2) & 1, 3,     seed % 2 ? 1 : 3, seed % 4 == 0 ? 0 : 2};
                run_case(ctx, seed * 7919, &k);
            }
    /* 80 sequences with cache_leftpad and LSE through scratch: ~15 KiB of scratch, past what stays on the stack */
    const kvc_case big = {ATTN_DTYPE_F32, 1, 1, 0, 0, 1, 80, 3, 2};
    run_case(ctx, 4242, &big);
    attn_ctx_destroy(ctx);
}

static void test_kvcache_refused_writes_nothing(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 5);
    enum { B = 2, BS = 16 };
    const int64_t cache_n = 2 * B * BS * HK * D;
    float *cache = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)cache_n, -1, 1), *cache0 = malloc((size_t)cache_n * 4);
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, B * H * D, -1, 1), *out = th_alloc_nan(ATTN_DTYPE_F32, B * H * D);
    float *kn = th_alloc_fill(&rng, ATTN_DTYPE_F32, B * HK * D, -1, 1);
    memcpy(cache0, cache, (size_t)cache_n * 4);
    const int64_t sq[4] = {B, 1, H, D}, sk[4] = {B, 1, HK, D}, sc[5] = {2, B, BS, HK, D}, sb[1] = {B};
    const int64_t s0[5] = {2, B, 0, HK, D}, sbt[2] = {B, 1};
    int32_t cs[B] = {3, BS}, ok[B] = {3, 4}, pad[B] = {0, 5}, bt[B] = {0, 1}; /* cs[1] + 1 new row > BS */
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, sq), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, sq);
    attn_tensor tk = attn_tensor_make(kn, ATTN_DTYPE_F32, 4, sk), tc = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, sc);
    attn_tensor tcs = attn_tensor_make(cs, ATTN_DTYPE_I32, 1, sb), tok = attn_tensor_make(ok, ATTN_DTYPE_I32, 1, sb);
    attn_tensor tpad = attn_tensor_make(pad, ATTN_DTYPE_I32, 1, sb), tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, sbt);
    attn_tensor tz = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, s0), oq = tq;
    const struct {
        attn_tensor *cache, *k, *v, *cs, *bi, *lp, *bt, *out;
        const char *msg;
    } bad[] = {
        {&tc, &tk, &tk, &tcs, NULL, NULL, NULL, &to, "cache_seqlens: entry 1 = 16 + seqlen_new=1 exceeds"},
        {&tc, &tk, NULL, &tok, NULL, NULL, NULL, &to, "v: is NULL but k is given"},
        {&tc, &tk, &tk, &tok, &tcs, NULL, &tbt, &to, "cache_batch_idx: cannot be used with block_table"},
        {&tc, &tk, &tk, &tok, NULL, &tpad, NULL, &to,
         "cache_leftpad: entry 1 = 5 is outside [0, cache_seqlens[1] = 4]"},
        {&tc, &tk, &tk, &tok, NULL, NULL, NULL, &oq, "out: overlaps q in memory"},
        {&tz, &tk, &tk, &tok, NULL, NULL, NULL, &to, "k_cache: shape[1]=0"},
        {&tc, &tk, &tk, &tok, NULL, NULL, NULL, &tk, "out: shape [2, 1, 2, 32], expected [2, 1, 4, 32]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const attn_status st = attn_forward_kvcache(ctx, &tq, bad[i].cache, bad[i].k, bad[i].v, bad[i].cs, bad[i].bi,
                                                    bad[i].lp, bad[i].bt, NULL, NULL, bad[i].out, NULL);
        if (st != ATTN_STATUS_INVALID_ARGUMENT || strstr(attn_last_error(), bad[i].msg) == NULL)
            fprintf(stderr, "case %zu: status %d, message %s\n", i, (int)st, attn_last_error());
        assert_int_equal(st, ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), bad[i].msg));
        assert_memory_equal(cache, cache0, (size_t)cache_n * 4);
    }
    /* outputs that meet an array only this entry reads, or each other, and a cache_leftpad over rows that do not run
     * evenly across blocks: refused before the write */
    float *buf = th_alloc_fill(&rng, ATTN_DTYPE_F32, 2 * B * H * D + 64, -1, 1);
    int32_t *bt_in_buf = (int32_t *)(void *)buf; /* a block table in the first two floats of buf */
    bt_in_buf[0] = 0, bt_in_buf[1] = 1;
    const int64_t sl3[3] = {B, H, 1}, s2[2] = {B, H}, sbt1[2] = {B, 1};
    attn_tensor tbt_buf = attn_tensor_make(bt_in_buf, ATTN_DTYPE_I32, 2, sbt1);
    attn_tensor to_buf = attn_tensor_make(buf + 1, ATTN_DTYPE_F32, 4, sq); /* starts inside the table */
    attn_tensor tsl_buf = attn_tensor_make(buf + 4, ATTN_DTYPE_F32, 2, s2),
                to_sl = attn_tensor_make(buf, ATTN_DTYPE_F32, 4, sq);
    attn_tensor tl_out = attn_tensor_make(out + 3, ATTN_DTYPE_F32, 3, sl3);
    attn_tensor tl_cache = attn_tensor_make(cache + 5, ATTN_DTYPE_F32, 3, sl3);
    attn_tensor tc_pad = tc;  /* block rows with a gap: strides[1] past block_size · strides[2] */
    tc_pad.shape[2] = BS / 2; /* two blocks of BS / 2 rows, BS rows apart */
    const int64_t s1[1] = {1};
    int32_t one_len[1] = {3}, one_pad[1] = {1};
    attn_tensor tq1 = tq, to1 = to, tcs1 = attn_tensor_make(one_len, ATTN_DTYPE_I32, 1, s1);
    attn_tensor tpad1 = attn_tensor_make(one_pad, ATTN_DTYPE_I32, 1, s1), tk1 = tk;
    tq1.shape[0] = to1.shape[0] = tk1.shape[0] = 1;
    struct {
        attn_tensor *q, *cache, *cs, *lp, *bt, *slopes, *out, *lse;
        const char *msg;
    } late[] = {
        {&tq, &tc, &tok, NULL, &tbt_buf, NULL, &to_buf, NULL, "out: overlaps block_table in memory"},
        {&tq, &tc, &tok, NULL, NULL, &tsl_buf, &to_sl, NULL, "out: overlaps alibi_slopes in memory"},
        {&tq, &tc, &tok, NULL, NULL, NULL, &to, &tl_out, "out: overlaps lse in memory"},
        {&tq, &tc, &tok, NULL, NULL, NULL, &to, &tl_cache, "lse: overlaps kv_cache in memory"},
        {&tq1, &tc_pad, &tcs1, &tpad1, NULL, NULL, &to1, NULL, "cache_leftpad: the cache's rows do not run evenly"},
    };
    for (size_t i = 0; i < sizeof late / sizeof late[0]; i++) {
        attn_tensor *kk = late[i].q == &tq1 ? &tk1 : &tk;
        const attn_status st = attn_forward_kvcache(ctx, late[i].q, late[i].cache, kk, kk, late[i].cs, NULL, late[i].lp,
                                                    late[i].bt, late[i].slopes, NULL, late[i].out, late[i].lse);
        if (st != ATTN_STATUS_INVALID_ARGUMENT || strstr(attn_last_error(), late[i].msg) == NULL)
            fprintf(stderr, "late case %zu: status %d, message %s\n", i, (int)st, attn_last_error());
        assert_int_equal(st, ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), late[i].msg));
        assert_memory_equal(cache, cache0, (size_t)cache_n * 4);
    }
    free(buf);
    free(cache), free(cache0), free(q), free(out), free(kn);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvcache_equals_varlen),
        cmocka_unit_test(test_kvcache_refused_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
