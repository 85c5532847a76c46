/*
 * ceilings.c — the in-window ceilings of bench/peers/, on 1..N threads at once: fp32 FMA peak, the VDPBF16PS
 * (bf16-pair) and VPDPBUSD (int8) peaks the quantized-attention rows use, and DRAM read bandwidth. Each thread (pinned to CPU i where the affinity call works) runs bench_peak.c's
 * single-thread probe at the same moment, behind a barrier; the results are summed. Built by run.sh into
 * its own build folder as a shared library and called from bench_peers.py through ctypes.
 */
#define _GNU_SOURCE
#include "../bench_peak.h"

#include <pthread.h>
#include <sched.h>
#include <stddef.h>

#define PEERS_MAX_THREADS 64

typedef struct {
    int kind; /* 0 = fma, 1 = read (heap buffer), 2 = read on 2 MiB pages, 3 = read on 4 KiB pages,
               * 4 = VDPBF16PS, 5 = VPDPBUSD */
    int cpu;
    int width_bits;
    size_t bytes;
    double result;
    pthread_barrier_t *barrier;
} peers_job;

static void *peers_worker(void *arg) {
    peers_job *j = (peers_job *)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
    pthread_barrier_wait(j->barrier);
    j->result = j->kind == 0   ? bench_peak_fma_gflops(j->width_bits)
                : j->kind == 1 ? bench_read_gbs(j->bytes)
                : j->kind == 4 ? bench_peak_dpbf16_gflops()
                : j->kind == 5 ? bench_peak_dpbusd_gops()
                : j->kind == 6 ? bench_peak_amx_bf16_gflops()
                               : bench_read_gbs_pages(j->bytes, j->kind == 2);
    return NULL;
}

static double peers_run(int kind, int threads, int width_bits, size_t bytes) {
    if (threads < 1) threads = 1;
    if (threads > PEERS_MAX_THREADS) threads = PEERS_MAX_THREADS;
    pthread_t tid[PEERS_MAX_THREADS];
    peers_job job[PEERS_MAX_THREADS];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)threads);
    int ncpu = CPU_SETSIZE;
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) == 0) ncpu = CPU_COUNT(&mine);
    for (int i = 0; i < threads; i++) {
        job[i] = (peers_job){kind, ncpu > 0 ? i % ncpu : 0, width_bits, bytes, 0.0, &barrier};
        pthread_create(&tid[i], NULL, peers_worker, &job[i]);
    }
    double sum = 0.0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        sum += job[i].result;
    }
    pthread_barrier_destroy(&barrier);
    return sum;
}

/* fp32 FMA GFLOP/s summed over `threads` concurrent threads (width 512 or 256; 0 if unsupported). */
double peers_fma_gflops(int threads, int width_bits) { return peers_run(0, threads, width_bits, 0); }

/* Read GB/s summed over `threads` concurrent threads, each streaming its own `bytes_per_thread`. */
double peers_read_gbs(int threads, size_t bytes_per_thread) {
    return peers_run(1, threads, 0, bytes_per_thread);
}

/* peers_read_gbs on 2 MiB pages (huge != 0) or 4 KiB pages, whatever the system's THP default. */
double peers_read_gbs_pages(int threads, size_t bytes_per_thread, int huge) {
    return peers_run(huge ? 2 : 3, threads, 0, bytes_per_thread);
}

/* VDPBF16PS GFLOP/s (2 products + 2 adds per f32 lane) summed over `threads` (0 without AVX512-BF16). */
double peers_dpbf16_gflops(int threads) { return peers_run(4, threads, 0, 0); }

/* VPDPBUSD GOP/s (4 byte products + 4 adds per 32-bit lane) summed over `threads` (0 without AVX512-VNNI). */
double peers_dpbusd_gops(int threads) { return peers_run(5, threads, 0, 0); }

/* TDPBF16PS (AMX tile) GFLOP/s summed over `threads` (0 without AMX-BF16 or the Linux tile-data permission). */
double peers_amx_bf16_gflops(int threads) {
    return peers_run(6, threads, 0, 0);
}
