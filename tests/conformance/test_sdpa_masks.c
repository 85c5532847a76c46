/*
 * test_sdpa_masks.c — torch SDPA / diffusers-style masks against the oracle: the additive float
 * mask (params.additive_mask, f32/f16/bf16) and the boolean keep-mask broadcast over every size-1 dimension of
 * [B, H, Sq, Sk] (ndim 1..4 right-aligned, stride-0 expanded views, non-contiguous rows), alone and together,
 * with causal, window, soft-cap, ALiBi and sinks, on every usable ISA and bitwise across thread counts; rows
 * fully hidden by −inf (out = 0, LSE = −inf); large finite negatives (−1e30, −FLT_MAX) that stay finite; keys
 * hidden by an additive −inf never reach a row whatever their K/V hold; the padded self-attention route
 * combined with an explicit / additive mask; and every bad mask argument rejected without writing.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn/attn_experimental.h"
#include "harness.h"

/* ---------------------------------------------------------------------------------------------
 * Buffers
 * --------------------------------------------------------------------------------------------- */
typedef struct sm_bufs {
    int64_t B, Sq, Sk, H, Hk, D;
    attn_dtype dt;
    void *q, *k, *v, *o, *or_, *o2, *l, *lr, *l2;
    attn_tensor tq, tk, tv, to, tor, to2, tl, tlr, tl2;
} sm_bufs;

/* BSND: q [B,Sq,H,D], k/v [B,Sk,Hk,D], out [B,Sq,H,D], lse [B,H,Sq]; outputs pre-filled with NaN. */
static void sm_alloc(sm_bufs *b, th_rng *rng, attn_dtype dt, int64_t B, int64_t Sq, int64_t Sk, int64_t H,
                     int64_t Hk, int64_t D) {
    b->B = B, b->Sq = Sq, b->Sk = Sk, b->H = H, b->Hk = Hk, b->D = D, b->dt = dt;
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, Sq};
    const size_t nq = (size_t)(B * Sq * H * D), nk = (size_t)(B * Sk * Hk * D), nl = (size_t)(B * H * Sq);
    b->q = th_alloc_fill(rng, dt, nq ? nq : 1, -2, 2);
    b->k = th_alloc_fill(rng, dt, nk ? nk : 1, -2, 2);
    b->v = th_alloc_fill(rng, dt, nk ? nk : 1, -1, 1);
    b->o = th_alloc_nan(dt, nq ? nq : 1), b->or_ = th_alloc_nan(dt, nq ? nq : 1), b->o2 = th_alloc_nan(dt, nq ? nq : 1);
    b->l = th_alloc_nan(ATTN_DTYPE_F32, nl ? nl : 1), b->lr = th_alloc_nan(ATTN_DTYPE_F32, nl ? nl : 1);
    b->l2 = th_alloc_nan(ATTN_DTYPE_F32, nl ? nl : 1);
    b->tq = attn_tensor_make(b->q, dt, 4, qs);
    b->tk = attn_tensor_make(b->k, dt, 4, ks);
    b->tv = attn_tensor_make(b->v, dt, 4, ks);
    b->to = attn_tensor_make(b->o, dt, 4, qs);
    b->tor = attn_tensor_make(b->or_, dt, 4, qs);
    b->to2 = attn_tensor_make(b->o2, dt, 4, qs);
    b->tl = attn_tensor_make(b->l, ATTN_DTYPE_F32, 3, ls);
    b->tlr = attn_tensor_make(b->lr, ATTN_DTYPE_F32, 3, ls);
    b->tl2 = attn_tensor_make(b->l2, ATTN_DTYPE_F32, 3, ls);
}

static void sm_free(sm_bufs *b) {
    free(b->q), free(b->k), free(b->v), free(b->o), free(b->or_), free(b->o2), free(b->l), free(b->lr), free(b->l2);
}

/* Fast out/LSE vs oracle within the dtype's tolerance, widened for logits of magnitude `logit_mag` (fp32
 * logits carry a few ulps of their magnitude, SEMANTICS.md §6); returns the number of bad elements. */
static size_t sm_compare(const sm_bufs *b, double logit_mag, const char *what) {
    size_t bad = 0, bad_l = 0;
    const th_tol tol = logit_mag > 0 ? th_tol_for_logits(b->dt, logit_mag) : th_tol_for(b->dt);
    const double err = th_compare(&b->to, &b->tor, tol, 1.0, &bad);
    const double err_l = th_compare_lse(&b->tl, &b->tlr, tol, &bad_l);
    if (bad || bad_l)
        print_error("REPRO %s (%s): %zu out / %zu lse elements out of tolerance, max err %g / %g\n", what,
                    attn_dtype_name(b->dt), bad, bad_l, err, err_l);
    return bad + bad_l;
}

