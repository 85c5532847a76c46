/*
 * fuzz_diff_merge.c — differential target of attn_merge_attn_states (fuzz_diff.h): two states out_a/out_b
 * [T, H, D] (f32/f16/bf16) with LSEs [H, T] that are ordinary, large (±1e4), or drawn from the special values
 * (NaN, ±inf, ±1e30, 0, 88, 1e6 ...), out separate or aliasing out_a / out_b, lse_out present or NULL, on every
 * usable kernel table against a double-precision merge written here from docs/SEMANTICS.md §4 and §8:
 *   lse = logaddexp(lse_a, lse_b), out = e^(lse_a − lse)·out_a + e^(lse_b − lse)·out_b; +inf is an empty state
 *   (−inf); one side empty returns the other side exactly (bits of out and lse); both empty give out = 0,
 *   lse = −inf; a NaN LSE propagates (IEEE): lse NaN and every element of that row's out NaN.
 * Tolerance: out th_tol_for(dtype) in units of max|out_a|, |out_b| of the row, LSE 2 ulp + 2^-22.
 */
#include "fuzz_diff.h"

static float fzd_merge_lse_value(th_rng *g, int mode) {
    static const float special[12] = {NAN,  INFINITY, -INFINITY, 0.0f,   1e30f, -1e30f,
                                      3.5f, -2.0f,    88.0f,     100.0f, 1e6f,  -INFINITY};
    switch (mode) {
    case 0:
        return (float)th_rng_range(g, -5.0, 5.0);
    case 1:
        return (float)th_rng_range(g, -1e4, 1e4);
    default:
        return special[th_rng_int(g, 0, 11)];
    }
}

