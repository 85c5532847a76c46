/*
 * fuzz_diff_varlen.c — differential target of the packed variable-length entries (fuzz_diff.h): 1..4 sequences
 * with their own query and key counts (zero-length ones too), q and k rows past the last cu_seqlens entry,
 * GQA/MQA, head sizes 1..256, f32/f16/bf16, causal top-left/bottom-right, windows, soft-cap, ALiBi, sinks.
 * attn_forward_varlen ([total, H, D]) and attn_forward_packed ([1, total, H, D], the same buffers) on every usable
 * kernel table against attn_ref_forward_varlen: out and LSE within the tolerance of the dtype and table; rows
 * past cu_seqlens_q[last] untouched.
 */
#include "attn/attn_experimental.h"
#include "fuzz_diff.h"

static int fzd_varlen_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_varlen");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    static const int64_t qls[8] = {0, 1, 2, 3, 5, 8, 1, 4};
    static const int64_t kls[16] = {0, 1, 2, 4, 7, 16, 33, 70, 3, 64, 65, 5, 1, 9, 17, 130};
    static const int64_t ds[16] = {1, 2, 3, 4, 8, 16, 32, 64, 5, 17, 31, 33, 128, 256, 7, 12};
    const uint8_t sh = fzd_u8(&r);
    const int64_t S = 1 + (sh & 3), H = 1 + ((sh >> 2) & 3), gsel = (sh >> 4) & 3;
    const int64_t Hkv = gsel == 1 ? 1 : (gsel == 2 && H % 2 == 0 ? H / 2 : H);
    const int64_t extra_q = (sh >> 6) & 1, extra_k = sh >> 7;
    const uint8_t db = fzd_u8(&r);
    int64_t D = ds[db & 15], Dv = (db & 0x10) ? ds[fzd_u8(&r) & 15] : D;
    const uint8_t tb = fzd_u8(&r);
    const attn_dtype qdt = fzd_float_dtypes[tb & 3], kdt = fzd_float_dtypes[(tb >> 2) & 3];
    int64_t ql[4], kl[4];
    for (int64_t i = 0; i < S; i++) {
        const uint8_t b = fzd_u8(&r);
        ql[i] = qls[b & 7], kl[i] = kls[b >> 4];
    }
    for (;;) { /* work bound */
        int64_t work = 0, big = 0;
        for (int64_t i = 0; i < S; i++)
            work += ql[i] * kl[i] * H * (D + Dv), big = kl[i] > kl[big] ? i : big;
        if (work <= (1 << 17))
            break;
        if (kl[big] > 8)
            kl[big] /= 2;
        else if (D > 8 || Dv > 8)
            D = D > 8 ? D / 2 : D, Dv = Dv > 8 ? Dv / 2 : Dv;
        else
            break;
    }
    fzd_values vm = fzd_value_mode(&r);
    fzd_say("S=%lld H=%lld Hkv=%lld D=%lld Dv=%lld q=%s kv=%s values=%s ", (long long)S, (long long)H, (long long)Hkv,
            (long long)D, (long long)Dv, attn_dtype_name(qdt), attn_dtype_name(kdt),
            vm.integer ? "integer" : "uniform");
    fzd_opts o;
    fzd_decode_opts(&r, &o, H, D, 1, 1);
    th_rng g;
    th_rng_seed(&g, fzd_seed(&r));
    int32_t cuq[5] = {0}, cuk[5] = {0};
    int64_t maxq = 0, maxk = 0;
    for (int64_t i = 0; i < S; i++) {
        cuq[i + 1] = cuq[i] + (int32_t)ql[i], cuk[i + 1] = cuk[i] + (int32_t)kl[i];
        maxq = ql[i] > maxq ? ql[i] : maxq, maxk = kl[i] > maxk ? kl[i] : maxk;
        fzd_say("seq%lld(q %lld, k %lld) ", (long long)i, (long long)ql[i], (long long)kl[i]);
    }
    const int64_t Tq = cuq[S] + extra_q, Tk = cuk[S] + extra_k;
    fzd_say("rows past the last cu_seqlens: q %lld, k %lld ", (long long)extra_q, (long long)extra_k);
    const int64_t nq = Tq * H * D, nk = Tk * Hkv * D, nv = Tk * Hkv * Dv, no = Tq * H * Dv;
    void *q = fzd_alloc(qdt, nq), *k = fzd_alloc(kdt, nk), *v = fzd_alloc(kdt, nv);
    const double qmax = fzd_fill(&g, &vm, vm.qexp, q, qdt, nq), kmax = fzd_fill(&g, &vm, vm.kexp, k, kdt, nk);
    const double vmax = fzd_fill_uniform(&g, 1.0, v, kdt, nv);
    const int exact = fzd_exact_logits(&o, o.scale, q, qdt, nq, qmax, k, kdt, nk, kmax, D);
    fzd_say("exact_logits=%d", exact);
    fzd_kind = 1 + exact + 2 * (int)o.p.causal + 8 * (qdt != ATTN_DTYPE_F32) + 16 * (int)(S - 1) + 64 * vm.integer;
    const int64_t qs[3] = {Tq, H, D}, ks[3] = {Tk, Hkv, D}, vs[3] = {Tk, Hkv, Dv}, os[3] = {Tq, H, Dv}, ls[2] = {H, Tq};
    const int64_t qs4[4] = {1, Tq, H, D}, ks4[4] = {1, Tk, Hkv, D}, vs4[4] = {1, Tk, Hkv, Dv}, os4[4] = {1, Tq, H, Dv};
    const int64_t cs[1] = {S + 1};
    attn_tensor tq = attn_tensor_make(q, qdt, 3, qs), tk = attn_tensor_make(k, kdt, 3, ks),
                tv = attn_tensor_make(v, kdt, 3, vs);
    attn_tensor tq4 = attn_tensor_make(q, qdt, 4, qs4), tk4 = attn_tensor_make(k, kdt, 4, ks4);
    attn_tensor tv4 = attn_tensor_make(v, kdt, 4, vs4);
    attn_tensor tcq = attn_tensor_make(cuq, ATTN_DTYPE_I32, 1, cs), tck = attn_tensor_make(cuk, ATTN_DTYPE_I32, 1, cs);
    void *ro = fzd_alloc_pattern(qdt, no, 0xFF);
    float *rl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, H * Tq, 0xFF);
    attn_tensor tro = attn_tensor_make(ro, qdt, 3, os), trl = attn_tensor_make(rl, ATTN_DTYPE_F32, 2, ls);
    fzd_check_status("oracle attn_ref_forward_varlen", "-",
                     attn_ref_forward_varlen(&tq, &tk, &tv, &tcq, &tck, &o.p, &tro, &trl));
    const double mag = fzd_logit_mag(&o, D, qmax, kmax, maxq + maxk);
    for (int t = 0; t < fzd_ntables; t++) {
        const char *isa = fzd_tables[t].name;
        const fzd_tol tol = fzd_tol_of(&fzd_tables[t], qdt, vmax, mag, D, &o, maxk + 1, maxq + maxk, exact);
        for (int packed = 0; packed < 2; packed++) {
            void *fo = fzd_alloc_pattern(qdt, no, 0xFF);
            float *fl = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, H * Tq, 0xFF);
            attn_tensor tfo = attn_tensor_make(fo, qdt, 3, os), tfo4 = attn_tensor_make(fo, qdt, 4, os4);
            attn_tensor tfl = attn_tensor_make(fl, ATTN_DTYPE_F32, 2, ls);
            const char *what = packed ? "attn_forward_packed" : "attn_forward_varlen";
            const attn_status st =
                packed ? attn_forward_packed(fzd_tables[t].ctx, &tq4, &tk4, &tv4, &tcq, &tck, &o.p, &tfo4, &tfl)
                       : attn_forward_varlen(fzd_tables[t].ctx, &tq, &tk, &tv, &tcq, &tck, &o.p, &tfo, &tfl);
            fzd_check_status(what, isa, st);
            fzd_check_out(what, isa, fo, ro, qdt, cuq[S] * H * Dv, &tol);
            fzd_check_untouched(what, isa, (char *)fo + fzd_bytes(qdt, cuq[S] * H * Dv),
                                fzd_bytes(qdt, extra_q * H * Dv));
            for (int64_t h = 0; h < H; h++) {
                fzd_check_lse(what, isa, fl + h * Tq, rl + h * Tq, cuq[S], &tol);
                fzd_check_untouched(what, isa, fl + h * Tq + cuq[S], fzd_bytes(ATTN_DTYPE_F32, extra_q));
            }
            attn_clear_error();
            free(fo), free(fl);
        }
    }
    free(q), free(k), free(v), free(ro), free(rl);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_varlen_run(data, size);
}
#endif
