/*
 * serving_fixture.h — helpers shared by the serving tests (test_paged.c, test_serving_invariance.c): a
 * random paged cache, distinct shuffled block ids, running a plan step (reshape_and_cache of the new rows,
 * then attn_forward_paged with a caller workspace), and the per-request oracle: gather the request's keys
 * through its block ids into contiguous rows and run attn_forward_varlen (bitwise reference) and
 * attn_ref_forward_varlen (tolerance reference) on that one request alone.
 */
#ifndef ATTN_TEST_SERVING_FIXTURE_H
#define ATTN_TEST_SERVING_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ref/ref.h"

typedef struct sf_cache {
    attn_dtype dtype;
    int64_t num_blocks, block_size, num_kv_heads, head_size;
    void *data;        /* contiguous [2, num_blocks, block_size, num_kv_heads, head_size] */
    attn_tensor t;
} sf_cache;

static inline void sf_cache_init(sf_cache *c, th_rng *rng, attn_dtype dtype, int64_t num_blocks, int64_t block_size,
                                 int64_t num_kv_heads, int64_t head_size) {
    c->dtype = dtype, c->num_blocks = num_blocks, c->block_size = block_size;
    c->num_kv_heads = num_kv_heads, c->head_size = head_size;
    const size_t n = (size_t)(2 * num_blocks * block_size * num_kv_heads * head_size);
    c->data = th_alloc_fill(rng, dtype, n, -1.5, 1.5); /* every block holds random "garbage" */
    int64_t shape[5] = {2, num_blocks, block_size, num_kv_heads, head_size};
    c->t = attn_tensor_make(c->data, dtype, 5, shape);
}

/* n distinct block ids in random order from [0, num_blocks). */
static inline void sf_shuffled_blocks(th_rng *rng, int64_t num_blocks, int64_t n, int32_t *out) {
    int32_t *all = (int32_t *)malloc((size_t)num_blocks * sizeof(int32_t));
    for (int64_t i = 0; i < num_blocks; i++) all[i] = (int32_t)i;
    for (int64_t i = num_blocks - 1; i > 0; i--) {
        int64_t j = th_rng_int(rng, 0, i);
        int32_t t = all[i];
        all[i] = all[j], all[j] = t;
    }
    memcpy(out, all, (size_t)n * sizeof(int32_t));
    free(all);
}

/* Runs one plan step on rows already in plan order: writes key/value via the plan's slot_mapping, then
 * attention. q/k/v/out/lse are contiguous [T, H, D] (lse [Hq, T]) buffers; lse may be NULL. */
static inline attn_status sf_run_plan(attn_ctx *ctx, const attn_plan *plan, sf_cache *c, attn_dtype q_dtype,
                                      int64_t num_heads, void *q, void *k, void *v, const attn_params *params,
                                      void *out, float *lse) {
    attn_plan_info info;
    attn_status st = attn_plan_get_info(plan, &info);
    if (st != ATTN_STATUS_OK) return st;
    const int64_t T = info.num_tokens, D = c->head_size;
    int64_t qs[3] = {T, num_heads, D}, ks[3] = {T, c->num_kv_heads, D}, ss[1] = {T}, ls[2] = {num_heads, T};
    attn_tensor tq = attn_tensor_make(q, q_dtype, 3, qs), to = attn_tensor_make(out, q_dtype, 3, qs);
    attn_tensor tk = attn_tensor_make(k, c->dtype, 3, ks), tv = attn_tensor_make(v, c->dtype, 3, ks);
    attn_tensor tslot = attn_tensor_make((void *)info.slot_mapping, ATTN_DTYPE_I64, 1, ss);
    attn_tensor tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
    st = attn_reshape_and_cache(ctx, &tk, &tv, &c->t, &tslot);
    if (st != ATTN_STATUS_OK) return st;
    size_t ws_size = attn_plan_workspace_size(plan);
    void *ws = ws_size ? aligned_alloc(64, ws_size) : NULL;
    st = attn_forward_paged(ctx, plan, &tq, &tk, &tv, &c->t, params, &to, lse ? &tl : NULL, ws, ws_size);
    free(ws);
    return st;
}

