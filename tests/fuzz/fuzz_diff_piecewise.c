/*
 * fuzz_diff_piecewise.c — differential target of the piecewise entries (fuzz_diff.h). The first byte picks:
 *   dense  attn_forward_piecewise on a dense problem (both layouts, GQA, f32/f16/bf16, windows, soft-cap,
 *          ALiBi, sinks) with 0..3 sorted spans and no / one / two query ranges, against
 *          attn_ref_forward_piecewise;
 *   paged  attn_forward_paged_piecewise on q [rows, query_len, H, D] over a paged cache of every dtype (fp8 with
 *          params.k_scale / v_scale, a quarter of them invalid), against attn_ref_forward_piecewise run row by
 *          row on the keys and values gathered from the pages and dequantized here (decode(bits)·scale); the oracle
 *          twin attn_ref_forward_paged_piecewise is held to the same. An fp8 cache with an invalid scale must be
 *          refused (INVALID_ARGUMENT, nothing written).
 * Every usable kernel table; out and LSE within the tolerance of the dtype and table; the same status when the
 * oracle refuses (e.g. query ranges outside the keys).
 */
#include "attn/attn_experimental.h"
#include "fuzz_diff.h"

/* 0..3 sorted, disjoint spans inside [0, limit]; 0..2 query ranges covering [0, Sq) inside [0, limit) (ranges
 * NULL for none: the default range needs Sq <= the keys). */
static void fzd_spans(th_rng *g, uint8_t b, int64_t Sq, int64_t limit, attn_span *sp, int64_t *ns, attn_query_range *qr,
                      int64_t *nr) {
    *ns = 0;
    int64_t pos = 0;
    for (int i = 0; i < (b & 3); i++) {
        const int64_t s = pos + th_rng_int(g, 0, 2), e = s + 1 + th_rng_int(g, 0, 4);
        if (e > limit)
            break;
        sp[*ns].start = s, sp[*ns].end = e, (*ns)++, pos = e;
    }
    *nr = (b >> 2) % 3;
    const int64_t room = limit - Sq > 0 ? limit - Sq : 0;
    if (*nr == 1) {
        qr[0].local_start = 0, qr[0].local_end = Sq, qr[0].global_start = th_rng_int(g, 0, room);
    } else if (*nr == 2) {
        const int64_t cut = Sq > 0 ? th_rng_int(g, 0, Sq) : 0;
        qr[0].local_start = 0, qr[0].local_end = cut,
        qr[0].global_start = th_rng_int(g, 0, limit - cut > 0 ? limit - cut : 0);
        qr[1].local_start = cut, qr[1].local_end = Sq;
        qr[1].global_start = th_rng_int(g, 0, limit - (Sq - cut) > 0 ? limit - (Sq - cut) : 0);
    }
    fzd_say("spans=");
    for (int64_t i = 0; i < *ns; i++)
        fzd_say("(%lld,%lld)", (long long)sp[i].start, (long long)sp[i].end);
    fzd_say(" ranges=");
    for (int64_t i = 0; i < *nr; i++)
        fzd_say("(%lld,%lld@%lld)", (long long)qr[i].local_start, (long long)qr[i].local_end,
                (long long)qr[i].global_start);
    fzd_say(" ");
}

static void fzd_piecewise_dense(fzd_rd *r) {
    fzd_dense c;
    fzd_dense_decode(r, &c, 0, 1, 1 << 17);
    attn_span sp[3];
    attn_query_range qr[2];
    int64_t ns, nr;
    fzd_spans(&c.g, fzd_u8(r), c.Sq, c.Sk, sp, &ns, qr, &nr);
    const int exact = fzd_dense_exact(&c);
    fzd_say("exact_logits=%d", exact);
    fzd_kind = 1 + exact + 2 * (int)ns + 8 * (int)nr;
    void *ro;
    float *rl;
    attn_tensor tro, trl;
    fzd_dense_outputs(&c, &ro, &rl, &tro, &trl);
    const attn_status rst = attn_ref_forward_piecewise((attn_layout)c.layout, &c.tq, &c.tk, &c.tv, sp, ns,
                                                       nr ? qr : NULL, nr, &c.o.p, &tro, &trl);
    attn_clear_error();
    for (int t = 0; t < fzd_ntables; t++) {
        void *fo;
        float *fl;
        attn_tensor tfo, tfl;
        fzd_dense_outputs(&c, &fo, &fl, &tfo, &tfl);
        const char *isa = fzd_tables[t].name;
        const attn_status st = attn_forward_piecewise(fzd_tables[t].ctx, (attn_layout)c.layout, &c.tq, &c.tk, &c.tv, sp,
                                                      ns, nr ? qr : NULL, nr, &c.o.p, &tfo, &tfl);
        if (rst != ATTN_STATUS_OK) {
            if (st != rst)
                fzd_fail("attn_forward_piecewise on %s returned %s, the oracle %s", isa, attn_status_string(st),
                         attn_status_string(rst));
            fzd_check_untouched("attn_forward_piecewise out after a refusal", isa, fo, fzd_bytes(c.qdt, c.nout));
        } else {
            fzd_check_status("attn_forward_piecewise", isa, st);
            const fzd_tol tol = fzd_dense_tol(&c, &fzd_tables[t], 0.0, exact);
            fzd_check_out("attn_forward_piecewise out", isa, fo, ro, c.qdt, c.nout, &tol);
            fzd_check_lse("attn_forward_piecewise", isa, fl, rl, c.nlse, &tol);
        }
        attn_clear_error();
        free(fo), free(fl);
    }
    free(ro), free(rl);
    fzd_dense_free(&c);
}

