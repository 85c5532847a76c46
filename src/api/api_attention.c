/*
 * api_attention.c — entry points for dense (BSND/BNSD) and packed variable-length attention, their oracle
 * twins, and merge_attn_states. Each validates everything, builds an attn_problem, then runs the driver
 * (or the oracle). Nothing is written before validation has passed.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "api/ctx.h"
#include "api/validate.h"
#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "parallel/parallel.h"
#include "ref/ref.h"

/* ---------------------------------------------------------------------------------------------
 * Dense
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_dense_call {
    const attn_tensor *q, *k, *v, *out, *lse;
    int32_t s_dim, n_dim; /* index of the seq and head dimensions in the layout */
} attn_dense_call;

static void attn_dense_get_seq(const attn_problem *p, int64_t b, attn_seq_view *s) {
    const attn_dense_call *c = (const attn_dense_call *)p->user[0];
    const int64_t qe = (int64_t)attn_dtype_size(c->q->dtype), ke = (int64_t)attn_dtype_size(c->k->dtype);
    const int64_t oe = (int64_t)attn_dtype_size(c->out->dtype);
    memset(s, 0, sizeof *s);
    s->batch_idx = b;
    s->seq_q = c->q->shape[c->s_dim];
    s->seq_k = c->k->shape[c->s_dim];
    s->q = attn_byte_ptr(c->q->data, b * c->q->strides[0] * qe);
    s->q_row_stride = c->q->strides[c->s_dim] * qe;
    s->q_head_stride = c->q->strides[c->n_dim] * qe;
    s->k = attn_byte_ptr(c->k->data, b * c->k->strides[0] * ke);
    s->k_row_stride = c->k->strides[c->s_dim] * ke;
    s->k_head_stride = c->k->strides[c->n_dim] * ke;
    s->v = attn_byte_ptr(c->v->data, b * c->v->strides[0] * ke);
    s->v_row_stride = c->v->strides[c->s_dim] * ke;
    s->v_head_stride = c->v->strides[c->n_dim] * ke;
    s->out = (char *)(uintptr_t)attn_byte_ptr(c->out->data, b * c->out->strides[0] * oe);
    s->out_row_stride = c->out->strides[c->s_dim] * oe;
    s->out_head_stride = c->out->strides[c->n_dim] * oe;
    if (c->lse) { /* [batch, num_heads, seq_q] */
        s->lse = (float *)(uintptr_t)attn_byte_ptr(c->lse->data, b * c->lse->strides[0] * (int64_t)sizeof(float));
        s->lse_head_stride = c->lse->strides[1];
        s->lse_row_stride = c->lse->strides[2];
    }
}

/* Common checks of q/k/v/out dtypes and head sizes. */
static attn_status attn_check_qkvo(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                   const attn_tensor *out, int64_t num_heads, int64_t num_kv_heads,
                                   int64_t head_size, int64_t head_size_v, int32_t k_head_dim) {
    ATTN_TRY(attn_tensor_check_float(q, "q"));
    ATTN_TRY(attn_tensor_check_float(k, "k"));
    ATTN_TRY(attn_tensor_check_float(v, "v"));
    ATTN_CHECK(v->dtype == k->dtype, ATTN_STATUS_INVALID_ARGUMENT, "v: dtype %s differs from k dtype %s",
               attn_dtype_name(v->dtype), attn_dtype_name(k->dtype));
    ATTN_CHECK(out->dtype == q->dtype, ATTN_STATUS_INVALID_ARGUMENT, "out: dtype %s differs from q dtype %s",
               attn_dtype_name(out->dtype), attn_dtype_name(q->dtype));
    ATTN_CHECK(num_heads >= 1, ATTN_STATUS_INVALID_ARGUMENT, "q: num_heads=%lld, expected >= 1",
               (long long)num_heads);
    ATTN_CHECK(num_kv_heads >= 1 && num_heads % num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "k: shape[%d]=%lld does not divide num_heads=%lld", (int)k_head_dim, (long long)num_kv_heads,
               (long long)num_heads);
    ATTN_CHECK(head_size >= 1 && head_size <= ATTN_HEAD_SIZE_MAX, ATTN_STATUS_INVALID_ARGUMENT,
               "q: head_size=%lld is outside 1..%d", (long long)head_size, ATTN_HEAD_SIZE_MAX);
    ATTN_CHECK(head_size_v >= 1 && head_size_v <= ATTN_HEAD_SIZE_MAX, ATTN_STATUS_INVALID_ARGUMENT,
               "v: head_size=%lld is outside 1..%d", (long long)head_size_v, ATTN_HEAD_SIZE_MAX);
    ATTN_TRY(attn_validate_aligned(q, "q"));
    ATTN_TRY(attn_validate_aligned(k, "k"));
    ATTN_TRY(attn_validate_aligned(v, "v"));
    ATTN_TRY(attn_validate_aligned(out, "out"));
    return ATTN_STATUS_OK;
}

