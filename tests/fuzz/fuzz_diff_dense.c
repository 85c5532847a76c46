/*
 * fuzz_diff_dense.c — differential target of attn_forward (fuzz_diff.h): a small dense problem (both layouts,
 * GQA/MQA, head sizes 1..256, f32/f16/bf16 q and k/v, causal top-left/bottom-right, windows, soft-cap, ALiBi,
 * sinks, and one of: no mask, a boolean keep-mask [Sq, Sk], a key-padding mask [B, Sk], an additive mask
 * [Sq, Sk] with 0 / -0.5 / 1 / -inf, each also as runs of hidden keys shared by every row) on every usable kernel
 * table against attn_ref_forward: out and LSE within the tolerance of the dtype and table, every output element
 * written, the same status when the oracle refuses.
 */
#include "fuzz_diff.h"

static int fzd_dense_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_dense");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    fzd_dense c;
    fzd_dense_decode(&r, &c, 1, 1, 1 << 17);
    /* masks: the value fill continues from the problem's generator */
    const uint8_t mb = fzd_u8(&r);
    const int mask_kind = mb % 4;
    /* bit 3: runs of 1..80 hidden or visible keys, one pattern for every query row (a [1, Sk] mask, per batch row for
     * key padding), so whole kv tiles and tile ends are hidden (the driver skips them) */
    const int runs = (mb & 8) != 0;
    int64_t run_left = 0, run_u = 0;
    attn_tensor tm;
    void *mask = NULL;
    double add_mag = 0.0;
    int add_exact = 1;
    if (mask_kind == 1 || mask_kind == 3) { /* keep-mask [Sq, Sk] bool, additive [Sq, Sk] f32 */
        const int64_t ms[2] = {runs ? 1 : c.Sq, c.Sk};
        const attn_dtype mdt = mask_kind == 1 ? ATTN_DTYPE_BOOL : ATTN_DTYPE_F32;
        mask = fzd_alloc(mdt, ms[0] * c.Sk);
        static const float addv[4] = {0.0f, -0.5f, 1.0f, -INFINITY};
        for (int64_t i = 0; i < ms[0] * c.Sk; i++) {
            if (runs && run_left-- == 0)
                run_left = th_rng_int(&c.g, 0, 79), run_u = th_rng_int(&c.g, 0, 1) ? th_rng_int(&c.g, 0, 2) : 3;
            const int64_t u = runs ? run_u : th_rng_int(&c.g, 0, 3);
            if (mdt == ATTN_DTYPE_BOOL)
                ((uint8_t *)mask)[i] = u != 0;
            else {
                const float a = (mb & 4) ? addv[u] : (u == 3 ? -INFINITY : 0.0f); /* bit 2: finite values too */
                ((float *)mask)[i] = a;
                if (isfinite(a) && fabs(a) > add_mag)
                    add_mag = fabs(a);
                if (isfinite(a) && a != 0.0f)
                    add_exact = 0;
            }
        }
        tm = attn_tensor_make(mask, mdt, 2, ms);
        if (mdt == ATTN_DTYPE_BOOL)
            c.o.p.mask = &tm;
        else
            c.o.p.additive_mask = &tm;
    } else if (mask_kind == 2) { /* key padding [B, Sk] u8 */
        const int64_t ms[2] = {c.B, c.Sk};
        mask = fzd_alloc(ATTN_DTYPE_U8, c.B * c.Sk);
        for (int64_t i = 0; i < c.B * c.Sk; i++) {
            if (runs && run_left-- == 0)
                run_left = th_rng_int(&c.g, 0, 79), run_u = th_rng_int(&c.g, 0, 1);
            ((uint8_t *)mask)[i] = runs ? (uint8_t)run_u : th_rng_int(&c.g, 0, 3) != 0;
        }
        tm = attn_tensor_make(mask, ATTN_DTYPE_U8, 2, ms);
        c.o.p.key_padding_mask = &tm;
    }
    fzd_say("mask=%s%s ", (const char *[]){"none", "bool[Sq,Sk]", "key_padding[B,Sk]", "additive[Sq,Sk]"}[mask_kind],
            runs && mask_kind ? " runs" : "");
    const int exact = fzd_dense_exact(&c) && add_exact;
    fzd_say("exact_logits=%d", exact);
    fzd_kind = 1 + exact + 2 * mask_kind + 8 * (c.qdt != ATTN_DTYPE_F32) + 16 * (c.vm.integer);

    void *ro;
    float *rl;
    attn_tensor tro, trl;
    fzd_dense_outputs(&c, &ro, &rl, &tro, &trl);
    const attn_status rst = attn_ref_forward((attn_layout)c.layout, &c.tq, &c.tk, &c.tv, &c.o.p, &tro, &trl);
    attn_clear_error();
    for (int t = 0; t < fzd_ntables; t++) {
        void *fo;
        float *fl;
        attn_tensor tfo, tfl;
        fzd_dense_outputs(&c, &fo, &fl, &tfo, &tfl);
        const attn_status st =
            attn_forward(fzd_tables[t].ctx, (attn_layout)c.layout, &c.tq, &c.tk, &c.tv, &c.o.p, &tfo, &tfl);
        const char *isa = fzd_tables[t].name;
        if (rst != ATTN_STATUS_OK) { /* the oracle refused: the fast entry must refuse too and write nothing */
            if (st != rst)
                fzd_fail("attn_forward on %s returned %s, the oracle %s", isa, attn_status_string(st),
                         attn_status_string(rst));
            fzd_check_unchanged("attn_forward out after a refusal", isa, fo, ro, fzd_bytes(c.qdt, c.nout));
        } else {
            fzd_check_status("attn_forward", isa, st);
            const fzd_tol tol = fzd_dense_tol(&c, &fzd_tables[t], add_mag, exact);
            fzd_check_out("attn_forward out", isa, fo, ro, c.qdt, c.nout, &tol);
            fzd_check_lse("attn_forward", isa, fl, rl, c.nlse, &tol);
        }
        attn_clear_error();
        free(fo), free(fl);
    }
    free(ro), free(rl), free(mask);
    fzd_dense_free(&c);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_dense_run(data, size);
}
#endif
