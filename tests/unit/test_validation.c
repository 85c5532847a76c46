/*
 * test_validation.c — every validation path of attn_forward, attn_forward_varlen, attn_merge_attn_states and
 * the context functions (docs/CONTRIBUTING.md §4): for each bad input, the status, a message substring that names the
 * argument (and value), and that the output buffers are untouched (canary bytes).
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
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

#define CANARY 0x5A

/* ---------------------------------------------------------------------------------------------
 * Dense fixture: q [2, 5, 4, 8], k/v [2, 7, 2, 8], out [2, 5, 4, 8], lse [2, 4, 5], all f32
 * --------------------------------------------------------------------------------------------- */
typedef struct dense_fx {
    float q[2 * 5 * 4 * 8], k[2 * 7 * 2 * 8], v[2 * 7 * 2 * 8];
    float out[2 * 5 * 4 * 8 + 8], lse[2 * 4 * 5 + 8];
    attn_tensor tq, tk, tv, to, tl;
    attn_params p;
    attn_ctx *ctx;
} dense_fx;

static void dense_reset(dense_fx *f) {
    int64_t qs[4] = {2, 5, 4, 8}, ks[4] = {2, 7, 2, 8}, ls[3] = {2, 4, 5};
    for (size_t i = 0; i < sizeof f->q / 4; i++) f->q[i] = 0.01f * (float)i;
    for (size_t i = 0; i < sizeof f->k / 4; i++) f->k[i] = 0.02f * (float)i, f->v[i] = -0.01f * (float)i;
    memset(f->out, CANARY, sizeof f->out);
    memset(f->lse, CANARY, sizeof f->lse);
    f->tq = attn_tensor_make(f->q, ATTN_DTYPE_F32, 4, qs);
    f->tk = attn_tensor_make(f->k, ATTN_DTYPE_F32, 4, ks);
    f->tv = attn_tensor_make(f->v, ATTN_DTYPE_F32, 4, ks);
    f->to = attn_tensor_make(f->out, ATTN_DTYPE_F32, 4, qs);
    f->tl = attn_tensor_make(f->lse, ATTN_DTYPE_F32, 3, ls);
    attn_params_init(&f->p);
}

static int untouched(const void *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < n; i++)
        if (p[i] != CANARY) return 0;
    return 1;
}

/* Asserts the status and message of a failing call and that out/lse kept their canary bytes. */
#define EXPECT_FAIL(call, status, substr, f)                                                                 \
    do {                                                                                                     \
        attn_clear_error();                                                                                  \
        const attn_status st_ = (call);                                                                      \
        if (st_ != (status) || strstr(attn_last_error(), (substr)) == NULL)                                  \
            fprintf(stderr, "line %d: got %s \"%s\", want %s containing \"%s\"\n", __LINE__,                 \
                    attn_status_string(st_), attn_last_error(), attn_status_string(status), (substr));        \
        assert_int_equal(st_, (status));                                                                     \
        assert_non_null(strstr(attn_last_error(), (substr)));                                                \
        assert_true(untouched((f)->out, sizeof(f)->out));                                                    \
        assert_true(untouched((f)->lse, sizeof(f)->lse));                                                    \
    } while (0)

#define FWD(f) attn_forward((f)->ctx, ATTN_LAYOUT_BSND, &(f)->tq, &(f)->tk, &(f)->tv, &(f)->p, &(f)->to, &(f)->tl)

