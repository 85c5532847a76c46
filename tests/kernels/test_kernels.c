/*
 * test_kernels.c — every kernel of every compiled and usable ISA table against a double-precision
 * computation and against the generic table, over odd sizes (num_rows 1..32, num_keys 1..64, head_size
 * 1..256). It also checks lane invariance — a row's result must not depend on num_rows (compare lanes of a
 * num_rows = r call with the same lanes of a num_rows = 32 call, bitwise), which is what batch and chunk
 * invariance of the driver rests on — and the softmax rules for −inf (exact zeros, untouched state for an
 * all-masked tile).
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

#define QB ATTN_QB
#define FLT_U 5.9604644775390625e-8 /* 2^-24, unit roundoff of float32 */

/* ---------------------------------------------------------------------------------------------
 * Fixtures
 * --------------------------------------------------------------------------------------------- */
typedef struct tiles {
    float q_t[ATTN_HEAD_SIZE_MAX * QB];
    float s[ATTN_KV_TILE * QB];
    float o_t[ATTN_HEAD_SIZE_MAX * QB];
    float m[QB], l[QB];
    float rows[ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX];
    const float *row_ptr[ATTN_KV_TILE];
} tiles;

static const int32_t row_counts[] = {1, 2, 3, 5, 7, 8, 9, 13, 16, 17, 24, 31, 32};
static const int64_t key_counts[] = {1, 2, 3, 4, 5, 7, 13, 31, 33, 63, 64};
static const int64_t head_sizes[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33, 64, 96, 100, 128, 255, 256};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static tiles *tiles_random(th_rng *r, int64_t head_size, int64_t num_keys) {
    tiles *t = (tiles *)calloc(1, sizeof *t);
    for (int64_t i = 0; i < ATTN_HEAD_SIZE_MAX * QB; i++) t->q_t[i] = (float)th_rng_range(r, -1, 1);
    for (int64_t i = 0; i < ATTN_HEAD_SIZE_MAX * QB; i++) t->o_t[i] = (float)th_rng_range(r, -1, 1);
    for (int64_t k = 0; k < ATTN_KV_TILE; k++) {
        for (int64_t d = 0; d < ATTN_HEAD_SIZE_MAX; d++) t->rows[k][d] = (float)th_rng_range(r, -1, 1);
        /* every other key row is a pointer in reverse order: kernels must follow the pointers */
        t->row_ptr[k] = t->rows[(k % 2) ? ATTN_KV_TILE - 1 - k : k];
    }
    (void)head_size, (void)num_keys;
    return t;
}

/* The usable tables other than none, each variant of a table too (neon and, where HWCAP2 reports BF16, its
 * bf16 variant: attn_dispatch_variants): fills tables, returns the count (generic first). A REPRO line names a
 * variant as the table's name (the list printed here tells which ones ran). */
static int usable_tables(const struct attn_kernels **tables) {
    static int printed;
    int n = 0;
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *why_not = NULL;
        const int nv = attn_dispatch_variants(attn_isa_name(i), tables + n, &why_not);
        for (int v = 0; v < nv && !printed; v++)
            fprintf(stderr, "test_kernels: table %s%s%s\n", tables[n + v]->name,
                    attn_dispatch_variant_name(tables[n + v]) ? "+" : "",
                    attn_dispatch_variant_name(tables[n + v]) ? attn_dispatch_variant_name(tables[n + v]) : "");
        if (why_not && !printed) fprintf(stderr, "test_kernels: table %s: %s\n", attn_isa_name(i), why_not);
        n += nv;
    }
    printed = 1;
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * qk_tile
 * --------------------------------------------------------------------------------------------- */
