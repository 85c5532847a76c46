/*
 * test_dense.c — attn_forward against the oracle (attn_ref_forward) over shapes × dtypes × options × views,
 * on every usable ISA. The oracle always reads contiguous BSND copies of the inputs, so stride and layout
 * handling of the fast path is checked independently. Inputs live in NaN-filled buffers (a read outside the
 * view poisons the result); outputs are NaN-prefilled and must be written exactly on their view.
 * Every random case is reproducible from its seed: ATTN_TEST_SEED=<seed> runs only that case.
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

/* ---------------------------------------------------------------------------------------------
 * Cases
 * --------------------------------------------------------------------------------------------- */
enum { VIEW_CONTIG = 0, VIEW_PADDED = 1, VIEW_TRANSPOSED = 2, VIEW_FUSED = 3 };
static const char *const view_names[] = {"contig", "padded", "transposed", "fused_qkv"};

typedef struct dcase {
    uint64_t seed;
    attn_layout layout;
    attn_dtype q_dtype, kv_dtype;
    int64_t B, Sq, Sk, H, Hk, D, Dv;
    int32_t causal, window_left, window_right;
    int alibi, sinks;
    float softcap, scale;
    int view;
    double qk_range; /* q, k uniform in [-qk_range, qk_range]; v in [-1, 1] */
    double logit_mag; /* > 0: magnitude of the logits, widens the tolerance (th_tol_for_logits) */
} dcase;

static dcase dcase_default(void) {
    dcase c;
    memset(&c, 0, sizeof c);
    c.seed = 1;
    c.layout = ATTN_LAYOUT_BSND;
    c.q_dtype = c.kv_dtype = ATTN_DTYPE_F32;
    c.B = 1, c.Sq = 5, c.Sk = 9, c.H = 2, c.Hk = 1, c.D = 16, c.Dv = 16;
    c.causal = ATTN_CAUSAL_NONE, c.window_left = -1, c.window_right = -1;
    c.qk_range = 2.0;
    return c;
}

static void dcase_print(const dcase *c, const char *isa, int ok, const char *what) {
    fprintf(stderr,
            "%s test_dense %s: seed=%llu isa=%s layout=%s q=%s kv=%s B=%lld Sq=%lld Sk=%lld H=%lld Hk=%lld "
            "D=%lld Dv=%lld causal=%d window=(%d,%d) alibi=%d softcap=%g sinks=%d scale=%g view=%s range=%g\n",
            ok ? "INFO" : "REPRO", what, (unsigned long long)c->seed, isa, c->layout == ATTN_LAYOUT_BSND ? "BSND" : "BNSD",
            attn_dtype_name(c->q_dtype), attn_dtype_name(c->kv_dtype), (long long)c->B, (long long)c->Sq,
            (long long)c->Sk, (long long)c->H, (long long)c->Hk, (long long)c->D, (long long)c->Dv,
            (int)c->causal, (int)c->window_left, (int)c->window_right, c->alibi, (double)c->softcap, c->sinks,
            (double)c->scale, view_names[c->view], c->qk_range);
}

/* ---------------------------------------------------------------------------------------------
 * Views
 * --------------------------------------------------------------------------------------------- */
/* Logical shape of a [batch, seq, heads, size] tensor in the layout's dimension order. */
static void logical_shape(attn_layout layout, int64_t b, int64_t s, int64_t n, int64_t d, int64_t out[4]) {
    out[0] = b, out[3] = d;
    out[1] = layout == ATTN_LAYOUT_BSND ? s : n;
    out[2] = layout == ATTN_LAYOUT_BSND ? n : s;
}

/* Element extent of a view (max offset + 1; 1 if empty so buffers are never 0 bytes). */
static size_t view_extent(int32_t ndim, const int64_t *shape, const int64_t *strides) {
    int64_t last = 0;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) return 1;
        last += (shape[i] - 1) * strides[i];
    }
    return (size_t)last + 1;
}

/* Strides for a view whose physical order is perm (outermost first, perm[ndim-1] == ndim-1), with `pad`
 * extra elements after each physical level when padded. */