static void test_forward_validation(void **state) {
    (void)state;
    dense_fx *f = (dense_fx *)calloc(1, sizeof *f);
    assert_int_equal(attn_ctx_create(&f->ctx), ATTN_STATUS_OK);
    attn_ctx *ctx = f->ctx;

    /* the fixture itself is valid (and then writes the outputs) */
    dense_reset(f);
    assert_int_equal(FWD(f), ATTN_STATUS_OK);
    assert_false(untouched(f->out, 4 * 2 * 5 * 4 * 8));

    /* NULLs */
    dense_reset(f);
    EXPECT_FAIL(attn_forward(NULL, ATTN_LAYOUT_BSND, &f->tq, &f->tk, &f->tv, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL", f);
    EXPECT_FAIL(attn_forward(ctx, ATTN_LAYOUT_BSND, NULL, &f->tk, &f->tv, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "q: is NULL", f);
    EXPECT_FAIL(attn_forward(ctx, ATTN_LAYOUT_BSND, &f->tq, NULL, &f->tv, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "k: is NULL", f);
    EXPECT_FAIL(attn_forward(ctx, ATTN_LAYOUT_BSND, &f->tq, &f->tk, NULL, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "v: is NULL", f);
    EXPECT_FAIL(attn_forward(ctx, ATTN_LAYOUT_BSND, &f->tq, &f->tk, &f->tv, &f->p, NULL, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "out: is NULL", f);
    dense_reset(f), f->tq.data = NULL;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: data is NULL", f);

    /* bad layout / ndim / dtype */
    dense_reset(f);
    EXPECT_FAIL(attn_forward(ctx, (attn_layout)7, &f->tq, &f->tk, &f->tv, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "layout=7", f);
    dense_reset(f), f->tq.ndim = 3;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: ndim=3, expected 4", f);
    dense_reset(f), f->tk.ndim = 7;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: ndim=7 is outside", f);
    dense_reset(f), f->tq.dtype = ATTN_DTYPE_I32;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: dtype i32, expected f32, f16 or bf16", f);
    dense_reset(f), f->tv.dtype = (attn_dtype)99;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "v: unknown dtype 99", f);
    dense_reset(f), f->tv.dtype = ATTN_DTYPE_F16, f->tv.strides[0] *= 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "v: dtype f16 differs from k dtype f32", f);
    dense_reset(f), f->to.dtype = ATTN_DTYPE_BF16;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: dtype bf16 differs from q dtype f32", f);

    /* mismatched dimensions */
    dense_reset(f), f->tk.shape[0] = 1;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: shape[0]=1, expected batch=2", f);
    dense_reset(f), f->tk.shape[3] = 4, f->tv.shape[3] = 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: shape[3]=4, expected head_size=8", f);
    dense_reset(f), f->tv.shape[1] = 6;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "v: shape[1]=6, expected seq_k=7", f);
    dense_reset(f), f->tv.shape[2] = 1;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "v: shape[2]=1, expected num_kv_heads=2", f);
    dense_reset(f), f->to.shape[1] = 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: shape[1]=4, expected seq_q=5", f);
    dense_reset(f), f->to.shape[2] = 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: shape[2]=2, expected num_heads=4", f);
    dense_reset(f), f->to.shape[3] = 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: shape[3]=4, expected head_size_v=8", f);
    dense_reset(f), f->tk.shape[2] = 3, f->tv.shape[2] = 3;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: shape[2]=3 does not divide num_heads=4", f);
    dense_reset(f), f->tq.shape[2] = 0, f->to.shape[2] = 0;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "num_heads=0", f);

    /* head sizes 0 and 257 */
    dense_reset(f), f->tq.shape[3] = 0, f->tk.shape[3] = 0;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: head_size=0 is outside 1..256", f);
    {
        float *big = (float *)calloc(2 * 7 * 2 * 257 + 2 * 5 * 4 * 257, 4);
        int64_t qs[4] = {2, 5, 4, 257}, ks[4] = {2, 7, 2, 257};
        dense_reset(f);
        f->tq = attn_tensor_make(big, ATTN_DTYPE_F32, 4, qs);
        f->tk = attn_tensor_make(big + 2 * 5 * 4 * 257, ATTN_DTYPE_F32, 4, ks);
        EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: head_size=257 is outside 1..256", f);
        dense_reset(f);
        int64_t os[4] = {2, 5, 4, 257};
        const size_t ob = (size_t)(2 * 5 * 4 * 257) * 4;
        unsigned char *big_out = (unsigned char *)malloc(ob);
        memset(big_out, CANARY, ob);
        f->tv = attn_tensor_make(big, ATTN_DTYPE_F32, 4, ks);
        f->to = attn_tensor_make(big_out, ATTN_DTYPE_F32, 4, os);
        attn_clear_error();
        assert_int_equal(FWD(f), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "v: head_size=257 is outside 1..256"));
        assert_true(untouched(big_out, ob));
        free(big_out);
        free(big);
    }

    /* strides and shapes */
    dense_reset(f), f->tq.strides[3] = 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: strides[3]=2, the last dimension must be contiguous", f);
    dense_reset(f), f->to.strides[3] = 0;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: strides[3]=0", f);
    dense_reset(f), f->tk.strides[1] = -16;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: strides[1]=-16 is negative", f);
    dense_reset(f), f->tq.shape[1] = -5;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: shape[1]=-5 is negative", f);
    dense_reset(f), f->tk.strides[0] = INT64_MAX / 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_OVERFLOW, "k: ", f);

    /* aliasing */
    dense_reset(f), f->to.data = (char *)f->q + 4 * 8; /* out starts inside q */
    {
        const float q0 = f->q[8];
        attn_clear_error();
        assert_int_equal(FWD(f), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "out: overlaps q"));
        assert_true(f->q[8] == q0);
        assert_true(untouched(f->out, sizeof f->out) && untouched(f->lse, sizeof f->lse));
    }
    dense_reset(f), f->to.data = f->v;
    {
        float v_copy[sizeof f->v / 4];
        memcpy(v_copy, f->v, sizeof f->v);
        assert_int_equal(FWD(f), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "out: overlaps v"));
        assert_memory_equal(v_copy, f->v, sizeof f->v);
    }
    dense_reset(f), f->tl.data = f->out + 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "overlaps", f);

    /* unaligned data pointer */
    dense_reset(f), f->tk.data = (char *)f->k + 1;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: data pointer", f);
    dense_reset(f), f->tl.data = (char *)f->lse + 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: data pointer", f);

    /* LSE view */
    dense_reset(f), f->tl.dtype = ATTN_DTYPE_F16;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: dtype f16, expected f32", f);
    dense_reset(f), f->tl.shape[1] = 2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[1]=2, expected num_heads=4", f);
    dense_reset(f), f->tl.shape[2] = 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[2]=4, expected seq_q=5", f);
    dense_reset(f), f->tl.ndim = 4;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: ndim=4, expected 3", f);

    /* params */
    dense_reset(f), f->p.window_left = -2;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.window_left=-2", f);
    dense_reset(f), f->p.window_right = -7;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.window_right=-7", f);
    dense_reset(f), f->p.softmax_scale = NAN;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.softmax_scale=nan", f);
    dense_reset(f), f->p.softmax_scale = INFINITY;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.softmax_scale=inf", f);
    dense_reset(f), f->p.softcap = -1.0f;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.softcap=-1", f);
    dense_reset(f), f->p.softcap = NAN;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.softcap=nan", f);
    dense_reset(f), f->p.causal = 3;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.causal=3", f);
    dense_reset(f), f->p.causal = -1;
    EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.causal=-1", f);
    {
        float slopes[4] = {0.1f, 0.2f, NAN, 0.4f}, sinks[4] = {0.f, INFINITY, 0.f, 0.f};
        dense_reset(f), f->p.alibi_slopes = slopes;
        EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.alibi_slopes[2]=nan", f);
        dense_reset(f), f->p.sinks = sinks;
        EXPECT_FAIL(FWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.sinks[1]=inf", f);
    }
    /* params == NULL means the defaults */
    dense_reset(f);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &f->tq, &f->tk, &f->tv, NULL, &f->to, NULL), ATTN_STATUS_OK);

    /* the oracle entry validates identically */
    dense_reset(f), f->tk.shape[2] = 3, f->tv.shape[2] = 3;
    EXPECT_FAIL(attn_ref_forward(ATTN_LAYOUT_BSND, &f->tq, &f->tk, &f->tv, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "k: shape[2]=3 does not divide num_heads=4", f);

    attn_ctx_destroy(ctx);
    free(f);
}

