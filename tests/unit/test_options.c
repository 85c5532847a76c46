/*
 * test_options.c — the size-prefixed option structs and the options cache write.
 *   - struct_size (attn.h "Size-prefixed option structs"): every *_init_sized writes exactly struct_size bytes
 *     and stores it; an entry rejects struct_size < ATTN_*_SIZE_MIN and > ATTN_STRUCT_SIZE_MAX
 *     (INVALID_ARGUMENT) and a nonzero byte past the library's struct (UNSUPPORTED), naming the struct, with
 *     nothing written; a struct that ends before an appended field reads that field's default (the per-head
 *     k_scales / v_scales of attn_params are not read even when their bytes hold garbage); a longer struct
 *     with a zero tail is accepted; attn_params_copy applies the same rule;
 *   - attn_reshape_and_cache_ex: the four older entries are the same writes, statuses and callback as the
 *     options entry; per-head fp8 scales are bitwise the oracle's per-head write; bad per-head scales name
 *     the entry and write nothing; a float cache ignores every scale;
 *   - copy_blocks / swap_blocks on a u8 view of an fp8 cache (vLLM's allocation): byte copies.
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
#include "ref/ref.h"

/* ---------------------------------------------------------------------------------------------
 * *_init_sized
 * --------------------------------------------------------------------------------------------- */
static void test_init_sized_writes_struct_size_bytes(void **state) {
    (void)state;
    unsigned char buf[sizeof(attn_params) + 64];
    /* a caller whose struct ends at ATTN_PARAMS_SIZE_MIN: nothing past it is written */
    memset(buf, 0xA5, sizeof buf);
    attn_params_init_sized((attn_params *)(void *)buf, ATTN_PARAMS_SIZE_MIN);
    for (size_t i = ATTN_PARAMS_SIZE_MIN; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xA5);
    attn_params p;
    memcpy(&p, buf, ATTN_PARAMS_SIZE_MIN);
    assert_int_equal(p.struct_size, ATTN_PARAMS_SIZE_MIN);
    assert_true(p.k_scale == 1.0f && p.v_scale == 1.0f && p.window_left == -1);
    /* a caller with a longer struct: the tail is zeroed, the rest untouched */
    memset(buf, 0xA5, sizeof buf);
    attn_params_init_sized((attn_params *)(void *)buf, sizeof(attn_params) + 32);
    for (size_t i = sizeof(attn_params); i < sizeof(attn_params) + 32; i++)
        assert_int_equal(buf[i], 0);
    for (size_t i = sizeof(attn_params) + 32; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xA5);
    /* the macro: the caller's sizeof */
    attn_params_init(&p);
    assert_int_equal(p.struct_size, sizeof(attn_params));
    assert_null(p.k_scales);
    assert_null(p.v_scales);
    /* the exported function (reached past the macro) writes this library's sizeof */
    memset(&p, 0, sizeof p);
    (attn_params_init)(&p);
    assert_int_equal(p.struct_size, sizeof(attn_params));
    attn_plan_config c;
    attn_plan_config_init(&c);
    assert_int_equal(c.struct_size, sizeof c);
    assert_int_equal(c.block_size, 128);
    attn_quant_params qp;
    attn_quant_params_init(&qp, ATTN_QUANT_MXFP8);
    assert_int_equal(qp.struct_size, sizeof qp);
    assert_int_equal(qp.format, ATTN_QUANT_MXFP8);
    attn_cache_write_options o;
    memset(&o, 0x5A, sizeof o);
    attn_cache_write_options_init(&o);
    assert_int_equal(o.struct_size, sizeof o);
    assert_true(o.k_scale == 1.0f && o.v_scale == 1.0f);
    assert_null(o.k_scales);
    assert_null(o.notify);
    /* NULL and size 0: no effect */
    attn_params_init_sized(NULL, sizeof p);
    memset(buf, 0xA5, sizeof buf);
    attn_params_init_sized((attn_params *)(void *)buf, 0);
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xA5);
}

/* ---------------------------------------------------------------------------------------------
 * The struct_size rule on an entry: dense attn_forward
 * --------------------------------------------------------------------------------------------- */
