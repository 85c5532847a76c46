/*
 * test_merge.c — attn_merge_attn_states: the formula in double, −inf on either or both sides (+inf counts as
 * −inf: an empty state), exact in-place aliasing, and the split-KV identity: attention over keys [0, a)
 * merged with attention over [a, Sk) (two attn_forward calls on key slices, non-causal) equals attention
 * over all keys within tolerance.
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

#include "harness.h"

static attn_ctx *new_ctx(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    return ctx;
}

/* A NaN LSE on either side makes the merged row NaN (LSE and every out value), whatever the other side holds:
 * −inf, +inf (empty) or a finite value. The result must not depend on the argument order. */
static void test_nan_state_either_side(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const float others[3] = {-INFINITY, INFINITY, 2.5f};
    const int64_t D = 4;
    int64_t os[3] = {1, 1, D}, ls[2] = {1, 1};
    for (int i = 0; i < 3; i++)
        for (int swap = 0; swap < 2; swap++) {
            float oa[4] = {1, 2, 3, 4}, ob[4] = {5, 6, 7, 8}, out[4] = {0, 0, 0, 0};
            float la = swap ? others[i] : NAN, lb = swap ? NAN : others[i], lo = 0.0f;
            attn_tensor ta = attn_tensor_make(oa, ATTN_DTYPE_F32, 3, os), tb = attn_tensor_make(ob, ATTN_DTYPE_F32, 3, os);
            attn_tensor to = attn_tensor_make(out, ATTN_DTYPE_F32, 3, os);
            attn_tensor tla = attn_tensor_make(&la, ATTN_DTYPE_F32, 2, ls), tlb = attn_tensor_make(&lb, ATTN_DTYPE_F32, 2, ls);
            attn_tensor tlo = attn_tensor_make(&lo, ATTN_DTYPE_F32, 2, ls);
            assert_int_equal(attn_merge_attn_states(ctx, &ta, &tla, &tb, &tlb, &to, &tlo), ATTN_STATUS_OK);
            if (!isnan(lo)) printf("REPRO merge: lse_a=%g lse_b=%g gave lse %g, expected NaN\n", (double)la, (double)lb, (double)lo);
            assert_true(isnan(lo));
            for (int64_t d = 0; d < D; d++) assert_true(isnan(out[d]));
        }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * The formula, −inf, aliasing
 * --------------------------------------------------------------------------------------------- */
static void test_formula(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t T = 7, H = 3, D = 13;
    for (int di = 0; di < 3; di++) {
        const attn_dtype dt = dts[di];
        th_rng r;
        th_rng_seed(&r, 10 + (uint64_t)di);
        void *a = th_alloc_fill(&r, dt, (size_t)(T * H * D), -1, 1), *b = th_alloc_fill(&r, dt, (size_t)(T * H * D), -1, 1);
        void *o = th_alloc_nan(dt, (size_t)(T * H * D));
        float *la = th_alloc_fill(&r, ATTN_DTYPE_F32, (size_t)(H * T), -5, 5);
        float *lb = th_alloc_fill(&r, ATTN_DTYPE_F32, (size_t)(H * T), -5, 5);
        float *lo = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
        /* special rows: token 0 a = −inf; token 1 b = −inf; token 2 both; token 3 far apart (40 nats) */
        for (int64_t h = 0; h < H; h++) {
            la[h * T + 0] = -INFINITY;
            lb[h * T + 1] = -INFINITY;
            la[h * T + 2] = lb[h * T + 2] = -INFINITY;
            la[h * T + 3] = 30.0f, lb[h * T + 3] = -10.0f;
        }
        /* the both −inf rows carry NaN values: they must not leak into the result */
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++) {
                th_set(a, dt, (size_t)((2 * H + h) * D + d), NAN);
                th_set(b, dt, (size_t)((2 * H + h) * D + d), NAN);
            }
        int64_t os[3] = {T, H, D}, ls[2] = {H, T};
        attn_tensor ta = attn_tensor_make(a, dt, 3, os), tb = attn_tensor_make(b, dt, 3, os);
        attn_tensor to = attn_tensor_make(o, dt, 3, os);
        attn_tensor tla = attn_tensor_make(la, ATTN_DTYPE_F32, 2, ls), tlb = attn_tensor_make(lb, ATTN_DTYPE_F32, 2, ls);
        attn_tensor tlo = attn_tensor_make(lo, ATTN_DTYPE_F32, 2, ls);
        assert_int_equal(attn_merge_attn_states(ctx, &ta, &tla, &tb, &tlb, &to, &tlo), ATTN_STATUS_OK);
        const th_tol tol = th_tol_for(dt);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const double xa = la[h * T + t], xb = lb[h * T + t];
                const float got_l = lo[h * T + t];
                if (t == 2) {
                    assert_true(isinf(got_l) && got_l < 0);
                } else {
                    const double mx = xa > xb ? xa : xb;
                    const double lse = mx + log(exp(xa - mx) + exp(xb - mx));
                    assert_true(fabs((double)got_l - lse) <= tol.lse_atol * fmax(1.0, fabs(lse)));
                }
                for (int64_t d = 0; d < D; d++) {
                    const size_t i = (size_t)((t * H + h) * D + d);
                    const float got = th_get(o, dt, i);
                    if (t == 2) {
                        assert_true(got == 0.0f);
                        continue;
                    }
                    if (t == 0 || t == 1) { /* one side −inf: exactly the other side */
                        const float want = th_get(t == 0 ? b : a, dt, i);
                        assert_memory_equal(&got, &want, sizeof got);
                        continue;
                    }
                    const double mx = xa > xb ? xa : xb;
                    const double wa = exp(xa - mx), wb = exp(xb - mx);
                    const double want = (wa * th_get(a, dt, i) + wb * th_get(b, dt, i)) / (wa + wb);
                    if (!(fabs((double)got - want) <= tol.atol + tol.rtol * fabs(want)))
                        fprintf(stderr, "REPRO test_merge formula: dtype=%s t=%lld h=%lld d=%lld got=%g want=%g\n",
                                attn_dtype_name(dt), (long long)t, (long long)h, (long long)d, (double)got, want);
                    assert_true(fabs((double)got - want) <= tol.atol + tol.rtol * fabs(want));
                }
                if (t == 0) assert_true(got_l == lb[h * T + t]);
                if (t == 1) assert_true(got_l == la[h * T + t]);
            }
        /* in place: out aliases out_a (and lse_out aliases lse_a) exactly → the same bits; LSE may be NULL */
        const size_t ob = (size_t)(T * H * D) * attn_dtype_size(dt);
        void *a2 = malloc(ob);
        memcpy(a2, a, ob);
        float *la2 = malloc((size_t)(H * T) * 4);
        memcpy(la2, la, (size_t)(H * T) * 4);
        attn_tensor ta2 = attn_tensor_make(a2, dt, 3, os), tla2 = attn_tensor_make(la2, ATTN_DTYPE_F32, 2, ls);
        assert_int_equal(attn_merge_attn_states(ctx, &ta2, &tla2, &tb, &tlb, &ta2, &tla2), ATTN_STATUS_OK);
        assert_memory_equal(a2, o, ob);
        assert_memory_equal(la2, lo, (size_t)(H * T) * 4);
        memcpy(a2, b, ob);
        attn_tensor tb2 = attn_tensor_make(a2, dt, 3, os);
        assert_int_equal(attn_merge_attn_states(ctx, &ta, &tla, &tb2, &tlb, &tb2, NULL), ATTN_STATUS_OK);
        assert_memory_equal(a2, o, ob);
        free(a2), free(la2);
        free(a), free(b), free(o), free(la), free(lb), free(lo);
    }
    attn_ctx_destroy(ctx);
}

