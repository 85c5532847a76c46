/*
 * bench_decode.c — paged decode (attn_paged_attention, one query token per request) against the read ceiling of
 * the same KV pages: a plain streaming read of exactly the bytes decode reads (every request's K and V blocks, in
 * block-table order, a 64-token tile's K blocks then its V blocks, as the token-major schedule walks them), on the
 * same cache allocation, with the same number of threads (requests × 512-key partitions taken dynamically). The
 * cache is allocated on 2 MiB pages (attn_kv_cache_alloc: MADV_HUGEPAGE) or on 4 KiB pages (posix_memalign,
 * no advice: base pages where THP is "madvise"). Decode and the ceiling are alternated within each repetition,
 * so load changes hit both alike; min and median of each, and decode as % of the ceiling (by min and by median).
 *
 * Usage: bench_decode [--batch B] [--ctx L] [--dtype f32|bf16|e4m3|e5m2|all] [--threads T] [--pages huge|4k|both]
 *                     [--reps N] [--shuffle] [--layout nhd|hnd|vllm|vllm-hnd|kcols] [--num-heads H] [--num-kv-heads
 * HKV]
 *                     [--head-size D] [--block-size BS]
 * Shape: 32 query heads, 8 kv heads, head size 128, block size 16 (the README's decode shape) unless
 * --num-heads H --num-kv-heads HKV --head-size D --block-size BS say otherwise (SmolLM2-135M, the end-to-end
 * model: --num-heads 9 --num-kv-heads 3 --head-size 64 --block-size 128). --shuffle gives
 * every request a random permutation of its blocks (the default is consecutive blocks per request). --layout hnd
 * lays each cache block out head-major ([num_kv_heads, block_size, head_size], vLLM CPU's and FlashInfer's HND
 * order) and passes attn a view of it in attn's dimension order; --layout vllm / vllm-hnd lay the cache out as
 * vLLM allocates it per layer (a kv head's key and value side by side in one row, token-major as the attn plugin asks
 * for or head-major as vLLM CPU's backend does). The read ceiling reads the same blocks.
 * Not a test: prints numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_experimental.h"
#include "bench_peak.h"

#ifdef ATTN_BENCH_OPENMP
#include <omp.h>
#endif

/* The shape (options --num-heads, --num-kv-heads, --head-size, --block-size). */
static int64_t BD_H = 32, BD_HKV = 8, BD_D = 128, BD_BS = 16;
#define BD_TILE 64
#define BD_PART 512

typedef struct bd_cache {
    attn_tensor kv;  /* [2, nb, BS, HKV, D] */
    void *own;       /* 4 KiB-page allocation (NULL: attn_kv_cache_alloc) */
    int64_t nb;
} bd_cache;

static int bd_cache_make(bd_cache *c, attn_dtype dt, int64_t nb, int huge) {
    memset(c, 0, sizeof *c);
    c->nb = nb;
    if (huge) return attn_kv_cache_alloc(dt, nb, BD_BS, BD_HKV, BD_D, &c->kv) == ATTN_STATUS_OK ? 0 : 1;
    const size_t bytes = (size_t)2 * (size_t)nb * BD_BS * BD_HKV * BD_D * attn_dtype_size(dt);
    if (posix_memalign(&c->own, 4096, bytes) != 0) return 1;
    memset(c->own, 0, bytes);
    const int64_t shape[5] = {2, nb, BD_BS, BD_HKV, BD_D};
    c->kv = attn_tensor_make(c->own, dt, 5, shape);
    return 0;
}

/* Head-major pages (--layout hnd, vLLM CPU's [2, num_blocks, num_kv_heads, block_size, head_size]) as a view of
 * the same bytes with attn's [2, num_blocks, block_size, num_kv_heads, head_size] dimension order. */
static void bd_cache_head_major(bd_cache *c) {
    c->kv.strides[2] = BD_D;
    c->kv.strides[3] = BD_BS * BD_D;
}

/* vLLM's per-layer cache, a kv head's key row then its value row in one row of 2 * head_size: token-major
 * ([num_blocks, block_size, num_kv_heads, 2 * head_size], vLLM's LBNHC, the order the attn plugin asks for; --layout
 * vllm) or head-major ([num_blocks, num_kv_heads, block_size, 2 * head_size], LBHNC, vLLM CPU's; --layout vllm-hnd),
 * as a view in attn's dimension order. */
static void bd_cache_vllm(bd_cache *c, int head_major) {
    c->kv.strides[0] = BD_D;
    c->kv.strides[1] = BD_BS * BD_HKV * 2 * BD_D;
    c->kv.strides[2] = head_major ? 2 * BD_D : BD_HKV * 2 * BD_D;
    c->kv.strides[3] = head_major ? BD_BS * 2 * BD_D : 2 * BD_D;
}