typedef struct {
    float q[1 * 3 * 2 * 8], k[1 * 4 * 1 * 8], v[1 * 4 * 1 * 8], out[1 * 3 * 2 * 8];
    attn_tensor tq, tk, tv, to;
    attn_ctx *ctx;
} dense_fx;

static void dense_setup(dense_fx *f) {
    for (size_t i = 0; i < sizeof f->q / 4; i++)
        f->q[i] = 0.05f * (float)i;
    for (size_t i = 0; i < sizeof f->k / 4; i++)
        f->k[i] = 0.01f * (float)i, f->v[i] = 1.0f - 0.02f * (float)i;
    int64_t qs[4] = {1, 3, 2, 8}, ks[4] = {1, 4, 1, 8};
    f->tq = attn_tensor_make(f->q, ATTN_DTYPE_F32, 4, qs), f->to = attn_tensor_make(f->out, ATTN_DTYPE_F32, 4, qs);
    f->tk = attn_tensor_make(f->k, ATTN_DTYPE_F32, 4, ks), f->tv = attn_tensor_make(f->v, ATTN_DTYPE_F32, 4, ks);
    assert_int_equal(attn_ctx_create(&f->ctx), ATTN_STATUS_OK);
}

/* Calls attn_forward with the params held in `buf`; on failure checks the message and that out is untouched. */
static attn_status dense_call(dense_fx *f, const void *buf, const char *want) {
    memset(f->out, 0x7B, sizeof f->out);
    unsigned char before[sizeof f->out];
    memcpy(before, f->out, sizeof before);
    attn_clear_error();
    const attn_status st =
        attn_forward(f->ctx, ATTN_LAYOUT_BSND, &f->tq, &f->tk, &f->tv, (const attn_params *)buf, &f->to, NULL);
    if (want) {
        if (!strstr(attn_last_error(), want))
            fprintf(stderr, "message: %s (want %s)\n", attn_last_error(), want);
        assert_non_null(strstr(attn_last_error(), want));
        assert_memory_equal(f->out, before, sizeof before);
    }
    return st;
}

static void test_params_struct_size_rule(void **state) {
    (void)state;
    dense_fx f;
    dense_setup(&f);
    _Alignas(8) unsigned char buf[sizeof(attn_params) + 64];
    attn_params p;
    /* reference: defaults through the full struct */
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    assert_int_equal(dense_call(&f, &p, NULL), ATTN_STATUS_OK);
    float want[sizeof f.out / 4];
    memcpy(want, f.out, sizeof want);
    /* too small (an uninitialised struct) */
    memcpy(buf, &p, sizeof p);
    size_t sz = 0;
    memcpy(buf, &sz, sizeof sz);
    assert_int_equal(dense_call(&f, buf, "params.struct_size=0: expected >= "), ATTN_STATUS_INVALID_ARGUMENT);
    sz = ATTN_PARAMS_SIZE_MIN - 1;
    memcpy(buf, &sz, sizeof sz);
    assert_int_equal(dense_call(&f, buf, "params.struct_size="), ATTN_STATUS_INVALID_ARGUMENT);
    /* too large */
    sz = ATTN_STRUCT_SIZE_MAX + 1;
    memcpy(buf, &sz, sizeof sz);
    assert_int_equal(dense_call(&f, buf, "exceeds ATTN_STRUCT_SIZE_MAX"), ATTN_STATUS_INVALID_ARGUMENT);
    /* newer caller, zero tail: accepted, same bits */
    memset(buf, 0, sizeof buf);
    memcpy(buf, &p, sizeof p);
    sz = sizeof buf;
    memcpy(buf, &sz, sizeof sz);
    assert_int_equal(dense_call(&f, buf, NULL), ATTN_STATUS_OK);
    assert_memory_equal(f.out, want, sizeof want);
    /* newer caller, a field this library does not know is set */
    buf[sizeof(attn_params) + 5] = 1;
    char msg[128];
    snprintf(msg, sizeof msg, "byte %zu, past this library's %zu-byte struct, is nonzero", sizeof(attn_params) + 5,
             sizeof(attn_params));
    assert_int_equal(dense_call(&f, buf, msg), ATTN_STATUS_UNSUPPORTED);
    /* an older caller (fields through v_scale): accepted, the appended fields read NULL even as garbage bytes */
    memset(buf, 0xEE, sizeof buf);
    memcpy(buf, &p, ATTN_PARAMS_SIZE_MIN);
    sz = ATTN_PARAMS_SIZE_MIN;
    memcpy(buf, &sz, sizeof sz);
    assert_int_equal(dense_call(&f, buf, NULL), ATTN_STATUS_OK);
    assert_memory_equal(f.out, want, sizeof want);
    /* attn_params_copy: the same rule */
    attn_params q;
    assert_int_equal(attn_params_copy(&q, (const attn_params *)(void *)buf), ATTN_STATUS_OK);
    assert_int_equal(q.struct_size, sizeof q);
    assert_null(q.k_scales);
    assert_null(q.v_scales);
    assert_int_equal(q.causal, ATTN_CAUSAL_BOTTOM_RIGHT);
    assert_int_equal(attn_params_copy(&q, NULL), ATTN_STATUS_OK);
    assert_int_equal(q.causal, ATTN_CAUSAL_NONE);
    assert_int_equal(attn_params_copy(NULL, &p), ATTN_STATUS_INVALID_ARGUMENT);
    sz = 3;
    memcpy(buf, &sz, sizeof sz);
    memset(&q, 0x11, sizeof q);
    attn_params q_before = q;
    assert_int_equal(attn_params_copy(&q, (const attn_params *)(void *)buf), ATTN_STATUS_INVALID_ARGUMENT);
    assert_memory_equal(&q, &q_before, sizeof q);
    attn_ctx_destroy(f.ctx);
}

