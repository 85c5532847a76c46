/*
 * fuzz_diff_paged.c — differential target of the plan-less paged entry attn_paged_attention (fuzz_diff.h): 1..3
 * requests with their own query and key counts (a query count above the key count too), a paged cache of every
 * dtype (f32/f16/bf16, fp8 E4M3/E5M2 with params.k_scale / v_scale, a quarter of them invalid: 0, -1, NaN, inf),
 * block sizes 1..16, block tables with repeated ids, causal or not, windows, soft-cap, ALiBi, sinks, and q rows
 * past the last query_start_loc entry. The oracle is attn_ref_forward_varlen over the keys and values gathered
 * from the pages and dequantized here (decode(bits)·scale), so an entry that ignores or misapplies the scales is
 * caught; attn_paged_attention on every usable table and its oracle twin attn_ref_paged_attention are held to it.
 * An fp8 cache with an invalid scale must be refused (INVALID_ARGUMENT, nothing written); a float cache ignores
 * the scales. Requests that make a plan (each schedules >= 1 token over >= as many keys) also run through
 * attn_plan_create + attn_forward_paged (q in plan row order) on every table: bitwise the plan-less result.
 */
#include "fuzz_diff.h"

/* The planned path: attn_forward_paged over a plan of the same requests (DECODER, num_computed_tokens = keys −
 * queries), q in plan row order (attn_plan_info.token_src). Its out and LSE, put back in input order, must equal
 * the plan-less call on the same table bitwise (docs/SERVING.md: the same bits for any batch order), and an fp8
 * cache with invalid scales must be refused with nothing written. `fo`/`fl`: the plan-less result (NULL when the
 * scales are invalid). */
static void fzd_paged_planned(const fzd_table *tb, const attn_plan *plan, const attn_plan_info *info, const void *q,
                              attn_dtype qdt, int64_t H, int64_t D, const fzd_cache *c, const attn_params *p,
                              const void *fo, const float *fl) {
    const int64_t T = info->num_tokens, qs[3] = {T, H, D}, ls[2] = {H, T}, es = (int64_t)attn_dtype_size(qdt);
    void *qp = fzd_alloc(qdt, T * H * D), *op = fzd_alloc_pattern(qdt, T * H * D, 0xFF);
    float *lp = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, H * T, 0xFF);
    for (int64_t t = 0; t < T; t++)
        memcpy((char *)qp + t * H * D * es, (const char *)q + (int64_t)info->token_src[t] * H * D * es,
               (size_t)(H * D * es));
    const size_t wsb = attn_plan_workspace_size(plan);
    void *ws = wsb ? malloc(wsb) : NULL;
    attn_tensor tq = attn_tensor_make(qp, qdt, 3, qs), to = attn_tensor_make(op, qdt, 3, qs);
    attn_tensor tl = attn_tensor_make(lp, ATTN_DTYPE_F32, 2, ls);
    const attn_status st = attn_forward_paged(tb->ctx, plan, &tq, NULL, NULL, &c->t, p, &to, &tl, ws, wsb);
    if (!fo) {
        if (st != ATTN_STATUS_INVALID_ARGUMENT)
            fzd_fail("attn_forward_paged on %s accepted params.k_scale=%g / v_scale=%g on an %s cache (status %s)",
                     tb->name, (double)c->k_scale, (double)c->v_scale, attn_dtype_name(c->cdt), attn_status_string(st));
        fzd_check_untouched("attn_forward_paged out after refusing the scales", tb->name, op,
                            fzd_bytes(qdt, T * H * D));
    } else {
        fzd_check_status("attn_forward_paged", tb->name, st);
        for (int64_t t = 0; t < T; t++) {
            const int64_t src = info->token_src[t];
            if (memcmp((const char *)op + t * H * D * es, (const char *)fo + src * H * D * es, (size_t)(H * D * es)))
                fzd_fail("attn_forward_paged on %s: plan row %lld (input row %lld) differs from attn_paged_attention's "
                         "bits",
                         tb->name, (long long)t, (long long)src);
            for (int64_t h = 0; h < H; h++)
                if (memcmp(lp + h * T + t, fl + h * T + src, sizeof(float)))
                    fzd_fail("attn_forward_paged on %s: lse[%lld][plan row %lld] = %.9g, attn_paged_attention %.9g",
                             tb->name, (long long)h, (long long)t, (double)lp[h * T + t], (double)fl[h * T + src]);
        }
    }
    attn_clear_error();
    free(qp), free(op), free(lp), free(ws);
}

