/*
 * bench_calls.c — the C-side time of the entries the Python package's hot paths call, at one small decode
 * shape, so bench/bench_python_overhead.py can state the Python per-call overhead as "Python call minus
 * this C call" on the same shape, thread count and entry. One line of JSON per entry: name, min and median
 * microseconds over --reps calls (each call timed alone with CLOCK_MONOTONIC, after 200 warm-up calls).
 *
 * The entries mirror what one Python call runs in C:
 *   paged_attention        attn_paged_attention                    (attn.paged_attention)
 *   paged_plan             attn_forward_paged with a plan           (attn.Plan.forward, attn.backend)
 *   reshape_and_cache      attn_reshape_and_cache, 1 token          (attn.reshape_and_cache, vllm_ops)
 *   kvcache                attn_reshape_and_cache + paged_attention (flash_attn_with_kvcache, k/v given)
 *   flash_attn_func        attn_forward, BSND                       (attn.flash_attn_func)
 *   varlen                 attn_forward_varlen                      (attn.flash_attn_varlen_func)
 *   merge                  attn_merge_attn_states                   (attn.merge_attn_states)
 *
 * Usage: bench_calls [--reps N] [--threads N] [--num-heads H] [--num-kv-heads H] [--head-size D]
 *                    [--keys L] [--block-size B] [--entry NAME]   (--entry: time that entry only)
 *        bench_calls --fp8-chunk T [--reps N] [--num-kv-heads H] [--head-size D]
 * The second form times only the cache write of one prefill chunk of T tokens (default shape 8 kv heads x
 * 128, block size 16, slots in shuffled blocks): attn_reshape_and_cache_scaled into fp8_e4m3 / fp8_e5m2
 * caches from f32, bf16 and f16 key/value rows, plus a bf16 cache from f32 rows for comparison. One JSON
 * line per case with min / median microseconds per call and nanoseconds per cached element (2·T·H·D
 * elements: keys and values); default 15 reps after 2 warm-up calls.
 * Not a test: prints numbers, exits 1 only if an entry fails.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn.h"

typedef struct bench_shape {
    int64_t num_heads, num_kv_heads, head_size, keys, block_size, num_blocks;
} bench_shape;

/* Everything one run needs: buffers (float32), tensor views over them, a plan and its workspace. */
typedef struct bench_state {
    attn_ctx *ctx;
    attn_params params;
    attn_plan *plan;
    void *workspace;
    size_t workspace_size;
    float *q, *kv, *out, *key, *k_dense, *v_dense, *lse_a, *lse_b, *lse_out;
    int32_t qsl[2], seq_lens[1], block_table[4], cu_q[2], cu_k[2];
    int64_t slot[1];
    attn_tensor tq, tq4, tkv, tout, tout4, tkey, tqsl, tsl, tbt, tslot, tk4, tv4, tk3, tv3, tcq, tck, tla, tlb, tlo;
} bench_state;

static double bench_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int bench_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n floats, deterministic pseudo-random in [-0.5, 0.5) * scale; NULL on failure. */
static float *bench_floats(size_t n, float scale) {
    float *p = malloc(n * sizeof *p + 64);
    if (p == NULL)
        return NULL;
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = scale * ((float)(x >> 8) * (1.0f / 16777216.0f) - 0.5f);
    }
    return p;
}

