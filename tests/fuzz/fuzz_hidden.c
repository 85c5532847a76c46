/*
 * fuzz_hidden.c — hidden-value target (fuzz_diff.h, docs/SEMANTICS.md §3 "Hidden keys never reach a row"): a
 * small valid problem runs twice on every usable kernel table and on the oracle, once with ordinary values
 * everywhere and once with every position that no query may see poisoned with NaN, +inf, -inf, ±1e30 (one of
 * them or a mix; fp8 caches get their NaN / inf / max codes); out and LSE must be bitwise the same. The first
 * byte picks the family:
 *   dense   attn_forward / attn_ref_forward: K/V rows that causal (top-left or bottom-right), the window, the
 *           key-padding mask, a boolean keep-mask or an additive -inf mask hide from every query row;
 *   varlen  attn_forward_varlen / attn_ref_forward_varlen: q and k/v rows past the last cu_seqlens entry, and
 *           keys that causal or the window hide from every row of their sequence;
 *   paged   attn_paged_attention / attn_ref_paged_attention: every cache slot no request reads (unused blocks,
 *           rows past seq_len in a used block, keys outside every row's window), block-table entries past
 *           ceil(seq_len / block_size) (set to ids outside the cache), q rows past the last query_start_loc.
 */
#include "fuzz_diff.h"

static float fzd_poison(th_rng *g, int kind) {
    static const float v[5] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f};
    return v[kind < 5 ? kind : th_rng_int(g, 0, 4)];
}
static uint8_t fzd_poison_fp8(th_rng *g, attn_dtype dt, int kind) {
    static const uint8_t e4[5] = {0x7F, 0x7E, 0xFE, 0x7E, 0xFF}, e5[5] = {0x7F, 0x7C, 0xFC, 0x7B, 0xFB};
    const int k = kind < 5 ? kind : (int)th_rng_int(g, 0, 4);
    return dt == ATTN_DTYPE_FP8_E4M3 ? e4[k] : e5[k];
}
static void fzd_poison_row(th_rng *g, void *buf, attn_dtype dt, int64_t at, int64_t n, int kind) {
    for (int64_t i = 0; i < n; i++)
        th_set(buf, dt, (size_t)(at + i), fzd_poison(g, kind));
}
/* Key j visible to query row i (positions of docs/SEMANTICS.md §2), before masks. */
static int fzd_visible(const attn_params *p, int64_t Sq, int64_t Sk, int64_t i, int64_t j) {
    const int64_t pos = p->causal == ATTN_CAUSAL_TOP_LEFT ? i : Sk - Sq + i;
    if (p->causal != ATTN_CAUSAL_NONE && j > pos)
        return 0;
    if (p->window_left >= 0 && j < pos - p->window_left)
        return 0;
    if (p->window_right >= 0 && j > pos + p->window_right)
        return 0;
    return 1;
}
/* Runs `call` (0 = plain values, 1 = poisoned) per table and on the oracle (table -1); compares bitwise. */
typedef attn_status (*fzd_hidden_call)(void *state, int table, int poisoned, void *out, float *lse);
static void fzd_hidden_compare(const char *what, fzd_hidden_call call, void *state, attn_dtype odt, int64_t nout,
                               int64_t nlse) {
    for (int t = -1; t < fzd_ntables; t++) {
        const char *isa = t < 0 ? "oracle" : fzd_tables[t].name;
        void *o[2];
        float *l[2];
        attn_status st[2];
        for (int k = 0; k < 2; k++) {
            o[k] = fzd_alloc_pattern(odt, nout, 0xFF), l[k] = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, nlse, 0xFF);
            st[k] = call(state, t, k, o[k], l[k]);
            if (st[k] != ATTN_STATUS_OK)
                fzd_fail("%s on %s (%s values): a valid call returned %s (%s)", what, isa, k ? "poisoned" : "plain",
                         attn_status_string(st[k]), attn_last_error());
        }
        for (int64_t i = 0; i < nout; i++)
            if (memcmp((char *)o[0] + i * attn_dtype_size(odt), (char *)o[1] + i * attn_dtype_size(odt),
                       attn_dtype_size(odt)))
                fzd_fail("%s on %s: out element %lld = %.9g with plain hidden values, %.9g with poisoned ones", what,
                         isa, (long long)i, (double)th_get(o[0], odt, (size_t)i), (double)th_get(o[1], odt, (size_t)i));
        for (int64_t i = 0; i < nlse; i++)
            if (memcmp(l[0] + i, l[1] + i, sizeof(float)))
                fzd_fail("%s on %s: lse element %lld = %.9g with plain hidden values, %.9g with poisoned ones", what,
                         isa, (long long)i, (double)l[0][i], (double)l[1][i]);
        for (int k = 0; k < 2; k++)
            free(o[k]), free(l[k]);
        attn_clear_error();
    }
}