/* +inf LSE marks an empty state (FA2's rows without keys; vLLM converts it to −inf): token 0 has an
 * empty a, token 1 an empty b, token 2 both (one +inf, one −inf), token 3 both +inf. */
static void test_positive_inf_is_empty(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    enum { T = 4, H = 1, D = 4 };
    float a[T * H * D], b[T * H * D], o[T * H * D], lo[H * T];
    for (int i = 0; i < T * H * D; i++) a[i] = (float)i + 0.25f, b[i] = -(float)i - 0.5f;
    float la[H * T] = {INFINITY, 1.5f, INFINITY, INFINITY}, lb[H * T] = {-2.0f, INFINITY, -INFINITY, INFINITY};
    int64_t os[3] = {T, H, D}, ls[2] = {H, T};
    attn_tensor ta = attn_tensor_make(a, ATTN_DTYPE_F32, 3, os), tb = attn_tensor_make(b, ATTN_DTYPE_F32, 3, os);
    attn_tensor to = attn_tensor_make(o, ATTN_DTYPE_F32, 3, os);
    attn_tensor tla = attn_tensor_make(la, ATTN_DTYPE_F32, 2, ls), tlb = attn_tensor_make(lb, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tlo = attn_tensor_make(lo, ATTN_DTYPE_F32, 2, ls);
    assert_int_equal(attn_merge_attn_states(ctx, &ta, &tla, &tb, &tlb, &to, &tlo), ATTN_STATUS_OK);
    assert_memory_equal(o, b, D * sizeof(float)); /* token 0: exactly b */
    assert_true(lo[0] == -2.0f);
    assert_memory_equal(o + D, a + D, D * sizeof(float)); /* token 1: exactly a */
    assert_true(lo[1] == 1.5f);
    for (int t = 2; t < 4; t++) {
        assert_true(isinf(lo[t]) && lo[t] < 0);
        for (int d = 0; d < D; d++) assert_true(o[t * D + d] == 0.0f);
    }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Split-KV identity through the public API
 * --------------------------------------------------------------------------------------------- */
static void test_split_keys(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t Sq = 9, Sk = 150, H = 4, Hk = 2, D = 32;
    const int64_t splits[] = {0, 1, 63, 64, 100, 149, 150};
    for (int di = 0; di < 3; di++)
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++) {
            const attn_dtype dt = dts[di];
            const int64_t a = splits[si];
            th_rng r;
            th_rng_seed(&r, 100 + (uint64_t)(di * 10) + si);
            const size_t nq = (size_t)(Sq * H * D), nk = (size_t)(Sk * Hk * D);
            void *q = th_alloc_fill(&r, dt, nq, -2, 2), *k = th_alloc_fill(&r, dt, nk, -2, 2);
            void *v = th_alloc_fill(&r, dt, nk, -1, 1);
            void *o1 = th_alloc_nan(dt, nq), *o2 = th_alloc_nan(dt, nq), *of = th_alloc_nan(dt, nq);
            void *om = th_alloc_nan(dt, nq);
            float *l1 = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Sq)), *l2 = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Sq));
            float *lf = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Sq)), *lm = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Sq));
            const size_t es = attn_dtype_size(dt);
            int64_t qs[4] = {1, Sq, H, D}, ks1[4] = {1, a, Hk, D}, ks2[4] = {1, Sk - a, Hk, D}, ksf[4] = {1, Sk, Hk, D};
            int64_t ls[3] = {1, H, Sq};
            attn_tensor tq = attn_tensor_make(q, dt, 4, qs);
            attn_tensor tk1 = attn_tensor_make(k, dt, 4, ks1), tv1 = attn_tensor_make(v, dt, 4, ks1);
            attn_tensor tk2 = attn_tensor_make((char *)k + (size_t)(a * Hk * D) * es, dt, 4, ks2);
            attn_tensor tv2 = attn_tensor_make((char *)v + (size_t)(a * Hk * D) * es, dt, 4, ks2);
            attn_tensor tkf = attn_tensor_make(k, dt, 4, ksf), tvf = attn_tensor_make(v, dt, 4, ksf);
            attn_tensor to1 = attn_tensor_make(o1, dt, 4, qs), to2 = attn_tensor_make(o2, dt, 4, qs);
            attn_tensor tof = attn_tensor_make(of, dt, 4, qs);
            attn_tensor tl1 = attn_tensor_make(l1, ATTN_DTYPE_F32, 3, ls), tl2 = attn_tensor_make(l2, ATTN_DTYPE_F32, 3, ls);
            attn_tensor tlf = attn_tensor_make(lf, ATTN_DTYPE_F32, 3, ls);
            attn_params p;
            attn_params_init(&p);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk1, &tv1, &p, &to1, &tl1), ATTN_STATUS_OK);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk2, &tv2, &p, &to2, &tl2), ATTN_STATUS_OK);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tkf, &tvf, &p, &tof, &tlf), ATTN_STATUS_OK);
            /* [1, Sq, H, D] is [num_tokens, num_heads, head_size]; [1, H, Sq] is [num_heads, num_tokens] */
            int64_t ms[3] = {Sq, H, D}, mls[2] = {H, Sq};
            attn_tensor ma = attn_tensor_make(o1, dt, 3, ms), mb = attn_tensor_make(o2, dt, 3, ms);
            attn_tensor mo = attn_tensor_make(om, dt, 3, ms), mf = attn_tensor_make(of, dt, 3, ms);
            attn_tensor mla = attn_tensor_make(l1, ATTN_DTYPE_F32, 2, mls), mlb = attn_tensor_make(l2, ATTN_DTYPE_F32, 2, mls);
            attn_tensor mlo = attn_tensor_make(lm, ATTN_DTYPE_F32, 2, mls), mlf = attn_tensor_make(lf, ATTN_DTYPE_F32, 2, mls);
            assert_int_equal(attn_merge_attn_states(ctx, &ma, &mla, &mb, &mlb, &mo, &mlo), ATTN_STATUS_OK);
            size_t bad = 0, bad_l = 0;
            /* three roundings to dtype (two parts, the merge) against one: allow twice the dtype tolerance */
            th_tol tol = th_tol_for(dt);
            tol.atol *= 2, tol.rtol *= 2;
            const double err = th_compare(&mo, &mf, tol, 1.0, &bad);
            const double lerr = th_compare_lse(&mlo, &mlf, tol, &bad_l);
            if (bad || bad_l)
                fprintf(stderr, "REPRO test_merge split: dtype=%s Sq=%lld Sk=%lld split=%lld H=%lld Hk=%lld D=%lld "
                                "maxerr=%.3g lse_maxerr=%.3g\n", attn_dtype_name(dt), (long long)Sq, (long long)Sk,
                        (long long)a, (long long)H, (long long)Hk, (long long)D, err, lerr);
            assert_int_equal(bad, 0);
            assert_int_equal(bad_l, 0);
            if (a == 0 || a == Sk) { /* one side empty (LSE −inf, out 0): the merge returns the other side */
                assert_memory_equal(om, a == 0 ? o2 : o1, nq * es);
                assert_memory_equal(lm, a == 0 ? l2 : l1, (size_t)(H * Sq) * 4);
            }
            free(q), free(k), free(v), free(o1), free(o2), free(of), free(om), free(l1), free(l2), free(lf), free(lm);
        }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * attn_merge_attn_states_ex: rows from merge_tokens on copy state b; an fp8 out is the encoding of the
 * float32 result / output_scale
 * --------------------------------------------------------------------------------------------- */