/* Rows with LSE −inf must be exactly 0 in `o`; every out element must be finite. Returns the empty rows. */
static int64_t sm_check_rows(const attn_tensor *o, const attn_tensor *l) {
    int64_t empty = 0;
    for (int64_t bb = 0; bb < o->shape[0]; bb++)
        for (int64_t s = 0; s < o->shape[1]; s++)
            for (int64_t h = 0; h < o->shape[2]; h++) {
                int64_t li[3] = {bb, h, s};
                const float lse = ((const float *)l->data)[th_offset(l, li)];
                assert_false(isnan(lse));
                const int is_empty = isinf(lse) && lse < 0;
                empty += is_empty;
                for (int64_t d = 0; d < o->shape[3]; d++) {
                    int64_t oi[4] = {bb, s, h, d};
                    const float x = th_get(o->data, o->dtype, (size_t)th_offset(o, oi));
                    assert_true(isfinite(x));
                    if (is_empty) assert_true(x == 0.0f);
                }
            }
    return empty;
}

/* ---------------------------------------------------------------------------------------------
 * Broadcast mask views
 * --------------------------------------------------------------------------------------------- */
typedef struct sm_mask {
    void *data;
    attn_tensor t;
} sm_mask;

/* A mask view of `ndim` (1..4) right-aligned to full = [B, H, Sq, Sk]: dims whose bit is set in `bcast`
 * (bit a = 4-D dimension a) have size 1, or with `expand` keep the full size with stride 0 (torch .expand());
 * with `pad_rows` the rows (last dimension) are `pad_rows` elements further apart than contiguous. Values:
 * keep-mask true with probability 0.75; additive uniform in [-3, 3] with -inf (p_ninf) and `big` (p_big). */
static void sm_mask_make(sm_mask *m, th_rng *rng, attn_dtype dt, const int64_t full[4], int32_t ndim, unsigned bcast,
                         int expand, int64_t pad_rows, double p_ninf, double p_big, float big) {
    int64_t shape[4], alloc_shape[4];
    for (int32_t d = 0; d < ndim; d++) {
        const int32_t a = 4 - ndim + d;
        const int b = (bcast >> a) & 1;
        shape[d] = b && !expand ? 1 : full[a];
        alloc_shape[d] = b ? 1 : full[a];
    }
    /* contiguous strides over alloc_shape, rows padded */
    int64_t strides[4], n = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        strides[d] = n;
        n *= (d == ndim - 1 ? alloc_shape[d] + pad_rows : alloc_shape[d]);
        if (n == 0) n = 1;
    }
    const size_t es = attn_dtype_size(dt);
    m->data = malloc((size_t)n * es + 16);
    for (int64_t i = 0; i < n; i++) {
        if (dt == ATTN_DTYPE_BOOL || dt == ATTN_DTYPE_U8) {
            ((unsigned char *)m->data)[i] = th_rng_uniform(rng) < 0.75;
        } else {
            const double u = th_rng_uniform(rng);
            const float x = u < p_ninf ? -INFINITY : u < p_ninf + p_big ? big : (float)th_rng_range(rng, -3, 3);
            th_set(m->data, dt, (size_t)i, x);
        }
    }
    m->t = attn_tensor_make(m->data, dt, ndim, shape);
    for (int32_t d = 0; d < ndim; d++)
        m->t.strides[d] = expand && ((bcast >> (4 - ndim + d)) & 1) ? 0 : strides[d];
}

/* The element of mask view t at (b, h, i, j) of [B, H, Sq, Sk] (right-aligned, size-1 dims broadcast). */
static float sm_mask_at(const attn_tensor *t, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t idx4[4] = {b, h, i, j};
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1) off += idx4[4 - t->ndim + d] * t->strides[d];
    if (t->dtype == ATTN_DTYPE_BOOL || t->dtype == ATTN_DTYPE_U8) return ((const unsigned char *)t->data)[off];
    return th_get(t->data, t->dtype, (size_t)off);
}

/* ---------------------------------------------------------------------------------------------
 * Random cases against the oracle
 * --------------------------------------------------------------------------------------------- */
