/*
 * bench_peak.c — the in-run ceilings of bench_peak.h. The FMA loops use target attributes so this file
 * builds with default flags and only runs a loop the CPU supports (__builtin_cpu_supports).
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, MAP_ANONYMOUS */
#include "bench_peak.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int bench_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_min_median(double *t, int n, double *min, double *median) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    *min = t[0];
    *median = t[n / 2];
}

/* 24 independent chains of vfmadd: enough to cover latency 4 × 2 pipes (and more) without spills. */
__attribute__((target("avx512f,fma"), noinline)) static double bench_fma512(long iters) {
    __m512 a[24];
    const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    }
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < 24; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

/* 12 chains: AVX2 has 16 ymm registers. */
__attribute__((target("avx2,fma"), noinline)) static double bench_fma256(long iters) {
    __m256 a[12];
    const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps(1.0f + (float)i * 1e-3f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    }
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    float o[8];
    _mm256_storeu_ps(o, s);
    return o[0] + o[7];
}

/* Minimum over 5 timed runs of probe(iters) seconds, after one warm-up run of iters / 10 (which also wakes the
 * wide units); the probe's result is consumed so the loop is not optimised away. */
static double bench_probe_min_seconds(double (*probe)(long), long iters) {
    volatile double sink = probe(iters / 10);
    double t[5];
    for (int r = 0; r < 5; r++) {
        const double t0 = bench_now();
        sink += probe(iters);
        t[r] = bench_now() - t0;
    }
    double tmin, tmed;
    bench_min_median(t, 5, &tmin, &tmed);
    (void)sink;
    return tmin;
}

double bench_peak_fma_gflops(int width_bits) {
    __builtin_cpu_init();
    if (width_bits == 512) {
        if (!__builtin_cpu_supports("avx512f")) return 0.0;
        const long iters = 20000000;
        return 24.0 * 32.0 * (double)iters / bench_probe_min_seconds(bench_fma512, iters) * 1e-9;
    }
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0.0;
    const long iters = 40000000;
    return 12.0 * 16.0 * (double)iters / bench_probe_min_seconds(bench_fma256, iters) * 1e-9;
}

/* 24 VDPBF16PS chains (each zmm instruction: 16 lanes × 2 bf16 products = 64 flop). */
__attribute__((target("avx512f,avx512bf16"), noinline)) static double bench_dpbf16(long iters) {
    __m512 a[24];
    const __m512i x = _mm512_set1_epi32(0x3f803f80); /* bf16 pair (1, 1) */
    const __m512i y = _mm512_set1_epi32(0x33d633d6); /* bf16 pair (1e-7, 1e-7) */
    for (int i = 0; i < 24; i++) a[i] = _mm512_set1_ps(1.0f + (float)i * 1e-3f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 24
        for (int i = 0; i < 24; i++) a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)x, (__m512bh)y);
    }
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < 24; i++) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}

double bench_peak_dpbf16_gflops(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bf16")) return 0.0;
    const long iters = 20000000;
    return 24.0 * 64.0 * (double)iters / bench_probe_min_seconds(bench_dpbf16, iters) * 1e-9;
}

/* 12 VPDPBUSD chains, two steps per iteration (each zmm instruction: 16 lanes × 4 byte products and their adds =
 * 128 int8 ops). Twelve, not 24 as for the FMA probes: GCC 12 copies each accumulator of a 24-entry array through a
 * register around every VPDPBUSD, which measures the copies, not the instruction. */
__attribute__((target("avx512f,avx512vnni"), noinline)) static double bench_dpbusd(long iters) {
    __m512i a[12];
    const __m512i x = _mm512_set1_epi32(0x01010101), y = _mm512_set1_epi32(0x01FF01FF);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbusd_epi32(a[i], y, x);
    }
    __m512i s = _mm512_setzero_si512();
    for (int i = 0; i < 12; i++) s = _mm512_add_epi32(s, a[i]);
    return _mm512_reduce_add_epi32(s);
}

double bench_peak_dpbusd_gops(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) return 0.0;
    const long iters = 10000000;
    return 24.0 * 128.0 * (double)iters / bench_probe_min_seconds(bench_dpbusd, iters) * 1e-9;
}

/* TDPBF16PS on four independent 16 × 16 f32 tiles (each instruction: 16 × 16 lanes × 32 bf16 products and adds
 * = 16384 flop), operands from two A and two B tiles that never change. */
__attribute__((target("amx-tile,amx-bf16"), noinline)) static double bench_amx_bf16(long iters) {
    struct {
        uint8_t palette, start, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    static uint16_t ones[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++)
        ones[i] = 0x3f80; /* bf16 1.0 */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (long k = 0; k < iters; k++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    static float out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}

double bench_peak_amx_bf16_gflops(void) {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!(d & (1u << 22)) || !(d & (1u << 24)))
        return 0.0; /* AMX-BF16, AMX-TILE */
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0)
        return 0.0;
    const long iters = 2000000;
    return 4.0 * 16384.0 * (double)iters / bench_probe_min_seconds(bench_amx_bf16, iters) * 1e-9;
}

/* The streaming read of bench_read_gbs over `buf` (n floats). */
static double bench_read_buf(float *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    double t[5];
    volatile float sink = 0.0f;
    for (int r = 0; r < 5; r++) {
        float acc[32] = {0}; /* 32 independent lanes: the add latency never limits the stream */
        const double t0 = bench_now();
        for (size_t i = 0; i + 32 <= n; i += 32)
            for (int j = 0; j < 32; j++) acc[j] += buf[i + j];
        t[r] = bench_now() - t0;
        for (int j = 0; j < 32; j++) sink += acc[j];
    }
    double tmin, tmed;
    bench_min_median(t, 5, &tmin, &tmed);
    (void)sink;
    return (double)(n * sizeof(float)) / tmin * 1e-9;
}

double bench_read_gbs(size_t bytes) {
    const size_t n = bytes / sizeof(float);
    float *buf = NULL;
    if (posix_memalign((void **)&buf, 2u << 20, n * sizeof(float)) != 0) return 0.0;
    const double gbs = bench_read_buf(buf, n);
    free(buf);
    return gbs;
}

double bench_read_gbs_pages(size_t bytes, int huge) {
    const size_t page = (size_t)2 << 20, n = bytes / sizeof(float), len = n * sizeof(float) + page;
    char *map = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return 0.0;
    float *buf = (float *)(void *)(map + (page - (uintptr_t)map % page) % page); /* 2 MiB-aligned */
    /* before the first touch, so the pages are chosen now: huge where THP allows it, else base pages even
     * when THP is "always" */
    (void)madvise(buf, n * sizeof(float), huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    const double gbs = bench_read_buf(buf, n);
    munmap(map, len);
    return gbs;
}