/* Per-request oracle for plan request r: keys from the cache (DECODER, CROSS) or from the request's own
 * rows k/v (ENCODER_ONLY, plan order); runs attn_forward_varlen (into out_fast/lse_fast) and
 * attn_ref_forward_varlen (into out_ref/lse_ref) on that request alone, writing rows [qsl[r], qsl[r+1]) of
 * the contiguous [T, Hq, D] buffers and columns of the [Hq, T] LSE buffers. */
static inline void sf_oracle_request(attn_ctx *ctx, const attn_plan_info *info, int64_t r, const sf_cache *c,
                                     attn_dtype q_dtype, int64_t num_heads, const void *q, const void *k,
                                     const void *v, const attn_params *params, void *out_fast, float *lse_fast,
                                     void *out_ref, float *lse_ref) {
    const int64_t T = info->num_tokens, D = c->head_size, Hk = c->num_kv_heads;
    const int64_t q0 = info->query_start_loc[r], q_len = info->query_start_loc[r + 1] - q0;
    const int64_t seq_len = info->seq_lens[r];
    const size_t qes = attn_dtype_size(q_dtype), kes = attn_dtype_size(c->dtype);
    const size_t kv_bytes = (size_t)(seq_len > 0 ? seq_len : 1) * (size_t)(Hk * D) * kes;
    void *kk = malloc(kv_bytes), *vv = malloc(kv_bytes);
    attn_params p = *params;
    if (info->kinds[r] == ATTN_REQUEST_ENCODER_ONLY) {
        memcpy(kk, (const char *)k + (size_t)(q0 * Hk * D) * kes, (size_t)(seq_len * Hk * D) * kes);
        memcpy(vv, (const char *)v + (size_t)(q0 * Hk * D) * kes, (size_t)(seq_len * Hk * D) * kes);
    } else {
        attn_ref_gather_kv(c->data, c->dtype, c->num_blocks, c->block_size, Hk, D,
                           info->block_table + r * info->max_blocks_per_req, seq_len, kk, vv);
    }
    if (info->kinds[r] != ATTN_REQUEST_DECODER) p.causal = ATTN_CAUSAL_NONE;
    int64_t qs[3] = {q_len, num_heads, D}, ks[3] = {seq_len, Hk, D}, one[1] = {2}, ls[2] = {num_heads, q_len};
    int32_t cu_q[2] = {0, (int32_t)q_len}, cu_k[2] = {0, (int32_t)seq_len};
    attn_tensor tq = attn_tensor_make((char *)q + (size_t)(q0 * num_heads * D) * qes, q_dtype, 3, qs);
    attn_tensor tk = attn_tensor_make(kk, c->dtype, 3, ks), tv = attn_tensor_make(vv, c->dtype, 3, ks);
    attn_tensor tcq = attn_tensor_make(cu_q, ATTN_DTYPE_I32, 1, one), tck = attn_tensor_make(cu_k, ATTN_DTYPE_I32, 1, one);
    attn_tensor tof = attn_tensor_make((char *)out_fast + (size_t)(q0 * num_heads * D) * qes, q_dtype, 3, qs);
    attn_tensor tor = attn_tensor_make((char *)out_ref + (size_t)(q0 * num_heads * D) * qes, q_dtype, 3, qs);
    attn_tensor tlf = attn_tensor_make(lse_fast + q0, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tlr = attn_tensor_make(lse_ref + q0, ATTN_DTYPE_F32, 2, ls);
    tlf.strides[0] = T, tlr.strides[0] = T; /* columns of the [Hq, T] buffers */
    attn_status s1 = attn_forward_varlen(ctx, &tq, &tk, &tv, &tcq, &tck, &p, &tof, &tlf);
    attn_status s2 = attn_ref_forward_varlen(&tq, &tk, &tv, &tcq, &tck, &p, &tor, &tlr);
    if (s1 != ATTN_STATUS_OK || s2 != ATTN_STATUS_OK)
        fprintf(stderr, "sf_oracle_request: request %lld: %s\n", (long long)r, attn_last_error());
    free(kk);
    free(vv);
}

/* Max-abs of a buffer (for the tolerance scale). */
static inline double sf_absmax(const void *buf, attn_dtype dtype, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = th_get(buf, dtype, i);
        if (x < 0) x = -x;
        if (x > m) m = x;
    }
    return m > 0 ? m : 1.0;
}

