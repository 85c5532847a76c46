/*
 * test_paged_kv.c — a key cache and a value cache apart (attn_paged_attention_kv, attn_reshape_and_cache_kv):
 *   - the key cache stored by dimension ([num_blocks, num_kv_heads, head_size, block_size] memory) gives outputs and
 *     LSE bitwise equal to attn_paged_attention on the same keys in one kv_cache, on every exact kernel table and
 *     1–3 threads, for decode (GQA groups of 1, 3, 4, 6, 8, 10, 12 and 16 rows: the column kernel, its two-run
 *     and one-run forms and the gathered fallback), speculative decode and prefill over a cached prefix, every cache
 *     dtype, block sizes that split the schedule's chunks, every option (causal, window, ALiBi, soft-cap, sinks, fp8
 *     scales); the oracle twin equals the one-cache oracle bit for bit;
 *   - the key cache in row layout through the same entry equals it too;
 *   - the write puts each key element where the one-cache write puts it (the same codes, fp8 scales included) and
 *     skips negative slots; bad views are refused, naming the argument, with nothing written.
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

static int pk_is_fp8(attn_dtype d) {
    return d == ATTN_DTYPE_FP8_E4M3 || d == ATTN_DTYPE_FP8_E5M2;
}

typedef struct pk_case {
    attn_dtype kv, q;
    int64_t bs, H, Hk, D;
    int64_t nreq;
    int64_t ctx[4], qlen[4];
    int opts; /* bit 0 softcap, 1 ALiBi, 2 window, 3 sinks */
} pk_case;

typedef struct pk_setup {
    int64_t nb, T, W;
    void *cache; /* [2, nb, bs, Hk, D] */
    void *kcols; /* [nb, Hk, D, bs]    */
    void *q;     /* [T, H, D]          */
    int32_t qsl[5], sl[4], *bt;
    float slopes[32], sinks[32];
    attn_params prm;
    attn_tensor tcache, tkc, tvc, tq, tqsl, tsl, tbt;
} pk_setup;