/* ---- dense ---- */
typedef struct fzd_hd {
    fzd_dense c;
    void *kp, *vp; /* poisoned copies */
    attn_tensor tkp, tvp;
} fzd_hd;
static attn_status fzd_hd_call(void *state, int t, int poisoned, void *out, float *lse) {
    fzd_hd *s = (fzd_hd *)state;
    attn_tensor to, tl;
    to = fzd_view4(out, s->c.qdt, s->c.layout, s->c.B, s->c.Sq, s->c.H, s->c.Dv);
    const int64_t ls[3] = {s->c.B, s->c.H, s->c.Sq};
    tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, ls);
    const attn_tensor *k = poisoned ? &s->tkp : &s->c.tk, *v = poisoned ? &s->tvp : &s->c.tv;
    return t < 0 ? attn_ref_forward((attn_layout)s->c.layout, &s->c.tq, k, v, &s->c.o.p, &to, &tl)
                 : attn_forward(fzd_tables[t].ctx, (attn_layout)s->c.layout, &s->c.tq, k, v, &s->c.o.p, &to, &tl);
}
static void fzd_hidden_dense(fzd_rd *r, int kind) {
    fzd_hd s;
    fzd_dense *c = &s.c;
    fzd_dense_decode(r, c, 1, 1, 1 << 16);
    const int mk = fzd_u8(r) % 4; /* 0 none, 1 key padding [B, Sk], 2 keep-mask [Sq, Sk], 3 additive -inf [Sq, Sk] */
    void *mask = NULL;
    attn_tensor tm;
    if (mk == 1) {
        const int64_t ms[2] = {c->B, c->Sk};
        mask = fzd_alloc(ATTN_DTYPE_U8, c->B * c->Sk);
        for (int64_t i = 0; i < c->B * c->Sk; i++)
            ((uint8_t *)mask)[i] = th_rng_int(&c->g, 0, 2) != 0;
        tm = attn_tensor_make(mask, ATTN_DTYPE_U8, 2, ms), c->o.p.key_padding_mask = &tm;
    } else if (mk >= 2) {
        const int64_t ms[2] = {c->Sq, c->Sk};
        const attn_dtype mdt = mk == 2 ? ATTN_DTYPE_BOOL : ATTN_DTYPE_F32;
        mask = fzd_alloc(mdt, c->Sq * c->Sk);
        /* whole key columns off for half the keys, single entries for the rest */
        for (int64_t j = 0; j < c->Sk; j++) {
            const int col_off = th_rng_int(&c->g, 0, 1);
            for (int64_t i = 0; i < c->Sq; i++) {
                const int keep = !col_off || th_rng_int(&c->g, 0, 3) == 0 ? th_rng_int(&c->g, 0, 3) != 0 : 0;
                if (mk == 2)
                    ((uint8_t *)mask)[i * c->Sk + j] = (uint8_t)keep;
                else
                    ((float *)mask)[i * c->Sk + j] = keep ? (float)th_rng_range(&c->g, -1.0, 1.0) : -INFINITY;
            }
        }
        tm = attn_tensor_make(mask, mdt, 2, ms);
        if (mk == 2)
            c->o.p.mask = &tm;
        else
            c->o.p.additive_mask = &tm;
    }
    s.kp = fzd_alloc(c->kdt, c->nk), s.vp = fzd_alloc(c->kdt, c->nv);
    memcpy(s.kp, c->k, fzd_bytes(c->kdt, c->nk)), memcpy(s.vp, c->v, fzd_bytes(c->kdt, c->nv));
    int64_t hidden = 0;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t j = 0; j < c->Sk; j++) {
            int seen = 0;
            for (int64_t i = 0; i < c->Sq && !seen; i++) {
                int vis = fzd_visible(&c->o.p, c->Sq, c->Sk, i, j);
                if (mk == 1)
                    vis = vis && ((uint8_t *)mask)[b * c->Sk + j];
                if (mk == 2)
                    vis = vis && ((uint8_t *)mask)[i * c->Sk + j];
                if (mk == 3)
                    vis = vis && ((float *)mask)[i * c->Sk + j] != -INFINITY;
                seen = vis;
            }
            if (seen)
                continue;
            hidden++;
            for (int64_t g2 = 0; g2 < c->Hkv; g2++) {
                const int64_t row =
                    c->layout == ATTN_LAYOUT_BNSD ? (b * c->Hkv + g2) * c->Sk + j : (b * c->Sk + j) * c->Hkv + g2;
                fzd_poison_row(&c->g, s.kp, c->kdt, row * c->D, c->D, kind);
                fzd_poison_row(&c->g, s.vp, c->kdt, row * c->Dv, c->Dv, kind);
            }
        }
    fzd_say("mask=%d hidden key rows=%lld", mk, (long long)hidden);
    fzd_kind = 1 + mk + 4 * (int)c->o.p.causal + 16 * (hidden > 0);
    s.tkp = fzd_view4(s.kp, c->kdt, c->layout, c->B, c->Sk, c->Hkv, c->D);
    s.tvp = fzd_view4(s.vp, c->kdt, c->layout, c->B, c->Sk, c->Hkv, c->Dv);
    fzd_hidden_compare("dense attention", fzd_hd_call, &s, c->qdt, c->nout, c->nlse);
    free(s.kp), free(s.vp), free(mask);
    fzd_dense_free(c);
}

