/*
 * test_opt_in_tables.c — the opt-in kernel tables (attn_isa_opt_in_name; "avx512bf16" and "amx"), which are
 * not on the pinned chains and so are left out of the suites that iterate attn_isa_name:
 *  - listing: reachable by name only, never the default, not in attn_isa_name's list; a CPU without the
 *    feature refuses the name (INVALID_ARGUMENT) and the test prints why it skipped the rest;
 *  - kernels, bitwise: qk_tile_kv / pv_rows_kv on bf16 rows equal a scalar model of what the table documents
 *    (q and P rounded to bf16 with round to nearest even, VDPBF16PS = two FMAs per lane, the high bf16 of each
 *    pair first; odd counts padded with zero pairs), for row counts 1..32, key counts 1..130, head sizes 1..256;
 *    f32 / f16 / fp8 rows give the avx512 table's bits (every variant: amx's vbmi one where the CPU has VBMI).
 *    amx: its P·V is the avx512 table's (bitwise), its Q·Kᵀ on tiles (≤ 16 rows, head sizes a multiple of 32) is
 *    checked against float64 in test_amx_emulated.c, and every other bf16 Q·Kᵀ is the avx512bf16 model's;
 *  - end to end, against the oracle with the table's stated tolerance (docs/SEMANTICS.md §7): dense decode
 *    (GQA, MQA, causal bottom-right, sliding windows with odd starts, softcap, ALiBi) and plan-less paged decode
 *    over a bf16 cache; bitwise identical for 1, 2 and 3 threads, and a request's rows bitwise the same alone
 *    or in a batch; f32 / f16 KV bitwise the avx512 table's.
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

#define QB       ATTN_QB
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The stated tolerance of the opt-in bf16 table against the oracle (docs/SEMANTICS.md §7), for outputs in units of
 * max|V| plus a relative part, and for the LSE (natural log, absolute). q and P carry a bf16 rounding (2^-9
 * relative) each: scores move by ~2^-9 of Σ|q_d·k_d|, weights by that times ln 2, outputs by 2^-9 of |V|. */
#define OPT_BF16_ATOL     2e-2
#define OPT_BF16_RTOL     2e-2
#define OPT_BF16_LSE_ATOL 2e-2

/* ---------------------------------------------------------------------------------------------
 * The scalar model of the avx512bf16 table
 * --------------------------------------------------------------------------------------------- */
/* f32 → bf16 bits as VCVTNEPS2BF16: attn_f32_to_bf16's round to nearest even (NaN quieted), but a denormal
 * input gives a signed zero. */
static uint16_t m_bf16(float x) {
    const uint32_t u = attn_f32_bits(x);
    return (u & 0x7F800000u) == 0 ? (uint16_t)((u >> 16) & 0x8000u) : attn_f32_to_bf16(x);
}
static float m_wide(uint16_t h) { /* bf16 → f32, a denormal read as a signed zero (DAZ) */
    return attn_bf16_to_f32((h & 0x7F80u) ? h : (uint16_t)(h & 0x8000u));
}
static float m_ftz(float x) {
    return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x;
}
/* one VDPBF16PS lane: acc += a_hi·b_hi, then acc += a_lo·b_lo (each an FMA; the bf16 products are exact) */
static float m_dot(float acc, uint16_t a_lo, uint16_t a_hi, uint16_t b_lo, uint16_t b_hi) {
    acc = m_ftz(fmaf(m_wide(a_hi), m_wide(b_hi), acc));
    return m_ftz(fmaf(m_wide(a_lo), m_wide(b_lo), acc));
}

static uint16_t row_h(const void *row, int64_t d, int64_t n) {
    return d < n ? ((const uint16_t *)row)[d] : 0;
}

static void model_qk(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows, int64_t num_keys,
                     float *s) {
    for (int64_t b = 0; b < num_keys; b++)
        for (int64_t r = 0; r < num_rows; r++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < head_size; d += 2) {
                const uint16_t qlo = m_bf16(q_t[d * QB + r]),
                               qhi = d + 1 < head_size ? m_bf16(q_t[(d + 1) * QB + r]) : 0;
                acc = m_dot(acc, row_h(k_rows[b], d, head_size), row_h(k_rows[b], d + 1, head_size), qlo, qhi);
            }
            s[b * QB + r] = acc;
        }
}

static void model_pv(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows, int64_t head_size_v,
                     float *o_d) {
    for (int64_t r = 0; r < num_rows; r++)
        for (int64_t d = 0; d < head_size_v; d++) {
            float *o = o_d + r * head_size_v + attn_rows_kv_col(d, head_size_v, ATTN_DTYPE_BF16);
            float acc = *o;
            for (int64_t k = 0; k < num_keys; k += 2) {
                const uint16_t plo = m_bf16(p[k * QB + r]), phi = k + 1 < num_keys ? m_bf16(p[(k + 1) * QB + r]) : 0;
                const uint16_t vlo = ((const uint16_t *)v_rows[k])[d];
                const uint16_t vhi = k + 1 < num_keys ? ((const uint16_t *)v_rows[k + 1])[d] : 0;
                acc = m_dot(acc, vlo, vhi, plo, phi);
            }
            *o = acc;
        }
}