static void pk_build(const pk_case *c, uint64_t seed, pk_setup *s) {
    th_rng r;
    th_rng_seed(&r, seed);
    const size_t es = attn_dtype_size(c->kv);
    s->W = 0, s->T = 0, s->nb = 1;
    s->qsl[0] = 0;
    for (int64_t i = 0; i < c->nreq; i++) {
        const int64_t kv = c->ctx[i] + c->qlen[i], need = (kv + c->bs - 1) / c->bs;
        s->sl[i] = (int32_t)kv;
        s->qsl[i + 1] = (int32_t)(s->qsl[i] + c->qlen[i]);
        s->T += c->qlen[i];
        s->nb += need;
        if (need > s->W)
            s->W = need;
    }
    s->bt = calloc((size_t)(c->nreq * s->W), sizeof(int32_t));
    /* shuffled block ids (block 0 unused) */
    int32_t *perm = malloc((size_t)s->nb * sizeof(int32_t));
    for (int64_t i = 0; i < s->nb; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = s->nb - 1; i > 1; i--) {
        const int64_t j = th_rng_int(&r, 1, i);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t next = 1;
    for (int64_t i = 0; i < c->nreq; i++)
        for (int64_t b = 0; b < (s->sl[i] + c->bs - 1) / c->bs; b++)
            s->bt[i * s->W + b] = perm[next++];
    free(perm);
    const int64_t half = s->nb * c->bs * c->Hk * c->D;
    if (pk_is_fp8(c->kv)) { /* finite codes */
        s->cache = malloc((size_t)(2 * half));
        uint8_t *b = s->cache;
        for (int64_t i = 0; i < 2 * half; i++) {
            uint8_t v = (uint8_t)th_rng_int(&r, 0, 255);
            if ((v & 0x7F) == 0x7F || (c->kv == ATTN_DTYPE_FP8_E5M2 && (v & 0x7C) == 0x7C))
                v &= 0xBB;
            b[i] = v;
        }
    } else {
        s->cache = th_alloc_fill(&r, c->kv, (size_t)(2 * half), -1, 1);
    }
    s->kcols = malloc((size_t)half * es);
    for (int64_t b = 0; b < s->nb; b++)
        for (int64_t t = 0; t < c->bs; t++)
            for (int64_t g = 0; g < c->Hk; g++)
                for (int64_t d = 0; d < c->D; d++)
                    memcpy((char *)s->kcols + (size_t)(((b * c->Hk + g) * c->D + d) * c->bs + t) * es,
                           (char *)s->cache + (size_t)(((b * c->bs + t) * c->Hk + g) * c->D + d) * es, es);
    s->q = th_alloc_fill(&r, c->q, (size_t)(s->T * c->H * c->D), -1, 1);
    attn_params_init(&s->prm);
    s->prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (c->opts & 1)
        s->prm.softcap = 5.0f;
    for (int h = 0; h < 32; h++)
        s->slopes[h] = 0.02f * (float)(h + 1), s->sinks[h] = 0.3f * (float)h - 2.0f;
    if (c->opts & 2)
        s->prm.alibi_slopes = s->slopes;
    if (c->opts & 4)
        s->prm.window_left = 300;
    if (c->opts & 8)
        s->prm.sinks = s->sinks;
    if (pk_is_fp8(c->kv))
        s->prm.k_scale = 0.75f, s->prm.v_scale = 1.5f;
    int64_t cs[5] = {2, s->nb, c->bs, c->Hk, c->D};
    s->tcache = attn_tensor_make(s->cache, c->kv, 5, cs);
    int64_t hs[4] = {s->nb, c->bs, c->Hk, c->D};
    s->tkc = attn_tensor_make(s->kcols, c->kv, 4, hs);
    s->tkc.strides[0] = c->Hk * c->D * c->bs, s->tkc.strides[1] = 1, s->tkc.strides[2] = c->D * c->bs;
    s->tkc.strides[3] = c->bs;
    s->tvc = attn_tensor_make((char *)s->cache + (size_t)half * es, c->kv, 4, hs);
    int64_t qs[3] = {s->T, c->H, c->D}, one[1] = {c->nreq + 1}, rs[1] = {c->nreq}, bs2[2] = {c->nreq, s->W};
    s->tq = attn_tensor_make(s->q, c->q, 3, qs);
    s->tqsl = attn_tensor_make(s->qsl, ATTN_DTYPE_I32, 1, one);
    s->tsl = attn_tensor_make(s->sl, ATTN_DTYPE_I32, 1, rs);
    s->tbt = attn_tensor_make(s->bt, ATTN_DTYPE_I32, 2, bs2);
}

static void pk_free(pk_setup *s) {
    free(s->cache), free(s->kcols), free(s->q), free(s->bt);
}

static const char *pk_describe(const pk_case *c) {
    static char buf[256];
    snprintf(buf, sizeof buf, "kv=%s q=%s bs=%lld H=%lld/%lld D=%lld reqs=%lld (ctx %lld q %lld ...) opts=%d",
             attn_dtype_name(c->kv), attn_dtype_name(c->q), (long long)c->bs, (long long)c->H, (long long)c->Hk,
             (long long)c->D, (long long)c->nreq, (long long)c->ctx[0], (long long)c->qlen[0], c->opts);
    return buf;
}

/* out and LSE of the split entry (key cache `tk`) against the one-cache entry, bitwise, every exact table and
 * 1–3 threads; with `oracle`, the two oracles too. */
static void pk_check(attn_ctx *ctx, const pk_case *c, pk_setup *s, const attn_tensor *tk, int oracle) {
    const int64_t n = s->T * c->H * c->D;
    int64_t qs[3] = {s->T, c->H, c->D}, ls[2] = {c->H, s->T};
    void *o1 = th_alloc_nan(c->q, (size_t)n), *o2 = th_alloc_nan(c->q, (size_t)n);
    float *l1 = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(c->H * s->T)),
          *l2 = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(c->H * s->T));
    attn_tensor to1 = attn_tensor_make(o1, c->q, 3, qs), to2 = attn_tensor_make(o2, c->q, 3, qs);
    attn_tensor tl1 = attn_tensor_make(l1, ATTN_DTYPE_F32, 2, ls), tl2 = attn_tensor_make(l2, ATTN_DTYPE_F32, 2, ls);
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *isa = attn_isa_name(i);
        if (!attn_isa_available(isa))
            continue;
        assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
        for (int32_t threads = 1; threads <= 3; threads++) {
            assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
            assert_int_equal(
                attn_paged_attention(ctx, &s->tq, &s->tcache, &s->tqsl, &s->tsl, &s->tbt, &s->prm, &to1, &tl1),
                ATTN_STATUS_OK);
            const attn_status st =
                attn_paged_attention_kv(ctx, &s->tq, tk, &s->tvc, &s->tqsl, &s->tsl, &s->tbt, &s->prm, &to2, &tl2);
            if (st != ATTN_STATUS_OK)
                fprintf(stderr, "attn_paged_attention_kv: %s\n", attn_last_error());
            assert_int_equal(st, ATTN_STATUS_OK);
            if (!th_bitwise_equal(&to1, &to2) || !th_bitwise_equal(&tl1, &tl2)) {
                fprintf(stderr, "REPRO test_paged_kv: %s isa=%s threads=%d: outputs differ from the one-cache entry\n",
                        pk_describe(c), isa, (int)threads);
                fail();
            }
        }
    }
    if (oracle) {
        assert_int_equal(attn_ref_paged_attention(&s->tq, &s->tcache, &s->tqsl, &s->tsl, &s->tbt, &s->prm, &to1, &tl1),
                         ATTN_STATUS_OK);
        assert_int_equal(
            attn_ref_paged_attention_kv(&s->tq, tk, &s->tvc, &s->tqsl, &s->tsl, &s->tbt, &s->prm, &to2, &tl2),
            ATTN_STATUS_OK);
        if (!th_bitwise_equal(&to1, &to2) || !th_bitwise_equal(&tl1, &tl2)) {
            fprintf(stderr, "REPRO test_paged_kv: %s: the oracles differ\n", pk_describe(c));
            fail();
        }
    }
    free(o1), free(o2), free(l1), free(l2);
}

