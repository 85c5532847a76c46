/*
 * test_cache.c — the paged KV cache ops: reshape_and_cache writes exactly the target slots
 * (canary bytes everywhere else unchanged, compared with the literal reference), slot −1 writes nothing,
 * f32 → bf16/f16 conversion, every pair of f32 / bf16 / f16 row and cache dtypes element by element (specials
 * included), int32 slot mappings, strided cache views, key and value caches as two allocations (a negative
 * strides[0]); copy_blocks / swap_blocks move whole
 * blocks, swap_blocks_bytes raw blocks of any size between views of any dtype; every bad slot / block id / geometry
 * is rejected with the argument named and nothing written.
 * attn_kv_cache_alloc: the view's shape and strides, zero contents, 2 MiB alignment (and, on Linux where THP
 * advice works, the "hg" flag of the mapping in /proc/self/smaps) for caches >= 2 MiB, 64-byte alignment
 * below, a write through it; bad arguments name themselves and leave *cache untouched.
 */
#define _DEFAULT_SOURCE /* madvise in <sys/mman.h> */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#include <cmocka.h>

#include "harness.h"
#include "ref/ref.h"

#define NB 6
#define BS 4
#define HK 2
#define D 8
#define CACHE_N (2 * NB * BS * HK * D)

static void test_reshape_and_cache_canary(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int di = 0; di < 3; di++) {
        const attn_dtype dt = dts[di];
        const size_t es = attn_dtype_size(dt);
        th_rng rng;
        th_rng_seed(&rng, 11 + (uint64_t)di);
        const int64_t T = 5;
        float *key = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -3, 3);
        float *value = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -3, 3);
        int64_t slots[5] = {9, -1, 0, 23, 14};
        void *cache = malloc(CACHE_N * es), *expect = malloc(CACHE_N * es);
        memset(cache, 0xA5, CACHE_N * es);
        memset(expect, 0xA5, CACHE_N * es);
        int64_t cs[5] = {2, NB, BS, HK, D}, ks[3] = {T, HK, D}, ss[1] = {T};
        attn_tensor tc = attn_tensor_make(cache, dt, 5, cs);
        attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, ks), tv = attn_tensor_make(value, ATTN_DTYPE_F32, 3, ks);
        attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
        assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
        attn_ref_reshape_and_cache(key, value, T, HK, D, slots, expect, dt, NB, BS);
        assert_memory_equal(cache, expect, CACHE_N * es); /* targets written, every other byte untouched */
        /* the value of token 3 (slot 23 = block 5, row 3), head 1, d 2 is the RNE conversion */
        const size_t idx = (size_t)((((1 * NB + 5) * BS + 3) * HK + 1) * D + 2);
        assert_true(th_get(cache, dt, idx) == th_get(expect, dt, idx));
        float x = value[(3 * HK + 1) * D + 2];
        void *one = malloc(es);
        th_set(one, dt, 0, x);
        assert_memory_equal((char *)cache + idx * es, one, es);
        free(one);

        /* an out-of-range slot anywhere: error naming the entry, nothing written */
        memcpy(expect, cache, CACHE_N * es);
        slots[4] = NB * BS;
        slots[0] = 1;
        assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "slot_mapping: entry 4 = 24 >= num_blocks·block_size = 24"));
        assert_memory_equal(cache, expect, CACHE_N * es);
        free(key), free(value), free(cache), free(expect);
    }
    attn_ctx_destroy(ctx);
}

/* key/value rows of one dtype into a cache of another (f32, bf16, f16 each way), head_size 40 (full vectors and a
 * tail): every element is the scalar conversion of core/dtype.h (exact widening, round to nearest even, NaN
 * kept quiet), specials included (NaN, ±inf, −0, an f32 subnormal, bf16 and f16 ties, f16 overflow). */