static void test_merge_ex(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    enum { T = 6, H = 2, D = 8 };
    th_rng r;
    th_rng_seed(&r, 77);
    float *oa = th_alloc_fill(&r, ATTN_DTYPE_F32, T * H * D, -300, 300);
    float *ob = th_alloc_fill(&r, ATTN_DTYPE_F32, T * H * D, -300, 300);
    float la[H * T], lb[H * T], plain[T * H * D], plain_l[H * T], got[T * H * D], got_l[H * T];
    uint8_t f8[T * H * D], f8_0[T * H * D];
    for (int i = 0; i < H * T; i++)
        la[i] = (float)th_rng_range(&r, -2, 2), lb[i] = (float)th_rng_range(&r, -2, 2);
    lb[3] = INFINITY; /* an empty state: its copied LSE is −inf */
    const int64_t os[3] = {T, H, D}, ls[2] = {H, T};
    attn_tensor ta = attn_tensor_make(oa, ATTN_DTYPE_F32, 3, os), tb = attn_tensor_make(ob, ATTN_DTYPE_F32, 3, os);
    attn_tensor tla = attn_tensor_make(la, ATTN_DTYPE_F32, 2, ls), tlb = attn_tensor_make(lb, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tp = attn_tensor_make(plain, ATTN_DTYPE_F32, 3, os),
                tpl = attn_tensor_make(plain_l, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tg = attn_tensor_make(got, ATTN_DTYPE_F32, 3, os), tgl = attn_tensor_make(got_l, ATTN_DTYPE_F32, 2, ls);
    attn_tensor t8 = attn_tensor_make(f8, ATTN_DTYPE_FP8_E4M3, 3, os);
    assert_int_equal(attn_merge_attn_states(ctx, &ta, &tla, &tb, &tlb, &tp, &tpl), ATTN_STATUS_OK);
    for (int64_t m = 0; m <= T; m += 2) {
        assert_int_equal(attn_merge_attn_states_ex(ctx, &ta, &tla, &tb, &tlb, m, 0.0f, &tg, &tgl), ATTN_STATUS_OK);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                const float want_l = t < m ? plain_l[h * T + t] : lb[h * T + t] == INFINITY ? -INFINITY : lb[h * T + t];
                assert_memory_equal(&got_l[h * T + t], &want_l, 4);
                assert_memory_equal(&got[(t * H + h) * D], t < m ? &plain[(t * H + h) * D] : &ob[(t * H + h) * D],
                                    4 * D);
            }
        /* fp8: encode(x · (1 / 0.5)) of the same float32 results, saturating (|x| up to 600 > 448) */
        assert_int_equal(attn_merge_attn_states_ex(ctx, &ta, &tla, &tb, &tlb, m, 0.5f, &t8, NULL), ATTN_STATUS_OK);
        int saturated = 0;
        for (int64_t i = 0; i < T * H * D; i++) {
            const float x = (i / D) / H < m ? plain[i] : ob[i];
            assert_int_equal(f8[i], attn_fp8_from_float(ATTN_DTYPE_FP8_E4M3, x * 2.0f));
            saturated += (f8[i] & 0x7F) == 0x7E;
        }
        assert_true(saturated > 0);
    }
    /* refused, nothing written */
    memcpy(f8_0, f8, sizeof f8);
    const struct {
        int64_t m;
        float scale;
        attn_tensor *out;
        const char *msg;
    } bad[] = {{-1, 0.0f, &tg, "merge_tokens=-1"},
               {T, -1.0f, &t8, "output_scale=-1"},
               {T, INFINITY, &t8, "output_scale=inf"},
               {T, 0.5f, &tg, "out: dtype f32, expected fp8_e4m3 or fp8_e5m2"},
               {T, 0.0f, &t8, "out"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(attn_merge_attn_states_ex(ctx, &ta, &tla, &tb, &tlb, bad[i].m, bad[i].scale, bad[i].out, NULL),
                         ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), bad[i].msg));
    }
    assert_memory_equal(f8, f8_0, sizeof f8);
    free(oa), free(ob);
    attn_ctx_destroy(ctx);
}

