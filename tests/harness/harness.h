/*
 * harness.h — shared test helpers: a seeded RNG, buffers with dtype conversion, oracle comparison with
 * per-dtype tolerances defined in ONE place (cli/tolerance.h, read by th_tol_for and by the CLI), and a
 * one-line repro printer.
 */
#ifndef ATTN_TEST_HARNESS_H
#define ATTN_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"

/* ---- RNG (splitmix64; identical streams on every platform) ---- */
typedef struct th_rng {
    uint64_t state;
} th_rng;
void th_rng_seed(th_rng *r, uint64_t seed);

/* 1 when ATTN_TEST_SMALL=1 (set by ctest on every test of a sanitizer build): the heavy suites then run the same
 * code paths on smaller shapes or fewer matrix points, so the sanitizer tier holds its time limits under load. */
int th_test_small(void);
/* 1 when ATTN_TEST_EMULATED=1 (set by `make test-arm64`, scripts/test_arm64.sh: every test runs under qemu-user,
 * 10-30x slower than natively, on both CPU models): the heaviest suites shrink further than th_test_small —
 * fewer matrix points or shorter sequences, every code path (entries, dtypes, options, partition splits) kept. */
int th_test_emulated(void);
uint64_t th_rng_u64(th_rng *r);
double th_rng_uniform(th_rng *r);             /* [0, 1)   */
double th_rng_range(th_rng *r, double lo, double hi);
int64_t th_rng_int(th_rng *r, int64_t lo, int64_t hi); /* [lo, hi] inclusive */
double th_rng_normal(th_rng *r);

/* ---- typed buffers ---- */
/* A malloc'd buffer of n elements of dtype filled with uniform values in [lo, hi) (rounded to the dtype). */
void *th_alloc_fill(th_rng *r, attn_dtype dtype, size_t n, double lo, double hi);
/* A malloc'd buffer of n elements of dtype, every byte set to 0xFF (NaN for floats). */
void *th_alloc_nan(attn_dtype dtype, size_t n);
float th_get(const void *buf, attn_dtype dtype, size_t i);
void th_set(void *buf, attn_dtype dtype, size_t i, float x);

/* ---- tolerances: the single table (cli/tolerance.h) ---- */
typedef struct th_tol {
    double atol; /* absolute, in units of max|V| */
    double rtol; /* relative to |expected|       */
    double lse_atol;
} th_tol;
/* Output tolerance for attention outputs in `dtype` (output dtype = query dtype). */
th_tol th_tol_for(attn_dtype dtype);
/* 1 if attn_forward_quant_kernels named kernels of the bf16 path ("avx512bf16", or "amx": the same staging with
 * the products on AMX tiles), which round P to bf16 and get th_tol_for_quant_kernels. */
int th_quant_kernels_bf16(const char *name);
/* attn_forward_quant on the bf16-path kernels against attn_ref_forward_quant (P rounded to bf16). */
th_tol th_tol_for_quant_bf16(attn_dtype dtype);
/* and for MXFP4 where the P·V runs on VPDPBUSD over bytes of P (the quant table's pv_e2m1_i8) */
th_tol th_tol_for_quant_mxfp4_i8(attn_dtype dtype);
/* The avx512bf16 quant kernels' tolerance for `format` (attn_quant_format) on this CPU: th_tol_for_quant_mxfp4_i8
 * for MXFP4 where the quant table has the VPDPBUSD P·V (pv_e2m1_i8), else th_tol_for_quant_bf16 */
th_tol th_tol_for_quant_kernels(attn_dtype dtype, int format);

/* Compares got vs expected over a strided 3-D/4-D view pair by flat logical index. Returns the max
 * absolute error; sets *bad to the number of elements outside atol·vmax + rtol·|expected| (NaN counts). */
double th_compare(const attn_tensor *got, const attn_tensor *expected, th_tol tol, double vmax, size_t *bad);
/* LSE comparison: −inf must match −inf exactly; finite values within tol.lse_atol. */
double th_compare_lse(const attn_tensor *got, const attn_tensor *expected, th_tol tol, size_t *bad);
/* Bytewise equality of two views' logical elements (for determinism). */
int th_bitwise_equal(const attn_tensor *a, const attn_tensor *b);

/* Element offset of a logical multi-index in a view. */
int64_t th_offset(const attn_tensor *t, const int64_t *idx);

#endif

/* ---- appended by the conformance suites ---- */
/* th_tol_for(dtype) widened for logits of magnitude up to `logit_mag` (Σ|scale·q_d·k_d|): fp32 logits carry
 * an absolute error of a few ulps of that magnitude, which softmax turns into a relative weight error. */
th_tol th_tol_for_logits(attn_dtype dtype, double logit_mag);
