/*
 * bench_kernels.c — per-kernel microbench of every usable kernel table (zstd fullbench idea): qk_tile,
 * softmax_tile and pv_tile on one 64-key tile with all operands in L1, and the row conversions. Prints
 * GFLOP/s as min/median over repeats and the ratio to the fp32 FMA peak measured in the same run (zmm peak,
 * and for avx2 also the ymm peak). Before timing a table it checks it against generic on the bench data
 * (within 1e-5 relative, 32-row vs 1-row lane invariance, exact +0 for −inf scores) and refuses to time a
 * table that fails; that is a guard, not the test suite (tests/kernels).
 *
 * K/V rows are `--kv-stride` floats apart (default 1024 = 4 KiB: the BSND layout with 8 kv heads × 128,
 * rows used in place, which maps every row of a tile to the same L1 sets); `--kv-stride 272` packs them.
 *
 * --kv times the decode kernels instead: qk_tile_kv and pv_rows_kv on one 64-key tile, D = 128, 1 / 3 / 4 / 8
 * rows, K/V in each storage dtype the table reads in place (f32, f16, bf16, and fp8 E4M3 / E5M2 where fp8_kv), rows
 * `--kv-stride` elements apart; on avx512, f32 and bf16 at 4 and 8 rows, also a free-order variant of qk_tile_kv
 * (bench_free_order.c) and the ratio of the two times, which is what the fixed summation order costs, and at every
 * row count the same ordered Q·Kᵀ on K stored dimension by dimension (bitwise qk_tile_kv's scores, checked), which
 * is what the transposes of K rows cost.
 *
 * Usage: bench_kernels [--isa NAME] [--reps N] [--quick] [--kv-stride FLOATS] [--kv]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_free_order.h"
#include "bench_peak.h"
#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "kernels/kernels.h"

#define NK ATTN_KV_TILE

typedef struct bench_bufs {
    float *q_t;  /* [ATTN_HEAD_SIZE_MAX][ATTN_QB]            */
    float *kv;   /* [NK][kv_stride] K/V rows                  */
    int64_t kv_stride;
    float *s;    /* [NK][ATTN_QB]                             */
    float *s0;   /* [NK][ATTN_QB] softmax input (restored)    */
    float *o_t;  /* [ATTN_HEAD_SIZE_MAX][ATTN_QB]             */
    float m[ATTN_QB], l[ATTN_QB];
    const float *rows[NK];
    uint16_t *h; /* [NK·ATTN_HEAD_SIZE_MAX] 16-bit rows       */
} bench_bufs;

static uint64_t bench_rng = 0x9E3779B97F4A7C15ull;
static float bench_uniform(float lo, float hi) {
    bench_rng ^= bench_rng << 13, bench_rng ^= bench_rng >> 7, bench_rng ^= bench_rng << 17;
    return lo + (hi - lo) * (float)((bench_rng >> 40) * (1.0 / 16777216.0));
}

static void *bench_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(2);
    }
    return p;
}

static void bench_fill(bench_bufs *b) {
    const int64_t row = b->kv_stride;
    for (int i = 0; i < ATTN_HEAD_SIZE_MAX * ATTN_QB; i++) b->q_t[i] = bench_uniform(-0.2f, 0.2f);
    for (int i = 0; i < NK * row; i++) b->kv[i] = bench_uniform(-1.0f, 1.0f);
    for (int k = 0; k < NK; k++) b->rows[k] = b->kv + k * row;
    for (int i = 0; i < NK * ATTN_QB; i++) b->s0[i] = bench_uniform(-12.0f, 0.0f);
    for (int i = 0; i < NK * ATTN_HEAD_SIZE_MAX; i++) b->h[i] = (uint16_t)(0x3c00u + (uint16_t)(i % 1000));
}

/* ---------------------------------------------------------------------------------------------
 * Guard: the table agrees with generic on this data (returns the number of problems found).
 * --------------------------------------------------------------------------------------------- */
