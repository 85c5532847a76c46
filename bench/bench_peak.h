/*
 * bench_peak.h — ceilings measured in the same run as the benches (bench/README.md: the machine
 * is noisy, so every ratio is against a ceiling from the same window): fp32 FMA peak with 512-bit or
 * 256-bit vectors (independent accumulator chains, the peak.c probe idea), the VDPBF16PS and VPDPBUSD peaks
 * measured the same way, and a streaming read bandwidth.
 */
#ifndef ATTN_BENCH_PEAK_H
#define ATTN_BENCH_PEAK_H

#include <stddef.h>

double bench_now(void);
/* Sorts t[0..n) and returns min / median through the out-parameters. */
void bench_min_median(double *t, int n, double *min, double *median);
/* Single-thread fp32 FMA peak in GFLOP/s for vector width 512 or 256 (0 if this CPU lacks it). */
double bench_peak_fma_gflops(int width_bits);
/* Single-thread VDPBF16PS peak in GFLOP/s (a bf16 pair = 2 products + 2 adds per lane; 0 without AVX512-BF16). */
double bench_peak_dpbf16_gflops(void);
/* Single-thread TDPBF16PS (AMX tile) peak in GFLOP/s (0 without AMX-BF16 or the Linux tile-data permission). */
double bench_peak_amx_bf16_gflops(void);
/* Single-thread VPDPBUSD peak in GOP/s (int8: 4 byte products + 4 adds per 32-bit lane; 0 without AVX512-VNNI). */
double bench_peak_dpbusd_gops(void);
/* Single-thread read bandwidth in GB/s over `bytes` (a 2 MiB-aligned heap buffer, pages as the OS gives). */
double bench_read_gbs(size_t bytes);
/* The same over a fresh mapping on 2 MiB pages (huge != 0: MADV_HUGEPAGE, what attn_kv_cache_alloc and torch's
 * THP_MEM_ALLOC_ENABLE=1 ask for) or on 4 KiB pages (MADV_NOHUGEPAGE). */
double bench_read_gbs_pages(size_t bytes, int huge);

#endif