static void bd_cache_free(bd_cache *c) {
    if (c->own) free(c->own);
    else attn_kv_cache_free(&c->kv);
}

/* Random finite values: f32 / bf16 in [-1, 1), fp8 codes without NaN (and without E5M2 inf). */
static void bd_fill(bd_cache *c, attn_dtype dt) {
    const size_t n = (size_t)2 * (size_t)c->nb * BD_BS * BD_HKV * BD_D;
    uint32_t x = 12345u;
    unsigned char *p = (unsigned char *)c->kv.data;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        const float f = (float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
        if (dt == ATTN_DTYPE_F32) {
            memcpy(p + 4 * i, &f, 4);
        } else if (dt == ATTN_DTYPE_BF16) {
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t h = (uint16_t)(u >> 16);
            memcpy(p + 2 * i, &h, 2);
        } else {
            uint8_t code = (uint8_t)(x >> 24);
            if ((code & 0x7F) >= 0x7C) code = (uint8_t)(code - 8); /* no NaN / inf codes */
            p[i] = code;
        }
    }
}

typedef struct bd_read_job {
    const unsigned char *kv; /* cache bytes */
    const int32_t *bt;       /* [batch][max_blocks] */
    int64_t max_blocks, ctx, block_bytes, v_offset;
} bd_read_job;

/* Streams the K and V blocks of keys [k0, k1) of request r (tile by tile: K blocks, then V blocks). */
static uint64_t bd_read_range(const bd_read_job *j, int64_t r, int64_t k0, int64_t k1) {
    uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t t0 = k0; t0 < k1; t0 += BD_TILE) {
        const int64_t t1 = t0 + BD_TILE < k1 ? t0 + BD_TILE : k1;
        for (int half = 0; half < (j->v_offset < 0 ? 1 : 2); half++)
            for (int64_t b = t0 / BD_BS; b < (t1 + BD_BS - 1) / BD_BS; b++) {
                /* the tile's rows in block b: [first, end) of the block (a block may be longer than a tile) */
                const int64_t first = t0 > b * BD_BS ? t0 - b * BD_BS : 0;
                const int64_t end = (b + 1) * BD_BS < t1 ? BD_BS : t1 - b * BD_BS;
                const int64_t row_bytes = j->block_bytes / BD_BS;
                const uint64_t *src =
                    (const uint64_t *)(const void *)(j->kv + half * j->v_offset +
                                                     (int64_t)j->bt[r * j->max_blocks + b] * j->block_bytes +
                                                     first * row_bytes);
                const int64_t words = (end - first) * row_bytes / 8;
                for (int64_t w = 0; w + 8 <= words; w += 8)
                    for (int q = 0; q < 8; q++) acc[q] += src[w + q];
            }
    }
    return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

/* The read ceiling: requests × 512-key partitions over `threads` threads, dynamic. */
static uint64_t bd_read_all(const bd_read_job *j, int64_t batch, int threads) {
    const int64_t parts = (j->ctx + BD_PART - 1) / BD_PART, n = batch * parts;
    uint64_t sink = 0;
#ifdef ATTN_BENCH_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(^ : sink)
#endif
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = i / parts, p = i % parts;
        const int64_t k1 = (p + 1) * BD_PART < j->ctx ? (p + 1) * BD_PART : j->ctx;
        sink ^= bd_read_range(j, r, p * BD_PART, k1);
    }
    (void)threads;
    return sink;
}

/* --layout names, and the tag each prints after the page size */
static const char *const bd_layout_name[5] = {"nhd", "hnd", "vllm", "vllm-hnd", "kcols"};
static const char *const bd_layout_tag[5] = {"", " hnd", " vllm", " vllm-hnd", " kcols"};

static attn_dtype bd_dtype(const char *s) {
    if (!strcmp(s, "f32")) return ATTN_DTYPE_F32;
    if (!strcmp(s, "bf16")) return ATTN_DTYPE_BF16;
    if (!strcmp(s, "e4m3")) return ATTN_DTYPE_FP8_E4M3;
    if (!strcmp(s, "e5m2")) return ATTN_DTYPE_FP8_E5M2;
    return (attn_dtype)-1;
}