static attn_status attn_dense_prepare(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_params *params, attn_tensor *out,
                                      attn_tensor *lse, attn_dense_call *call, attn_problem *p) {
    ATTN_CHECK(layout == ATTN_LAYOUT_BSND || layout == ATTN_LAYOUT_BNSD, ATTN_STATUS_INVALID_ARGUMENT,
               "layout=%d is not an attn_layout value", (int)layout);
    ATTN_TRY(attn_tensor_check(q, "q", 4, 1));
    ATTN_TRY(attn_tensor_check(k, "k", 4, 1));
    ATTN_TRY(attn_tensor_check(v, "v", 4, 1));
    ATTN_TRY(attn_tensor_check(out, "out", 4, 1));
    const int32_t sd = layout == ATTN_LAYOUT_BSND ? 1 : 2, nd = layout == ATTN_LAYOUT_BSND ? 2 : 1;
    const int64_t batch = q->shape[0], seq_q = q->shape[sd], num_heads = q->shape[nd], head_size = q->shape[3];
    const int64_t seq_k = k->shape[sd], num_kv_heads = k->shape[nd], head_size_v = v->shape[3];
    ATTN_TRY(attn_tensor_check_dim(k, "k", 0, batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", 0, batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 0, batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(k, "k", 3, head_size, "head_size"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", sd, seq_k, "seq_k"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", nd, num_kv_heads, "num_kv_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", sd, seq_q, "seq_q"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", nd, num_heads, "num_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 3, head_size_v, "head_size_v"));
    ATTN_TRY(attn_check_qkvo(q, k, v, out, num_heads, num_kv_heads, head_size, head_size_v, nd));
    ATTN_TRY(attn_validate_dims(num_heads, num_kv_heads, seq_q, seq_k));
    int64_t pairs = 0;
    ATTN_TRY(attn_work_add(&pairs, batch, num_heads, seq_q, seq_k));
    if (lse) {
        ATTN_TRY(attn_tensor_check(lse, "lse", 3, 0));
        ATTN_TRY(attn_tensor_check_dtype(lse, "lse", ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(lse, "lse"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 0, batch, "batch"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 1, num_heads, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 2, seq_q, "seq_q"));
    }
    ATTN_TRY(attn_opts_resolve(params, num_heads, head_size, 1, &p->opts));
    ATTN_TRY(attn_validate_masks(&p->opts, batch, num_heads, seq_q, seq_k));
    const attn_tensor *ins[] = {q, k, v, p->opts.mask, p->opts.key_padding_mask, p->opts.additive_mask, lse};
    const char *names[] = {"q", "k", "v", "params.mask", "params.key_padding_mask", "params.additive_mask",
                           "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 7));
    if (lse) ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 6));
    int64_t work;
    ATTN_CHECK(attn_mul_i64(batch, num_heads, &work) && attn_mul_i64(work, seq_q > 0 ? seq_q : 1, &work),
               ATTN_STATUS_OVERFLOW, "q: batch·num_heads·seq_q overflows int64");

    call->q = q, call->k = k, call->v = v, call->out = out, call->lse = lse;
    call->s_dim = sd, call->n_dim = nd;
    p->num_heads = num_heads, p->num_kv_heads = num_kv_heads;
    p->head_size = head_size, p->head_size_v = head_size_v;
    p->q_dtype = q->dtype, p->kv_dtype = k->dtype, p->out_dtype = out->dtype;
    p->num_seqs = batch;
    p->max_seq_q = seq_q;
    p->get_seq = attn_dense_get_seq;
    p->user[0] = call;
    return ATTN_STATUS_OK;
}

attn_status attn_forward(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    attn_dense_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_dense_prepare(layout, q, k, v, params, out, lse_opt, &call, &p));
    return attn_ctx_run(ctx, &p);
}

attn_status attn_ref_forward(attn_layout layout, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                             const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    attn_dense_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_dense_prepare(layout, q, k, v, params, out, lse_opt, &call, &p));
    return attn_ref_run(&p);
}