static void test_reshape_and_cache_convert(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    enum { T = 3, DC = 40 };
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const float specials[8] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-40f, 1.00390625f, 1.00048828125f, 65520.0f};
    th_rng rng;
    th_rng_seed(&rng, 5);
    int combos = 0;
    for (int si = 0; si < 3; si++)
        for (int ci = 0; ci < 3; ci++) {
            if (si == ci)
                continue;
            const attn_dtype sdt = dts[si], cdt = dts[ci];
            const size_t ses = attn_dtype_size(sdt), ces = attn_dtype_size(cdt), n = (size_t)(T * HK * DC);
            const size_t cn = (size_t)(2 * NB * BS * HK * DC);
            char *key = malloc(n * ses), *value = malloc(n * ses), *cache = malloc(cn * ces),
                 *expect = malloc(cn * ces);
            for (size_t i = 0; i < n; i++) {
                const float x = i % 11 < 8 && i % 3 == 0 ? specials[i % 8] : (float)th_rng_range(&rng, -70000, 70000);
                th_set(key, sdt, i, x);
                th_set(value, sdt, i, -x);
            }
            memset(cache, 0x5A, cn * ces);
            memset(expect, 0x5A, cn * ces);
            int64_t slots[T] = {7, 0, 22};
            for (int t = 0; t < T; t++)
                for (int kv = 0; kv < 2; kv++)
                    for (int64_t e = 0; e < HK * DC; e++) { /* row-major [2][NB·BS][HK][DC] */
                        const size_t src_i = (size_t)(t * HK * DC + e);
                        const float x = th_get(kv ? value : key, sdt, src_i);
                        th_set(expect, cdt, (size_t)((kv * NB * BS + slots[t]) * HK * DC + e), x);
                    }
            int64_t cs[5] = {2, NB, BS, HK, DC}, ks[3] = {T, HK, DC}, ss[1] = {T};
            attn_tensor tc = attn_tensor_make(cache, cdt, 5, cs), ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
            attn_tensor tk = attn_tensor_make(key, sdt, 3, ks), tv = attn_tensor_make(value, sdt, 3, ks);
            assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
            if (memcmp(cache, expect, cn * ces) != 0)
                for (size_t i = 0; i < cn; i++)
                    if (memcmp(cache + i * ces, expect + i * ces, ces) != 0) {
                        fprintf(stderr, "REPRO test_cache convert: %d -> %d element %zu: %.9g vs %.9g\n", (int)sdt,
                                (int)cdt, i, (double)th_get(cache, cdt, i), (double)th_get(expect, cdt, i));
                        fail();
                    }
            free(key), free(value), free(cache), free(expect);
            combos++;
        }
    assert_int_equal(combos, 6);
    attn_ctx_destroy(ctx);
}

/* int32 slots, a slot mapping shorter than key (padded rows ignored), and a strided cache view whose
 * blocks are padded (the pad bytes must stay untouched). */
static void test_reshape_int32_strided(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 3);
    const int64_t T = 4;
    float *key = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -1, 1);
    float *value = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -1, 1);
    const int64_t row_pad = HK * D + 3, block_pad = BS * row_pad + 5, total = 2 * NB * block_pad;
    float *buf = (float *)malloc((size_t)total * sizeof(float));
    for (int64_t i = 0; i < total; i++) buf[i] = -777.0f;
    attn_tensor tc;
    memset(&tc, 0, sizeof tc);
    tc.data = buf, tc.dtype = ATTN_DTYPE_F32, tc.ndim = 5;
    const int64_t shp[5] = {2, NB, BS, HK, D}, str[5] = {NB * block_pad, block_pad, row_pad, D, 1};
    memcpy(tc.shape, shp, sizeof shp), memcpy(tc.strides, str, sizeof str);
    int32_t slots[3] = {5, -1, 22};
    int64_t ks[3] = {T, HK, D}, ss[1] = {3};
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, ks), tv = attn_tensor_make(value, ATTN_DTYPE_F32, 3, ks);
    attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I32, 1, ss);
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
    int64_t written = 0;
    for (int64_t i = 0; i < total; i++) written += buf[i] != -777.0f;
    assert_int_equal(written, 2 * 2 * HK * D); /* two tokens, key and value */
    for (int64_t g = 0; g < HK; g++)
        for (int64_t d = 0; d < D; d++) {
            assert_true(buf[1 * block_pad + 1 * row_pad + g * D + d] == key[(0 * HK + g) * D + d]);          /* slot 5 */
            assert_true(buf[NB * block_pad + 5 * block_pad + 2 * row_pad + g * D + d] == value[(2 * HK + g) * D + d]); /* 22 */
        }
    free(key), free(value), free(buf);
    attn_ctx_destroy(ctx);
}

/* The key and value caches as two allocations, value below key (kv_cache strides[0] < 0, as flash-attn's separate
 * k_cache / v_cache): reshape_and_cache writes both where a joint [2, ...] cache has them and nothing in the gap
 * between; copy_blocks moves both halves; plan-less paged attention gives the joint cache's bits, with out
 * allowed in the gap and refused on the value half; a stride reaching below address 0 or INT64_MIN is refused. */