static int bench_check(const struct attn_kernels *kt, bench_bufs *b, int64_t D) {
    const struct attn_kernels *g = &attn_kernels_generic;
    const size_t sb = NK * ATTN_QB * sizeof(float), ob = (size_t)D * ATTN_QB * sizeof(float);
    float *s1 = bench_alloc(sb), *s2 = bench_alloc(sb), *o1 = bench_alloc(ob), *o2 = bench_alloc(ob);
    float m1[ATTN_QB], l1[ATTN_QB], m2[ATTN_QB], l2[ATTN_QB];
    int bad = 0;
    kt->qk_tile(b->q_t, ATTN_QB, D, b->rows, NK, s1);
    g->qk_tile(b->q_t, ATTN_QB, D, b->rows, NK, s2);
    for (int i = 0; i < NK * ATTN_QB; i++) bad += !(fabsf(s1[i] - s2[i]) <= 1e-5f * (1.0f + fabsf(s2[i])));
    kt->qk_tile(b->q_t, 1, D, b->rows, NK, s2); /* lane 0 alone: bitwise the same */
    for (int k = 0; k < NK; k++) bad += memcmp(&s1[k * ATTN_QB], &s2[k * ATTN_QB], sizeof(float)) != 0;
    /* softmax with a third of the scores masked; P must be exactly +0 there */
    for (int i = 0; i < NK * ATTN_QB; i++) s1[i] = s2[i] = (i % 3 == 0) ? -INFINITY : b->s0[i];
    for (int r = 0; r < ATTN_QB; r++) m1[r] = m2[r] = r % 4 ? -30.0f : -INFINITY, l1[r] = l2[r] = r % 4 ? 2.0f : 0.0f;
    for (int i = 0; i < D * ATTN_QB; i++) o1[i] = o2[i] = (i % ATTN_QB) % 4 ? 0.5f : 0.0f;
    kt->softmax_tile(s1, NK, ATTN_QB, m1, l1, o1, D);
    g->softmax_tile(s2, NK, ATTN_QB, m2, l2, o2, D);
    for (int i = 0; i < NK * ATTN_QB; i++) {
        bad += !(fabsf(s1[i] - s2[i]) <= 1e-6f * fabsf(s2[i]));
        if (i % 3 == 0) bad += memcmp(&s1[i], &(float){0.0f}, sizeof(float)) != 0;
    }
    for (int r = 0; r < ATTN_QB; r++) bad += memcmp(&m1[r], &m2[r], sizeof(float)) != 0;
    for (int r = 0; r < ATTN_QB; r++) bad += !(fabsf(l1[r] - l2[r]) <= 1e-6f * fabsf(l2[r]));
    for (int i = 0; i < D * ATTN_QB; i++) bad += !(fabsf(o1[i] - o2[i]) <= 1e-6f * fabsf(o2[i]));
    /* P·V from the same start, and lane 0 alone */
    memcpy(o2, o1, ob);
    kt->pv_tile(s1, NK, ATTN_QB, b->rows, D, o1);
    g->pv_tile(s1, NK, ATTN_QB, b->rows, D, o2);
    for (int i = 0; i < D * ATTN_QB; i++) bad += !(fabsf(o1[i] - o2[i]) <= 1e-5f * (1.0f + fabsf(o2[i])));
    float *o3 = bench_alloc(ob);
    for (int i = 0; i < D * ATTN_QB; i++) o3[i] = (i % ATTN_QB) % 4 ? 0.5f : 0.0f;
    for (int i = 0; i < D * ATTN_QB; i++) o2[i] = o3[i];
    kt->pv_tile(s1, NK, ATTN_QB, b->rows, D, o2); /* o2 = the 32-row result again, from the same start */
    kt->pv_tile(s1, NK, 1, b->rows, D, o3);
    for (int64_t d = 0; d < D; d++) bad += memcmp(&o2[d * ATTN_QB], &o3[d * ATTN_QB], sizeof(float)) != 0;
    free(s1), free(s2), free(o1), free(o2), free(o3);
    return bad;
}

/* ---------------------------------------------------------------------------------------------
 * Timing
 * --------------------------------------------------------------------------------------------- */
typedef enum { B_QK, B_SOFTMAX, B_PV, B_CVT_TO_BF16, B_CVT_TO_F16, B_CVT_FROM_BF16, B_CVT_FROM_F16 } bench_op;
static const char *const bench_op_name[] = {"qk_tile", "softmax_tile", "pv_tile", "cvt_to_f32(bf16)",
                                            "cvt_to_f32(f16)", "cvt_from_f32(bf16)", "cvt_from_f32(f16)"};