/* ---------------------------------------------------------------------------------------------
 * Packed variable-length
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_varlen_call {
    const attn_tensor *q, *k, *v, *out, *lse, *cu_q, *cu_k;
} attn_varlen_call;

static void attn_varlen_get_seq(const attn_problem *p, int64_t b, attn_seq_view *s) {
    const attn_varlen_call *c = (const attn_varlen_call *)p->user[0];
    const int64_t qe = (int64_t)attn_dtype_size(c->q->dtype), ke = (int64_t)attn_dtype_size(c->k->dtype);
    const int64_t oe = (int64_t)attn_dtype_size(c->out->dtype);
    const int64_t q0 = attn_tensor_get_index(c->cu_q, b), q1 = attn_tensor_get_index(c->cu_q, b + 1);
    const int64_t k0 = attn_tensor_get_index(c->cu_k, b), k1 = attn_tensor_get_index(c->cu_k, b + 1);
    memset(s, 0, sizeof *s);
    s->batch_idx = b;
    s->seq_q = q1 - q0;
    s->seq_k = k1 - k0;
    s->q = attn_byte_ptr(c->q->data, q0 * c->q->strides[0] * qe);
    s->q_row_stride = c->q->strides[0] * qe;
    s->q_head_stride = c->q->strides[1] * qe;
    s->k = attn_byte_ptr(c->k->data, k0 * c->k->strides[0] * ke);
    s->k_row_stride = c->k->strides[0] * ke;
    s->k_head_stride = c->k->strides[1] * ke;
    s->v = attn_byte_ptr(c->v->data, k0 * c->v->strides[0] * ke);
    s->v_row_stride = c->v->strides[0] * ke;
    s->v_head_stride = c->v->strides[1] * ke;
    s->out = (char *)(uintptr_t)attn_byte_ptr(c->out->data, q0 * c->out->strides[0] * oe);
    s->out_row_stride = c->out->strides[0] * oe;
    s->out_head_stride = c->out->strides[1] * oe;
    if (c->lse) { /* [num_heads, total_q] */
        s->lse = (float *)(uintptr_t)attn_byte_ptr(c->lse->data, q0 * c->lse->strides[1] * (int64_t)sizeof(float));
        s->lse_head_stride = c->lse->strides[0];
        s->lse_row_stride = c->lse->strides[1];
    }
}

/* cu_seqlens: int32 [batch+1], starts at 0, non-decreasing, last <= total. Returns the longest sequence. */
static attn_status attn_check_cu_seqlens(const attn_tensor *cu, const char *name, int64_t batch, int64_t total,
                                         int64_t *max_len) {
    ATTN_TRY(attn_tensor_check(cu, name, 1, 0));
    ATTN_TRY(attn_tensor_check_dtype(cu, name, ATTN_DTYPE_I32));
    ATTN_TRY(attn_validate_aligned(cu, name));
    ATTN_TRY(attn_tensor_check_dim(cu, name, 0, batch + 1, "batch+1"));
    ATTN_CHECK(attn_tensor_get_index(cu, 0) == 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: entry 0 = %lld, expected 0",
               name, (long long)attn_tensor_get_index(cu, 0));
    *max_len = 0;
    for (int64_t b = 1; b <= batch; b++) {
        const int64_t prev = attn_tensor_get_index(cu, b - 1), cur = attn_tensor_get_index(cu, b);
        ATTN_CHECK(cur >= prev, ATTN_STATUS_INVALID_ARGUMENT, "%s: entry %lld = %lld < entry %lld = %lld", name,
                   (long long)b, (long long)cur, (long long)(b - 1), (long long)prev);
        if (cur - prev > *max_len) *max_len = cur - prev;
    }
    ATTN_CHECK(attn_tensor_get_index(cu, batch) <= total, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: last entry %lld exceeds the %lld packed rows", name, (long long)attn_tensor_get_index(cu, batch),
               (long long)total);
    return ATTN_STATUS_OK;
}