static void test_sdpa_random(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 1010);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int small = th_test_small();
    const int num_cases = small ? 24 : 96;
    int fails = 0;
    int64_t empty_rows = 0;
    for (int ci = 0; ci < num_cases; ci++) {
        const attn_dtype dt = dts[ci % 3];
        const attn_dtype mdt = dts[(ci / 3) % 3];
        const int kinds = 1 + ci % 3; /* bit 0: additive, bit 1: keep-mask */
        const int64_t B = th_rng_int(&rng, 1, 2), Hk = th_rng_int(&rng, 1, 2), H = Hk * th_rng_int(&rng, 1, 3);
        const int64_t Sq = ci % 7 == 0 ? th_rng_int(&rng, 1, 3) : th_rng_int(&rng, 1, small ? 40 : 130);
        const int64_t Sk = th_rng_int(&rng, 1, small ? 90 : 200);
        const int64_t D = (int64_t[]){32, 64, 80, 128}[th_rng_int(&rng, 0, 3)];
        sm_bufs b;
        sm_alloc(&b, &rng, dt, B, Sq, Sk, H, Hk, D);
        const int64_t full[4] = {B, H, Sq, Sk};
        sm_mask am = {0}, km = {0};
        attn_params p;
        attn_params_init(&p);
        const int32_t ndim = (int32_t)th_rng_int(&rng, 1, 4);
        const unsigned bcast = (unsigned)th_rng_int(&rng, 0, 15) | (ci % 5 == 0 ? 4u : 0u); /* often [B,1,1,Sk] */
        const int expand = ndim == 4 && ci % 4 == 1;
        const int64_t pad = ci % 3 == 2 ? 3 : 0;
        if (kinds & 1) {
            sm_mask_make(&am, &rng, mdt, full, ndim, bcast, expand, pad, 0.15, 0.05, mdt == ATTN_DTYPE_F16 ? -6e4f : -1e30f);
            p.additive_mask = &am.t;
        }
        if (kinds & 2) {
            const int32_t kd = (int32_t)th_rng_int(&rng, 1, 4);
            sm_mask_make(&km, &rng, ATTN_DTYPE_BOOL, full, kd, (unsigned)th_rng_int(&rng, 0, 15), kd == 4 && ci % 2,
                         ci % 2, 0, 0, 0);
            p.mask = &km.t;
        }
        const int variant = (ci / 2) % 6; /* 0 none, 1 causal, 2 causal+window, 3 softcap, 4 alibi, 5 sinks */
        float slopes[8], sinks[8];
        for (int h = 0; h < 8; h++) slopes[h] = 0.05f * (float)(h + 1), sinks[h] = 0.3f * (float)h - 0.5f;
        if (variant == 1 || variant == 2) p.causal = ci % 4 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_TOP_LEFT;
        if (variant == 2) p.window_left = 23, p.window_right = 2;
        if (variant == 3) p.softcap = 5.0f;
        if (variant == 4) p.alibi_slopes = slopes;
        if (variant == 5) p.sinks = sinks;
        char what[256];
        snprintf(what, sizeof what,
                 "test_sdpa_masks case %d: B=%lld H=%lld Hk=%lld Sq=%lld Sk=%lld D=%lld kinds=%d mask_dtype=%s "
                 "ndim=%d bcast=%u expand=%d pad=%lld variant=%d",
                 ci, (long long)B, (long long)H, (long long)Hk, (long long)Sq, (long long)Sk, (long long)D, kinds,
                 attn_dtype_name(mdt), (int)ndim, bcast, expand, (long long)pad, variant);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.tor, &b.tlr), ATTN_STATUS_OK);
        for (int32_t i = 0; i < attn_isa_count(); i++) {
            const char *isa = attn_isa_name(i);
            if (!attn_isa_available(isa)) continue;
            assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
            assert_int_equal(attn_ctx_set_num_threads(ctx, 1), ATTN_STATUS_OK);
            memset(b.o, 0xff, (size_t)(B * Sq * H * D) * attn_dtype_size(dt));
            const attn_status st = attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl);
            if (st != ATTN_STATUS_OK) print_error("%s: %s\n", what, attn_last_error());
            assert_int_equal(st, ATTN_STATUS_OK);
            /* f16 masks use −6e4 as their "large finite": logits of that size lose a few fp32 ulps */
            const size_t bad = sm_compare(&b, (kinds & 1) && mdt == ATTN_DTYPE_F16 ? 6e4 : 0.0, what);
            if (bad) print_error("  isa %s\n", isa);
            fails += bad != 0;
            empty_rows += sm_check_rows(&b.to, &b.tl);
            /* bitwise the same with 2 and 3 threads */
            assert_int_equal(attn_ctx_set_num_threads(ctx, 2 + ci % 2), ATTN_STATUS_OK);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to2, &b.tl2),
                             ATTN_STATUS_OK);
            assert_true(th_bitwise_equal(&b.to, &b.to2));
            assert_true(th_bitwise_equal(&b.tl, &b.tl2));
        }
        free(am.data), free(km.data);
        sm_free(&b);
    }
    assert_int_equal(fails, 0);
    assert_true(empty_rows > 0); /* some rows were hidden entirely by −inf / false */
    attn_ctx_destroy(ctx);
}

