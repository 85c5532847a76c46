/*
 * test_paged_piecewise.c — piecewise causal/full spans over a paged KV cache (vllm-omni
 * run_paged_piecewise_plan; docs/DIFFUSION.md §3): attn_forward_paged_piecewise against the dense
 * piecewise path on the same keys (bitwise: same driver), against its oracle twin and the oracle with the
 * explicit §B.2 mask (per-dtype tolerance); the CFG batch run as one call per piece on strided slices of q /
 * out / LSE (bitwise equal to the whole call), rows with different cached prefixes, query-range shards,
 * thread invariance, NaN-poisoned unused cache rows, and every validation error (nothing written).
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

#include "attn/attn_experimental.h"
#include "harness.h"

#define PP_MAX_ROWS 4

/* One paged problem: rows of Lq queries; row r's keys are the first seq[r] tokens of its pages, and the same
 * keys sit in a dense [rows, s_max, Hk, D] tensor (kd / vd) for the dense path. */
typedef struct pp_fix {
    attn_dtype dt;
    int64_t rows, Lq, H, Hk, D, bs, s_max, num_blocks, max_blocks;
    int32_t seq[PP_MAX_ROWS];
    void *q, *kd, *vd, *cache;
    int32_t *bt;
    attn_tensor tq, tkd, tvd, tcache, tseq, tbt;
} pp_fix;

/* A view of t narrowed to [start, start + len) along dim. */
static attn_tensor pp_narrow(attn_tensor t, int32_t dim, int64_t start, int64_t len) {
    t.data = (char *)t.data + start * t.strides[dim] * (int64_t)attn_dtype_size(t.dtype);
    t.shape[dim] = len;
    return t;
}

static void pp_setup(pp_fix *f, th_rng *rng) {
    const int64_t rows = f->rows, D = f->D, Hk = f->Hk;
    f->s_max = 0;
    f->max_blocks = 0;
    int64_t used = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (f->seq[r] > f->s_max) f->s_max = f->seq[r];
        const int64_t u = (f->seq[r] + f->bs - 1) / f->bs;
        used += u;
        if (u > f->max_blocks) f->max_blocks = u;
    }
    f->max_blocks += 1; /* a spare column the entry must ignore */
    f->num_blocks = used + 3;
    int64_t qs[4] = {rows, f->Lq, f->H, D}, ks[4] = {rows, f->s_max, Hk, D};
    int64_t cs[5] = {2, f->num_blocks, f->bs, Hk, D}, ss[1] = {rows}, bs2[2] = {rows, f->max_blocks};
    f->q = th_alloc_fill(rng, f->dt, (size_t)(rows * f->Lq * f->H * D), -2, 2);
    f->kd = th_alloc_fill(rng, f->dt, (size_t)(rows * f->s_max * Hk * D), -2, 2);
    f->vd = th_alloc_fill(rng, f->dt, (size_t)(rows * f->s_max * Hk * D), -1, 1);
    f->cache = th_alloc_nan(f->dt, (size_t)(2 * f->num_blocks * f->bs * Hk * D)); /* unused rows: NaN */
    f->bt = malloc((size_t)(rows * f->max_blocks) * sizeof(int32_t));
    int32_t *perm = malloc((size_t)f->num_blocks * sizeof(int32_t));
    for (int64_t i = 0; i < f->num_blocks; i++) perm[i] = (int32_t)i;
    for (int64_t i = f->num_blocks - 1; i > 0; i--) { /* random physical order */
        const int64_t j = th_rng_int(rng, 0, i);
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int64_t next = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < f->max_blocks; b++)
            f->bt[r * f->max_blocks + b] = b < (f->seq[r] + f->bs - 1) / f->bs ? perm[next++] : 9999; /* junk past */
    free(perm);
    f->tq = attn_tensor_make(f->q, f->dt, 4, qs);
    f->tkd = attn_tensor_make(f->kd, f->dt, 4, ks);
    f->tvd = attn_tensor_make(f->vd, f->dt, 4, ks);
    f->tcache = attn_tensor_make(f->cache, f->dt, 5, cs);
    f->tseq = attn_tensor_make(f->seq, ATTN_DTYPE_I32, 1, ss);
    f->tbt = attn_tensor_make(f->bt, ATTN_DTYPE_I32, 2, bs2);
    /* write each row's keys into its pages through the library's cache write */
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    int64_t *slots = malloc((size_t)f->s_max * sizeof(int64_t) + 8);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < f->seq[r]; j++)
            slots[j] = (int64_t)f->bt[r * f->max_blocks + j / f->bs] * f->bs + j % f->bs;
        int64_t sl[1] = {f->seq[r]}, kr[3] = {f->s_max, Hk, D};
        attn_tensor tk = attn_tensor_make((char *)f->kd + r * f->tkd.strides[0] * attn_dtype_size(f->dt), f->dt, 3, kr);
        attn_tensor tv = attn_tensor_make((char *)f->vd + r * f->tvd.strides[0] * attn_dtype_size(f->dt), f->dt, 3, kr);
        attn_tensor tsl = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, sl);
        assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &f->tcache, &tsl), ATTN_STATUS_OK);
    }
    free(slots);
    attn_ctx_destroy(ctx);
}