static void test_key_cache_by_dimension(void **state) {
    (void)state;
    const int small = th_test_small();
    const int64_t L = small ? 300 : 1100;
    const pk_case cases[] = {
        /* decode, GQA 4 (two 16-key groups), shuffled blocks of 16: chunks of 32 keys straddle blocks */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 16, 32, 8, 128, 3, {L, 37, 530}, {1, 1, 1}, 0},
        {ATTN_DTYPE_F32, ATTN_DTYPE_F32, 16, 32, 8, 128, 2, {L, 70}, {1, 1}, 1},
        {ATTN_DTYPE_F16, ATTN_DTYPE_BF16, 32, 16, 4, 64, 2, {L, 5}, {1, 1}, 2},
        /* the end-to-end model's shape: 3 rows × 64, blocks of 128 */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 128, 9, 3, 64, 2, {100, L}, {1, 1}, 0},
        {ATTN_DTYPE_F32, ATTN_DTYPE_F32, 128, 9, 3, 64, 1, {L}, {1}, 4},
        /* MQA 1 row, 8 rows (two groups), 12 rows (one group), 16 rows (the gathered fallback) */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 16, 4, 4, 96, 1, {L}, {1}, 8},
        {ATTN_DTYPE_F32, ATTN_DTYPE_F32, 32, 16, 2, 64, 1, {L}, {1}, 2},
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 16, 12, 1, 80, 1, {L}, {1}, 1},
        {ATTN_DTYPE_F16, ATTN_DTYPE_F32, 8, 16, 1, 64, 1, {L}, {1}, 0},
        /* 6 and 10 rows (computed as 8 and 12, the extra rows' lanes written as 0) */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 16, 6, 1, 64, 2, {L, 40}, {1, 1}, 2},
        {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32, 16, 10, 2, 64, 2, {200, L}, {1, 1}, 1},
        /* speculative decode (3 tokens × GQA 4 = 12 rows), prefill over a cached prefix (multi-block items) */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 16, 8, 2, 128, 2, {L, 200}, {3, 40}, 3},
        {ATTN_DTYPE_F32, ATTN_DTYPE_F32, 16, 4, 2, 256, 1, {90}, {70}, 0},
        /* bf16 items that mix a few-row block with 32-row blocks (prefill 41 tokens × GQA 4; 5 tokens × GQA 8) */
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 8, 8, 2, 64, 1, {100}, {41}, 0},
        {ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 16, 8, 1, 64, 2, {L, 30}, {5, 1}, 2},
        /* fp8 pages (gathered), head sizes off 16, block size 1 */
        {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32, 16, 8, 2, 128, 2, {L, 17}, {1, 1}, 1},
        {ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_BF16, 32, 8, 8, 64, 1, {L}, {1}, 0},
        {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 1, 6, 3, 40, 2, {45, 3}, {1, 2}, 2},
    };
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pk_setup s;
        pk_build(&cases[i], 500 + i, &s);
        pk_check(ctx, &cases[i], &s, &s.tkc, i % 3 == 0);
        if (i % 4 == 1) { /* the key cache in row layout (the kv_cache's key half) through the same entry */
            attn_tensor rows = s.tvc;
            rows.data = s.cache;
            pk_check(ctx, &cases[i], &s, &rows, 0);
        }
        pk_free(&s);
    }
    attn_ctx_destroy(ctx);
}