/* The additive mask equals the boolean mask where it holds only 0 and −inf: bitwise the same out and LSE. */
static void test_additive_equals_keep_mask(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 1011);
    const int64_t B = 2, H = 4, Hk = 2, Sq = 45, Sk = 150, D = 64;
    const attn_dtype mdts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    for (int mi = 0; mi < 3; mi++) {
        sm_bufs b;
        sm_alloc(&b, &rng, ATTN_DTYPE_F32, B, Sq, Sk, H, Hk, D);
        int64_t ms[4] = {B, 1, Sq, Sk};
        unsigned char *keep = malloc((size_t)(B * Sq * Sk));
        void *add = malloc((size_t)(B * Sq * Sk) * 4);
        for (int64_t i = 0; i < B * Sq * Sk; i++) {
            keep[i] = th_rng_uniform(&rng) < 0.6;
            th_set(add, mdts[mi], (size_t)i, keep[i] ? 0.0f : -INFINITY);
        }
        memset(keep + 3 * Sk, 0, (size_t)Sk); /* row 3 of batch 0 sees nothing */
        for (int64_t j = 0; j < Sk; j++) th_set(add, mdts[mi], (size_t)(3 * Sk + j), -INFINITY);
        attn_tensor tk = attn_tensor_make(keep, ATTN_DTYPE_BOOL, 4, ms), ta = attn_tensor_make(add, mdts[mi], 4, ms);
        attn_params pk, pa;
        attn_params_init(&pk), attn_params_init(&pa);
        pk.mask = &tk, pa.additive_mask = &ta;
        pk.causal = pa.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &pk, &b.to, &b.tl), ATTN_STATUS_OK);
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &pa, &b.to2, &b.tl2), ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&b.to, &b.to2));
        assert_true(th_bitwise_equal(&b.tl, &b.tl2));
        assert_true(sm_check_rows(&b.to2, &b.tl2) >= H);
        free(keep), free(add);
        sm_free(&b);
    }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Rows fully hidden by −inf, large finite negatives
 * --------------------------------------------------------------------------------------------- */
static void test_neg_inf_rows_and_large_negatives(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 1012);
    const int64_t B = 1, H = 2, Sq = 6, Sk = 100, D = 64;
    const attn_dtype mdts[2] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16};
    for (int mi = 0; mi < 2; mi++)
        for (int with_sink = 0; with_sink < 2; with_sink++) {
            const attn_dtype mdt = mdts[mi];
            sm_bufs b;
            sm_alloc(&b, &rng, ATTN_DTYPE_F32, B, Sq, Sk, H, H, D);
            int64_t ms[2] = {Sq, Sk};
            void *add = calloc((size_t)(Sq * Sk), 4);
            for (int64_t j = 0; j < Sk; j++) {
                th_set(add, mdt, (size_t)(0 * Sk + j), (float)th_rng_range(&rng, -2, 2)); /* row 0: plain bias */
                th_set(add, mdt, (size_t)(1 * Sk + j), -INFINITY);                         /* row 1: nothing visible */
                th_set(add, mdt, (size_t)(2 * Sk + j), -1e30f);                            /* row 2: all −1e30 */
                th_set(add, mdt, (size_t)(3 * Sk + j), j % 3 ? -1e30f : 0.5f);             /* row 3: mixed */
                th_set(add, mdt, (size_t)(4 * Sk + j), j % 2 ? -INFINITY : -1e30f);        /* row 4: −inf and −1e30 */
                th_set(add, mdt, (size_t)(5 * Sk + j), -3.38e38f); /* row 5: ≈ finfo.min (f32 and bf16) */
            }
            attn_tensor ta = attn_tensor_make(add, mdt, 2, ms);
            const float sinks[2] = {0.25f, -1.5f};
            attn_params p;
            attn_params_init(&p);
            p.additive_mask = &ta;
            if (with_sink) p.sinks = sinks;
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl), ATTN_STATUS_OK);
            assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.tor, &b.tlr), ATTN_STATUS_OK);
            const float *o = (const float *)b.o, *orf = (const float *)b.or_, *l = (const float *)b.l;
            const float *lr = (const float *)b.lr;
            const float *v = (const float *)b.v;
            for (int64_t h = 0; h < H; h++) {
                for (int64_t i = 0; i < Sq; i++) {
                    const float lse = l[h * Sq + i], lse_ref = lr[h * Sq + i];
                    assert_false(isnan(lse));
                    for (int64_t d = 0; d < D; d++) assert_true(isfinite(o[(i * H + h) * D + d]));
                    if (i == 1) { /* every key −inf: out 0, LSE −inf (or the sink) */
                        for (int64_t d = 0; d < D; d++) assert_true(o[(i * H + h) * D + d] == 0.0f);
                        if (with_sink) assert_true(fabsf(lse - sinks[h]) <= 1e-6f);
                        else assert_true(isinf(lse) && lse < 0);
                        assert_true(lse == lse_ref);
                        continue;
                    }
                    if (i == 5) { /* saturates at −FLT_MAX in log2 units: out is still the average, LSE finite */
                        if (with_sink) { /* the sink outweighs the keys entirely */
                            assert_true(fabsf(lse - sinks[h]) <= 1e-6f);
                            continue;
                        }
                        assert_true(isfinite(lse) && lse < -1e38f);
                        for (int64_t d = 0; d < D; d++) {
                            double mean = 0.0;
                            for (int64_t j = 0; j < Sk; j++) mean += v[(j * H + h) * D + d];
                            mean /= (double)Sk;
                            assert_true(fabs(o[(i * H + h) * D + d] - mean) <= 1e-5);
                        }
                        continue;
                    }
                    /* rows 0, 2, 3, 4: the oracle's numbers (rows 2 and 4: uniform over the −1e30 keys) */
                    for (int64_t d = 0; d < D; d++) {
                        const double want = orf[(i * H + h) * D + d], got = o[(i * H + h) * D + d];
                        if (!(fabs(got - want) <= 2e-5 + 1e-5 * fabs(want)))
                            print_error("row %lld head %lld d %lld: %.9g vs oracle %.9g\n", (long long)i, (long long)h,
                                        (long long)d, got, want);
                        assert_true(fabs(got - want) <= 2e-5 + 1e-5 * fabs(want));
                    }
                    assert_true(fabs((double)lse - (double)lse_ref) <= 2e-5 * fmax(1.0, fabs((double)lse_ref)));
                    if ((i == 2 || i == 4) && !with_sink) {
                        assert_true(lse < -9e29f); /* a finite logit, never −inf */
                        /* uniform over its −1e30 keys */
                        for (int64_t d = 0; d < 4; d++) {
                            double mean = 0.0;
                            int64_t n = 0;
                            for (int64_t j = 0; j < Sk; j++)
                                if (i == 2 || j % 2 == 0) mean += v[(j * H + h) * D + d], n++;
                            assert_true(fabs(o[(i * H + h) * D + d] - mean / (double)n) <= 1e-5);
                        }
                    }
                }
            }
            free(add);
            sm_free(&b);
        }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Hidden keys: a key hidden by an additive −inf never influences a row, whatever its K/V hold
 * --------------------------------------------------------------------------------------------- */
