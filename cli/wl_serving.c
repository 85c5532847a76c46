/*
 * wl_serving.c — the built-in 'serving' workload of the `attn` CLI: one LLM-serving engine step
 * over a paged bf16 KV cache (Llama-3-8B attention: 32 query heads, 8 kv heads, head_size 128): 16 decodes
 * at contexts 512..16k (geometric) plus one chunked prefill of 256 tokens over a 2k cached prefix, for
 * block sizes 16 and 128. Rows: the plan build, the decode-only step (DecodeOnly; decode GB/s = bytes of K
 * and V read / time), the chunked prefill alone (ChunkedPrefill) and the whole mixed step. The oracle
 * (attn_ref_paged_attention) checks the last check_rows query rows of every request (bottom-right
 * alignment makes that subset exact). ATTN_TEST_SMALL=1 (the sanitizer and the qemu test tiers) divides the
 * contexts, the prefix and the chunk by 8 (64..2048 keys: the same requests, states and code paths, the long
 * decodes still over several partitions). Client of <attn/attn.h> only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "workload.h"

#define SV_NUM_HEADS 32
#define SV_NUM_KV_HEADS 8
#define SV_HEAD_SIZE 128
#define SV_NUM_DECODES 16
#define SV_PREFIX 2048
#define SV_CHUNK 256

typedef struct sv_world {
    int64_t block_size, num_blocks;
    attn_tensor cache;          /* [2, num_blocks, block_size, 8, 128] bf16                         */
    int64_t computed[SV_NUM_DECODES + 1], scheduled[SV_NUM_DECODES + 1];
    int32_t *block_ids;         /* all requests' ids, shuffled                                      */
    int64_t first_block[SV_NUM_DECODES + 1], num_ids[SV_NUM_DECODES + 1];
    double vmax;
} sv_world;

typedef struct sv_call {        /* one timed forward */
    attn_ctx *ctx;
    attn_plan *plan;
    attn_tensor q, out, lse;
    const attn_tensor *cache;
    void *ws;
    size_t ws_size;
    attn_params params;         /* causal bottom-right                                             */
} sv_call;

static attn_status sv_forward(void *arg) {
    sv_call *c = (sv_call *)arg;
    return attn_forward_paged(c->ctx, c->plan, &c->q, NULL, NULL, c->cache, &c->params, &c->out, &c->lse, c->ws, c->ws_size);
}

typedef struct sv_plan_args {
    attn_plan_config cfg;
    const attn_request *reqs;
    int64_t n;
} sv_plan_args;

static attn_status sv_plan_build(void *arg) {
    sv_plan_args *a = (sv_plan_args *)arg;
    attn_plan *plan = NULL;
    attn_status st = attn_plan_create(&a->cfg, a->reqs, a->n, &plan);
    attn_plan_free(plan);
    return st;
}

static void sv_params(attn_params *p) {
    attn_params_init(p);
    p->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
}