/* ---------------------------------------------------------------------------------------------
 * Listing
 * --------------------------------------------------------------------------------------------- */
/* The opt-in tables this file knows: avx512bf16 (VDPBF16PS decode kernels) and amx (those plus AMX prefill tiles). */
static const char *const opt_tables[] = {"avx512bf16", "amx"};

static const struct attn_kernels *opt_table(const char *name) {
    const struct attn_kernels *kt = attn_dispatch_by_name(name);
    int compiled = 0;
    for (int32_t i = 0; attn_isa_opt_in_name(i); i++)
        compiled |= strcmp(attn_isa_opt_in_name(i), name) == 0;
    if (!kt)
        fprintf(stderr, "test_opt_in_tables: %s not run: %s\n", name,
                !compiled ? "not compiled into this build (x86-64 with a compiler taking its flags)"
                : strcmp(name, "amx") == 0
                    ? "this CPU/OS does not offer AMX-TILE + AMX-BF16 with tile state and the Linux permission"
                    : "this CPU/OS does not report AVX512-BF16 (with AVX-512 F/BW/VL/DQ)");
    return kt;
}

/* bf16 queries are exact in the tables' bf16 operands and softmax_scale multiplies the finished dot product, so
 * the LSE keeps its bound at any logit magnitude: one key, head size 64, scale 1, q = 1 and k = c give the logit
 * 64·c exactly (rounding a log2 e-scaled query to bf16 gave 16.029 for 16 and 64.116 for 64). */
static void test_lse_bf16_queries(void **state) {
    (void)state;
    for (size_t t = 0; t < sizeof opt_tables / sizeof opt_tables[0]; t++) {
        if (!opt_table(opt_tables[t])) continue;
        attn_ctx *ctx = NULL;
        assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_isa(ctx, opt_tables[t]), ATTN_STATUS_OK);
        const float cs[4] = {0.25f, 1.0f, 8.0f, 64.0f};
        for (int ci = 0; ci < 4; ci++) {
            uint16_t q[64], k[64], v[64], o[64];
            for (int d = 0; d < 64; d++) q[d] = attn_f32_to_bf16(1.0f), k[d] = attn_f32_to_bf16(cs[ci]), v[d] = q[d];
            float lse = 0.0f;
            const int64_t s4[4] = {1, 1, 1, 64}, ls[3] = {1, 1, 1};
            attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_BF16, 4, s4), tk = attn_tensor_make(k, ATTN_DTYPE_BF16, 4, s4);
            attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_BF16, 4, s4), to = attn_tensor_make(o, ATTN_DTYPE_BF16, 4, s4);
            attn_tensor tl = attn_tensor_make(&lse, ATTN_DTYPE_F32, 3, ls);
            attn_params p;
            attn_params_init(&p);
            p.softmax_scale = 1.0f;
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, &tl), ATTN_STATUS_OK);
            const double want = 64.0 * (double)cs[ci];
            fprintf(stderr, "test_opt_in_tables: %s bf16 LSE of the logit %g: %.9g\n", opt_tables[t], want, (double)lse);
            assert_true(fabs((double)lse - want) <= OPT_BF16_LSE_ATOL + 2.0 * 5.9604644775390625e-8 * want);
        }
        attn_ctx_destroy(ctx);
    }
}