static void bench_once(const struct attn_kernels *kt, bench_bufs *b, bench_op op, int64_t D, int64_t nr,
                       long inner) {
    for (long it = 0; it < inner; it++) {
        switch (op) {
        case B_QK: kt->qk_tile(b->q_t, nr, D, b->rows, NK, b->s); break;
        case B_SOFTMAX:
            /* restore the scores and keep m fixed at 0 so every call does the same work (no rescale) */
            memcpy(b->s, b->s0, NK * ATTN_QB * sizeof(float));
            for (int r = 0; r < ATTN_QB; r++) b->m[r] = 0.0f;
            kt->softmax_tile(b->s, NK, nr, b->m, b->l, b->o_t, D);
            break;
        case B_PV: kt->pv_tile(b->s0, NK, nr, b->rows, D, b->o_t); break;
        case B_CVT_TO_BF16: kt->cvt_to_f32(b->h, ATTN_DTYPE_BF16, b->o_t, NK * D); break;
        case B_CVT_TO_F16: kt->cvt_to_f32(b->h, ATTN_DTYPE_F16, b->o_t, NK * D); break;
        case B_CVT_FROM_BF16: kt->cvt_from_f32(b->s0, ATTN_DTYPE_BF16, b->h, NK * ATTN_QB); break;
        case B_CVT_FROM_F16: kt->cvt_from_f32(b->s0, ATTN_DTYPE_F16, b->h, NK * ATTN_QB); break;
        }
        __asm__ volatile("" ::: "memory");
    }
}

/* Runs `op` `reps` times (each ≈ 10 ms) and returns the min and median seconds per call. */
static void bench_time(const struct attn_kernels *kt, bench_bufs *b, bench_op op, int64_t D, int64_t nr, int reps,
                       double *tmin, double *tmed) {
    long inner = 1;
    for (;;) { /* calibrate */
        const double t0 = bench_now();
        bench_once(kt, b, op, D, nr, inner);
        if (bench_now() - t0 > 0.01 || inner > (1L << 26)) break;
        inner *= 2;
    }
    double t[64];
    if (reps > 64) reps = 64;
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_now();
        bench_once(kt, b, op, D, nr, inner);
        t[r] = (bench_now() - t0) / (double)inner;
    }
    bench_min_median(t, reps, tmin, tmed);
}

/* The cost of the fixed order: the free-order Q·Kᵀ of bench_free_order.c on the same rows, checked against
 * qk_tile_kv's scores (1e-5 of the largest), timed the same way; "ordered ÷ free" is qk_tile_kv's minimum time
 * over the variant's. */
static void bench_kv_free_order(bench_bufs *b, const struct attn_kernels *kt, const void *const *kv_rows, attn_dtype dt,
                                int64_t nr, int64_t D, double ordered_min, int reps, double peak) {
    if (!bench_free_order_available()) return;
    const int bf16 = dt == ATTN_DTYPE_BF16;
    float qp[8 * 256], sf[NK * ATTN_QB];
    bench_free_order_prep(b->q_t, nr, D, bf16, qp);
    kt->qk_tile_kv(b->q_t, nr, D, kv_rows, dt, NK, b->s);
    bench_free_order_qk(qp, nr, D, kv_rows, bf16, NK, sf);
    float big = 0.0f, err = 0.0f;
    for (int64_t k = 0; k < NK; k++)
        for (int64_t r = 0; r < nr; r++) {
            const float x = b->s[k * ATTN_QB + r], e = fabsf(x - sf[k * ATTN_QB + r]);
            big = fabsf(x) > big ? fabsf(x) : big, err = e > err ? e : err;
        }
    if (!(err <= 1e-5f * big)) {
        printf("free-order variant disagrees with qk_tile_kv (%g of %g): not timed\n", (double)err, (double)big);
        return;
    }
    double t[64];
    const int n = reps > 64 ? 64 : reps;
    for (int r = -1; r < n; r++) {
        const double t0 = bench_now();
        for (int it = 0; it < 50; it++) bench_free_order_qk(qp, nr, D, kv_rows, bf16, NK, sf);
        if (r >= 0) t[r] = (bench_now() - t0) / 50;
    }
    double fmin, fmed;
    bench_min_median(t, n, &fmin, &fmed);
    const double fl = 2.0 * NK * (double)nr * (double)D;
    printf("%-8s %-9s %-8s %4lld %4lld %7.1f GF/s %7.1f GF/s %6.1f%%  ordered / free %.2f (the order's cost)\n",
           "(bench)", "free-ord", attn_dtype_name(dt), (long long)D, (long long)nr, fl / fmin * 1e-9, fl / fmed * 1e-9,
           100.0 * fl / fmin * 1e-9 / peak, ordered_min / fmin);
}