static void test_additive_hidden_keys(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t shapes[4][2] = {{70, 70}, {40, 150}, {1, 200}, {3, 131}};
    const float poisons[3] = {NAN, INFINITY, -INFINITY};
    int64_t compared = 0, poisoned = 0;
    int fails = 0;
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 3; di++) {
            const int64_t Sq = shapes[si][0], Sk = shapes[si][1], H = 4, Hk = 2, D = 64;
            const attn_dtype kv = dts[di];
            th_rng r;
            th_rng_seed(&r, 1013 + (uint64_t)(si * 3 + di));
            const size_t nq = (size_t)(Sq * H * D), nkv = (size_t)(Sk * Hk * D), es = attn_dtype_size(kv);
            float *q = th_alloc_fill(&r, ATTN_DTYPE_F32, nq, -2, 2);
            void *k = th_alloc_fill(&r, kv, nkv, -2, 2), *v = th_alloc_fill(&r, kv, nkv, -1, 1);
            void *k2 = malloc(nkv * es), *v2 = malloc(nkv * es);
            float *out = malloc(nq * 4), *out2 = malloc(nq * 4), *lse = malloc((size_t)(H * Sq) * 4),
                  *lse2 = malloc((size_t)(H * Sq) * 4);
            float *add = malloc((size_t)(H * Sq * Sk) * 4); /* [1, H, Sq, Sk] */
            for (int64_t i = 0; i < H * Sq * Sk; i++)
                add[i] = th_rng_uniform(&r) < 0.3 ? -INFINITY : (float)th_rng_range(&r, -1, 1);
            const int64_t qs[4] = {1, Sq, H, D}, ks[4] = {1, Sk, Hk, D}, ls[3] = {1, H, Sq}, ms[4] = {1, H, Sq, Sk};
            attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, kv, 4, ks);
            attn_tensor tv = attn_tensor_make(v, kv, 4, ks), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, qs);
            attn_tensor tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, ls);
            attn_tensor tk2 = attn_tensor_make(k2, kv, 4, ks), tv2 = attn_tensor_make(v2, kv, 4, ks);
            attn_tensor to2 = attn_tensor_make(out2, ATTN_DTYPE_F32, 4, qs);
            attn_tensor tl2 = attn_tensor_make(lse2, ATTN_DTYPE_F32, 3, ls);
            attn_tensor ta = attn_tensor_make(add, ATTN_DTYPE_F32, 4, ms);
            attn_params p;
            attn_params_init(&p);
            p.additive_mask = &ta;
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, &tl), ATTN_STATUS_OK);
            const int64_t keys[4] = {Sk - 1, Sk / 2 + 3, 5, Sk - Sq > 0 ? Sk - Sq : 1};
            for (int ki = 0; ki < 4; ki++)
                for (int pi = 0; pi < 3; pi++) {
                    const int64_t j = keys[ki];
                    memcpy(k2, k, nkv * es), memcpy(v2, v, nkv * es);
                    for (int64_t g = 0; g < Hk; g++)
                        for (int64_t d = 0; d < D; d++) {
                            th_set(k2, kv, (size_t)((j * Hk + g) * D + d), poisons[pi]);
                            th_set(v2, kv, (size_t)((j * Hk + g) * D + d), poisons[(pi + d) % 3]);
                        }
                    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk2, &tv2, &p, &to2, &tl2),
                                     ATTN_STATUS_OK);
                    for (int64_t i = 0; i < Sq; i++)
                        for (int64_t h = 0; h < H; h++) {
                            const float *a = out + (i * H + h) * D, *bb = out2 + (i * H + h) * D;
                            if (add[(h * Sq + i) * Sk + j] != -INFINITY) {
                                int nonfinite = 0;
                                for (int64_t d = 0; d < D; d++) nonfinite |= !isfinite(bb[d]);
                                poisoned += nonfinite;
                                continue;
                            }
                            compared++;
                            if (memcmp(a, bb, (size_t)D * 4) != 0 || memcmp(&lse[h * Sq + i], &lse2[h * Sq + i], 4)) {
                                if (fails++ < 5)
                                    print_error("REPRO additive hidden key: kv=%s Sq=%lld Sk=%lld key=%lld poison=%g "
                                                "row=%lld head=%lld: %.9g vs clean %.9g\n",
                                                attn_dtype_name(kv), (long long)Sq, (long long)Sk, (long long)j,
                                                (double)poisons[pi], (long long)i, (long long)h, (double)bb[0],
                                                (double)a[0]);
                            }
                        }
                }
            free(q), free(k), free(v), free(k2), free(v2), free(out), free(out2), free(lse), free(lse2), free(add);
        }
    assert_int_equal(fails, 0);
    assert_true(compared > 0);
    assert_true(poisoned > 0); /* the poison shows where the key is visible: the test can fail */
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Padded self-attention combined with an explicit / additive mask
 * --------------------------------------------------------------------------------------------- */