/* A merge large enough to run on several threads (T·H·D >= 2^16) with rows longer than the 256 elements the entry
 * combines at a time (D = 300), and merge_tokens in the middle: every element equals the float expression of
 * the contract evaluated here one element at a time (weights from expf / logf of the two LSEs, a side of weight
 * 0 adding +0 without its values), bit for bit, on 1, 2 and 3 threads, for every float dtype, out of place and in
 * place (out = out_a, lse_out = lse_a); NaN and ±inf values in a row whose side has weight 0 change nothing. */
static void test_threads_and_long_rows(void **state) {
    (void)state;
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t T = 80, H = 3, D = 300, merge_tokens = 61, n = T * H * D;
    for (int di = 0; di < 3; di++) {
        const attn_dtype dt = dts[di];
        const size_t ob = (size_t)n * attn_dtype_size(dt);
        th_rng r;
        th_rng_seed(&r, 70 + (uint64_t)di);
        void *a = th_alloc_fill(&r, dt, (size_t)n, -1, 1), *b = th_alloc_fill(&r, dt, (size_t)n, -1, 1);
        float *la = th_alloc_fill(&r, ATTN_DTYPE_F32, (size_t)(H * T), -5, 5);
        float *lb = th_alloc_fill(&r, ATTN_DTYPE_F32, (size_t)(H * T), -5, 5);
        for (int64_t h = 0; h < H; h++) { /* token 5: side a empty and non-finite; token 6: side b */
            la[h * T + 5] = -INFINITY, lb[h * T + 6] = INFINITY;
            for (int64_t d = 0; d < D; d++) {
                th_set(a, dt, (size_t)((5 * H + h) * D + d), d % 2 ? NAN : INFINITY);
                th_set(b, dt, (size_t)((6 * H + h) * D + d), d % 2 ? -INFINITY : NAN);
            }
        }
        void *want = malloc(ob);
        float *want_l = malloc((size_t)(H * T) * sizeof(float));
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                float xa = t < merge_tokens ? la[h * T + t] : -INFINITY, xb = lb[h * T + t];
                if (xa == INFINITY)
                    xa = -INFINITY;
                if (xb == INFINITY)
                    xb = -INFINITY;
                const float mx = xa > xb ? xa : xb;
                float wa = 0.0f, wb = 0.0f, l = -INFINITY;
                if (mx != -INFINITY) {
                    const float ea = expf(xa - mx), eb = expf(xb - mx), sum = ea + eb;
                    l = mx + logf(sum), wa = ea / sum, wb = eb / sum;
                }
                want_l[h * T + t] = l;
                for (int64_t d = 0; d < D; d++) {
                    const size_t i = (size_t)((t * H + h) * D + d);
                    const float x = t >= merge_tokens ? th_get(b, dt, i)
                                                      : (wa != 0.0f ? wa * th_get(a, dt, i) : 0.0f) +
                                                            (wb != 0.0f ? wb * th_get(b, dt, i) : 0.0f);
                    th_set(want, dt, i, x);
                }
            }
        for (int32_t threads = 1; threads <= 3; threads++) {
            attn_ctx *ctx = new_ctx();
            assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
            void *o = th_alloc_nan(dt, (size_t)n);
            float *lo = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
            int64_t os[3] = {T, H, D}, ls[2] = {H, T};
            attn_tensor ta = attn_tensor_make(a, dt, 3, os), tb = attn_tensor_make(b, dt, 3, os);
            attn_tensor to = attn_tensor_make(o, dt, 3, os);
            attn_tensor tla = attn_tensor_make(la, ATTN_DTYPE_F32, 2, ls),
                        tlb = attn_tensor_make(lb, ATTN_DTYPE_F32, 2, ls);
            attn_tensor tlo = attn_tensor_make(lo, ATTN_DTYPE_F32, 2, ls);
            assert_int_equal(attn_merge_attn_states_ex(ctx, &ta, &tla, &tb, &tlb, merge_tokens, 0.0f, &to, &tlo),
                             ATTN_STATUS_OK);
            for (int64_t i = 0; i < n; i++)
                if (memcmp((const char *)o + i * (int64_t)attn_dtype_size(dt),
                           (const char *)want + i * (int64_t)attn_dtype_size(dt), attn_dtype_size(dt))) {
                    fprintf(stderr, "REPRO test_merge long rows: dtype=%s threads=%d element %lld got %g want %g\n",
                            attn_dtype_name(dt), (int)threads, (long long)i, (double)th_get(o, dt, (size_t)i),
                            (double)th_get(want, dt, (size_t)i));
                    fail();
                }
            assert_memory_equal(lo, want_l, (size_t)(H * T) * sizeof(float));
            /* in place, as the context-parallel folds call it: out = out_a, lse_out = lse_a */
            memcpy(o, a, ob);
            memcpy(lo, la, (size_t)(H * T) * sizeof(float));
            assert_int_equal(attn_merge_attn_states_ex(ctx, &to, &tlo, &tb, &tlb, merge_tokens, 0.0f, &to, &tlo),
                             ATTN_STATUS_OK);
            assert_memory_equal(o, want, ob);
            assert_memory_equal(lo, want_l, (size_t)(H * T) * sizeof(float));
            free(o), free(lo);
            attn_ctx_destroy(ctx);
        }
        free(a), free(b), free(la), free(lb), free(want), free(want_l);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_positive_inf_is_empty),
        cmocka_unit_test(test_nan_state_either_side),
        cmocka_unit_test(test_split_keys),
        cmocka_unit_test(test_merge_ex),
        cmocka_unit_test(test_threads_and_long_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