static attn_status attn_varlen_prepare(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                       const attn_tensor *cu_q, const attn_tensor *cu_k, const attn_params *params,
                                       attn_tensor *out, attn_tensor *lse, attn_varlen_call *call, attn_problem *p) {
    ATTN_TRY(attn_tensor_check(q, "q", 3, 1));
    ATTN_TRY(attn_tensor_check(k, "k", 3, 1));
    ATTN_TRY(attn_tensor_check(v, "v", 3, 1));
    ATTN_TRY(attn_tensor_check(out, "out", 3, 1));
    const int64_t total_q = q->shape[0], num_heads = q->shape[1], head_size = q->shape[2];
    const int64_t total_k = k->shape[0], num_kv_heads = k->shape[1], head_size_v = v->shape[2];
    ATTN_TRY(attn_tensor_check_dim(k, "k", 2, head_size, "head_size"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", 0, total_k, "total_k"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", 1, num_kv_heads, "num_kv_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 0, total_q, "total_q"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 1, num_heads, "num_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 2, head_size_v, "head_size_v"));
    ATTN_TRY(attn_check_qkvo(q, k, v, out, num_heads, num_kv_heads, head_size, head_size_v, 1));
    ATTN_TRY(attn_validate_dims(num_heads, num_kv_heads, total_q, total_k));
    ATTN_CHECK(cu_q != NULL, ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: is NULL");
    ATTN_CHECK(cu_k != NULL, ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_k: is NULL");
    ATTN_TRY(attn_tensor_check(cu_q, "cu_seqlens_q", 1, 0));
    ATTN_CHECK(cu_q->shape[0] >= 1, ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: shape[0]=0, expected batch+1 >= 1");
    ATTN_CHECK(cu_q->shape[0] <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "cu_seqlens_q: shape[0]=%lld exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)cu_q->shape[0],
               (long long)ATTN_MAX_SEQ_LEN);
    const int64_t batch = cu_q->shape[0] - 1;
    int64_t max_q, max_k;
    ATTN_TRY(attn_check_cu_seqlens(cu_q, "cu_seqlens_q", batch, total_q, &max_q));
    ATTN_TRY(attn_check_cu_seqlens(cu_k, "cu_seqlens_k", batch, total_k, &max_k));
    int64_t pairs = 0;
    for (int64_t b = 0; b < batch; b++)
        ATTN_TRY(attn_work_add(&pairs, 1, num_heads,
                               attn_tensor_get_index(cu_q, b + 1) - attn_tensor_get_index(cu_q, b),
                               attn_tensor_get_index(cu_k, b + 1) - attn_tensor_get_index(cu_k, b)));
    if (lse) {
        ATTN_TRY(attn_tensor_check(lse, "lse", 2, 0));
        ATTN_TRY(attn_tensor_check_dtype(lse, "lse", ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(lse, "lse"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 0, num_heads, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 1, total_q, "total_q"));
    }
    ATTN_TRY(attn_opts_resolve(params, num_heads, head_size, 0, &p->opts));
    const attn_tensor *ins[] = {q, k, v, cu_q, cu_k, lse};
    const char *names[] = {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 6));
    if (lse) ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 5));

    call->q = q, call->k = k, call->v = v, call->out = out, call->lse = lse, call->cu_q = cu_q, call->cu_k = cu_k;
    p->num_heads = num_heads, p->num_kv_heads = num_kv_heads;
    p->head_size = head_size, p->head_size_v = head_size_v;
    p->q_dtype = q->dtype, p->kv_dtype = k->dtype, p->out_dtype = out->dtype;
    p->num_seqs = batch;
    p->max_seq_q = max_q;
    p->get_seq = attn_varlen_get_seq;
    p->user[0] = call;
    return ATTN_STATUS_OK;
}

attn_status attn_forward_varlen(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_tensor *cu_seqlens_q, const attn_tensor *cu_seqlens_k,
                                const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    attn_varlen_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_varlen_prepare(q, k, v, cu_seqlens_q, cu_seqlens_k, params, out, lse_opt, &call, &p));
    return attn_ctx_run(ctx, &p);
}

attn_status attn_ref_forward_varlen(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                    const attn_tensor *cu_seqlens_q, const attn_tensor *cu_seqlens_k,
                                    const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    attn_varlen_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_varlen_prepare(q, k, v, cu_seqlens_q, cu_seqlens_k, params, out, lse_opt, &call, &p));
    return attn_ref_run(&p);
}

/* ---------------------------------------------------------------------------------------------
 * merge_attn_states
 * --------------------------------------------------------------------------------------------- */
/* Merges of at least this many elements run on the context's threads (one token per item). */
#define ATTN_MERGE_PARALLEL_MIN ((int64_t)1 << 16)
/* Elements of a row converted and combined at a time (stack buffers, no allocation). */
#define ATTN_MERGE_CHUNK 256

