/*
 * test_paged_fp8.c — fp8 KV cache: FP8_E4M3 / FP8_E5M2 pages with per-tensor k_scale / v_scale.
 *   - codecs: the inline widening (core/dtype.h) and every usable table's cvt_to_f32 equal attn_fp8_to_float
 *     for all 256 codes; attn_fp8_from_float equals the oracle's nearest-code search;
 *   - cache write: attn_reshape_and_cache_scaled (f32/f16/bf16 key/value, saturation, NaN, ±inf, negative slots)
 *     bitwise equal to attn_ref_reshape_and_cache_scaled, the rest of the cache untouched;
 *   - paged attention on fp8 pages: decode, prefill over a cached prefix, chunked / mixed batch, plan path and
 *     plan-less path, every usable ISA, q f32 and bf16: within th_tol_for(q dtype) of the oracle (which
 *     dequantizes decode(bits)·scale in double) and of the oracle on an f32 cache holding the dequantized values
 *     (the scales mean what vLLM means); plan path bitwise equal to the plan-less path; bitwise equal for 1, 2, 3
 *     threads;
 *   - per-head scales (vLLM kv_scale_type "attn_head": attn_cache_write_options.k_scales / v_scales on the write,
 *     attn_params.k_scales / v_scales on the read): the write bitwise the oracle's per-head write, the reads
 *     within tolerance of the oracle (which looks the scale up per kv head) and of an f32 cache holding the
 *     per-head dequantized values, and per-head arrays whose entries all equal the scalar bitwise the scalar call;
 *   - bad input: scales <= 0 / NaN / inf, fp8 key/value, u8 caches, fp8 q, fp8 key_opt mismatch: the status, the
 *     message naming the argument, and nothing written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "harness.h"
#include "kernels/kernels.h"
#include "ref/ref.h"

static const attn_dtype fp8_formats[2] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};

static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* ---------------------------------------------------------------------------------------------
 * Codecs
 * --------------------------------------------------------------------------------------------- */
static void test_fp8_codecs(void **state) {
    (void)state;
    const struct attn_kernels *tables[3] = {&attn_kernels_generic, NULL, NULL};
    int num_tables = 1;
#if defined(ATTN_HAVE_AVX2)
    if (attn_isa_available("avx2")) tables[num_tables++] = &attn_kernels_avx2;
#endif
#if defined(ATTN_HAVE_AVX512)
    if (attn_isa_available("avx512")) tables[num_tables++] = &attn_kernels_avx512;
#endif
    for (int f = 0; f < 2; f++) {
        const attn_dtype fmt = fp8_formats[f];
        uint8_t codes[259];
        for (int c = 0; c < 259; c++) codes[c] = (uint8_t)(c * 7 % 256); /* every code, unaligned tail */
        float want[259];
        for (int c = 0; c < 259; c++) {
            want[c] = attn_fp8_to_float(fmt, codes[c]);
            assert_true(same_float(attn_load_f(codes, fmt, c), want[c]));
        }
        for (int t = 0; t < num_tables; t++)
            for (int64_t n = 0; n <= 259; n += (n < 40 ? 1 : 37)) { /* every tail length of the vector loops */
                float got[259];
                tables[t]->cvt_to_f32(codes, fmt, got, n);
                for (int64_t i = 0; i < n; i++) {
                    if (!same_float(got[i], want[i]))
                        fprintf(stderr, "%s cvt_to_f32 %s code 0x%02x: %a != %a\n", tables[t]->name,
                                attn_dtype_name(fmt), codes[i], (double)got[i], (double)want[i]);
                    assert_true(same_float(got[i], want[i]));
                    /* NaN codes give the same quiet NaN (the code's sign) in every table */
                    if (isnan(want[i]))
                        assert_int_equal(attn_f32_bits(got[i]), attn_f32_bits(attn_load_f(codes, fmt, i)));
                }
            }
        /* encode: the library's codec against the oracle's literal search, over a sweep of magnitudes */
        th_rng rng;
        th_rng_seed(&rng, 77 + (uint64_t)f);
        const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 448.0f, 464.0f, 465.0f,
                                 57344.0f, 61440.0f, 1e-10f, 0.0009765625f, 0.0029296875f, 7.62939453125e-06f};
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
            assert_int_equal(attn_fp8_from_float(fmt, special[i]), attn_ref_fp8_encode(fmt, special[i]));
        for (int i = 0; i < 20000; i++) {
            const float x = (float)(th_rng_range(&rng, -1.0, 1.0) * pow(2.0, th_rng_range(&rng, -20.0, 18.0)));
            assert_int_equal(attn_fp8_from_float(fmt, x), attn_ref_fp8_encode(fmt, x));
        }
        for (int c = 0; c < 256; c++) { /* every finite code and every midpoint between neighbours */
            const float v = attn_fp8_to_float(fmt, (uint8_t)c);
            if (!isfinite(v)) continue;
            assert_int_equal(attn_ref_fp8_encode(fmt, v), c);
            const float w = attn_fp8_to_float(fmt, (uint8_t)(c + 1));
            if (c != 0x7F && c != 0xFF && isfinite(w))
                assert_int_equal(attn_fp8_from_float(fmt, (v + w) * 0.5f),
                                 attn_ref_fp8_encode(fmt, (v + w) * 0.5f));
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Cache write
 * --------------------------------------------------------------------------------------------- */
static void test_fp8_cache_write(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const attn_dtype in_dtypes[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};
    const float scales[3][2] = {{1.0f, 1.0f}, {0.037f, 3.5f}, {2.0f, 0.0625f}};
    const int64_t T = 23, Hk = 3, D = 40, NB = 7, BS = 5;
    for (int f = 0; f < 2; f++)
        for (int di = 0; di < 3; di++)
            for (int si = 0; si < 3; si++) {
                const attn_dtype fmt = fp8_formats[f], kd = in_dtypes[di];
                th_rng rng;
                th_rng_seed(&rng, (uint64_t)(f * 100 + di * 10 + si));
                const size_t n_rows = (size_t)(T * Hk * D), n_cache = (size_t)(2 * NB * BS * Hk * D);
                /* values over many binades: saturating (|x|/scale > max), subnormal and flushed ones */
                float *kf = malloc(n_rows * sizeof(float)), *vf = malloc(n_rows * sizeof(float));
                void *kr = th_alloc_nan(kd, n_rows), *vr = th_alloc_nan(kd, n_rows);
                for (size_t i = 0; i < n_rows; i++) {
                    th_set(kr, kd, i, (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -22, 17))));
                    th_set(vr, kd, i, (float)(th_rng_range(&rng, -1, 1) * pow(2.0, th_rng_range(&rng, -22, 17))));
                }
                th_set(kr, kd, 3, NAN), th_set(kr, kd, 4, INFINITY), th_set(vr, kd, 5, -INFINITY);
                for (size_t i = 0; i < n_rows; i++) kf[i] = th_get(kr, kd, i), vf[i] = th_get(vr, kd, i);
                int64_t slots[23];
                for (int64_t t = 0; t < T; t++) slots[t] = (t % 6 == 5) ? -1 : (t * 3 + si) % (NB * BS);
                slots[7] = slots[2]; /* duplicate slot: the later token wins */
                uint8_t *cache = malloc(n_cache), *expect = malloc(n_cache);
                for (size_t i = 0; i < n_cache; i++) cache[i] = (uint8_t)th_rng_int(&rng, 0, 255);
                memcpy(expect, cache, n_cache);
                attn_ref_reshape_and_cache_scaled(kf, vf, T, Hk, D, slots, expect, fmt, NB, BS, scales[si][0],
                                                  scales[si][1]);
                int64_t rs[3] = {T, Hk, D}, cs[5] = {2, NB, BS, Hk, D}, ss[1] = {T};
                attn_tensor tk = attn_tensor_make(kr, kd, 3, rs), tv = attn_tensor_make(vr, kd, 3, rs);
                attn_tensor tc = attn_tensor_make(cache, fmt, 5, cs), ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
                if (si == 0) /* scales 1: the unscaled entry is the same call */
                    assert_int_equal(attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
                else
                    assert_int_equal(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, scales[si][0], scales[si][1]),
                                     ATTN_STATUS_OK);
                assert_memory_equal(cache, expect, n_cache);
                /* a saturated element reads ±max, not NaN; the NaN key stays NaN */
                const double fmax = fmt == ATTN_DTYPE_FP8_E4M3 ? 448.0 : 57344.0;
                const int64_t k4 = ((slots[0] / BS * BS + slots[0] % BS) * Hk) * D + 4; /* token 0 element 4: +inf */
                assert_true(attn_fp8_to_float(fmt, cache[k4]) == fmax);
                assert_true(isnan(attn_fp8_to_float(fmt, cache[k4 - 1])));
                /* copy_blocks moves fp8 pages as bytes */
                int64_t bm[2] = {1, 4}, bs[2] = {1, 2};
                attn_tensor tbm = attn_tensor_make(bm, ATTN_DTYPE_I64, 2, bs);
                assert_int_equal(attn_copy_blocks(ctx, &tc, &tbm), ATTN_STATUS_OK);
                const size_t blk = (size_t)(BS * Hk * D);
                for (int kv = 0; kv < 2; kv++)
                    assert_memory_equal(cache + (size_t)(kv * NB + 4) * blk, expect + (size_t)(kv * NB + 1) * blk, blk);
                free(kf), free(vf), free(kr), free(vr), free(cache), free(expect);
            }
    attn_ctx_destroy(ctx);
}