static void test_plan_config_and_quant_struct_size(void **state) {
    (void)state;
    attn_plan_config c;
    attn_plan_config_init(&c);
    c.num_blocks = 4, c.num_heads = 2, c.num_kv_heads = 1, c.head_size = 8, c.max_blocks_per_req = 2;
    c.block_size = 4;
    attn_plan *plan = (attn_plan *)(uintptr_t)1;
    c.struct_size = 0;
    assert_int_equal(attn_plan_create(&c, NULL, 0, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "config.struct_size=0"));
    assert_null(plan);
    c.struct_size = sizeof c;
    assert_int_equal(attn_plan_create(&c, NULL, 0, &plan), ATTN_STATUS_OK);
    attn_plan_free(plan);
    /* quantized entry: a bad qp.struct_size is named before anything else of qp is read */
    attn_quant_params qp;
    attn_quant_params_init(&qp, ATTN_QUANT_FP8_E4M3);
    qp.struct_size = 1;
    float q[1 * 2 * 1 * 8] = {0}, out[1 * 2 * 1 * 8];
    int64_t s4[4] = {1, 2, 1, 8};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, s4), to = attn_tensor_make(out, ATTN_DTYPE_F32, 4, s4);
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    memset(out, 0x3C, sizeof out);
    unsigned char before[sizeof out];
    memcpy(before, out, sizeof out);
    char ws[4096];
    assert_int_equal(attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &tq, &tq, &tq, &qp, NULL, &to, NULL, ws, sizeof ws),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "qp.struct_size=1"));
    assert_memory_equal(out, before, sizeof out);
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * attn_reshape_and_cache_ex
 * --------------------------------------------------------------------------------------------- */
#define CW_T     9
#define CW_HK    3
#define CW_D     12
#define CW_NB    5
#define CW_BS    3
#define CW_ROWS  (CW_T * CW_HK * CW_D)
#define CW_CACHE (2 * CW_NB * CW_BS * CW_HK * CW_D)

typedef struct {
    float k[CW_ROWS], v[CW_ROWS];
    int64_t slots[CW_T];
    attn_tensor tk, tv, ts;
    attn_ctx *ctx;
} cw_fx;