/* Builds buffers and views for shape `s` (one request of s->keys keys, the last one new). 0 on success. */
static int bench_setup(bench_state *b, const bench_shape *s, int threads) {
    const int64_t H = s->num_heads, HK = s->num_kv_heads, D = s->head_size, BS = s->block_size;
    const int64_t NB = s->num_blocks, L = s->keys;
    if (attn_ctx_create(&b->ctx) != ATTN_STATUS_OK || attn_ctx_set_num_threads(b->ctx, threads) != ATTN_STATUS_OK)
        return 1;
    attn_params_init(&b->params);
    b->q = bench_floats((size_t)(H * D), 1.0f);
    b->out = bench_floats((size_t)(H * D), 0.0f);
    b->kv = bench_floats((size_t)(2 * NB * BS * HK * D), 1.0f);
    b->key = bench_floats((size_t)(HK * D), 1.0f);
    b->k_dense = bench_floats((size_t)(L * HK * D), 1.0f);
    b->v_dense = bench_floats((size_t)(L * HK * D), 1.0f);
    b->lse_a = bench_floats((size_t)H, 1.0f);
    b->lse_b = bench_floats((size_t)H, 1.0f);
    b->lse_out = bench_floats((size_t)H, 0.0f);
    if (!b->q || !b->out || !b->kv || !b->key || !b->k_dense || !b->v_dense || !b->lse_a || !b->lse_b || !b->lse_out)
        return 1;
    const int64_t s_q3[3] = {1, H, D}, s_q4[4] = {1, 1, H, D}, s_kv[5] = {2, NB, BS, HK, D};
    const int64_t s_key[3] = {1, HK, D}, s_k4[4] = {1, L, HK, D}, s_k3[3] = {L, HK, D};
    const int64_t s_2[1] = {2}, s_1[1] = {1}, s_bt[2] = {1, NB}, s_lse[2] = {H, 1};
    b->tq = attn_tensor_make(b->q, ATTN_DTYPE_F32, 3, s_q3);
    b->tq4 = attn_tensor_make(b->q, ATTN_DTYPE_F32, 4, s_q4);
    b->tout = attn_tensor_make(b->out, ATTN_DTYPE_F32, 3, s_q3);
    b->tout4 = attn_tensor_make(b->out, ATTN_DTYPE_F32, 4, s_q4);
    b->tkv = attn_tensor_make(b->kv, ATTN_DTYPE_F32, 5, s_kv);
    b->tkey = attn_tensor_make(b->key, ATTN_DTYPE_F32, 3, s_key);
    b->tk4 = attn_tensor_make(b->k_dense, ATTN_DTYPE_F32, 4, s_k4);
    b->tv4 = attn_tensor_make(b->v_dense, ATTN_DTYPE_F32, 4, s_k4);
    b->tk3 = attn_tensor_make(b->k_dense, ATTN_DTYPE_F32, 3, s_k3);
    b->tv3 = attn_tensor_make(b->v_dense, ATTN_DTYPE_F32, 3, s_k3);
    b->tla = attn_tensor_make(b->lse_a, ATTN_DTYPE_F32, 2, s_lse);
    b->tlb = attn_tensor_make(b->lse_b, ATTN_DTYPE_F32, 2, s_lse);
    b->tlo = attn_tensor_make(b->lse_out, ATTN_DTYPE_F32, 2, s_lse);
    b->qsl[0] = 0;
    b->qsl[1] = 1;
    b->seq_lens[0] = (int32_t)L;
    for (int64_t i = 0; i < NB && i < 4; i++)
        b->block_table[i] = (int32_t)i;
    b->cu_q[0] = 0;
    b->cu_q[1] = 1;
    b->cu_k[0] = 0;
    b->cu_k[1] = (int32_t)L;
    b->slot[0] = L - 1;
    b->tqsl = attn_tensor_make(b->qsl, ATTN_DTYPE_I32, 1, s_2);
    b->tsl = attn_tensor_make(b->seq_lens, ATTN_DTYPE_I32, 1, s_1);
    b->tbt = attn_tensor_make(b->block_table, ATTN_DTYPE_I32, 2, s_bt);
    b->tslot = attn_tensor_make(b->slot, ATTN_DTYPE_I64, 1, s_1);
    b->tcq = attn_tensor_make(b->cu_q, ATTN_DTYPE_I32, 1, s_2);
    b->tck = attn_tensor_make(b->cu_k, ATTN_DTYPE_I32, 1, s_2);
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = (int32_t)NB;
    cfg.block_size = (int32_t)BS;
    cfg.num_heads = (int32_t)H;
    cfg.num_kv_heads = (int32_t)HK;
    cfg.head_size = (int32_t)D;
    cfg.max_blocks_per_req = (int32_t)NB;
    attn_request req;
    memset(&req, 0, sizeof req);
    req.num_computed_tokens = L - 1;
    req.num_scheduled_tokens = 1;
    req.kind = ATTN_REQUEST_DECODER;
    req.block_ids = b->block_table;
    req.num_block_ids = (L + BS - 1) / BS;
    if (attn_plan_create(&cfg, &req, 1, &b->plan) != ATTN_STATUS_OK)
        return 1;
    b->workspace_size = attn_plan_workspace_size(b->plan);
    if (b->workspace_size && posix_memalign(&b->workspace, 64, b->workspace_size) != 0)
        return 1;
    return 0;
}