static void test_listing(void **state) {
    (void)state;
    assert_null(attn_isa_opt_in_name(-1));
    int32_t n = 0;
    while (attn_isa_opt_in_name(n))
        n++;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const char *env = getenv("ATTN_ISA");
    for (int32_t i = 0; i < n; i++) {
        const char *name = attn_isa_opt_in_name(i);
        fprintf(stderr, "test_opt_in_tables: opt-in table %s: %s\n", name,
                attn_isa_available(name) ? "available" : "not runnable on this CPU");
        for (int32_t j = 0; j < attn_isa_count(); j++)
            assert_string_not_equal(attn_isa_name(j), name);
        if (!env || !*env)
            assert_string_not_equal(attn_ctx_isa(ctx), name); /* never the default */
        if (attn_isa_available(name)) {
            assert_int_equal(attn_ctx_set_isa(ctx, name), ATTN_STATUS_OK);
            assert_string_equal(attn_ctx_isa(ctx), name);
        } else {
            assert_int_equal(attn_ctx_set_isa(ctx, name), ATTN_STATUS_INVALID_ARGUMENT);
        }
    }
    assert_null(attn_isa_opt_in_name(n));
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Kernels against the model, bitwise
 * --------------------------------------------------------------------------------------------- */
#define MAXK 130
typedef struct kbuf {
    float q_t[ATTN_HEAD_SIZE_MAX * QB], q_prep[ATTN_HEAD_SIZE_MAX * QB];
    float p[MAXK * QB];
    float s[MAXK * QB], s_ref[MAXK * QB];
    float o[QB * ATTN_HEAD_SIZE_MAX], o_ref[QB * ATTN_HEAD_SIZE_MAX];
    uint16_t rows[MAXK][ATTN_HEAD_SIZE_MAX];
    float rows32[MAXK][ATTN_HEAD_SIZE_MAX];
    uint8_t rows8[MAXK][ATTN_HEAD_SIZE_MAX]; /* finite codes of both fp8 formats */
    const void *ptr[MAXK], *ptr32[MAXK], *ptr8[MAXK];
} kbuf;

static void kbuf_fill(kbuf *b, th_rng *r) {
    for (size_t i = 0; i < NELEM(b->q_t); i++)
        b->q_t[i] = (float)th_rng_range(r, -2, 2);
    for (size_t i = 0; i < NELEM(b->p); i++)
        b->p[i] = (float)th_rng_uniform(r);
    for (int k = 0; k < MAXK; k++) {
        for (int d = 0; d < ATTN_HEAD_SIZE_MAX; d++) {
            b->rows[k][d] = m_bf16((float)th_rng_range(r, -1.5, 1.5));
            b->rows32[k][d] = m_wide(b->rows[k][d]);
            b->rows8[k][d] = (uint8_t)(th_rng_range(r, 0, 2) >= 1 ? 0x80 : 0) | (uint8_t)th_rng_range(r, 0, 0x78);
        }
        b->ptr[k] = b->rows[k], b->ptr32[k] = b->rows32[k], b->ptr8[k] = b->rows8[k];
    }
}

static void kernels_model(const struct attn_kernels *kt) {
    const struct attn_kernels *k512 = attn_dispatch_by_name("avx512");
    assert_non_null(k512);
    const int amx = strcmp(kt->name, "amx") == 0;
    static const int64_t rows[] = {1, 2, 3, 4, 5, 8, 12, 13, 16, 17, 24, 32};
    static const int64_t keys[] = {1, 2, 3, 15, 16, 17, 33, 64, 65, 130};
    static const int64_t dims[] = {1, 2, 3, 16, 31, 32, 33, 48, 64, 96, 100, 128, 192, 255, 256};
    kbuf *b = (kbuf *)calloc(1, sizeof *b);
    th_rng rng;
    th_rng_seed(&rng, 0xBF16);
    kbuf_fill(b, &rng);
    int fails = 0;
    for (size_t ri = 0; ri < NELEM(rows); ri++)
        for (size_t ki = 0; ki < NELEM(keys); ki++)
            for (size_t di = 0; di < NELEM(dims); di++) {
                const int64_t R = rows[ri], K = keys[ki], D = dims[di];
                /* qk: the kernel's table entry is called on ≤ ATTN_KV_TILE keys; check those */
                const int tiles = amx && R <= 16 && D % 32 == 0; /* amx's Q·Kᵀ on tiles: test_amx_emulated.c */
                if (K <= ATTN_KV_TILE && !tiles) {
                    memset(b->s, 0, sizeof b->s), memset(b->s_ref, 0, sizeof b->s_ref);
                    memcpy(b->q_prep, b->q_t, sizeof b->q_t);
                    if (kt->qk_prep_kv)
                        kt->qk_prep_kv(b->q_prep, R, D, ATTN_DTYPE_BF16);
                    kt->qk_tile_kv(b->q_prep, R, D, b->ptr, ATTN_DTYPE_BF16, K, b->s);
                    model_qk(b->q_t, R, D, b->ptr, K, b->s_ref);
                    for (int64_t k = 0; k < K; k++)
                        for (int64_t r = 0; r < R; r++)
                            if (attn_f32_bits(b->s[k * QB + r]) != attn_f32_bits(b->s_ref[k * QB + r])) {
                                if (fails++ < 5)
                                    fprintf(stderr, "REPRO qk R=%lld K=%lld D=%lld s[%lld][%lld] %a vs model %a\n",
                                            (long long)R, (long long)K, (long long)D, (long long)k, (long long)r,
                                            b->s[k * QB + r], b->s_ref[k * QB + r]);
                            }
                }
                if (K <= ATTN_KV_TILE) {
                    /* f32 rows: the avx512 table's bits (qk_prep_kv leaves q_t alone for them) */
                    memcpy(b->q_prep, b->q_t, sizeof b->q_t);
                    if (kt->qk_prep_kv)
                        kt->qk_prep_kv(b->q_prep, R, D, ATTN_DTYPE_F32);
                    assert_memory_equal(b->q_prep, b->q_t, sizeof b->q_t);
                    kt->qk_tile_kv(b->q_t, R, D, b->ptr32, ATTN_DTYPE_F32, K, b->s);
                    k512->qk_tile_kv(b->q_t, R, D, b->ptr32, ATTN_DTYPE_F32, K, b->s_ref);
                    for (int64_t k = 0; k < K; k++)
                        for (int64_t r = 0; r < R; r++)
                            if (attn_f32_bits(b->s[k * QB + r]) != attn_f32_bits(b->s_ref[k * QB + r]) && fails++ < 5)
                                fprintf(stderr, "REPRO qk f32 R=%lld K=%lld D=%lld differs from avx512\n", (long long)R,
                                        (long long)K, (long long)D);
                    /* fp8 rows (the prefetching entry the decode driver calls): the avx512 table's bits too */
                    for (int e5 = 0; e5 < 2; e5++) {
                        const attn_dtype dt = e5 ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_FP8_E4M3;
                        attn_kv_prefetch none = {0};
                        memset(b->s, 0, sizeof b->s), memset(b->s_ref, 0, sizeof b->s_ref);
                        if (kt->qk_tile_kv_pf)
                            kt->qk_tile_kv_pf(b->q_t, R, D, b->ptr8, dt, K, b->s, &none);
                        else
                            kt->qk_tile_kv(b->q_t, R, D, b->ptr8, dt, K, b->s);
                        k512->qk_tile_kv(b->q_t, R, D, b->ptr8, dt, K, b->s_ref);
                        if (memcmp(b->s, b->s_ref, sizeof b->s) != 0 && fails++ < 5)
                            fprintf(stderr, "REPRO qk %s R=%lld K=%lld D=%lld differs from avx512\n",
                                    attn_dtype_name(dt), (long long)R, (long long)K, (long long)D);
                    }
                }
                /* pv: o_d starts from a random accumulator */
                for (int64_t i = 0; i < R * D; i++)
                    b->o[i] = b->o_ref[i] = (float)th_rng_range(&rng, -1, 1);
                kt->pv_rows_kv(b->p, K, R, b->ptr, ATTN_DTYPE_BF16, D, b->o);
                if (amx) /* amx: the avx512 table's P·V */
                    k512->pv_rows_kv(b->p, K, R, b->ptr, ATTN_DTYPE_BF16, D, b->o_ref);
                else
                    model_pv(b->p, K, R, b->ptr, D, b->o_ref);
                for (int64_t i = 0; i < R * D; i++)
                    if (attn_f32_bits(b->o[i]) != attn_f32_bits(b->o_ref[i]) && fails++ < 5)
                        fprintf(stderr, "REPRO pv R=%lld K=%lld D=%lld o[%lld] %a vs model %a\n", (long long)R,
                                (long long)K, (long long)D, (long long)i, b->o[i], b->o_ref[i]);
                for (int64_t i = 0; i < R * D; i++)
                    b->o[i] = b->o_ref[i] = (float)th_rng_range(&rng, -1, 1);
                kt->pv_rows_kv(b->p, K, R, b->ptr32, ATTN_DTYPE_F32, D, b->o);
                k512->pv_rows_kv(b->p, K, R, b->ptr32, ATTN_DTYPE_F32, D, b->o_ref);
                for (int64_t i = 0; i < R * D; i++)
                    if (attn_f32_bits(b->o[i]) != attn_f32_bits(b->o_ref[i]) && fails++ < 5)
                        fprintf(stderr, "REPRO pv f32 R=%lld K=%lld D=%lld differs from avx512\n", (long long)R,
                                (long long)K, (long long)D);
                for (int e5 = 0; e5 < 2; e5++) { /* fp8 rows: the avx512 table's bits */
                    const attn_dtype dt = e5 ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_FP8_E4M3;
                    attn_kv_prefetch none = {0};
                    for (int64_t i = 0; i < R * D; i++)
                        b->o[i] = b->o_ref[i] = (float)th_rng_range(&rng, -1, 1);
                    if (kt->pv_rows_kv_pf)
                        kt->pv_rows_kv_pf(b->p, K, R, b->ptr8, dt, D, b->o, &none);
                    else
                        kt->pv_rows_kv(b->p, K, R, b->ptr8, dt, D, b->o);
                    k512->pv_rows_kv(b->p, K, R, b->ptr8, dt, D, b->o_ref);
                    if (memcmp(b->o, b->o_ref, (size_t)(R * D) * sizeof(float)) != 0 && fails++ < 5)
                        fprintf(stderr, "REPRO pv %s R=%lld K=%lld D=%lld differs from avx512\n", attn_dtype_name(dt),
                                (long long)R, (long long)K, (long long)D);
                }
            }
    free(b);
    assert_int_equal(fails, 0);
}

static void test_kernels_model(void **state) {
    (void)state;
    for (size_t t = 0; t < NELEM(opt_tables); t++) {
        const struct attn_kernels *v[2];
        const char *why_not = NULL;
        const int nv = opt_table(opt_tables[t]) ? attn_dispatch_variants(opt_tables[t], v, &why_not) : 0;
        for (int i = 0; i < nv; i++) /* amx: the plain table and its vbmi variant where the CPU has VBMI */
            kernels_model(v[i]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * End to end
 * --------------------------------------------------------------------------------------------- */
typedef struct dcase {
    int64_t batch, seq_q, seq_k, num_heads, num_kv_heads, head_size;
    int32_t causal, window_left;
    float softcap;
    int alibi;
} dcase;

static double max_abs(const void *buf, attn_dtype dt, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)th_get(buf, dt, i)));
    return m;
}

/* Runs one dense case on `isa` with 1, 2, 3 threads (bitwise equal), compares with the oracle (stated tolerance
 * when the few-row bf16 kernels run, else the bits of the avx512 table); returns the failures. */
static int run_dense(const char *isa, const dcase *c, attn_dtype q_dtype, attn_dtype kv_dtype, uint64_t seed,
                     double *worst) {
    th_rng rng;
    th_rng_seed(&rng, seed);
    const int64_t B = c->batch, Sq = c->seq_q, Sk = c->seq_k, H = c->num_heads, G = c->num_kv_heads, D = c->head_size;
    const size_t nq = (size_t)(B * Sq * H * D), nk = (size_t)(B * Sk * G * D), nl = (size_t)(B * H * Sq);
    void *q = th_alloc_fill(&rng, q_dtype, nq, -2, 2), *k = th_alloc_fill(&rng, kv_dtype, nk, -1.5, 1.5);
    void *v = th_alloc_fill(&rng, kv_dtype, nk, -1, 1);
    void *o[4], *oref = th_alloc_nan(q_dtype, nq);
    float *l[4], *lref = (float *)th_alloc_nan(ATTN_DTYPE_F32, nl);
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, G, D}, ls[3] = {B, H, Sq};
    attn_tensor tq = attn_tensor_make(q, q_dtype, 4, qs), tk = attn_tensor_make(k, kv_dtype, 4, ks);
    attn_tensor tv = attn_tensor_make(v, kv_dtype, 4, ks);
    float slopes[64];
    for (int64_t h = 0; h < H; h++)
        slopes[h] = 0.05f * (float)(h + 1);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = c->causal, prm.window_left = c->window_left, prm.softcap = c->softcap;
    if (c->alibi)
        prm.alibi_slopes = slopes;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    int fails = 0;
    for (int i = 0; i < 4; i++) { /* 0..2: the opt-in table on 1, 2, 3 threads; 3: avx512 on 2 threads */
        o[i] = th_alloc_nan(q_dtype, nq), l[i] = (float *)th_alloc_nan(ATTN_DTYPE_F32, nl);
        attn_tensor to = attn_tensor_make(o[i], q_dtype, 4, qs), tl = attn_tensor_make(l[i], ATTN_DTYPE_F32, 3, ls);
        assert_int_equal(attn_ctx_set_isa(ctx, i < 3 ? isa : "avx512"), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_num_threads(ctx, i < 3 ? i + 1 : 2), ATTN_STATUS_OK);
        attn_status st = attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &prm, &to, &tl);
        if (st != ATTN_STATUS_OK)
            fprintf(stderr, "attn_forward: %s\n", attn_last_error());
        assert_int_equal(st, ATTN_STATUS_OK);
        if (i > 0 && i < 3 && (memcmp(o[i], o[0], nq * attn_dtype_size(q_dtype)) || memcmp(l[i], l[0], nl * 4))) {
            fprintf(stderr, "REPRO dense seed=%llu threads=%d differs from 1 thread\n", (unsigned long long)seed,
                    i + 1);
            fails++;
        }
    }
    attn_tensor to = attn_tensor_make(o[0], q_dtype, 4, qs), tl = attn_tensor_make(l[0], ATTN_DTYPE_F32, 3, ls);
    attn_tensor tr = attn_tensor_make(oref, q_dtype, 4, qs), tlr = attn_tensor_make(lref, ATTN_DTYPE_F32, 3, ls);
    if (kv_dtype != ATTN_DTYPE_BF16) { /* the avx512 bits (bf16: blocks of <= 16 rows take the VDPBF16PS kernels,
                                          and amx's bigger ones the tiles) */
        if (memcmp(o[0], o[3], nq * attn_dtype_size(q_dtype)) || memcmp(l[0], l[3], nl * 4)) {
            fprintf(stderr, "REPRO dense %s seed=%llu kv=%s Sq=%lld: not the avx512 bits\n", isa,
                    (unsigned long long)seed, attn_dtype_name(kv_dtype), (long long)Sq);
            fails++;
        }
    }
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &prm, &tr, &tlr), ATTN_STATUS_OK);
    th_tol tol = th_tol_for(q_dtype);
    if (tol.atol < OPT_BF16_ATOL)
        tol.atol = OPT_BF16_ATOL, tol.rtol = OPT_BF16_RTOL;
    if (tol.lse_atol < OPT_BF16_LSE_ATOL)
        tol.lse_atol = OPT_BF16_LSE_ATOL;
    size_t bad = 0, bad_l = 0;
    const double err = th_compare(&to, &tr, tol, max_abs(v, kv_dtype, nk), &bad);
    th_compare_lse(&tl, &tlr, tol, &bad_l);
    if (err > *worst)
        *worst = err;
    if (bad || bad_l) {
        fprintf(stderr,
                "REPRO dense %s seed=%llu q=%s kv=%s B=%lld Sq=%lld Sk=%lld H=%lld/%lld D=%lld: %zu outputs, "
                "%zu lse outside the tolerance (max err %.3g)\n",
                isa, (unsigned long long)seed, attn_dtype_name(q_dtype), attn_dtype_name(kv_dtype), (long long)B,
                (long long)Sq, (long long)Sk, (long long)H, (long long)G, (long long)D, bad, bad_l, err);
        fails++;
    }
    for (int i = 0; i < 4; i++)
        free(o[i]), free(l[i]);
    free(q), free(k), free(v), free(oref), free(lref);
    attn_ctx_destroy(ctx);
    return fails;
}