static void test_separate_key_value_caches(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 17);
    const int64_t half = NB * BS * HK * D, gap = 64, T = 10, H = 4;
    float *key = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -2, 2);
    float *value = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(T * HK * D), -2, 2);
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(2 * H * D), -2, 2);
    /* buf: [value half | gap | key half]; joint: [key half | value half] */
    float *buf = (float *)malloc((size_t)(2 * half + gap) * sizeof(float));
    float *joint = (float *)malloc((size_t)(2 * half) * sizeof(float));
    for (int64_t i = 0; i < 2 * half + gap; i++)
        buf[i] = -777.0f;
    for (int64_t i = 0; i < 2 * half; i++)
        joint[i] = -777.0f;
    int64_t cs[5] = {2, NB, BS, HK, D}, ks[3] = {T, HK, D}, ss[1] = {T};
    attn_tensor tj = attn_tensor_make(joint, ATTN_DTYPE_F32, 5, cs);
    attn_tensor tc = attn_tensor_make(buf + half + gap, ATTN_DTYPE_F32, 5, cs);
    tc.strides[0] = -(half + gap);
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, ks), tv = attn_tensor_make(value, ATTN_DTYPE_F32, 3, ks);
    int64_t slots[10] = {4, 5, 6, 7, 16, 17, 18, 19, 20, 21}; /* blocks 1, 4 and the first half of 5 */
    attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tj, &ts), ATTN_STATUS_OK);
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
    assert_memory_equal(buf + half + gap, joint, (size_t)half * sizeof(float)); /* keys */
    assert_memory_equal(buf, joint + half, (size_t)half * sizeof(float));       /* values */
    for (int64_t i = 0; i < gap; i++)
        assert_true(buf[half + i] == -777.0f);

    /* copy_blocks: block 1 -> 2 in both halves */
    int64_t map[1][2] = {{1, 2}}, ms[2] = {1, 2};
    attn_tensor tm = attn_tensor_make(map, ATTN_DTYPE_I64, 2, ms);
    assert_int_equal(attn_copy_blocks(ctx, &tj, &tm), ATTN_STATUS_OK);
    assert_int_equal(attn_copy_blocks(ctx, &tc, &tm), ATTN_STATUS_OK);
    assert_memory_equal(buf + half + gap, joint, (size_t)half * sizeof(float));
    assert_memory_equal(buf, joint + half, (size_t)half * sizeof(float));

    /* one decode token over 10 keys (blocks 2, 4, 5) and a 1-token request over 3 keys (block 1) */
    int32_t qsl[3] = {0, 1, 2}, sl[2] = {10, 3}, bt[2][3] = {{2, 4, 5}, {1, 0, 0}};
    int64_t qs[3] = {2, H, D}, qls[1] = {3}, sls[1] = {2}, bts[2] = {2, 3};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, qls);
    attn_tensor tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, sls), tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bts);
    attn_params p;
    attn_params_init(&p);
    float *o_joint = (float *)calloc((size_t)(2 * H * D), sizeof(float));
    attn_tensor toj = attn_tensor_make(o_joint, ATTN_DTYPE_F32, 3, qs);
    assert_int_equal(attn_paged_attention(ctx, &tq, &tj, &tqsl, &tsl, &tbt, &p, &toj, NULL), ATTN_STATUS_OK);
    assert_true(gap >= 2 * H * D);
    attn_tensor tog = attn_tensor_make(buf + half, ATTN_DTYPE_F32, 3, qs); /* out in the gap: no overlap */
    assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &p, &tog, NULL), ATTN_STATUS_OK);
    assert_memory_equal(buf + half, o_joint, (size_t)(2 * H * D) * sizeof(float));
    float *values = (float *)malloc((size_t)half * sizeof(float));
    memcpy(values, buf, (size_t)half * sizeof(float));
    attn_tensor tov = attn_tensor_make(buf + 8, ATTN_DTYPE_F32, 3, qs); /* on the value half */
    assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &p, &tov, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "out: overlaps kv_cache in memory"));
    assert_memory_equal(buf, values, (size_t)half * sizeof(float));

    /* strides[0] reaching below address 0, and INT64_MIN: refused by name */
    attn_tensor low = tc;
    low.data = (void *)(uintptr_t)64;
    low.strides[0] = -1000;
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &low, &ts), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "kv_cache: strides[0]=-1000 reaches below address 0"));
    low = tc;
    low.strides[0] = INT64_MIN;
    assert_int_equal(attn_paged_attention(ctx, &tq, &low, &tqsl, &tsl, &tbt, &p, &toj, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "kv_cache: strides[0]="));
    assert_non_null(strstr(attn_last_error(), "is negative"));
    free(key), free(value), free(q), free(buf), free(joint), free(o_joint), free(values);
    attn_ctx_destroy(ctx);
}

/* A plan whose decode needs a split-KV workspace reads a value-below-key cache as the joint one, bitwise, with
 * the workspace lying in the gap between the caches (not an overlap) and refused on the value cache. */
