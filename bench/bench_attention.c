/*
 * bench_attention.c — end-to-end attn_forward through the public API only: dense causal prefill
 * (GFLOP/s, causal flops = 2·S²·D·H_q, the convention of docs/KERNELS.md §1) and single-token decode
 * (GB/s of K+V read, GFLOP/s = 4·L·D·H_q), min and median of repeats, as ratios to the fp32 FMA peak and
 * the read bandwidth measured in the same run. For each usable ISA and for 1 and all threads.
 *
 * Usage: bench_attention [--isa NAME] [--threads N] [--reps N] [--quick] [--cases I,J,...]
 * --cases runs only the listed rows of the case table (0-based, in the order printed without it).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "bench_peak.h"


typedef struct bench_case {
    const char *kind;  /* "prefill" or "decode"      */
    int64_t seq_q, seq_k, num_heads, num_kv_heads, head_size;
    attn_dtype dtype;
} bench_case;

static void *bench_alloc_fill(size_t n, attn_dtype dtype, float scale) {
    const size_t es = attn_dtype_size(dtype);
    unsigned char *p = NULL;
    if (posix_memalign((void **)&p, 64, n * es) != 0) return NULL;
    uint32_t x = 12345u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        const float f = scale * ((float)(x >> 8) * (1.0f / 16777216.0f) - 0.5f);
        if (dtype == ATTN_DTYPE_F32) {
            memcpy(p + 4 * i, &f, 4);
        } else {
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t h = (uint16_t)(u >> 16); /* bf16 by truncation: fine for a bench */
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return p;
}

/* Runs one case; returns 0 on success. Prints one line. */
static int bench_run(attn_ctx *ctx, const bench_case *c, int reps, double peak, double bw) {
    const int64_t qs[4] = {1, c->seq_q, c->num_heads, c->head_size};
    const int64_t ks[4] = {1, c->seq_k, c->num_kv_heads, c->head_size};
    const size_t nq = (size_t)(c->seq_q * c->num_heads * c->head_size);
    const size_t nk = (size_t)(c->seq_k * c->num_kv_heads * c->head_size);
    void *q = bench_alloc_fill(nq, c->dtype, 2.0f), *k = bench_alloc_fill(nk, c->dtype, 2.0f);
    void *v = bench_alloc_fill(nk, c->dtype, 1.0f), *o = bench_alloc_fill(nq, c->dtype, 0.0f);
    if (!q || !k || !v || !o) {
        fprintf(stderr, "bench_attention: out of memory\n");
        return 1;
    }
    attn_tensor tq = attn_tensor_make(q, c->dtype, 4, qs), tk = attn_tensor_make(k, c->dtype, 4, ks);
    attn_tensor tv = attn_tensor_make(v, c->dtype, 4, ks), to = attn_tensor_make(o, c->dtype, 4, qs);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    double t[64];
    if (reps > 64) reps = 64;
    int rc = 0;
    for (int r = -1; r < reps && rc == 0; r++) { /* r = −1: warm-up */
        const double t0 = bench_now();
        if (attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, NULL) != ATTN_STATUS_OK) {
            fprintf(stderr, "bench_attention: %s\n", attn_last_error());
            rc = 1;
        }
        if (r >= 0) t[r] = bench_now() - t0;
    }
    if (rc == 0) {
        double tmin, tmed;
        bench_min_median(t, reps, &tmin, &tmed);
        const int is_prefill = !strcmp(c->kind, "prefill");
        /* causal prefill with seq_q = seq_k: 2·S²·D·H; decode: 4·L·D·H */
        const double fl = is_prefill ? 2.0 * (double)c->seq_q * (double)c->seq_k * (double)c->head_size * (double)c->num_heads
                                     : 4.0 * (double)c->seq_k * (double)c->head_size * (double)c->num_heads;
        const double bytes = 2.0 * (double)nk * (double)attn_dtype_size(c->dtype);
        printf("%-7s %-5s %-4s thr=%-2d S_q=%-5lld S_k=%-6lld D=%-3lld H=%lld/%lld  %9.3f ms %9.3f ms  "
               "%7.1f GF/s %5.1f%% peak  %6.1f GB/s %5.1f%% bw\n",
               attn_ctx_isa(ctx), c->kind, attn_dtype_name(c->dtype), (int)attn_ctx_num_threads(ctx),
               (long long)c->seq_q, (long long)c->seq_k, (long long)c->head_size, (long long)c->num_heads,
               (long long)c->num_kv_heads, tmin * 1e3, tmed * 1e3, fl / tmin * 1e-9,
               100.0 * fl / tmin * 1e-9 / peak, bytes / tmin * 1e-9, 100.0 * bytes / tmin * 1e-9 / bw);
    }
    free(q), free(k), free(v), free(o);
    return rc;
}