static void test_qk_tile(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    assert_true(nt >= 1);
    assert_string_equal(tables[0]->name, "generic");
    th_rng r;
    th_rng_seed(&r, 1);
    int fails = 0;
    for (size_t hi = 0; hi < NELEM(head_sizes); hi++)
        for (size_t ki = 0; ki < NELEM(key_counts); ki++) {
            const int64_t D = head_sizes[hi], nk = key_counts[ki];
            tiles *t = tiles_random(&r, D, nk);
            const int32_t nr = row_counts[(hi + ki) % NELEM(row_counts)];
            float *gen = (float *)malloc(sizeof t->s);
            for (int ti = 0; ti < nt; ti++) {
                float *full = (float *)malloc(sizeof t->s);
                memset(t->s, 0, sizeof t->s);
                tables[ti]->qk_tile(t->q_t, nr, D, t->row_ptr, nk, t->s);
                tables[ti]->qk_tile(t->q_t, QB, D, t->row_ptr, nk, full);
                if (ti == 0) memcpy(gen, t->s, sizeof t->s);
                for (int64_t k = 0; k < nk; k++)
                    for (int32_t row = 0; row < nr; row++) {
                        double exact = 0.0, mag = 0.0;
                        for (int64_t d = 0; d < D; d++) {
                            exact += (double)t->row_ptr[k][d] * (double)t->q_t[d * QB + row];
                            mag += fabs((double)t->row_ptr[k][d] * (double)t->q_t[d * QB + row]);
                        }
                        const float got = t->s[k * QB + row];
                        const double bound = (double)(D + 1) * FLT_U * mag + 1e-30;
                        const int lane_ok = memcmp(&got, &full[k * QB + row], 4) == 0;
                        const int gen_ok = fabs((double)got - (double)gen[k * QB + row]) <= 2.0 * bound;
                        if (!(fabs((double)got - exact) <= bound) || !lane_ok || !gen_ok) {
                            if (fails < 10)
                                fprintf(stderr, "REPRO test_kernels qk_tile: isa=%s D=%lld num_keys=%lld num_rows=%d "
                                                "key=%lld row=%d got=%.9g exact=%.9g generic=%.9g rows32=%.9g\n",
                                        tables[ti]->name, (long long)D, (long long)nk, (int)nr, (long long)k, (int)row,
                                        (double)got, exact, (double)gen[k * QB + row], (double)full[k * QB + row]);
                            fails++;
                        }
                    }
                free(full);
            }
            free(gen);
            free(t);
        }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------------------------------
 * softmax_tile
 * --------------------------------------------------------------------------------------------- */
/* The documented update in double: per lane tile max, lazy rescale (threshold), P = e^(s − m), α·l + ΣP
 * (scores in natural units; the kernels compute exp2((s − m)·log2 e)). */
static void softmax_expected(const float *s, int64_t nk, int32_t row, float m_old, double l_old, float *m_new,
                             double *alpha, double *l_new, double *p) {
    float tmax = -INFINITY;
    for (int64_t k = 0; k < nk; k++)
        if (s[k * QB + row] > tmax) tmax = s[k * QB + row];
    float m = m_old;
    if (tmax > m_old + ATTN_RESCALE_THRESHOLD || m_old == -INFINITY) m = tmax;
    *alpha = (m == m_old || m_old == -INFINITY) ? 1.0 : exp((double)m_old - (double)m);
    double sum = 0.0;
    for (int64_t k = 0; k < nk; k++) {
        const float x = s[k * QB + row];
        p[k] = x == -INFINITY ? 0.0 : exp((double)x - (double)m);
        sum += p[k];
    }
    *m_new = m;
    *l_new = *alpha * l_old + sum;
}

static void test_softmax_tile(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    th_rng r;
    th_rng_seed(&r, 2);
    int fails = 0;
    for (size_t ki = 0; ki < NELEM(key_counts); ki++)
        for (size_t ri = 0; ri < NELEM(row_counts); ri++)
            for (int variant = 0; variant < 4; variant++) {
                const int64_t nk = key_counts[ki], Dv = head_sizes[(ki * 3 + ri) % NELEM(head_sizes)];
                const int32_t nr = row_counts[ri];
                /* inputs: scores in log2 units with some −inf; states fresh (m = −inf), close, or far below */
                float s0[ATTN_KV_TILE * QB], m0[QB], l0[QB];
                float *o0 = (float *)malloc(sizeof(float) * ATTN_HEAD_SIZE_MAX * QB);
                for (int64_t i = 0; i < ATTN_KV_TILE * QB; i++) {
                    s0[i] = (float)th_rng_range(&r, -20, 20);
                    if (th_rng_int(&r, 0, 4) == 0) s0[i] = -INFINITY;
                }
                for (int32_t row = 0; row < QB; row++) {
                    const int kind = (int)((row + variant) % 4);
                    if (kind == 0 || variant == 3) { /* fresh state */
                        m0[row] = -INFINITY, l0[row] = 0.0f;
                    } else {
                        m0[row] = kind == 1 ? 10.0f : (kind == 2 ? -30.0f : 19.0f);
                        l0[row] = (float)th_rng_range(&r, 0.5, 4.0);
                    }
                    if (variant == 2 && row % 3 == 0) /* an all-masked lane */
                        for (int64_t k = 0; k < nk; k++) s0[k * QB + row] = -INFINITY;
                }
                for (int64_t i = 0; i < ATTN_HEAD_SIZE_MAX * QB; i++) o0[i] = (float)th_rng_range(&r, -1, 1);
                for (int32_t row = 0; row < QB; row++)
                    if (m0[row] == -INFINITY)
                        for (int64_t d = 0; d < ATTN_HEAD_SIZE_MAX; d++) o0[d * QB + row] = 0.0f;
                float gen_s[ATTN_KV_TILE * QB], gen_m[QB], gen_l[QB];
                for (int ti = 0; ti < nt; ti++) {
                    float s[ATTN_KV_TILE * QB], m[QB], l[QB], s32[ATTN_KV_TILE * QB], m32[QB], l32[QB];
                    float *o = (float *)malloc(sizeof(float) * ATTN_HEAD_SIZE_MAX * QB);
                    float *o32 = (float *)malloc(sizeof(float) * ATTN_HEAD_SIZE_MAX * QB);
                    memcpy(s, s0, sizeof s), memcpy(m, m0, sizeof m), memcpy(l, l0, sizeof l);
                    memcpy(o, o0, sizeof(float) * ATTN_HEAD_SIZE_MAX * QB);
                    memcpy(s32, s0, sizeof s), memcpy(m32, m0, sizeof m), memcpy(l32, l0, sizeof l);
                    memcpy(o32, o0, sizeof(float) * ATTN_HEAD_SIZE_MAX * QB);
                    tables[ti]->softmax_tile(s, nk, nr, m, l, o, Dv);
                    tables[ti]->softmax_tile(s32, nk, QB, m32, l32, o32, Dv);
                    if (ti == 0) memcpy(gen_s, s, sizeof s), memcpy(gen_m, m, sizeof m), memcpy(gen_l, l, sizeof l);
                    for (int32_t row = 0; row < nr; row++) {
                        double p[ATTN_KV_TILE], alpha, l_exp;
                        float m_exp;
                        softmax_expected(s0, nk, row, m0[row], (double)l0[row], &m_exp, &alpha, &l_exp, p);
                        /* relative error of a kernel exp2((s − m)·log2 e): the float subtraction and the
                         * multiply round by 2^-24 relative each and the float log2 e is 1.3e-8 off, together
                         * ≤ 2.2·2^-24·|s − m| relative, plus the polynomial and the final rounding */
                        const double m_f = (double)m_exp;
                        double tol_l = 0.0;
                        int ok = memcmp(&m[row], &m_exp, 4) == 0 && memcmp(&m[row], &gen_m[row], 4) == 0;
                        for (int64_t k = 0; k < nk; k++) {
                            const float got = s[k * QB + row];
                            const int masked = s0[k * QB + row] == -INFINITY;
                            const double tol = masked ? 0.0 : 4e-7 + 2.5 * FLT_U * fabs((double)s0[k * QB + row] - m_f);
                            if (s0[k * QB + row] == -INFINITY) ok = ok && got == 0.0f && !signbit(got);
                            else ok = ok && fabs((double)got - p[k]) <= tol * p[k] + 1e-44;
                            ok = ok && fabs((double)got - (double)gen_s[k * QB + row]) <= 2.0 * tol * p[k] + 1e-44;
                            if (s0[k * QB + row] != -INFINITY && tol > tol_l) tol_l = tol;
                        }
                        const double tol_a = 4e-7 + 2.5 * FLT_U * (m0[row] == -INFINITY ? 0.0 : fabs((double)m0[row] - m_f));
                        tol_l = (tol_l > tol_a ? tol_l : tol_a) + (double)(nk + 1) * FLT_U;
                        ok = ok && fabs((double)l[row] - l_exp) <= tol_l * fabs(l_exp) + 1e-37;
                        ok = ok && fabs((double)l[row] - (double)gen_l[row]) <= 2.0 * tol_l * fabs(l_exp) + 1e-37;
                        for (int64_t d = 0; d < Dv; d++) {
                            const double oe = alpha * (double)o0[d * QB + row];
                            ok = ok && fabs((double)o[d * QB + row] - oe) <= (tol_a + FLT_U) * fabs(oe) + 1e-37;
                        }
                        /* all-masked tile on a lane: state unchanged bit for bit, P = 0 */
                        int all_masked = 1;
                        for (int64_t k = 0; k < nk; k++) all_masked &= s0[k * QB + row] == -INFINITY;
                        if (all_masked) {
                            ok = ok && memcmp(&m[row], &m0[row], 4) == 0 && memcmp(&l[row], &l0[row], 4) == 0;
                            for (int64_t d = 0; d < Dv; d++) ok = ok && memcmp(&o[d * QB + row], &o0[d * QB + row], 4) == 0;
                        }
                        /* lane invariance: num_rows = nr and num_rows = 32 agree bitwise on this lane */
                        int lane = memcmp(&m[row], &m32[row], 4) == 0 && memcmp(&l[row], &l32[row], 4) == 0;
                        for (int64_t k = 0; k < nk; k++) lane = lane && memcmp(&s[k * QB + row], &s32[k * QB + row], 4) == 0;
                        for (int64_t d = 0; d < Dv; d++) lane = lane && memcmp(&o[d * QB + row], &o32[d * QB + row], 4) == 0;
                        if (!ok || !lane) {
                            if (fails < 10)
                                fprintf(stderr, "REPRO test_kernels softmax_tile: isa=%s num_keys=%lld num_rows=%d "
                                                "head_size_v=%lld variant=%d row=%d ok=%d lane_invariant=%d m=%g/%g "
                                                "l=%.9g/%.9g\n", tables[ti]->name, (long long)nk, (int)nr,
                                        (long long)Dv, variant, (int)row, ok, lane, (double)m[row], (double)m_exp,
                                        (double)l[row], l_exp);
                            fails++;
                        }
                    }
                    free(o), free(o32);
                }
                free(o0);
            }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------------------------------
 * pv_tile
 * --------------------------------------------------------------------------------------------- */
static void test_pv_tile(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    th_rng r;
    th_rng_seed(&r, 3);
    int fails = 0;
    for (size_t hi = 0; hi < NELEM(head_sizes); hi++)
        for (size_t ki = 0; ki < NELEM(key_counts); ki++) {
            const int64_t Dv = head_sizes[hi], nk = key_counts[ki];
            const int32_t nr = row_counts[(hi * 5 + ki) % NELEM(row_counts)];
            tiles *t = tiles_random(&r, Dv, nk);
            for (int64_t i = 0; i < ATTN_KV_TILE * QB; i++) t->s[i] = (float)th_rng_range(&r, 0, 1);
            float *o0 = (float *)malloc(sizeof t->o_t), *gen = (float *)malloc(sizeof t->o_t);
            memcpy(o0, t->o_t, sizeof t->o_t);
            for (int ti = 0; ti < nt; ti++) {
                float *o = (float *)malloc(sizeof t->o_t), *o32 = (float *)malloc(sizeof t->o_t);
                memcpy(o, o0, sizeof t->o_t), memcpy(o32, o0, sizeof t->o_t);
                tables[ti]->pv_tile(t->s, nk, nr, t->row_ptr, Dv, o);
                tables[ti]->pv_tile(t->s, nk, QB, t->row_ptr, Dv, o32);
                if (ti == 0) memcpy(gen, o, sizeof t->o_t);
                for (int64_t d = 0; d < Dv; d++)
                    for (int32_t row = 0; row < nr; row++) {
                        double exact = (double)o0[d * QB + row], mag = fabs(exact);
                        for (int64_t k = 0; k < nk; k++) {
                            exact += (double)t->s[k * QB + row] * (double)t->row_ptr[k][d];
                            mag += fabs((double)t->s[k * QB + row] * (double)t->row_ptr[k][d]);
                        }
                        const float got = o[d * QB + row];
                        const double bound = (double)(nk + 2) * FLT_U * mag + 1e-30;
                        const int lane_ok = memcmp(&got, &o32[d * QB + row], 4) == 0;
                        const int gen_ok = fabs((double)got - (double)gen[d * QB + row]) <= 2.0 * bound;
                        if (!(fabs((double)got - exact) <= bound) || !lane_ok || !gen_ok) {
                            if (fails < 10)
                                fprintf(stderr, "REPRO test_kernels pv_tile: isa=%s head_size_v=%lld num_keys=%lld "
                                                "num_rows=%d d=%lld row=%d got=%.9g exact=%.9g rows32=%.9g\n",
                                        tables[ti]->name, (long long)Dv, (long long)nk, (int)nr, (long long)d,
                                        (int)row, (double)got, exact, (double)o32[d * QB + row]);
                            fails++;
                        }
                    }
                free(o), free(o32);
            }
            free(o0), free(gen), free(t);
        }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Conversions
 * --------------------------------------------------------------------------------------------- */
static void test_conversions(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    enum { N = 65536 };
    uint16_t *h = (uint16_t *)malloc(N * 2), *back = (uint16_t *)malloc(N * 2);
    float *f = (float *)malloc(N * 4);
    for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
    int fails = 0;
    for (int ti = 0; ti < nt; ti++) {
        const attn_dtype dts[2] = {ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
        for (int di = 0; di < 2; di++) {
            /* every 16-bit pattern → f32 equals the scalar conversion (odd offsets/lengths hit the tails) */
            for (uint32_t off = 1; off + 41 < N; off += 997) {
                const int64_t n = (int64_t)(off % 41) + 1;
                tables[ti]->cvt_to_f32(h + off, dts[di], f + off, n);
                for (int64_t j = 0; j < n; j++) {
                    const float e = di == 0 ? attn_f16_to_f32(h[off + j]) : attn_bf16_to_f32(h[off + j]);
                    if (!(memcmp(&e, &f[off + j], 4) == 0 || (isnan(e) && isnan(f[off + j])))) fails++;
                }
            }
            tables[ti]->cvt_to_f32(h, dts[di], f, N);
            for (uint32_t i = 0; i < N; i++) {
                const float e = di == 0 ? attn_f16_to_f32(h[i]) : attn_bf16_to_f32(h[i]);
                if (!(memcmp(&e, &f[i], 4) == 0 || (isnan(e) && isnan(f[i])))) {
                    if (fails < 10)
                        fprintf(stderr, "REPRO test_kernels cvt_to_f32: isa=%s dtype=%s bits=0x%04x got=%g want=%g\n",
                                tables[ti]->name, attn_dtype_name(dts[di]), (unsigned)i, (double)f[i], (double)e);
                    fails++;
                }
            }
            /* round trip of every non-NaN pattern is the identity */
            tables[ti]->cvt_from_f32(f, dts[di], back, N);
            for (uint32_t i = 0; i < N; i++) {
                const int is_nan = isnan(f[i]);
                if (is_nan ? !isnan(di == 0 ? attn_f16_to_f32(back[i]) : attn_bf16_to_f32(back[i])) : back[i] != h[i]) {
                    if (fails < 10)
                        fprintf(stderr, "REPRO test_kernels cvt_from_f32 round trip: isa=%s dtype=%s bits=0x%04x "
                                        "back=0x%04x\n", tables[ti]->name, attn_dtype_name(dts[di]), (unsigned)i,
                                (unsigned)back[i]);
                    fails++;
                }
            }
            /* random f32 values (all exponents) → 16-bit equals the scalar round-to-nearest-even */
            th_rng r;
            th_rng_seed(&r, 4);
            for (uint32_t i = 0; i < N; i++) {
                uint32_t u = (uint32_t)th_rng_u64(&r);
                memcpy(&f[i], &u, 4);
            }
            for (int64_t n = 1; n <= 40; n++) tables[ti]->cvt_from_f32(f + 100 * n, dts[di], back + 100 * n, n);
            tables[ti]->cvt_from_f32(f + 5000, dts[di], back + 5000, N - 5000);
            tables[ti]->cvt_from_f32(f, dts[di], back, 100);
            for (uint32_t i = 0; i < N; i++) {
                if (i >= 100 && i < 5000 && !(i / 100 <= 40 && i % 100 < i / 100)) continue; /* not converted */
                const uint16_t e = di == 0 ? attn_f32_to_f16(f[i]) : attn_f32_to_bf16(f[i]);
                const float fe = di == 0 ? attn_f16_to_f32(e) : attn_bf16_to_f32(e);
                const float fg = di == 0 ? attn_f16_to_f32(back[i]) : attn_bf16_to_f32(back[i]);
                if (!(back[i] == e || (isnan(fe) && isnan(fg)))) {
                    if (fails < 10)
                        fprintf(stderr, "REPRO test_kernels cvt_from_f32: isa=%s dtype=%s f=%a got=0x%04x want=0x%04x\n",
                                tables[ti]->name, attn_dtype_name(dts[di]), (double)f[i], (unsigned)back[i], (unsigned)e);
                    fails++;
                }
            }
            for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)i;
        }
        /* f32 → f32 is a copy */
        float src[37], dst[37];
        for (int i = 0; i < 37; i++) src[i] = (float)i * 0.37f - 3.0f;
        tables[ti]->cvt_to_f32(src, ATTN_DTYPE_F32, dst, 37);
        assert_memory_equal(src, dst, sizeof src);
        tables[ti]->cvt_from_f32(src, ATTN_DTYPE_F32, dst, 37);
        assert_memory_equal(src, dst, sizeof src);
    }
    free(h), free(back), free(f);
    assert_int_equal(fails, 0);
}

/* Every ISA named by the library is either usable (a table) or reported unavailable, and the dispatcher's
 * answers agree with the public queries. */
static void test_dispatch_registry(void **state) {
    (void)state;
    assert_true(attn_isa_count() >= 1);
    assert_string_equal(attn_isa_name(0), "generic");
    assert_null(attn_isa_name(attn_isa_count()));
    assert_null(attn_isa_name(-1));
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *name = attn_isa_name(i);
        const struct attn_kernels *kt = attn_dispatch_by_name(name);
        assert_int_equal(attn_isa_available(name), kt != NULL);
        if (kt) assert_string_equal(kt->name, name);
    }
    assert_null(attn_dispatch_by_name("no-such-isa"));
    assert_null(attn_dispatch_by_name(NULL));
    assert_non_null(attn_dispatch_default());
}

/* ---------------------------------------------------------------------------------------------
 * qk_tile_kv / pv_rows_kv: K/V rows in their storage dtype, bitwise equal to the float kernels of the same
 * table on the rows converted by cvt_to_f32 (the decode path relies on it: tests/conformance/test_driver_paths
 * checks the driver end to end). Rows are KV_ROW_STRIDE elements apart (a cache page's token stride) with odd head
 * sizes, and D + 3 elements apart: kernels may choose their path by the rows' distance (avx512 keeps two groups of
 * 16 keys in flight at up to four rows unless rows are a multiple of 2 or 4 KiB apart), so both must agree.
 * Every key count from 1 to 64 is used at up to four rows.
 * --------------------------------------------------------------------------------------------- */
#define KV_ROW_STRIDE 1024 /* elements between K rows, like 8 kv heads × 128 */

/* A table's qk_tile_kv_pf / pv_rows_kv_pf (kernels.h) left *after from *before: each stream advanced by 64 bytes per
 * line issued, never more lines than asked; with `all` every line issued. Returns the number of faults (reported). */
static int kv_pf_faults(const char *what, const char *isa, const attn_kv_prefetch *before,
                        const attn_kv_prefetch *after, int all) {
    int faults = 0;
    const int64_t got1 = before->l1_lines - after->l1_lines, got2 = before->l2_lines - after->l2_lines;
    if (got1 < 0 || after->l1_lines < 0 || after->l1 != before->l1 + 64 * got1)
        faults++;
    if (got2 < 0 || after->l2_lines < 0 || after->l2 != before->l2 + 64 * got2)
        faults++;
    if (all && (after->l1_lines != 0 || after->l2_lines != 0))
        faults++;
    if (faults)
        fprintf(stderr, "REPRO test_kernels %s: isa=%s asked %lld/%lld lines, left %lld/%lld (all=%d)\n", what, isa,
                (long long)before->l1_lines, (long long)before->l2_lines, (long long)after->l1_lines,
                (long long)after->l2_lines, all);
    return faults;
}

static void test_kv_kernels(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    /* fp8 rows only on the tables that read them (kernels.h, fp8_kv); the others get F32 from the driver */
    const attn_dtype dts[5] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    static const int32_t kv_rows[] = {1, 2, 3, 4, 5, 8, 9, 12, 13, 16, 17, 32};
    th_rng r;
    th_rng_seed(&r, 7);
    char *store = (char *)malloc((size_t)ATTN_KV_TILE * KV_ROW_STRIDE * 4);
    float *conv = (float *)malloc((size_t)ATTN_KV_TILE * ATTN_HEAD_SIZE_MAX * sizeof(float));
    const void *raw[ATTN_KV_TILE];
    const float *fl[ATTN_KV_TILE];
    float *s_ref = (float *)malloc(ATTN_KV_TILE * QB * sizeof(float));
    float *s_got = (float *)malloc(ATTN_KV_TILE * QB * sizeof(float));
    float *o_ref = (float *)malloc(ATTN_HEAD_SIZE_MAX * QB * sizeof(float));
    float *o_got = (float *)malloc(ATTN_HEAD_SIZE_MAX * QB * sizeof(float));
    float *s_pf = (float *)malloc(ATTN_KV_TILE * QB * sizeof(float));
    float *o_pf = (float *)malloc(ATTN_HEAD_SIZE_MAX * QB * sizeof(float));
    char *pf_area = (char *)malloc(2 * 64 * 512); /* what the _pf kernels are asked to prefetch */
    int fails = 0, cases = 0, pf_cases = 0;
    for (int ti = 0; ti < nt; ti++) /* the SIMD tables read fp8 in place: their fp8 cases must run */
        if ((!strcmp(tables[ti]->name, "avx2") || !strcmp(tables[ti]->name, "avx512") ||
             !strcmp(tables[ti]->name, "neon")) &&
            !tables[ti]->fp8_kv) {
            fprintf(stderr, "test_kernels: table %s does not read fp8 K/V in place (fp8_kv = 0)\n", tables[ti]->name);
            fails++;
        }
    for (int ti = 0; ti < nt; ti++)
        for (int di = 0; di < 5; di++)
            for (size_t hi = 0; hi < NELEM(head_sizes); hi++)
                for (size_t ri = 0; ri < NELEM(kv_rows); ri++)
                    for (int si = 0; si < 2; si++) {
                        const attn_dtype dt = dts[di];
                        if (attn_dtype_is_fp8(dt) && !tables[ti]->fp8_kv)
                            continue;
                        const int32_t nr = kv_rows[ri];
                        const int64_t D = head_sizes[hi];
                        /* up to four rows: key counts 1..64 in turn; else the list */
                        const int64_t nk =
                            nr <= 4 ? 1 + (int64_t)((hi * 7 + ri * 13 + (size_t)di * 3 + (size_t)si * 29) % 64)
                                    : key_counts[(hi + ri + (size_t)di + (size_t)si) % NELEM(key_counts)];
                        const int64_t stride = si == 0 ? KV_ROW_STRIDE : D + 3;
                        const size_t es = attn_dtype_size(dt);
                        tiles *t = tiles_random(&r, D, nk);
                        for (int64_t k = 0; k < nk; k++) {
                            char *row = store + (size_t)k * (size_t)stride * es;
                            for (int64_t d = 0; d < D; d++) {
                                const float x = (float)th_rng_range(&r, -1, 1);
                                if (attn_dtype_is_fp8(dt)) { /* every code; NaN / inf only in key 1 */
                                    uint8_t c = (uint8_t)th_rng_int(&r, 0, 255);
                                    const uint8_t special = dt == ATTN_DTYPE_FP8_E4M3 ? 0x7F : 0x7C;
                                    if ((c & 0x7F) >= special && k != 1)
                                        c = (uint8_t)(c - 4);
                                    ((uint8_t *)row)[d] = c;
                                } else if (dt == ATTN_DTYPE_F32)
                                    ((float *)row)[d] = x;
                                else if (dt == ATTN_DTYPE_BF16)
                                    ((uint16_t *)row)[d] = attn_f32_to_bf16(x);
                                else
                                    ((uint16_t *)row)[d] = attn_f32_to_f16(x);
                            }
                            raw[k] = row;
                            tables[ti]->cvt_to_f32(row, dt, conv + k * ATTN_HEAD_SIZE_MAX, D);
                            fl[k] = conv + k * ATTN_HEAD_SIZE_MAX;
                        }
                        /* qk */
                        memset(s_ref, 0, ATTN_KV_TILE * QB * sizeof(float));
                        memset(s_got, 0xA5, ATTN_KV_TILE * QB * sizeof(float)); /* rows >= nk must keep it */
                        tables[ti]->qk_tile(t->q_t, nr, D, fl, nk, s_ref);
                        tables[ti]->qk_tile_kv(t->q_t, nr, D, raw, dt, nk, s_got);
                        for (int64_t k = nk; k < ATTN_KV_TILE; k++)
                            for (int32_t lane = 0; lane < QB; lane++) {
                                uint32_t u;
                                memcpy(&u, &s_got[k * QB + lane], 4);
                                if (u != 0xA5A5A5A5u && fails++ < 10)
                                    fprintf(stderr,
                                            "REPRO test_kernels qk_tile_kv wrote past the keys: isa=%s dtype=%d D=%lld "
                                            "keys=%lld rows=%d key=%lld\n",
                                            tables[ti]->name, (int)dt, (long long)D, (long long)nk, (int)nr,
                                            (long long)k);
                            }
                        for (int64_t k = 0; k < nk; k++)
                            for (int32_t row = 0; row < nr; row++)
                                if (memcmp(&s_ref[k * QB + row], &s_got[k * QB + row], 4) != 0) {
                                    if (fails++ < 10)
                                        fprintf(stderr,
                                                "REPRO test_kernels qk_tile_kv: isa=%s dtype=%d D=%lld keys=%lld "
                                                "rows=%d key=%lld row=%d kv=%.9g float=%.9g\n",
                                                tables[ti]->name, (int)dt, (long long)D, (long long)nk, (int)nr,
                                                (long long)k, (int)row, (double)s_got[k * QB + row],
                                                (double)s_ref[k * QB + row]);
                                }
                        /* qk_tile_kv_pf: the same bits, the prefetch streams accounted for; the decode shape
                         * (16 or 32 keys, head size a multiple of 64, up to four rows) issues every line */
                        const int pf_all = (nk == 16 || nk == 32) && D % 64 == 0 && nr <= 4;
                        if (tables[ti]->qk_tile_kv_pf) {
                            attn_kv_prefetch pf = {pf_area, pf_area + 64 * 512, th_rng_int(&r, 0, 300),
                                                   th_rng_int(&r, 0, 300)};
                            const attn_kv_prefetch pf0 = pf;
                            memset(s_pf, 0xA5, ATTN_KV_TILE * QB * sizeof(float));
                            tables[ti]->qk_tile_kv_pf(t->q_t, nr, D, raw, dt, nk, s_pf, &pf);
                            fails += kv_pf_faults("qk_tile_kv_pf", tables[ti]->name, &pf0, &pf, pf_all);
                            if (memcmp(s_pf, s_got, ATTN_KV_TILE * QB * sizeof(float)) != 0 && fails++ < 10)
                                fprintf(stderr,
                                        "REPRO test_kernels qk_tile_kv_pf bits: isa=%s dtype=%d D=%lld keys=%lld "
                                        "rows=%d\n",
                                        tables[ti]->name, (int)dt, (long long)D, (long long)nk, (int)nr);
                            pf_cases++;
                        }
                        /* pv: P from the tile's scores (any values do), o from the random o_t */
                        for (int64_t k = 0; k < nk; k++)
                            for (int32_t row = 0; row < QB; row++)
                                s_ref[k * QB + row] = t->s[k * QB + row] = (float)th_rng_range(&r, 0, 1);
                        memcpy(o_ref, t->o_t, (size_t)D * QB * sizeof(float));
                        for (int32_t row = 0; row < nr; row++)
                            for (int64_t d = 0; d < D; d++)
                                o_got[row * D + attn_rows_kv_col(d, D, dt)] = t->o_t[d * QB + row];
                        memcpy(o_pf, o_got, (size_t)nr * (size_t)D * sizeof(float));
                        tables[ti]->pv_tile(s_ref, nk, nr, fl, D, o_ref);
                        tables[ti]->pv_rows_kv(s_ref, nk, nr, raw, dt, D, o_got);
                        if (tables[ti]->pv_rows_kv_pf) {
                            attn_kv_prefetch pf = {pf_area, pf_area + 64 * 512, th_rng_int(&r, 0, 300),
                                                   th_rng_int(&r, 0, 300)};
                            const attn_kv_prefetch pf0 = pf;
                            tables[ti]->pv_rows_kv_pf(s_ref, nk, nr, raw, dt, D, o_pf, &pf);
                            fails += kv_pf_faults("pv_rows_kv_pf", tables[ti]->name, &pf0, &pf, pf_all);
                            if (memcmp(o_pf, o_got, (size_t)nr * (size_t)D * sizeof(float)) != 0 && fails++ < 10)
                                fprintf(stderr,
                                        "REPRO test_kernels pv_rows_kv_pf bits: isa=%s dtype=%d D=%lld keys=%lld "
                                        "rows=%d\n",
                                        tables[ti]->name, (int)dt, (long long)D, (long long)nk, (int)nr);
                            pf_cases++;
                        }
                        for (int32_t row = 0; row < nr; row++)
                            for (int64_t d = 0; d < D; d++)
                                if (memcmp(&o_ref[d * QB + row], &o_got[row * D + attn_rows_kv_col(d, D, dt)], 4) !=
                                    0) {
                                    if (fails++ < 10)
                                        fprintf(stderr,
                                                "REPRO test_kernels pv_rows_kv: isa=%s dtype=%d D=%lld keys=%lld "
                                                "rows=%d d=%lld row=%d kv=%.9g float=%.9g\n",
                                                tables[ti]->name, (int)dt, (long long)D, (long long)nk, (int)nr,
                                                (long long)d, (int)row,
                                                (double)o_got[row * D + attn_rows_kv_col(d, D, dt)],
                                                (double)o_ref[d * QB + row]);
                                }
                        cases++;
                        free(t);
                    }
    fprintf(stderr, "kv kernels: %d cases over %d tables (%d of the _pf entries), %d mismatches\n", cases, nt, pf_cases,
            fails);
    free(store), free(conv), free(s_ref), free(s_got), free(o_ref), free(o_got), free(s_pf), free(o_pf), free(pf_area);
    assert_true(cases > 0);
    assert_int_equal(fails, 0);
}

/* transpose: every usable table copies exactly, for tile shapes with tails (1 to 40 rows and columns, the q_t and o_t
 * strides), and writes nothing outside dst's rows × cols. */
static void test_transpose(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    enum { SS = 44, DS = 48 };
    static float src[40 * SS], dst[40 * DS];
    th_rng r;
    th_rng_seed(&r, 13);
    for (int i = 0; i < 40 * SS; i++) src[i] = (float)th_rng_range(&r, -1, 1);
    src[3] = NAN, src[5] = -0.0f, src[7] = INFINITY;
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 31, 32, 33, 40}; /* 1..4: avx512's 4 × 4 paths */
    int cases = 0;
    for (int ti = 0; ti < nt; ti++)
        for (size_t a = 0; a < NELEM(sizes); a++)
            for (size_t b = 0; b < NELEM(sizes); b++) {
                const int64_t rows = sizes[a], cols = sizes[b];
                for (int i = 0; i < 40 * DS; i++) dst[i] = 7.0f;
                tables[ti]->transpose(src, SS, rows, cols, dst, DS);
                for (int64_t c = 0; c < 40; c++)
                    for (int64_t rr = 0; rr < DS; rr++) {
                        const float want = c < cols && rr < rows ? src[rr * SS + c] : 7.0f;
                        if (memcmp(&dst[c * DS + rr], &want, 4) != 0) {
                            fprintf(stderr, "REPRO test_kernels transpose: isa=%s rows=%lld cols=%lld at [%lld][%lld]\n",
                                    tables[ti]->name, (long long)rows, (long long)cols, (long long)c, (long long)rr);
                            fail();
                        }
                    }
                cases++;
            }
    assert_true(cases > 0);
}

/* scale_tile: one float multiply per element of the block's rows, other lanes untouched, every usable table. */
static void test_scale_tile(void **state) {
    (void)state;
    const struct attn_kernels *tables[8];
    const int nt = usable_tables(tables);
    enum { NK = ATTN_KV_TILE };
    static float s[NK * QB], ref[NK * QB];
    th_rng r;
    th_rng_seed(&r, 17);
    int cases = 0;
    for (int ti = 0; ti < nt; ti++)
        for (int32_t nr = 1; nr <= QB; nr += (nr < 18 ? 1 : 7))
            for (int64_t nk = 1; nk <= NK; nk += 21) {
                for (int i = 0; i < NK * QB; i++) s[i] = ref[i] = (float)th_rng_range(&r, -50, 50);
                s[0] = ref[0] = -INFINITY;
                s[1] = ref[1] = NAN;
                const float scale = 0.0883883f;
                for (int64_t k = 0; k < nk; k++)
                    for (int32_t rr = 0; rr < nr; rr++) ref[k * QB + rr] = ref[k * QB + rr] * scale;
                tables[ti]->scale_tile(s, nk, nr, scale);
                if (memcmp(s, ref, sizeof s) != 0) {
                    fprintf(stderr, "REPRO test_kernels scale_tile: isa=%s rows=%d keys=%lld\n", tables[ti]->name, (int)nr,
                            (long long)nk);
                    fail();
                }
                cases++;
            }
    assert_true(cases > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dispatch_registry), cmocka_unit_test(test_qk_tile),
        cmocka_unit_test(test_softmax_tile),      cmocka_unit_test(test_pv_tile),
        cmocka_unit_test(test_conversions),       cmocka_unit_test(test_kv_kernels),
        cmocka_unit_test(test_transpose),         cmocka_unit_test(test_scale_tile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