static void test_separate_caches_plan_workspace(void **state) {
    (void)state;
    enum { PNB = 128, PBS = 16, PHK = 2, PD = 64, PH = 4, L = 1500 };
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 23);
    const int64_t half = (int64_t)PNB * PBS * PHK * PD, gap = 4096;
    float *joint = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(2 * half), -2, 2);
    float *split = (float *)aligned_alloc(64, (size_t)(2 * half + gap) * sizeof(float));
    memcpy(split + half + gap, joint, (size_t)half * sizeof(float)); /* keys above */
    memcpy(split, joint + half, (size_t)half * sizeof(float));       /* values below */
    int64_t cs[5] = {2, PNB, PBS, PHK, PD};
    attn_tensor tj = attn_tensor_make(joint, ATTN_DTYPE_F32, 5, cs);
    attn_tensor tc = attn_tensor_make(split + half + gap, ATTN_DTYPE_F32, 5, cs);
    tc.strides[0] = -(half + gap);
    int32_t ids[PNB];
    for (int i = 0; i < PNB; i++)
        ids[i] = (i * 37 + 5) % PNB;
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = PNB, cfg.block_size = PBS, cfg.num_heads = PH, cfg.num_kv_heads = PHK, cfg.head_size = PD;
    cfg.max_blocks_per_req = PNB;
    attn_request rq;
    memset(&rq, 0, sizeof rq);
    rq.num_computed_tokens = L - 1, rq.num_scheduled_tokens = 1, rq.block_ids = ids,
    rq.num_block_ids = (L + PBS - 1) / PBS;
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, &rq, 1, &plan), ATTN_STATUS_OK);
    const size_t ws = attn_plan_workspace_size(plan);
    assert_true(ws > 0 && ws <= (size_t)gap * sizeof(float));
    float *w = (float *)aligned_alloc(64, (ws + 63) / 64 * 64);
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, PH * PD, -2, 2), oj[PH * PD], oc[PH * PD];
    int64_t qs[3] = {1, PH, PD};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), toj = attn_tensor_make(oj, ATTN_DTYPE_F32, 3, qs);
    attn_tensor toc = attn_tensor_make(oc, ATTN_DTYPE_F32, 3, qs);
    attn_params p;
    attn_params_init(&p);
    p.causal = 1;
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tj, &p, &toj, NULL, w, ws), ATTN_STATUS_OK);
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tc, &p, &toc, NULL, w, ws), ATTN_STATUS_OK);
    assert_memory_equal(oj, oc, sizeof oj);
    memset(oc, 0, sizeof oc);
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tc, &p, &toc, NULL, split + half, ws),
                     ATTN_STATUS_OK); /* the workspace in the gap */
    assert_memory_equal(oj, oc, sizeof oj);
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, NULL, NULL, &tc, &p, &toc, NULL, split + 64, ws),
                     ATTN_STATUS_INVALID_ARGUMENT); /* on the value cache */
    assert_non_null(strstr(attn_last_error(), "workspace: overlaps kv_cache in memory"));
    attn_plan_free(plan);
    free(joint), free(split), free(w), free(q);
    attn_ctx_destroy(ctx);
}