static int bd_run(attn_ctx *ctx, attn_dtype dt, int64_t batch, int64_t L, int threads, int huge, int reps, int shuffle,
                  int layout) {
    const int64_t max_blocks = (L + BD_BS - 1) / BD_BS, nb = batch * max_blocks;
    bd_cache c;
    if (bd_cache_make(&c, dt, nb, huge)) {
        fprintf(stderr, "bench_decode: no cache: %s\n", huge ? attn_last_error() : "out of memory");
        return 1;
    }
    bd_fill(&c, dt);
    if (layout == 1)
        bd_cache_head_major(&c);
    else if (layout >= 2)
        bd_cache_vllm(&c, layout == 3);
    int32_t *bt = (int32_t *)malloc((size_t)nb * sizeof(int32_t));
    float *q = (float *)malloc((size_t)batch * BD_H * BD_D * sizeof(float));
    float *o = (float *)malloc((size_t)batch * BD_H * BD_D * sizeof(float));
    int32_t *qsl = (int32_t *)malloc((size_t)(batch + 1) * sizeof(int32_t));
    int32_t *sl = (int32_t *)malloc((size_t)batch * sizeof(int32_t));
    if (!bt || !q || !o || !qsl || !sl) return 1;
    uint32_t x = 777u;
    for (int64_t r = 0; r < batch; r++) {
        for (int64_t b = 0; b < max_blocks; b++) bt[r * max_blocks + b] = (int32_t)(r * max_blocks + b);
        if (shuffle)
            for (int64_t b = max_blocks - 1; b > 0; b--) {
                x = x * 1664525u + 1013904223u;
                const int64_t k = (int64_t)((x >> 8) % (uint32_t)(b + 1));
                const int32_t t = bt[r * max_blocks + b];
                bt[r * max_blocks + b] = bt[r * max_blocks + k], bt[r * max_blocks + k] = t;
            }
        qsl[r] = (int32_t)r, sl[r] = (int32_t)L;
    }
    qsl[batch] = (int32_t)batch;
    for (int64_t i = 0; i < batch * BD_H * BD_D; i++) {
        x = x * 1664525u + 1013904223u;
        q[i] = (float)(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
    const int64_t qs[3] = {batch, BD_H, BD_D}, bs1[1] = {batch + 1}, bsl[1] = {batch}, bbt[2] = {batch, max_blocks};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), to = attn_tensor_make(o, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, bs1), tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, bsl);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bbt);
    /* --layout kcols: the key half as a key cache stored by dimension ([nb, HKV, D, BS] per block), the value half
     * as it is, through attn_paged_attention_kv */
    const int64_t hs[4] = {nb, BD_BS, BD_HKV, BD_D};
    attn_tensor tkc = attn_tensor_make(c.kv.data, dt, 4, hs);
    tkc.strides[0] = BD_HKV * BD_D * BD_BS, tkc.strides[1] = 1, tkc.strides[2] = BD_D * BD_BS, tkc.strides[3] = BD_BS;
    attn_tensor tvc = attn_tensor_make((char *)c.kv.data + c.kv.strides[0] * (int64_t)attn_dtype_size(dt), dt, 4, hs);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (dt == ATTN_DTYPE_FP8_E4M3 || dt == ATTN_DTYPE_FP8_E5M2) p.k_scale = p.v_scale = 0.01f;
    attn_ctx_set_num_threads(ctx, threads);
    const int64_t es = (int64_t)attn_dtype_size(dt);
    /* vLLM layouts: a block holds its keys and values together, read as one block of twice the bytes */
    const int64_t kv_bytes = BD_BS * BD_HKV * BD_D * es; /* a block's keys (or values) */
    const bd_read_job job = {(const unsigned char *)c.kv.data, bt, max_blocks, L, (layout >= 2 ? 2 : 1) * kv_bytes,
                             layout >= 2 ? -1 : nb * kv_bytes};
    double td[64], tr[64];
    uint64_t sink = 0;
    int rc = 0;
    for (int r = -1; r < reps && rc == 0; r++) { /* r = −1: warm-up */
        double t0 = bench_now();
        const attn_status st = layout == 4
                                   ? attn_paged_attention_kv(ctx, &tq, &tkc, &tvc, &tqsl, &tsl, &tbt, &p, &to, NULL)
                                   : attn_paged_attention(ctx, &tq, &c.kv, &tqsl, &tsl, &tbt, &p, &to, NULL);
        if (st != ATTN_STATUS_OK) {
            fprintf(stderr, "bench_decode: %s\n", attn_last_error());
            rc = 1;
        }
        const double t1 = bench_now();
        sink ^= bd_read_all(&job, batch, threads);
        const double t2 = bench_now();
        if (r >= 0) td[r] = t1 - t0, tr[r] = t2 - t1;
    }
    if (rc == 0) {
        double dmin, dmed, rmin, rmed;
        bench_min_median(td, reps, &dmin, &dmed);
        bench_min_median(tr, reps, &rmin, &rmed);
        const double bytes = 2.0 * (double)batch * (double)L * BD_HKV * BD_D * (double)es;
        printf(
            "decode %-4s b%-3lld ctx%-6lld thr=%d %-4s%s  decode %8.3f / %8.3f ms %6.1f GB/s   read %8.3f / %8.3f ms "
            "%6.1f GB/s   decode/ceiling %5.1f%% (min) %5.1f%% (median)%s\n",
            attn_dtype_name(dt), (long long)batch, (long long)L, threads, huge ? "2M" : "4K", bd_layout_tag[layout],
            dmin * 1e3, dmed * 1e3, bytes / dmin * 1e-9, rmin * 1e3, rmed * 1e3, bytes / rmin * 1e-9,
            100.0 * rmin / dmin, 100.0 * rmed / dmed, sink == 42 ? " " : "");
    }
    bd_cache_free(&c);
    free(bt), free(q), free(o), free(qsl), free(sl);
    return rc;
}

