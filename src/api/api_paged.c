/*
 * api_paged.c — attention over the paged KV cache: attn_forward_paged (plan + caller workspace, run by the
 * split-KV flash-decoding executor of src/attention/fwd_paged.c), attn_paged_attention (plan-less,
 * vLLM/flash-attn metadata validated per call, sequential fold) and its oracle twin. This file only validates
 * and describes the calls: both fast entries build attn_problems whose sequences are paged attn_seq_views, so
 * their bits equal attn_forward_varlen's on the same keys.
 */
#include <math.h>
#include <string.h>

#include "api/ctx.h"
#include "api/validate.h"
#include "attention/fwd.h"
#include "attn/attn_experimental.h"
#include "cache/kv_layout.h"
#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "plan/plan.h"
#include "ref/ref.h"

/* ---------------------------------------------------------------------------------------------
 * The paged problem: sequences read through int32 metadata arrays
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_paged_call {
    const attn_tensor *q, *out, *lse;
    attn_kv_layout cache;
    const int32_t *qsl;         /* [num_reqs + 1], element stride qsl_stride                 */
    int64_t qsl_stride;
    const int32_t *seq_lens;    /* [num_reqs], element stride seq_lens_stride                 */
    int64_t seq_lens_stride;
    const int32_t *block_table; /* [num_reqs, *] rows bt_row_stride elements apart            */
    int64_t bt_row_stride;
    const int32_t *kinds;       /* [num_reqs] attn_request_kind, NULL = all DECODER            */
    const attn_tensor *key, *value; /* ENCODER_ONLY rows [num_tokens, num_kv_heads, head_size] */
    int split;                      /* 1: cache describes the key cache, vcache the value cache (attn_kv_split_of) */
    attn_kv_layout vcache;
    int64_t k_dim_stride; /* split: bytes between a key's head dimensions                */
} attn_paged_call;

static void attn_paged_get_seq(const attn_problem *p, int64_t r, attn_seq_view *s) {
    const attn_paged_call *c = (const attn_paged_call *)p->user[0];
    const int64_t qe = (int64_t)attn_dtype_size(c->q->dtype), oe = (int64_t)attn_dtype_size(c->out->dtype);
    const int64_t q0 = c->qsl[r * c->qsl_stride], q1 = c->qsl[(r + 1) * c->qsl_stride];
    memset(s, 0, sizeof *s);
    s->batch_idx = r;
    s->seq_q = q1 - q0;
    s->seq_k = c->seq_lens[r * c->seq_lens_stride];
    s->q = attn_byte_ptr(c->q->data, q0 * c->q->strides[0] * qe);
    s->q_row_stride = c->q->strides[0] * qe;
    s->q_head_stride = c->q->strides[1] * qe;
    s->out = (char *)(uintptr_t)attn_byte_ptr(c->out->data, q0 * c->out->strides[0] * oe);
    s->out_row_stride = c->out->strides[0] * oe;
    s->out_head_stride = c->out->strides[1] * oe;
    if (c->lse) { /* [num_heads, num_tokens] */
        s->lse = (float *)(uintptr_t)attn_byte_ptr(c->lse->data, q0 * c->lse->strides[1] * (int64_t)sizeof(float));
        s->lse_head_stride = c->lse->strides[0];
        s->lse_row_stride = c->lse->strides[1];
    }
    if (c->kinds && c->kinds[r] == ATTN_REQUEST_ENCODER_ONLY) { /* its own new rows, no cache */
        const int64_t ke = c->cache.elem_size;
        s->k = attn_byte_ptr(c->key->data, q0 * c->key->strides[0] * ke);
        s->k_row_stride = c->key->strides[0] * ke;
        s->k_head_stride = c->key->strides[1] * ke;
        s->v = attn_byte_ptr(c->value->data, q0 * c->value->strides[0] * ke);
        s->v_row_stride = c->value->strides[0] * ke;
        s->v_head_stride = c->value->strides[1] * ke;
        return;
    }
    s->k = attn_byte_ptr(c->cache.base, 0); /* an empty cache may have data NULL */
    s->v = attn_byte_ptr(c->cache.base, c->cache.kv_stride);
    s->block_table = (const int32_t *)(uintptr_t)attn_byte_ptr(c->block_table, r * c->bt_row_stride * (int64_t)sizeof(int32_t));
    s->block_size = c->cache.block_size;
    if (c->split) { /* a key cache and a value cache apart; K rows by dimension unless its dimensions are adjacent */
        s->v = attn_byte_ptr(c->vcache.base, 0);
        s->k_block_stride = c->cache.block_stride, s->v_block_stride = c->vcache.block_stride;
        s->k_row_stride = c->cache.row_stride, s->v_row_stride = c->vcache.row_stride;
        s->k_head_stride = c->cache.head_stride, s->v_head_stride = c->vcache.head_stride;
        s->k_dim_stride = c->k_dim_stride == c->cache.elem_size ? 0 : c->k_dim_stride;
        return;
    }
    s->k_block_stride = s->v_block_stride = c->cache.block_stride;
    s->k_row_stride = s->v_row_stride = c->cache.row_stride;
    s->k_head_stride = s->v_head_stride = c->cache.head_stride;
}