/* ---------------------------------------------------------------------------------------------
 * Paged attention on fp8 pages
 * --------------------------------------------------------------------------------------------- */
typedef struct fp8_req {
    int64_t computed, scheduled, spec;
} fp8_req;

typedef struct fp8_case {
    attn_dtype fmt, q_dtype;
    int64_t num_heads, num_kv_heads, head_size, block_size;
    float k_scale, v_scale, softcap;
    int alibi, sinks, window;
    int per_head; /* 1: per-kv-head scales k_scale·(1 + g), v_scale / (1 + g) through the options write and params */
    const fp8_req *reqs;
    int64_t num_reqs;
} fp8_case;

/* Output / LSE of both fast entries for one context configuration. */
typedef struct fp8_result {
    void *out_plan, *out_less;
    float *lse_plan, *lse_less;
} fp8_result;

static void fp8_result_free(fp8_result *r) { free(r->out_plan), free(r->out_less), free(r->lse_plan), free(r->lse_less); }

/* The step of a case: plan, fp8 cache holding every request's prefix and this step's rows. */
typedef struct fp8_step {
    attn_plan *plan;
    attn_plan_info info;
    int64_t num_blocks;
    uint8_t *cache;
    void *q;
    float alibi[16], sinks[16];
    float k_scales[16], v_scales[16]; /* per-head case: [num_kv_heads] */
    attn_params params;
} fp8_step;

/* The fp8 scale of kv head g of a case (the scalar, or its per-head value). */
static float fp8_k_scale(const fp8_case *k, int64_t g) { return k->per_head ? k->k_scale * (float)(1 + g) : k->k_scale; }
static float fp8_v_scale(const fp8_case *k, int64_t g) { return k->per_head ? k->v_scale / (float)(1 + g) : k->v_scale; }

/* A cache write of the case: attn_reshape_and_cache_scaled, or the options entry with per-head arrays. */
static attn_status fp8_write(attn_ctx *ctx, const fp8_case *k, const fp8_step *s, const attn_tensor *tk,
                             const attn_tensor *tv, attn_tensor *tc, const attn_tensor *ts) {
    if (!k->per_head) return attn_reshape_and_cache_scaled(ctx, tk, tv, tc, ts, k->k_scale, k->v_scale);
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    o.k_scale = 0.0f, o.v_scale = NAN; /* not read: the arrays replace them */
    o.k_scales = s->k_scales, o.v_scales = s->v_scales;
    return attn_reshape_and_cache_ex(ctx, tk, tv, tc, ts, &o);
}