/* Oracle on the last `rows` query rows of every request (all if rows < 0); fills cmp. */
static attn_status sv_check(const sv_world *w, const sv_call *c, const attn_plan_info *info, int64_t rows,
                            attn_cli_cmp *cmp) {
    const int64_t R = info->num_reqs, W = SV_NUM_HEADS * SV_HEAD_SIZE;
    int32_t *qsl = (int32_t *)calloc((size_t)R + 1, sizeof(int32_t));
    int64_t total = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t q_len = info->query_start_loc[r + 1] - info->query_start_loc[r];
        if (rows >= 0 && q_len > rows) q_len = rows;
        total += q_len;
        qsl[r + 1] = (int32_t)total;
    }
    uint16_t *q = (uint16_t *)attn_cli_alloc((size_t)(total * W) * 2), *got = attn_cli_alloc((size_t)(total * W) * 2);
    uint16_t *ref = (uint16_t *)attn_cli_alloc((size_t)(total * W) * 2);
    float *lse_got = (float *)attn_cli_alloc((size_t)(total * SV_NUM_HEADS) * 4);
    float *lse_ref = (float *)attn_cli_alloc((size_t)(total * SV_NUM_HEADS) * 4);
    attn_status st = ATTN_STATUS_OUT_OF_MEMORY;
    if (qsl && q && got && ref && lse_got && lse_ref) {
        const int64_t T = info->num_tokens;
        for (int64_t r = 0; r < R; r++) { /* the last rows of request r */
            const int64_t n = qsl[r + 1] - qsl[r], src = info->query_start_loc[r + 1] - n;
            memcpy(q + qsl[r] * W, (const uint16_t *)c->q.data + src * W, (size_t)(n * W) * 2);
            memcpy(got + qsl[r] * W, (const uint16_t *)c->out.data + src * W, (size_t)(n * W) * 2);
            for (int64_t h = 0; h < SV_NUM_HEADS; h++)
                for (int64_t t = 0; t < n; t++)
                    lse_got[h * total + qsl[r] + t] = ((const float *)c->lse.data)[h * T + src + t];
        }
        int64_t qs[3] = {total, SV_NUM_HEADS, SV_HEAD_SIZE}, one[1] = {R + 1}, rs[1] = {R}, ls[2] = {SV_NUM_HEADS, total};
        int64_t bs[2] = {R, info->max_blocks_per_req};
        attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_BF16, 3, qs), tg = attn_tensor_make(got, ATTN_DTYPE_BF16, 3, qs);
        attn_tensor tr = attn_tensor_make(ref, ATTN_DTYPE_BF16, 3, qs);
        attn_tensor tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one);
        attn_tensor tsl = attn_tensor_make((void *)info->seq_lens, ATTN_DTYPE_I32, 1, rs);
        attn_tensor tbt = attn_tensor_make((void *)info->block_table, ATTN_DTYPE_I32, 2, bs);
        attn_tensor tlg = attn_tensor_make(lse_got, ATTN_DTYPE_F32, 2, ls), tlr = attn_tensor_make(lse_ref, ATTN_DTYPE_F32, 2, ls);
        attn_params p;
        sv_params(&p);
        st = attn_ref_paged_attention(&tq, &w->cache, &tqsl, &tsl, &tbt, &p, &tr, &tlr);
        if (st == ATTN_STATUS_OK) {
            attn_cli_compare(&tg, &tr, attn_cli_tol_for(ATTN_DTYPE_BF16), w->vmax, cmp);
            attn_cli_compare_lse(&tlg, &tlr, attn_cli_tol_for(ATTN_DTYPE_BF16), cmp);
        }
    }
    free(qsl);
    attn_cli_free(q), attn_cli_free(got), attn_cli_free(ref), attn_cli_free(lse_got), attn_cli_free(lse_ref);
    return st;
}

/* Builds the requests [first, first + n) of the world. */
static void sv_requests(const sv_world *w, int64_t first, int64_t n, attn_request *reqs) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = first + i;
        memset(&reqs[i], 0, sizeof reqs[i]);
        reqs[i].num_computed_tokens = w->computed[k];
        reqs[i].num_scheduled_tokens = w->scheduled[k];
        reqs[i].kind = ATTN_REQUEST_DECODER;
        reqs[i].block_ids = w->block_ids + w->first_block[k];
        reqs[i].num_block_ids = w->num_ids[k];
    }
}