/* ---------------------------------------------------------------------------------------------
 * Varlen fixture: q [10, 4, 8], k/v [12, 2, 8], out [10, 4, 8], lse [4, 10], cu {0, 4, 10} / {0, 5, 12}
 * --------------------------------------------------------------------------------------------- */
typedef struct varlen_fx {
    float q[10 * 4 * 8], k[12 * 2 * 8], v[12 * 2 * 8];
    float out[10 * 4 * 8], lse[4 * 10];
    int32_t cu_q[3], cu_k[3];
    int64_t cu_q64[3];
    attn_tensor tq, tk, tv, to, tl, tcq, tck;
    attn_params p;
    attn_ctx *ctx;
} varlen_fx;

static void varlen_reset(varlen_fx *f) {
    int64_t qs[3] = {10, 4, 8}, ks[3] = {12, 2, 8}, ls[2] = {4, 10}, cs[1] = {3};
    for (size_t i = 0; i < sizeof f->q / 4; i++) f->q[i] = 0.01f * (float)i;
    for (size_t i = 0; i < sizeof f->k / 4; i++) f->k[i] = 0.02f * (float)i, f->v[i] = 0.03f * (float)i;
    memset(f->out, CANARY, sizeof f->out);
    memset(f->lse, CANARY, sizeof f->lse);
    f->cu_q[0] = 0, f->cu_q[1] = 4, f->cu_q[2] = 10;
    f->cu_k[0] = 0, f->cu_k[1] = 5, f->cu_k[2] = 12;
    f->cu_q64[0] = 0, f->cu_q64[1] = 4, f->cu_q64[2] = 10;
    f->tq = attn_tensor_make(f->q, ATTN_DTYPE_F32, 3, qs);
    f->tk = attn_tensor_make(f->k, ATTN_DTYPE_F32, 3, ks);
    f->tv = attn_tensor_make(f->v, ATTN_DTYPE_F32, 3, ks);
    f->to = attn_tensor_make(f->out, ATTN_DTYPE_F32, 3, qs);
    f->tl = attn_tensor_make(f->lse, ATTN_DTYPE_F32, 2, ls);
    f->tcq = attn_tensor_make(f->cu_q, ATTN_DTYPE_I32, 1, cs);
    f->tck = attn_tensor_make(f->cu_k, ATTN_DTYPE_I32, 1, cs);
    attn_params_init(&f->p);
}