static void fzd_piecewise_paged(fzd_rd *r) {
    static const int64_t qls[8] = {1, 1, 2, 3, 4, 5, 8, 0};
    static const int64_t kls[16] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 65, 100, 6, 7, 130};
    static const int64_t ds[8] = {1, 2, 4, 8, 16, 32, 5, 64};
    const uint8_t sh = fzd_u8(r);
    const int64_t rows = 1 + sh % 3, H = 1 + ((sh >> 2) & 3), gsel = (sh >> 4) & 3;
    const int64_t Hkv = gsel == 1 ? 1 : (gsel == 2 && H % 2 == 0 ? H / 2 : H);
    const uint8_t db = fzd_u8(r);
    const int64_t D = ds[db & 7], ql = qls[(db >> 3) & 7];
    const attn_dtype qdt = fzd_float_dtypes[db >> 6];
    int64_t kl[3], mink = INT64_MAX, maxk = 0;
    for (int64_t i = 0; i < rows; i++) {
        kl[i] = kls[fzd_u8(r) & 15];
        if (kl[i] < ql)
            kl[i] = ql; /* the default row model needs query_len <= seq_lens[r] */
        while (kl[i] > 16 && ql * kl[i] * H * 2 * D > (1 << 15))
            kl[i] /= 2;
        if (kl[i] < ql)
            kl[i] = ql;
        mink = kl[i] < mink ? kl[i] : mink, maxk = kl[i] > maxk ? kl[i] : maxk;
    }
    fzd_values vm = fzd_value_mode(r);
    fzd_opts o;
    fzd_say("paged: rows=%lld query_len=%lld H=%lld Hkv=%lld D=%lld q=%s values=%s ", (long long)rows, (long long)ql,
            (long long)H, (long long)Hkv, (long long)D, attn_dtype_name(qdt), vm.integer ? "integer" : "uniform");
    fzd_decode_opts(r, &o, H, D, 0, 1);
    th_rng g;
    th_rng_seed(&g, fzd_seed(r));
    static const int64_t bss[8] = {1, 2, 3, 4, 8, 16, 5, 16};
    const int64_t bs = bss[((r->i < r->n ? r->p[r->i] : 0) >> 3) & 7], cols = (maxk + bs - 1) / bs;
    fzd_cache c;
    fzd_cache_decode(r, &g, &c, &vm, Hkv, D, cols);
    o.p.k_scale = c.k_scale, o.p.v_scale = c.v_scale;
    attn_span sp[3];
    attn_query_range qr[2];
    int64_t ns, nr;
    fzd_spans(&g, fzd_u8(r), ql, mink, sp, &ns, qr, &nr);
    int32_t *bt = (int32_t *)fzd_alloc(ATTN_DTYPE_I32, rows * cols), sl[3];
    for (int64_t i = 0; i < rows * cols; i++)
        bt[i] = (int32_t)th_rng_int(&g, 0, c.NB - 1);
    for (int64_t i = 0; i < rows; i++)
        sl[i] = (int32_t)kl[i], fzd_say("seq_len%lld=%lld ", (long long)i, (long long)kl[i]);
    const int64_t nq = rows * ql * H * D, nrow = ql * H * D, qs[4] = {rows, ql, H, D}, ls[3] = {rows, H, ql};
    void *q = fzd_alloc(qdt, nq);
    const double qmax = fzd_fill(&g, &vm, vm.qexp, q, qdt, nq);
    /* the oracle: row by row, dense piecewise over the gathered, dequantized keys */
    void *ro = fzd_alloc_pattern(qdt, nq, 0xFF);
    float *rl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, rows * H * ql, 0xFF);
    attn_status rst = ATTN_STATUS_OK;
    double kmax = 0.0, vmax = 0.0;
    int exact = 1;
    const double ks_eff = fzd_is_fp8(c.cdt) ? (double)c.k_scale : 1.0;
    for (int64_t i = 0; i < rows && rst == ATTN_STATUS_OK; i++) {
        float *kd = (float *)fzd_alloc(ATTN_DTYPE_F32, kl[i] * Hkv * D),
              *vd = (float *)fzd_alloc(ATTN_DTYPE_F32, kl[i] * Hkv * D);
        fzd_cache_gather(&c, bt + i * cols, kl[i], kd, vd);
        const double km = fzd_max_abs(kd, kl[i] * Hkv * D);
        kmax = fmax(kmax, km), vmax = fmax(vmax, fzd_max_abs(vd, kl[i] * Hkv * D));
        exact = exact && fzd_is_pow2(ks_eff) &&
                fzd_exact_logits(&o, (double)o.scale * ks_eff, (char *)q + i * nrow * attn_dtype_size(qdt), qdt, nrow,
                                 qmax, kd, ATTN_DTYPE_F32, kl[i] * Hkv * D, km, D);
        const int64_t q1[4] = {1, ql, H, D}, k1[4] = {1, kl[i], Hkv, D}, l1[3] = {1, H, ql};
        attn_tensor tq1 = attn_tensor_make((char *)q + i * nrow * attn_dtype_size(qdt), qdt, 4, q1);
        attn_tensor tk1 = attn_tensor_make(kd, ATTN_DTYPE_F32, 4, k1),
                    tv1 = attn_tensor_make(vd, ATTN_DTYPE_F32, 4, k1);
        attn_tensor to1 = attn_tensor_make((char *)ro + i * nrow * attn_dtype_size(qdt), qdt, 4, q1);
        attn_tensor tl1 = attn_tensor_make(rl + i * H * ql, ATTN_DTYPE_F32, 3, l1);
        attn_params p1 = o.p;
        p1.k_scale = p1.v_scale = 1.0f; /* (an f32 dense call: not read) */
        rst =
            attn_ref_forward_piecewise(ATTN_LAYOUT_BSND, &tq1, &tk1, &tv1, sp, ns, nr ? qr : NULL, nr, &p1, &to1, &tl1);
        free(kd), free(vd);
    }
    attn_clear_error();
    fzd_say("exact_logits=%d", exact);
    fzd_kind = 64 + exact + 2 * (int)c.cdt + 16 * fzd_cache_bad_scales(&c) + 32 * (rst != ATTN_STATUS_OK);
    const int64_t n1[1] = {rows}, bts[2] = {rows, cols};
    attn_tensor tq = attn_tensor_make(q, qdt, 4, qs), tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, n1);
    attn_tensor tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bts);
    const double mag = fzd_logit_mag(&o, D, qmax, kmax, maxk + ql);
    for (int t = 0; t <= fzd_ntables; t++) { /* fzd_ntables: the oracle twin */
        const char *isa = t == fzd_ntables ? "attn_ref_forward_paged_piecewise" : fzd_tables[t].name;
        void *fo = fzd_alloc_pattern(qdt, nq, 0xFF);
        float *fl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, rows * H * ql, 0xFF);
        attn_tensor tfo = attn_tensor_make(fo, qdt, 4, qs), tfl = attn_tensor_make(fl, ATTN_DTYPE_F32, 3, ls);
        const attn_status st =
            t == fzd_ntables
                ? attn_ref_forward_paged_piecewise(&tq, &c.t, &tsl, &tbt, sp, ns, nr ? qr : NULL, nr, &o.p, &tfo, &tfl)
                : attn_forward_paged_piecewise(fzd_tables[t].ctx, &tq, &c.t, &tsl, &tbt, sp, ns, nr ? qr : NULL, nr,
                                               &o.p, &tfo, &tfl);
        if (fzd_cache_bad_scales(&c) || rst != ATTN_STATUS_OK) {
            if (st == ATTN_STATUS_OK)
                fzd_fail("attn_forward_paged_piecewise on %s accepted %s (params.k_scale=%g, v_scale=%g, %s cache)",
                         isa, rst != ATTN_STATUS_OK ? "a call the oracle refuses" : "invalid fp8 scales",
                         (double)c.k_scale, (double)c.v_scale, attn_dtype_name(c.cdt));
            fzd_check_untouched("attn_forward_paged_piecewise out after a refusal", isa, fo, fzd_bytes(qdt, nq));
            fzd_check_untouched("attn_forward_paged_piecewise lse after a refusal", isa, fl,
                                fzd_bytes(ATTN_DTYPE_F32, rows * H * ql));
        } else {
            fzd_check_status("attn_forward_paged_piecewise", isa, st);
            const fzd_tol tol =
                fzd_tol_of(t == fzd_ntables ? NULL : &fzd_tables[t], qdt, vmax, mag, D, &o, maxk + 1, maxk + ql, exact);
            fzd_check_out("attn_forward_paged_piecewise out", isa, fo, ro, qdt, nq, &tol);
            fzd_check_lse("attn_forward_paged_piecewise", isa, fl, rl, rows * H * ql, &tol);
        }
        attn_clear_error();
        free(fo), free(fl);
    }
    free(q), free(ro), free(rl), free(bt), free(c.data);
}

static int fzd_piecewise_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_piecewise");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    if (fzd_u8(&r) & 1)
        fzd_piecewise_paged(&r);
    else
        fzd_piecewise_dense(&r);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_piecewise_run(data, size);
}
#endif