/* ---- engine-step simulation: per-token values depend only on (request id, position) ---- */
typedef struct sf_req {
    int64_t id;            /* seeds the request's token values                          */
    int64_t computed;      /* num_computed_tokens                                       */
    int64_t scheduled;     /* num_scheduled_tokens                                      */
    int64_t spec;          /* num_spec_tokens                                           */
    int32_t kind;          /* attn_request_kind                                         */
    int64_t enc_len;       /* CROSS: encoder keys                                       */
    const int32_t *blocks; /* block ids                                                 */
    int64_t num_blocks;
} sf_req;

/* Values of token `pos` of request `id`: tag 0 = q [n], 1 = k, 2 = v (n = heads·head_size). */
static inline void sf_token_values(int64_t id, int64_t pos, int tag, int64_t n, float *out) {
    th_rng r;
    th_rng_seed(&r, (uint64_t)(id * 1000003 + pos * 7 + tag) ^ 0xA5A5ull);
    for (int64_t i = 0; i < n; i++) out[i] = (float)th_rng_range(&r, tag == 2 ? -1.0 : -1.5, tag == 2 ? 1.0 : 1.5);
}

/* Writes the cached prefix (DECODER: positions [0, computed); CROSS: [0, enc_len)) into the cache. */
static inline void sf_fill_prefix(sf_cache *c, const sf_req *r) {
    const int64_t n = r->kind == ATTN_REQUEST_CROSS ? r->enc_len : r->kind == ATTN_REQUEST_DECODER ? r->computed : 0;
    const int64_t w = c->num_kv_heads * c->head_size;
    float *kr = (float *)malloc((size_t)w * sizeof(float)), *vr = (float *)malloc((size_t)w * sizeof(float));
    for (int64_t pos = 0; pos < n; pos++) {
        sf_token_values(r->id + (r->kind == ATTN_REQUEST_CROSS ? 500000 : 0), pos, 1, w, kr);
        sf_token_values(r->id + (r->kind == ATTN_REQUEST_CROSS ? 500000 : 0), pos, 2, w, vr);
        int64_t slot = (int64_t)r->blocks[pos / c->block_size] * c->block_size + pos % c->block_size;
        attn_ref_reshape_and_cache(kr, vr, 1, c->num_kv_heads, c->head_size, &slot, c->data, c->dtype, c->num_blocks,
                                   c->block_size);
    }
    free(kr);
    free(vr);
}

typedef struct sf_step {
    attn_plan *plan;
    attn_plan_info info;
    attn_dtype q_dtype;
    int64_t num_heads;
    void *q, *k, *v, *out; /* plan order */
    float *lse;            /* [Hq, T] */
} sf_step;

static inline void sf_step_free(sf_step *s) {
    attn_plan_free(s->plan);
    free(s->q), free(s->k), free(s->v), free(s->out), free(s->lse);
    memset(s, 0, sizeof *s);
}