/* Runs one state (requests [first, first + n)) and reports it. */
static void sv_run_state(const attn_cli_env *env, attn_cli_report *rep, sv_world *w, const attn_plan_config *cfg,
                         int64_t first, int64_t n, const char *label, attn_cli_rng *rng) {
    static const char *state_names[] = {"PrefillNoCache", "PrefillCacheHit", "DecodeOnly", "ChunkedPrefill",
                                        "SpecDecoding"};
    attn_cli_result r;
    char name[64];
    snprintf(name, sizeof name, "%s bs%lld", label, (long long)w->block_size);
    attn_cli_result_init(&r, name);
    attn_request reqs[SV_NUM_DECODES + 1];
    sv_requests(w, first, n, reqs);
    sv_call c;
    memset(&c, 0, sizeof c);
    c.ctx = env->ctx;
    c.cache = &w->cache;
    sv_params(&c.params);
    attn_status st = attn_plan_create(cfg, reqs, n, &c.plan);
    attn_plan_info info;
    if (st == ATTN_STATUS_OK) st = attn_plan_get_info(c.plan, &info);
    if (st != ATTN_STATUS_OK) {
        snprintf(r.error, sizeof r.error, "%s", attn_last_error());
        r.ok = 0;
        attn_cli_report_add(rep, &r);
        attn_plan_free(c.plan);
        return;
    }
    const int64_t T = info.num_tokens, W = SV_NUM_HEADS * SV_HEAD_SIZE;
    int64_t qs[3] = {T, SV_NUM_HEADS, SV_HEAD_SIZE}, ls[2] = {SV_NUM_HEADS, T};
    void *q = attn_cli_alloc_fill(rng, ATTN_DTYPE_BF16, (size_t)(T * W), -2, 2, NULL);
    void *out = attn_cli_alloc((size_t)(T * W) * 2), *lse = attn_cli_alloc((size_t)(T * SV_NUM_HEADS) * 4);
    c.ws_size = info.workspace_size;
    c.ws = c.ws_size ? attn_cli_alloc(c.ws_size) : NULL;
    int64_t pairs = 0, kv_bytes = 0, max_seq = 0;
    for (int64_t i = 0; i < info.num_reqs; i++) {
        const int64_t q_len = info.query_start_loc[i + 1] - info.query_start_loc[i];
        pairs += attn_cli_visible_pairs(q_len, info.seq_lens[i], ATTN_CAUSAL_BOTTOM_RIGHT, -1, -1);
        kv_bytes += (int64_t)info.seq_lens[i] * SV_NUM_KV_HEADS * SV_HEAD_SIZE * 2 * 2;
        if (info.seq_lens[i] > max_seq) max_seq = info.seq_lens[i];
    }
    snprintf(r.shape, sizeof r.shape, "%lldreq %lldtok/<=%lld h32/8 d128", (long long)info.num_reqs, (long long)T,
             (long long)max_seq);
    r.gflop = attn_cli_gflop(pairs, SV_NUM_HEADS, SV_HEAD_SIZE, SV_HEAD_SIZE);
    if (!q || !out || !lse || (c.ws_size && !c.ws)) {
        snprintf(r.error, sizeof r.error, "out of memory");
        r.ok = 0;
    } else {
        c.q = attn_tensor_make(q, ATTN_DTYPE_BF16, 3, qs);
        c.out = attn_tensor_make(out, ATTN_DTYPE_BF16, 3, qs);
        c.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
        const int32_t repeats = env->repeats > 0 ? env->repeats : attn_cli_default_repeats(env);
        if (env->mode != ATTN_CLI_MODE_CHECK)
            st = attn_cli_time(env, r.name, repeats, sv_forward, &c, &r.timing);
        else
            st = sv_forward(&c);
        if (st != ATTN_STATUS_OK) {
            snprintf(r.error, sizeof r.error, "%s", attn_last_error());
            r.ok = 0;
        } else if (env->check_rows != 0 && env->mode != ATTN_CLI_MODE_BENCH) {
            attn_cli_cmp cmp;
            attn_cli_cmp_init(&cmp);
            st = sv_check(w, &c, &info, env->check_rows, &cmp);
            r.rows_checked = env->check_rows;
            r.max_abs_err = cmp.max_abs_err;
            r.ok = st == ATTN_STATUS_OK && cmp.num_bad == 0;
            if (st != ATTN_STATUS_OK) snprintf(r.error, sizeof r.error, "oracle: %s", attn_last_error());
        }
        const double t = r.timing.repeats ? r.timing.median_s : 0.0;
        snprintf(r.options, sizeof r.options, "bf16 %s ws=%zuKiB", state_names[info.attn_state], c.ws_size / 1024);
        if (t > 0 && info.num_decodes == info.num_reqs) /* decode GB/s: K and V bytes read / time */
            snprintf(r.options, sizeof r.options, "bf16 %s %.1f GB/s", state_names[info.attn_state],
                     (double)kv_bytes / t * 1e-9);
    }
    attn_cli_report_add(rep, &r);
    attn_cli_free(q), attn_cli_free(out), attn_cli_free(lse), attn_cli_free(c.ws);
    attn_plan_free(c.plan);
}

/* 8 under ATTN_TEST_SMALL=1 (see the file comment), else 1: the divisor of every context length. */
static int64_t sv_scale_down(void) {
    const char *v = getenv("ATTN_TEST_SMALL");
    return v != NULL && strcmp(v, "1") == 0 ? 8 : 1;
}