static void pp_free(pp_fix *f) { free(f->q), free(f->kd), free(f->vd), free(f->cache), free(f->bt); }

/* The §B.2 keep matrix [Lq][S] of a row whose local query i sits at global position pos0 + i (default
 * ranges) or as the ranges say. */
static unsigned char *pp_mask(const attn_span *sp, int64_t ns, const attn_query_range *qr, int64_t nr, int64_t Lq,
                              int64_t S) {
    unsigned char *m = calloc((size_t)(Lq * S) + 1, 1);
    for (int64_t i = 0; i < Lq; i++) {
        int64_t pos = S - Lq + i;
        for (int64_t t = 0; t < nr; t++)
            if (i >= qr[t].local_start && i < qr[t].local_end) pos = qr[t].global_start + i - qr[t].local_start;
        int64_t lim = pos + 1;
        for (int64_t t = 0; t < ns; t++)
            if (pos >= sp[t].start && pos < sp[t].end) lim = sp[t].end;
        for (int64_t j = 0; j < lim && j < S; j++) m[i * S + j] = 1;
    }
    return m;
}

/* Runs the paged entry, then checks it row by row against the dense piecewise path (bitwise), the oracle
 * with the explicit mask and the oracle twin (tolerance), and thread invariance. */
static void pp_check(attn_ctx *ctx, pp_fix *f, const attn_span *sp, int64_t ns, const attn_query_range *qr,
                     int64_t nr, const attn_params *p) {
    const attn_dtype dt = f->dt;
    const int64_t rows = f->rows, Lq = f->Lq, H = f->H, D = f->D;
    int64_t os[4] = {rows, Lq, H, D}, ls[3] = {rows, H, Lq};
    const size_t no = (size_t)(rows * Lq * H * D), nl = (size_t)(rows * H * Lq);
    void *o = th_alloc_nan(dt, no), *o2 = th_alloc_nan(dt, no), *od = th_alloc_nan(dt, no), *orf = th_alloc_nan(dt, no);
    float *l = th_alloc_nan(ATTN_DTYPE_F32, nl), *ld = th_alloc_nan(ATTN_DTYPE_F32, nl);
    float *lr = th_alloc_nan(ATTN_DTYPE_F32, nl);
    attn_tensor to = attn_tensor_make(o, dt, 4, os), to2 = attn_tensor_make(o2, dt, 4, os);
    attn_tensor tod = attn_tensor_make(od, dt, 4, os), tor = attn_tensor_make(orf, dt, 4, os);
    attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls), tld = attn_tensor_make(ld, ATTN_DTYPE_F32, 3, ls);
    attn_tensor tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 3, ls);
    assert_int_equal(attn_forward_paged_piecewise(ctx, &f->tq, &f->tcache, &f->tseq, &f->tbt, sp, ns, qr, nr, p, &to, &tl),
                     ATTN_STATUS_OK);
    /* dense piecewise, one row at a time (rows may have different key counts) */
    for (int64_t r = 0; r < rows; r++) {
        attn_tensor q1 = pp_narrow(f->tq, 0, r, 1), o1 = pp_narrow(tod, 0, r, 1), l1 = pp_narrow(tld, 0, r, 1);
        attn_tensor k1 = pp_narrow(pp_narrow(f->tkd, 0, r, 1), 1, 0, f->seq[r]);
        attn_tensor v1 = pp_narrow(pp_narrow(f->tvd, 0, r, 1), 1, 0, f->seq[r]);
        attn_query_range def = {0, Lq, f->seq[r] - Lq};
        assert_int_equal(attn_forward_piecewise(ctx, ATTN_LAYOUT_BSND, &q1, &k1, &v1, sp, ns, qr ? qr : &def,
                                                qr ? nr : 1, p, &o1, &l1),
                         ATTN_STATUS_OK);
        /* oracle with the literal keep matrix */
        unsigned char *m = pp_mask(sp, ns, qr, nr, Lq, f->seq[r]);
        int64_t ms[2] = {Lq, f->seq[r]};
        attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
        attn_params pe = p ? *p : (attn_params){0};
        if (!p) attn_params_init(&pe);
        pe.mask = &tm;
        attn_tensor or1 = pp_narrow(tor, 0, r, 1), lr1 = pp_narrow(tlr, 0, r, 1);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &q1, &k1, &v1, &pe, &or1, &lr1), ATTN_STATUS_OK);
        free(m);
    }
    if (!th_bitwise_equal(&to, &tod) || !th_bitwise_equal(&tl, &tld))
        print_error("paged piecewise %s rows=%lld Lq=%lld D=%lld ns=%lld: not bitwise equal to the dense path\n",
                    attn_dtype_name(dt), (long long)rows, (long long)Lq, (long long)D, (long long)ns);
    assert_true(th_bitwise_equal(&to, &tod));
    assert_true(th_bitwise_equal(&tl, &tld));
    size_t bad = 0, bad_l = 0;
    double err = th_compare(&to, &tor, th_tol_for(dt), 1.0, &bad);
    double err_l = th_compare_lse(&tl, &tlr, th_tol_for(dt), &bad_l);
    if (bad || bad_l)
        print_error("paged piecewise vs oracle %s: %zu/%zu bad (err %g / %g)\n", attn_dtype_name(dt), bad, bad_l, err,
                    err_l);
    assert_int_equal(bad, 0);
    assert_int_equal(bad_l, 0);
    /* the oracle twin reads the pages and agrees with the masked oracle */
    assert_int_equal(attn_ref_forward_paged_piecewise(&f->tq, &f->tcache, &f->tseq, &f->tbt, sp, ns, qr, nr, p, &to2,
                                                      &tld),
                     ATTN_STATUS_OK);
    th_compare(&to2, &tor, th_tol_for(dt), 1.0, &bad);
    assert_int_equal(bad, 0);
    th_compare_lse(&tld, &tlr, th_tol_for(dt), &bad_l);
    assert_int_equal(bad_l, 0);
    /* thread-count invariance */
    const int32_t nt = attn_ctx_num_threads(ctx);
    assert_int_equal(attn_ctx_set_num_threads(ctx, nt == 1 ? 3 : 1), ATTN_STATUS_OK);
    assert_int_equal(
        attn_forward_paged_piecewise(ctx, &f->tq, &f->tcache, &f->tseq, &f->tbt, sp, ns, qr, nr, p, &to2, NULL),
        ATTN_STATUS_OK);
    assert_true(th_bitwise_equal(&to, &to2));
    assert_int_equal(attn_ctx_set_num_threads(ctx, nt), ATTN_STATUS_OK);
    free(o), free(o2), free(od), free(orf), free(l), free(ld), free(lr);
}