static void fp8_step_build(attn_ctx *ctx, const fp8_case *k, uint64_t seed, fp8_step *s) {
    th_rng rng;
    th_rng_seed(&rng, seed);
    const int64_t Hk = k->num_kv_heads, D = k->head_size, BS = k->block_size, H = k->num_heads;
    int64_t total_blocks = 2, max_blocks = 1;
    for (int64_t i = 0; i < k->num_reqs; i++) {
        const int64_t need = (k->reqs[i].computed + k->reqs[i].scheduled + BS - 1) / BS + 1;
        total_blocks += need;
        if (need > max_blocks) max_blocks = need;
    }
    s->num_blocks = total_blocks;
    for (int64_t g = 0; g < Hk; g++) s->k_scales[g] = fp8_k_scale(k, g), s->v_scales[g] = fp8_v_scale(k, g);
    const size_t n_cache = (size_t)(2 * total_blocks * BS * Hk * D);
    s->cache = malloc(n_cache);
    for (size_t i = 0; i < n_cache; i++) s->cache[i] = (uint8_t)th_rng_int(&rng, 0, 255); /* garbage, NaN codes too */
    /* shuffled distinct blocks per request */
    int32_t *pool = malloc((size_t)total_blocks * sizeof(int32_t));
    for (int64_t i = 0; i < total_blocks; i++) pool[i] = (int32_t)i;
    for (int64_t i = total_blocks - 1; i > 0; i--) {
        const int64_t j = th_rng_int(&rng, 0, i);
        const int32_t t = pool[i];
        pool[i] = pool[j], pool[j] = t;
    }
    attn_request *ar = calloc((size_t)k->num_reqs, sizeof *ar);
    int64_t next = 0;
    for (int64_t i = 0; i < k->num_reqs; i++) {
        const int64_t need = (k->reqs[i].computed + k->reqs[i].scheduled + BS - 1) / BS + 1;
        ar[i].num_computed_tokens = k->reqs[i].computed;
        ar[i].num_scheduled_tokens = k->reqs[i].scheduled;
        ar[i].num_spec_tokens = k->reqs[i].spec;
        ar[i].kind = ATTN_REQUEST_DECODER;
        ar[i].block_ids = pool + next;
        ar[i].num_block_ids = need;
        next += need;
    }
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = (int32_t)total_blocks, cfg.block_size = (int32_t)BS;
    cfg.num_heads = (int32_t)H, cfg.num_kv_heads = (int32_t)Hk, cfg.head_size = (int32_t)D;
    cfg.max_blocks_per_req = (int32_t)max_blocks, cfg.num_speculative_tokens = 3;
    assert_int_equal(attn_plan_create(&cfg, ar, k->num_reqs, &s->plan), ATTN_STATUS_OK);
    attn_plan_get_info(s->plan, &s->info);
    /* prefixes written through the fast cache write (checked bitwise against the oracle's above) */
    int64_t cs[5] = {2, total_blocks, BS, Hk, D};
    attn_tensor tc = attn_tensor_make(s->cache, k->fmt, 5, cs);
    const int64_t w = Hk * D;
    for (int64_t i = 0; i < k->num_reqs; i++) {
        const int64_t n = k->reqs[i].computed;
        if (n == 0) continue;
        float *kr = malloc((size_t)(n * w) * sizeof(float)), *vr = malloc((size_t)(n * w) * sizeof(float));
        int64_t *slots = malloc((size_t)n * sizeof(int64_t));
        for (int64_t e = 0; e < n * w; e++) kr[e] = (float)th_rng_range(&rng, -2, 2);
        for (int64_t e = 0; e < n * w; e++) vr[e] = (float)th_rng_range(&rng, -1, 1);
        for (int64_t p = 0; p < n; p++) slots[p] = (int64_t)ar[i].block_ids[p / BS] * BS + p % BS;
        int64_t rs[3] = {n, Hk, D}, ss[1] = {n};
        attn_tensor tk = attn_tensor_make(kr, ATTN_DTYPE_F32, 3, rs), tv = attn_tensor_make(vr, ATTN_DTYPE_F32, 3, rs);
        attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
        assert_int_equal(fp8_write(ctx, k, s, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
        free(kr), free(vr), free(slots);
    }
    /* this step's rows (bf16 key/value, as a bf16 model hands them) through the plan's slot_mapping */
    const int64_t T = s->info.num_tokens;
    void *kn = th_alloc_nan(ATTN_DTYPE_BF16, (size_t)(T * w)), *vn = th_alloc_nan(ATTN_DTYPE_BF16, (size_t)(T * w));
    for (int64_t e = 0; e < T * w; e++) th_set(kn, ATTN_DTYPE_BF16, (size_t)e, (float)th_rng_range(&rng, -2, 2));
    for (int64_t e = 0; e < T * w; e++) th_set(vn, ATTN_DTYPE_BF16, (size_t)e, (float)th_rng_range(&rng, -1, 1));
    int64_t rs[3] = {T, Hk, D}, ss[1] = {T};
    attn_tensor tk = attn_tensor_make(kn, ATTN_DTYPE_BF16, 3, rs), tv = attn_tensor_make(vn, ATTN_DTYPE_BF16, 3, rs);
    attn_tensor ts = attn_tensor_make((void *)s->info.slot_mapping, ATTN_DTYPE_I64, 1, ss);
    assert_int_equal(fp8_write(ctx, k, s, &tk, &tv, &tc, &ts), ATTN_STATUS_OK);
    free(kn), free(vn);
    s->q = th_alloc_fill(&rng, k->q_dtype, (size_t)(T * H * D), -1.5, 1.5);
    attn_params_init(&s->params);
    s->params.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    s->params.k_scale = k->k_scale, s->params.v_scale = k->v_scale;
    if (k->per_head) {
        s->params.k_scale = -1.0f, s->params.v_scale = INFINITY; /* not read: the arrays replace them */
        s->params.k_scales = s->k_scales, s->params.v_scales = s->v_scales;
    }
    s->params.softcap = k->softcap;
    for (int64_t h = 0; h < H; h++) s->alibi[h] = 0.05f * (float)(h + 1), s->sinks[h] = (float)th_rng_range(&rng, -1, 2);
    if (k->alibi) s->params.alibi_slopes = s->alibi;
    if (k->sinks) s->params.sinks = s->sinks;
    if (k->window) s->params.window_left = 100, s->params.window_right = 0;
    free(ar), free(pool);
}

static void fp8_step_free(fp8_step *s) {
    attn_plan_free(s->plan);
    free(s->cache), free(s->q);
}

/* Views of the step's metadata for the plan-less entries. */
static void fp8_meta(const fp8_step *s, attn_tensor *qsl, attn_tensor *sl, attn_tensor *bt) {
    int64_t n1[1] = {s->info.num_reqs + 1}, n0[1] = {s->info.num_reqs}, b2[2] = {s->info.num_reqs, s->info.max_blocks_per_req};
    *qsl = attn_tensor_make((void *)s->info.query_start_loc, ATTN_DTYPE_I32, 1, n1);
    *sl = attn_tensor_make((void *)s->info.seq_lens, ATTN_DTYPE_I32, 1, n0);
    *bt = attn_tensor_make((void *)s->info.block_table, ATTN_DTYPE_I32, 2, b2);
}

static void fp8_run_fast(attn_ctx *ctx, const fp8_case *k, const fp8_step *s, fp8_result *r) {
    const int64_t T = s->info.num_tokens, H = k->num_heads, D = k->head_size;
    const size_t n = (size_t)(T * H * D);
    r->out_plan = th_alloc_nan(k->q_dtype, n), r->out_less = th_alloc_nan(k->q_dtype, n);
    r->lse_plan = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T)), r->lse_less = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    int64_t qs[3] = {T, H, D}, ls[2] = {H, T}, cs[5] = {2, s->num_blocks, k->block_size, k->num_kv_heads, D};
    attn_tensor tq = attn_tensor_make(s->q, k->q_dtype, 3, qs), tc = attn_tensor_make(s->cache, k->fmt, 5, cs);
    attn_tensor top = attn_tensor_make(r->out_plan, k->q_dtype, 3, qs), tol = attn_tensor_make(r->out_less, k->q_dtype, 3, qs);
    attn_tensor tlp = attn_tensor_make(r->lse_plan, ATTN_DTYPE_F32, 2, ls), tll = attn_tensor_make(r->lse_less, ATTN_DTYPE_F32, 2, ls);
    const size_t ws_size = attn_plan_workspace_size(s->plan);
    void *ws = ws_size ? aligned_alloc(64, (ws_size + 63) & ~(size_t)63) : NULL;
    attn_status st = attn_forward_paged(ctx, s->plan, &tq, NULL, NULL, &tc, &s->params, &top, &tlp, ws, ws_size);
    if (st != ATTN_STATUS_OK) fprintf(stderr, "attn_forward_paged: %s\n", attn_last_error());
    assert_int_equal(st, ATTN_STATUS_OK);
    free(ws);
    attn_tensor qsl, sl, bt;
    fp8_meta(s, &qsl, &sl, &bt);
    st = attn_paged_attention(ctx, &tq, &tc, &qsl, &sl, &bt, &s->params, &tol, &tll);
    if (st != ATTN_STATUS_OK) fprintf(stderr, "attn_paged_attention: %s\n", attn_last_error());
    assert_int_equal(st, ATTN_STATUS_OK);
}

