/*
 * test_masks.c — diffusion masks against the oracle: explicit keep-masks in every broadcast shape
 * ([B,H,Sq,Sk], [B,1,Sq,Sk], [1,1,Sq,Sk], [Sq,Sk]) and key-padding masks, combined with causal and window;
 * fully masked rows give 0 / LSE −inf; cross-attention key padding keeps every query row; the
 * self-attention unpad → packed → pad route (attn_forward_padded) equals the oracle with the equivalent
 * explicit mask (compacted-index causal/window), zeroes padded rows, is thread-count invariant, and
 * rejects every bad input without writing.
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

typedef struct mt_bufs {
    void *q, *k, *v, *o, *or_, *l, *lr;
    attn_tensor tq, tk, tv, to, tor, tl, tlr;
} mt_bufs;

/* BSND buffers: q [B,Sq,H,D], k/v [B,Sk,Hk,D], out [B,Sq,H,D], lse [B,H,Sq]. */
static void mt_alloc(mt_bufs *b, th_rng *rng, attn_dtype dt, int64_t B, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk,
                     int64_t D) {
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, Sq};
    const size_t nq = (size_t)(B * Sq * H * D), nk = (size_t)(B * Sk * Hk * D), nl = (size_t)(B * H * Sq);
    b->q = th_alloc_fill(rng, dt, nq, -2, 2);
    b->k = th_alloc_fill(rng, dt, nk, -2, 2);
    b->v = th_alloc_fill(rng, dt, nk, -1, 1);
    b->o = th_alloc_nan(dt, nq);
    b->or_ = th_alloc_nan(dt, nq);
    b->l = th_alloc_nan(ATTN_DTYPE_F32, nl);
    b->lr = th_alloc_nan(ATTN_DTYPE_F32, nl);
    b->tq = attn_tensor_make(b->q, dt, 4, qs);
    b->tk = attn_tensor_make(b->k, dt, 4, ks);
    b->tv = attn_tensor_make(b->v, dt, 4, ks);
    b->to = attn_tensor_make(b->o, dt, 4, qs);
    b->tor = attn_tensor_make(b->or_, dt, 4, qs);
    b->tl = attn_tensor_make(b->l, ATTN_DTYPE_F32, 3, ls);
    b->tlr = attn_tensor_make(b->lr, ATTN_DTYPE_F32, 3, ls);
}

static void mt_free(mt_bufs *b) {
    free(b->q), free(b->k), free(b->v), free(b->o), free(b->or_), free(b->l), free(b->lr);
}

static void mt_expect_close(mt_bufs *b, attn_dtype dt, const char *what) {
    size_t bad = 0, bad_l = 0;
    const double err = th_compare(&b->to, &b->tor, th_tol_for(dt), 1.0, &bad);
    const double err_l = th_compare_lse(&b->tl, &b->tlr, th_tol_for(dt), &bad_l);
    if (bad || bad_l)
        print_error("%s (%s): %zu out / %zu lse elements out of tolerance, max err %g / %g\n", what,
                    attn_dtype_name(dt), bad, bad_l, err, err_l);
    assert_int_equal(bad, 0);
    assert_int_equal(bad_l, 0);
}

/* Rows whose LSE is −inf must be exactly zero in out. Returns how many (row, head) pairs were empty. */
static int64_t mt_check_empty_rows(const mt_bufs *b) {
    const attn_tensor *o = &b->to, *l = &b->tl;
    int64_t empty = 0;
    for (int64_t bb = 0; bb < o->shape[0]; bb++)
        for (int64_t s = 0; s < o->shape[1]; s++)
            for (int64_t h = 0; h < o->shape[2]; h++) {
                int64_t li[3] = {bb, h, s};
                const float lse = ((const float *)l->data)[th_offset(l, li)];
                if (!(isinf(lse) && lse < 0))
                    continue;
                empty++;
                for (int64_t d = 0; d < o->shape[3]; d++) {
                    int64_t oi[4] = {bb, s, h, d};
                    const float x = th_get(o->data, o->dtype, (size_t)th_offset(o, oi));
                    assert_true(x == 0.0f);
                }
            }
    return empty;
}