static void test_copy_and_swap_blocks(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 5);
    const int64_t blk = BS * HK * D; /* floats per block per kv half */
    float *cache = th_alloc_fill(&rng, ATTN_DTYPE_F32, CACHE_N, -1, 1);
    float *orig = (float *)malloc(CACHE_N * sizeof(float));
    memcpy(orig, cache, CACHE_N * sizeof(float));
    int64_t cs[5] = {2, NB, BS, HK, D}, ms[2] = {2, 2};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, cs);
    int64_t map[2][2] = {{1, 4}, {5, 0}};
    attn_tensor tm = attn_tensor_make(map, ATTN_DTYPE_I64, 2, ms);
    assert_int_equal(attn_copy_blocks(ctx, &tc, &tm), ATTN_STATUS_OK);
    for (int kv = 0; kv < 2; kv++)
        for (int b = 0; b < NB; b++) {
            const int src = b == 4 ? 1 : b == 0 ? 5 : b;
            assert_memory_equal(cache + (kv * NB + b) * blk, orig + (kv * NB + src) * blk, (size_t)blk * sizeof(float));
        }
    /* a bad id (in the second pair) is reported and nothing is copied */
    memcpy(orig, cache, CACHE_N * sizeof(float));
    int32_t bad[2][2] = {{0, 1}, {2, NB}};
    attn_tensor tb = attn_tensor_make(bad, ATTN_DTYPE_I32, 2, ms);
    assert_int_equal(attn_copy_blocks(ctx, &tc, &tb), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "block_mapping: entry [1][1] = 6 is outside [0, num_blocks=6)"));
    assert_memory_equal(cache, orig, CACHE_N * sizeof(float));

    /* swap to a smaller "host pool" with 3 blocks: ids checked against each cache */
    const int64_t hn = 2 * 3 * blk;
    float *host = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)hn, 9, 9);
    int64_t hs[5] = {2, 3, BS, HK, D};
    attn_tensor th = attn_tensor_make(host, ATTN_DTYPE_F32, 5, hs);
    int64_t out_map[2][2] = {{5, 2}, {0, 0}};
    attn_tensor tom = attn_tensor_make(out_map, ATTN_DTYPE_I64, 2, ms);
    assert_int_equal(attn_swap_blocks(ctx, &tc, &th, &tom), ATTN_STATUS_OK);
    for (int kv = 0; kv < 2; kv++) {
        assert_memory_equal(host + (kv * 3 + 2) * blk, cache + (kv * NB + 5) * blk, (size_t)blk * sizeof(float));
        assert_memory_equal(host + (kv * 3 + 0) * blk, cache + (kv * NB + 0) * blk, (size_t)blk * sizeof(float));
        for (int64_t i = 0; i < blk; i++) assert_true(host[(kv * 3 + 1) * blk + i] == 9.0f);
    }
    int64_t bad_dst[2][2] = {{0, 0}, {1, 3}}; /* dst 3 is valid for the device cache but not the host pool */
    attn_tensor tbd = attn_tensor_make(bad_dst, ATTN_DTYPE_I64, 2, ms);
    float *host_before = (float *)malloc((size_t)hn * sizeof(float));
    memcpy(host_before, host, (size_t)hn * sizeof(float));
    assert_int_equal(attn_swap_blocks(ctx, &tc, &th, &tbd), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "entry [1][1] = 3 is outside [0, num_blocks=3) of dst_cache"));
    assert_memory_equal(host, host_before, (size_t)hn * sizeof(float));
    /* mismatched geometry and dtype */
    int64_t hs_bad[5] = {2, 3, BS * 2, HK, D / 2};
    attn_tensor thb = attn_tensor_make(host, ATTN_DTYPE_F32, 5, hs_bad);
    assert_int_equal(attn_swap_blocks(ctx, &tc, &thb, &tom), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dst_cache: shape[2]"));
    attn_tensor thd = attn_tensor_make(host, ATTN_DTYPE_BF16, 5, hs);
    assert_int_equal(attn_swap_blocks(ctx, &tc, &thd, &tom), ATTN_STATUS_INVALID_ARGUMENT);
    /* a cache that is not [2, ...] */
    int64_t cs_bad[5] = {3, 2, BS, HK, D};
    attn_tensor tcb = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, cs_bad);
    assert_int_equal(attn_copy_blocks(ctx, &tcb, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "kv_cache: shape[0]=3, expected 2"));
    assert_int_equal(attn_copy_blocks(NULL, &tc, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    free(cache), free(orig), free(host), free(host_before);
    attn_ctx_destroy(ctx);
}

/* attn_swap_blocks_bytes: blocks of any byte size between views of any dtype, pairs in order (also within one
 * buffer), a strided view's span, bad ids / sizes / an overlapped block_mapping refused with nothing written. */
static void test_swap_blocks_bytes(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    uint8_t src[6 * 24], dst[4 * 24 + 5], want[sizeof dst], before[sizeof dst];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    memset(dst, 0xEE, sizeof dst);
    /* src as f32 [6, 6] (24-byte blocks), dst as u8 [101]: its last 5 bytes are no whole block */
    int64_t ss[2] = {6, 6}, ds[1] = {(int64_t)sizeof dst}, ms[2] = {3, 2};
    attn_tensor ts = attn_tensor_make(src, ATTN_DTYPE_F32, 2, ss), td = attn_tensor_make(dst, ATTN_DTYPE_U8, 1, ds);
    int64_t map[3][2] = {{5, 0}, {2, 3}, {1, 0}}; /* dst block 0 twice: the later pair wins */
    attn_tensor tm = attn_tensor_make(map, ATTN_DTYPE_I64, 2, ms);
    memcpy(want, dst, sizeof dst);
    memcpy(want + 3 * 24, src + 2 * 24, 24);
    memcpy(want, src + 1 * 24, 24);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &td, 24, &tm), ATTN_STATUS_OK);
    assert_memory_equal(dst, want, sizeof dst);
    /* refused, nothing written: dst id 4 (4 whole blocks), src id 6, size 0, mapping over dst */
    memcpy(before, dst, sizeof dst);
    int64_t bad[3][2] = {{0, 1}, {1, 4}, {0, 0}};
    attn_tensor tb = attn_tensor_make(bad, ATTN_DTYPE_I64, 2, ms);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &td, 24, &tb), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "entry [1][1] = 4 is outside [0, num_blocks=4) of dst (101 bytes"));
    bad[1][1] = 0, bad[2][0] = 6;
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &td, 24, &tb), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "entry [2][0] = 6 is outside [0, num_blocks=6) of src (144 bytes"));
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &td, 0, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "block_size_in_bytes: 0"));
    assert_memory_equal(dst, before, sizeof dst);
    uint8_t dst2[48] = {0}; /* its first 8 bytes read as the pair (0, 0) */
    int64_t d2s[1] = {48}, ov[2] = {1, 2};
    attn_tensor td2 = attn_tensor_make(dst2, ATTN_DTYPE_U8, 1, d2s),
                tov = attn_tensor_make(dst2, ATTN_DTYPE_I32, 2, ov);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &td2, 24, &tov), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dst: overlaps block_mapping"));
    for (int i = 0; i < 48; i++)
        assert_int_equal(dst2[i], 0);
    /* one buffer as src and dst: block 1 <- 0, then block 2 <- 1 reads the block the first pair wrote */
    uint8_t one[3 * 8];
    for (int i = 0; i < 24; i++)
        one[i] = (uint8_t)i;
    int64_t os[1] = {24}, chain[2][2] = {{0, 1}, {1, 2}}, cs[2] = {2, 2};
    attn_tensor to = attn_tensor_make(one, ATTN_DTYPE_U8, 1, os), tc = attn_tensor_make(chain, ATTN_DTYPE_I64, 2, cs);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &to, &to, 8, &tc), ATTN_STATUS_OK);
    for (int i = 0; i < 24; i++)
        assert_int_equal(one[i], i % 8);
    /* a strided view spans from its first byte to the end of its last element: every other f32 of src[0..5] */
    int64_t sh[1] = {3};
    attn_tensor tstr = attn_tensor_make(src, ATTN_DTYPE_F32, 1, sh);
    tstr.strides[0] = 2;
    int64_t last[1][2] = {{4, 0}}, ls[2] = {1, 2};
    attn_tensor tl = attn_tensor_make(last, ATTN_DTYPE_I64, 2, ls);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &tstr, &td, 4, &tl), ATTN_STATUS_OK); /* bytes 16..19 */
    assert_memory_equal(dst, src + 16, 4);
    last[0][0] = 5; /* 20 bytes: 5 blocks of 4, ids 0..4 */
    assert_int_equal(attn_swap_blocks_bytes(ctx, &tstr, &td, 4, &tl), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_swap_blocks_bytes(NULL, &ts, &td, 24, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    /* a [2, 64] dst with a gap between its rows is every byte of its span: a mapping in the gap is refused (the
     * first pair would overwrite the second one's ids after they were checked) */
    uint8_t gap[192] = {0};
    int64_t *gm = (int64_t *)(void *)(gap + 64), gs[2] = {2, 64}, g_src[4] = {1000000000LL, 0, 0, 0}, g4[1] = {4};
    gm[1] = 10; /* pairs (0, 10), (0, 0): pair 0 writes bytes 80..87, gm[2] */
    attn_tensor tg = attn_tensor_make(gap, ATTN_DTYPE_U8, 2, gs), tgs = attn_tensor_make(g_src, ATTN_DTYPE_I64, 1, g4);
    tg.strides[0] = 128;
    attn_tensor tgm = attn_tensor_make(gm, ATTN_DTYPE_I64, 2, ms);
    tgm.shape[0] = 2;
    assert_int_equal(attn_swap_blocks_bytes(ctx, &tgs, &tg, 8, &tgm), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dst: overlaps block_mapping"));
    assert_int_equal(gm[1], 10);
    assert_int_equal(gm[2], 0);
    /* packed FP4 views have no byte per element: refused, not read as twice their size */
    int64_t f16[1] = {16};
    attn_tensor tf = attn_tensor_make(one, ATTN_DTYPE_FP4_E2M1, 1, f16);
    assert_int_equal(attn_swap_blocks_bytes(ctx, &tf, &td, 8, &tl), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "src: dtype"));
    assert_int_equal(attn_swap_blocks_bytes(ctx, &ts, &tf, 8, &tl), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dst: dtype"));
    attn_ctx_destroy(ctx);
}

#if defined(__linux__)
/* 1 if the mapping holding p has VmFlags "hg" (MADV_HUGEPAGE) in /proc/self/smaps, 0 if not, -1 unknown. */
static int smaps_has_hg(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int inside = 0, found = -1;
    const uintptr_t a = (uintptr_t)p;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a >= lo && a < hi;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            found = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}
#endif

static void test_kv_cache_alloc(void **state) {
    (void)state;
    /* 2·64·16·8·128 bf16 = 4 MiB: huge-page path */
    attn_tensor c;
    memset(&c, 0, sizeof c);
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_BF16, 64, 16, 8, 128, &c), ATTN_STATUS_OK);
    assert_non_null(c.data);
    assert_int_equal(c.dtype, ATTN_DTYPE_BF16);
    assert_int_equal(c.ndim, 5);
    const int64_t shape[5] = {2, 64, 16, 8, 128}, strides[5] = {64 * 16 * 8 * 128, 16 * 8 * 128, 8 * 128, 128, 1};
    for (int i = 0; i < 5; i++)
        assert_int_equal(c.shape[i], shape[i]), assert_int_equal(c.strides[i], strides[i]);
    assert_int_equal((uintptr_t)c.data % ((uintptr_t)2 << 20), 0);
    const uint16_t *h = (const uint16_t *)c.data;
    for (size_t i = 0; i < (size_t)2 * 64 * 16 * 8 * 128; i += 997)
        assert_int_equal(h[i], 0);
    assert_int_equal(h[(size_t)2 * 64 * 16 * 8 * 128 - 1], 0);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    { /* the advice is best effort: assert it only where this kernel takes it on a mapping of our own */
        void *probe = mmap(NULL, (size_t)4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(probe != MAP_FAILED);
        const int thp = madvise(probe, (size_t)4 << 20, MADV_HUGEPAGE) == 0 && smaps_has_hg(probe) == 1;
        munmap(probe, (size_t)4 << 20);
        fprintf(stderr, "test_cache: MADV_HUGEPAGE %s here\n", thp ? "accepted" : "not available");
        if (thp)
            assert_int_equal(smaps_has_hg(c.data), 1);
    }
#endif
    /* the cache works with the cache entries: one token written */
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float key[8 * 128];
    for (int i = 0; i < 8 * 128; i++)
        key[i] = (float)i;
    int64_t slot = 17, ks[3] = {1, 8, 128}, ss[1] = {1};
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, ks), ts = attn_tensor_make(&slot, ATTN_DTYPE_I64, 1, ss);
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tk, &c, &ts), ATTN_STATUS_OK);
    assert_int_equal(h[17 * 8 * 128 + 5], 0x40a0); /* bf16 5.0 */
    attn_kv_cache_free(&c);
    assert_null(c.data);
    attn_kv_cache_free(&c); /* data NULL: nothing */
    attn_kv_cache_free(NULL);
    /* small (96 bytes), fp8: 64-byte aligned */
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_FP8_E4M3, 3, 2, 1, 8, &c), ATTN_STATUS_OK);
    assert_int_equal((uintptr_t)c.data % 64, 0);
    for (int i = 0; i < 96; i++)
        assert_int_equal(((const uint8_t *)c.data)[i], 0);
    attn_kv_cache_free(&c);
    /* bad arguments: named, *cache untouched */
    attn_tensor keep;
    memset(&keep, 0x5A, sizeof keep);
    c = keep;
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_I32, 1, 1, 1, 1, &c), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dtype: i32"));
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, 0, 1, 1, 1, &c), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "num_blocks=0"));
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, 1, -2, 1, 1, &c), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "block_size=-2"));
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, 1, 1, ATTN_MAX_HEADS + 1, 1, &c),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "num_kv_heads=4097"));
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, 1, 1, 1, 257, &c), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "head_size=257"));
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, INT64_MAX / 4, 1 << 20, 16, 128, &c), ATTN_STATUS_OVERFLOW);
    assert_non_null(strstr(attn_last_error(), "overflows"));
    assert_memory_equal(&c, &keep, sizeof c);
    assert_int_equal(attn_kv_cache_alloc(ATTN_DTYPE_F32, 1, 1, 1, 1, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "cache: is NULL"));
    attn_ctx_destroy(ctx);
}