static int fp8_bitwise(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Checks one case on every usable ISA and thread counts 1, 2, 3. */
static void fp8_check_case(const fp8_case *k, uint64_t seed) {
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    fp8_step s;
    fp8_step_build(ctx, k, seed, &s);
    const int64_t T = s.info.num_tokens, H = k->num_heads, D = k->head_size, Hk = k->num_kv_heads, BS = k->block_size;
    const size_t n = (size_t)(T * H * D), qes = attn_dtype_size(k->q_dtype);
    /* oracle 1: the fp8 cache, dequantized by the oracle (decode·scale in double) */
    void *out_ref = th_alloc_nan(k->q_dtype, n);
    float *lse_ref = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    int64_t qs[3] = {T, H, D}, ls[2] = {H, T}, cs[5] = {2, s.num_blocks, BS, Hk, D};
    attn_tensor tq = attn_tensor_make(s.q, k->q_dtype, 3, qs), tc = attn_tensor_make(s.cache, k->fmt, 5, cs);
    attn_tensor tor = attn_tensor_make(out_ref, k->q_dtype, 3, qs), tlr = attn_tensor_make(lse_ref, ATTN_DTYPE_F32, 2, ls);
    attn_tensor qsl, sl, bt;
    fp8_meta(&s, &qsl, &sl, &bt);
    assert_int_equal(attn_ref_paged_attention(&tq, &tc, &qsl, &sl, &bt, &s.params, &tor, &tlr), ATTN_STATUS_OK);
    /* oracle 2: an f32 cache holding decode(bits)·scale (what the fp8 cache means to vLLM), scales ignored */
    const size_t n_cache = (size_t)(2 * s.num_blocks * BS * Hk * D), half = n_cache / 2;
    float *deq = malloc(n_cache * sizeof(float));
    for (size_t i = 0; i < n_cache; i++) {
        const int64_t g = (int64_t)(i / (size_t)D) % Hk; /* contiguous [2, NB, BS, Hk, D] */
        deq[i] = (float)((double)attn_fp8_to_float(k->fmt, s.cache[i]) * (i < half ? fp8_k_scale(k, g) : fp8_v_scale(k, g)));
    }
    void *out_deq = th_alloc_nan(k->q_dtype, n);
    float *lse_deq = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    attn_tensor tcd = attn_tensor_make(deq, ATTN_DTYPE_F32, 5, cs);
    attn_tensor tod = attn_tensor_make(out_deq, k->q_dtype, 3, qs), tld = attn_tensor_make(lse_deq, ATTN_DTYPE_F32, 2, ls);
    attn_params pf = s.params;
    pf.k_scale = 0.0f, pf.v_scale = NAN; /* ignored for an f32 cache, as vLLM ignores them for "auto" */
    const float zeros[16] = {0};
    pf.k_scales = pf.v_scales = zeros; /* ignored too */
    assert_int_equal(attn_ref_paged_attention(&tq, &tcd, &qsl, &sl, &bt, &pf, &tod, &tld), ATTN_STATUS_OK);
    /* the oracle's tolerance for q's dtype, widened for logits up to Σ|scale·q·k| <= 3·sqrt(D) (|q| <= 1.5,
     * |k| <= 2 after dequantization): the fast path folds k_scale into the query pre-scale in float32 */
    const th_tol tol = th_tol_for_logits(k->q_dtype, 3.0 * sqrt((double)D));
    size_t bad = 0;
    double err = th_compare(&tod, &tor, th_tol_for(k->q_dtype), 1.0, &bad); /* the two oracles agree */
    assert_int_equal(bad, 0);
    err = th_compare_lse(&tld, &tlr, th_tol_for(k->q_dtype), &bad);
    assert_int_equal(bad, 0);
    for (int32_t isa = 0; isa < attn_isa_count(); isa++) {
        const char *name = attn_isa_name(isa);
        if (!attn_isa_available(name)) continue;
        assert_int_equal(attn_ctx_set_isa(ctx, name), ATTN_STATUS_OK);
        fp8_result base;
        memset(&base, 0, sizeof base);
        for (int32_t threads = 1; threads <= 3; threads++) {
            assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
            fp8_result r;
            fp8_run_fast(ctx, k, &s, &r);
            attn_tensor top = attn_tensor_make(r.out_plan, k->q_dtype, 3, qs), tol_ = attn_tensor_make(r.out_less, k->q_dtype, 3, qs);
            attn_tensor tlp = attn_tensor_make(r.lse_plan, ATTN_DTYPE_F32, 2, ls);
            if (threads == 1) {
                err = th_compare(&top, &tor, tol, 1.0, &bad);
                if (bad)
                    fprintf(stderr, "%s %s q %s: fp8 paged vs oracle: %zu bad, max err %g\n", name,
                            attn_dtype_name(k->fmt), attn_dtype_name(k->q_dtype), bad, err);
                assert_int_equal(bad, 0);
                err = th_compare(&top, &tod, tol, 1.0, &bad);
                assert_int_equal(bad, 0);
                err = th_compare_lse(&tlp, &tlr, tol, &bad);
                if (bad) fprintf(stderr, "%s: fp8 paged lse vs oracle: %zu bad, max err %g\n", name, bad, err);
                assert_int_equal(bad, 0);
                /* plan path == plan-less path, bitwise */
                assert_true(fp8_bitwise(r.out_plan, r.out_less, n * qes));
                assert_true(fp8_bitwise(r.lse_plan, r.lse_less, (size_t)(H * T) * sizeof(float)));
                (void)tol_;
                base = r;
                continue;
            }
            /* bitwise identical for every thread count (split-KV partitions fixed by the problem) */
            assert_true(fp8_bitwise(r.out_plan, base.out_plan, n * qes));
            assert_true(fp8_bitwise(r.out_less, base.out_less, n * qes));
            assert_true(fp8_bitwise(r.lse_plan, base.lse_plan, (size_t)(H * T) * sizeof(float)));
            assert_true(fp8_bitwise(r.lse_less, base.lse_less, (size_t)(H * T) * sizeof(float)));
            fp8_result_free(&r);
        }
        fp8_result_free(&base);
        if (getenv("ATTN_TEST_ONE_ISA")) break;
    }
    free(out_ref), free(lse_ref), free(deq), free(out_deq), free(lse_deq);
    fp8_step_free(&s);
    attn_ctx_destroy(ctx);
}

/* decode (one long context: split-KV partitions), spec decode */
static const fp8_req reqs_decode[] = {{1100, 1, 0}, {37, 1, 0}, {40, 3, 2}, {600, 1, 0}};
/* prefill over a cached prefix, fresh prefill */
static const fp8_req reqs_prefix[] = {{37, 50, 0}, {0, 33, 0}};
/* chunked / mixed: decodes, a partial prefill of a long context, a fresh prefill */
static const fp8_req reqs_mixed[] = {{700, 1, 0}, {1030, 20, 0}, {12, 2, 1}, {0, 40, 0}, {64, 64, 0}};
/* small shapes for the sanitizer tier */
static const fp8_req reqs_small[] = {{520, 1, 0}, {20, 9, 0}, {0, 5, 0}};

static void run_cases(const fp8_req *reqs, int64_t num_reqs, uint64_t seed) {
    const int small = th_test_small();
    for (int f = 0; f < 2; f++)
        for (int qd = 0; qd < 2; qd++) {
            fp8_case k;
            memset(&k, 0, sizeof k);
            k.fmt = fp8_formats[f];
            k.q_dtype = qd == 0 ? ATTN_DTYPE_F32 : ATTN_DTYPE_BF16;
            k.num_heads = 8, k.num_kv_heads = 2, k.head_size = (f == 0) ? 72 : 64;
            k.block_size = qd == 0 ? 16 : 5;
            k.k_scale = f == 0 ? 0.0125f : 3.0f, k.v_scale = f == 0 ? 0.02f : 0.5f;
            k.reqs = small ? reqs_small : reqs;
            k.num_reqs = small ? 3 : num_reqs;
            fp8_check_case(&k, seed + (uint64_t)(f * 2 + qd));
        }
}

static void test_fp8_decode(void **state) {
    (void)state;
    run_cases(reqs_decode, 4, 100);
}

static void test_fp8_prefill_prefix(void **state) {
    (void)state;
    run_cases(reqs_prefix, 2, 200);
}

static void test_fp8_chunked(void **state) {
    (void)state;
    run_cases(reqs_mixed, 5, 300);
}

/* With k_scale = v_scale = 1 an fp8 cache means exactly the floats decode(bits): the fast paths on it are bitwise
 * equal to the fast paths on an f32 cache and on a bf16 cache holding those values (every E4M3 / E5M2 value, NaN
 * and inf included, is a bf16 value), on every ISA and thread count: the fp8 rows are widened exactly wherever
 * they are read (to bf16 rows for the token-major decode schedule, to f32 rows for the converted tiles), and
 * nothing else differs. Decodes, spec decodes, a partial and a fresh prefill in one step (both schedules). */
static void test_fp8_equals_float_caches(void **state) {
    (void)state;
    static const fp8_req reqs[] = {{700, 1, 0}, {130, 1, 0}, {40, 3, 2}, {90, 20, 0}, {0, 17, 0}};
    static const fp8_req reqs_small_eq[] = {{130, 1, 0}, {20, 3, 2}, {0, 9, 0}};
    const int small = th_test_small();
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    for (int f = 0; f < 2; f++) {
        fp8_case k;
        memset(&k, 0, sizeof k);
        k.fmt = fp8_formats[f];
        k.q_dtype = f == 0 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        k.num_heads = 8, k.num_kv_heads = 2, k.head_size = f == 0 ? 128 : 72, k.block_size = 16;
        k.k_scale = k.v_scale = 1.0f;
        k.reqs = small ? reqs_small_eq : reqs;
        k.num_reqs = small ? 3 : 5;
        fp8_step s;
        fp8_step_build(ctx, &k, 700 + (uint64_t)f, &s);
        const int64_t T = s.info.num_tokens, H = k.num_heads, D = k.head_size;
        const size_t n = (size_t)(T * H * D), qes = attn_dtype_size(k.q_dtype);
        const size_t n_cache = (size_t)(2 * s.num_blocks * k.block_size * k.num_kv_heads * D);
        float *c32 = malloc(n_cache * sizeof(float));
        uint16_t *c16 = malloc(n_cache * sizeof(uint16_t));
        for (size_t i = 0; i < n_cache; i++) {
            c32[i] = attn_fp8_to_float(k.fmt, s.cache[i]);
            th_set(c16, ATTN_DTYPE_BF16, i, c32[i]);
            assert_true(same_float(th_get(c16, ATTN_DTYPE_BF16, i), c32[i])); /* exact */
        }
        int64_t qs[3] = {T, H, D}, ls[2] = {H, T}, cs[5] = {2, s.num_blocks, k.block_size, k.num_kv_heads, D};
        attn_tensor tq = attn_tensor_make(s.q, k.q_dtype, 3, qs);
        attn_tensor caches[3] = {attn_tensor_make(s.cache, k.fmt, 5, cs), attn_tensor_make(c32, ATTN_DTYPE_F32, 5, cs),
                                 attn_tensor_make(c16, ATTN_DTYPE_BF16, 5, cs)};
        attn_tensor qsl, sl, bt;
        fp8_meta(&s, &qsl, &sl, &bt);
        const size_t ws_size = attn_plan_workspace_size(s.plan);
        void *ws = ws_size ? aligned_alloc(64, (ws_size + 63) & ~(size_t)63) : NULL;
        void *out[3][2];
        float *lse[3][2];
        for (int c = 0; c < 3; c++)
            for (int e = 0; e < 2; e++)
                out[c][e] = th_alloc_nan(k.q_dtype, n), lse[c][e] = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
        for (int32_t isa = 0; isa < attn_isa_count(); isa++) {
            const char *name = attn_isa_name(isa);
            if (!attn_isa_available(name)) continue;
            assert_int_equal(attn_ctx_set_isa(ctx, name), ATTN_STATUS_OK);
            for (int32_t threads = 1; threads <= 2; threads++) {
                assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
                for (int c = 0; c < 3; c++) {
                    attn_tensor to0 = attn_tensor_make(out[c][0], k.q_dtype, 3, qs), to1 = attn_tensor_make(out[c][1], k.q_dtype, 3, qs);
                    attn_tensor tl0 = attn_tensor_make(lse[c][0], ATTN_DTYPE_F32, 2, ls), tl1 = attn_tensor_make(lse[c][1], ATTN_DTYPE_F32, 2, ls);
                    assert_int_equal(attn_forward_paged(ctx, s.plan, &tq, NULL, NULL, &caches[c], &s.params, &to0, &tl0, ws, ws_size),
                                     ATTN_STATUS_OK);
                    assert_int_equal(attn_paged_attention(ctx, &tq, &caches[c], &qsl, &sl, &bt, &s.params, &to1, &tl1),
                                     ATTN_STATUS_OK);
                }
                for (int c = 1; c < 3; c++)
                    for (int e = 0; e < 2; e++) {
                        if (!fp8_bitwise(out[0][e], out[c][e], n * qes) ||
                            !fp8_bitwise(lse[0][e], lse[c][e], (size_t)(H * T) * sizeof(float)))
                            fprintf(stderr, "%s %s, %d threads, %s: fp8 cache != %s cache holding its values\n", name,
                                    attn_dtype_name(k.fmt), threads, e ? "plan-less" : "plan", c == 1 ? "f32" : "bf16");
                        assert_true(fp8_bitwise(out[0][e], out[c][e], n * qes));
                        assert_true(fp8_bitwise(lse[0][e], lse[c][e], (size_t)(H * T) * sizeof(float)));
                    }
            }
        }
        for (int c = 0; c < 3; c++)
            for (int e = 0; e < 2; e++) free(out[c][e]), free(lse[c][e]);
        free(ws), free(c32), free(c16);
        fp8_step_free(&s);
    }
    attn_ctx_destroy(ctx);
}

/* Per-head scales: decode, prefix and mixed steps, both formats, against both oracles (fp8_check_case). */
static void test_fp8_per_head(void **state) {
    (void)state;
    const int small = th_test_small();
    for (int f = 0; f < 2; f++) {
        fp8_case k;
        memset(&k, 0, sizeof k);
        k.fmt = fp8_formats[f], k.q_dtype = f == 0 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
        k.num_heads = 8, k.num_kv_heads = 4, k.head_size = 64, k.block_size = 16;
        k.k_scale = f == 0 ? 0.0125f : 2.0f, k.v_scale = f == 0 ? 0.04f : 0.5f;
        k.per_head = 1;
        k.reqs = small ? reqs_small : reqs_mixed;
        k.num_reqs = small ? 3 : 5;
        fp8_check_case(&k, 900 + (uint64_t)f);
    }
}

/* Per-head arrays whose entries all equal the scalar: bitwise the scalar call (fast paths and oracle), i.e. the
 * scalar case is the per-head case with a constant array. */
static void test_fp8_per_head_equal_scalar(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    fp8_case k;
    memset(&k, 0, sizeof k);
    k.fmt = ATTN_DTYPE_FP8_E4M3, k.q_dtype = ATTN_DTYPE_BF16;
    k.num_heads = 6, k.num_kv_heads = 3, k.head_size = 40, k.block_size = 8;
    k.k_scale = 0.03f, k.v_scale = 0.7f;
    k.reqs = reqs_small, k.num_reqs = 3;
    fp8_step s;
    fp8_step_build(ctx, &k, 950, &s);
    fp8_result a, b;
    fp8_run_fast(ctx, &k, &s, &a);
    const float ks[3] = {0.03f, 0.03f, 0.03f}, vs[3] = {0.7f, 0.7f, 0.7f};
    s.params.k_scales = ks, s.params.v_scales = vs;
    fp8_run_fast(ctx, &k, &s, &b);
    const size_t n = (size_t)(s.info.num_tokens * k.num_heads * k.head_size) * attn_dtype_size(k.q_dtype);
    const size_t nl = (size_t)(s.info.num_tokens * k.num_heads) * sizeof(float);
    assert_true(fp8_bitwise(a.out_plan, b.out_plan, n) && fp8_bitwise(a.out_less, b.out_less, n));
    assert_true(fp8_bitwise(a.lse_plan, b.lse_plan, nl) && fp8_bitwise(a.lse_less, b.lse_less, nl));
    /* a bad per-head entry is named and nothing is written */
    const float bad[3] = {0.03f, 0.03f, -2.0f};
    s.params.k_scales = bad;
    memset(b.out_less, 0x5E, n);
    int64_t qs[3] = {s.info.num_tokens, k.num_heads, k.head_size};
    int64_t cs[5] = {2, s.num_blocks, k.block_size, k.num_kv_heads, k.head_size};
    attn_tensor tq = attn_tensor_make(s.q, k.q_dtype, 3, qs), tc = attn_tensor_make(s.cache, k.fmt, 5, cs);
    attn_tensor to = attn_tensor_make(b.out_less, k.q_dtype, 3, qs);
    attn_tensor qsl, sl, bt;
    fp8_meta(&s, &qsl, &sl, &bt);
    assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &qsl, &sl, &bt, &s.params, &to, NULL),
                     ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "params.k_scales[2]=-2: expected a finite value > 0 for the fp8_e4m3"));
    for (size_t i = 0; i < n; i++) assert_int_equal(((unsigned char *)b.out_less)[i], 0x5E);
    fp8_result_free(&a), fp8_result_free(&b);
    fp8_step_free(&s);
    attn_ctx_destroy(ctx);
}