/* ------------------------------------------------------------------------------------------- */

static void test_explicit_mask_shapes(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 11);
    const int64_t B = 2, H = 4, Hk = 2;
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const int64_t heads[5] = {64, 96, 128, 192, 256};
    int64_t total_empty = 0;
    for (int kind = 0; kind < 5; kind++) {              /* 0 [B,H,Sq,Sk] 1 [B,1,..] 2 [1,1,..] 3 [Sq,Sk] 4 kpm */
        for (int variant = 0; variant < 3; variant++) { /* 0 none, 1 causal BR, 2 causal + window */
            const attn_dtype dt = dts[(kind + variant) % 3];
            const int64_t D = heads[(kind * 3 + variant) % 5];
            const int64_t Sq = 37 + 13 * variant, Sk = variant == 0 ? 140 : 90 + 40 * kind;
            mt_bufs b;
            mt_alloc(&b, &rng, dt, B, Sq, Sk, H, Hk, D);
            int64_t ms[4];
            int32_t nd = 4;
            if (kind == 0)
                ms[0] = B, ms[1] = H, ms[2] = Sq, ms[3] = Sk;
            else if (kind == 1)
                ms[0] = B, ms[1] = 1, ms[2] = Sq, ms[3] = Sk;
            else if (kind == 2)
                ms[0] = 1, ms[1] = 1, ms[2] = Sq, ms[3] = Sk;
            else if (kind == 3)
                nd = 2, ms[0] = Sq, ms[1] = Sk;
            else
                nd = 2, ms[0] = B, ms[1] = Sk;
            size_t n = 1;
            for (int i = 0; i < nd; i++)
                n *= (size_t)ms[i];
            unsigned char *m = malloc(n);
            for (size_t i = 0; i < n; i++)
                m[i] = th_rng_uniform(&rng) < 0.7;
            if (kind == 3)
                memset(m + 5 * Sk, 0, (size_t)Sk); /* one fully masked row */
            if (kind == 4)
                memset(m + Sk, 0, (size_t)Sk); /* batch row 1 has no valid key at all */
            attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, nd, ms);
            attn_params p;
            attn_params_init(&p);
            if (kind == 4)
                p.key_padding_mask = &tm;
            else
                p.mask = &tm;
            if (variant >= 1)
                p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            if (variant == 2)
                p.window_left = 17, p.window_right = 0;
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl),
                             ATTN_STATUS_OK);
            assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.tor, &b.tlr),
                             ATTN_STATUS_OK);
            char what[96];
            snprintf(what, sizeof what, "mask kind %d variant %d D=%lld", kind, variant, (long long)D);
            mt_expect_close(&b, dt, what);
            total_empty += mt_check_empty_rows(&b);
            free(m);
            mt_free(&b);
        }
    }
    assert_true(total_empty > 0); /* the fully masked rows were exercised */
    attn_ctx_destroy(ctx);
}

/* Cross-attention (Sq != Sk): a key padding mask removes keys only; every query row is computed and equals
 * the oracle with the explicit [B, 1, Sq, Sk] mask whose every row is the key mask (vllm-omni masked varlen, cross-attention). */