/* One call of entry `e` (see the file comment); returns its status. */
static attn_status bench_call(bench_state *b, int e) {
    attn_status st;
    switch (e) {
    case 0:
        return attn_paged_attention(b->ctx, &b->tq, &b->tkv, &b->tqsl, &b->tsl, &b->tbt, &b->params, &b->tout, NULL);
    case 1:
        return attn_forward_paged(b->ctx, b->plan, &b->tq, NULL, NULL, &b->tkv, &b->params, &b->tout, NULL,
                                  b->workspace, b->workspace_size);
    case 2:
        return attn_reshape_and_cache(b->ctx, &b->tkey, &b->tkey, &b->tkv, &b->tslot);
    case 3:
        st = attn_reshape_and_cache(b->ctx, &b->tkey, &b->tkey, &b->tkv, &b->tslot);
        if (st != ATTN_STATUS_OK)
            return st;
        return attn_paged_attention(b->ctx, &b->tq, &b->tkv, &b->tqsl, &b->tsl, &b->tbt, &b->params, &b->tout, NULL);
    case 4:
        return attn_forward(b->ctx, ATTN_LAYOUT_BSND, &b->tq4, &b->tk4, &b->tv4, &b->params, &b->tout4, NULL);
    case 5:
        return attn_forward_varlen(b->ctx, &b->tq, &b->tk3, &b->tv3, &b->tcq, &b->tck, &b->params, &b->tout, NULL);
    default:
        return attn_merge_attn_states(b->ctx, &b->tout, &b->tla, &b->tout, &b->tlb, &b->tout, &b->tlo);
    }
}