/* q / out / lse of a paged call and the options; fills the problem's shape fields. */
static attn_status attn_paged_check_qo(const attn_tensor *q, const attn_kv_layout *cache, const char *cache_name,
                                       const attn_params *params, attn_tensor *out, attn_tensor *lse, attn_problem *p) {
    ATTN_TRY(attn_tensor_check(q, "q", 3, 1));
    ATTN_TRY(attn_tensor_check(out, "out", 3, 1));
    ATTN_TRY(attn_tensor_check_float(q, "q"));
    ATTN_TRY(attn_validate_aligned(q, "q"));
    const int64_t num_tokens = q->shape[0], num_heads = q->shape[1];
    ATTN_CHECK(num_heads >= 1, ATTN_STATUS_INVALID_ARGUMENT, "q: num_heads=%lld, expected >= 1", (long long)num_heads);
    ATTN_CHECK(num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT, "q: num_heads=%lld exceeds ATTN_MAX_HEADS=%d",
               (long long)num_heads, ATTN_MAX_HEADS);
    ATTN_CHECK(num_tokens <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "q: num_tokens=%lld exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)num_tokens, (long long)ATTN_MAX_SEQ_LEN);
    const int split = strcmp(cache_name, "kv_cache") != 0; /* key_cache [num_blocks, block_size, Hkv, D] */
    ATTN_CHECK(num_heads % cache->num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: shape[%d]=%lld does not divide num_heads=%lld", cache_name, split ? 2 : 3,
               (long long)cache->num_kv_heads, (long long)num_heads);
    ATTN_TRY(attn_tensor_check_dim(q, "q", 2, cache->head_size, split ? "key_cache head_size" : "kv_cache head_size"));
    ATTN_TRY(attn_tensor_check_dtype(out, "out", q->dtype));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 0, num_tokens, "num_tokens"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 1, num_heads, "num_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 2, cache->head_size, "head_size"));
    ATTN_TRY(attn_validate_aligned(out, "out"));
    if (lse) {
        ATTN_TRY(attn_tensor_check(lse, "lse", 2, 0));
        ATTN_TRY(attn_tensor_check_dtype(lse, "lse", ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(lse, "lse"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 0, num_heads, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 1, num_tokens, "num_tokens"));
    }
    ATTN_TRY(attn_opts_resolve(params, num_heads, cache->head_size, 0, &p->opts));
    ATTN_TRY(attn_opts_resolve_kv_scales(params, cache->dtype, cache->num_kv_heads, &p->opts));
    p->num_heads = num_heads;
    p->num_kv_heads = cache->num_kv_heads;
    p->head_size = p->head_size_v = cache->head_size;
    p->q_dtype = p->out_dtype = q->dtype;
    p->kv_dtype = cache->dtype;
    p->get_seq = attn_paged_get_seq;
    return ATTN_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Plan-less entry (vLLM / flash-attn metadata)
 * --------------------------------------------------------------------------------------------- */
static attn_status attn_check_i32(const attn_tensor *t, const char *name, int32_t ndim) {
    ATTN_CHECK(t != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL", name);
    ATTN_TRY(attn_tensor_check(t, name, ndim, 0));
    ATTN_TRY(attn_tensor_check_dtype(t, name, ATTN_DTYPE_I32));
    ATTN_TRY(attn_validate_aligned(t, name));
    return ATTN_STATUS_OK;
}

/* kv_cache, or key_cache and value_cache apart (value_cache non-NULL) */
static attn_status attn_paged_prepare(const attn_tensor *q, const attn_tensor *kv_cache, const attn_tensor *value_cache,
                                      const attn_tensor *qsl, const attn_tensor *seq_lens, const attn_tensor *bt,
                                      const attn_params *params, attn_tensor *out, attn_tensor *lse, attn_paged_call *c,
                                      attn_problem *p) {
    memset(c, 0, sizeof *c);
    const char *cache_name = value_cache ? "key_cache" : "kv_cache";
    if (value_cache) {
        ATTN_TRY(attn_kv_split_of(kv_cache, value_cache, &c->cache, &c->vcache, &c->k_dim_stride));
        c->split = 1;
    } else {
        ATTN_TRY(attn_kv_layout_of(kv_cache, "kv_cache", &c->cache));
    }
    ATTN_TRY(attn_paged_check_qo(q, &c->cache, cache_name, params, out, lse, p));
    ATTN_TRY(attn_check_i32(qsl, "query_start_loc", 1));
    ATTN_CHECK(qsl->shape[0] >= 1, ATTN_STATUS_INVALID_ARGUMENT,
               "query_start_loc: shape[0]=0, expected num_reqs+1 >= 1");
    const int64_t num_reqs = qsl->shape[0] - 1, num_tokens = q->shape[0];
    ATTN_TRY(attn_check_i32(seq_lens, "seq_lens", 1));
    ATTN_TRY(attn_tensor_check_dim(seq_lens, "seq_lens", 0, num_reqs, "num_reqs"));
    const int32_t *qd = (const int32_t *)qsl->data, *sd = (const int32_t *)seq_lens->data;
    const int64_t qst = qsl->strides[0], sst = seq_lens->strides[0];
    ATTN_CHECK(num_reqs < ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "query_start_loc: shape[0]=%lld exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)qsl->shape[0],
               (long long)ATTN_MAX_SEQ_LEN);
    ATTN_CHECK(qd[0] == 0, ATTN_STATUS_INVALID_ARGUMENT, "query_start_loc: entry 0 = %d, expected 0", (int)qd[0]);
    for (int64_t r = 0; r < num_reqs; r++)
        ATTN_CHECK(sd[r * sst] >= 0, ATTN_STATUS_INVALID_ARGUMENT, "seq_lens: entry %lld = %lld is negative",
                   (long long)r, (long long)sd[r * sst]);
    ATTN_TRY(attn_validate_block_table(bt, sd, sst, num_reqs, c->cache.block_size, c->cache.num_blocks, "num_reqs"));
    int64_t max_q = 0, pairs = 0;
    for (int64_t r = 0; r < num_reqs; r++) {
        const int64_t a = qd[r * qst], b = qd[(r + 1) * qst], seq_len = sd[r * sst];
        ATTN_CHECK(b >= a, ATTN_STATUS_INVALID_ARGUMENT, "query_start_loc: entry %lld = %lld < entry %lld = %lld",
                   (long long)(r + 1), (long long)b, (long long)r, (long long)a);
        ATTN_CHECK(b <= num_tokens, ATTN_STATUS_INVALID_ARGUMENT,
                   "query_start_loc: entry %lld = %lld exceeds num_tokens=%lld", (long long)(r + 1), (long long)b,
                   (long long)num_tokens);
        /* q_len > seq_len is legal (flash-attn, the dense entries): bottom-right alignment puts the first
         * q_len − seq_len rows before key 0, so they see no key (out 0, LSE −inf). */
        ATTN_TRY(attn_work_add(&pairs, 1, p->num_heads, b - a, seq_len));
        if (b - a > max_q) max_q = b - a;
    }
    const attn_tensor *ins[] = {q, kv_cache, value_cache, qsl, seq_lens, bt, lse};
    const char *names[] = {"q", cache_name, "value_cache", "query_start_loc", "seq_lens", "block_table", "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 7));
    if (lse)
        ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 6));
    c->q = q, c->out = out, c->lse = lse;
    c->qsl = qd, c->qsl_stride = qst;
    c->seq_lens = sd, c->seq_lens_stride = sst;
    c->block_table = (const int32_t *)bt->data, c->bt_row_stride = bt->strides[0];
    p->num_seqs = num_reqs;
    p->max_seq_q = max_q;
    p->user[0] = c;
    return ATTN_STATUS_OK;
}

/* The four plan-less entries: kv_cache, or key_cache (in its place) and value_cache; ctx NULL runs the oracle. */
static attn_status attn_paged_call_run(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                       const attn_tensor *value_cache, const attn_tensor *query_start_loc,
                                       const attn_tensor *seq_lens, const attn_tensor *block_table,
                                       const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    attn_paged_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_paged_prepare(q, kv_cache, value_cache, query_start_loc, seq_lens, block_table, params, out, lse_opt,
                                &call, &p));
    return ctx ? attn_ctx_run(ctx, &p) : attn_ref_run(&p);
}

attn_status attn_paged_attention(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                 const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                 const attn_tensor *block_table, const attn_params *params, attn_tensor *out,
                                 attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    return attn_paged_call_run(ctx, q, kv_cache, NULL, query_start_loc, seq_lens, block_table, params, out, lse_opt);
}

attn_status attn_ref_paged_attention(const attn_tensor *q, const attn_tensor *kv_cache,
                                     const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                     const attn_tensor *block_table, const attn_params *params, attn_tensor *out,
                                     attn_tensor *lse_opt) {
    return attn_paged_call_run(NULL, q, kv_cache, NULL, query_start_loc, seq_lens, block_table, params, out, lse_opt);
}

attn_status attn_paged_attention_kv(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *key_cache,
                                    const attn_tensor *value_cache, const attn_tensor *query_start_loc,
                                    const attn_tensor *seq_lens, const attn_tensor *block_table,
                                    const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_CHECK(value_cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "value_cache: is NULL");
    return attn_paged_call_run(ctx, q, key_cache, value_cache, query_start_loc, seq_lens, block_table, params, out,
                               lse_opt);
}

attn_status attn_ref_paged_attention_kv(const attn_tensor *q, const attn_tensor *key_cache,
                                        const attn_tensor *value_cache, const attn_tensor *query_start_loc,
                                        const attn_tensor *seq_lens, const attn_tensor *block_table,
                                        const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(value_cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "value_cache: is NULL");
    return attn_paged_call_run(NULL, q, key_cache, value_cache, query_start_loc, seq_lens, block_table, params, out,
                               lse_opt);
}

/* ---------------------------------------------------------------------------------------------
 * Plan entry: the work list runs on the split-KV executor (src/attention/fwd_paged.c)
 * --------------------------------------------------------------------------------------------- */
/* key/value rows of ENCODER_ONLY requests: [num_tokens, num_kv_heads, head_size], cache dtype. */
static attn_status attn_paged_check_rows(const attn_tensor *t, const char *name, const attn_kv_layout *c,
                                         int64_t num_tokens) {
    ATTN_CHECK(t != NULL, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: is NULL but the plan has ENCODER_ONLY requests (their keys are their new rows)", name);
    ATTN_TRY(attn_tensor_check(t, name, 3, 1));
    ATTN_TRY(attn_tensor_check_dtype(t, name, c->dtype));
    ATTN_TRY(attn_validate_aligned(t, name));
    ATTN_TRY(attn_tensor_check_dim(t, name, 0, num_tokens, "num_tokens"));
    ATTN_TRY(attn_tensor_check_dim(t, name, 1, c->num_kv_heads, "num_kv_heads"));
    ATTN_TRY(attn_tensor_check_dim(t, name, 2, c->head_size, "head_size"));
    return ATTN_STATUS_OK;
}

attn_status attn_forward_paged(attn_ctx *ctx, const attn_plan *plan, const attn_tensor *q, const attn_tensor *key_opt,
                               const attn_tensor *value_opt, const attn_tensor *kv_cache, const attn_params *params,
                               attn_tensor *out, attn_tensor *lse_opt, void *workspace, size_t workspace_size) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    ATTN_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: is NULL");
    const attn_plan_config *cfg = &plan->cfg;
    attn_paged_call call;
    memset(&call, 0, sizeof call);
    attn_problem p[2];
    memset(p, 0, sizeof p);
    ATTN_TRY(attn_kv_layout_of(kv_cache, "kv_cache", &call.cache));
    ATTN_CHECK(call.cache.block_size == cfg->block_size, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: block_size=%lld differs from the plan's %d", (long long)call.cache.block_size,
               (int)cfg->block_size);
    ATTN_CHECK(call.cache.num_blocks >= cfg->num_blocks, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: num_blocks=%lld < the plan's num_blocks=%d", (long long)call.cache.num_blocks,
               (int)cfg->num_blocks);
    ATTN_CHECK(call.cache.num_kv_heads == cfg->num_kv_heads, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: num_kv_heads=%lld differs from the plan's %d", (long long)call.cache.num_kv_heads,
               (int)cfg->num_kv_heads);
    ATTN_CHECK(call.cache.head_size == cfg->head_size, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: head_size=%lld differs from the plan's %d", (long long)call.cache.head_size,
               (int)cfg->head_size);
    /* q's head count is the plan's before params are read: attn_paged_check_qo reads alibi_slopes / sinks
     * for q's heads, and a caller sizes them from the plan (python/attn/ops.py Plan.forward does) */
    ATTN_TRY(attn_tensor_check(q, "q", 3, 1));
    ATTN_TRY(attn_tensor_check_dim(q, "q", 1, cfg->num_heads, "plan num_heads"));
    ATTN_TRY(attn_paged_check_qo(q, &call.cache, "kv_cache", params, out, lse_opt, &p[0]));
    ATTN_TRY(attn_tensor_check_dim(q, "q", 0, plan->num_tokens, "plan num_tokens"));
    if (plan->num_encoder_only > 0) {
        ATTN_TRY(attn_paged_check_rows(key_opt, "key", &call.cache, plan->num_tokens));
        ATTN_TRY(attn_paged_check_rows(value_opt, "value", &call.cache, plan->num_tokens));
    }
    ATTN_CHECK(workspace_size >= plan->workspace_size, ATTN_STATUS_WORKSPACE_TOO_SMALL,
               "workspace_size=%zu < attn_plan_workspace_size=%zu (split-KV partial states)", workspace_size,
               plan->workspace_size);
    ATTN_CHECK(plan->workspace_size == 0 || (workspace != NULL && (uintptr_t)workspace % sizeof(float) == 0),
               ATTN_STATUS_INVALID_ARGUMENT, "workspace: is NULL or not aligned to 4 bytes");
    const attn_tensor *enc_k = plan->num_encoder_only > 0 ? key_opt : NULL;
    const attn_tensor *enc_v = plan->num_encoder_only > 0 ? value_opt : NULL;
    const attn_tensor *ins[] = {q, kv_cache, enc_k, enc_v, lse_opt};
    const char *names[] = {"q", "kv_cache", "key", "value", "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 5));
    if (lse_opt) ATTN_TRY(attn_validate_no_overlap(lse_opt, "lse", ins, names, 4));
    const attn_tensor *all[] = {q, kv_cache, enc_k, enc_v, out, lse_opt};
    const char *all_names[] = {"q", "kv_cache", "key", "value", "out", "lse"};
    ATTN_TRY(attn_validate_workspace(workspace, plan->workspace_size, sizeof(float), all, all_names, 6));

    call.q = q, call.out = out, call.lse = lse_opt;
    call.qsl = plan->query_start_loc, call.qsl_stride = 1;
    call.seq_lens = plan->seq_lens, call.seq_lens_stride = 1;
    call.block_table = plan->block_table, call.bt_row_stride = cfg->max_blocks_per_req;
    call.kinds = plan->kinds;
    call.key = enc_k, call.value = enc_v;
    p[0].num_seqs = plan->num_reqs;
    p[0].max_seq_q = plan->max_query_len;
    p[0].user[0] = &call;
    p[1] = p[0];
    p[1].opts.causal = ATTN_CAUSAL_NONE; /* encoder-only and cross attention see every key */

    const attn_fwd_work work = {.blocks = plan->blocks,
                                .direct = plan->direct,
                                .num_direct = plan->num_direct,
                                .splits = plan->splits,
                                .num_split_items = plan->num_split_items,
                                .split_blocks = plan->split_blocks,
                                .num_split_blocks = plan->num_split_blocks,
                                .query_start_loc = plan->query_start_loc,
                                .kinds = plan->kinds,
                                .num_decodes = plan->num_decodes,
                                .max_query_len = plan->max_query_len};
    const attn_problem *const prob[2] = {&p[0], &p[1]};

    ATTN_TRY(attn_ctx_claim(ctx));
    attn_exec ex = attn_ctx_exec(ctx);
    attn_fwd_run_work(prob, &work, (float *)workspace, &ex);
    attn_ctx_release(ctx);
    return ATTN_STATUS_OK;
}