static void dense_cases(const char *isa) {
    const int small = th_test_small();
    const dcase cases[] = {
        {3, 1, 700, 8, 2, 128, 1, -1, 0, 0},   {2, 1, 1500, 32, 8, 128, 1, -1, 0, 0},
        {2, 3, 300, 8, 2, 64, 1, -1, 0, 0},    {1, 4, 1100, 4, 1, 96, 1, 301, 0, 0},
        {2, 1, 513, 6, 6, 256, 0, 127, 0, 0},  {1, 2, 257, 16, 1, 80, 1, -1, 30.0f, 0},
        {2, 1, 640, 8, 4, 33, 1, -1, 0, 1},    {1, 1, 1, 4, 1, 64, 1, -1, 0, 0},
        {1, 16, 200, 4, 4, 128, 1, -1, 0, 0},  {1, 40, 300, 4, 2, 64, 1, -1, 0, 0},   /* prefill blocks */
        {1, 40, 1100, 4, 2, 64, 1, 301, 0, 0}, {2, 7, 2000, 8, 4, 64, 1, 1001, 0, 0}, /* odd window starts */
        {1, 130, 300, 8, 2, 128, 1, -1, 0, 0}, {2, 70, 70, 4, 4, 96, 0, -1, 0, 1},    /* prefill (amx tiles) */
    };
    const attn_dtype qd[] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16};
    const attn_dtype kd[] = {ATTN_DTYPE_BF16, ATTN_DTYPE_F32, ATTN_DTYPE_F16};
    int fails = 0;
    double worst = 0;
    for (size_t i = 0; i < NELEM(cases); i++)
        for (size_t a = 0; a < NELEM(qd); a++)
            for (size_t b = 0; b < NELEM(kd); b++) {
                if (small && (b > 0 || i % 2))
                    continue;
                if (qd[a] != kd[b] && kd[b] != ATTN_DTYPE_BF16 && qd[a] != ATTN_DTYPE_F32)
                    continue;
                fails += run_dense(isa, &cases[i], qd[a], kd[b], 1000 + i * 10 + a * 3 + b, &worst);
            }
    fprintf(stderr, "test_opt_in_tables: %s dense: max |out - oracle| = %.3g (units of max|V|; tolerance %.3g)\n", isa,
            worst, OPT_BF16_ATOL);
    assert_int_equal(fails, 0);
}