static void test_cross_attention_key_padding(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 12);
    const int64_t B = 2, Sq = 4, Sk = 4, H = 2, D = 64;
    for (int round = 0; round < 2; round++) {
        const int64_t sq = round == 0 ? Sq : 77, sk = round == 0 ? Sk : 300;
        mt_bufs b;
        mt_alloc(&b, &rng, ATTN_DTYPE_F32, B, sq, sk, H, H, D);
        int64_t ks[2] = {B, sk}, es[4] = {B, 1, sq, sk};
        unsigned char *kpm = calloc((size_t)(B * sk), 1), *em = malloc((size_t)(B * sq * sk));
        /* worked example of A.4: [[T,T,F,F],[T,T,T,F]] (extended with random holes for round 1) */
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t j = 0; j < sk; j++)
                kpm[bb * sk + j] = round == 0 ? (j < 2 + bb) : th_rng_uniform(&rng) < 0.6;
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t i = 0; i < sq; i++)
                memcpy(em + (bb * sq + i) * sk, kpm + bb * sk, (size_t)sk);
        attn_tensor tk = attn_tensor_make(kpm, ATTN_DTYPE_U8, 2, ks), te = attn_tensor_make(em, ATTN_DTYPE_U8, 4, es);
        attn_params p, pe;
        attn_params_init(&p);
        attn_params_init(&pe);
        p.key_padding_mask = &tk;
        pe.mask = &te;
        assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl), ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &pe, &b.tor, &b.tlr), ATTN_STATUS_OK);
        mt_expect_close(&b, ATTN_DTYPE_F32, "cross-attention key padding");
        assert_int_equal(mt_check_empty_rows(&b), 0); /* every query row kept */
        free(kpm), free(em);
        mt_free(&b);
    }
    attn_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------------------------- */
/* Self-attention padded route                                                                   */

/* The explicit mask equivalent to A.3: keep(i, j) iff both tokens are valid and the compacted indices
 * c(i), c(j) pass causal (c(j) <= c(i)) and window (c(i) − wl <= c(j) <= c(i) + wr). */
static unsigned char *mt_padded_mask(const unsigned char *kpm, int64_t B, int64_t S, int causal, int64_t wl,
                                     int64_t wr) {
    unsigned char *m = calloc((size_t)(B * S * S), 1);
    int64_t *c = malloc((size_t)S * sizeof(int64_t));
    for (int64_t b = 0; b < B; b++) {
        int64_t n = 0;
        for (int64_t s = 0; s < S; s++)
            c[s] = kpm[b * S + s] ? n++ : -1;
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < S; j++) {
                if (c[i] < 0 || c[j] < 0)
                    continue;
                if (causal && c[j] > c[i])
                    continue;
                if (wl >= 0 && c[j] < c[i] - wl)
                    continue;
                if (wr >= 0 && c[j] > c[i] + wr)
                    continue;
                m[(b * S + i) * S + j] = 1;
            }
    }
    free(c);
    return m;
}