/* §B.3 segments of one row (query_offset qs, query_len n) in global coordinates: (start, end). */
static int64_t pp_segments(const attn_span *sp, int64_t ns, int64_t qs, int64_t n, int64_t seg[][2]) {
    int64_t cur = qs, qe = qs + n, k = 0;
    for (int64_t t = 0; t < ns; t++) {
        const int64_t a = sp[t].start > qs ? sp[t].start : qs, e = sp[t].end < qe ? sp[t].end : qe;
        if (a >= e) continue;
        if (cur < a) seg[k][0] = cur, seg[k][1] = a, k++;
        seg[k][0] = a, seg[k][1] = e, k++;
        cur = e;
    }
    if (cur < qe) seg[k][0] = cur, seg[k][1] = qe, k++;
    return k;
}

/* The homogeneous CFG batch run as vllm-omni does: one call per piece on the strided slices q[:, s:e],
 * out[:, s:e], lse[:, :, s:e]; equals the one whole call bitwise. */
static void pp_check_pieces(attn_ctx *ctx, pp_fix *f, const attn_span *sp, int64_t ns) {
    const attn_dtype dt = f->dt;
    const int64_t rows = f->rows, Lq = f->Lq, H = f->H, D = f->D, off = f->seq[0] - Lq;
    for (int64_t r = 1; r < rows; r++) assert_int_equal(f->seq[r], f->seq[0]); /* homogeneous */
    int64_t os[4] = {rows, Lq, H, D}, ls[3] = {rows, H, Lq};
    const size_t no = (size_t)(rows * Lq * H * D), nl = (size_t)(rows * H * Lq);
    void *o = th_alloc_nan(dt, no), *op = th_alloc_nan(dt, no);
    float *l = th_alloc_nan(ATTN_DTYPE_F32, nl), *lp = th_alloc_nan(ATTN_DTYPE_F32, nl);
    attn_tensor to = attn_tensor_make(o, dt, 4, os), top = attn_tensor_make(op, dt, 4, os);
    attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls), tlp = attn_tensor_make(lp, ATTN_DTYPE_F32, 3, ls);
    assert_int_equal(
        attn_forward_paged_piecewise(ctx, &f->tq, &f->tcache, &f->tseq, &f->tbt, sp, ns, NULL, 0, NULL, &to, &tl),
        ATTN_STATUS_OK);
    int64_t seg[2 * 16 + 2][2];
    const int64_t nseg = pp_segments(sp, ns, off, Lq, seg);
    assert_true(nseg >= 1);
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t a = seg[s][0] - off, e = seg[s][1] - off;
        attn_tensor qs = pp_narrow(f->tq, 1, a, e - a), os1 = pp_narrow(top, 1, a, e - a);
        attn_tensor ls1 = pp_narrow(tlp, 2, a, e - a);
        const attn_query_range qr = {0, e - a, seg[s][0]};
        assert_int_equal(
            attn_forward_paged_piecewise(ctx, &qs, &f->tcache, &f->tseq, &f->tbt, sp, ns, &qr, 1, NULL, &os1, &ls1),
            ATTN_STATUS_OK);
    }
    assert_true(th_bitwise_equal(&to, &top));
    assert_true(th_bitwise_equal(&tl, &tlp));
    free(o), free(op), free(l), free(lp);
}