static void test_dense(void **state) {
    (void)state;
    for (size_t t = 0; t < NELEM(opt_tables); t++)
        if (opt_table(opt_tables[t]))
            dense_cases(opt_tables[t]);
}

/* Plan-less paged decode over a bf16 cache: thread counts and batch composition bitwise, the oracle within the
 * tolerance. Requests: seq_lens odd and even, one long enough for several split-KV partitions. */
static void run_paged(const char *isa, int64_t window_left) {
    th_rng rng;
    th_rng_seed(&rng, 77);
    const int64_t R = 5, H = 16, G = 4, D = 128, BS = 16;
    const int32_t seq_lens[5] = {1, 37, 1200, 511, 96};
    int64_t nblocks = 0, maxb = 0;
    for (int64_t r = 0; r < R; r++) {
        const int64_t nb = (seq_lens[r] + BS - 1) / BS;
        nblocks += nb;
        if (nb > maxb)
            maxb = nb;
    }
    int32_t *bt = (int32_t *)calloc((size_t)(R * maxb), sizeof(int32_t));
    for (int64_t r = 0, next = 0; r < R; r++)
        for (int64_t b = 0; b < (seq_lens[r] + BS - 1) / BS; b++)
            bt[r * maxb + b] = (int32_t)(nblocks - 1 - next++);
    const size_t ncache = (size_t)(2 * nblocks * BS * G * D);
    void *cache = th_alloc_fill(&rng, ATTN_DTYPE_BF16, ncache, -1.5, 1.5);
    const size_t nq = (size_t)(R * H * D);
    float *q = (float *)th_alloc_fill(&rng, ATTN_DTYPE_F32, nq, -2, 2);
    int32_t qsl[6] = {0, 1, 2, 3, 4, 5};
    int64_t cs[5] = {2, nblocks, BS, G, D}, qs[3] = {R, H, D}, one[1] = {R + 1}, rs[1] = {R}, bs2[2] = {R, maxb};
    int64_t ls[2] = {H, R};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_BF16, 5, cs), tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one),
                tsl = attn_tensor_make((void *)seq_lens, ATTN_DTYPE_I32, 1, rs);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bs2);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = 1;
    prm.window_left = (int32_t)window_left;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
    float *o[3], *l[3];
    int fails = 0;
    for (int t = 0; t < 3; t++) {
        o[t] = (float *)th_alloc_nan(ATTN_DTYPE_F32, nq), l[t] = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * R));
        attn_tensor to = attn_tensor_make(o[t], ATTN_DTYPE_F32, 3, qs),
                    tl = attn_tensor_make(l[t], ATTN_DTYPE_F32, 2, ls);
        assert_int_equal(attn_ctx_set_num_threads(ctx, t + 1), ATTN_STATUS_OK);
        assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &prm, &to, &tl), ATTN_STATUS_OK);
        if (t > 0 && (memcmp(o[t], o[0], nq * 4) || memcmp(l[t], l[0], (size_t)(H * R) * 4))) {
            fprintf(stderr, "REPRO paged: %d threads differ from 1\n", t + 1);
            fails++;
        }
    }
    /* each request alone (batch composition) */
    for (int64_t r = 0; r < R; r++) {
        int32_t qsl1[2] = {0, 1};
        int64_t qs1[3] = {1, H, D}, two[1] = {2}, r1[1] = {1}, bs1[2] = {1, maxb}, ls1[2] = {H, 1};
        float o1[16 * 128], l1[16];
        attn_tensor tq1 = attn_tensor_make(q + r * H * D, ATTN_DTYPE_F32, 3, qs1),
                    to1 = attn_tensor_make(o1, ATTN_DTYPE_F32, 3, qs1);
        attn_tensor tl1 = attn_tensor_make(l1, ATTN_DTYPE_F32, 2, ls1),
                    tq1sl = attn_tensor_make(qsl1, ATTN_DTYPE_I32, 1, two);
        attn_tensor ts1 = attn_tensor_make((void *)(seq_lens + r), ATTN_DTYPE_I32, 1, r1);
        attn_tensor tb1 = attn_tensor_make(bt + r * maxb, ATTN_DTYPE_I32, 2, bs1);
        assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
        assert_int_equal(attn_paged_attention(ctx, &tq1, &tc, &tq1sl, &ts1, &tb1, &prm, &to1, &tl1), ATTN_STATUS_OK);
        int diff = memcmp(o1, o[0] + r * H * D, (size_t)(H * D) * 4) != 0;
        for (int64_t h = 0; h < H; h++)
            diff |= attn_f32_bits(l1[h]) != attn_f32_bits(l[0][h * R + r]);
        /* the dense entry on the request's keys gathered from the cache: the same bits (another schedule) */
        const int64_t L = seq_lens[r];
        uint16_t *kg = (uint16_t *)malloc((size_t)(2 * L * G * D) * 2), *vg = kg + L * G * D;
        for (int64_t t = 0; t < L; t++) {
            const int64_t blk = bt[r * maxb + t / BS], off = ((blk * BS + t % BS) * G) * D;
            memcpy(kg + t * G * D, (const uint16_t *)cache + off, (size_t)(G * D) * 2);
            memcpy(vg + t * G * D, (const uint16_t *)cache + (int64_t)(ncache / 2) + off, (size_t)(G * D) * 2);
        }
        int64_t dq[4] = {1, 1, H, D}, dk[4] = {1, L, G, D}, dl[3] = {1, H, 1};
        float o2[16 * 128], l2[16];
        attn_tensor tdq = attn_tensor_make(q + r * H * D, ATTN_DTYPE_F32, 4, dq),
                    tdo = attn_tensor_make(o2, ATTN_DTYPE_F32, 4, dq);
        attn_tensor tdk = attn_tensor_make(kg, ATTN_DTYPE_BF16, 4, dk),
                    tdv = attn_tensor_make(vg, ATTN_DTYPE_BF16, 4, dk);
        attn_tensor tdl = attn_tensor_make(l2, ATTN_DTYPE_F32, 3, dl);
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tdq, &tdk, &tdv, &prm, &tdo, &tdl), ATTN_STATUS_OK);
        diff |= (memcmp(o2, o1, sizeof o2) != 0) << 1;
        for (int64_t h = 0; h < H; h++)
            diff |= (attn_f32_bits(l1[h]) != attn_f32_bits(l2[h])) << 1;
        free(kg);
        if (diff) {
            fprintf(stderr, "REPRO paged: request %lld %s\n", (long long)r,
                    diff & 1 ? "alone differs from the batch" : "differs from attn_forward on its gathered keys");
            fails++;
        }
    }
    float *oref = (float *)th_alloc_nan(ATTN_DTYPE_F32, nq),
          *lref = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * R));
    attn_tensor tr = attn_tensor_make(oref, ATTN_DTYPE_F32, 3, qs), tlr = attn_tensor_make(lref, ATTN_DTYPE_F32, 2, ls);
    attn_tensor to = attn_tensor_make(o[0], ATTN_DTYPE_F32, 3, qs), tl = attn_tensor_make(l[0], ATTN_DTYPE_F32, 2, ls);
    assert_int_equal(attn_ref_paged_attention(&tq, &tc, &tqsl, &tsl, &tbt, &prm, &tr, &tlr), ATTN_STATUS_OK);
    th_tol tol = {OPT_BF16_ATOL, OPT_BF16_RTOL, OPT_BF16_LSE_ATOL};
    size_t bad = 0, bad_l = 0;
    const double err = th_compare(&to, &tr, tol, 1.5, &bad);
    th_compare_lse(&tl, &tlr, tol, &bad_l);
    fprintf(stderr, "test_opt_in_tables: %s paged: max |out - oracle| = %.3g (tolerance %.3g)\n", isa, err,
            OPT_BF16_ATOL * 1.5);
    if (bad || bad_l)
        fprintf(stderr, "REPRO paged: %zu outputs, %zu lse outside the tolerance\n", bad, bad_l), fails++;
    for (int t = 0; t < 3; t++)
        free(o[t]), free(l[t]);
    free(oref), free(lref), free(q), free(cache), free(bt);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* Paged decode over an fp8 (E4M3) cache: the opt-in tables' few-row kernels fall back to the avx512 table's, which
 * read fp8 rows in place (fp8_kv) bitwise equal to widening them first, so out and LSE must be the avx512 bits, for
 * 1 and 2 threads. */