/* Options fold correctly with the scales: soft-cap (k_scale inside the tanh argument), ALiBi, sinks, window. */
static void test_fp8_options(void **state) {
    (void)state;
    const fp8_req reqs[] = {{300, 1, 0}, {50, 17, 0}};
    fp8_case k;
    memset(&k, 0, sizeof k);
    k.fmt = ATTN_DTYPE_FP8_E4M3, k.q_dtype = ATTN_DTYPE_F32;
    k.num_heads = 4, k.num_kv_heads = 1, k.head_size = 32, k.block_size = 8;
    k.k_scale = 0.25f, k.v_scale = 4.0f;
    k.reqs = reqs, k.num_reqs = 2;
    k.softcap = 5.0f, k.alibi = 1, k.sinks = 1, k.window = 1;
    fp8_check_case(&k, 400);
    k.fmt = ATTN_DTYPE_FP8_E5M2, k.softcap = 0.0f;
    fp8_check_case(&k, 401);
}

/* ---------------------------------------------------------------------------------------------
 * Bad input: nothing written
 * --------------------------------------------------------------------------------------------- */
static void expect_fail(attn_status st, attn_status want, const char *needle) {
    if (st != want || !strstr(attn_last_error(), needle))
        fprintf(stderr, "status %d (want %d), message \"%s\" (want \"%s\")\n", (int)st, (int)want, attn_last_error(), needle);
    assert_int_equal(st, want);
    assert_non_null(strstr(attn_last_error(), needle));
}

