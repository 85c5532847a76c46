/*
 * harness.c — implementation of the shared test helpers (see harness.h).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_experimental.h"
#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "kernels/kernels.h"
#include "tolerance.h"

void th_rng_seed(th_rng *r, uint64_t seed) { r->state = seed * 0x9E3779B97F4A7C15ull + 1; }

int th_test_small(void) {
    const char *v = getenv("ATTN_TEST_SMALL");
    return v != NULL && strcmp(v, "1") == 0;
}

int th_test_emulated(void) {
    const char *v = getenv("ATTN_TEST_EMULATED");
    return v != NULL && strcmp(v, "1") == 0;
}

uint64_t th_rng_u64(th_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double th_rng_uniform(th_rng *r) { return (double)(th_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double th_rng_range(th_rng *r, double lo, double hi) { return lo + (hi - lo) * th_rng_uniform(r); }

int64_t th_rng_int(th_rng *r, int64_t lo, int64_t hi) {
    return lo + (int64_t)(th_rng_u64(r) % (uint64_t)(hi - lo + 1));
}

double th_rng_normal(th_rng *r) {
    double u1 = th_rng_uniform(r), u2 = th_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

float th_get(const void *buf, attn_dtype dtype, size_t i) { return attn_load_f(buf, dtype, (int64_t)i); }

void th_set(void *buf, attn_dtype dtype, size_t i, float x) { attn_store_f(buf, dtype, (int64_t)i, x); }

void *th_alloc_fill(th_rng *r, attn_dtype dtype, size_t n, double lo, double hi) {
    size_t es = attn_dtype_size(dtype);
    void *p = malloc((n ? n : 1) * (es ? es : 1));
    for (size_t i = 0; i < n; i++) th_set(p, dtype, i, (float)th_rng_range(r, lo, hi));
    return p;
}

void *th_alloc_nan(attn_dtype dtype, size_t n) {
    size_t es = attn_dtype_size(dtype);
    void *p = malloc((n ? n : 1) * (es ? es : 1));
    memset(p, 0xFF, (n ? n : 1) * (es ? es : 1));
    return p;
}

th_tol th_tol_for(attn_dtype dtype) {
    th_tol t;
    attn_tolerance_for(dtype, &t.atol, &t.rtol, &t.lse_atol); /* cli/tolerance.h: shared with the CLI */
    return t;
}

int th_quant_kernels_bf16(const char *name) {
    return name && (strcmp(name, "avx512bf16") == 0 || strcmp(name, "amx") == 0);
}

th_tol th_tol_for_quant_bf16(attn_dtype dtype) {
    /* attn_forward_quant on the "avx512bf16" kernels: P·v_scale rounded to bf16 (2^-9 relative per term, so the
     * output moves by <= 2^-9·max|V| plus the dot products' reordering), Q/K/V values exact; l and the LSE use
     * the float P. docs/DIFFUSION.md §5. */
    th_tol t = th_tol_for(dtype);
    t.atol += 4e-3, t.rtol += 4e-3, t.lse_atol += 2e-4;
    return t;
}

th_tol th_tol_for_quant_mxfp4_i8(attn_dtype dtype) {
    /* MXFP4 on the VPDPBUSD P·V (docs/DIFFUSION.md §5): P as bytes per 32-key block, each within half a unit of
     * 2^-8 of its block's largest P; on a row that one key dominates the other 31 keys of its block move the
     * output by up to 2^-8·|v| each, measured up to 1.8e-2·max|V| over the conformance cases (q, k in [−3, 3]); a
     * wrong factor or byte moves it by the order of |out| */
    th_tol t = th_tol_for_quant_bf16(dtype);
    t.atol += 3e-2;
    return t;
}

th_tol th_tol_for_quant_kernels(attn_dtype dtype, int format) {
    const struct attn_quant_kernels *qk = attn_dispatch_quant(attn_dispatch_by_name("avx512"));
    return format == ATTN_QUANT_MXFP4 && qk && qk->pv_e2m1_i8 ? th_tol_for_quant_mxfp4_i8(dtype)
                                                              : th_tol_for_quant_bf16(dtype);
}

int64_t th_offset(const attn_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    return off;
}

/* Iterates the logical indices of a view; returns 0 when done. */
static int th_next(const attn_tensor *t, int64_t *idx) {
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        if (++idx[d] < t->shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static int64_t th_numel(const attn_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

double th_compare(const attn_tensor *got, const attn_tensor *expected, th_tol tol, double vmax, size_t *bad) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    double maxerr = 0.0;
    *bad = 0;
    if (th_numel(got) == 0) return 0.0;
    do {
        double g = th_get(got->data, got->dtype, (size_t)th_offset(got, idx));
        double e = th_get(expected->data, expected->dtype, (size_t)th_offset(expected, idx));
        double err = fabs(g - e);
        if (!(err <= tol.atol * vmax + tol.rtol * fabs(e))) (*bad)++;
        if (!(err <= maxerr)) maxerr = isnan(err) ? INFINITY : err;
    } while (th_next(got, idx));
    return maxerr;
}

double th_compare_lse(const attn_tensor *got, const attn_tensor *expected, th_tol tol, size_t *bad) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    double maxerr = 0.0;
    *bad = 0;
    if (th_numel(got) == 0) return 0.0;
    do {
        float g = ((const float *)got->data)[th_offset(got, idx)];
        float e = ((const float *)expected->data)[th_offset(expected, idx)];
        if (isinf(e) && e < 0) {
            if (!(isinf(g) && g < 0)) (*bad)++;
            continue;
        }
        double err = fabs((double)g - (double)e);
        if (!(err <= tol.lse_atol * fmax(1.0, fabs(e)))) (*bad)++;
        if (!(err <= maxerr)) maxerr = isnan(err) ? INFINITY : err;
    } while (th_next(got, idx));
    return maxerr;
}

int th_bitwise_equal(const attn_tensor *a, const attn_tensor *b) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    size_t es = attn_dtype_size(a->dtype);
    if (th_numel(a) == 0) return 1;
    do {
        const char *pa = (const char *)a->data + th_offset(a, idx) * (int64_t)es;
        const char *pb = (const char *)b->data + th_offset(b, idx) * (int64_t)es;
        if (memcmp(pa, pb, es) != 0) return 0;
    } while (th_next(a, idx));
    return 1;
}

th_tol th_tol_for_logits(attn_dtype dtype, double logit_mag) {
    /* Δs ≈ 8·2^-24·|s| (q pre-scaling, log2e folding, the dot product's roundings); a logit error Δs moves
     * the softmax weights by a factor e^±Δs, so the output moves by at most 2·Δs·max|V|. */
    th_tol t = th_tol_for(dtype);
    const double ds = 8.0 * 5.9604644775390625e-8 * logit_mag;
    t.atol += 2.0 * ds; /* the LSE tolerance is already relative to |lse| ~ logit_mag */
    return t;
}