/* The write: key elements where the one-cache write puts them (transposed), values in place, the same codes. */
static void test_write(void **state) {
    (void)state;
    const attn_dtype caches[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16, ATTN_DTYPE_FP8_E4M3,
                                 ATTN_DTYPE_FP8_E5M2};
    const int64_t nb = 6, bs = 16, Hk = 3, D = 40, T = 21;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    for (int ci = 0; ci < 5; ci++) {
        const attn_dtype cd = caches[ci], in = ci % 2 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
        const size_t es = attn_dtype_size(cd), half = (size_t)(nb * bs * Hk * D);
        th_rng r;
        th_rng_seed(&r, 900 + (uint64_t)ci);
        void *key = th_alloc_fill(&r, in, (size_t)(T * Hk * D), -3, 3),
             *value = th_alloc_fill(&r, in, (size_t)(T * Hk * D), -3, 3);
        int64_t slots[21];
        for (int64_t t = 0; t < T; t++)
            slots[t] = t % 5 == 4 ? -1 : (t * 7) % (nb * bs);
        unsigned char *one = calloc(2 * half, es), *kc = calloc(half, es), *vc = calloc(half, es);
        int64_t rs[3] = {T, Hk, D}, ss[1] = {T}, cs5[5] = {2, nb, bs, Hk, D}, hs[4] = {nb, bs, Hk, D};
        attn_tensor tk = attn_tensor_make(key, in, 3, rs), tv = attn_tensor_make(value, in, 3, rs);
        attn_tensor tsl = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss), tone = attn_tensor_make(one, cd, 5, cs5);
        attn_tensor tkc = attn_tensor_make(kc, cd, 4, hs), tvc = attn_tensor_make(vc, cd, 4, hs);
        tkc.strides[0] = Hk * D * bs, tkc.strides[1] = 1, tkc.strides[2] = D * bs, tkc.strides[3] = bs;
        attn_cache_write_options o;
        attn_cache_write_options_init(&o);
        o.k_scale = 0.5f, o.v_scale = 2.0f;
        assert_int_equal(attn_reshape_and_cache_ex(ctx, &tk, &tv, &tone, &tsl, &o), ATTN_STATUS_OK);
        assert_int_equal(attn_reshape_and_cache_kv(ctx, &tk, &tv, &tkc, &tvc, &tsl, &o), ATTN_STATUS_OK);
        for (int64_t b = 0; b < nb; b++)
            for (int64_t t = 0; t < bs; t++)
                for (int64_t g = 0; g < Hk; g++)
                    for (int64_t d = 0; d < D; d++) {
                        const size_t row = (size_t)(((b * bs + t) * Hk + g) * D + d);
                        const size_t col = (size_t)(((b * Hk + g) * D + d) * bs + t);
                        if (memcmp(one + row * es, kc + col * es, es) ||
                            memcmp(one + (half + row) * es, vc + row * es, es)) {
                            fprintf(stderr,
                                    "REPRO test_paged_kv write: cache %s block %lld token %lld head %lld dim %lld\n",
                                    attn_dtype_name(cd), (long long)b, (long long)t, (long long)g, (long long)d);
                            fail();
                        }
                    }
        free(key), free(value), free(one), free(kc), free(vc);
    }
    attn_ctx_destroy(ctx);
}