/* 1 when `ci` is one of the comma-separated indices in `list`. */
static int bench_listed(const char *list, int ci) {
    for (const char *c = list; *c;) {
        char *end;
        const long v = strtol(c, &end, 10);
        if (end == c) return 0;
        if (v == ci) return 1;
        c = *end == ',' ? end + 1 : end;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int reps = 5, max_threads = 0, quick = 0;
    const char *case_list = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) max_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) case_list = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--isa NAME] [--threads N] [--reps N] [--quick] [--cases I,J,...]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    attn_ctx *ctx = NULL;
    if (attn_ctx_create(&ctx) != ATTN_STATUS_OK) {
        fprintf(stderr, "bench_attention: %s\n", attn_last_error());
        return 1;
    }
    if (max_threads <= 0) max_threads = attn_ctx_num_threads(ctx);
    const double p512 = bench_peak_fma_gflops(512), p256 = bench_peak_fma_gflops(256);
    const double peak1 = p512 > 0 ? p512 : p256;
    const double bw1 = bench_read_gbs((size_t)1 << 30);
    printf("# cpu features: %s\n", attn_cpu_features());
    printf("# 1-thread ceilings this run: fp32 FMA %.1f GFLOP/s (zmm %.1f, ymm %.1f), read %.1f GB/s\n", peak1, p512,
           p256, bw1);
    printf("# T-thread ratios use T × the 1-thread ceilings (an upper bound: DRAM does not scale linearly)\n");

    const bench_case cases[] = {
        {"prefill", 512, 512, 32, 8, 128, ATTN_DTYPE_F32},     {"prefill", 2048, 2048, 32, 8, 128, ATTN_DTYPE_F32},
        {"prefill", 2048, 2048, 32, 8, 64, ATTN_DTYPE_F32},    {"prefill", 2048, 2048, 32, 8, 128, ATTN_DTYPE_BF16},
        {"decode", 1, 4096, 32, 8, 128, ATTN_DTYPE_F32},       {"decode", 1, 16384, 32, 8, 128, ATTN_DTYPE_F32},
        {"decode", 1, 16384, 32, 8, 128, ATTN_DTYPE_BF16},
    };
    const int num_cases = (int)(sizeof cases / sizeof cases[0]);
    int rc = 0;
    for (int32_t i = 0; i < attn_isa_count() && rc == 0; i++) {
        const char *name = attn_isa_name(i);
        if ((only && strcmp(only, name)) || !attn_isa_available(name)) continue;
        if (attn_ctx_set_isa(ctx, name) != ATTN_STATUS_OK) continue;
        for (int threads = 1; threads <= max_threads && rc == 0; threads = threads == max_threads ? threads + 1 : max_threads) {
            if (attn_ctx_set_num_threads(ctx, threads) != ATTN_STATUS_OK) break;
            for (int ci = 0; ci < num_cases && rc == 0; ci++) {
                if (quick && ci != 1 && ci != 5) continue;
                if (case_list && !bench_listed(case_list, ci)) continue;
                rc = bench_run(ctx, &cases[ci], reps, peak1 * threads, bw1 * threads);
            }
        }
    }
    attn_ctx_destroy(ctx);
    return rc;
}