typedef struct attn_merge_job {
    const attn_tensor *out_a, *out_b, *lse_a, *lse_b, *out, *lse_out;
    int64_t merge_tokens;
    int fp8;
    float inv_scale;
} attn_merge_job;

/* x[0..n) = float(row[0..n)) of a float dtype: one loop per dtype, so that the compiler vectorises it. */
static void attn_merge_load(const char *row, attn_dtype dtype, int64_t n, float *x) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(x, row, (size_t)n * sizeof(float));
    } else if (dtype == ATTN_DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)(const void *)row;
        for (int64_t i = 0; i < n; i++)
            x[i] = attn_bf16_to_f32(h[i]);
    } else {
        const uint16_t *h = (const uint16_t *)(const void *)row;
        for (int64_t i = 0; i < n; i++)
            x[i] = attn_f16_to_f32(h[i]);
    }
}

/* row[0..n) = x[0..n) in out's dtype: round to nearest even (attn_store_f), or the fp8 code of x·inv_scale. */
static void attn_merge_store(const float *x, int64_t n, attn_dtype dtype, int fp8, float inv_scale, char *row) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(row, x, (size_t)n * sizeof(float));
    } else if (dtype == ATTN_DTYPE_BF16) {
        uint16_t *h = (uint16_t *)(void *)row;
        for (int64_t i = 0; i < n; i++)
            h[i] = attn_f32_to_bf16(x[i]);
    } else if (!fp8) {
        uint16_t *h = (uint16_t *)(void *)row;
        for (int64_t i = 0; i < n; i++)
            h[i] = attn_f32_to_f16(x[i]);
    } else { /* vLLM's static fp8 output: saturating at the format's largest finite value */
        uint8_t *c = (uint8_t *)row;
        const int e4m3 = dtype == ATTN_DTYPE_FP8_E4M3;
        for (int64_t i = 0; i < n; i++) {
            const uint32_t u = attn_f32_bits(x[i] * inv_scale);
            c[i] = e4m3 ? attn_f32_to_fp8_bits(u, 3, 7) : attn_f32_to_fp8_bits(u, 2, 15);
        }
    }
}

/* x[i] = (wa ≠ 0 ? wa·a[i] : 0) + (wb ≠ 0 ? wb·b[i] : 0): a side of weight 0 adds +0 without reading its values
 * (an inf or NaN there would make 0·x a NaN). One loop per case, so that each vectorises; the same float
 * operations element by element (no contraction: ISO C), so the bits do not depend on the chunking or threads. */
static void attn_merge_combine(const float *a, float wa, const float *b, float wb, int64_t n, float *x) {
    if (wa != 0.0f && wb != 0.0f)
        for (int64_t i = 0; i < n; i++)
            x[i] = wa * a[i] + wb * b[i];
    else if (wa != 0.0f)
        for (int64_t i = 0; i < n; i++)
            x[i] = wa * a[i] + 0.0f;
    else if (wb != 0.0f)
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f + wb * b[i];
    else
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f + 0.0f;
}