static void cw_setup(cw_fx *f, uint64_t seed) {
    th_rng rng;
    th_rng_seed(&rng, seed);
    for (int i = 0; i < CW_ROWS; i++)
        f->k[i] = (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -12, 10))),
        f->v[i] = (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -12, 10)));
    for (int t = 0; t < CW_T; t++)
        f->slots[t] = t == 4 ? -1 : (t * 5 + 1) % (CW_NB * CW_BS);
    int64_t rs[3] = {CW_T, CW_HK, CW_D}, ss[1] = {CW_T};
    f->tk = attn_tensor_make(f->k, ATTN_DTYPE_F32, 3, rs), f->tv = attn_tensor_make(f->v, ATTN_DTYPE_F32, 3, rs);
    f->ts = attn_tensor_make(f->slots, ATTN_DTYPE_I64, 1, ss);
    assert_int_equal(attn_ctx_create(&f->ctx), ATTN_STATUS_OK);
}

static int cw_calls;
static int64_t cw_written;
static void cw_on_stored(void *user, const attn_kv_stored *ev) {
    (void)user;
    cw_calls++;
    cw_written = ev->num_written;
}

static void test_cache_write_ex_wrappers(void **state) {
    (void)state;
    cw_fx f;
    cw_setup(&f, 5);
    const int64_t cs[5] = {2, CW_NB, CW_BS, CW_HK, CW_D};
    const attn_kv_notify nt = {cw_on_stored, NULL, 2};
    for (int fmt_i = 0; fmt_i < 3; fmt_i++) {
        const attn_dtype fmt = fmt_i == 0 ? ATTN_DTYPE_FP8_E4M3 : fmt_i == 1 ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_BF16;
        const size_t bytes = (size_t)CW_CACHE * attn_dtype_size(fmt);
        unsigned char *a = malloc(bytes), *b = malloc(bytes);
        for (int w = 0; w < 4; w++) { /* plain, scaled, notify, scaled_notify against the options entry */
            memset(a, 0x21, bytes), memset(b, 0x21, bytes);
            attn_tensor ta = attn_tensor_make(a, fmt, 5, cs), tb = attn_tensor_make(b, fmt, 5, cs);
            attn_cache_write_options o;
            attn_cache_write_options_init(&o);
            if (w & 1)
                o.k_scale = 0.07f, o.v_scale = 3.0f;
            if (w & 2)
                o.notify = &nt;
            cw_calls = 0;
            attn_status st =
                w == 0   ? attn_reshape_and_cache(f.ctx, &f.tk, &f.tv, &ta, &f.ts)
                : w == 1 ? attn_reshape_and_cache_scaled(f.ctx, &f.tk, &f.tv, &ta, &f.ts, 0.07f, 3.0f)
                : w == 2 ? attn_reshape_and_cache_notify(f.ctx, &f.tk, &f.tv, &ta, &f.ts, &nt)
                         : attn_reshape_and_cache_scaled_notify(f.ctx, &f.tk, &f.tv, &ta, &f.ts, 0.07f, 3.0f, &nt);
            assert_int_equal(st, ATTN_STATUS_OK);
            assert_int_equal(cw_calls, (w & 2) ? 1 : 0);
            st = attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tb, &f.ts, w == 0 ? NULL : &o);
            assert_int_equal(st, ATTN_STATUS_OK);
            assert_int_equal(cw_calls, (w & 2) ? 2 : 0);
            if (w & 2)
                assert_int_equal(cw_written, CW_T - 1);
            assert_memory_equal(a, b, bytes);
        }
        free(a), free(b);
    }
    /* the notify wrappers still require notify */
    float cache[CW_CACHE];
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_F32, 5, cs);
    assert_int_equal(attn_reshape_and_cache_notify(f.ctx, &f.tk, &f.tv, &tc, &f.ts, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "notify: is NULL"));
    attn_ctx_destroy(f.ctx);
}