/* The --fp8-chunk mode (see the file comment). */
static int bench_fp8_chunk(int64_t T, int64_t HK, int64_t D, int reps) {
    const int64_t BS = 16, NB = (T + BS - 1) / BS, n = T * HK * D;
    attn_ctx *ctx = NULL;
    if (attn_ctx_create(&ctx) != ATTN_STATUS_OK)
        return 1;
    float *kf = bench_floats((size_t)n, 4.0f), *vf = bench_floats((size_t)n + 7, 4.0f);
    uint16_t *kb = malloc((size_t)n * 2), *vb = malloc((size_t)n * 2), *kh = malloc((size_t)n * 2),
             *vh = malloc((size_t)n * 2);
    void *cache = malloc((size_t)(2 * NB * BS * HK * D) * 4);
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    int32_t *perm = malloc((size_t)NB * sizeof *perm);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!kf || !vf || !kb || !vb || !kh || !vh || !cache || !slots || !perm || !t)
        return 1;
    const int64_t s3[3] = {T, HK, D}, s5[5] = {2, NB, BS, HK, D}, s1[1] = {T};
    attn_tensor f32k = attn_tensor_make(kf, ATTN_DTYPE_F32, 3, s3),
                f32v = attn_tensor_make(vf + 7, ATTN_DTYPE_F32, 3, s3);
    attn_tensor bk = attn_tensor_make(kb, ATTN_DTYPE_BF16, 3, s3), bv = attn_tensor_make(vb, ATTN_DTYPE_BF16, 3, s3);
    attn_tensor hk = attn_tensor_make(kh, ATTN_DTYPE_F16, 3, s3), hv = attn_tensor_make(vh, ATTN_DTYPE_F16, 3, s3);
    /* bf16 rows: the f32 rows rounded to nearest even; f16 rows: the same values (exact in f16 above 2^-14) */
    for (int64_t i = 0; i < n; i++) {
        float x = kf[i], y = vf[7 + i];
        uint32_t u, w;
        memcpy(&u, &x, 4), memcpy(&w, &y, 4);
        kb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16),
        vb[i] = (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
    }
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)kb[i] << 16, w = (uint32_t)vb[i] << 16;
        const uint32_t su = (u >> 16) & 0x8000u, sw = (w >> 16) & 0x8000u;
        const uint32_t au = u & 0x7fffffffu, aw = w & 0x7fffffffu;
        kh[i] = (uint16_t)(au < 0x38800000u ? su : su | ((au - 0x38000000u) >> 13));
        vh[i] = (uint16_t)(aw < 0x38800000u ? sw : sw | ((aw - 0x38000000u) >> 13));
    }
    for (int64_t b = 0; b < NB; b++)
        perm[b] = (int32_t)b;
    uint32_t x = 12345u;
    for (int64_t b = NB - 1; b > 0; b--) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        const int64_t j = (int64_t)(x % (uint32_t)(b + 1));
        const int32_t tmp = perm[b];
        perm[b] = perm[j], perm[j] = tmp;
    }
    for (int64_t i = 0; i < T; i++)
        slots[i] = (int64_t)perm[i / BS] * BS + i % BS;
    attn_tensor tslot = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, s1);
    static const struct {
        const char *name;
        attn_dtype cache, in;
    } cases[] = {{"fp8_e4m3<-f32", ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32},
                 {"fp8_e5m2<-f32", ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_F32},
                 {"fp8_e4m3<-bf16", ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_BF16},
                 {"fp8_e5m2<-bf16", ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_BF16},
                 {"fp8_e4m3<-f16", ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F16},
                 {"bf16<-f32", ATTN_DTYPE_BF16, ATTN_DTYPE_F32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_tensor tc = attn_tensor_make(cache, cases[c].cache, 5, s5);
        const attn_tensor *k = cases[c].in == ATTN_DTYPE_F32 ? &f32k : cases[c].in == ATTN_DTYPE_BF16 ? &bk : &hk;
        const attn_tensor *v = cases[c].in == ATTN_DTYPE_F32 ? &f32v : cases[c].in == ATTN_DTYPE_BF16 ? &bv : &hv;
        for (int i = 0; i < reps + 2; i++) {
            const double t0 = bench_now_us();
            if (attn_reshape_and_cache_scaled(ctx, k, v, &tc, &tslot, 0.01f, 0.02f) != ATTN_STATUS_OK) {
                fprintf(stderr, "bench_calls: %s failed: %s\n", cases[c].name, attn_last_error());
                return 1;
            }
            if (i >= 2)
                t[i - 2] = bench_now_us() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, bench_cmp);
        const double elems = 2.0 * (double)n;
        printf("{\"entry\": \"reshape_and_cache %s\", \"tokens\": %lld, \"num_kv_heads\": %lld, \"head_size\": %lld, "
               "\"min_us\": %.1f, \"median_us\": %.1f, \"min_ns_per_elem\": %.3f, \"median_ns_per_elem\": %.3f, "
               "\"reps\": %d, \"isa\": \"%s\"}\n",
               cases[c].name, (long long)T, (long long)HK, (long long)D, t[0], t[reps / 2], t[0] * 1e3 / elems,
               t[reps / 2] * 1e3 / elems, reps, attn_ctx_isa(ctx));
    }
    free(kf), free(vf), free(kb), free(vb), free(kh), free(vh), free(cache), free(slots), free(perm), free(t);
    attn_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv) {
    bench_shape s = {9, 3, 64, 16, 16, 4};
    int reps = 20000, threads = 1, reps_given = 0;
    int64_t fp8_chunk = 0, fp8_kv_heads = 8, fp8_head_size = 128;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        const long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--entry"))
            only = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = (int)v, reps_given = 1;
        else if (!strcmp(argv[i], "--fp8-chunk"))
            fp8_chunk = v;
        else if (!strcmp(argv[i], "--threads"))
            threads = (int)v;
        else if (!strcmp(argv[i], "--num-heads"))
            s.num_heads = v;
        else if (!strcmp(argv[i], "--num-kv-heads"))
            s.num_kv_heads = fp8_kv_heads = v;
        else if (!strcmp(argv[i], "--head-size"))
            s.head_size = fp8_head_size = v;
        else if (!strcmp(argv[i], "--keys"))
            s.keys = v;
        else if (!strcmp(argv[i], "--block-size"))
            s.block_size = v;
        else {
            fprintf(stderr, "bench_calls: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (fp8_chunk > 0)
        return reps < 1 || fp8_kv_heads < 1 || fp8_head_size < 1
                   ? 2
                   : bench_fp8_chunk(fp8_chunk, fp8_kv_heads, fp8_head_size, reps_given ? reps : 15);
    if (reps < 1 || s.keys < 1 || s.block_size < 1)
        return 2;
    s.num_blocks = (s.keys + s.block_size - 1) / s.block_size;
    if (s.num_blocks > 4) {
        fprintf(stderr, "bench_calls: at most 4 blocks (keys <= 4 * block_size)\n");
        return 2;
    }
    bench_state b;
    memset(&b, 0, sizeof b);
    if (bench_setup(&b, &s, threads) != 0) {
        fprintf(stderr, "bench_calls: setup failed: %s\n", attn_last_error());
        return 1;
    }
    static const char *names[] = {"paged_attention", "paged_plan", "reshape_and_cache", "kvcache", "flash_attn_func",
                                  "varlen",          "merge"};
    double *t = malloc((size_t)reps * sizeof *t);
    if (t == NULL)
        return 1;
    for (int e = 0; e < 7; e++) {
        if (only != NULL && strcmp(only, names[e]) != 0)
            continue;
        for (int i = 0; i < 200; i++) {
            if (bench_call(&b, e) != ATTN_STATUS_OK) {
                fprintf(stderr, "bench_calls: %s failed: %s\n", names[e], attn_last_error());
                return 1;
            }
        }
        for (int i = 0; i < reps; i++) {
            const double t0 = bench_now_us();
            (void)bench_call(&b, e);
            t[i] = bench_now_us() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, bench_cmp);
        printf("{\"entry\": \"%s\", \"min_us\": %.3f, \"median_us\": %.3f, \"reps\": %d, \"threads\": %d}\n", names[e],
               t[0], t[reps / 2], reps, threads);
    }
    free(t);
    attn_plan_free(b.plan);
    attn_ctx_destroy(b.ctx);
    return 0;
}