/* The ordered Q·Kᵀ on K stored column by column (bench_free_order.c's bench_columns_qk: the same keys, each
 * dimension's 64 keys side by side), required to give qk_tile_kv's scores bit for bit, timed the same way;
 * "rows / columns" is qk_tile_kv's minimum time over the variant's: what a dimension-major K layout would save. */
static void bench_kv_columns(bench_bufs *b, const void *const *kv_rows, attn_dtype dt, int64_t nr, int64_t D,
                             double ordered_min, int reps, double peak) {
    if (!bench_free_order_available())
        return;
    const int bf16 = dt == ATTN_DTYPE_BF16;
    const size_t es = bf16 ? 2 : 4;
    static unsigned char cols[ATTN_HEAD_SIZE_MAX * NK * 4] __attribute__((aligned(64)));
    float sc[NK * ATTN_QB];
    for (int64_t d = 0; d < D; d++)
        for (int64_t k = 0; k < NK; k++)
            memcpy(cols + ((size_t)d * NK + (size_t)k) * es, (const unsigned char *)kv_rows[k] + (size_t)d * es, es);
    bench_columns_qk(b->q_t, nr, D, cols, NK, bf16, NK, sc);
    for (int64_t k = 0; k < NK; k++)
        if (memcmp(b->s + k * ATTN_QB, sc + k * ATTN_QB, (size_t)nr * sizeof(float))) {
            printf("column variant differs from qk_tile_kv at key %lld: not timed\n", (long long)k);
            return;
        }
    double t[64];
    const int n = reps > 64 ? 64 : reps;
    for (int r = -1; r < n; r++) {
        const double t0 = bench_now();
        for (int it = 0; it < 50; it++)
            bench_columns_qk(b->q_t, nr, D, cols, NK, bf16, NK, sc);
        if (r >= 0)
            t[r] = (bench_now() - t0) / 50;
    }
    double cmin, cmed;
    bench_min_median(t, n, &cmin, &cmed);
    const double fl = 2.0 * NK * (double)nr * (double)D;
    printf("%-8s %-9s %-8s %4lld %4lld %7.1f GF/s %7.1f GF/s %6.1f%%  rows / columns %.2f (bitwise equal)\n", "(bench)",
           "columns", attn_dtype_name(dt), (long long)D, (long long)nr, fl / cmin * 1e-9, fl / cmed * 1e-9,
           100.0 * fl / cmin * 1e-9 / peak, ordered_min / cmin);
}

/* --kv: the decode kernels on storage-dtype rows (GFLOP/s as for qk/pv: 2·keys·rows·D per call). */
static void bench_kv(const struct attn_kernels *kt, const char *name, bench_bufs *b, int reps, double peak) {
    static const attn_dtype dts[5] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_FP8_E4M3,
                                      ATTN_DTYPE_FP8_E5M2};
    static const int64_t rows[4] = {1, 3, 4, 8};
    const int64_t D = 128;
    for (int di = 0; di < 5; di++) {
        const attn_dtype dt = dts[di];
        const int fp8 = dt == ATTN_DTYPE_FP8_E4M3 || dt == ATTN_DTYPE_FP8_E5M2;
        if (fp8 && !kt->fp8_kv) continue;
        const size_t es = attn_dtype_size(dt);
        const void *kv_rows[NK];
        for (int64_t k = 0; k < NK; k++) {
            unsigned char *row = (unsigned char *)b->kv + (size_t)k * (size_t)b->kv_stride * es;
            for (int64_t d = 0; d < D; d++) {
                const float x = bench_uniform(-1.0f, 1.0f);
                uint32_t u;
                memcpy(&u, &x, 4);
                if (dt == ATTN_DTYPE_F32) memcpy(row + 4 * d, &x, 4);
                else if (dt == ATTN_DTYPE_BF16) ((uint16_t *)(void *)row)[d] = (uint16_t)(u >> 16);
                else if (dt == ATTN_DTYPE_F16) ((uint16_t *)(void *)row)[d] = attn_f32_to_f16(x);
                else row[d] = (uint8_t)((u >> 9) & 0x7B) | (uint8_t)((u >> 24) & 0x80); /* finite codes */
            }
            kv_rows[k] = row;
        }
        for (int ri = 0; ri < 4; ri++) {
            const int64_t nr = rows[ri];
            double tq[64], tp[64];
            const int n = reps > 64 ? 64 : reps;
            /* an opt-in table reads q in the form its qk_prep_kv writes (kernels.h) */
            static float q_prep[ATTN_HEAD_SIZE_MAX * ATTN_QB];
            const float *q = b->q_t;
            if (kt->qk_prep_kv) {
                memcpy(q_prep, b->q_t, sizeof q_prep);
                kt->qk_prep_kv(q_prep, nr, D, dt);
                q = q_prep;
            }
            for (int r = -1; r < n; r++) {
                const double t0 = bench_now();
                for (int it = 0; it < 50; it++)
                    kt->qk_tile_kv(q, nr, D, kv_rows, dt, NK, b->s);
                const double t1 = bench_now();
                for (int it = 0; it < 50; it++) kt->pv_rows_kv(b->s0, NK, nr, kv_rows, dt, D, b->o_t);
                const double t2 = bench_now();
                if (r >= 0) tq[r] = (t1 - t0) / 50, tp[r] = (t2 - t1) / 50;
            }
            double qmin, qmed, pmin, pmed;
            bench_min_median(tq, n, &qmin, &qmed);
            bench_min_median(tp, n, &pmin, &pmed);
            const double fl = 2.0 * NK * (double)nr * (double)D;
            printf("%-8s %-9s %-8s %4lld %4lld %7.1f GF/s %7.1f GF/s %6.1f%%  %7.1f GF/s %7.1f GF/s %6.1f%%\n", name,
                   "kv", attn_dtype_name(dt), (long long)D, (long long)nr, fl / qmin * 1e-9, fl / qmed * 1e-9,
                   100.0 * fl / qmin * 1e-9 / peak, fl / pmin * 1e-9, fl / pmed * 1e-9, 100.0 * fl / pmin * 1e-9 / peak);
            if (!strcmp(name, "avx512") && (dt == ATTN_DTYPE_F32 || dt == ATTN_DTYPE_BF16) && nr >= 4)
                bench_kv_free_order(b, kt, kv_rows, dt, nr, D, qmin, reps, peak);
            if (!strcmp(name, "avx512") && (dt == ATTN_DTYPE_F32 || dt == ATTN_DTYPE_BF16))
                bench_kv_columns(b, kv_rows, dt, nr, D, qmin, reps, peak);
        }
    }
}