/* Token t of a validated merge, every head (attn_parallel_for item). */
static void attn_merge_token(void *arg, int64_t t, int32_t thread_id) {
    (void)thread_id;
    const attn_merge_job *j = (const attn_merge_job *)arg;
    const attn_tensor *out_a = j->out_a, *out_b = j->out_b, *lse_a = j->lse_a, *lse_b = j->lse_b, *out = j->out;
    const int64_t H = out_a->shape[1], D = out_a->shape[2];
    const int64_t es = (int64_t)attn_dtype_size(out_a->dtype), eo = (int64_t)attn_dtype_size(out->dtype);
    const int merged = t < j->merge_tokens;
    float xa[ATTN_MERGE_CHUNK], xb[ATTN_MERGE_CHUNK], x[ATTN_MERGE_CHUNK];
    for (int64_t h = 0; h < H; h++) {
        /* rows from merge_tokens on take state b as it is (vLLM's prefill_tokens_with_context) */
        float la = merged ? ((const float *)lse_a->data)[h * lse_a->strides[0] + t * lse_a->strides[1]] : -INFINITY;
        float lb = ((const float *)lse_b->data)[h * lse_b->strides[0] + t * lse_b->strides[1]];
        /* +inf marks an empty state (FA2's LSE of a row with no keys): treat it as −inf, as vLLM does */
        if (la == INFINITY)
            la = -INFINITY;
        if (lb == INFINITY)
            lb = -INFINITY;
        /* a NaN state makes the result NaN whichever side it is on (IEEE: NaN propagates) */
        const float mx = isnan(la) || isnan(lb) ? NAN : la > lb ? la : lb;
        float wa = 0.0f, wb = 0.0f, lse;
        if (mx == -INFINITY) {
            lse = -INFINITY;
        } else {
            const float ea = expf(la - mx), eb = expf(lb - mx);
            const float sum = ea + eb;
            lse = mx + logf(sum);
            wa = ea / sum;
            wb = eb / sum;
        }
        const char *ra = (const char *)out_a->data + (t * out_a->strides[0] + h * out_a->strides[1]) * es;
        const char *rb = (const char *)out_b->data + (t * out_b->strides[0] + h * out_b->strides[1]) * es;
        char *ro = (char *)out->data + (t * out->strides[0] + h * out->strides[1]) * eo;
        for (int64_t d0 = 0; d0 < D; d0 += ATTN_MERGE_CHUNK) { /* out may be out_a or out_b: loaded before stored */
            const int64_t n = D - d0 < ATTN_MERGE_CHUNK ? D - d0 : ATTN_MERGE_CHUNK;
            attn_merge_load(rb + d0 * es, out_a->dtype, n, xb);
            if (merged) {
                if (wa != 0.0f)
                    attn_merge_load(ra + d0 * es, out_a->dtype, n, xa);
                attn_merge_combine(xa, wa, xb, wb, n, x);
            }
            attn_merge_store(merged ? x : xb, n, out->dtype, j->fp8, j->inv_scale, ro + d0 * eo);
        }
        if (j->lse_out)
            ((float *)j->lse_out->data)[h * j->lse_out->strides[0] + t * j->lse_out->strides[1]] = lse;
    }
}