static int fzd_paged_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_paged");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    static const int64_t qls[8] = {0, 1, 1, 2, 3, 4, 7, 1};
    static const int64_t kls[16] = {0, 1, 2, 3, 5, 8, 16, 17, 33, 64, 65, 100, 1, 4, 9, 130};
    static const int64_t ds[8] = {1, 2, 4, 8, 16, 32, 5, 64};
    const uint8_t sh = fzd_u8(&r);
    const int64_t R = 1 + sh % 3, H = 1 + ((sh >> 2) & 3), gsel = (sh >> 4) & 3;
    const int64_t Hkv = gsel == 1 ? 1 : (gsel == 2 && H % 2 == 0 ? H / 2 : H);
    const int64_t D = ds[fzd_u8(&r) & 7], extra_rows = (sh >> 6) & 1;
    const attn_dtype qdt = fzd_float_dtypes[fzd_u8(&r) & 3];
    int64_t ql[3], kl[3];
    for (int64_t i = 0; i < R; i++) {
        const uint8_t b = fzd_u8(&r);
        ql[i] = qls[b & 7], kl[i] = kls[b >> 4];
    }
    for (;;) { /* work bound */
        int64_t work = 0, big = 0;
        for (int64_t i = 0; i < R; i++)
            work += ql[i] * kl[i] * H * 2 * D, big = kl[i] > kl[big] ? i : big;
        if (work <= (1 << 16) || kl[big] <= 4)
            break;
        kl[big] /= 2;
    }
    fzd_values vm = fzd_value_mode(&r);
    fzd_opts o;
    fzd_say("R=%lld H=%lld Hkv=%lld D=%lld q=%s values=%s ", (long long)R, (long long)H, (long long)Hkv, (long long)D,
            attn_dtype_name(qdt), vm.integer ? "integer" : "uniform");
    fzd_decode_opts(&r, &o, H, D, 0, 1);
    o.p.causal = (fzd_u8(&r) & 1) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    th_rng g;
    th_rng_seed(&g, fzd_seed(&r));
    /* the cache, the block table (cols = the longest request's blocks, + 1 for a set bit) */
    fzd_cache c;
    const uint8_t cb = r.i < r.n ? r.p[r.i] : 0; /* (the cache's first byte: its block size) */
    static const int64_t bss[8] = {1, 2, 3, 4, 8, 16, 5, 16};
    const int64_t bs = bss[(cb >> 3) & 7];
    int64_t cols = 1;
    for (int64_t i = 0; i < R; i++)
        cols = (kl[i] + bs - 1) / bs > cols ? (kl[i] + bs - 1) / bs : cols;
    fzd_cache_decode(&r, &g, &c, &vm, Hkv, D, cols);
    o.p.k_scale = c.k_scale, o.p.v_scale = c.v_scale;
    int32_t *bt = (int32_t *)fzd_alloc(ATTN_DTYPE_I32, R * cols), qsl[4] = {0}, sl[3];
    for (int64_t i = 0; i < R * cols; i++)
        bt[i] = (int32_t)th_rng_int(&g, 0, c.NB - 1);
    int64_t total_k = 0;
    for (int64_t i = 0; i < R; i++)
        qsl[i + 1] = qsl[i] + (int32_t)ql[i], sl[i] = (int32_t)kl[i], total_k += kl[i];
    const int64_t Tq = qsl[R] + extra_rows;
    for (int64_t i = 0; i < R; i++)
        fzd_say("req%lld(q %lld, k %lld) ", (long long)i, (long long)ql[i], (long long)kl[i]);
    fzd_say("causal=%d extra_rows=%lld", (int)o.p.causal, (long long)extra_rows);
    /* q, and the oracle's dense keys/values */
    const int64_t nq = Tq * H * D, qs[3] = {Tq, H, D}, ks[3] = {total_k, Hkv, D}, ls[2] = {H, Tq};
    void *q = fzd_alloc(qdt, nq);
    const double qmax = fzd_fill(&g, &vm, vm.qexp, q, qdt, nq);
    float *kd = (float *)fzd_alloc(ATTN_DTYPE_F32, total_k * Hkv * D),
          *vd = (float *)fzd_alloc(ATTN_DTYPE_F32, total_k * Hkv * D);
    int32_t cuk[4] = {0};
    for (int64_t i = 0; i < R; i++) {
        fzd_cache_gather(&c, bt + i * cols, kl[i], kd + (int64_t)cuk[i] * Hkv * D, vd + (int64_t)cuk[i] * Hkv * D);
        cuk[i + 1] = cuk[i] + (int32_t)kl[i];
    }
    const double kmax = fzd_max_abs(kd, total_k * Hkv * D), vmax = fzd_max_abs(vd, total_k * Hkv * D);
    const double ks_eff = fzd_is_fp8(c.cdt) ? (double)c.k_scale : 1.0;
    const int exact = fzd_is_pow2(ks_eff) && fzd_exact_logits(&o, (double)o.scale * ks_eff, q, qdt, nq, qmax, kd,
                                                              ATTN_DTYPE_F32, total_k * Hkv * D, kmax, D);
    fzd_say(" exact_logits=%d", exact);
    fzd_kind = 1 + exact + 2 * (int)(c.cdt) + 16 * fzd_cache_bad_scales(&c) + 32 * (vm.integer);
    attn_tensor tq = attn_tensor_make(q, qdt, 3, qs), tkd = attn_tensor_make(kd, ATTN_DTYPE_F32, 3, ks);
    attn_tensor tvd = attn_tensor_make(vd, ATTN_DTYPE_F32, 3, ks);
    const int64_t n1[1] = {R + 1}, n2[1] = {R}, bts[2] = {R, cols};
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, n1),
                tcuk = attn_tensor_make(cuk, ATTN_DTYPE_I32, 1, n1);
    attn_tensor tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, n2), tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bts);
    void *ro = fzd_alloc_pattern(qdt, nq, 0xFF);
    float *rl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, H * Tq, 0xFF);
    attn_tensor tro = attn_tensor_make(ro, qdt, 3, qs), trl = attn_tensor_make(rl, ATTN_DTYPE_F32, 2, ls);
    fzd_check_status("oracle attn_ref_forward_varlen", "-",
                     attn_ref_forward_varlen(&tq, &tkd, &tvd, &tqsl, &tcuk, &o.p, &tro, &trl));
    int64_t maxk = 0, maxq = 0;
    for (int64_t i = 0; i < R; i++)
        maxk = kl[i] > maxk ? kl[i] : maxk, maxq = ql[i] > maxq ? ql[i] : maxq;
    const double mag = fzd_logit_mag(&o, D, qmax, kmax, maxk + maxq);
    /* the same requests through a plan when they make one (every request schedules >= 1 token, none has fewer
     * keys than queries, no rows past the last one) */
    int plannable = extra_rows == 0;
    for (int64_t i = 0; i < R; i++)
        plannable = plannable && ql[i] >= 1 && kl[i] >= ql[i];
    attn_plan *plan = NULL;
    attn_plan_info info;
    if (plannable) {
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = (int32_t)c.NB, cfg.block_size = (int32_t)c.BS, cfg.num_heads = (int32_t)H;
        cfg.num_kv_heads = (int32_t)Hkv, cfg.head_size = (int32_t)D, cfg.max_blocks_per_req = (int32_t)cols;
        attn_request rq[3];
        memset(rq, 0, sizeof rq);
        for (int64_t i = 0; i < R; i++) {
            rq[i].kind = ATTN_REQUEST_DECODER, rq[i].num_computed_tokens = kl[i] - ql[i];
            rq[i].num_scheduled_tokens = ql[i], rq[i].block_ids = bt + i * cols, rq[i].num_block_ids = cols;
        }
        fzd_check_status("attn_plan_create", "-", attn_plan_create(&cfg, rq, R, &plan));
        fzd_check_status("attn_plan_get_info", "-", attn_plan_get_info(plan, &info));
    }
    fzd_say(" planned=%d", plannable);
    for (int t = 0; t <= fzd_ntables; t++) { /* fzd_ntables: the oracle twin attn_ref_paged_attention */
        const char *isa = t == fzd_ntables ? "attn_ref_paged_attention" : fzd_tables[t].name;
        void *fo = fzd_alloc_pattern(qdt, nq, 0xFF);
        float *fl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, H * Tq, 0xFF);
        attn_tensor tfo = attn_tensor_make(fo, qdt, 3, qs), tfl = attn_tensor_make(fl, ATTN_DTYPE_F32, 2, ls);
        const attn_status st =
            t == fzd_ntables ? attn_ref_paged_attention(&tq, &c.t, &tqsl, &tsl, &tbt, &o.p, &tfo, &tfl)
                             : attn_paged_attention(fzd_tables[t].ctx, &tq, &c.t, &tqsl, &tsl, &tbt, &o.p, &tfo, &tfl);
        if (fzd_cache_bad_scales(&c)) {
            if (st != ATTN_STATUS_INVALID_ARGUMENT)
                fzd_fail("paged attention on %s accepted params.k_scale=%g / v_scale=%g on an %s cache (status %s)",
                         isa, (double)c.k_scale, (double)c.v_scale, attn_dtype_name(c.cdt), attn_status_string(st));
            fzd_check_untouched("paged attention out after refusing the scales", isa, fo, fzd_bytes(qdt, nq));
            fzd_check_untouched("paged attention lse after refusing the scales", isa, fl,
                                fzd_bytes(ATTN_DTYPE_F32, H * Tq));
        } else {
            fzd_check_status("paged attention", isa, st);
            const fzd_tol tol = fzd_tol_of(t == fzd_ntables ? NULL : &fzd_tables[t], qdt, vmax, mag, D, &o, maxk + 1,
                                           maxk + maxq, exact);
            fzd_check_out("paged attention out", isa, fo, ro, qdt, nq, &tol);
            fzd_check_lse("paged attention", isa, fl, rl, H * Tq, &tol);
        }
        if (plan && t < fzd_ntables)
            fzd_paged_planned(&fzd_tables[t], plan, &info, q, qdt, H, D, &c, &o.p, fzd_cache_bad_scales(&c) ? NULL : fo,
                              fl);
        attn_clear_error();
        free(fo), free(fl);
    }
    attn_plan_free(plan);
    free(ro), free(rl), free(q), free(kd), free(vd), free(bt), free(c.data);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_paged_run(data, size);
}
#endif