static void run_paged_fp8(const char *isa) {
    th_rng rng;
    th_rng_seed(&rng, 78);
    const int64_t R = 3, H = 8, G = 2, D = 128, BS = 16, NB = 96;
    const int32_t seq_lens[3] = {1, 700, 333};
    int32_t bt[3 * 44];
    for (int64_t i = 0; i < 3 * 44; i++)
        bt[i] = (int32_t)((i * 37) % NB);
    const size_t ncache = (size_t)(2 * NB * BS * G * D);
    uint8_t *cache = (uint8_t *)malloc(ncache); /* random finite E4M3 codes (0x7F / 0xFF are NaN) */
    for (size_t i = 0; i < ncache; i++) {
        const uint8_t c = (uint8_t)th_rng_range(&rng, 0, 256);
        cache[i] = (c & 0x7F) == 0x7F ? (uint8_t)(c ^ 1) : c;
    }
    float *q = (float *)th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(R * H * D), -2, 2);
    int32_t qsl[4] = {0, 1, 2, 3};
    int64_t cs[5] = {2, NB, BS, G, D}, qs[3] = {R, H, D}, one[1] = {R + 1}, rs[1] = {R}, bs2[2] = {R, 44};
    int64_t ls[2] = {H, R};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_FP8_E4M3, 5, cs),
                tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one),
                tsl = attn_tensor_make((void *)seq_lens, ATTN_DTYPE_I32, 1, rs);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bs2);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = 1;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    float o[3][8 * 3 * 128], l[3][8 * 3];
    int fails = 0;
    for (int t = 0; t < 3; t++) { /* 0: avx512, 2 threads; 1, 2: the opt-in table on 1 and 2 threads */
        attn_tensor to = attn_tensor_make(o[t], ATTN_DTYPE_F32, 3, qs),
                    tl = attn_tensor_make(l[t], ATTN_DTYPE_F32, 2, ls);
        assert_int_equal(attn_ctx_set_isa(ctx, t == 0 ? "avx512" : isa), ATTN_STATUS_OK);
        assert_int_equal(attn_ctx_set_num_threads(ctx, t == 1 ? 1 : 2), ATTN_STATUS_OK);
        assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &prm, &to, &tl), ATTN_STATUS_OK);
        if (t > 0 && (memcmp(o[t], o[0], sizeof o[0]) || memcmp(l[t], l[0], sizeof l[0]))) {
            fprintf(stderr, "REPRO paged fp8 %s, %d thread(s): not the avx512 bits\n", isa, t);
            fails++;
        }
    }
    free(cache), free(q);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_paged_decode(void **state) {
    (void)state;
    for (size_t t = 0; t < NELEM(opt_tables); t++) {
        if (!opt_table(opt_tables[t]))
            continue;
        run_paged(opt_tables[t], -1);
        run_paged(opt_tables[t], 332); /* odd first visible keys (seq_len − 1 − 332 for the long requests) */
        run_paged_fp8(opt_tables[t]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_listing),
        cmocka_unit_test(test_kernels_model),
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_paged_decode),
        cmocka_unit_test(test_lse_bf16_queries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