static void view_strides(int32_t ndim, const int64_t *shape, const int *perm, int padded, int64_t *strides) {
    int64_t run = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        strides[perm[i]] = run;
        run = run * (shape[perm[i]] > 0 ? shape[perm[i]] : 1) + (padded ? 2 * (ndim - i) + 1 : 0);
    }
}

typedef struct tbuf {
    void *buf;      /* allocation, NaN-filled outside the view */
    size_t nelem;   /* elements in buf                         */
    attn_tensor t;  /* the view                                */
} tbuf;

static tbuf tbuf_make(attn_dtype dtype, int32_t ndim, const int64_t *shape, const int *perm, int padded) {
    tbuf b;
    memset(&b, 0, sizeof b);
    b.t.dtype = dtype;
    b.t.ndim = ndim;
    for (int32_t i = 0; i < ndim; i++) b.t.shape[i] = shape[i];
    view_strides(ndim, shape, perm, padded, b.t.strides);
    b.nelem = view_extent(ndim, shape, b.t.strides);
    b.buf = th_alloc_nan(dtype, b.nelem);
    b.t.data = b.buf;
    return b;
}

/* Iterates the logical indices of a view; returns 0 when done. */
static int next_index(const attn_tensor *t, int64_t *idx) {
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        if (++idx[d] < t->shape[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static int64_t numel(const attn_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static void fill_view(th_rng *r, attn_tensor *t, double lo, double hi) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (numel(t) == 0) return;
    do th_set(t->data, t->dtype, (size_t)th_offset(t, idx), (float)th_rng_range(r, lo, hi));
    while (next_index(t, idx));
}

/* dst ← src element-wise over the same logical shape (dtype conversion through float). */
static void copy_view(attn_tensor *dst, const attn_tensor *src) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (numel(src) == 0) return;
    do th_set(dst->data, dst->dtype, (size_t)th_offset(dst, idx),
              th_get(src->data, src->dtype, (size_t)th_offset(src, idx)));
    while (next_index(src, idx));
}

/* Number of elements of a buffer whose bytes are no longer all 0xFF (written since th_alloc_nan). */
static int64_t count_written(const void *buf, size_t esize, size_t nelem) {
    const unsigned char *p = (const unsigned char *)buf;
    int64_t n = 0;
    for (size_t i = 0; i < nelem; i++) {
        for (size_t b = 0; b < esize; b++) {
            if (p[i * esize + b] != 0xFF) {
                n++;
                break;
            }
        }
    }
    return n;
}

/* A view in `layout` order onto a contiguous BSND buffer [b, s, n, d]. */
static attn_tensor bsnd_as(attn_layout layout, void *data, attn_dtype dtype, int64_t b, int64_t s, int64_t n,
                           int64_t d) {
    int64_t shape[4] = {b, s, n, d};
    attn_tensor t = attn_tensor_make(data, dtype, 4, shape);
    if (layout == ATTN_LAYOUT_BNSD) {
        int64_t st1 = t.strides[1];
        t.shape[1] = n, t.shape[2] = s;
        t.strides[1] = t.strides[2];
        t.strides[2] = st1;
    }
    return t;
}

/* ---------------------------------------------------------------------------------------------
 * One case on one ISA
 * --------------------------------------------------------------------------------------------- */
typedef struct dresult {
    size_t bad_out, bad_lse;
    double maxerr_out, maxerr_lse;
    int status_fast, status_ref;
    int64_t written_out, written_lse, expect_out, expect_lse;
    int nonfinite; /* NaN/inf in out */
} dresult;

/* Per-head ALiBi slopes in [0, 0.5) and sinks in [-2, 2), functions of the seed (known to the asserts). */
static float case_alibi(const dcase *c, int64_t h) { return 0.05f * (float)((c->seed + 3 * (uint64_t)h) % 10); }
static float case_sink(const dcase *c, int64_t h) {
    return -2.0f + 0.4f * (float)((c->seed * 7 + 5 * (uint64_t)h) % 10);
}

/* Runs case c with the context's current ISA; out/lse of the fast path are handed back in fo_out/fl_out (caller
 * frees) when non-NULL for extra assertions. */
static dresult run_case(attn_ctx *ctx, const dcase *c, tbuf *fo_out, tbuf *fl_out) {
    dresult res;
    memset(&res, 0, sizeof res);
    th_rng rng;
    th_rng_seed(&rng, c->seed * 7919u + 17u);
    const attn_layout L = c->layout;
    int64_t qs[4], ks[4], vs[4], os[4];
    logical_shape(L, c->B, c->Sq, c->H, c->D, qs);
    logical_shape(L, c->B, c->Sk, c->Hk, c->D, ks);
    logical_shape(L, c->B, c->Sk, c->Hk, c->Dv, vs);
    logical_shape(L, c->B, c->Sq, c->H, c->Dv, os);
    const int id_perm[4] = {0, 1, 2, 3}, tr_perm[4] = {0, 2, 1, 3};
    const int fused = c->view == VIEW_FUSED && c->Sq == c->Sk && c->q_dtype == c->kv_dtype;
    const int padded = c->view == VIEW_PADDED || (c->view == VIEW_FUSED && !fused);
    const int *perm = c->view == VIEW_TRANSPOSED ? tr_perm : id_perm;
    tbuf q, k, v, fused_buf;
    memset(&fused_buf, 0, sizeof fused_buf);
    if (fused) {
        /* one [B, S, H·D + Hk·D + Hk·Dv] buffer; q, k, v are head slices of each row (a fused qkv GEMM output) */
        const int64_t S = c->Sq, W = c->H * c->D + c->Hk * c->D + c->Hk * c->Dv;
        int64_t fs[3] = {c->B, S, W};
        const int p3[3] = {0, 1, 2};
        fused_buf = tbuf_make(c->q_dtype, 3, fs, p3, 0);
        const size_t es = attn_dtype_size(c->q_dtype);
        tbuf *parts[3] = {&q, &k, &v};
        const int64_t *shapes[3] = {qs, ks, vs};
        const int64_t offs[3] = {0, c->H * c->D, c->H * c->D + c->Hk * c->D};
        const int64_t sizes[3] = {c->D, c->D, c->Dv};
        for (int i = 0; i < 3; i++) {
            memset(parts[i], 0, sizeof *parts[i]);
            attn_tensor *t = &parts[i]->t;
            t->dtype = c->q_dtype, t->ndim = 4;
            for (int d = 0; d < 4; d++) t->shape[d] = shapes[i][d];
            t->data = (char *)fused_buf.buf + (size_t)offs[i] * es;
            t->strides[0] = S * W, t->strides[3] = 1;
            t->strides[L == ATTN_LAYOUT_BSND ? 1 : 2] = W;
            t->strides[L == ATTN_LAYOUT_BSND ? 2 : 1] = sizes[i];
        }
    } else {
        q = tbuf_make(c->q_dtype, 4, qs, perm, padded);
        k = tbuf_make(c->kv_dtype, 4, ks, perm, padded);
        v = tbuf_make(c->kv_dtype, 4, vs, perm, padded);
    }
    tbuf o = tbuf_make(c->q_dtype, 4, os, perm, padded);
    int64_t lshape[3] = {c->B, c->H, c->Sq};
    const int lperm_id[3] = {0, 1, 2}, lperm_tr[3] = {0, 2, 1};
    tbuf l = tbuf_make(ATTN_DTYPE_F32, 3, lshape, c->view == VIEW_TRANSPOSED ? lperm_tr : lperm_id, padded);

    fill_view(&rng, &q.t, -c->qk_range, c->qk_range);
    fill_view(&rng, &k.t, -c->qk_range, c->qk_range);
    fill_view(&rng, &v.t, -1.0, 1.0);
    float alibi[64], sinks[64];
    for (int64_t h = 0; h < c->H && h < 64; h++) {
        alibi[h] = case_alibi(c, h);
        sinks[h] = case_sink(c, h);
    }
    attn_params p;
    attn_params_init(&p);
    p.softmax_scale = c->scale;
    p.causal = c->causal;
    p.window_left = c->window_left, p.window_right = c->window_right;
    p.softcap = c->softcap;
    p.alibi_slopes = c->alibi ? alibi : NULL;
    p.sinks = c->sinks ? sinks : NULL;

    /* oracle on contiguous BSND copies (an independent path through the strides) */
    const size_t nq = (size_t)(c->B * c->Sq * c->H * c->D), nk = (size_t)(c->B * c->Sk * c->Hk * c->D);
    const size_t nv = (size_t)(c->B * c->Sk * c->Hk * c->Dv), no = (size_t)(c->B * c->Sq * c->H * c->Dv);
    void *rq = th_alloc_nan(c->q_dtype, nq), *rk = th_alloc_nan(c->kv_dtype, nk);
    void *rv = th_alloc_nan(c->kv_dtype, nv), *ro = th_alloc_nan(c->q_dtype, no);
    float *rl = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(c->B * c->H * c->Sq));
    attn_tensor rq_l = bsnd_as(L, rq, c->q_dtype, c->B, c->Sq, c->H, c->D);
    attn_tensor rk_l = bsnd_as(L, rk, c->kv_dtype, c->B, c->Sk, c->Hk, c->D);
    attn_tensor rv_l = bsnd_as(L, rv, c->kv_dtype, c->B, c->Sk, c->Hk, c->Dv);
    attn_tensor ro_l = bsnd_as(L, ro, c->q_dtype, c->B, c->Sq, c->H, c->Dv);
    copy_view(&rq_l, &q.t), copy_view(&rk_l, &k.t), copy_view(&rv_l, &v.t);
    attn_tensor rq_b = bsnd_as(ATTN_LAYOUT_BSND, rq, c->q_dtype, c->B, c->Sq, c->H, c->D);
    attn_tensor rk_b = bsnd_as(ATTN_LAYOUT_BSND, rk, c->kv_dtype, c->B, c->Sk, c->Hk, c->D);
    attn_tensor rv_b = bsnd_as(ATTN_LAYOUT_BSND, rv, c->kv_dtype, c->B, c->Sk, c->Hk, c->Dv);
    attn_tensor ro_b = bsnd_as(ATTN_LAYOUT_BSND, ro, c->q_dtype, c->B, c->Sq, c->H, c->Dv);
    attn_tensor rl_t = attn_tensor_make(rl, ATTN_DTYPE_F32, 3, lshape);
    res.status_ref = attn_ref_forward(ATTN_LAYOUT_BSND, &rq_b, &rk_b, &rv_b, &p, &ro_b, &rl_t);
    res.status_fast = attn_forward(ctx, L, &q.t, &k.t, &v.t, &p, &o.t, &l.t);

    const th_tol tol = c->logit_mag > 0 ? th_tol_for_logits(c->q_dtype, c->logit_mag) : th_tol_for(c->q_dtype);
    res.maxerr_out = th_compare(&o.t, &ro_l, tol, 1.0, &res.bad_out);
    res.maxerr_lse = th_compare_lse(&l.t, &rl_t, tol, &res.bad_lse);
    res.expect_out = numel(&o.t), res.expect_lse = numel(&l.t);
    res.written_out = count_written(o.buf, attn_dtype_size(c->q_dtype), o.nelem);
    res.written_lse = count_written(l.buf, 4, l.nelem);
    {
        int64_t idx[ATTN_MAX_DIMS] = {0};
        if (numel(&o.t) > 0) do {
                if (!isfinite(th_get(o.t.data, o.t.dtype, (size_t)th_offset(&o.t, idx)))) res.nonfinite++;
            } while (next_index(&o.t, idx));
    }
    free(rq), free(rk), free(rv), free(ro), free(rl);
    if (fused) {
        free(fused_buf.buf);
    } else {
        free(q.buf), free(k.buf), free(v.buf);
    }
    if (fo_out) *fo_out = o;
    else free(o.buf);
    if (fl_out) *fl_out = l;
    else free(l.buf);
    return res;
}

/* Runs a case on every usable ISA and asserts agreement with the oracle; returns the number of failures. */
static int check_case(attn_ctx *ctx, const dcase *c) {
    int failures = 0;
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *isa = attn_isa_name(i);
        if (!attn_isa_available(isa)) continue;
        assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
        dresult r = run_case(ctx, c, NULL, NULL);
        const int ok = r.status_fast == ATTN_STATUS_OK && r.status_ref == ATTN_STATUS_OK && r.bad_out == 0 &&
                       r.bad_lse == 0 && r.written_out == r.expect_out && r.written_lse == r.expect_lse &&
                       r.nonfinite == 0;
        if (!ok || getenv("ATTN_TEST_VERBOSE")) {
            char what[256];
            snprintf(what, sizeof what,
                     "status=%d/%d bad_out=%zu maxerr=%.3g bad_lse=%zu lse_maxerr=%.3g written=%lld/%lld "
                     "lse_written=%lld/%lld nonfinite=%d (%s)",
                     r.status_fast, r.status_ref, r.bad_out, r.maxerr_out, r.bad_lse, r.maxerr_lse,
                     (long long)r.written_out, (long long)r.expect_out, (long long)r.written_lse,
                     (long long)r.expect_lse, r.nonfinite, attn_last_error());
            dcase_print(c, isa, ok, what);
            failures += !ok;
        }
    }
    return failures;
}