/* ---- varlen ---- */
typedef struct fzd_hv {
    attn_tensor tq[2], tk[2], tv[2], tcq, tck;
    attn_params p;
    attn_dtype qdt;
    int64_t Tq, H, D;
} fzd_hv;
static attn_status fzd_hv_call(void *state, int t, int poisoned, void *out, float *lse) {
    fzd_hv *s = (fzd_hv *)state;
    const int64_t os[3] = {s->Tq, s->H, s->D}, ls[2] = {s->H, s->Tq};
    attn_tensor to = attn_tensor_make(out, s->qdt, 3, os), tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
    return t < 0 ? attn_ref_forward_varlen(&s->tq[poisoned], &s->tk[poisoned], &s->tv[poisoned], &s->tcq, &s->tck,
                                           &s->p, &to, &tl)
                 : attn_forward_varlen(fzd_tables[t].ctx, &s->tq[poisoned], &s->tk[poisoned], &s->tv[poisoned], &s->tcq,
                                       &s->tck, &s->p, &to, &tl);
}
static void fzd_hidden_varlen(fzd_rd *r, int kind) {
    static const int64_t qls[8] = {0, 1, 2, 3, 5, 8, 1, 4}, kls[8] = {0, 1, 2, 4, 7, 16, 33, 70};
    static const int64_t ds[8] = {1, 2, 3, 4, 8, 16, 32, 64};
    const uint8_t sh = fzd_u8(r), db = fzd_u8(r);
    const int64_t S = 1 + (sh & 3), H = 1 + ((sh >> 2) & 3), Hkv = (sh & 0x10) ? 1 : H, D = ds[db & 7];
    const int64_t xq = 1 + ((sh >> 5) & 1), xk = 1 + (sh >> 6);
    const attn_dtype qdt = fzd_float_dtypes[(db >> 3) & 3], kdt = fzd_float_dtypes[(db >> 5) & 3];
    int64_t ql[4], kl[4];
    int32_t cuq[5] = {0}, cuk[5] = {0};
    for (int64_t i = 0; i < S; i++) {
        const uint8_t b = fzd_u8(r);
        ql[i] = qls[b & 7], kl[i] = kls[(b >> 3) & 7];
        cuq[i + 1] = cuq[i] + (int32_t)ql[i], cuk[i + 1] = cuk[i] + (int32_t)kl[i];
    }
    fzd_values vm = fzd_value_mode(r);
    fzd_opts o;
    fzd_say("varlen: S=%lld H=%lld Hkv=%lld D=%lld q=%s kv=%s rows past the last cu_seqlens q %lld k %lld ",
            (long long)S, (long long)H, (long long)Hkv, (long long)D, attn_dtype_name(qdt), attn_dtype_name(kdt),
            (long long)xq, (long long)xk);
    fzd_decode_opts(r, &o, H, D, 1, 1);
    th_rng g;
    th_rng_seed(&g, fzd_seed(r));
    const int64_t Tq = cuq[S] + xq, Tk = cuk[S] + xk, nq = Tq * H * D, nk = Tk * Hkv * D;
    fzd_hv s;
    s.p = o.p, s.qdt = qdt, s.Tq = Tq, s.H = H, s.D = D;
    void *q[2] = {fzd_alloc(qdt, nq), fzd_alloc(qdt, nq)}, *k[2] = {fzd_alloc(kdt, nk), fzd_alloc(kdt, nk)};
    void *v[2] = {fzd_alloc(kdt, nk), fzd_alloc(kdt, nk)};
    fzd_fill(&g, &vm, vm.qexp, q[0], qdt, nq), fzd_fill(&g, &vm, vm.kexp, k[0], kdt, nk),
        fzd_fill_uniform(&g, 1.0, v[0], kdt, nk);
    memcpy(q[1], q[0], fzd_bytes(qdt, nq)), memcpy(k[1], k[0], fzd_bytes(kdt, nk)),
        memcpy(v[1], v[0], fzd_bytes(kdt, nk));
    fzd_poison_row(&g, q[1], qdt, cuq[S] * H * D, xq * H * D, kind);
    fzd_poison_row(&g, k[1], kdt, cuk[S] * Hkv * D, xk * Hkv * D, kind);
    fzd_poison_row(&g, v[1], kdt, cuk[S] * Hkv * D, xk * Hkv * D, kind);
    int64_t hidden = 0;
    for (int64_t b = 0; b < S; b++)
        for (int64_t j = 0; j < kl[b]; j++) {
            int seen = 0;
            for (int64_t i = 0; i < ql[b] && !seen; i++)
                seen = fzd_visible(&o.p, ql[b], kl[b], i, j);
            if (seen)
                continue;
            hidden++;
            fzd_poison_row(&g, k[1], kdt, (cuk[b] + j) * Hkv * D, Hkv * D, kind);
            fzd_poison_row(&g, v[1], kdt, (cuk[b] + j) * Hkv * D, Hkv * D, kind);
        }
    fzd_say("hidden keys=%lld", (long long)hidden);
    fzd_kind = 64 + (int)o.p.causal + 4 * (hidden > 0);
    const int64_t qs[3] = {Tq, H, D}, ks[3] = {Tk, Hkv, D}, cs[1] = {S + 1};
    for (int k2 = 0; k2 < 2; k2++)
        s.tq[k2] = attn_tensor_make(q[k2], qdt, 3, qs), s.tk[k2] = attn_tensor_make(k[k2], kdt, 3, ks),
        s.tv[k2] = attn_tensor_make(v[k2], kdt, 3, ks);
    s.tcq = attn_tensor_make(cuq, ATTN_DTYPE_I32, 1, cs), s.tck = attn_tensor_make(cuk, ATTN_DTYPE_I32, 1, cs);
    fzd_hidden_compare("varlen attention", fzd_hv_call, &s, qdt, nq, H * Tq);
    for (int k2 = 0; k2 < 2; k2++)
        free(q[k2]), free(k[k2]), free(v[k2]);
}