static void test_padded_with_masks(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 1014);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int round = 0; round < 6; round++) {
        /* emulated (th_test_emulated): sequences up to 140 tokens instead of 225 */
        const int64_t B = 2 + round % 2, S = round == 0 ? 5 : 40 + (th_test_emulated() ? 20 : 37) * round, H = 4,
                      Hk = round % 2 ? 2 : 4, D = 64;
        const attn_dtype dt = dts[round % 3];
        const int kinds = 1 + round % 3; /* bit 0 additive, bit 1 keep-mask */
        sm_bufs b;
        sm_alloc(&b, &rng, dt, B, S, S, H, Hk, D);
        unsigned char *kpm = malloc((size_t)(B * S));
        for (int64_t i = 0; i < B * S; i++) kpm[i] = th_rng_uniform(&rng) < 0.7;
        if (round == 4) memset(kpm, 0, (size_t)S); /* batch row 0 entirely padded */
        const int64_t full[4] = {B, H, S, S};
        sm_mask am = {0}, km = {0};
        attn_params p, pe;
        attn_params_init(&p), attn_params_init(&pe);
        if (kinds & 1) {
            /* [B, 1, 1, S] (the diffusers case) in even rounds, [B, H, S, S] in odd ones */
            sm_mask_make(&am, &rng, dts[(round + 1) % 3], full, 4, round % 2 ? 0u : 6u, 0, 0, 0.1, 0.0, 0);
            p.additive_mask = pe.additive_mask = &am.t;
        }
        if (kinds & 2) {
            sm_mask_make(&km, &rng, ATTN_DTYPE_U8, full, round % 2 ? 2 : 4, round % 2 ? 0u : 2u, 0, 0, 0, 0, 0);
            p.mask = &km.t;
        }
        /* oracle: the dense call with keep(b, h, i, j) = kpm[b][i] && kpm[b][j] && mask(b, h, i, j) */
        int64_t es[4] = {B, H, S, S};
        unsigned char *eq = malloc((size_t)(B * H * S * S));
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S; i++)
                    for (int64_t j = 0; j < S; j++)
                        eq[((bb * H + h) * S + i) * S + j] = kpm[bb * S + i] && kpm[bb * S + j] &&
                                                             (!p.mask || sm_mask_at(p.mask, bb, h, i, j) != 0.0f);
        attn_tensor te = attn_tensor_make(eq, ATTN_DTYPE_BOOL, 4, es);
        pe.mask = &te;
        int64_t ks[2] = {B, S};
        attn_tensor tk = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, ks);
        size_t ws = 0;
        assert_int_equal(attn_forward_padded_workspace_size(B, S, &ws), ATTN_STATUS_OK);
        void *w = malloc(ws);
        const attn_status st = attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &b.to, &b.tl, w, ws);
        if (st != ATTN_STATUS_OK) print_error("%s\n", attn_last_error());
        assert_int_equal(st, ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &pe, &b.tor, &b.tlr), ATTN_STATUS_OK);
        char what[96];
        snprintf(what, sizeof what, "padded + masks round %d kinds %d", round, kinds);
        assert_int_equal(sm_compare(&b, 0.0, what), 0);
        int64_t padded = 0;
        for (int64_t i = 0; i < B * S; i++) padded += !kpm[i];
        assert_true(sm_check_rows(&b.to, &b.tl) >= padded * H);
        /* the oracle twin of the padded route agrees, and 2 threads give the same bits */
        assert_int_equal(attn_ref_forward_padded(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &b.tor, &b.tlr, w, ws),
                         ATTN_STATUS_OK);
        assert_int_equal(sm_compare(&b, 0.0, what), 0);
        assert_int_equal(attn_ctx_set_num_threads(ctx, 2), ATTN_STATUS_OK);
        assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &b.to2, &b.tl2, w, ws),
                         ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&b.to, &b.to2));
        assert_true(th_bitwise_equal(&b.tl, &b.tl2));
        assert_int_equal(attn_ctx_set_num_threads(ctx, 1), ATTN_STATUS_OK);
        free(w), free(kpm), free(eq), free(am.data), free(km.data);
        sm_free(&b);
    }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Bad mask arguments: a status naming the argument, nothing written
 * --------------------------------------------------------------------------------------------- */