static void test_cache_write_per_head(void **state) {
    (void)state;
    cw_fx f;
    cw_setup(&f, 11);
    const int64_t cs[5] = {2, CW_NB, CW_BS, CW_HK, CW_D};
    const float ks[CW_HK] = {0.01f, 0.5f, 7.0f}, vs[CW_HK] = {2.0f, 0.003f, 0.25f};
    for (int fi = 0; fi < 2; fi++) {
        const attn_dtype fmt = fi ? ATTN_DTYPE_FP8_E5M2 : ATTN_DTYPE_FP8_E4M3;
        uint8_t got[CW_CACHE], want[CW_CACHE];
        for (int mode = 0; mode < 3; mode++) { /* per-head k and v, per-head k only, per-head v only */
            memset(got, 0x44, sizeof got), memset(want, 0x44, sizeof want);
            attn_cache_write_options o;
            attn_cache_write_options_init(&o);
            o.k_scale = 0.3f, o.v_scale = 1.5f;
            if (mode != 2)
                o.k_scales = ks;
            if (mode != 1)
                o.v_scales = vs;
            attn_tensor tc = attn_tensor_make(got, fmt, 5, cs);
            assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_OK);
            attn_ref_reshape_and_cache_head_scaled(f.k, f.v, CW_T, CW_HK, CW_D, f.slots, want, fmt, CW_NB, CW_BS, 0.3f,
                                                   1.5f, o.k_scales, o.v_scales);
            assert_memory_equal(got, want, sizeof got);
        }
        /* per-head arrays all equal to the scalar: the scalar write's bytes */
        const float k3[CW_HK] = {0.3f, 0.3f, 0.3f}, v3[CW_HK] = {1.5f, 1.5f, 1.5f};
        attn_cache_write_options o;
        attn_cache_write_options_init(&o);
        o.k_scales = k3, o.v_scales = v3;
        attn_tensor tc = attn_tensor_make(got, fmt, 5, cs);
        assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_OK);
        memset(want, 0x44, sizeof want);
        attn_tensor tw = attn_tensor_make(want, fmt, 5, cs);
        memcpy(want, got, sizeof want);
        assert_int_equal(attn_reshape_and_cache_scaled(f.ctx, &f.tk, &f.tv, &tw, &f.ts, 0.3f, 1.5f), ATTN_STATUS_OK);
        assert_memory_equal(got, want, sizeof got);
        /* bad per-head entries: named, nothing written, no callback; the scalar is then not read */
        const float bad_k[CW_HK] = {0.5f, NAN, 1.0f}, bad_v[CW_HK] = {1.0f, 1.0f, 0.0f};
        const attn_kv_notify nt = {cw_on_stored, NULL, 0};
        uint8_t before[CW_CACHE];
        memcpy(before, got, sizeof got);
        cw_calls = 0;
        o.k_scale = 0.0f, o.v_scale = NAN; /* not read: the arrays replace them */
        o.k_scales = bad_k, o.v_scales = v3, o.notify = &nt;
        assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "k_scales[1]=nan: expected a finite value > 0 for the"));
        o.k_scales = k3, o.v_scales = bad_v;
        assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "v_scales[2]=0: expected a finite value > 0"));
        o.k_scales = k3, o.v_scales = v3;
        assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_OK);
        assert_int_equal(cw_calls, 1);
        assert_memory_equal(got, before, sizeof got); /* same bytes as the scalar write above */
        /* a bad opts struct_size: named, nothing written */
        memset(got, 0x44, sizeof got);
        memcpy(before, got, sizeof got);
        o.struct_size = 4;
        assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tc, &f.ts, &o), ATTN_STATUS_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "opts.struct_size=4"));
        assert_memory_equal(got, before, sizeof got);
        assert_int_equal(cw_calls, 1);
    }
    /* a float cache never reads the scales */
    float fc[CW_CACHE], fw[CW_CACHE];
    memset(fc, 0, sizeof fc), memset(fw, 0, sizeof fw);
    const float zero[CW_HK] = {0, 0, 0};
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    o.k_scale = -1.0f, o.k_scales = zero, o.v_scales = zero;
    attn_tensor tf = attn_tensor_make(fc, ATTN_DTYPE_F32, 5, cs), tw = attn_tensor_make(fw, ATTN_DTYPE_F32, 5, cs);
    assert_int_equal(attn_reshape_and_cache_ex(f.ctx, &f.tk, &f.tv, &tf, &f.ts, &o), ATTN_STATUS_OK);
    assert_int_equal(attn_reshape_and_cache(f.ctx, &f.tk, &f.tv, &tw, &f.ts), ATTN_STATUS_OK);
    assert_memory_equal(fc, fw, sizeof fc);
    attn_ctx_destroy(f.ctx);
}