static void test_cfg_worked_example(void **state) {
    (void)state;
    /* two CFG rows, query_len = seq_len = 19, spans [(5, 10)] */
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 101);
    const attn_span sp[1] = {{5, 10}};
    pp_fix f;
    memset(&f, 0, sizeof f);
    f.dt = ATTN_DTYPE_F32, f.rows = 2, f.Lq = 19, f.H = 4, f.Hk = 2, f.D = 64, f.bs = 4;
    f.seq[0] = f.seq[1] = 19;
    pp_setup(&f, &rng);
    pp_check(ctx, &f, sp, 1, NULL, 0, NULL);
    pp_check_pieces(ctx, &f, sp, 1);
    pp_free(&f);
    /* suffix step of A.14: 2 new queries after a cached prefix of 17 attend all 19 keys (non-causal rows are
     * the full-span case: one span covering the new tokens) */
    const attn_span tail[1] = {{17, 19}};
    memset(&f, 0, sizeof f);
    f.dt = ATTN_DTYPE_F32, f.rows = 1, f.Lq = 2, f.H = 2, f.Hk = 2, f.D = 64, f.bs = 16;
    f.seq[0] = 19;
    pp_setup(&f, &rng);
    pp_check(ctx, &f, tail, 1, NULL, 0, NULL);
    pp_free(&f);
    attn_ctx_destroy(ctx);
}