static void test_self_attention_padded(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 13);
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t heads[5] = {64, 96, 128, 192, 256};
    for (int round = 0; round < 6; round++) {
        /* emulated (th_test_emulated): 2 sequences of up to 350 tokens instead of 3 of up to 535 */
        const int emu = th_test_emulated();
        const int64_t B = round == 0 || emu ? 2 : 3, S = round == 0 ? 4 : 50 + (emu ? 60 : 97) * round, H = 4,
                      Hk = round % 2 ? 1 : 4;
        const int64_t D = heads[round % 5];
        const attn_dtype dt = dts[round % 3];
        const int causal = round % 3 == 1;
        const int64_t wl = round == 5 ? 40 : -1, wr = round == 5 ? 3 : -1;
        mt_bufs b;
        mt_alloc(&b, &rng, dt, B, S, S, H, Hk, D);
        unsigned char *kpm = malloc((size_t)(B * S));
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t s = 0; s < S; s++) {
                if (round == 0)
                    kpm[bb * S + s] = s < 2 + bb; /* A.3 worked example [[T,T,F,F],[T,T,T,F]] */
                else if (bb == 0)
                    kpm[bb * S + s] = !(s >= S / 3 && s < S / 2); /* interior hole (Qwen-Image) */
                else if (bb == 1)
                    kpm[bb * S + s] = th_rng_uniform(&rng) < 0.5; /* scattered holes */
                else
                    kpm[bb * S + s] = round == 2 ? 0 : 1; /* all padded / all valid */
            }
        int64_t ks[2] = {B, S}, es[4] = {B, 1, S, S};
        unsigned char *em = mt_padded_mask(kpm, B, S, causal, wl, wr);
        attn_tensor tk = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, ks),
                    te = attn_tensor_make(em, ATTN_DTYPE_BOOL, 4, es);
        attn_params p, pe;
        attn_params_init(&p);
        p.causal = causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        p.window_left = (int32_t)wl, p.window_right = (int32_t)wr;
        attn_params_init(&pe);
        pe.mask = &te;
        size_t ws = 0;
        assert_int_equal(attn_forward_padded_workspace_size(B, S, &ws), ATTN_STATUS_OK);
        assert_int_equal(ws, (size_t)(B * 8 + B * S * 4));
        void *w = malloc(ws);
        assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &b.to, &b.tl, w, ws),
                         ATTN_STATUS_OK);
        assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &pe, &b.tor, &b.tlr), ATTN_STATUS_OK);
        char what[64];
        snprintf(what, sizeof what, "padded round %d D=%lld", round, (long long)D);
        mt_expect_close(&b, dt, what);
        /* padded query rows are exactly 0 with LSE −inf (and only they are empty) */
        int64_t padded = 0;
        for (int64_t i = 0; i < B * S; i++)
            padded += !kpm[i];
        assert_int_equal(mt_check_empty_rows(&b), padded * H);

        /* the oracle twin of the padded route agrees too */
        assert_int_equal(attn_ref_forward_padded(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &b.tor, &b.tlr, w, ws),
                         ATTN_STATUS_OK);
        mt_expect_close(&b, dt, what);

        /* bitwise identical for 1 and 2 threads */
        void *o2 = th_alloc_nan(dt, (size_t)(B * S * H * D));
        attn_tensor to2 = b.to;
        to2.data = o2;
        assert_int_equal(attn_ctx_set_num_threads(ctx, round % 2 ? 1 : 2), ATTN_STATUS_OK);
        assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, &p, &to2, NULL, w, ws),
                         ATTN_STATUS_OK);
        assert_true(th_bitwise_equal(&b.to, &to2));
        free(o2), free(w), free(kpm), free(em);
        mt_free(&b);
    }
    attn_ctx_destroy(ctx);
}

static void test_padded_bnsd(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 14);
    const int64_t B = 2, S = 70, H = 3, D = 128;
    int64_t s4[4] = {B, H, S, D}, ls[3] = {B, H, S}, ks[2] = {B, S}, es[4] = {B, 1, S, S};
    const size_t n = (size_t)(B * H * S * D);
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -2, 2), *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -2, 2);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, n, -1, 1);
    float *o = th_alloc_nan(ATTN_DTYPE_F32, n), *orf = th_alloc_nan(ATTN_DTYPE_F32, n);
    float *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * S)),
          *lr = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * S));
    unsigned char kpm[2 * 70];
    for (int i = 0; i < 2 * 70; i++)
        kpm[i] = (i % 7) != 3;
    unsigned char *em = mt_padded_mask(kpm, B, S, 1, -1, -1);
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, s4), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, s4);
    attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, s4), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, s4);
    attn_tensor tor = attn_tensor_make(orf, ATTN_DTYPE_F32, 4, s4), tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls);
    attn_tensor tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 3, ls), tkp = attn_tensor_make(kpm, ATTN_DTYPE_U8, 2, ks);
    attn_tensor te = attn_tensor_make(em, ATTN_DTYPE_U8, 4, es);
    attn_params p, pe;
    attn_params_init(&p);
    attn_params_init(&pe);
    p.causal = ATTN_CAUSAL_TOP_LEFT;
    pe.mask = &te;
    size_t ws;
    assert_int_equal(attn_forward_padded_workspace_size(B, S, &ws), ATTN_STATUS_OK);
    void *w = malloc(ws);
    assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BNSD, &tq, &tk, &tv, &tkp, &p, &to, &tl, w, ws),
                     ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BNSD, &tq, &tk, &tv, &pe, &tor, &tlr), ATTN_STATUS_OK);
    size_t bad;
    th_compare(&to, &tor, th_tol_for(ATTN_DTYPE_F32), 1.0, &bad);
    assert_int_equal(bad, 0);
    th_compare_lse(&tl, &tlr, th_tol_for(ATTN_DTYPE_F32), &bad);
    assert_int_equal(bad, 0);
    free(q), free(k), free(v), free(o), free(orf), free(l), free(lr), free(em), free(w);
    attn_ctx_destroy(ctx);
}