int main(int argc, char **argv) {
    const char *only = NULL;
    int reps = 7, quick = 0, kv = 0;
    int64_t kv_stride = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--isa") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--kv-stride") && i + 1 < argc) kv_stride = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--kv")) kv = 1;
        else {
            fprintf(stderr, "usage: %s [--isa NAME] [--reps N] [--quick] [--kv-stride FLOATS] [--kv]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (kv_stride < ATTN_HEAD_SIZE_MAX) kv_stride = ATTN_HEAD_SIZE_MAX;
    /* The ceilings are measured before the kernels and again after them; the higher of the two is used,
     * so a noisy moment during one measurement does not inflate every ratio. */
    double p512 = bench_peak_fma_gflops(512), p256 = bench_peak_fma_gflops(256);
    printf("# cpu features: %s\n", attn_cpu_features());
    printf("# fp32 FMA peak, 1 thread, before: zmm %.1f GFLOP/s, ymm %.1f GFLOP/s\n", p512, p256);
    double peak = p512 > 0 ? p512 : p256;

    bench_bufs b;
    b.q_t = bench_alloc(ATTN_HEAD_SIZE_MAX * ATTN_QB * sizeof(float));
    b.kv_stride = kv_stride;
    b.kv = bench_alloc((size_t)(NK * kv_stride) * sizeof(float));
    printf("# K/V rows %lld floats apart\n", (long long)kv_stride);
    b.s = bench_alloc(NK * ATTN_QB * sizeof(float));
    b.s0 = bench_alloc(NK * ATTN_QB * sizeof(float));
    b.o_t = bench_alloc(NK * ATTN_HEAD_SIZE_MAX * sizeof(float)); /* >= [ATTN_HEAD_SIZE_MAX][ATTN_QB] */
    b.h = bench_alloc(NK * ATTN_HEAD_SIZE_MAX * sizeof(uint16_t) + 64);
    bench_fill(&b);
    for (int r = 0; r < ATTN_QB; r++) b.m[r] = 0.0f, b.l[r] = 0.0f;
    memset(b.o_t, 0, ATTN_HEAD_SIZE_MAX * ATTN_QB * sizeof(float));

    if (kv) {
        printf("%-8s %-9s %-8s %4s %4s %12s %12s %7s  %12s %12s %7s\n", "isa", "kernels", "kv dtype", "D", "rows",
               "qk min", "qk median", "%zmm", "pv min", "pv median", "%zmm");
        for (int32_t i = 0; i < attn_isa_count(); i++) {
            const char *name = attn_isa_name(i);
            const struct attn_kernels *kt = attn_dispatch_by_name(name);
            if ((only && strcmp(only, name)) || !kt) continue;
            bench_kv(kt, name, &b, reps, peak);
        }
        for (int32_t i = 0; attn_isa_opt_in_name(i); i++) { /* the opt-in tables usable here */
            const char *name = attn_isa_opt_in_name(i);
            const struct attn_kernels *kt = attn_dispatch_by_name(name);
            if ((only && strcmp(only, name)) || !kt)
                continue;
            bench_kv(kt, name, &b, reps, peak);
        }
        return 0;
    }
    static const int64_t Ds[] = {64, 128, 256};
    static const int64_t rows[] = {32, 16, 4};
    int failed = 0;
    printf("%-8s %-19s %4s %4s %12s %12s %8s %8s\n", "isa", "kernel", "D", "rows", "min", "median", "%zmm", "%own");
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        if (i == attn_isa_count() - 1) { /* re-measure just before the fastest table */
            const double a = bench_peak_fma_gflops(512), c = bench_peak_fma_gflops(256);
            p512 = a > p512 ? a : p512, p256 = c > p256 ? c : p256;
            peak = p512 > 0 ? p512 : p256;
            printf("# fp32 FMA peak, 1 thread, max of two measurements: zmm %.1f GFLOP/s, ymm %.1f GFLOP/s\n", p512,
                   p256);
        }
        const char *name = attn_isa_name(i);
        if (only && strcmp(only, name)) continue;
        const struct attn_kernels *kt = attn_dispatch_by_name(name);
        if (!kt) {
            printf("%-8s (not usable on this CPU)\n", name);
            continue;
        }
        const double own = !strcmp(name, "avx512") ? p512 : !strcmp(name, "avx2") ? p256 : 0.0;
        int bad = 0;
        for (int di = 0; di < 3; di++) bad += bench_check(kt, &b, Ds[di]);
        if (bad) {
            printf("%-8s CHECK FAILED against generic (%d mismatches): not timed\n", name, bad);
            failed = 1;
            continue;
        }
        for (int op = B_QK; op <= B_CVT_FROM_F16; op++) {
            for (int di = 0; di < 3; di++) {
                for (int ri = 0; ri < 3; ri++) {
                    const int64_t D = Ds[di], nr = rows[ri];
                    if (op >= B_CVT_TO_BF16 && ri > 0) continue;
                    if (quick && (D != 128 || (nr != 32 && op <= B_PV))) continue;
                    double tmin, tmed;
                    bench_time(kt, &b, (bench_op)op, D, nr, reps, &tmin, &tmed);
                    if (op == B_QK || op == B_PV) {
                        const double fl = 2.0 * NK * (double)nr * (double)D; /* useful flops only */
                        const double g_min = fl / tmin * 1e-9, g_med = fl / tmed * 1e-9;
                        printf("%-8s %-19s %4lld %4lld %7.1f GF/s %7.1f GF/s %7.1f%% %7.1f%%\n", name,
                               bench_op_name[op], (long long)D, (long long)nr, g_min, g_med, 100.0 * g_min / peak,
                               own > 0 ? 100.0 * g_min / own : 0.0);
                    } else if (op == B_SOFTMAX) {
                        /* ns per tile, and per 1000 scores; share of the tile's qk+pv time at peak */
                        const double ideal = 4.0 * NK * (double)nr * (double)D / (peak * 1e9);
                        printf("%-8s %-19s %4lld %4lld %8.0f ns %9.0f ns %7.1f%% (vs qk+pv at zmm peak)\n", name,
                               bench_op_name[op], (long long)D, (long long)nr, tmin * 1e9, tmed * 1e9,
                               100.0 * tmin / ideal);
                    } else {
                        const double n = op <= B_CVT_TO_F16 ? NK * (double)D : NK * (double)ATTN_QB;
                        printf("%-8s %-19s %4lld %4s %7.2f Gel/s %6.2f Gel/s\n", name, bench_op_name[op],
                               op <= B_CVT_TO_F16 ? (long long)D : 0LL, "-", n / tmin * 1e-9, n / tmed * 1e-9);
                        if (op > B_CVT_TO_F16) break;
                    }
                }
            }
        }
    }
    free(b.q_t), free(b.kv), free(b.s), free(b.s0), free(b.o_t), free(b.h);
    return failed;
}