#define VFWD(f)                                                                                              \
    attn_forward_varlen((f)->ctx, &(f)->tq, &(f)->tk, &(f)->tv, &(f)->tcq, &(f)->tck, &(f)->p, &(f)->to, &(f)->tl)

static void test_varlen_validation(void **state) {
    (void)state;
    varlen_fx *f = (varlen_fx *)calloc(1, sizeof *f);
    assert_int_equal(attn_ctx_create(&f->ctx), ATTN_STATUS_OK);
    attn_ctx *ctx = f->ctx;
    varlen_reset(f);
    assert_int_equal(VFWD(f), ATTN_STATUS_OK);

    varlen_reset(f);
    EXPECT_FAIL(attn_forward_varlen(NULL, &f->tq, &f->tk, &f->tv, &f->tcq, &f->tck, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL", f);
    EXPECT_FAIL(attn_forward_varlen(ctx, &f->tq, &f->tk, &f->tv, NULL, &f->tck, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: is NULL", f);
    EXPECT_FAIL(attn_forward_varlen(ctx, &f->tq, &f->tk, &f->tv, &f->tcq, NULL, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_k: is NULL", f);
    EXPECT_FAIL(attn_forward_varlen(ctx, NULL, &f->tk, &f->tv, &f->tcq, &f->tck, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "q: is NULL", f);
    varlen_reset(f), f->tq.ndim = 4, f->tq.shape[3] = 1, f->tq.strides[3] = 1;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "q: ndim=4, expected 3", f);
    varlen_reset(f), f->tk.shape[1] = 3, f->tv.shape[1] = 3;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "k: shape[1]=3 does not divide num_heads=4", f);
    varlen_reset(f), f->to.shape[0] = 9;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "out: shape[0]=9, expected total_q=10", f);
    varlen_reset(f), f->tv.shape[0] = 11;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "v: shape[0]=11, expected total_k=12", f);

    /* cu_seqlens */
    varlen_reset(f), f->cu_q[0] = 1;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: entry 0 = 1, expected 0", f);
    varlen_reset(f), f->cu_k[1] = 13;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_k: entry 2 = 12 < entry 1 = 13", f);
    varlen_reset(f), f->cu_q[1] = 7, f->cu_q[2] = 3;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: entry 2 = 3 < entry 1 = 7", f);
    varlen_reset(f), f->cu_q[2] = 11;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: last entry 11 exceeds the 10 packed rows", f);
    varlen_reset(f), f->cu_k[2] = 40;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_k: last entry 40 exceeds the 12 packed rows", f);
    varlen_reset(f), f->tcq = attn_tensor_make(f->cu_q64, ATTN_DTYPE_I64, 1, f->tcq.shape);
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: dtype i64, expected i32", f);
    varlen_reset(f), f->tck.shape[0] = 2;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_k: shape[0]=2, expected batch+1=3", f);
    varlen_reset(f), f->tcq.shape[0] = 0;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: shape[0]=0", f);
    varlen_reset(f), f->tcq.ndim = 2, f->tcq.shape[1] = 1;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: ndim=2, expected 1", f);
    varlen_reset(f), f->tcq.data = (char *)f->cu_q + 2;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: data pointer", f);

    /* LSE [num_heads, total_q] */
    varlen_reset(f), f->tl.shape[1] = 9;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[1]=9, expected total_q=10", f);
    varlen_reset(f), f->tl.shape[0] = 2;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[0]=2, expected num_heads=4", f);

    /* masks are not supported by the packed entry */
    {
        unsigned char m[10 * 12];
        int64_t ms[2] = {10, 12};
        attn_tensor tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 2, ms);
        varlen_reset(f), f->p.mask = &tm;
        EXPECT_FAIL(VFWD(f), ATTN_STATUS_UNSUPPORTED, "params.mask", f);
        varlen_reset(f), f->p.key_padding_mask = &tm;
        EXPECT_FAIL(VFWD(f), ATTN_STATUS_UNSUPPORTED, "params.key_padding_mask", f);
    }
    varlen_reset(f), f->p.window_left = -2;
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "params.window_left=-2", f);

    /* overlaps */
    varlen_reset(f), f->to.data = f->k;
    assert_int_equal(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "out: overlaps k"));
    varlen_reset(f), f->tl.data = f->cu_k;
    f->tl.shape[0] = 1, f->tl.shape[1] = 10; /* lse view over the cu buffer: first the shape check fires */
    EXPECT_FAIL(VFWD(f), ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[0]=1", f);

    /* the oracle twin validates identically */
    varlen_reset(f), f->cu_q[1] = 11;
    EXPECT_FAIL(attn_ref_forward_varlen(&f->tq, &f->tk, &f->tv, &f->tcq, &f->tck, &f->p, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: entry 2 = 10 < entry 1 = 11", f);
    attn_ctx_destroy(ctx);
    free(f);
}

/* ---------------------------------------------------------------------------------------------
 * merge_attn_states: out_a/out_b/out [3, 2, 4], lse [2, 3]
 * --------------------------------------------------------------------------------------------- */
typedef struct merge_fx {
    float a[24], b[24], out[24], la[6], lb[6], lse[6];
    attn_tensor ta, tb, to, tla, tlb, tl;
    attn_ctx *ctx;
} merge_fx;

static void merge_reset(merge_fx *f) {
    int64_t os[3] = {3, 2, 4}, ls[2] = {2, 3};
    for (int i = 0; i < 24; i++) f->a[i] = (float)i, f->b[i] = -(float)i;
    for (int i = 0; i < 6; i++) f->la[i] = 0.1f * (float)i, f->lb[i] = -0.1f * (float)i;
    memset(f->out, CANARY, sizeof f->out);
    memset(f->lse, CANARY, sizeof f->lse);
    f->ta = attn_tensor_make(f->a, ATTN_DTYPE_F32, 3, os), f->tb = attn_tensor_make(f->b, ATTN_DTYPE_F32, 3, os);
    f->to = attn_tensor_make(f->out, ATTN_DTYPE_F32, 3, os);
    f->tla = attn_tensor_make(f->la, ATTN_DTYPE_F32, 2, ls), f->tlb = attn_tensor_make(f->lb, ATTN_DTYPE_F32, 2, ls);
    f->tl = attn_tensor_make(f->lse, ATTN_DTYPE_F32, 2, ls);
}

#define MERGE(f) attn_merge_attn_states((f)->ctx, &(f)->ta, &(f)->tla, &(f)->tb, &(f)->tlb, &(f)->to, &(f)->tl)

static void test_merge_validation(void **state) {
    (void)state;
    merge_fx *f = (merge_fx *)calloc(1, sizeof *f);
    assert_int_equal(attn_ctx_create(&f->ctx), ATTN_STATUS_OK);
    attn_ctx *ctx = f->ctx;
    merge_reset(f);
    assert_int_equal(MERGE(f), ATTN_STATUS_OK);

    merge_reset(f);
    EXPECT_FAIL(attn_merge_attn_states(NULL, &f->ta, &f->tla, &f->tb, &f->tlb, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL", f);
    EXPECT_FAIL(attn_merge_attn_states(ctx, NULL, &f->tla, &f->tb, &f->tlb, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "out_a: is NULL", f);
    EXPECT_FAIL(attn_merge_attn_states(ctx, &f->ta, NULL, &f->tb, &f->tlb, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "lse_a: is NULL", f);
    EXPECT_FAIL(attn_merge_attn_states(ctx, &f->ta, &f->tla, NULL, &f->tlb, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "out_b: is NULL", f);
    EXPECT_FAIL(attn_merge_attn_states(ctx, &f->ta, &f->tla, &f->tb, NULL, &f->to, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "lse_b: is NULL", f);
    EXPECT_FAIL(attn_merge_attn_states(ctx, &f->ta, &f->tla, &f->tb, &f->tlb, NULL, &f->tl),
                ATTN_STATUS_INVALID_ARGUMENT, "out: is NULL", f);
    merge_reset(f), f->tb.dtype = ATTN_DTYPE_F16;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out_b: dtype f16, expected f32", f);
    merge_reset(f), f->ta.dtype = ATTN_DTYPE_I32, f->tb.dtype = ATTN_DTYPE_I32, f->to.dtype = ATTN_DTYPE_I32;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out_a: dtype i32", f);
    merge_reset(f), f->tb.shape[1] = 1;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out_b: shape[1]=1, expected num_heads=2", f);
    merge_reset(f), f->to.shape[0] = 2;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out: shape[0]=2, expected num_tokens=3", f);
    merge_reset(f), f->tla.dtype = ATTN_DTYPE_BF16;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "lse_a: dtype bf16, expected f32", f);
    merge_reset(f), f->tlb.shape[1] = 2;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "lse_b: shape[1]=2, expected num_tokens=3", f);
    merge_reset(f), f->tl.shape[0] = 3;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "lse_out: shape[0]=3, expected num_heads=2", f);
    merge_reset(f), f->ta.strides[2] = 2;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out_a: strides[2]=2", f);
    merge_reset(f), f->tb.data = (char *)f->b + 1;
    EXPECT_FAIL(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT, "out_b: data pointer", f);
    /* partial overlap of out with an input is rejected (exact aliasing is allowed: see test_merge) */
    merge_reset(f), f->to.data = f->a + 4;
    {
        float a_copy[24];
        memcpy(a_copy, f->a, sizeof a_copy);
        f->to.shape[0] = 3;
        assert_int_equal(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "out: partially overlaps out_a"));
        assert_memory_equal(a_copy, f->a, sizeof a_copy);
        assert_true(untouched(f->lse, sizeof f->lse));
    }
    merge_reset(f), f->tl.data = f->la + 1, f->tl.shape[1] = 3;
    {
        float la_copy[6];
        memcpy(la_copy, f->la, sizeof la_copy);
        attn_clear_error();
        assert_int_equal(MERGE(f), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "lse_out: partially overlaps lse_a"));
        assert_memory_equal(la_copy, f->la, sizeof la_copy);
        assert_true(untouched(f->out, sizeof f->out));
    }
    attn_ctx_destroy(ctx);
    free(f);
}

/* ---------------------------------------------------------------------------------------------
 * Context and ISA queries
 * --------------------------------------------------------------------------------------------- */
static void test_ctx_validation(void **state) {
    (void)state;
    attn_clear_error();
    assert_int_equal(attn_ctx_create(NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ctx: is NULL"));
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_non_null(ctx);
    const int32_t nt = attn_ctx_num_threads(ctx);
    const char *isa = attn_ctx_isa(ctx);
    assert_true(nt >= 1);
    assert_true(attn_isa_available(isa));

    assert_int_equal(attn_ctx_set_num_threads(ctx, 0), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "num_threads=0 is outside 1..1024"));
    assert_int_equal(attn_ctx_set_num_threads(ctx, 1025), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "num_threads=1025"));
    assert_int_equal(attn_ctx_set_num_threads(ctx, -3), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_ctx_set_num_threads(NULL, 2), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ctx: is NULL"));
    assert_int_equal(attn_ctx_num_threads(ctx), nt); /* unchanged after failures */

    assert_int_equal(attn_ctx_set_isa(ctx, "no-such-isa"), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "isa=\"no-such-isa\": unknown or not runnable"));
    assert_int_equal(attn_ctx_set_isa(ctx, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "isa: is NULL"));
    assert_int_equal(attn_ctx_set_isa(NULL, "generic"), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ctx: is NULL"));
    assert_string_equal(attn_ctx_isa(ctx), isa); /* unchanged after failures */
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *name = attn_isa_name(i);
        const attn_status st = attn_ctx_set_isa(ctx, name);
        assert_int_equal(st, attn_isa_available(name) ? ATTN_STATUS_OK : ATTN_STATUS_INVALID_ARGUMENT);
        if (st == ATTN_STATUS_OK) assert_string_equal(attn_ctx_isa(ctx), name);
    }
    assert_int_equal(attn_ctx_set_num_threads(ctx, 3), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_num_threads(ctx), 3);
    assert_int_equal(attn_ctx_num_threads(NULL), 0);
    assert_string_equal(attn_ctx_isa(NULL), "");
    assert_int_equal(attn_isa_available(NULL), 0);
    assert_int_equal(attn_isa_available("generic"), 1);
    assert_null(attn_isa_name(-1));
    assert_null(attn_isa_name(attn_isa_count()));
    assert_non_null(attn_cpu_features());
    attn_ctx_destroy(ctx);
    attn_ctx_destroy(NULL); /* no-op */

    /* ATTN_ISA naming an unknown ISA makes attn_ctx_create fail with the name in the message */
    setenv("ATTN_ISA", "bogus-isa", 1);
    ctx = (attn_ctx *)(uintptr_t)1;
    attn_clear_error();
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_non_null(strstr(attn_last_error(), "ATTN_ISA=bogus-isa"));
    setenv("ATTN_ISA", "generic", 1);
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_string_equal(attn_ctx_isa(ctx), "generic");
    attn_ctx_destroy(ctx);
    unsetenv("ATTN_ISA");

    /* the last error is thread-local state that only attn_clear_error resets */
    attn_clear_error();
    assert_string_equal(attn_last_error(), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_validation),
        cmocka_unit_test(test_varlen_validation),
        cmocka_unit_test(test_merge_validation),
        cmocka_unit_test(test_ctx_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