static attn_ctx *new_ctx(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    return ctx;
}

/* ---------------------------------------------------------------------------------------------
 * Targeted cases
 * --------------------------------------------------------------------------------------------- */
static void test_head_sizes(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const int64_t sizes[] = {1, 3, 64, 96, 128, 256};
    int fails = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        dcase c = dcase_default();
        c.seed = 100 + i;
        c.D = c.Dv = sizes[i];
        c.Sq = 7, c.Sk = 70, c.H = 4, c.Hk = 2;
        c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        fails += check_case(ctx, &c);
        c.Dv = sizes[(i + 1) % 6]; /* head_size_v != head_size */
        c.causal = ATTN_CAUSAL_NONE;
        fails += check_case(ctx, &c);
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_dtypes_and_layouts(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    int fails = 0, n = 0;
    for (int L = 0; L < 2; L++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                dcase c = dcase_default();
                c.seed = 200 + (uint64_t)n++;
                c.layout = (attn_layout)L;
                c.q_dtype = dts[a], c.kv_dtype = dts[b];
                c.B = 2, c.Sq = 9, c.Sk = 33, c.H = 4, c.Hk = 2, c.D = 32, c.Dv = 24;
                c.causal = (int32_t)(n % 3);
                fails += check_case(ctx, &c);
            }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_causal_modes(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const int64_t shapes[][2] = {{5, 5}, {3, 17}, {17, 3}, {40, 40}, {1, 65}, {65, 1}, {12, 130}};
    int fails = 0, n = 0;
    for (int cm = 0; cm < 3; cm++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            dcase c = dcase_default();
            c.seed = 300 + (uint64_t)n++;
            c.causal = cm;
            c.Sq = shapes[s][0], c.Sk = shapes[s][1];
            c.H = 3, c.Hk = 3, c.D = 8, c.Dv = 8;
            c.layout = (attn_layout)(n % 2);
            fails += check_case(ctx, &c);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_windows(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    /* (0,0): only the diagonal; small; wider than the sequence; left-only; right-only; HF W=4 → (3,0) */
    const int32_t wins[][2] = {{0, 0}, {2, 1}, {1000, 1000}, {5, -1}, {-1, 4}, {3, 0}, {0, -1}, {-1, 0}};
    int fails = 0, n = 0;
    for (int cm = 0; cm < 3; cm++)
        for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++) {
            dcase c = dcase_default();
            c.seed = 400 + (uint64_t)n++;
            c.causal = cm;
            c.window_left = wins[w][0], c.window_right = wins[w][1];
            c.Sq = 11, c.Sk = (n % 2) ? 23 : 11;
            c.H = 2, c.Hk = 1, c.D = 16, c.Dv = 16;
            fails += check_case(ctx, &c);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_gqa_ratios(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const int64_t cfg[][2] = {{4, 4}, {8, 2}, {14, 2}, {7, 1}, {8, 1}, {32, 1}, {35, 5}};
    int fails = 0;
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
        dcase c = dcase_default();
        c.seed = 500 + i;
        c.H = cfg[i][0], c.Hk = cfg[i][1];
        c.Sq = 6, c.Sk = 40, c.D = 16, c.Dv = 16;
        c.causal = (int32_t)(i % 2);
        c.layout = (attn_layout)(i % 2);
        fails += check_case(ctx, &c);
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_alibi_softcap_sinks(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    for (int m = 1; m < 8; m++) {
        dcase c = dcase_default();
        c.seed = 600 + (uint64_t)m;
        c.alibi = m & 1, c.softcap = (m & 2) ? 5.0f : 0.0f, c.sinks = (m & 4) != 0;
        c.Sq = 13, c.Sk = 29, c.H = 4, c.Hk = 2, c.D = 24, c.Dv = 24;
        c.qk_range = 3.0;
        c.causal = (int32_t)(m % 3);
        c.window_left = m == 5 ? 4 : -1;
        c.scale = m == 3 ? 0.3f : 0.0f;
        c.q_dtype = m == 6 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        fails += check_case(ctx, &c);
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_views(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0, n = 0;
    for (int view = 0; view < 4; view++)
        for (int L = 0; L < 2; L++)
            for (int dt = 0; dt < 2; dt++) {
                dcase c = dcase_default();
                c.seed = 700 + (uint64_t)n++;
                c.view = view;
                c.layout = (attn_layout)L;
                c.q_dtype = c.kv_dtype = dt ? ATTN_DTYPE_F16 : ATTN_DTYPE_F32;
                c.B = 2, c.Sq = 21, c.Sk = 21, c.H = 6, c.Hk = 2, c.D = 20, c.Dv = view == VIEW_FUSED ? 12 : 20;
                c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                fails += check_case(ctx, &c);
            }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* Sq > Sk with bottom-right causal: rows i < Sq − Sk sit at negative positions and see no key. */
static void test_more_queries_than_keys(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    dcase c = dcase_default();
    c.seed = 800;
    c.Sq = 20, c.Sk = 6, c.H = 2, c.Hk = 1, c.D = 8, c.Dv = 8;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    assert_int_equal(check_case(ctx, &c), 0);
    tbuf o, l;
    dresult r = run_case(ctx, &c, &o, &l);
    assert_int_equal(r.status_fast, ATTN_STATUS_OK);
    for (int64_t i = 0; i < c.Sq; i++)
        for (int64_t h = 0; h < c.H; h++) {
            const int64_t li[3] = {0, h, i};
            const float lse = ((const float *)l.t.data)[th_offset(&l.t, li)];
            const int masked = i < c.Sq - c.Sk;
            if (masked) assert_true(isinf(lse) && lse < 0);
            else assert_true(isfinite(lse));
            for (int64_t d = 0; d < c.Dv; d++) {
                const int64_t oi[4] = {0, i, h, d};
                const float x = th_get(o.t.data, o.t.dtype, (size_t)th_offset(&o.t, oi));
                if (masked) assert_true(x == 0.0f);
            }
        }
    free(o.buf), free(l.buf);
    attn_ctx_destroy(ctx);
}

/* A window that excludes every key: all rows empty → out 0, LSE −inf; with sinks → out 0, LSE = sink. */
static void test_empty_rows_and_sinks(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
        dcase c = dcase_default();
        c.seed = 810;
        c.Sq = 4, c.Sk = 0, c.H = 3, c.Hk = 1, c.D = 8, c.Dv = 8, c.sinks = with_sinks;
        assert_int_equal(check_case(ctx, &c), 0);
        tbuf o, l;
        dresult r = run_case(ctx, &c, &o, &l);
        assert_int_equal(r.status_fast, ATTN_STATUS_OK);
        float sink[3];
        for (int64_t h = 0; h < c.H; h++) sink[h] = case_sink(&c, h);
        for (int64_t i = 0; i < c.Sq; i++)
            for (int64_t h = 0; h < c.H; h++) {
                const int64_t li[3] = {0, h, i};
                const float lse = ((const float *)l.t.data)[th_offset(&l.t, li)];
                if (with_sinks) assert_true(fabsf(lse - sink[h]) <= 1e-6f * (1.0f + fabsf(sink[h])));
                else assert_true(isinf(lse) && lse < 0);
                for (int64_t d = 0; d < c.Dv; d++) {
                    const int64_t oi[4] = {0, i, h, d};
                    assert_true(th_get(o.t.data, o.t.dtype, (size_t)th_offset(&o.t, oi)) == 0.0f);
                }
            }
        free(o.buf), free(l.buf);
    }
    /* window (0, 0) with top-left causal and Sq > Sk: rows past Sk are empty, others see one key */
    dcase c = dcase_default();
    c.seed = 811;
    c.Sq = 9, c.Sk = 4, c.causal = ATTN_CAUSAL_TOP_LEFT, c.window_left = 0, c.window_right = 0;
    c.sinks = 1;
    assert_int_equal(check_case(ctx, &c), 0);
    attn_ctx_destroy(ctx);
}

/* A key with an infinite element makes its logit +inf and the row's denominator NaN: out and LSE are NaN with a
 * sink as without one, as in the oracle (the sink used to stand in for the NaN denominator: LSE = sink beside a NaN
 * output). One row, two keys, float32. */
static void test_nan_row_with_sinks(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    float q[8], k[16], v[16], o[8], lse[1], ro[8], rlse[1];
    for (int i = 0; i < 8; i++)
        q[i] = 0.5f;
    for (int i = 0; i < 16; i++)
        k[i] = 0.25f, v[i] = 1.0f;
    k[3] = INFINITY;
    const int64_t qs[4] = {1, 1, 1, 8}, ks[4] = {1, 2, 1, 8}, ls[3] = {1, 1, 1};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks),
                tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, qs),
                tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, ls), tro = attn_tensor_make(ro, ATTN_DTYPE_F32, 4, qs),
                trl = attn_tensor_make(rlse, ATTN_DTYPE_F32, 3, ls);
    const float sink = 0.5f;
    for (int with_sink = 0; with_sink < 2; with_sink++) {
        attn_params p;
        attn_params_init(&p);
        p.sinks = with_sink ? &sink : NULL;
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, &tl), ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &tro, &trl), ATTN_STATUS_OK);
        assert_true(isnan(rlse[0]) && isnan(ro[0]));
        assert_true(isnan(lse[0]));
        for (int d = 0; d < 8; d++)
            assert_true(isnan(o[d]));
    }
    attn_ctx_destroy(ctx);
}

static void test_degenerate_shapes(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 1, 100}, {1, 0, 5}, {3, 1, 0}, {1, 0, 0}, {2, 1, 77}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int cm = 0; cm < 3; cm++) {
            dcase c = dcase_default();
            c.seed = 900 + i * 3 + (uint64_t)cm;
            c.B = shapes[i][0], c.Sq = shapes[i][1], c.Sk = shapes[i][2];
            c.causal = cm;
            fails += check_case(ctx, &c);
        }
    /* batch 0: OK and nothing written */
    dcase c = dcase_default();
    c.B = 0;
    fails += check_case(ctx, &c);
    tbuf o, l;
    dresult r = run_case(ctx, &c, &o, &l);
    assert_int_equal(r.status_fast, ATTN_STATUS_OK);
    assert_int_equal(count_written(o.buf, 4, o.nelem), 0);
    assert_int_equal(count_written(l.buf, 4, l.nelem), 0);
    free(o.buf), free(l.buf);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* Logits of magnitude ~1e4 in fp32: no overflow, no NaN, agreement with the oracle within the tolerance
 * that fp32 logits of that magnitude allow (th_tol_for_logits). */
static void test_large_logits(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    int fails = 0;
    for (int i = 0; i < 4; i++) {
        dcase c = dcase_default();
        c.seed = 1000 + (uint64_t)i;
        c.Sq = 9, c.Sk = 70, c.H = 2, c.Hk = 1, c.D = 64, c.Dv = 64;
        c.qk_range = 10.0;
        c.scale = 10.0f; /* |q·k| ~ 100·sqrt(64)/3·… → |s| ~ 1e4 */
        c.logit_mag = 2e4;
        c.causal = (int32_t)(i % 3);
        c.softcap = i == 3 ? 3e4f : 0.0f;
        fails += check_case(ctx, &c);
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------------------------------
 * Randomized cases
 * --------------------------------------------------------------------------------------------- */
static dcase random_case(uint64_t seed) {
    th_rng r;
    th_rng_seed(&r, seed);
    dcase c = dcase_default();
    static const attn_dtype dts[] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    static const int64_t ds[] = {1, 2, 3, 5, 8, 16, 17, 32, 64, 64, 80, 96, 128, 160, 256};
    static const int64_t ratios[] = {1, 1, 2, 4, 7};
    static const int32_t wins[] = {-1, -1, -1, 0, 1, 3, 8, 1000};
    c.seed = seed;
    c.layout = (attn_layout)th_rng_int(&r, 0, 1);
    c.q_dtype = dts[th_rng_int(&r, 0, 2)];
    c.kv_dtype = th_rng_int(&r, 0, 3) == 0 ? dts[th_rng_int(&r, 0, 2)] : c.q_dtype;
    c.B = th_rng_int(&r, 1, 2);
    c.Hk = th_rng_int(&r, 1, 3);
    c.H = c.Hk * ratios[th_rng_int(&r, 0, 4)];
    c.D = ds[th_rng_int(&r, 0, 14)];
    c.Dv = th_rng_int(&r, 0, 3) == 0 ? ds[th_rng_int(&r, 0, 14)] : c.D;
    /* keep B·H·Sq·Sk·(D + Dv) moderate so the file stays fast under ASan */
    const int64_t budget = 400000 / (c.B * c.H * (c.D + c.Dv));
    c.Sk = th_rng_int(&r, 0, 140);
    c.Sq = th_rng_int(&r, 1, 40);
    if (th_rng_int(&r, 0, 3) == 0) c.Sq = 1;
    while (c.Sq * (c.Sk > 0 ? c.Sk : 1) > budget && (c.Sq > 1 || c.Sk > 1)) {
        if (c.Sk > c.Sq) c.Sk = c.Sk / 2;
        else c.Sq = (c.Sq + 1) / 2;
    }
    c.causal = (int32_t)th_rng_int(&r, 0, 2);
    c.window_left = wins[th_rng_int(&r, 0, 7)];
    c.window_right = wins[th_rng_int(&r, 0, 7)];
    c.alibi = th_rng_int(&r, 0, 4) == 0;
    c.sinks = th_rng_int(&r, 0, 4) == 0;
    c.softcap = th_rng_int(&r, 0, 4) == 0 ? (float)th_rng_range(&r, 2.0, 30.0) : 0.0f;
    c.scale = th_rng_int(&r, 0, 3) == 0 ? (float)th_rng_range(&r, 0.05, 0.5) : 0.0f;
    c.view = (int)th_rng_int(&r, 0, 3);
    if (c.view == VIEW_FUSED && th_rng_int(&r, 0, 1)) c.Sq = c.Sk; /* fused qkv needs Sq == Sk */
    if (c.Sq > 0 && c.Sk > 0 && c.Sq * c.Sk > budget) c.view = VIEW_PADDED, c.Sq = c.Sq < 8 ? c.Sq : 8;
    c.qk_range = th_rng_range(&r, 0.5, 3.0);
    return c;
}

static void test_random(void **state) {
    (void)state;
    attn_ctx *ctx = new_ctx();
    const char *only = getenv("ATTN_TEST_SEED");
    int fails = 0;
    if (only && *only) {
        dcase c = random_case(strtoull(only, NULL, 10));
        fails += check_case(ctx, &c);
    } else {
        for (uint64_t s = 1; s <= 120; s++) {
            dcase c = random_case(s);
            fails += check_case(ctx, &c);
        }
    }
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_sizes),
        cmocka_unit_test(test_dtypes_and_layouts),
        cmocka_unit_test(test_causal_modes),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_gqa_ratios),
        cmocka_unit_test(test_alibi_softcap_sinks),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_more_queries_than_keys),
        cmocka_unit_test(test_empty_rows_and_sinks),
        cmocka_unit_test(test_nan_row_with_sinks),
        cmocka_unit_test(test_degenerate_shapes),
        cmocka_unit_test(test_large_logits),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