static void test_random_batches(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 102);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t heads[4] = {64, 128, 80, 256}, bss[4] = {16, 1, 32, 7};
    const int rounds = th_test_small() ? 4 : 9;
    for (int round = 0; round < rounds; round++) {
        pp_fix f;
        memset(&f, 0, sizeof f);
        f.dt = dts[round % 3], f.D = heads[round % 4], f.bs = bss[round % 4];
        f.rows = 1 + round % PP_MAX_ROWS, f.H = 4, f.Hk = round % 2 ? 1 : 4;
        const int64_t smax = th_test_small() ? 300 : 900;
        const int64_t S = th_rng_int(&rng, 24, smax);
        f.Lq = th_rng_int(&rng, 1, S);
        /* homogeneous CFG rows (even rounds) or rows with different cached prefixes (odd rounds) */
        for (int64_t r = 0; r < f.rows; r++) f.seq[r] = (int32_t)(round % 2 ? th_rng_int(&rng, f.Lq, S) : S);
        int64_t smin = S;
        for (int64_t r = 0; r < f.rows; r++)
            if (f.seq[r] < smin) smin = f.seq[r];
        attn_span sp[6];
        int64_t ns = 0, pos = th_rng_int(&rng, 0, 10);
        while (ns < 6 && pos < smin - 1) { /* text, image, text, image ... */
            const int64_t len = th_rng_int(&rng, 1, smin / 3 + 1);
            if (pos + len > smin) break;
            sp[ns].start = pos, sp[ns].end = pos + len;
            ns++;
            pos += len + th_rng_int(&rng, 0, 30);
        }
        pp_setup(&f, &rng);
        attn_params p;
        attn_params_init(&p);
        float slopes[4] = {0.02f, 0.05f, 0.1f, 0.3f}, sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
        if (round == 3) p.window_left = 40, p.window_right = 5, p.alibi_slopes = slopes;
        if (round == 5) p.softcap = 20.0f, p.sinks = sinks;
        pp_check(ctx, &f, sp, ns, NULL, 0, &p);
        if (round % 2 == 0) pp_check_pieces(ctx, &f, sp, ns);
        pp_free(&f);
    }
    attn_ctx_destroy(ctx);
}

static void test_query_range_shard(void **state) {
    (void)state;
    /* a one-span example over pages: 16 keys, spans [(4, 12)], 8 local queries in two chunks */
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 103);
    const attn_span sp[1] = {{4, 12}};
    const attn_query_range qr[2] = {{0, 4, 2}, {4, 8, 10}};
    pp_fix f;
    memset(&f, 0, sizeof f);
    f.dt = ATTN_DTYPE_BF16, f.rows = 3, f.Lq = 8, f.H = 4, f.Hk = 2, f.D = 128, f.bs = 5;
    f.seq[0] = 16, f.seq[1] = 16, f.seq[2] = 20; /* ranges are global positions: a longer row is legal */
    pp_setup(&f, &rng);
    pp_check(ctx, &f, sp, 1, qr, 2, NULL);
    pp_free(&f);
    attn_ctx_destroy(ctx);
}

/* An fp8 cache: params.k_scale / v_scale dequantize it (element = decode(bits)·scale), in the fast entry and in
 * its oracle twin, as in attn_paged_attention; a scale that is not finite and > 0 is rejected, nothing written.
 * The expectation is independent of both: the dense oracle on the decoded, scaled keys and values. */