static void test_padded_errors(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    th_rng rng;
    th_rng_seed(&rng, 15);
    const int64_t B = 2, S = 8, H = 2, D = 64;
    mt_bufs b;
    mt_alloc(&b, &rng, ATTN_DTYPE_F32, B, S, S, H, H, D);
    mt_bufs c; /* cross shape: Sk != Sq */
    mt_alloc(&c, &rng, ATTN_DTYPE_F32, B, S, S + 1, H, H, D);
    unsigned char kpm[16];
    memset(kpm, 1, sizeof kpm);
    int64_t ks[2] = {B, S}, bad_ks[2] = {B, S + 1}, ks1[1] = {B * S};
    attn_tensor tk = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, ks);
    attn_tensor tk_bad = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, bad_ks);
    attn_tensor tk_f = attn_tensor_make(kpm, ATTN_DTYPE_F32, 2, ks);
    attn_tensor tk_1 = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 1, ks1);
    size_t ws;
    assert_int_equal(attn_forward_padded_workspace_size(B, S, &ws), ATTN_STATUS_OK);
    void *w = malloc(ws);
    attn_params p;
    attn_params_init(&p);
    memset(b.o, 0x7f, (size_t)(B * S * H * D) * 4);
    struct {
        const attn_tensor *k, *v, *kpm;
        const attn_params *p;
        size_t ws;
        attn_status st;
        const char *msg;
    } cases[] = {
        {&c.tk, &c.tv, &tk, NULL, ws, ATTN_STATUS_INVALID_ARGUMENT, "the padded route is self-attention"},
        {&b.tk, &b.tv, NULL, NULL, ws, ATTN_STATUS_INVALID_ARGUMENT, "key_padding_mask: is NULL"},
        {&b.tk, &b.tv, &tk_bad, NULL, ws, ATTN_STATUS_INVALID_ARGUMENT, "key_padding_mask"},
        {&b.tk, &b.tv, &tk_f, NULL, ws, ATTN_STATUS_INVALID_ARGUMENT, "expected bool or u8"},
        {&b.tk, &b.tv, &tk_1, NULL, ws, ATTN_STATUS_INVALID_ARGUMENT, "key_padding_mask"},
        {&b.tk, &b.tv, &tk, NULL, ws - 1, ATTN_STATUS_WORKSPACE_TOO_SMALL, "workspace_size"},
        {&b.tk, &b.tv, &tk, &p, ws, ATTN_STATUS_UNSUPPORTED, "params.key_padding_mask"},
    };
    p.key_padding_mask = &tk; /* the key padding mask is the entry's argument, not a params field */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_status st = attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, cases[i].k, cases[i].v, cases[i].kpm,
                                             cases[i].p, &b.to, NULL, w, cases[i].ws);
        if (st != cases[i].st || !strstr(attn_last_error(), cases[i].msg))
            print_error("case %zu: status %d, message '%s'\n", i, (int)st, attn_last_error());
        assert_int_equal(st, cases[i].st);
        assert_non_null(strstr(attn_last_error(), cases[i].msg));
    }
    assert_int_equal(attn_forward_padded(NULL, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, NULL, &b.to, NULL, w, ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_forward_padded(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &tk, NULL, &b.to, NULL, NULL, ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_forward_padded_workspace_size(-1, S, &ws), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_forward_padded_workspace_size(INT64_MAX / 2, 8, &ws), ATTN_STATUS_OVERFLOW);
    for (size_t i = 0; i < (size_t)(B * S * H * D); i++) { /* nothing written */
        uint32_t u;
        memcpy(&u, (float *)b.o + i, 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    free(w);
    mt_free(&b);
    mt_free(&c);
    attn_ctx_destroy(ctx);
}

/* Key visibility of the hidden-tile cases (ht_*): per batch row b a key pattern with whole hidden kv tiles and
 * partly hidden tiles whose visible keys start and end at odd offsets; kinds 3 and 4 also give each (head, row)
 * its own window of keys. */
static int ht_pattern(int64_t b, int64_t j, int64_t Sk) {
    if (b == 0)
        return j < 70 || (j >= 201 && j < 211);
    return (j >= 3 && j < 5) || (j >= 131 && j < 140) || j == Sk - 1;
}

static int ht_visible(int kind, int64_t b, int64_t h, int64_t i, int64_t j, int64_t Sq, int64_t Sk) {
    if (kind == 3) {
        const int64_t x = (h * 53 + i * 7 + b * 11) % Sk;
        return ht_pattern(b, j, Sk) && j >= x && j < x + 37;
    }
    if (kind == 4) {
        const int64_t x = (h * 31 + i * 13) % Sk;
        return j >= x && j < x + 50;
    }
    if (kind == 5) { /* key padding, bottom-right causal, window_left 40 */
        const int64_t pos = Sk - Sq + i;
        return ht_pattern(b, j, Sk) && j <= pos && j >= pos - 40;
    }
    return ht_pattern(b, j, Sk);
}

/* Masks that hide whole kv tiles and the ends of tiles (key padding, keep and additive masks broadcast per key or per
 * row, with causal and window): the driver skips the keys no row of a block sees (attn_mask_tile_span). Poisoning
 * every key hidden from all rows with NaN / ±Inf in K and V changes no bit of out or LSE; the result is within
 * tolerance of the oracle and bitwise the same on 1 and 3 threads; poisoning a key some row sees shows in out. */
static void test_hidden_tiles(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const int64_t B = 2, H = 4, Hk = 2, D = 64;
    const int64_t shapes[4][2] = {{1, 300}, {3, 300}, {40, 300}, {100, 257}};
    const attn_dtype dts[2] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16};
    int64_t poisoned_keys = 0, shown = 0;
    th_rng rng;
    th_rng_seed(&rng, 77);
    for (int si = 0; si < 4; si++)
        for (int kind = 0; kind < 6; kind++)
            for (int di = 0; di < 2; di++) {
                const int64_t Sq = shapes[si][0], Sk = shapes[si][1];
                const attn_dtype dt = dts[di];
                mt_bufs b;
                mt_alloc(&b, &rng, dt, B, Sq, Sk, H, Hk, D);
                const size_t nkv = (size_t)(B * Sk * Hk * D), es = attn_dtype_size(dt);
                const size_t nm = (size_t)(B * H * Sq * Sk);
                uint8_t *keep = (uint8_t *)malloc(nm);
                uint16_t *bias = (uint16_t *)malloc(nm * sizeof(uint16_t));
                float *bias32 = (float *)malloc((size_t)(B * Sk) * sizeof(float));
                uint8_t *hidden = (uint8_t *)malloc((size_t)(B * Sk)), *pad = (uint8_t *)malloc((size_t)(B * Sk));
                for (int64_t bb = 0; bb < B; bb++)
                    for (int64_t j = 0; j < Sk; j++) {
                        hidden[bb * Sk + j] = 1;
                        pad[bb * Sk + j] = (uint8_t)ht_pattern(bb, j, Sk);
                        bias32[bb * Sk + j] = ht_pattern(bb, j, Sk) ? (float)th_rng_range(&rng, -1, 1) : -INFINITY;
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t i = 0; i < Sq; i++) {
                                const int vis = ht_visible(kind, bb, h, i, j, Sq, Sk);
                                const size_t e = (size_t)(((bb * H + h) * Sq + i) * Sk + j);
                                keep[e] = (uint8_t)vis;
                                th_set(bias, ATTN_DTYPE_BF16, e, vis ? (float)th_rng_range(&rng, -2, 2) : -INFINITY);
                                hidden[bb * Sk + j] &= (uint8_t)!vis;
                            }
                    }
                attn_params p;
                attn_params_init(&p);
                attn_tensor tm;
                if (kind == 0 || kind == 5) { /* key padding [B, Sk] */
                    tm = attn_tensor_make(pad, ATTN_DTYPE_BOOL, 2, (const int64_t[]){B, Sk});
                    p.key_padding_mask = &tm;
                } else if (kind == 1) { /* keep-mask [B, 1, 1, Sk] */
                    tm = attn_tensor_make(pad, ATTN_DTYPE_BOOL, 4, (const int64_t[]){B, 1, 1, Sk});
                    p.mask = &tm;
                } else if (kind == 2) { /* additive f32 [B, 1, 1, Sk] */
                    tm = attn_tensor_make(bias32, ATTN_DTYPE_F32, 4, (const int64_t[]){B, 1, 1, Sk});
                    p.additive_mask = &tm;
                } else if (kind == 3) { /* keep-mask per row [B, H, Sq, Sk] */
                    tm = attn_tensor_make(keep, ATTN_DTYPE_BOOL, 4, (const int64_t[]){B, H, Sq, Sk});
                    p.mask = &tm;
                } else { /* additive bf16 per row [H, Sq, Sk], broadcast over the batch */
                    tm = attn_tensor_make(bias, ATTN_DTYPE_BF16, 3, (const int64_t[]){H, Sq, Sk});
                    p.additive_mask = &tm;
                }
                if (kind == 5)
                    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT, p.window_left = 40;
                assert_int_equal(attn_ctx_set_num_threads(ctx, 1), ATTN_STATUS_OK);
                assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl),
                                 ATTN_STATUS_OK);
                assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.tor, &b.tlr),
                                 ATTN_STATUS_OK);
                mt_expect_close(&b, dt, "hidden tiles");
                /* the clean result, then 3 threads and poisoned hidden keys: the same bits */
                void *o1 = malloc((size_t)(B * Sq * H * D) * es), *l1 = malloc((size_t)(B * H * Sq) * sizeof(float));
                memcpy(o1, b.o, (size_t)(B * Sq * H * D) * es), memcpy(l1, b.l, (size_t)(B * H * Sq) * sizeof(float));
                void *k0 = b.k, *v0 = b.v;
                void *k2 = malloc(nkv * es), *v2 = malloc(nkv * es);
                memcpy(k2, k0, nkv * es), memcpy(v2, v0, nkv * es);
                const float poisons[3] = {NAN, INFINITY, -INFINITY};
                for (int64_t bb = 0; bb < B; bb++)
                    for (int64_t j = 0; j < Sk; j++) {
                        if (!hidden[bb * Sk + j])
                            continue;
                        poisoned_keys++;
                        for (int64_t e = 0; e < Hk * D; e++) {
                            th_set(k2, dt, (size_t)((bb * Sk + j) * Hk * D + e), poisons[(j + e) % 3]);
                            th_set(v2, dt, (size_t)((bb * Sk + j) * Hk * D + e), poisons[(j + e + 1) % 3]);
                        }
                    }
                b.tk.data = k2, b.tv.data = v2;
                assert_int_equal(attn_ctx_set_num_threads(ctx, 3), ATTN_STATUS_OK);
                assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl),
                                 ATTN_STATUS_OK);
                if (memcmp(o1, b.o, (size_t)(B * Sq * H * D) * es) != 0 ||
                    memcmp(l1, b.l, (size_t)(B * H * Sq) * sizeof(float)) != 0)
                    print_error("hidden tiles: Sq %lld Sk %lld kind %d %s: poisoned hidden keys / 3 threads changed "
                                "the result\n",
                                (long long)Sq, (long long)Sk, kind, attn_dtype_name(dt));
                assert_memory_equal(o1, b.o, (size_t)(B * Sq * H * D) * es);
                assert_memory_equal(l1, b.l, (size_t)(B * H * Sq) * sizeof(float));
                /* the first key some row sees (batch-major), poisoned: shows */
                int64_t jv = 0;
                while (jv < B * Sk && hidden[jv])
                    jv++;
                if (jv < B * Sk) {
                    for (int64_t e = 0; e < Hk * D; e++)
                        th_set(v2, dt, (size_t)(jv * Hk * D + e), NAN);
                    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl),
                                     ATTN_STATUS_OK);
                    const int show = memcmp(o1, b.o, (size_t)(B * Sq * H * D) * es) != 0;
                    if (!show)
                        print_error("hidden tiles: Sq %lld Sk %lld kind %d %s: NaN in V of key %lld, seen by some row, "
                                    "changed nothing\n",
                                    (long long)Sq, (long long)Sk, kind, attn_dtype_name(dt), (long long)jv);
                    shown += show;
                }
                b.tk.data = k0, b.tv.data = v0;
                free(o1), free(l1), free(k2), free(v2), free(keep), free(bias), free(bias32), free(hidden), free(pad);
                mt_free(&b);
            }
    fprintf(stderr, "hidden tiles: %lld hidden keys poisoned, %lld of 48 cases showed a visible poison\n",
            (long long)poisoned_keys, (long long)shown);
    assert_true(poisoned_keys > 48 * 100);
    assert_int_equal(shown, 48);
    attn_ctx_destroy(ctx);
}