/* Builds the plan, writes prefixes, generates the new rows in plan order and runs the step. */
static inline attn_status sf_run_step(attn_ctx *ctx, sf_cache *c, const attn_plan_config *cfg, const sf_req *reqs,
                                      int64_t n, attn_dtype q_dtype, const attn_params *params, sf_step *s) {
    memset(s, 0, sizeof *s);
    attn_request *ar = (attn_request *)calloc(n > 0 ? (size_t)n : 1u, sizeof *ar);
    for (int64_t i = 0; i < n; i++) {
        ar[i].num_computed_tokens = reqs[i].computed;
        ar[i].num_scheduled_tokens = reqs[i].scheduled;
        ar[i].num_spec_tokens = reqs[i].spec;
        ar[i].kind = reqs[i].kind;
        ar[i].block_ids = reqs[i].blocks;
        ar[i].num_block_ids = reqs[i].num_blocks;
        ar[i].encoder_len = reqs[i].enc_len;
    }
    attn_status st = attn_plan_create(cfg, ar, n, &s->plan);
    free(ar);
    if (st != ATTN_STATUS_OK) return st;
    attn_plan_get_info(s->plan, &s->info);
    s->q_dtype = q_dtype;
    s->num_heads = cfg->num_heads;
    const int64_t T = s->info.num_tokens > 0 ? s->info.num_tokens : 0;
    const int64_t H = cfg->num_heads, D = cfg->head_size, Hk = cfg->num_kv_heads;
    s->q = th_alloc_nan(q_dtype, (size_t)(T * H * D));
    s->out = th_alloc_nan(q_dtype, (size_t)(T * H * D));
    s->k = th_alloc_nan(c->dtype, (size_t)(T * Hk * D));
    s->v = th_alloc_nan(c->dtype, (size_t)(T * Hk * D));
    s->lse = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    float *row = (float *)malloc((size_t)(H * D) * sizeof(float));
    for (int64_t i = 0; i < n; i++) sf_fill_prefix(c, &reqs[i]);
    for (int64_t i = 0; i < s->info.num_reqs; i++) {
        const sf_req *r = &reqs[s->info.req_order[i]];
        for (int64_t t = s->info.query_start_loc[i]; t < s->info.query_start_loc[i + 1]; t++) {
            const int64_t pos = r->computed + t - s->info.query_start_loc[i];
            sf_token_values(r->id, pos, 0, H * D, row);
            for (int64_t e = 0; e < H * D; e++) th_set(s->q, q_dtype, (size_t)(t * H * D + e), row[e]);
            sf_token_values(r->id, pos, 1, Hk * D, row);
            for (int64_t e = 0; e < Hk * D; e++) th_set(s->k, c->dtype, (size_t)(t * Hk * D + e), row[e]);
            sf_token_values(r->id, pos, 2, Hk * D, row);
            for (int64_t e = 0; e < Hk * D; e++) th_set(s->v, c->dtype, (size_t)(t * Hk * D + e), row[e]);
        }
    }
    free(row);
    return sf_run_plan(ctx, s->plan, c, q_dtype, H, s->q, s->k, s->v, params, s->out, s->lse);
}

/* Plan request index of the request with id `id` (−1 if absent). */
static inline int64_t sf_find(const sf_step *s, const sf_req *reqs, int64_t id) {
    for (int64_t i = 0; i < s->info.num_reqs; i++)
        if (reqs[s->info.req_order[i]].id == id) return i;
    return -1;
}

/* Checks every request of a step: out/LSE bitwise equal to attn_forward_varlen on the gathered keys of
 * the request alone, and within th_tol_for of the oracle. Returns the number of failures. */
static inline int sf_check_step(attn_ctx *ctx, const sf_cache *c, const sf_step *s, const attn_params *params) {
    const int64_t T = s->info.num_tokens, H = s->num_heads, D = c->head_size;
    const size_t n = (size_t)(T * H * D);
    void *of = th_alloc_nan(s->q_dtype, n), *orf = th_alloc_nan(s->q_dtype, n);
    float *lf = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    float *lr = (float *)th_alloc_nan(ATTN_DTYPE_F32, (size_t)(H * T));
    for (int64_t r = 0; r < s->info.num_reqs; r++)
        sf_oracle_request(ctx, &s->info, r, c, s->q_dtype, H, s->q, s->k, s->v, params, of, lf, orf, lr);
    int64_t os[3] = {T, H, D}, ls[2] = {H, T};
    attn_tensor to = attn_tensor_make(s->out, s->q_dtype, 3, os), tf = attn_tensor_make(of, s->q_dtype, 3, os);
    attn_tensor tr = attn_tensor_make(orf, s->q_dtype, 3, os);
    attn_tensor tl = attn_tensor_make(s->lse, ATTN_DTYPE_F32, 2, ls), tlf = attn_tensor_make(lf, ATTN_DTYPE_F32, 2, ls);
    attn_tensor tlr = attn_tensor_make(lr, ATTN_DTYPE_F32, 2, ls);
    int fails = 0;
    if (!th_bitwise_equal(&to, &tf)) fails++, fprintf(stderr, "  paged out != varlen out (bitwise)\n");
    if (!th_bitwise_equal(&tl, &tlf)) fails++, fprintf(stderr, "  paged lse != varlen lse (bitwise)\n");
    size_t bad = 0;
    double err = th_compare(&to, &tr, th_tol_for(s->q_dtype), 1.0, &bad);
    if (bad) fails++, fprintf(stderr, "  paged vs oracle: %zu bad, max err %g\n", bad, err);
    err = th_compare_lse(&tl, &tlr, th_tol_for(s->q_dtype), &bad);
    if (bad) fails++, fprintf(stderr, "  paged lse vs oracle: %zu bad, max err %g\n", bad, err);
    free(of), free(orf), free(lf), free(lr);
    return fails;
}

#endif
