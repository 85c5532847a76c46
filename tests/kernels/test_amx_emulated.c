/*
 * test_amx_emulated.c — the amx table's tile kernels (src/kernels/amx/tile_amx.c: prefill qk_tile / pv_tile, decode
 * qk_tile_kv on bf16 rows read in place) on a machine with or without AMX. The kernel source is compiled here a second
 * time with ATTN_AMX_EMULATE: amx_ops.h then runs a scalar model of LDTILECFG / TILELOADD / TILESTORED / TILEZERO /
 * TDPBF16PS (Intel SDM pseudo-code, tile shapes checked: a bad shape aborts), so the data layout — bf16 narrowing of K
 * and V, q and Pᵀ pairs, tile strides, padding of odd key / head counts, the partial stores and the transposed
 * accumulation into o_t — is checked against float64 on every x86-64 machine with AVX512-BF16. Where the CPU runs the
 * real "amx" table, the same checks run on it too; elsewhere the test prints why not. Expected values: q and P rounded
 * to bf16 (round to nearest even), products summed in float64; tolerance 2^-21 of Σ|terms| (f32 accumulation over <=
 * 256 terms). Rows that are not all bf16 values must give the avx512 kernels' bits (the amx kernels fall back), and
 * nothing outside s[0..num_keys) / o_t[0..head_size_v) is written.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "harness.h"
#include "kernels/kernels.h"

#if defined(ATTN_TEST_AMX_EMULATED) /* compiled with the AVX-512 flags in amx_emulated_tu.c */
void attn_k_qk_tile_amx_emulated(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                                 int64_t num_keys, float *s);
void attn_k_pv_tile_amx_emulated(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                                 int64_t head_size_v, float *o_t);
void attn_k_qk_tile_kv_amx_emulated(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                    attn_dtype kv_dtype, int64_t num_keys, float *s);
void attn_k_qk_tile_kv_pf_amx_emulated(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                       attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
void attn_k_qk_bf16_amx_emulated(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16,
                                 int64_t k_stride, int64_t num_keys, const float *row_scale, const float *key_scale,
                                 float *s);
int attn_k_v_pairs_t_amx_emulated(const uint32_t *vtp, int64_t vt_stride, int64_t num_keys, int64_t head_size_v,
                                  uint32_t *vtt);
void attn_k_pv_pairs_t_bf16_amx_emulated(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtt,
                                         int64_t head_size_v, float *o_t);
int attn_k_kv_tile_prep_amx_emulated(const void *const *k_rows, const void *const *v_rows, attn_dtype dtype,
                                     int64_t num_keys, int64_t head_size, int64_t head_size_v, void *prep);
void attn_k_qk_tile_prep_amx_emulated(const float *q_t, int64_t num_rows, int64_t head_size, const void *prep,
                                      int64_t key0, int64_t num_keys, float *s);
void attn_k_pv_tile_prep_amx_emulated(const float *p, int64_t num_keys, int64_t num_rows, const void *prep,
                                      int64_t key0, int64_t head_size_v, float *o_t);
#endif

#define QB       ATTN_QB
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

typedef void (*qk_fn)(const float *, int64_t, int64_t, const float *const *, int64_t, float *);
typedef void (*pv_fn)(const float *, int64_t, int64_t, const float *const *, int64_t, float *);
typedef void (*qk_kv_fn)(const float *, int64_t, int64_t, const void *const *, attn_dtype, int64_t, float *);
typedef void (*qk_bf16_fn)(const uint32_t *, int64_t, int64_t, const uint16_t *, int64_t, int64_t, const float *,
                           const float *, float *);
typedef int (*v_pairs_t_fn)(const uint32_t *, int64_t, int64_t, int64_t, uint32_t *);
typedef void (*pv_pairs_t_fn)(const uint32_t *, int64_t, int64_t, const uint32_t *, int64_t, float *);
typedef void (*qk_kv_pf_fn)(const float *, int64_t, int64_t, const void *const *, attn_dtype, int64_t, float *,
                            attn_kv_prefetch *);
typedef int (*kv_prep_fn)(const void *const *, const void *const *, attn_dtype, int64_t, int64_t, int64_t, void *);
typedef void (*qk_prep_fn)(const float *, int64_t, int64_t, const void *, int64_t, int64_t, float *);
typedef void (*pv_prep_fn)(const float *, int64_t, int64_t, const void *, int64_t, int64_t, float *);

static float bf16_round(float x) {
    return attn_bf16_to_f32(attn_f32_to_bf16(x));
} /* round to nearest even */

#define CANARY 12345.5f
typedef struct buf {
    float q_t[ATTN_HEAD_SIZE_MAX * QB], p[ATTN_KV_TILE * QB];
    float s[(ATTN_KV_TILE + 1) * QB], s2[(ATTN_KV_TILE + 1) * QB];
    float o[(ATTN_HEAD_SIZE_MAX + 1) * QB], o2[(ATTN_HEAD_SIZE_MAX + 1) * QB], o0[(ATTN_HEAD_SIZE_MAX + 1) * QB];
    float rows[ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX];
    const float *ptr[ATTN_KV_TILE];
} buf;

/* Checks one kernel's output tile got[0..n][QB] (rows past n must still hold CANARY): on pass 1 (f32 values, the
 * kernels fall back) bitwise equal to the avx512 table's `bits`; on pass 0 within 2^-21 of Σ|terms| of
 * expect(b, i, r, &mag). Returns the failures; *worst takes the largest relative error. */
typedef double (*expect_fn)(const buf *b, int64_t i, int64_t r, int64_t n_terms, double *mag);

static double expect_qk(const buf *b, int64_t k, int64_t r, int64_t D, double *mag) {
    double ref = 0;
    *mag = 0;
    for (int64_t d = 0; d < D; d++) {
        const double t = (double)bf16_round(b->q_t[d * QB + r]) * b->rows[k][d];
        ref += t, *mag += fabs(t);
    }
    return ref;
}

static double expect_pv(const buf *b, int64_t d, int64_t r, int64_t K, double *mag) {
    double ref = b->o0[d * QB + r];
    *mag = fabs(ref);
    for (int64_t k = 0; k < K; k++) {
        const double t = (double)bf16_round(b->p[k * QB + r]) * b->rows[k][d];
        ref += t, *mag += fabs(t);
    }
    return ref;
}

static int check_tile(const char *name, const char *what, const buf *b, const float *got, const float *bits, int64_t n,
                      int64_t n_terms, int64_t R, int64_t K, int64_t D, int pass, expect_fn expect, double *worst) {
    int fails = 0;
    for (int64_t i = 0; i <= n; i++)
        for (int64_t r = 0; r < R; r++) {
            const float g = got[i * QB + r];
            if (i == n) { /* the row past the output is untouched */
                if (g != CANARY && fails++ < 5)
                    fprintf(stderr, "REPRO %s %s R=%lld K=%lld D=%lld wrote row %lld\n", name, what, (long long)R,
                            (long long)K, (long long)D, (long long)i);
                continue;
            }
            if (pass == 1) {
                if (memcmp(&g, &bits[i * QB + r], 4) && fails++ < 5)
                    fprintf(stderr, "REPRO %s %s f32 R=%lld K=%lld D=%lld: not the avx512 bits\n", name, what,
                            (long long)R, (long long)K, (long long)D);
                continue;
            }
            double mag;
            const double ref = expect(b, i, r, n_terms, &mag), err = fabs(g - ref) / (mag + 1e-30);
            if (err > *worst)
                *worst = err;
            if (!(err <= 0x1p-21) && fails++ < 5)
                fprintf(stderr, "REPRO %s %s R=%lld K=%lld D=%lld [%lld][%lld] = %.9g, expected %.9g\n", name, what,
                        (long long)R, (long long)K, (long long)D, (long long)i, (long long)r, g, ref);
        }
    return fails;
}

static int check_table(const char *name, qk_fn qk, pv_fn pv) {
    static const int64_t rows[] = {1, 5, 16, 17, 32};
    static const int64_t keys[] = {1, 15, 16, 17, 31, 32, 33, 48, 64};
    static const int64_t dims[] = {1, 16, 31, 32, 33, 64, 100, 128, 256};
    /* the fallback's reference: the avx512 table (reached by name, so this file links on every build) */
    const struct attn_kernels *k512 = attn_dispatch_by_name("avx512");
    if (!k512) {
        fprintf(stderr, "test_amx_emulated: %s not run: the avx512 table is not usable here\n", name);
        return 0;
    }
    buf *b = (buf *)calloc(1, sizeof *b);
    th_rng rng;
    th_rng_seed(&rng, 0xA3C);
    int fails = 0;
    double worst = 0;
    for (size_t i = 0; i < NELEM(b->q_t); i++)
        b->q_t[i] = (float)th_rng_range(&rng, -2, 2);
    for (size_t i = 0; i < NELEM(b->p); i++)
        b->p[i] = (float)th_rng_uniform(&rng);
    for (int pass = 0; pass < 2; pass++) /* 0: bf16 values (AMX path), 1: f32 values (falls back) */
        for (size_t ri = 0; ri < NELEM(rows); ri++)
            for (size_t ki = 0; ki < NELEM(keys); ki++)
                for (size_t di = 0; di < NELEM(dims); di++) {
                    const int64_t R = rows[ri], K = keys[ki], D = dims[di];
                    for (int64_t k = 0; k < K; k++) {
                        for (int64_t d = 0; d < D; d++) {
                            const float x = (float)th_rng_range(&rng, -1.5, 1.5);
                            b->rows[k][d] = pass == 0 ? bf16_round(x) : x;
                        }
                        b->ptr[k] = b->rows[k];
                    }
                    /* qk */
                    for (size_t i = 0; i < NELEM(b->s); i++)
                        b->s[i] = b->s2[i] = CANARY;
                    qk(b->q_t, R, D, b->ptr, K, b->s);
                    if (pass == 1)
                        k512->qk_tile(b->q_t, R, D, b->ptr, K, b->s2);
                    fails += check_tile(name, "qk", b, b->s, b->s2, K, D, R, K, D, pass, expect_qk, &worst);
                    /* pv: o_t starts from a random accumulator; the row past head_size_v is untouched */
                    for (size_t i = 0; i < NELEM(b->o); i++)
                        b->o[i] = b->o2[i] = b->o0[i] =
                            i < (size_t)(D * QB) ? (float)th_rng_range(&rng, -1, 1) : CANARY;
                    pv(b->p, K, R, b->ptr, D, b->o);
                    if (pass == 1)
                        k512->pv_tile(b->p, K, R, b->ptr, D, b->o2);
                    fails += check_tile(name, "pv", b, b->o, b->o2, D, K, R, K, D, pass, expect_pv, &worst);
                }
    fprintf(stderr, "test_amx_emulated: %s: max relative error %.3g of sum|terms| (bound 2^-21 = %.3g), %d failures\n",
            name, worst, 0x1p-21, fails);
    free(b);
    return fails;
}

/* kv_tile_prep + qk_tile_prep / pv_tile_prep (a kv tile prepared once for every block on it): bitwise qk_tile /
 * pv_tile on the keys [key0, key0 + num_keys) of the tile's rows, for every key0 and length (odd ones included), row
 * count and head size; nothing past s[0..num_keys) or o_t[0..head_size_v) written (the same canaries as the plain
 * kernels'); prepared from the float rows or from the same values as bf16 rows in place; a tile with a value
 * that is not a bf16 value is refused (0). */
static int check_prep(const char *name, kv_prep_fn prep, qk_prep_fn qk_prep, pv_prep_fn pv_prep, qk_fn qk, pv_fn pv) {
    static const int64_t rows[] = {1, 7, 16, 17, 32};
    static const int64_t tiles[] = {1, 17, 33, 64};
    static const int64_t dims[] = {1, 31, 64, 100, 128, 256};
    buf *b = (buf *)calloc(1, sizeof *b), *c = (buf *)calloc(1, sizeof *c);
    float(*vrows)[ATTN_HEAD_SIZE_MAX] = calloc(ATTN_KV_TILE, sizeof *vrows);
    void *tile = aligned_alloc(64, (ATTN_KV_PREP_BYTES + 63) & ~(size_t)63);
    uint16_t(*k16)[ATTN_HEAD_SIZE_MAX] = calloc(ATTN_KV_TILE, sizeof *k16);
    uint16_t(*v16)[ATTN_HEAD_SIZE_MAX] = calloc(ATTN_KV_TILE, sizeof *v16);
    const float *vptr[ATTN_KV_TILE];
    th_rng rng;
    th_rng_seed(&rng, 0xB7E);
    int fails = 0;
    int64_t compared = 0;
    for (size_t i = 0; i < NELEM(b->q_t); i++)
        b->q_t[i] = (float)th_rng_range(&rng, -2, 2);
    for (size_t i = 0; i < NELEM(b->p); i++)
        b->p[i] = (float)th_rng_uniform(&rng);
    /* a NaN row (what a +inf or NaN logit leaves in P) and a NaN P among finite ones: the same NaN bits either way */
    for (int64_t k = 0; k < ATTN_KV_TILE; k++)
        b->p[k * QB + 3] = -NAN, b->p[k * QB + 24] = k % 3 ? 0.0f : -NAN; /* (inf − inf makes the negative NaN) */
    b->p[9 * QB + 20] = NAN;
    for (size_t ti = 0; ti < NELEM(tiles); ti++)
        for (size_t di = 0; di < NELEM(dims); di++) {
            const int64_t n = tiles[ti], D = dims[di], Dv = dims[(di + 2) % NELEM(dims)];
            for (int64_t k = 0; k < n; k++) {
                for (int64_t d = 0; d < ATTN_HEAD_SIZE_MAX; d++) {
                    b->rows[k][d] = bf16_round((float)th_rng_range(&rng, -1.5, 1.5));
                    vrows[k][d] = bf16_round((float)th_rng_range(&rng, -1.5, 1.5));
                }
                b->ptr[k] = b->rows[k], vptr[k] = vrows[k];
            }
            memset(tile, 0x7F, ATTN_KV_PREP_BYTES); /* stale bytes (NaN bf16s) must not reach a result */
            /* odd passes prepare the tile from the bf16 rows in place (the driver's bf16 K/V), even ones from the
             * float rows: the same values, so the same bits */
            const int from_bf16 = (int)((ti + di) & 1);
            for (int64_t k = 0; k < n; k++)
                for (int64_t d = 0; d < ATTN_HEAD_SIZE_MAX; d++)
                    k16[k][d] = attn_f32_to_bf16(b->rows[k][d]), v16[k][d] = attn_f32_to_bf16(vrows[k][d]);
            const void *kr[ATTN_KV_TILE], *vr[ATTN_KV_TILE];
            for (int64_t k = 0; k < n; k++)
                kr[k] = from_bf16 ? (const void *)k16[k] : (const void *)b->ptr[k],
                vr[k] = from_bf16 ? (const void *)v16[k] : (const void *)vptr[k];
            if (!prep(kr, vr, from_bf16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32, n, D, Dv, tile)) {
                fprintf(stderr, "REPRO %s kv_tile_prep n=%lld D=%lld Dv=%lld refused bf16 rows\n", name, (long long)n,
                        (long long)D, (long long)Dv);
                fails++;
                continue;
            }
            const int64_t spans[4][2] = {{0, n}, {1, n - 1}, {n / 3, n - n / 3}, {n - 1, 1}};
            for (int si = 0; si < 4; si++)
                for (size_t ri = 0; ri < NELEM(rows); ri++) {
                    const int64_t key0 = spans[si][0], nk = spans[si][1], R = rows[ri];
                    if (nk <= 0)
                        continue;
                    for (size_t i = 0; i < NELEM(b->s); i++)
                        b->s[i] = c->s[i] = CANARY;
                    qk(b->q_t, R, D, b->ptr + key0, nk, c->s);
                    qk_prep(b->q_t, R, D, tile, key0, nk, b->s);
                    for (size_t i = 0; i < NELEM(b->o); i++)
                        b->o[i] = c->o[i] = i < (size_t)(Dv * QB) ? (float)th_rng_range(&rng, -1, 1) : CANARY;
                    pv(b->p, nk, R, vptr + key0, Dv, c->o);
                    pv_prep(b->p, nk, R, tile, key0, Dv, b->o);
                    compared++;
                    if ((memcmp(b->s, c->s, sizeof b->s) != 0 || memcmp(b->o, c->o, sizeof b->o) != 0) && fails++ < 5)
                        fprintf(stderr,
                                "REPRO %s prep n=%lld key0=%lld num_keys=%lld R=%lld D=%lld Dv=%lld: qk %s, pv %s "
                                "the plain kernel's bits\n",
                                name, (long long)n, (long long)key0, (long long)nk, (long long)R, (long long)D,
                                (long long)Dv, memcmp(b->s, c->s, sizeof b->s) ? "differs from" : "has",
                                memcmp(b->o, c->o, sizeof b->o) ? "differs from" : "has");
                }
        }
    /* a value that is not a bf16 value, in K or in V: refused */
    for (int which = 0; which < 2; which++) {
        const int64_t n = 20, D = 64;
        for (int64_t k = 0; k < n; k++)
            for (int64_t d = 0; d < D; d++)
                b->rows[k][d] = vrows[k][d] = bf16_round((float)th_rng_range(&rng, -1, 1));
        (which ? vrows[13] : b->rows[13])[5] = 1.0f + 0x1p-20f;
        if (prep((const void *const *)b->ptr, (const void *const *)vptr, ATTN_DTYPE_F32, n, D, D, tile) && fails++ < 5)
            fprintf(stderr, "REPRO %s kv_tile_prep took a %s value that is not a bf16 value\n", name,
                    which ? "V" : "K");
    }
    fprintf(stderr, "test_amx_emulated: %s prepared tiles: %lld calls bitwise against qk_tile / pv_tile, %d failures\n",
            name, (long long)compared, fails);
    free(b), free(c), free(vrows), free(tile), free(k16), free(v16);
    return fails;
}

/* qk_tile_kv (few-row Q·Kᵀ on bf16 rows read in place): rows packed, rows a cache-like stride apart, and rows not
 * evenly spaced (the kernel copies them); against float64 of bf16(q) · K within 2^-21 of Σ|terms|. Blocks of more than
 * 16 rows, head sizes that are not a multiple of 32 and f32 rows must give the avx512bf16 kernel's bits. Nothing
 * outside s[0..num_keys)[0..num_rows) is written. qk_kv_pf (the entry that also issues prefetches) gives the same
 * bits, advances each prefetch stream by 64 bytes per line issued and, on the tiles, issues every line. */
static int check_kv(const char *name, qk_kv_fn qk_kv, qk_kv_pf_fn qk_kv_pf) {
    static const int64_t rows[] = {1, 3, 4, 8, 16, 17};
    static const int64_t keys[] = {1, 2, 15, 16, 17, 31, 32, 33, 64};
    static const int64_t dims[] = {32, 64, 96, 128, 256};
    const struct attn_kernels *kbf = attn_dispatch_by_name("avx512bf16");
    if (!kbf) {
        fprintf(stderr, "test_amx_emulated: %s qk_tile_kv not run: the avx512bf16 table is not usable here\n", name);
        return 0;
    }
    enum { MAXSTRIDE = 3 * ATTN_HEAD_SIZE_MAX + 32 }; /* in bf16 elements */
    /* rows at slots up to K + K / 3 (the uneven layout), each up to MAXSTRIDE elements from the last */
    static uint16_t cache[(ATTN_KV_TILE + ATTN_KV_TILE / 3 + 1) * MAXSTRIDE];
    static float f32rows[ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX];
    static float q[ATTN_HEAD_SIZE_MAX * QB], qp[ATTN_HEAD_SIZE_MAX * QB], s[(ATTN_KV_TILE + 1) * QB],
        s2[(ATTN_KV_TILE + 1) * QB], s3[(ATTN_KV_TILE + 1) * QB];
    static char pf_area[64 * 512];
    const void *ptr[ATTN_KV_TILE];
    th_rng rng;
    th_rng_seed(&rng, 0xD3C);
    int fails = 0;
    double worst = 0;
    for (size_t i = 0; i < NELEM(q); i++)
        q[i] = (float)th_rng_range(&rng, -2, 2);
    for (size_t ri = 0; ri < NELEM(rows); ri++)
        for (size_t ki = 0; ki < NELEM(keys); ki++)
            for (size_t di = 0; di < NELEM(dims); di++)
                for (int layout = 0; layout < 4; layout++) { /* packed, strided, uneven, f32 rows */
                    const int64_t R = rows[ri], K = keys[ki], D = dims[di];
                    const int64_t stride = layout == 0 ? D : 3 * D + 32;
                    const attn_dtype dt = layout == 3 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
                    for (int64_t k = 0; k < K; k++) {
                        /* uneven: every third row one row further on */
                        const int64_t slot = layout == 2 ? k + k / 3 : k;
                        uint16_t *row = cache + slot * stride;
                        for (int64_t d = 0; d < D; d++) {
                            row[d] = attn_f32_to_bf16((float)th_rng_range(&rng, -1.5, 1.5));
                            f32rows[k][d] = (float)th_rng_range(&rng, -1.5, 1.5);
                        }
                        ptr[k] = layout == 3 ? (const void *)f32rows[k] : (const void *)row;
                    }
                    memcpy(qp, q, sizeof q);
                    kbf->qk_prep_kv(qp, R, D, dt);
                    for (size_t i = 0; i < NELEM(s); i++)
                        s[i] = s2[i] = CANARY;
                    qk_kv(qp, R, D, ptr, dt, K, s);
                    const int fallback = R > 16 || D % 32 != 0 || dt != ATTN_DTYPE_BF16;
                    for (size_t i = 0; i < NELEM(s3); i++)
                        s3[i] = CANARY;
                    attn_kv_prefetch pf = {pf_area, pf_area + 64 * 256, th_rng_int(&rng, 0, 200),
                                           th_rng_int(&rng, 0, 200)};
                    const attn_kv_prefetch pf0 = pf;
                    qk_kv_pf(qp, R, D, ptr, dt, K, s3, &pf);
                    const int64_t got1 = pf0.l1_lines - pf.l1_lines, got2 = pf0.l2_lines - pf.l2_lines;
                    if ((memcmp(s, s3, sizeof s) != 0 || got1 < 0 || got2 < 0 || pf.l1 != pf0.l1 + 64 * got1 ||
                         pf.l2 != pf0.l2 + 64 * got2 || (!fallback && (pf.l1_lines || pf.l2_lines))) &&
                        fails++ < 5)
                        fprintf(stderr,
                                "REPRO %s qk_tile_kv_pf R=%lld K=%lld D=%lld layout %d: bits or prefetch lines\n", name,
                                (long long)R, (long long)K, (long long)D, layout);
                    if (fallback)
                        kbf->qk_tile_kv(qp, R, D, ptr, dt, K, s2);
                    for (int64_t k = 0; k <= K; k++)
                        for (int64_t r = 0; r < QB; r++) {
                            const float g = s[k * QB + r];
                            const char *bad = NULL;
                            double ref = 0, mag = 0;
                            if (fallback) {
                                if (memcmp(&g, &s2[k * QB + r], 4))
                                    bad = "not the avx512bf16 bits";
                            } else if (k == K || r >= R) {
                                if (g != CANARY)
                                    bad = "written outside s[num_keys][num_rows]";
                            } else {
                                const uint16_t *row = (const uint16_t *)ptr[k];
                                for (int64_t d = 0; d < D; d++) {
                                    const double t = (double)bf16_round(q[d * QB + r]) * attn_bf16_to_f32(row[d]);
                                    ref += t, mag += fabs(t);
                                }
                                const double err = fabs(g - ref) / (mag + 1e-30);
                                if (err > worst)
                                    worst = err;
                                if (!(err <= 0x1p-21))
                                    bad = "outside 2^-21 of sum|terms|";
                            }
                            if (bad && fails++ < 5)
                                fprintf(stderr,
                                        "REPRO %s qk_tile_kv R=%lld K=%lld D=%lld layout %d [%lld][%lld] = %.9g: %s\n",
                                        name, (long long)R, (long long)K, (long long)D, layout, (long long)k,
                                        (long long)r, g, bad);
                        }
                }
    fprintf(stderr,
            "test_amx_emulated: %s qk_tile_kv: max relative error %.3g of sum|terms| (bound 2^-21), %d failures\n",
            name, worst, fails);
    return fails;
}

/* The quant table's bf16-path Q·Kᵀ (qk_bf16) and P·V (v_pairs_t + pv_pairs_t_bf16) on tiles against double sums of
 * the same bf16 products (within 2^-21 of Σ|terms|: an f32 chain of ≤ 256 terms, where a layout slip is off by
 * O(1)): rows 1–32, keys 1–64 (partial last groups and pairs), head sizes on the tiles and off them (Q·Kᵀ: the
 * avx512bf16 fallback; v_pairs_t refuses a head_size_v off 16 and writes nothing), K rows and V pairs with their own
 * strides; K rows, V pairs and P pairs past num_keys hold NaN (never read), s rows past num_keys and o_t lanes past
 * the row halves keep their canary. */
static int check_quant(const char *name, qk_bf16_fn qk, v_pairs_t_fn vpt, pv_pairs_t_fn pv) {
    static const int64_t rows[] = {1, 7, 16, 17, 32};
    static const int64_t keys[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 64};
    static const int64_t dims[] = {32, 40, 64, 80, 96, 128, 256};
    enum { KS = ATTN_HEAD_SIZE_MAX + 16, VS = ATTN_HEAD_SIZE_MAX + 8 };
    static uint32_t qp[ATTN_HEAD_SIZE_MAX / 2 * QB], pp[ATTN_KV_TILE / 2 * QB], vtp[ATTN_KV_TILE / 2 * VS];
    static uint32_t vtt[ATTN_HEAD_SIZE_MAX * (ATTN_KV_TILE / 2)];
    static uint16_t k16[ATTN_KV_TILE * KS];
    static float s[(ATTN_KV_TILE + 1) * QB], o[ATTN_HEAD_SIZE_MAX * QB], o0[ATTN_HEAD_SIZE_MAX * QB];
    float row_scale[QB], key_scale[ATTN_KV_TILE];
    th_rng rng;
    th_rng_seed(&rng, 0xB16);
    int fails = 0;
    double worst = 0;
    for (size_t ir = 0; ir < NELEM(rows); ir++)
        for (size_t ik = 0; ik < NELEM(keys); ik++)
            for (size_t id = 0; id < NELEM(dims); id++) {
                const int64_t R = rows[ir], K = keys[ik], D = dims[id], L = R > 16 ? 2 : 1, np = (K + 1) / 2;
                for (size_t i = 0; i < NELEM(qp); i++) /* lanes past the rows hold zeros, as the driver stages */
                    qp[i] = (int64_t)(i % QB) < R ? ((uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, -2, 2)) |
                                                     (uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, -2, 2)) << 16)
                                                  : 0u;
                for (int64_t k = 0; k < ATTN_KV_TILE; k++)
                    for (int64_t d = 0; d < KS; d++)
                        k16[k * KS + d] = k < K ? attn_f32_to_bf16((float)th_rng_range(&rng, -2, 2)) : 0x7FC0u;
                for (int r = 0; r < QB; r++)
                    row_scale[r] = (float)th_rng_range(&rng, 0.5, 2);
                for (int64_t k = 0; k < ATTN_KV_TILE; k++)
                    key_scale[k] = (float)th_rng_range(&rng, 0.5, 2);
                for (size_t i = 0; i < NELEM(s); i++)
                    s[i] = CANARY;
                const int scaled = (int)((ir + ik + id) % 2);
                qk(qp, R, D, k16, KS, K, scaled ? row_scale : NULL, scaled ? key_scale : NULL, s);
                for (int64_t k = 0; k <= K && k < ATTN_KV_TILE + 1; k++)
                    for (int64_t r = 0; r < QB; r++) {
                        const float g = s[k * QB + r];
                        if (k == K || r >= 16 * L) { /* past the keys or the written halves: the canary */
                            fails += g != CANARY;
                            continue;
                        }
                        double acc = 0, mag = 0;
                        for (int64_t d = 0; d < D; d++) {
                            const uint32_t w = qp[(d / 2) * QB + r];
                            const double t = (double)attn_bf16_to_f32((uint16_t)(d % 2 ? w >> 16 : w & 0xFFFF)) *
                                             (double)attn_bf16_to_f32(k16[k * KS + d]);
                            acc += t, mag += fabs(t);
                        }
                        double ref = acc;
                        if (scaled)
                            ref = ref * row_scale[r] * key_scale[k], mag *= row_scale[r] * key_scale[k];
                        const double err = fabs((double)g - ref) / (mag + 1e-30);
                        worst = err > worst ? err : worst;
                        if (!(fabs((double)g - ref) <= ldexp(mag, -21) + 1e-30)) {
                            if (fails++ < 5)
                                fprintf(stderr,
                                        "REPRO %s qk_bf16 R=%lld K=%lld D=%lld [%lld][%lld] = %.9g, expected %.9g\n",
                                        name, (long long)R, (long long)K, (long long)D, (long long)k, (long long)r, g,
                                        ref);
                        }
                    }
                /* P·V: head_size_v = D, pairs of keys (2j, 2j + 1), the last one's odd key 0 when K is odd */
                for (int64_t j = 0; j < ATTN_KV_TILE / 2; j++)
                    for (int64_t r = 0; r < QB; r++)
                        pp[j * QB + r] =
                            j >= np ? 0x7FC07FC0u /* past the pairs: never read */
                            : r < R
                                ? ((uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, 0, 1)) |
                                   (2 * j + 1 < K ? (uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, 0, 1)) << 16
                                                  : 0u))
                                : 0u;
                for (int64_t j = 0; j < ATTN_KV_TILE / 2; j++)
                    for (int64_t d = 0; d < VS; d++)
                        vtp[j * VS + d] = j < np ? ((uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, -1, 1)) |
                                                    (uint32_t)attn_f32_to_bf16((float)th_rng_range(&rng, -1, 1)) << 16)
                                                 : 0x7FC07FC0u;
                for (size_t i = 0; i < NELEM(o0); i++)
                    o0[i] = o[i] = (float)th_rng_range(&rng, -1, 1);
                for (size_t i = 0; i < NELEM(vtt); i++)
                    vtt[i] = 0x7FC07FC0u;
                if (!vpt(vtp, VS, K, D, vtt)) { /* refused (head_size_v off 16): nothing written, no P·V */
                    int untouched = D % 16 != 0;
                    for (size_t i = 0; i < NELEM(vtt); i++)
                        untouched &= vtt[i] == 0x7FC07FC0u;
                    fails += !untouched;
                    continue;
                }
                fails += D % 16 != 0; /* a shape it should have refused */
                pv(pp, K, R, vtt, D, o);
                for (int64_t d = 0; d < D; d++)
                    for (int64_t r = 0; r < QB; r++) {
                        const float g = o[d * QB + r];
                        if (r >= 16 * L) {
                            fails += g != o0[d * QB + r];
                            continue;
                        }
                        double acc = o0[d * QB + r], mag = fabs(acc);
                        for (int64_t j = 0; j < np; j++) {
                            const uint32_t a = pp[j * QB + r], v = vtp[j * VS + d];
                            const double t0 = (double)attn_bf16_to_f32((uint16_t)(a & 0xFFFF)) *
                                              (double)attn_bf16_to_f32((uint16_t)(v & 0xFFFF));
                            const double t1 = (double)attn_bf16_to_f32((uint16_t)(a >> 16)) *
                                              (double)attn_bf16_to_f32((uint16_t)(v >> 16));
                            acc += t0 + t1, mag += fabs(t0) + fabs(t1);
                        }
                        const double err = fabs((double)g - acc) / (mag + 1e-30);
                        worst = err > worst ? err : worst;
                        if (!(fabs((double)g - acc) <= ldexp(mag, -21) + 1e-30)) {
                            if (fails++ < 5)
                                fprintf(stderr,
                                        "REPRO %s pv_pairs_t_bf16 R=%lld K=%lld D=%lld [%lld][%lld] = %.9g, expected "
                                        "%.9g\n",
                                        name, (long long)R, (long long)K, (long long)D, (long long)d, (long long)r, g,
                                        acc);
                        }
                    }
            }
    fprintf(stderr,
            "test_amx_emulated: %s quant qk_bf16 / v_pairs_t + pv_pairs_t_bf16: max relative error %.3g of sum|terms| "
            "(bound 2^-21), %d failures\n",
            name, worst, fails);
    return fails;
}