static void test_mask_errors(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 1015);
    const int64_t B = 2, Sq = 5, Sk = 7, H = 2, D = 32;
    sm_bufs b;
    sm_alloc(&b, &rng, ATTN_DTYPE_F32, B, Sq, Sk, H, H, D);
    float *add = calloc(4 * 256, 4);
    unsigned char *keep = calloc(256, 1);
    const int64_t s4[4] = {B, H, Sq, Sk}, s_bq[4] = {B, 1, 3, Sk}, s5[5] = {1, B, H, Sq, Sk}, s_k[1] = {Sk};
    const int64_t s_bad_k[2] = {Sq, 6}, s_bad_b[4] = {3, 1, 1, Sk}, s_bad_h[3] = {3, 1, Sk};
    attn_tensor a_ok = attn_tensor_make(add, ATTN_DTYPE_F32, 4, s4);
    attn_tensor a_u8 = attn_tensor_make(keep, ATTN_DTYPE_U8, 4, s4);
    attn_tensor a_i32 = attn_tensor_make(add, ATTN_DTYPE_I32, 4, s4);
    attn_tensor a_sq = attn_tensor_make(add, ATTN_DTYPE_F32, 4, s_bq);
    attn_tensor a_nd5 = attn_tensor_make(add, ATTN_DTYPE_F32, 5, s5);
    attn_tensor a_nd0 = attn_tensor_make(add, ATTN_DTYPE_F32, 0, s4);
    attn_tensor a_k = attn_tensor_make(add, ATTN_DTYPE_F32, 1, s_k);
    attn_tensor a_bad_k = attn_tensor_make(add, ATTN_DTYPE_F32, 2, s_bad_k);
    attn_tensor a_bad_b = attn_tensor_make(add, ATTN_DTYPE_F32, 4, s_bad_b);
    attn_tensor a_bad_h = attn_tensor_make(add, ATTN_DTYPE_F32, 3, s_bad_h);
    attn_tensor a_neg = a_ok;
    a_neg.strides[1] = -1;
    attn_tensor a_mis = a_ok;
    a_mis.data = (char *)add + 2;
    attn_tensor a_null = a_ok;
    a_null.data = NULL;
    attn_tensor k_f32 = attn_tensor_make(add, ATTN_DTYPE_F32, 4, s4);
    attn_tensor k_bad = attn_tensor_make(keep, ATTN_DTYPE_BOOL, 4, s_bq);
    attn_tensor a_over = attn_tensor_make(b.o, ATTN_DTYPE_F32, 1, s_k); /* overlaps out */
    struct {
        const attn_tensor *add, *keep;
        attn_status st;
        const char *msg;
    } cases[] = {
        {&a_u8, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: dtype u8, expected f32, f16 or bf16"},
        {&a_i32, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: dtype"},
        {&a_sq, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: shape[2]=3, expected seq_q=5 (or 1"},
        {&a_nd5, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: ndim=5, expected 1..4"},
        {&a_nd0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: ndim=0, expected 1..4"},
        {&a_bad_k, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: shape[1]=6, expected seq_k=7"},
        {&a_bad_b, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: shape[0]=3, expected batch=2"},
        {&a_bad_h, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: shape[0]=3, expected num_heads=2"},
        {&a_neg, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: strides[1]=-1 is negative"},
        {&a_mis, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask: data pointer"},
        {&a_null, NULL, ATTN_STATUS_INVALID_ARGUMENT, "params.additive_mask"},
        {&a_over, NULL, ATTN_STATUS_INVALID_ARGUMENT, "out: overlaps params.additive_mask"},
        {NULL, &k_f32, ATTN_STATUS_INVALID_ARGUMENT, "params.mask: dtype f32, expected bool or u8"},
        {NULL, &k_bad, ATTN_STATUS_INVALID_ARGUMENT, "params.mask: shape[2]=3, expected seq_q=5"},
    };
    memset(b.o, 0x7f, (size_t)(B * Sq * H * D) * 4);
    memset(b.l, 0x7f, (size_t)(B * H * Sq) * 4);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_params p;
        attn_params_init(&p);
        p.additive_mask = cases[i].add, p.mask = cases[i].keep;
        for (int ref = 0; ref < 2; ref++) {
            const attn_status st = ref ? attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl)
                                       : attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl);
            if (st != cases[i].st || !strstr(attn_last_error(), cases[i].msg))
                print_error("case %zu ref %d: status %d, message '%s'\n", i, ref, (int)st, attn_last_error());
            assert_int_equal(st, cases[i].st);
            assert_non_null(strstr(attn_last_error(), cases[i].msg));
        }
    }
    for (size_t i = 0; i < (size_t)(B * Sq * H * D); i++) { /* nothing written */
        uint32_t u;
        memcpy(&u, (float *)b.o + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    for (size_t i = 0; i < (size_t)(B * H * Sq); i++) {
        uint32_t u;
        memcpy(&u, (float *)b.l + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    /* legal: broadcast [Sk], [B, 1, 1, Sk] */
    attn_params p;
    attn_params_init(&p);
    p.additive_mask = &a_k;
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl), ATTN_STATUS_OK);

    /* entries without mask support name the additive mask: UNSUPPORTED */
    memset(b.o, 0x7f, (size_t)(B * Sq * H * D) * 4);
    attn_params_init(&p);
    p.additive_mask = &a_ok;
    {
        int32_t cq[2] = {0, (int32_t)Sq}, ck[2] = {0, (int32_t)Sk};
        const int64_t q3[3] = {Sq, H, D}, k3[3] = {Sk, H, D}, two[1] = {2};
        attn_tensor tq = attn_tensor_make(b.q, ATTN_DTYPE_F32, 3, q3), tk = attn_tensor_make(b.k, ATTN_DTYPE_F32, 3, k3);
        attn_tensor tv = attn_tensor_make(b.v, ATTN_DTYPE_F32, 3, k3), to = attn_tensor_make(b.o, ATTN_DTYPE_F32, 3, q3);
        attn_tensor tcq = attn_tensor_make(cq, ATTN_DTYPE_I32, 1, two), tck = attn_tensor_make(ck, ATTN_DTYPE_I32, 1, two);
        assert_int_equal(attn_forward_varlen(ctx, &tq, &tk, &tv, &tcq, &tck, &p, &to, NULL), ATTN_STATUS_UNSUPPORTED);
        assert_non_null(strstr(attn_last_error(), "params.additive_mask"));
    }
    static const attn_span spans[1] = {{0, 2}};
    assert_int_equal(attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, spans, 1, NULL, 0, &p, &b.to, NULL),
                     ATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "params.additive_mask"));
    assert_int_equal(attn_forward_kv_prefix(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, 3, &p, &b.to, NULL),
                     ATTN_STATUS_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "params.additive_mask"));
    {
        size_t qws = 0;
        assert_int_equal(attn_forward_quant_workspace_size(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &qws), ATTN_STATUS_OK);
        void *qw = malloc(qws);
        attn_quant_params qp;
        attn_quant_params_init(&qp, ATTN_QUANT_FP8_E4M3);
        assert_int_equal(attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &qp, &p, &b.to, NULL, qw, qws),
                         ATTN_STATUS_UNSUPPORTED);
        assert_non_null(strstr(attn_last_error(), "params.additive_mask"));
        free(qw);
    }
    for (size_t i = 0; i < (size_t)(B * Sq * H * D); i++) { /* nothing written by the refused calls */
        uint32_t u;
        memcpy(&u, (float *)b.o + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    /* the padded route takes its key padding as an argument, not in params */
    {
        sm_bufs c;
        sm_alloc(&c, &rng, ATTN_DTYPE_F32, B, Sq, Sq, H, H, D);
        unsigned char kpm[10];
        memset(kpm, 1, sizeof kpm);
        const int64_t ks[2] = {B, Sq}, bad[4] = {B, 1, 1, Sq + 1};
        attn_tensor tk = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, ks);
        attn_tensor tbad = attn_tensor_make(add, ATTN_DTYPE_F32, 4, bad);
        size_t ws = 0;
        assert_int_equal(attn_forward_padded_workspace_size(B, Sq, &ws), ATTN_STATUS_OK);
        void *w = malloc(ws);
        attn_params pp;
        attn_params_init(&pp);
        pp.key_padding_mask = &tk;
        assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &c.tq, &c.tk, &c.tv, &tk, &pp, &c.to, NULL, w, ws),
                         ATTN_STATUS_UNSUPPORTED);
        assert_non_null(strstr(attn_last_error(), "params.key_padding_mask"));
        attn_params_init(&pp);
        pp.additive_mask = &tbad;
        assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &c.tq, &c.tk, &c.tv, &tk, &pp, &c.to, NULL, w, ws),
                         ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "params.additive_mask: shape[3]=6, expected seq_k=5"));
        free(w);
        sm_free(&c);
    }
    free(add), free(keep);
    sm_free(&b);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdpa_random),
        cmocka_unit_test(test_additive_equals_keep_mask),
        cmocka_unit_test(test_neg_inf_rows_and_large_negatives),
        cmocka_unit_test(test_additive_hidden_keys),
        cmocka_unit_test(test_padded_with_masks),
        cmocka_unit_test(test_mask_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