int main(int argc, char **argv) {
    int64_t batch = 8, L = 4096;
    int threads = 1, reps = 7, shuffle = 0, pages = 3, layout = 0; /* pages: 1 huge, 2 4k */
    const char *dts = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) L = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) dts = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shuffle")) shuffle = 1;
        else if (!strcmp(argv[i], "--layout") && i + 1 < argc) {
            const char *v = argv[++i];
            layout = -1;
            for (int k = 0; k < 5; k++)
                if (!strcmp(v, bd_layout_name[k]))
                    layout = k;
            if (layout < 0)
                pages = 0;
        } else if (!strcmp(argv[i], "--num-heads") && i + 1 < argc)
            BD_H = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--num-kv-heads") && i + 1 < argc)
            BD_HKV = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--head-size") && i + 1 < argc)
            BD_D = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--block-size") && i + 1 < argc)
            BD_BS = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--pages") && i + 1 < argc) {
            const char *v = argv[++i];
            pages = !strcmp(v, "huge") ? 1 : !strcmp(v, "4k") ? 2 : !strcmp(v, "both") ? 3 : 0;
        } else {
            pages = 0; /* an unknown option: the usage below */
        }
        if (pages == 0) {
            fprintf(
                stderr,
                "usage: %s [--batch B] [--ctx L] [--dtype f32|bf16|e4m3|e5m2|all] [--threads T] "
                "[--pages huge|4k|both] [--reps N] [--shuffle] [--layout nhd|hnd|vllm|vllm-hnd|kcols] [--num-heads H] "
                "[--num-kv-heads HKV] [--head-size D] [--block-size BS]\n",
                argv[0]);
            return 2;
        }
    }
    if (batch < 1 || L < 1 || L > INT32_MAX || threads < 1 || reps < 1 || reps > 64 || BD_H < 1 || BD_HKV < 1 ||
        BD_H % BD_HKV != 0 || BD_D < 1 || BD_BS < 1 || (strcmp(dts, "all") && bd_dtype(dts) == (attn_dtype)-1)) {
        fprintf(stderr, "bench_decode: expected batch, threads, num_heads, num_kv_heads, head_size, block_size >= 1, "
                        "1 <= ctx <= 2^31 - 1, 1 <= reps <= 64, num_heads a multiple of num_kv_heads and a dtype of "
                        "f32|bf16|e4m3|e5m2|all\n");
        return 2;
    }
    attn_ctx *ctx = NULL;
    if (attn_ctx_create(&ctx) != ATTN_STATUS_OK) return 1;
    printf("# isa %s; %d thread(s); %lld requests x %lld keys, %lld/%lld heads, head_size %lld, block_size %lld%s\n",
           attn_ctx_isa(ctx), threads, (long long)batch, (long long)L, (long long)BD_H, (long long)BD_HKV,
           (long long)BD_D, (long long)BD_BS, shuffle ? ", shuffled blocks" : "");
    const char *all[4] = {"f32", "bf16", "e4m3", "e5m2"};
    int rc = 0;
    for (int pg = 1; pg <= 2 && rc == 0; pg++) {
        if (!(pages & pg)) continue;
        for (int d = 0; d < 4 && rc == 0; d++) {
            if (strcmp(dts, "all") && strcmp(dts, all[d])) continue;
            rc = bd_run(ctx, bd_dtype(all[d]), batch, L, threads, pg == 1, reps, shuffle, layout);
        }
    }
    attn_ctx_destroy(ctx);
    return rc;
}