#if defined(__linux__) && defined(MADV_HUGEPAGE)
/* Characters before the path in the /proc/self/maps line of the mapping starting at a (-1: none). */
static int maps_path_column(const void *a) {
    FILE *f = fopen("/proc/self/maps", "r");
    static char line[8192];
    char key[40];
    snprintf(key, sizeof key, "%lx-", (unsigned long)(uintptr_t)a);
    int col = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0 && strchr(line, '/'))
            col = (int)(strchr(line, '/') - line);
    if (f)
        fclose(f);
    return col;
}

/* A private file mapping whose maps line is longer than a line buffer and whose path ends in the text of an
 * anonymous mapping's line over the same addresses: that tail is part of a path, not a line of its own (a
 * break-test had its zeroed pages released, and they refaulted as the file's bytes). */
static void check_long_path_file_mapping(void) {
    const size_t mib2 = (size_t)2 << 20, n = 2 * mib2;
    char dir[1100] = "/tmp/attn_test_cache_XXXXXX", path[1100], spoof[96];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/f", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    unsigned char *fill = malloc(n);
    memset(fill, 0xAB, n);
    assert_true(write(fd, fill, n) == (ssize_t)n);
    unsigned char *r = mmap(NULL, n + mib2, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(r != MAP_FAILED);
    unsigned char *a = (unsigned char *)(((uintptr_t)r + mib2 - 1) & ~(uintptr_t)(mib2 - 1));
    assert_true(mmap(a, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0) == a);
    char sub[1100], longp[1500]; /* the nested directories and the file's name once renamed */
    snprintf(sub, sizeof sub, "%s", dir);
    snprintf(longp, sizeof longp, "%s", path);
    const int col = maps_path_column(a);
    if (col <= 0) { /* no path in this /proc (an emulator's): nothing to place the text after */
        fprintf(stderr, "test_cache: the file mapping's maps line shows no path here; long-path case skipped\n");
        goto cleanup;
    }
    snprintf(spoof, sizeof spoof, "%lx-%lx rw-p 00000000 00:00 0", (unsigned long)(uintptr_t)a,
             (unsigned long)(uintptr_t)(a + n));
    /* a path of 511 - col characters before the spoofed text: nested directories of 200 characters, then a name */
    int rest = 511 - col - (int)strlen(sub) - 1;
    while (rest + (int)strlen(spoof) > 250) { /* a file name holds at most 255 characters */
        const size_t k = strlen(sub);
        sub[k] = '/';
        memset(sub + k + 1, 'd', 199);
        sub[k + 200] = '\0';
        assert_int_equal(mkdir(sub, 0700), 0);
        rest -= 200;
    }
    char name[256];
    assert_true(rest >= 1 && rest <= (int)sizeof name);
    memset(name, 'x', (size_t)(rest - 1));
    name[rest - 1] = '\0';
    snprintf(longp, sizeof longp, "%s/%s%s", sub, name, spoof);
    assert_int_equal(rename(path, longp), 0);
    memset(a, 0, n); /* private zeros over the file's 0xAB */
    const int64_t sn = (int64_t)n;
    attn_tensor t = attn_tensor_make(a, ATTN_DTYPE_U8, 1, &sn);
    int64_t released = -1;
    assert_int_equal(attn_kv_cache_to_huge_pages(&t, &released), ATTN_STATUS_OK);
    assert_int_equal(released, 0);
    for (size_t i = 0; i < n; i += 4093)
        assert_int_equal(a[i], 0);
cleanup:
    munmap(r, n + mib2);
    close(fd);
    unlink(longp);
    for (size_t k = strlen(sub); k > strlen(dir); k = strlen(sub)) { /* the nested directories, innermost first */
        rmdir(sub);
        *strrchr(sub, '/') = '\0';
    }
    rmdir(dir);
    free(fill);
}
#endif

/* attn_kv_cache_to_huge_pages on memory allocated elsewhere: contents unchanged, the all-zero 2 MiB pages of a
 * private anonymous mapping released (where this kernel takes the advice), pages with data and file mappings kept. */
static void test_kv_cache_to_huge_pages(void **state) {
    (void)state;
    const size_t mib2 = (size_t)2 << 20, len = 6 * mib2;
    assert_int_equal(attn_kv_cache_to_huge_pages(NULL, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "cache: is NULL"));
    float x[8] = {0};
    const int64_t sx[2] = {2, 4};
    attn_tensor neg = attn_tensor_make(x + 4, ATTN_DTYPE_F32, 2, sx);
    neg.strides[0] = -4;
    assert_int_equal(attn_kv_cache_to_huge_pages(&neg, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "strides[0]=-4"));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* base pages (no advice), zeroed by touch; one 2 MiB page of the aligned region carries data */
    unsigned char *m = mmap(NULL, len + mib2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0, len + mib2);
    unsigned char *al = (unsigned char *)(((uintptr_t)m + mib2 - 1) & ~(uintptr_t)(mib2 - 1));
    for (size_t i = 0; i < mib2; i += 4099)
        al[2 * mib2 + i] = (unsigned char)(1 + i % 251);
    unsigned char *copy = malloc(len);
    const int64_t n = (int64_t)len - 200; /* from 100 bytes past the boundary: 4 whole aligned pages inside */
    memcpy(copy, al + 100, (size_t)n);
    attn_tensor t = attn_tensor_make(al + 100, ATTN_DTYPE_U8, 1, &n);
    int64_t released = -1;
    assert_int_equal(attn_kv_cache_to_huge_pages(&t, &released), ATTN_STATUS_OK);
    assert_memory_equal(al + 100, copy, (size_t)n);
    const int thp = smaps_has_hg(al + mib2) == 1; /* the advice shown on the aligned pages */
    fprintf(stderr, "test_cache: to_huge_pages released %lld bytes (advice %s)\n", (long long)released,
            thp ? "shown in smaps" : "not shown");
    /* aligned pages inside [al + 100, al + 100 + n): 1, 2, 3, 4; page 2 holds data. Where the kernel shows the
     * advice the three zero pages are released; elsewhere (THP "never", qemu-user's /proc) none or those three */
    assert_true(released == (int64_t)(3 * mib2) || (!thp && released == 0));
    al[mib2 + 5] = 9; /* a released page takes writes */
    assert_int_equal(al[mib2 + 5], 9);
    assert_int_equal(al[3 * mib2 + 7], 0);
    munmap(m, len + mib2);
    /* a private file mapping: a released page would refault the file's bytes, so nothing is released */
    char path[] = "/tmp/attn_test_cache_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    unsigned char *fill = malloc(len + mib2);
    memset(fill, 0x77, len + mib2);
    assert_true(write(fd, fill, len + mib2) == (ssize_t)(len + mib2));
    unsigned char *fm = mmap(NULL, len + mib2, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    assert_true(fm != MAP_FAILED);
    memset(fm, 0, len + mib2); /* private zeros over the file's 0x77 */
    const int64_t nf = (int64_t)(len + mib2);
    attn_tensor tf = attn_tensor_make(fm, ATTN_DTYPE_U8, 1, &nf);
    assert_int_equal(attn_kv_cache_to_huge_pages(&tf, &released), ATTN_STATUS_OK);
    assert_int_equal(released, 0);
    for (size_t i = 0; i < len + mib2; i += 4096)
        assert_int_equal(fm[i], 0);
    munmap(fm, len + mib2);
    close(fd);
    free(fill);
    free(copy);
    check_long_path_file_mapping();
#endif
    /* FP4 elements share bytes: their span is no byte count; *released is 0 after a failure */
    uint8_t nib[4] = {0};
    const int64_t s4[1] = {8};
    attn_tensor t4 = attn_tensor_make(nib, ATTN_DTYPE_FP4_E2M1, 1, s4);
    int64_t rel4 = 77;
    assert_int_equal(attn_kv_cache_to_huge_pages(&t4, &rel4), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "packs two elements per byte"));
    assert_int_equal(rel4, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_cache_alloc),
        cmocka_unit_test(test_kv_cache_to_huge_pages),
        cmocka_unit_test(test_reshape_and_cache_canary),
        cmocka_unit_test(test_reshape_and_cache_convert),
        cmocka_unit_test(test_reshape_int32_strided),
        cmocka_unit_test(test_copy_and_swap_blocks),
        cmocka_unit_test(test_swap_blocks_bytes),
        cmocka_unit_test(test_separate_key_value_caches),
        cmocka_unit_test(test_separate_caches_plan_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