static void test_fp8_bad_inputs(void **state) {
    (void)state;
    attn_ctx *ctx;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    const int64_t T = 3, Hk = 2, D = 16, NB = 2, BS = 4, H = 4;
    float key[3 * 2 * 16], val[3 * 2 * 16];
    for (int i = 0; i < T * Hk * D; i++) key[i] = (float)i * 0.01f, val[i] = -(float)i * 0.02f;
    uint8_t cache[2 * 2 * 4 * 2 * 16], before[sizeof cache];
    for (size_t i = 0; i < sizeof cache; i++) cache[i] = (uint8_t)(i * 13);
    memcpy(before, cache, sizeof cache);
    int64_t slots[3] = {0, 5, 6};
    int64_t rs[3] = {T, Hk, D}, cs[5] = {2, NB, BS, Hk, D}, ss[1] = {T};
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, rs), tv = attn_tensor_make(val, ATTN_DTYPE_F32, 3, rs);
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_FP8_E4M3, 5, cs);
    attn_tensor ts = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, ss);
    const float bad_scales[] = {0.0f, -1.0f, -0.0f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        expect_fail(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, bad_scales[i], 1.0f),
                    ATTN_STATUS_INVALID_ARGUMENT, "k_scale=");
        expect_fail(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, 1.0f, bad_scales[i]),
                    ATTN_STATUS_INVALID_ARGUMENT, "v_scale=");
        assert_memory_equal(cache, before, sizeof cache);
    }
    /* fp8 key/value rows, a u8 cache, a slot out of range: rejected, nothing written */
    uint8_t k8[3 * 2 * 16] = {0};
    attn_tensor tk8 = attn_tensor_make(k8, ATTN_DTYPE_FP8_E4M3, 3, rs);
    expect_fail(attn_reshape_and_cache_scaled(ctx, &tk8, &tk8, &tc, &ts, 1.0f, 1.0f), ATTN_STATUS_INVALID_ARGUMENT,
                "key: dtype fp8_e4m3");
    attn_tensor tcu = attn_tensor_make(cache, ATTN_DTYPE_U8, 5, cs);
    expect_fail(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tcu, &ts, 1.0f, 1.0f), ATTN_STATUS_INVALID_ARGUMENT,
                "kv_cache: dtype u8");
    slots[2] = NB * BS;
    expect_fail(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, 0.5f, 0.5f), ATTN_STATUS_INVALID_ARGUMENT,
                "slot_mapping: entry 2");
    assert_memory_equal(cache, before, sizeof cache);
    slots[2] = 6;
    /* a float cache ignores the scales (vLLM "auto") */
    float fcache[2 * 2 * 4 * 2 * 16];
    memset(fcache, 0, sizeof fcache);
    attn_tensor tcf = attn_tensor_make(fcache, ATTN_DTYPE_F32, 5, cs);
    assert_int_equal(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tcf, &ts, 0.0f, NAN), ATTN_STATUS_OK);
    assert_true(fcache[D] == key[D]); /* token 0, head 1, element 0: unscaled */
    /* paged attention: bad scales, fp8 q, key_opt of another dtype */
    assert_int_equal(attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &ts, 0.5f, 0.5f), ATTN_STATUS_OK);
    float q[3 * 4 * 16], out[3 * 4 * 16], lse[4 * 3];
    for (int i = 0; i < T * H * D; i++) q[i] = 0.1f * (float)(i % 7);
    int64_t qs[3] = {T, H, D}, ls[2] = {H, T};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs), to = attn_tensor_make(out, ATTN_DTYPE_F32, 3, qs);
    attn_tensor tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
    int32_t qsl[2] = {0, 3}, seq_lens[1] = {7}, btab[2] = {0, 1};
    int64_t n2[1] = {2}, n1[1] = {1}, b2[2] = {1, 2};
    attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, n2), tsl = attn_tensor_make(seq_lens, ATTN_DTYPE_I32, 1, n1);
    attn_tensor tbt = attn_tensor_make(btab, ATTN_DTYPE_I32, 2, b2);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
        memset(out, 0x5A, sizeof out), memset(lse, 0x5A, sizeof lse);
        float out0[sizeof out / sizeof out[0]];
        memcpy(out0, out, sizeof out);
        p.k_scale = bad_scales[i], p.v_scale = 1.0f;
        expect_fail(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_INVALID_ARGUMENT,
                    "params.k_scale=");
        expect_fail(attn_ref_paged_attention(&tq, &tc, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_INVALID_ARGUMENT,
                    "params.k_scale=");
        p.k_scale = 1.0f, p.v_scale = bad_scales[i];
        expect_fail(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_INVALID_ARGUMENT,
                    "params.v_scale=");
        assert_memory_equal(out, out0, sizeof out);
    }
    p.k_scale = p.v_scale = 0.5f;
    assert_int_equal(attn_paged_attention(ctx, &tq, &tc, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_OK);
    uint8_t q8[3 * 4 * 16] = {0};
    attn_tensor tq8 = attn_tensor_make(q8, ATTN_DTYPE_FP8_E4M3, 3, qs);
    expect_fail(attn_paged_attention(ctx, &tq8, &tc, &tqsl, &tsl, &tbt, &p, &to, &tl), ATTN_STATUS_INVALID_ARGUMENT,
                "q: dtype fp8_e4m3");
    /* plan path: an ENCODER_ONLY request's key/value must have the cache dtype */
    attn_plan_config cfg;
    attn_plan_config_init(&cfg);
    cfg.num_blocks = (int32_t)NB, cfg.block_size = (int32_t)BS, cfg.num_heads = (int32_t)H;
    cfg.num_kv_heads = (int32_t)Hk, cfg.head_size = (int32_t)D, cfg.max_blocks_per_req = 2;
    attn_request rq;
    memset(&rq, 0, sizeof rq);
    rq.num_scheduled_tokens = T, rq.kind = ATTN_REQUEST_ENCODER_ONLY;
    attn_plan *plan;
    assert_int_equal(attn_plan_create(&cfg, &rq, 1, &plan), ATTN_STATUS_OK);
    memset(out, 0x5A, sizeof out);
    float out0[sizeof out / sizeof out[0]];
    memcpy(out0, out, sizeof out);
    const size_t ws_size = attn_plan_workspace_size(plan);
    void *ws = ws_size ? aligned_alloc(64, (ws_size + 63) & ~(size_t)63) : NULL;
    expect_fail(attn_forward_paged(ctx, plan, &tq, &tk, &tv, &tc, &p, &to, &tl, ws, ws_size),
                ATTN_STATUS_INVALID_ARGUMENT, "key: dtype f32, expected fp8_e4m3");
    assert_memory_equal(out, out0, sizeof out);
    p.v_scale = -2.0f;
    expect_fail(attn_forward_paged(ctx, plan, &tq, &tk8, &tk8, &tc, &p, &to, &tl, ws, ws_size),
                ATTN_STATUS_INVALID_ARGUMENT, "params.v_scale=-2");
    assert_memory_equal(out, out0, sizeof out);
    p.v_scale = 0.5f; /* fp8 key_opt / value_opt with the cache's scales */
    assert_int_equal(attn_forward_paged(ctx, plan, &tq, &tk8, &tk8, &tc, &p, &to, &tl, ws, ws_size), ATTN_STATUS_OK);
    free(ws);
    attn_plan_free(plan);
    /* the capability query declares both fp8 formats */
    attn_capabilities caps;
    assert_int_equal(attn_capabilities_get(&caps, sizeof caps), ATTN_STATUS_OK);
    assert_true(caps.kv_cache_dtypes & (1u << ATTN_DTYPE_FP8_E4M3));
    assert_true(caps.kv_cache_dtypes & (1u << ATTN_DTYPE_FP8_E5M2));
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_codecs),          cmocka_unit_test(test_fp8_cache_write),
        cmocka_unit_test(test_fp8_decode),          cmocka_unit_test(test_fp8_prefill_prefix),
        cmocka_unit_test(test_fp8_chunked),         cmocka_unit_test(test_fp8_options),
        cmocka_unit_test(test_fp8_per_head),        cmocka_unit_test(test_fp8_per_head_equal_scalar),
        cmocka_unit_test(test_fp8_bad_inputs),      cmocka_unit_test(test_fp8_equals_float_caches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