static void test_fp8_scales(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 105);
    const attn_dtype fmts[2] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    const int64_t S = 19, Lq = 6, H = 2, Hk = 1, D = 64, bs = 4, nb = 6;
    const float scales[3][2] = {{4.0f, 4.0f}, {0.5f, 3.0f}, {1.0f, 1.0f}};
    for (int fi = 0; fi < 2; fi++)
        for (int si = 0; si < 3; si++) {
            const attn_dtype fmt = fmts[fi];
            const float ks = scales[si][0], vs = scales[si][1];
            float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(Lq * H * D), -1, 1);
            float *kd = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(S * Hk * D), -2, 2);
            float *vd = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(S * Hk * D), -1, 1);
            uint8_t *cache = calloc((size_t)(2 * nb * bs * Hk * D), 1);
            int32_t seq[1] = {(int32_t)S}, bt[5] = {3, 0, 5, 1, 4}; /* 19 keys in 5 blocks of 4 */
            int64_t slots[19];
            for (int64_t j = 0; j < S; j++) slots[j] = (int64_t)bt[j / bs] * bs + j % bs;
            int64_t qs[4] = {1, Lq, H, D}, kvs[3] = {S, Hk, D}, k4[4] = {1, S, Hk, D}, cs[5] = {2, nb, bs, Hk, D};
            int64_t ss[1] = {1}, bts[2] = {1, 5}, sls[1] = {S}, ls[3] = {1, H, Lq};
            attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs);
            attn_tensor tk = attn_tensor_make(kd, ATTN_DTYPE_F32, 3, kvs), tv = attn_tensor_make(vd, ATTN_DTYPE_F32, 3, kvs);
            attn_tensor tc = attn_tensor_make(cache, fmt, 5, cs), tsl = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, sls);
            attn_tensor tseq = attn_tensor_make(seq, ATTN_DTYPE_I32, 1, ss), tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bts);
            assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &tsl), ATTN_STATUS_OK);
            /* the decoded, scaled keys and values in a dense [1, S, Hk, D] tensor */
            float *kx = malloc(sizeof(float) * (size_t)(S * Hk * D)), *vx = malloc(sizeof(float) * (size_t)(S * Hk * D));
            for (int64_t j = 0; j < S; j++)
                for (int64_t d = 0; d < Hk * D; d++) {
                    const int64_t off = slots[j] * Hk * D + d;
                    kx[j * Hk * D + d] = attn_fp8_to_float(fmt, cache[off]) * ks;
                    vx[j * Hk * D + d] = attn_fp8_to_float(fmt, cache[(int64_t)nb * bs * Hk * D + off]) * vs;
                }
            attn_tensor tkx = attn_tensor_make(kx, ATTN_DTYPE_F32, 4, k4), tvx = attn_tensor_make(vx, ATTN_DTYPE_F32, 4, k4);
            const attn_span sp[1] = {{2, 5}};
            attn_query_range def = {0, Lq, S - Lq};
            float *oe = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(Lq * H * D)), *le = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Lq));
            float *o = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(Lq * H * D)), *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * Lq));
            attn_tensor toe = attn_tensor_make(oe, ATTN_DTYPE_F32, 4, qs), tle = attn_tensor_make(le, ATTN_DTYPE_F32, 3, ls);
            attn_tensor to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, qs), tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls);
            assert_int_equal(attn_ref_forward_piecewise(ATTN_LAYOUT_BSND, &tq, &tkx, &tvx, sp, 1, &def, 1, NULL, &toe, &tle),
                             ATTN_STATUS_OK);
            attn_params p;
            attn_params_init(&p);
            p.k_scale = ks, p.v_scale = vs;
            for (int twin = 0; twin < 2; twin++) {
                const attn_status st =
                    twin ? attn_ref_forward_paged_piecewise(&tq, &tc, &tseq, &tbt, sp, 1, NULL, 0, &p, &to, &tl)
                         : attn_forward_paged_piecewise(ctx, &tq, &tc, &tseq, &tbt, sp, 1, NULL, 0, &p, &to, &tl);
                assert_int_equal(st, ATTN_STATUS_OK);
                size_t bad = 0, bad_l = 0;
                const double err = th_compare(&to, &toe, th_tol_for(ATTN_DTYPE_F32), 2.0 * vs, &bad);
                const double err_l = th_compare_lse(&tl, &tle, th_tol_for(ATTN_DTYPE_F32), &bad_l);
                if (bad || bad_l)
                    print_error("REPRO paged piecewise %s %s k_scale=%g v_scale=%g: %zu/%zu values off (err %g / %g)\n",
                                twin ? "oracle twin" : "fast", attn_dtype_name(fmt), (double)ks, (double)vs, bad, bad_l,
                                err, err_l);
                assert_int_equal(bad, 0);
                assert_int_equal(bad_l, 0);
            }
            /* invalid scales: INVALID_ARGUMENT naming the field, out and lse untouched */
            const float badv[3] = {-1.0f, 0.0f, NAN};
            for (int bi = 0; bi < 3; bi++)
                for (int which = 0; which < 2; which++) {
                    attn_params pb = p;
                    if (which) pb.v_scale = badv[bi];
                    else pb.k_scale = badv[bi];
                    float *ob = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(Lq * H * D));
                    attn_tensor tob = attn_tensor_make(ob, ATTN_DTYPE_F32, 4, qs);
                    for (int twin = 0; twin < 2; twin++) {
                        const attn_status st =
                            twin ? attn_ref_forward_paged_piecewise(&tq, &tc, &tseq, &tbt, sp, 1, NULL, 0, &pb, &tob, NULL)
                                 : attn_forward_paged_piecewise(ctx, &tq, &tc, &tseq, &tbt, sp, 1, NULL, 0, &pb, &tob, NULL);
                        assert_int_equal(st, ATTN_STATUS_INVALID_ARGUMENT);
                        assert_non_null(strstr(attn_last_error(), which ? "v_scale" : "k_scale"));
                        for (int64_t i = 0; i < Lq * H * D; i++) assert_true(isnan(ob[i]));
                    }
                    free(ob);
                }
            free(q), free(kd), free(vd), free(cache), free(kx), free(vx), free(oe), free(le), free(o), free(l);
        }
    attn_ctx_destroy(ctx);
}