static void expect_error(attn_status got, attn_status want, const char *needle) {
    assert_int_equal(got, want);
    if (!strstr(attn_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not name '%s'\n", attn_last_error(), needle);
        fail();
    }
}

/* Bad views name the argument; the write writes nothing when refused. */
static void test_validation(void **state) {
    (void)state;
    const int64_t nb = 4, bs = 16, Hk = 2, D = 32, T = 3, H = 4;
    float *kc = calloc((size_t)(nb * bs * Hk * D), 4), *vc = calloc((size_t)(nb * bs * Hk * D), 4);
    float key[3 * 2 * 32], value[3 * 2 * 32], q[3 * 4 * 32], out[3 * 4 * 32];
    for (int i = 0; i < 3 * 2 * 32; i++)
        key[i] = value[i] = 1.0f;
    for (int i = 0; i < 3 * 4 * 32; i++)
        q[i] = 0.5f;
    int64_t slots[3] = {0, 1, 2};
    int32_t qsl[2] = {0, 3}, sl[1] = {3}, bt[1] = {1};
    int64_t hs[4] = {nb, bs, Hk, D}, rs[3] = {T, Hk, D}, ss[1] = {T}, qs[3] = {T, H, D}, one[1] = {2}, r1[1] = {1},
            b2[2] = {1, 1};
    attn_tensor tkc = attn_tensor_make(kc, ATTN_DTYPE_F32, 4, hs), tvc = attn_tensor_make(vc, ATTN_DTYPE_F32, 4, hs);
    tkc.strides[0] = Hk * D * bs, tkc.strides[1] = 1, tkc.strides[2] = D * bs, tkc.strides[3] = bs;
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, rs), tv = attn_tensor_make(value, ATTN_DTYPE_F32, 3, rs);
    attn_tensor tsl = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), to = attn_tensor_make(out, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one),
                tsls = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, r1);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, b2);
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    attn_params prm;
    attn_params_init(&prm);
    expect_error(attn_paged_attention_kv(ctx, &tq, &tkc, NULL, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "value_cache");
    attn_tensor bad = tvc;
    bad.strides[3] = 2, bad.strides[2] = 2 * D;
    expect_error(attn_paged_attention_kv(ctx, &tq, &tkc, &bad, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "value_cache");
    bad = tvc, bad.dtype = ATTN_DTYPE_BF16;
    expect_error(attn_paged_attention_kv(ctx, &tq, &tkc, &bad, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "value_cache");
    bad = tvc, bad.shape[1] = 8;
    expect_error(attn_paged_attention_kv(ctx, &tq, &tkc, &bad, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "value_cache");
    bad = tkc, bad.strides[3] = 0; /* every head dimension of a key at one address */
    expect_error(attn_paged_attention_kv(ctx, &tq, &bad, &tvc, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "key_cache");
    expect_error(attn_ref_paged_attention_kv(&tq, &bad, &tvc, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "key_cache");
    bad = tkc, bad.ndim = 3;
    expect_error(attn_paged_attention_kv(ctx, &tq, &bad, &tvc, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "key_cache");
    bt[0] = 4; /* block id past num_blocks */
    expect_error(attn_paged_attention_kv(ctx, &tq, &tkc, &tvc, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                 ATTN_STATUS_INVALID_ARGUMENT, "block_table");
    bt[0] = 1;
    /* writes: a key cache whose blocks share memory, caches that meet, the notify callback */
    bad = tkc, bad.strides[0] = 0;
    expect_error(attn_reshape_and_cache_kv(ctx, &tk, &tv, &bad, &tvc, &tsl, NULL), ATTN_STATUS_INVALID_ARGUMENT,
                 "key_cache");
    expect_error(attn_reshape_and_cache_kv(ctx, &tk, &tv, &tvc, &tvc, &tsl, NULL), ATTN_STATUS_INVALID_ARGUMENT,
                 "value_cache");
    slots[2] = nb * bs; /* a slot past the cache */
    expect_error(attn_reshape_and_cache_kv(ctx, &tk, &tv, &tkc, &tvc, &tsl, NULL), ATTN_STATUS_INVALID_ARGUMENT,
                 "slot_mapping");
    slots[2] = 2;
    for (int64_t i = 0; i < nb * bs * Hk * D; i++)
        assert_true(kc[i] == 0.0f && vc[i] == 0.0f);
    assert_int_equal(attn_reshape_and_cache_kv(ctx, &tk, &tv, &tkc, &tvc, &tsl, NULL), ATTN_STATUS_OK);
    /* tokens 0..2 of block 0: key dimension d of token t at d·block_size + t, values as rows */
    assert_true(kc[0] == 1.0f && kc[2] == 1.0f && kc[3] == 0.0f && kc[bs] == 1.0f && kc[bs + 3] == 0.0f);
    assert_true(vc[0] == 1.0f && vc[3 * Hk * D - 1] == 1.0f && vc[3 * Hk * D] == 0.0f);
    bt[0] = 0;
    assert_int_equal(attn_paged_attention_kv(ctx, &tq, &tkc, &tvc, &tqsl, &tsls, &tbt, &prm, &to, NULL),
                     ATTN_STATUS_OK);
    for (int i = 0; i < 3 * 4 * 32; i++)
        assert_true(out[i] == 1.0f); /* every value row is 1 */
    attn_ctx_destroy(ctx);
    free(kc), free(vc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_cache_by_dimension),
        cmocka_unit_test(test_write),
        cmocka_unit_test(test_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