/* A row whose only logit that is not −inf is NaN (an additive NaN, every other key −inf) is NaN in out and LSE, as
 * the oracle's, wherever that key lies: also past the first split-KV partition, where the fold of an empty state
 * (m = −inf) with one whose sum is NaN dropped the NaN and gave an empty row (out 0, LSE −inf). */
static void test_nan_logit_past_first_partition(void **state) {
    (void)state;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const int64_t cases[][3] = {{600, 572, 1},   {600, 572, 4}, {600, 572, 32}, {1100, 1050, 3},
                                {2000, 1999, 1}, {600, 10, 1},  {1024, 511, 2}, {1024, 512, 40}};
    th_rng rng;
    th_rng_seed(&rng, 5);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int threads = 1; threads <= 3; threads += 2) {
            const int64_t Sk = cases[c][0], pos = cases[c][1], Sq = cases[c][2], H = 2, D = 16;
            mt_bufs b;
            mt_alloc(&b, &rng, ATTN_DTYPE_F32, 1, Sq, Sk, H, H, D);
            float *am = (float *)malloc((size_t)Sk * sizeof(float));
            for (int64_t j = 0; j < Sk; j++)
                am[j] = j == pos ? NAN : -INFINITY;
            attn_tensor tm = attn_tensor_make(am, ATTN_DTYPE_F32, 1, (const int64_t[]){Sk});
            attn_params p;
            attn_params_init(&p);
            p.additive_mask = &tm;
            assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
            assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.to, &b.tl),
                             ATTN_STATUS_OK);
            assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &b.tq, &b.tk, &b.tv, &p, &b.tor, &b.tlr),
                             ATTN_STATUS_OK);
            const float *o = (const float *)b.o, *l = (const float *)b.l, *lr = (const float *)b.lr;
            for (int64_t i = 0; i < Sq * H * D; i++) {
                if (!isnan(o[i]))
                    print_error("NaN logit at key %lld of %lld, Sq %lld, %d threads: out[%lld] = %g, the oracle NaN\n",
                                (long long)pos, (long long)Sk, (long long)Sq, threads, (long long)i, (double)o[i]);
                assert_true(isnan(o[i]));
            }
            for (int64_t i = 0; i < Sq * H; i++) {
                assert_true(isnan(lr[i])); /* the oracle's row */
                assert_true(isnan(l[i]));
            }
            free(am);
            mt_free(&b);
        }
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_explicit_mask_shapes),
        cmocka_unit_test(test_cross_attention_key_padding),
        cmocka_unit_test(test_self_attention_padded),
        cmocka_unit_test(test_padded_bnsd),
        cmocka_unit_test(test_padded_errors),
        cmocka_unit_test(test_hidden_tiles),
        cmocka_unit_test(test_nan_logit_past_first_partition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