/* ---- paged ---- */
typedef struct fzd_hp {
    attn_tensor tq[2], tc[2], tqsl, tsl, tbt[2];
    attn_params p;
    attn_dtype qdt;
    int64_t Tq, H, D;
} fzd_hp;
static attn_status fzd_hp_call(void *state, int t, int poisoned, void *out, float *lse) {
    fzd_hp *s = (fzd_hp *)state;
    const int64_t os[3] = {s->Tq, s->H, s->D}, ls[2] = {s->H, s->Tq};
    attn_tensor to = attn_tensor_make(out, s->qdt, 3, os), tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
    return t < 0 ? attn_ref_paged_attention(&s->tq[poisoned], &s->tc[poisoned], &s->tqsl, &s->tsl, &s->tbt[poisoned],
                                            &s->p, &to, &tl)
                 : attn_paged_attention(fzd_tables[t].ctx, &s->tq[poisoned], &s->tc[poisoned], &s->tqsl, &s->tsl,
                                        &s->tbt[poisoned], &s->p, &to, &tl);
}
static void fzd_hidden_paged(fzd_rd *r, int kind) {
    static const int64_t qls[8] = {0, 1, 1, 2, 3, 4, 7, 1}, kls[8] = {0, 1, 3, 5, 8, 17, 33, 64};
    static const int64_t ds[8] = {1, 2, 4, 8, 16, 32, 5, 64};
    const uint8_t sh = fzd_u8(r), db = fzd_u8(r);
    const int64_t R = 1 + sh % 3, H = 1 + ((sh >> 2) & 3), Hkv = (sh & 0x10) ? 1 : H, D = ds[db & 7];
    const int64_t xq = (sh >> 5) & 1, xcols = 1 + (sh >> 6);
    const attn_dtype qdt = fzd_float_dtypes[(db >> 3) & 3];
    int64_t ql[3], kl[3], maxk = 0;
    int32_t qsl[4] = {0}, sl[3];
    for (int64_t i = 0; i < R; i++) {
        const uint8_t b = fzd_u8(r);
        ql[i] = qls[b & 7], kl[i] = kls[(b >> 3) & 7], sl[i] = (int32_t)kl[i];
        qsl[i + 1] = qsl[i] + (int32_t)ql[i], maxk = kl[i] > maxk ? kl[i] : maxk;
    }
    fzd_values vm = fzd_value_mode(r);
    fzd_opts o;
    fzd_say("paged: R=%lld H=%lld Hkv=%lld D=%lld q=%s q rows past the last query_start_loc %lld ", (long long)R,
            (long long)H, (long long)Hkv, (long long)D, attn_dtype_name(qdt), (long long)xq);
    fzd_decode_opts(r, &o, H, D, 0, 1);
    o.p.causal = (fzd_u8(r) & 1) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
    th_rng g;
    th_rng_seed(&g, fzd_seed(r));
    static const int64_t bss[8] = {1, 2, 3, 4, 8, 16, 5, 16};
    const int64_t bs = bss[((r->i < r->n ? r->p[r->i] : 0) >> 3) & 7], cols = (maxk + bs - 1) / bs + xcols;
    fzd_cache c;
    fzd_cache_decode(r, &g, &c, &vm, Hkv, D, cols);
    if (!c.scales_ok)
        c.k_scale = c.v_scale = 1.0f, c.scales_ok = 1; /* (the paged target checks refusals) */
    o.p.k_scale = c.k_scale, o.p.v_scale = c.v_scale;
    int32_t *bt[2] = {(int32_t *)fzd_alloc(ATTN_DTYPE_I32, R * cols), (int32_t *)fzd_alloc(ATTN_DTYPE_I32, R * cols)};
    static const int32_t bad_ids[4] = {9001, -1, INT32_MAX, INT32_MIN};
    uint8_t *seen = (uint8_t *)calloc((size_t)(c.NB * c.BS), 1);
    if (!seen)
        abort();
    for (int64_t i = 0; i < R; i++)
        for (int64_t col = 0; col < cols; col++) {
            const int64_t used = (kl[i] + c.BS - 1) / c.BS;
            bt[0][i * cols + col] = (int32_t)th_rng_int(&g, 0, c.NB - 1);
            bt[1][i * cols + col] = col < used ? bt[0][i * cols + col] : bad_ids[th_rng_int(&g, 0, 3)];
        }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < kl[i]; j++) {
            int vis = 0;
            for (int64_t a = 0; a < ql[i] && !vis; a++)
                vis = fzd_visible(&o.p, ql[i], kl[i], a, j);
            if (vis)
                seen[(int64_t)bt[0][i * cols + j / c.BS] * c.BS + j % c.BS] = 1;
        }
    const int64_t Tq = qsl[R] + xq, nq = Tq * H * D;
    void *q[2] = {fzd_alloc(qdt, nq), fzd_alloc(qdt, nq)};
    fzd_fill(&g, &vm, vm.qexp, q[0], qdt, nq);
    memcpy(q[1], q[0], fzd_bytes(qdt, nq));
    fzd_poison_row(&g, q[1], qdt, qsl[R] * H * D, xq * H * D, kind);
    void *cp = fzd_alloc(c.cdt, c.n);
    memcpy(cp, c.data, fzd_bytes(c.cdt, c.n));
    int64_t hidden = 0;
    for (int64_t slot = 0; slot < c.NB * c.BS; slot++) {
        if (seen[slot])
            continue;
        hidden++;
        for (int kv = 0; kv < 2; kv++)
            for (int64_t g2 = 0; g2 < Hkv; g2++)
                for (int64_t d = 0; d < D; d++) {
                    const int64_t at = fzd_cache_index(&c, kv, slot, g2, d);
                    if (fzd_is_fp8(c.cdt))
                        ((uint8_t *)cp)[at] = fzd_poison_fp8(&g, c.cdt, kind);
                    else
                        th_set(cp, c.cdt, (size_t)at, fzd_poison(&g, kind));
                }
    }
    for (int64_t i = 0; i < R; i++)
        fzd_say("req%lld(q %lld, k %lld) ", (long long)i, (long long)ql[i], (long long)kl[i]);
    fzd_say("causal=%d hidden slots=%lld", (int)o.p.causal, (long long)hidden);
    fzd_kind = 128 + (int)c.cdt + 8 * (hidden > 0) + 16 * (int)o.p.causal;
    fzd_hp s;
    s.p = o.p, s.qdt = qdt, s.Tq = Tq, s.H = H, s.D = D;
    const int64_t qs[3] = {Tq, H, D}, n1[1] = {R + 1}, n2[1] = {R}, bts[2] = {R, cols};
    for (int k2 = 0; k2 < 2; k2++) {
        s.tq[k2] = attn_tensor_make(q[k2], qdt, 3, qs), s.tbt[k2] = attn_tensor_make(bt[k2], ATTN_DTYPE_I32, 2, bts);
        s.tc[k2] = c.t, s.tc[k2].data = k2 ? cp : c.data;
    }
    s.tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, n1), s.tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, n2);
    fzd_hidden_compare("paged attention", fzd_hp_call, &s, qdt, nq, H * Tq);
    free(q[0]), free(q[1]), free(bt[0]), free(bt[1]), free(seen), free(cp), free(c.data);
}

static int fzd_hidden_run(const uint8_t *data, size_t size) {
    fzd_begin("hidden");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    const uint8_t b = fzd_u8(&r);
    const int kind = (b >> 2) % 6; /* NaN, +inf, -inf, 1e30, -1e30, a mix */
    fzd_say("poison=%s ", (const char *[]){"NaN", "+inf", "-inf", "1e30", "-1e30", "mixed"}[kind]);
    switch (b % 3) {
    case 0:
        fzd_hidden_dense(&r, kind);
        break;
    case 1:
        fzd_hidden_varlen(&r, kind);
        break;
    default:
        fzd_hidden_paged(&r, kind);
        break;
    }
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_hidden_run(data, size);
}
#endif