static void test_amx_kernels(void **state) {
    (void)state;
    int fails = 0;
#if defined(ATTN_TEST_AMX_EMULATED)
    if (attn_isa_available("avx512bf16"))
        fails += check_table("amx (emulated tiles)", attn_k_qk_tile_amx_emulated, attn_k_pv_tile_amx_emulated) +
                 check_kv("amx (emulated tiles)", attn_k_qk_tile_kv_amx_emulated, attn_k_qk_tile_kv_pf_amx_emulated) +
                 check_quant("amx (emulated tiles)", attn_k_qk_bf16_amx_emulated, attn_k_v_pairs_t_amx_emulated,
                             attn_k_pv_pairs_t_bf16_amx_emulated) +
                 check_prep("amx (emulated tiles)", attn_k_kv_tile_prep_amx_emulated, attn_k_qk_tile_prep_amx_emulated,
                            attn_k_pv_tile_prep_amx_emulated, attn_k_qk_tile_amx_emulated, attn_k_pv_tile_amx_emulated);
    else
        fprintf(stderr, "test_amx_emulated: emulated tiles not run: this CPU lacks AVX512-BF16 (the kernels' "
                        "data preparation uses it)\n");
#else
    fprintf(stderr,
            "test_amx_emulated: emulated tiles not run: not an x86-64 build with the avx512 table and -mavx512bf16\n");
#endif
    int compiled = 0;
    for (int32_t i = 0; attn_isa_opt_in_name(i); i++)
        compiled |= strcmp(attn_isa_opt_in_name(i), "amx") == 0;
    const struct attn_kernels *kt = attn_dispatch_by_name("amx");
    if (kt)
        fails += check_table("amx (hardware)", kt->qk_tile, kt->pv_tile) +
                 check_kv("amx (hardware)", kt->qk_tile_kv, kt->qk_tile_kv_pf) +
                 check_prep("amx (hardware)", kt->kv_tile_prep, kt->qk_tile_prep, kt->pv_tile_prep, kt->qk_tile,
                            kt->pv_tile);
    const struct attn_quant_kernels *qt = kt ? attn_dispatch_quant(attn_dispatch_by_name("avx512")) : NULL;
    if (qt && strcmp(qt->name, "amx") == 0)
        fails += check_quant("amx (hardware)", qt->qk_bf16, qt->v_pairs_t, qt->pv_pairs_t_bf16);
    else if (kt)
        fprintf(stderr, "test_amx_emulated: amx quant table not run: the quant kernels here are \"%s\"\n",
                qt ? qt->name : "none");
    if (!kt)
        fprintf(stderr, "test_amx_emulated: amx hardware table not run: %s\n",
                compiled ? "this CPU/OS does not offer AMX-TILE + AMX-BF16 with the tile state enabled and the Linux "
                           "tile-data permission"
                         : "not compiled into this build");
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_amx_kernels)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