/* ---------------------------------------------------------------------------------------------
 * copy_blocks / swap_blocks on vLLM's u8 fp8 caches
 * --------------------------------------------------------------------------------------------- */
static void test_copy_swap_u8_cache(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    enum { NB = 4, BS = 2, HK = 2, D = 8, BLK = BS * HK * D, N = 2 * NB * BLK };
    uint8_t cache[N], orig[N], host[N];
    for (int i = 0; i < N; i++)
        cache[i] = orig[i] = (uint8_t)(i * 37 + 11);
    const int64_t cs[5] = {2, NB, BS, HK, D}, ms[2] = {2, 2};
    int64_t map[4] = {0, 3, 2, 1};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_U8, 5, cs), tm = attn_tensor_make(map, ATTN_DTYPE_I64, 2, ms);
    assert_int_equal(attn_copy_blocks(ctx, &tc, &tm), ATTN_STATUS_OK);
    for (int kv = 0; kv < 2; kv++) {
        assert_memory_equal(cache + (kv * NB + 3) * BLK, orig + (kv * NB + 0) * BLK, BLK);
        assert_memory_equal(cache + (kv * NB + 1) * BLK, orig + (kv * NB + 2) * BLK, BLK);
        assert_memory_equal(cache + (kv * NB + 0) * BLK, orig + (kv * NB + 0) * BLK, BLK);
        assert_memory_equal(cache + (kv * NB + 2) * BLK, orig + (kv * NB + 2) * BLK, BLK);
    }
    /* u8 -> fp8 (and back): the bytes move */
    memset(host, 0, sizeof host);
    attn_tensor th = attn_tensor_make(host, ATTN_DTYPE_FP8_E4M3, 5, cs);
    assert_int_equal(attn_swap_blocks(ctx, &tc, &th, &tm), ATTN_STATUS_OK);
    for (int kv = 0; kv < 2; kv++)
        assert_memory_equal(host + (kv * NB + 3) * BLK, cache + (kv * NB + 0) * BLK, BLK);
    attn_tensor tcf = attn_tensor_make(cache, ATTN_DTYPE_FP8_E5M2, 5, cs),
                thu = attn_tensor_make(host, ATTN_DTYPE_U8, 5, cs);
    assert_int_equal(attn_swap_blocks(ctx, &tcf, &thu, &tm), ATTN_STATUS_OK);
    /* u8 with a float cache: refused, nothing written */
    float fh[N];
    memset(fh, 0, sizeof fh);
    attn_tensor tfh = attn_tensor_make(fh, ATTN_DTYPE_F32, 5, cs);
    assert_int_equal(attn_swap_blocks(ctx, &tc, &tfh, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dst_cache: dtype f32 differs from src_cache dtype u8"));
    for (int i = 0; i < N; i++)
        assert_true(fh[i] == 0.0f);
    /* other integer dtypes stay refused */
    attn_tensor ti = attn_tensor_make(cache, ATTN_DTYPE_I32, 5, cs);
    memcpy(orig, cache, sizeof cache);
    assert_int_equal(attn_copy_blocks(ctx, &ti, &tm), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(
        strstr(attn_last_error(), "kv_cache: dtype i32, expected f32, f16, bf16, fp8_e4m3, fp8_e5m2 or u8"));
    assert_memory_equal(cache, orig, sizeof cache);
    /* a u8 cache is still not a cache the write or the attention entries read */
    float k[HK * D] = {0};
    int64_t rs[3] = {1, HK, D}, ss[1] = {1}, slot = 0;
    attn_tensor tk = attn_tensor_make(k, ATTN_DTYPE_F32, 3, rs), ts = attn_tensor_make(&slot, ATTN_DTYPE_I64, 1, ss);
    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tk, &tc, &ts), ATTN_STATUS_INVALID_ARGUMENT);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_sized_writes_struct_size_bytes),
        cmocka_unit_test(test_params_struct_size_rule),
        cmocka_unit_test(test_plan_config_and_quant_struct_size),
        cmocka_unit_test(test_cache_write_ex_wrappers),
        cmocka_unit_test(test_cache_write_per_head),
        cmocka_unit_test(test_copy_swap_u8_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