static void test_errors(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 104);
    pp_fix f;
    memset(&f, 0, sizeof f);
    f.dt = ATTN_DTYPE_F32, f.rows = 2, f.Lq = 6, f.H = 2, f.Hk = 1, f.D = 64, f.bs = 4;
    f.seq[0] = 19, f.seq[1] = 10;
    pp_setup(&f, &rng);
    int64_t os[4] = {2, 6, 2, 64}, q3s[3] = {12, 2, 64}, ls[3] = {2, 2, 6}, ms[2] = {6, 10};
    float *o = malloc(2 * 6 * 2 * 64 * 4), *l = malloc(2 * 2 * 6 * 4);
    memset(o, 0x7f, 2 * 6 * 2 * 64 * 4);
    memset(l, 0x7f, 2 * 2 * 6 * 4);
    attn_tensor to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, os), tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls);
    attn_tensor tq3 = attn_tensor_make(f.q, ATTN_DTYPE_F32, 3, q3s);
    unsigned char m[60] = {0};
    attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
    const attn_span ok[1] = {{2, 5}}, past[1] = {{5, 12}}, unsorted[2] = {{5, 8}, {2, 4}};
    const attn_query_range outside[1] = {{0, 6, 8}};
    attn_params causal, masked;
    attn_params_init(&causal);
    causal.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_params_init(&masked);
    masked.mask = &tm;
    /* a bad block id in a used entry, an unused junk entry is fine (9999 past ceil(seq / bs)) */
    int32_t bt_bad[2 * 6];
    memcpy(bt_bad, f.bt, sizeof(int32_t) * (size_t)(2 * f.max_blocks));
    bt_bad[1 * f.max_blocks + 2] = 9001;
    attn_tensor tbt_bad = f.tbt;
    tbt_bad.data = bt_bad;
    int32_t seq_neg[2] = {19, -1}, seq_short[2] = {19, 3}, seq_long[2] = {19, 40};
    attn_tensor tsn = f.tseq, tss = f.tseq, tsl = f.tseq, tseq64 = f.tseq, tcache4 = f.tcache;
    tsn.data = seq_neg, tss.data = seq_short, tsl.data = seq_long;
    tseq64.dtype = ATTN_DTYPE_I64;
    tcache4.ndim = 4;
    struct {
        const attn_tensor *q, *cache, *seq, *bt;
        const attn_span *sp;
        int64_t ns;
        const attn_query_range *qr;
        int64_t nr;
        const attn_params *p;
        attn_status st;
        const char *msg;
    } cases[] = {
        {&f.tq, &f.tcache, &f.tseq, &tbt_bad, ok, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "block_table: entry [1][2] = 9001 >= num_blocks="},
        {&f.tq, &f.tcache, &f.tseq, &f.tbt, past, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "spans[0]=(5,12): expected 0 <= start < end <= seq_lens[1]=10"},
        {&f.tq, &f.tcache, &f.tseq, &f.tbt, unsorted, 2, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "spans must be sorted and non-overlapping"},
        {&f.tq, &f.tcache, &tss, &f.tbt, NULL, 0, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "seq_lens: entry 1 = 3 < query_len=6 without query_ranges"},
        {&f.tq, &f.tcache, &tsn, &f.tbt, NULL, 0, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "seq_lens: entry 1 = -1 is outside"},
        {&f.tq, &f.tcache, &tsl, &f.tbt, NULL, 0, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "seq_lens: entry 1 = 40 needs 10 blocks of 4 > block_table width"},
        {&f.tq, &f.tcache, &tseq64, &f.tbt, NULL, 0, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "seq_lens: dtype"},
        {&f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, outside, 1, NULL, ATTN_STATUS_INVALID_ARGUMENT,
         "global positions fall outside the keys [0, 10)"},
        {&tq3, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "q:"},
        {&f.tq, &tcache4, &f.tseq, &f.tbt, ok, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "kv_cache"},
        {&f.tq, &f.tcache, &f.tseq, NULL, ok, 1, NULL, 0, NULL, ATTN_STATUS_INVALID_ARGUMENT, "block_table: is NULL"},
        {&f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, &causal, ATTN_STATUS_UNSUPPORTED,
         "params.causal=1: piecewise spans define causality"},
        {&f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, &masked, ATTN_STATUS_UNSUPPORTED,
         "params.mask: explicit masks cannot be combined"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_status st = attn_forward_paged_piecewise(ctx, cases[i].q, cases[i].cache, cases[i].seq, cases[i].bt,
                                                      cases[i].sp, cases[i].ns, cases[i].qr, cases[i].nr, cases[i].p,
                                                      &to, &tl);
        if (st != cases[i].st || !strstr(attn_last_error(), cases[i].msg))
            print_error("case %zu: status %d, message '%s'\n", i, (int)st, attn_last_error());
        assert_int_equal(st, cases[i].st);
        assert_non_null(strstr(attn_last_error(), cases[i].msg));
        st = attn_ref_forward_paged_piecewise(cases[i].q, cases[i].cache, cases[i].seq, cases[i].bt, cases[i].sp,
                                              cases[i].ns, cases[i].qr, cases[i].nr, cases[i].p, &to, &tl);
        assert_int_equal(st, cases[i].st);
    }
    /* out overlapping q, NULL ctx */
    attn_tensor tqo = f.tq;
    assert_int_equal(attn_forward_paged_piecewise(ctx, &f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, NULL, &tqo,
                                                  NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "out"));
    assert_int_equal(
        attn_forward_paged_piecewise(NULL, &f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, NULL, &to, NULL),
        ATTN_STATUS_INVALID_ARGUMENT);
    for (size_t i = 0; i < 2 * 6 * 2 * 64; i++) { /* nothing written */
        uint32_t u;
        memcpy(&u, o + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    for (size_t i = 0; i < 2 * 2 * 6; i++) {
        uint32_t u;
        memcpy(&u, l + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    /* and a valid call on the same fixture succeeds (the junk entries past each row's blocks are ignored) */
    assert_int_equal(attn_forward_paged_piecewise(ctx, &f.tq, &f.tcache, &f.tseq, &f.tbt, ok, 1, NULL, 0, NULL, &to, &tl),
                     ATTN_STATUS_OK);
    for (size_t i = 0; i < 2 * 6 * 2 * 64; i++) assert_true(isfinite(o[i]));
    free(o), free(l);
    pp_free(&f);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cfg_worked_example),
        cmocka_unit_test(test_random_batches),
        cmocka_unit_test(test_query_range_shard),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_fp8_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