static int sv_world_init(sv_world *w, int64_t block_size, attn_cli_rng *rng) {
    memset(w, 0, sizeof *w);
    w->block_size = block_size;
    const int64_t div = sv_scale_down();
    for (int i = 0; i < SV_NUM_DECODES; i++) { /* contexts 512 .. 16384 (/ div), geometric */
        double ctx = 512.0 / (double)div;
        for (int k = 0; k < i; k++) ctx *= 1.2599210498948732; /* 32^(1/15) */
        w->computed[i] = (int64_t)(ctx + 0.5) - 1;
        w->scheduled[i] = 1;
    }
    w->computed[SV_NUM_DECODES] = SV_PREFIX / div;
    w->scheduled[SV_NUM_DECODES] = SV_CHUNK / div;
    int64_t total = 0;
    for (int i = 0; i <= SV_NUM_DECODES; i++) {
        w->first_block[i] = total;
        w->num_ids[i] = (w->computed[i] + w->scheduled[i] + block_size - 1) / block_size;
        total += w->num_ids[i];
    }
    w->num_blocks = total;
    w->block_ids = (int32_t *)malloc((size_t)total * sizeof(int32_t));
    if (!w->block_ids) return -1;
    for (int64_t i = 0; i < total; i++) w->block_ids[i] = (int32_t)i;
    for (int64_t i = total - 1; i > 0; i--) { /* shuffled pages, as after a while of serving */
        const int64_t j = (int64_t)(attn_cli_rng_u64(rng) % (uint64_t)(i + 1));
        const int32_t t = w->block_ids[i];
        w->block_ids[i] = w->block_ids[j], w->block_ids[j] = t;
    }
    /* the library's cache allocation (2 MiB-aligned, MADV_HUGEPAGE on Linux), as an engine would use it */
    if (attn_kv_cache_alloc(ATTN_DTYPE_BF16, total, block_size, SV_NUM_KV_HEADS, SV_HEAD_SIZE, &w->cache) !=
        ATTN_STATUS_OK)
        return -1;
    attn_cli_fill(rng, ATTN_DTYPE_BF16, w->cache.data,
                  (size_t)(2 * total * block_size * SV_NUM_KV_HEADS * SV_HEAD_SIZE), -2, 2, NULL);
    w->vmax = 2.0;
    return 0;
}

int attn_wl_serving_run(const attn_cli_env *env) {
    attn_cli_report rep;
    char note[128];
    attn_cli_report_begin(&rep, env, "serving", attn_cli_check_note(env, note, sizeof note));
    const int64_t block_sizes[2] = {16, 128};
    for (int b = 0; b < 2; b++) {
        attn_cli_rng rng;
        attn_cli_rng_seed(&rng, 1234 + (uint64_t)b);
        sv_world w;
        if (sv_world_init(&w, block_sizes[b], &rng) != 0) {
            fprintf(env->err, "attn %s: serving: out of memory\n", env->command);
            free(w.block_ids);
            attn_kv_cache_free(&w.cache);
            return ATTN_CLI_EXIT_MISMATCH;
        }
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = (int32_t)w.num_blocks;
        cfg.block_size = (int32_t)w.block_size;
        cfg.num_heads = SV_NUM_HEADS;
        cfg.num_kv_heads = SV_NUM_KV_HEADS;
        cfg.head_size = SV_HEAD_SIZE;
        cfg.max_blocks_per_req = (int32_t)((16384 / sv_scale_down() + w.block_size - 1) / w.block_size);
        /* plan build time of the whole step (count + fill + free) */
        attn_request reqs[SV_NUM_DECODES + 1];
        sv_requests(&w, 0, SV_NUM_DECODES + 1, reqs);
        sv_plan_args pa = {cfg, reqs, SV_NUM_DECODES + 1};
        attn_cli_result r;
        char name[64];
        snprintf(name, sizeof name, "plan-build bs%lld", (long long)w.block_size);
        attn_cli_result_init(&r, name);
        snprintf(r.shape, sizeof r.shape, "%dreq", SV_NUM_DECODES + 1);
        snprintf(r.options, sizeof r.options, "metadata+partition");
        if (env->mode != ATTN_CLI_MODE_CHECK) {
            attn_status st = attn_cli_time(env, r.name, 20, sv_plan_build, &pa, &r.timing);
            if (st != ATTN_STATUS_OK) r.ok = 0, snprintf(r.error, sizeof r.error, "%s", attn_last_error());
        } else if (sv_plan_build(&pa) != ATTN_STATUS_OK) {
            r.ok = 0, snprintf(r.error, sizeof r.error, "%s", attn_last_error());
        }
        attn_cli_report_add(&rep, &r);
        sv_run_state(env, &rep, &w, &cfg, 0, SV_NUM_DECODES, "decode-only", &rng);
        sv_run_state(env, &rep, &w, &cfg, SV_NUM_DECODES, 1, "chunked-prefill", &rng);
        sv_run_state(env, &rep, &w, &cfg, 0, SV_NUM_DECODES + 1, "mixed-step", &rng);
        free(w.block_ids);
        attn_kv_cache_free(&w.cache);
    }
    return attn_cli_report_end(&rep);
}