attn_status attn_merge_attn_states_ex(attn_ctx *ctx, const attn_tensor *out_a, const attn_tensor *lse_a,
                                      const attn_tensor *out_b, const attn_tensor *lse_b, int64_t merge_tokens,
                                      float output_scale, attn_tensor *out, attn_tensor *lse_out) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_CHECK(merge_tokens >= 0, ATTN_STATUS_INVALID_ARGUMENT, "merge_tokens=%lld: expected >= 0",
               (long long)merge_tokens);
    ATTN_CHECK(output_scale == 0.0f || (isfinite(output_scale) && output_scale > 0.0f), ATTN_STATUS_INVALID_ARGUMENT,
               "output_scale=%g: expected 0 (no fp8 output) or finite and > 0", (double)output_scale);
    ATTN_TRY(attn_tensor_check(out_a, "out_a", 3, 1));
    ATTN_TRY(attn_tensor_check(out_b, "out_b", 3, 1));
    ATTN_TRY(attn_tensor_check(out, "out", 3, 1));
    ATTN_TRY(attn_tensor_check_float(out_a, "out_a"));
    const int64_t T = out_a->shape[0], H = out_a->shape[1], D = out_a->shape[2];
    ATTN_CHECK(T <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "out_a: num_tokens=%lld exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)T, (long long)ATTN_MAX_SEQ_LEN);
    ATTN_CHECK(H <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT, "out_a: num_heads=%lld exceeds ATTN_MAX_HEADS=%d",
               (long long)H, ATTN_MAX_HEADS);
    int64_t elems;
    ATTN_CHECK(attn_mul_i64(T, H, &elems) && attn_mul_i64(elems, D, &elems) && elems <= ATTN_MAX_WORK,
               ATTN_STATUS_OVERFLOW, "out_a: num_tokens=%lld x num_heads=%lld x head_size=%lld exceeds ATTN_MAX_WORK=2^48",
               (long long)T, (long long)H, (long long)D);
    const attn_tensor *os[] = {out_b, out};
    const char *on[] = {"out_b", "out"};
    const int fp8 = output_scale > 0.0f;
    if (fp8)
        ATTN_CHECK(out->dtype == ATTN_DTYPE_FP8_E4M3 || out->dtype == ATTN_DTYPE_FP8_E5M2, ATTN_STATUS_INVALID_ARGUMENT,
                   "out: dtype %s, expected fp8_e4m3 or fp8_e5m2 with output_scale", attn_dtype_name(out->dtype));
    ATTN_CHECK(fp8 || (out->dtype != ATTN_DTYPE_FP8_E4M3 && out->dtype != ATTN_DTYPE_FP8_E5M2),
               ATTN_STATUS_INVALID_ARGUMENT, "out: dtype %s needs output_scale > 0 (got %g)",
               attn_dtype_name(out->dtype), (double)output_scale);
    for (int i = 0; i < 2; i++) {
        if (i == 0 || !fp8)
            ATTN_TRY(attn_tensor_check_dtype(os[i], on[i], out_a->dtype));
        ATTN_TRY(attn_tensor_check_dim(os[i], on[i], 0, T, "num_tokens"));
        ATTN_TRY(attn_tensor_check_dim(os[i], on[i], 1, H, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(os[i], on[i], 2, D, "head_size"));
        ATTN_TRY(attn_validate_aligned(os[i], on[i]));
    }
    ATTN_TRY(attn_validate_aligned(out_a, "out_a"));
    const attn_tensor *ls[] = {lse_a, lse_b, lse_out};
    const char *ln[] = {"lse_a", "lse_b", "lse_out"};
    for (int i = 0; i < 3; i++) {
        if (i == 2 && !lse_out) break;
        ATTN_TRY(attn_tensor_check(ls[i], ln[i], 2, 0));
        ATTN_TRY(attn_tensor_check_dtype(ls[i], ln[i], ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(ls[i], ln[i]));
        ATTN_TRY(attn_tensor_check_dim(ls[i], ln[i], 0, H, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(ls[i], ln[i], 1, T, "num_tokens"));
    }
    ATTN_TRY(attn_validate_distinct_elements(out, "out"));
    if (lse_out) ATTN_TRY(attn_validate_distinct_elements(lse_out, "lse_out"));
    /* out may alias out_a/out_b exactly (element-wise in place); partial overlaps are rejected. */
    const attn_tensor *ins[] = {out_a, out_b, lse_a, lse_b, lse_out};
    const char *names[] = {"out_a", "out_b", "lse_a", "lse_b", "lse_out"};
    for (int i = 0; i < 5; i++) {
        if (!ins[i]) continue;
        int same = ins[i]->data == out->data && ins[i]->dtype == out->dtype && ins[i]->ndim == out->ndim &&
                   memcmp(ins[i]->shape, out->shape, sizeof out->shape) == 0 &&
                   memcmp(ins[i]->strides, out->strides, sizeof out->strides) == 0;
        ATTN_CHECK(same || !attn_tensor_overlap(out, ins[i]), ATTN_STATUS_INVALID_ARGUMENT,
                   "out: partially overlaps %s in memory", names[i]);
    }
    if (lse_out)
        for (int i = 0; i < 4; i++) {
            int same = ins[i]->data == lse_out->data && ins[i]->ndim == lse_out->ndim &&
                       memcmp(ins[i]->shape, lse_out->shape, sizeof lse_out->shape) == 0 &&
                       memcmp(ins[i]->strides, lse_out->strides, sizeof lse_out->strides) == 0;
            ATTN_CHECK(same || !attn_tensor_overlap(lse_out, ins[i]), ATTN_STATUS_INVALID_ARGUMENT,
                       "lse_out: partially overlaps %s in memory", names[i]);
        }
    attn_merge_job job = {.out_a = out_a,
                          .out_b = out_b,
                          .lse_a = lse_a,
                          .lse_b = lse_b,
                          .out = out,
                          .lse_out = lse_out,
                          .merge_tokens = merge_tokens,
                          .fp8 = fp8,
                          .inv_scale = fp8 ? 1.0f / output_scale : 1.0f};
    ATTN_TRY(attn_ctx_claim(ctx));
    /* tokens are independent: any split over threads gives the same bits; small merges stay on this thread */
    attn_parallel_for(elems >= ATTN_MERGE_PARALLEL_MIN ? ctx->num_threads : 1, T, attn_merge_token, &job);
    attn_ctx_release(ctx);
    return ATTN_STATUS_OK;
}

attn_status attn_merge_attn_states(attn_ctx *ctx, const attn_tensor *out_a, const attn_tensor *lse_a,
                                   const attn_tensor *out_b, const attn_tensor *lse_b, attn_tensor *out,
                                   attn_tensor *lse_out) {
    return attn_merge_attn_states_ex(ctx, out_a, lse_a, out_b, lse_b, INT64_MAX, 0.0f, out, lse_out);
}