static int fzd_merge_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_merge");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    static const int64_t ts[8] = {1, 2, 3, 5, 8, 1, 4, 16}, ds[8] = {1, 2, 3, 4, 8, 16, 17, 64};
    const uint8_t sh = fzd_u8(&r), mb = fzd_u8(&r);
    const int64_t T = ts[sh & 7], H = 1 + ((sh >> 3) & 3), D = ds[(sh >> 5) & 7];
    const attn_dtype dt = fzd_float_dtypes[mb & 3];
    const int mode_a = (mb >> 2) % 3, mode_b = (mb >> 4) % 3, alias = (mb >> 6) % 3; /* 0 none, 1 out_a, 2 out_b */
    const int with_lse = fzd_u8(&r) % 4 != 0;
    th_rng g;
    th_rng_seed(&g, fzd_seed(&r));
    fzd_say("T=%lld H=%lld D=%lld dtype=%s lse modes %d/%d alias=%s lse_out=%s", (long long)T, (long long)H,
            (long long)D, attn_dtype_name(dt), mode_a, mode_b, (const char *[]){"none", "out_a", "out_b"}[alias],
            with_lse ? "yes" : "NULL");
    fzd_kind = 1 + mode_a + 3 * mode_b + 9 * (dt != ATTN_DTYPE_F32) + 18 * (alias != 0);
    const int64_t n = T * H * D, nl = H * T, os[3] = {T, H, D}, ls[2] = {H, T};
    void *oa = fzd_alloc(dt, n), *ob = fzd_alloc(dt, n), *want = fzd_alloc(dt, n);
    float *la = (float *)fzd_alloc(ATTN_DTYPE_F32, nl), *lb = (float *)fzd_alloc(ATTN_DTYPE_F32, nl);
    float *lw = (float *)fzd_alloc(ATTN_DTYPE_F32, nl);
    fzd_fill_uniform(&g, 2.0, oa, dt, n), fzd_fill_uniform(&g, 2.0, ob, dt, n);
    for (int64_t i = 0; i < nl; i++)
        la[i] = fzd_merge_lse_value(&g, mode_a), lb[i] = fzd_merge_lse_value(&g, mode_b);
    /* the oracle, row (t, h) */
    double *vmax = (double *)calloc((size_t)nl, sizeof(double));
    int *nan_row = (int *)calloc((size_t)nl, sizeof(int));
    if (!vmax || !nan_row)
        abort();
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t li = h * T + t, oi = (t * H + h) * D;
            double a = la[li], b = lb[li];
            if (a == INFINITY)
                a = -INFINITY;
            if (b == INFINITY)
                b = -INFINITY;
            for (int64_t d = 0; d < D; d++)
                vmax[li] = fmax(vmax[li],
                                fmax(fabs(th_get(oa, dt, (size_t)(oi + d))), fabs(th_get(ob, dt, (size_t)(oi + d)))));
            if (isnan(a) || isnan(b)) {
                nan_row[li] = 1, lw[li] = NAN;
                for (int64_t d = 0; d < D; d++)
                    th_set(want, dt, (size_t)(oi + d), NAN);
            } else if (a == -INFINITY || b == -INFINITY) { /* one side (or both) empty */
                const int take_b = a == -INFINITY;
                lw[li] = (float)(take_b ? b : a);
                if (a == -INFINITY && b == -INFINITY)
                    lw[li] = -INFINITY;
                for (int64_t d = 0; d < D; d++)
                    memcpy((char *)want + (oi + d) * attn_dtype_size(dt),
                           (const char *)(take_b ? ob : oa) + (oi + d) * attn_dtype_size(dt), attn_dtype_size(dt));
                if (a == -INFINITY && b == -INFINITY)
                    for (int64_t d = 0; d < D; d++)
                        th_set(want, dt, (size_t)(oi + d), 0.0f);
            } else {
                const double m = fmax(a, b), s = exp(a - m) + exp(b - m), lse = m + log(s);
                lw[li] = (float)lse;
                for (int64_t d = 0; d < D; d++)
                    th_set(want, dt, (size_t)(oi + d),
                           (float)((exp(a - m) * th_get(oa, dt, (size_t)(oi + d)) +
                                    exp(b - m) * th_get(ob, dt, (size_t)(oi + d))) /
                                   s));
            }
        }
    const th_tol h = th_tol_for(dt);
    for (int k = 0; k < fzd_ntables; k++) {
        const char *isa = fzd_tables[k].name;
        void *ca = fzd_alloc(dt, n), *cb = fzd_alloc(dt, n), *o = fzd_alloc_pattern(dt, n, 0xFF);
        float *lo = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, nl, 0xFF);
        memcpy(ca, oa, fzd_bytes(dt, n)), memcpy(cb, ob, fzd_bytes(dt, n));
        attn_tensor ta = attn_tensor_make(ca, dt, 3, os), tb = attn_tensor_make(cb, dt, 3, os);
        attn_tensor to = attn_tensor_make(alias == 1 ? ca : alias == 2 ? cb : o, dt, 3, os);
        attn_tensor tla = attn_tensor_make(la, ATTN_DTYPE_F32, 2, ls),
                    tlb = attn_tensor_make(lb, ATTN_DTYPE_F32, 2, ls);
        attn_tensor tlo = attn_tensor_make(lo, ATTN_DTYPE_F32, 2, ls);
        const attn_status st =
            attn_merge_attn_states(fzd_tables[k].ctx, &ta, &tla, &tb, &tlb, &to, with_lse ? &tlo : NULL);
        fzd_check_status("attn_merge_attn_states", isa, st);
        const void *got = to.data;
        for (int64_t t = 0; t < T; t++)
            for (int64_t hh = 0; hh < H; hh++) {
                const int64_t li = hh * T + t, oi = (t * H + hh) * D;
                if (with_lse) {
                    const double gl = lo[li], wl = lw[li];
                    const int sp = fzd_same_special(gl, wl);
                    const double lim = 2.0 * fzd_ulp(wl) + 2.384185791015625e-7;
                    if (sp == 0 || (sp < 0 && !(fabs(gl - wl) <= lim)))
                        fzd_fail("attn_merge_attn_states on table %s: lse_out[%lld][%lld] = %.9g with lse_a = %.9g, "
                                 "lse_b = %.9g; expected %.9g (tolerance %.3g)",
                                 isa, (long long)hh, (long long)t, gl, (double)la[li], (double)lb[li], wl, lim);
                }
                for (int64_t d = 0; d < D; d++) {
                    const double gv = th_get(got, dt, (size_t)(oi + d)), wv = th_get(want, dt, (size_t)(oi + d));
                    const int sp = fzd_same_special(gv, wv);
                    const double lim = h.atol * (vmax[li] > 0 ? vmax[li] : 1.0) + h.rtol * fabs(wv);
                    const int exact_side = !nan_row[li] && (la[li] == -INFINITY || la[li] == INFINITY ||
                                                            lb[li] == -INFINITY || lb[li] == INFINITY);
                    if (sp == 0 || (sp < 0 && !(fabs(gv - wv) <= lim)) || (exact_side && gv != wv))
                        fzd_fail("attn_merge_attn_states on table %s: out[%lld][%lld][%lld] = %.9g with lse_a = %.9g, "
                                 "lse_b = %.9g, out_a = %.9g, out_b = %.9g; expected %.9g%s",
                                 isa, (long long)t, (long long)hh, (long long)d, gv, (double)la[li], (double)lb[li],
                                 th_get(oa, dt, (size_t)(oi + d)), th_get(ob, dt, (size_t)(oi + d)), wv,
                                 exact_side ? " exactly (one side empty)" : "");
                }
            }
        attn_clear_error();
        free(ca), free(cb), free(o), free(lo);
    }
    free(oa), free(ob), free(want), free(la), free(lb), free(lw), free(vmax), free(nan_row);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_merge_run(data, size);
}
#endif
