/*
 * api_diffusion.c — diffusion entry points (docs/DIFFUSION.md): self-attention with a key
 * padding mask (unpad → packed → pad through index lists, no copies, no Sq×Sk mask), packed batch-1
 * documents, piecewise causal/full spans (a per-row key range, never a mask), prefix K/V slicing,
 * power-of-two input pre-scaling and quantized attention (fp8 / MX emulated by fake quantization), and the
 * piecewise spans over a paged KV cache (the same driver, K/V through block-table rows).
 * Each entry validates everything first; compute runs in the shared driver (or the oracle).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/ctx.h"
#include "api/validate.h"
#include "attn/attn_experimental.h"
#include "cache/kv_layout.h"
#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dispatch/dispatch.h"
#include "quant/quant.h"
#include "ref/ref.h"
#include "ref/ref_quant.h"

/* ---------------------------------------------------------------------------------------------
 * Types: one call's operands in bytes, read by diff_get_seq
 * --------------------------------------------------------------------------------------------- */
typedef struct diff_operand {
    const char *data;     /* element (0, 0, 0, 0)                   */
    int64_t batch_stride; /* bytes between batch rows               */
    int64_t seq_stride;   /* bytes between tokens                   */
    int64_t head_stride;  /* bytes between heads                    */
} diff_operand;

typedef struct diff_call {
    diff_operand q, k, v, out;
    float *lse;             /* [batch, num_heads, seq_q] or NULL            */
    int64_t lse_strides[3]; /* elements                                     */
    int64_t seq_q, seq_k;
    /* self-attention padding route (NULL otherwise) */
    const int64_t *valid_counts; /* [batch] valid tokens per row                 */
    const int32_t *valid_rows;   /* [batch][seq_len] ascending valid indices     */
    int64_t seq_len;
} diff_call;

/* The query, output and LSE part of batch row b's sequence view (dense and paged diffusion calls). */
static void diff_seq_q_out(attn_seq_view *s, const diff_operand *q, const diff_operand *out, float *lse,
                           const int64_t lse_strides[3], int64_t b) {
    s->q = attn_byte_ptr(q->data, b * q->batch_stride);
    s->q_row_stride = q->seq_stride;
    s->q_head_stride = q->head_stride;
    s->out = (char *)(uintptr_t)attn_byte_ptr(out->data, b * out->batch_stride);
    s->out_row_stride = out->seq_stride;
    s->out_head_stride = out->head_stride;
    if (lse) {
        s->lse = (float *)(uintptr_t)attn_byte_ptr(lse, b * lse_strides[0] * (int64_t)sizeof(float));
        s->lse_head_stride = lse_strides[1];
        s->lse_row_stride = lse_strides[2];
    }
}

static diff_operand diff_operand_of(const attn_tensor *t, int32_t s_dim, int32_t n_dim) {
    const int64_t es = (int64_t)attn_dtype_size(t->dtype);
    diff_operand o;
    o.data = (const char *)t->data;
    o.batch_stride = t->strides[0] * es;
    o.seq_stride = t->strides[s_dim] * es;
    o.head_stride = t->strides[n_dim] * es;
    return o;
}

static void diff_get_seq(const attn_problem *p, int64_t b, attn_seq_view *s) {
    const diff_call *c = (const diff_call *)p->user[0];
    memset(s, 0, sizeof *s);
    s->batch_idx = b;
    s->seq_q = c->seq_q;
    s->seq_k = c->seq_k;
    diff_seq_q_out(s, &c->q, &c->out, c->lse, c->lse_strides, b);
    s->k = attn_byte_ptr(c->k.data, b * c->k.batch_stride);
    s->k_row_stride = c->k.seq_stride;
    s->k_head_stride = c->k.head_stride;
    s->v = attn_byte_ptr(c->v.data, b * c->v.batch_stride);
    s->v_row_stride = c->v.seq_stride;
    s->v_head_stride = c->v.head_stride;
    if (c->valid_rows) {
        /* compacted sequence: query row i and key j are token valid_rows[b][i] / [j]; K/V through a
         * block table with block_size 1 (zero-copy gather), Q/out/LSE through q_rows */
        const int32_t *rows = c->valid_rows + b * c->seq_len;
        s->seq_q = s->seq_k = c->valid_counts[b];
        s->q_rows = rows;
        s->k_tokens = rows; /* explicit/additive masks are indexed by token */
        s->block_table = rows;
        s->block_size = 1;
        s->k_block_stride = c->k.seq_stride;
        s->v_block_stride = c->v.seq_stride;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Validation of a dense call (the same rules as attn_forward)
 * --------------------------------------------------------------------------------------------- */
typedef struct diff_dims {
    int32_t s_dim, n_dim;
    int64_t batch, seq_q, seq_k, num_heads, num_kv_heads, head_size, head_size_v;
} diff_dims;

static attn_status diff_check_qkv(attn_layout layout, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                  diff_dims *d) {
    ATTN_CHECK(layout == ATTN_LAYOUT_BSND || layout == ATTN_LAYOUT_BNSD, ATTN_STATUS_INVALID_ARGUMENT,
               "layout=%d is not an attn_layout value", (int)layout);
    ATTN_TRY(attn_tensor_check(q, "q", 4, 1));
    ATTN_TRY(attn_tensor_check(k, "k", 4, 1));
    ATTN_TRY(attn_tensor_check(v, "v", 4, 1));
    ATTN_TRY(attn_tensor_check_float(q, "q"));
    ATTN_TRY(attn_tensor_check_float(k, "k"));
    ATTN_TRY(attn_tensor_check_float(v, "v"));
    ATTN_CHECK(v->dtype == k->dtype, ATTN_STATUS_INVALID_ARGUMENT, "v: dtype %s differs from k dtype %s",
               attn_dtype_name(v->dtype), attn_dtype_name(k->dtype));
    d->s_dim = layout == ATTN_LAYOUT_BSND ? 1 : 2;
    d->n_dim = layout == ATTN_LAYOUT_BSND ? 2 : 1;
    d->batch = q->shape[0], d->seq_q = q->shape[d->s_dim], d->num_heads = q->shape[d->n_dim];
    d->head_size = q->shape[3];
    d->seq_k = k->shape[d->s_dim], d->num_kv_heads = k->shape[d->n_dim], d->head_size_v = v->shape[3];
    ATTN_TRY(attn_tensor_check_dim(k, "k", 0, d->batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", 0, d->batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(k, "k", 3, d->head_size, "head_size"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", d->s_dim, d->seq_k, "seq_k"));
    ATTN_TRY(attn_tensor_check_dim(v, "v", d->n_dim, d->num_kv_heads, "num_kv_heads"));
    ATTN_CHECK(d->num_heads >= 1, ATTN_STATUS_INVALID_ARGUMENT, "q: num_heads=%lld, expected >= 1",
               (long long)d->num_heads);
    ATTN_CHECK(d->num_kv_heads >= 1 && d->num_heads % d->num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "k: shape[%d]=%lld does not divide num_heads=%lld", (int)d->n_dim, (long long)d->num_kv_heads,
               (long long)d->num_heads);
    ATTN_CHECK(d->head_size >= 1 && d->head_size <= ATTN_HEAD_SIZE_MAX, ATTN_STATUS_INVALID_ARGUMENT,
               "q: head_size=%lld is outside 1..%d", (long long)d->head_size, ATTN_HEAD_SIZE_MAX);
    ATTN_CHECK(d->head_size_v >= 1 && d->head_size_v <= ATTN_HEAD_SIZE_MAX, ATTN_STATUS_INVALID_ARGUMENT,
               "v: head_size=%lld is outside 1..%d", (long long)d->head_size_v, ATTN_HEAD_SIZE_MAX);
    ATTN_TRY(attn_validate_dims(d->num_heads, d->num_kv_heads, d->seq_q, d->seq_k));
    int64_t pairs = 0;
    ATTN_TRY(attn_work_add(&pairs, d->batch, d->num_heads, d->seq_q, d->seq_k));
    ATTN_TRY(attn_validate_aligned(q, "q"));
    ATTN_TRY(attn_validate_aligned(k, "k"));
    ATTN_TRY(attn_validate_aligned(v, "v"));
    return ATTN_STATUS_OK;
}

/* Validates a whole dense call and fills the problem (driver dtypes = the tensors' dtypes). */
static attn_status diff_prepare(attn_layout layout, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_params *params, int allow_masks, attn_tensor *out, attn_tensor *lse,
                                diff_dims *d, diff_call *call, attn_problem *p) {
    ATTN_TRY(diff_check_qkv(layout, q, k, v, d));
    ATTN_TRY(attn_tensor_check(out, "out", 4, 1));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 0, d->batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", d->s_dim, d->seq_q, "seq_q"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", d->n_dim, d->num_heads, "num_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 3, d->head_size_v, "head_size_v"));
    ATTN_CHECK(out->dtype == q->dtype, ATTN_STATUS_INVALID_ARGUMENT, "out: dtype %s differs from q dtype %s",
               attn_dtype_name(out->dtype), attn_dtype_name(q->dtype));
    ATTN_TRY(attn_validate_aligned(out, "out"));
    if (lse) {
        ATTN_TRY(attn_tensor_check(lse, "lse", 3, 0));
        ATTN_TRY(attn_tensor_check_dtype(lse, "lse", ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(lse, "lse"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 0, d->batch, "batch"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 1, d->num_heads, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 2, d->seq_q, "seq_q"));
    }
    ATTN_TRY(attn_opts_resolve(params, d->num_heads, d->head_size, allow_masks, &p->opts));
    ATTN_TRY(attn_validate_masks(&p->opts, d->batch, d->num_heads, d->seq_q, d->seq_k));
    const attn_tensor *ins[] = {q, k, v, p->opts.mask, p->opts.key_padding_mask, p->opts.additive_mask, lse};
    const char *names[] = {"q", "k", "v", "params.mask", "params.key_padding_mask", "params.additive_mask",
                           "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 7));
    if (lse)
        ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 6));
    int64_t work;
    ATTN_CHECK(attn_mul_i64(d->batch, d->num_heads, &work) && attn_mul_i64(work, d->seq_q > 0 ? d->seq_q : 1, &work),
               ATTN_STATUS_OVERFLOW, "q: batch·num_heads·seq_q overflows int64");

    memset(call, 0, sizeof *call);
    call->q = diff_operand_of(q, d->s_dim, d->n_dim);
    call->k = diff_operand_of(k, d->s_dim, d->n_dim);
    call->v = diff_operand_of(v, d->s_dim, d->n_dim);
    call->out = diff_operand_of(out, d->s_dim, d->n_dim);
    if (lse) {
        call->lse = (float *)lse->data;
        for (int i = 0; i < 3; i++)
            call->lse_strides[i] = lse->strides[i];
    }
    call->seq_q = d->seq_q, call->seq_k = d->seq_k;
    p->num_heads = d->num_heads, p->num_kv_heads = d->num_kv_heads;
    p->head_size = d->head_size, p->head_size_v = d->head_size_v;
    p->q_dtype = q->dtype, p->kv_dtype = k->dtype, p->out_dtype = out->dtype;
    p->num_seqs = d->batch;
    p->max_seq_q = d->seq_q;
    p->get_seq = diff_get_seq;
    p->user[0] = call;
    return ATTN_STATUS_OK;
}

static attn_status diff_run(attn_ctx *ctx, const attn_problem *p) {
    if (!ctx)
        return attn_ref_run(p);
    return attn_ctx_run(ctx, p);
}

/* ---------------------------------------------------------------------------------------------
 * Self-attention with a key-padding mask (docs/DIFFUSION.md §1)
 * --------------------------------------------------------------------------------------------- */
attn_status attn_forward_padded_workspace_size(int64_t batch, int64_t seq_len, size_t *bytes) {
    ATTN_CHECK(bytes != NULL, ATTN_STATUS_INVALID_ARGUMENT, "bytes: is NULL");
    ATTN_CHECK(batch >= 0 && seq_len >= 0, ATTN_STATUS_INVALID_ARGUMENT, "batch=%lld, seq_len=%lld: expected >= 0",
               (long long)batch, (long long)seq_len);
    int64_t rows, starts, total; /* rows·4 + batch·8 bytes, every product checked */
    ATTN_CHECK(attn_mul_i64(batch, seq_len, &rows) && attn_mul_i64(batch, 8, &starts) &&
                   attn_muladd_i64(rows, 4, starts, &total) &&
                   (uint64_t)total <= (uint64_t)SIZE_MAX,
               ATTN_STATUS_OVERFLOW, "workspace: batch=%lld × seq_len=%lld index list overflows", (long long)batch,
               (long long)seq_len);
    ATTN_CHECK((uint64_t)total <= ATTN_MAX_WORKSPACE_BYTES, ATTN_STATUS_OVERFLOW,
               "workspace: batch=%lld x seq_len=%lld needs %lld bytes > ATTN_MAX_WORKSPACE_BYTES=%llu",
               (long long)batch, (long long)seq_len, (long long)total, (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    *bytes = (size_t)total;
    return ATTN_STATUS_OK;
}

static attn_status diff_padded(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *kpm, const attn_params *params,
                               attn_tensor *out, attn_tensor *lse, void *workspace, size_t workspace_size) {
    diff_dims d = {0};
    diff_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_CHECK(!params || !params->key_padding_mask, ATTN_STATUS_UNSUPPORTED,
               "params.key_padding_mask: the padded route takes its key padding mask as the key_padding_mask "
               "argument");
    /* params.mask / params.additive_mask ([B|1, H|1, S|1, S|1], indexed by token) are ANDed with / added to the
     * compacted attention: compacted row i and key j read mask element (b, h, rows[i], rows[j]) */
    ATTN_TRY(diff_prepare(layout, q, k, v, params, 1, out, lse, &d, &call, &p));
    ATTN_CHECK(d.seq_q == d.seq_k, ATTN_STATUS_INVALID_ARGUMENT,
               "k: seq_k=%lld differs from seq_q=%lld: the padded route is self-attention; use attn_forward "
               "with params.key_padding_mask for cross-attention",
               (long long)d.seq_k, (long long)d.seq_q);
    ATTN_CHECK(d.seq_q <= INT32_MAX, ATTN_STATUS_OVERFLOW, "q: seq=%lld exceeds the int32 index range",
               (long long)d.seq_q);
    ATTN_CHECK(kpm != NULL, ATTN_STATUS_INVALID_ARGUMENT, "key_padding_mask: is NULL");
    ATTN_TRY(attn_tensor_check(kpm, "key_padding_mask", 2, 0));
    ATTN_CHECK(kpm->dtype == ATTN_DTYPE_BOOL || kpm->dtype == ATTN_DTYPE_U8, ATTN_STATUS_INVALID_ARGUMENT,
               "key_padding_mask: dtype %s, expected bool or u8", attn_dtype_name(kpm->dtype));
    ATTN_TRY(attn_tensor_check_dim(kpm, "key_padding_mask", 0, d.batch, "batch"));
    ATTN_TRY(attn_tensor_check_dim(kpm, "key_padding_mask", 1, d.seq_q, "seq"));
    const attn_tensor *ins[] = {kpm};
    const char *names[] = {"key_padding_mask"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 1));
    if (lse)
        ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 1));
    const attn_tensor *views[] = {q, k, v, kpm, p.opts.mask, p.opts.additive_mask, out, lse};
    const char *view_names[] = {"q", "k", "v", "key_padding_mask", "params.mask", "params.additive_mask",
                                "out", "lse"};
    size_t need = 0;
    ATTN_TRY(attn_forward_padded_workspace_size(d.batch, d.seq_q, &need));
    ATTN_CHECK(workspace_size >= need, ATTN_STATUS_WORKSPACE_TOO_SMALL,
               "workspace_size=%zu, need %zu (valid_counts %lld × 8 + valid_rows %lld × 4 bytes)", workspace_size, need,
               (long long)d.batch, (long long)(d.batch * d.seq_q));
    ATTN_TRY(attn_validate_workspace(workspace, need, 8, views, view_names, 8));

    /* unpad: per batch row, the ascending valid indices (compaction keeps the token order) */
    int64_t *counts = (int64_t *)workspace;
    int32_t *rows = (int32_t *)(uintptr_t)attn_byte_ptr(counts, d.batch * (int64_t)sizeof(int64_t));
    const unsigned char *m = (const unsigned char *)kpm->data;
    int64_t max_count = 0;
    for (int64_t b = 0; b < d.batch; b++) {
        int64_t n = 0;
        for (int64_t s = 0; s < d.seq_q; s++)
            if (m[b * kpm->strides[0] + s * kpm->strides[1]])
                rows[b * d.seq_q + n++] = (int32_t)s;
        counts[b] = n;
        if (n > max_count)
            max_count = n;
    }
    call.valid_counts = counts;
    call.valid_rows = rows;
    call.seq_len = d.seq_q;
    p.max_seq_q = max_count;
    ATTN_TRY(diff_run(ctx, &p));

    /* pad: padded query rows are exactly 0 with LSE −inf (+0.0 is all-zero bytes in f32/f16/bf16) */
    const size_t row_bytes = (size_t)d.head_size_v * attn_dtype_size(out->dtype);
    for (int64_t b = 0; b < d.batch; b++)
        for (int64_t s = 0; s < d.seq_q; s++) {
            if (m[b * kpm->strides[0] + s * kpm->strides[1]])
                continue;
            for (int64_t h = 0; h < d.num_heads; h++) {
                memset((char *)(uintptr_t)call.out.data + b * call.out.batch_stride + s * call.out.seq_stride +
                           h * call.out.head_stride,
                       0, row_bytes);
                if (call.lse)
                    call.lse[b * call.lse_strides[0] + h * call.lse_strides[1] + s * call.lse_strides[2]] = -INFINITY;
            }
        }
    return ATTN_STATUS_OK;
}

attn_status attn_forward_padded(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_tensor *key_padding_mask, const attn_params *params,
                                attn_tensor *out, attn_tensor *lse_opt, void *workspace, size_t workspace_size) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    return diff_padded(ctx, layout, q, k, v, key_padding_mask, params, out, lse_opt, workspace, workspace_size);
}

attn_status attn_ref_forward_padded(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                    const attn_tensor *v, const attn_tensor *key_padding_mask,
                                    const attn_params *params, attn_tensor *out, attn_tensor *lse_opt, void *workspace,
                                    size_t workspace_size) {
    ATTN_PARAMS_LOAD(params);
    return diff_padded(NULL, layout, q, k, v, key_padding_mask, params, out, lse_opt, workspace, workspace_size);
}

/* ---------------------------------------------------------------------------------------------
 * Packed documents, batch 1 (flash-attn varlen, one row)
 * --------------------------------------------------------------------------------------------- */
static attn_status diff_drop_batch(const attn_tensor *t, const char *name, attn_tensor *t3) {
    ATTN_TRY(attn_tensor_check(t, name, 4, 1));
    ATTN_CHECK(t->shape[0] == 1, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: shape[0]=%lld, expected batch 1 (packed documents use cu_seqlens)", name, (long long)t->shape[0]);
    *t3 = *t;
    t3->ndim = 3;
    for (int i = 0; i < 3; i++)
        t3->shape[i] = t->shape[i + 1], t3->strides[i] = t->strides[i + 1];
    t3->shape[3] = 0, t3->strides[3] = 0;
    return ATTN_STATUS_OK;
}

attn_status attn_forward_packed(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const attn_tensor *cu_seqlens_q, const attn_tensor *cu_seqlens_k,
                                const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    attn_tensor q3, k3, v3, o3;
    ATTN_TRY(diff_drop_batch(q, "q", &q3));
    ATTN_TRY(diff_drop_batch(k, "k", &k3));
    ATTN_TRY(diff_drop_batch(v, "v", &v3));
    ATTN_TRY(diff_drop_batch(out, "out", &o3));
    return attn_forward_varlen(ctx, &q3, &k3, &v3, cu_seqlens_q, cu_seqlens_k, params, &o3, lse_opt);
}

/* ---------------------------------------------------------------------------------------------
 * Piecewise causal/full spans (docs/DIFFUSION.md §2)
 * --------------------------------------------------------------------------------------------- */
static attn_status diff_check_spans(const attn_span *spans, int64_t num_spans, int64_t seq_k) {
    ATTN_CHECK(num_spans >= 0, ATTN_STATUS_INVALID_ARGUMENT, "num_spans=%lld, expected >= 0", (long long)num_spans);
    ATTN_CHECK(num_spans == 0 || spans != NULL, ATTN_STATUS_INVALID_ARGUMENT, "spans: is NULL with num_spans=%lld",
               (long long)num_spans);
    for (int64_t t = 0; t < num_spans; t++) {
        ATTN_CHECK(spans[t].start >= 0 && spans[t].start < spans[t].end && spans[t].end <= seq_k,
                   ATTN_STATUS_INVALID_ARGUMENT, "spans[%lld]=(%lld,%lld): expected 0 <= start < end <= seq_k=%lld",
                   (long long)t, (long long)spans[t].start, (long long)spans[t].end, (long long)seq_k);
        ATTN_CHECK(t == 0 || spans[t].start >= spans[t - 1].end, ATTN_STATUS_INVALID_ARGUMENT,
                   "spans[%lld]=(%lld,%lld) starts before spans[%lld] ends at %lld: spans must be sorted and "
                   "non-overlapping",
                   (long long)t, (long long)spans[t].start, (long long)spans[t].end, (long long)(t - 1),
                   (long long)(t > 0 ? spans[t - 1].end : 0));
    }
    return ATTN_STATUS_OK;
}

static attn_status diff_check_ranges(const attn_query_range *r, int64_t n, int64_t seq_q, int64_t seq_k) {
    ATTN_CHECK(n >= 1 && r != NULL, ATTN_STATUS_INVALID_ARGUMENT,
               "query_ranges: %s with num_query_ranges=%lld, expected >= 1 ranges", r ? "given" : "NULL", (long long)n);
    int64_t covered = 0;
    for (int64_t t = 0; t < n; t++) {
        ATTN_CHECK(r[t].local_start == covered && r[t].local_end >= r[t].local_start, ATTN_STATUS_INVALID_ARGUMENT,
                   "query_ranges[%lld]=(%lld,%lld,%lld): must cover local query rows contiguously from %lld",
                   (long long)t, (long long)r[t].local_start, (long long)r[t].local_end, (long long)r[t].global_start,
                   (long long)covered);
        ATTN_CHECK(r[t].global_start >= 0 && r[t].global_start <= seq_k - (r[t].local_end - r[t].local_start),
                   ATTN_STATUS_INVALID_ARGUMENT,
                   "query_ranges[%lld]=(%lld,%lld,%lld): global positions fall outside the keys [0, %lld)",
                   (long long)t, (long long)r[t].local_start, (long long)r[t].local_end, (long long)r[t].global_start,
                   (long long)seq_k);
        covered = r[t].local_end;
    }
    ATTN_CHECK(covered == seq_q, ATTN_STATUS_INVALID_ARGUMENT,
               "query_ranges: cover local rows [0, %lld), expected the full query [0, %lld)", (long long)covered,
               (long long)seq_q);
    return ATTN_STATUS_OK;
}

static attn_status diff_piecewise(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_span *spans, int64_t num_spans,
                                  const attn_query_range *ranges, int64_t num_ranges, const attn_params *params,
                                  attn_tensor *out, attn_tensor *lse) {
    ATTN_CHECK(!params || (!params->mask && !params->key_padding_mask && !params->additive_mask),
               ATTN_STATUS_UNSUPPORTED, "params.%s: explicit masks cannot be combined with piecewise spans",
               params && params->mask               ? "mask"
               : params && params->key_padding_mask ? "key_padding_mask"
                                                    : "additive_mask");
    ATTN_CHECK(!params || params->causal == ATTN_CAUSAL_NONE, ATTN_STATUS_UNSUPPORTED,
               "params.causal=%d: piecewise spans define causality themselves; pass ATTN_CAUSAL_NONE",
               params ? (int)params->causal : 0);
    diff_dims d = {0};
    diff_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(diff_prepare(layout, q, k, v, params, 0, out, lse, &d, &call, &p));
    ATTN_TRY(diff_check_spans(spans, num_spans, d.seq_k));
    attn_query_range def;
    if (ranges == NULL && num_ranges == 0) { /* §B.1: the local queries are the last seq_q positions */
        ATTN_CHECK(d.seq_q <= d.seq_k, ATTN_STATUS_INVALID_ARGUMENT,
                   "q: seq_q=%lld > seq_k=%lld without query_ranges: the default range (0, seq_q, seq_k − seq_q) "
                   "would start at a negative position",
                   (long long)d.seq_q, (long long)d.seq_k);
        def.local_start = 0, def.local_end = d.seq_q, def.global_start = d.seq_k - d.seq_q;
        ranges = &def, num_ranges = 1;
    }
    ATTN_TRY(diff_check_ranges(ranges, num_ranges, d.seq_q, d.seq_k));
    p.opts.piecewise = 1;
    p.opts.spans = spans;
    p.opts.num_spans = num_spans;
    p.opts.query_ranges = ranges;
    p.opts.num_query_ranges = num_ranges;
    return diff_run(ctx, &p);
}

attn_status attn_forward_piecewise(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const attn_span *spans, int64_t num_spans,
                                   const attn_query_range *query_ranges, int64_t num_query_ranges,
                                   const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    return diff_piecewise(ctx, layout, q, k, v, spans, num_spans, query_ranges, num_query_ranges, params, out, lse_opt);
}

attn_status attn_ref_forward_piecewise(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const attn_span *spans, int64_t num_spans,
                                       const attn_query_range *query_ranges, int64_t num_query_ranges,
                                       const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    return diff_piecewise(NULL, layout, q, k, v, spans, num_spans, query_ranges, num_query_ranges, params, out,
                          lse_opt);
}

/* ---------------------------------------------------------------------------------------------
 * Piecewise spans over a paged KV cache (docs/DIFFUSION.md §3): the rows of vllm-omni's
 * homogeneous batch read K/V through their block-table rows; queries through a strided 4-D view
 * --------------------------------------------------------------------------------------------- */
typedef struct diff_paged_call {
    diff_operand q, out;        /* [rows, query_len, num_heads, *] (byte strides)          */
    float *lse;                 /* [rows, num_heads, query_len] or NULL                    */
    int64_t lse_strides[3];     /* elements                                                */
    int64_t query_len;
    attn_kv_layout cache;
    const int32_t *seq_lens;    /* [rows], element stride seq_lens_stride                  */
    int64_t seq_lens_stride;
    const int32_t *block_table; /* [rows, max_blocks], rows bt_row_stride elements apart    */
    int64_t bt_row_stride;
} diff_paged_call;

static void diff_paged_get_seq(const attn_problem *p, int64_t r, attn_seq_view *s) {
    const diff_paged_call *c = (const diff_paged_call *)p->user[0];
    memset(s, 0, sizeof *s);
    s->batch_idx = r;
    s->seq_q = c->query_len;
    s->seq_k = c->seq_lens[r * c->seq_lens_stride];
    diff_seq_q_out(s, &c->q, &c->out, c->lse, c->lse_strides, r);
    s->k = attn_byte_ptr(c->cache.base, 0); /* an empty cache may have data NULL */
    s->v = attn_byte_ptr(c->cache.base, c->cache.kv_stride);
    s->block_table =
        (const int32_t *)(uintptr_t)attn_byte_ptr(c->block_table, r * c->bt_row_stride * (int64_t)sizeof(int32_t));
    s->block_size = c->cache.block_size;
    s->k_block_stride = s->v_block_stride = c->cache.block_stride;
    s->k_row_stride = s->v_row_stride = c->cache.row_stride;
    s->k_head_stride = s->v_head_stride = c->cache.head_stride;
}

static attn_status diff_check_i32(const attn_tensor *t, const char *name, int32_t ndim) {
    ATTN_CHECK(t != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL", name);
    ATTN_TRY(attn_tensor_check(t, name, ndim, 0));
    ATTN_TRY(attn_tensor_check_dtype(t, name, ATTN_DTYPE_I32));
    ATTN_TRY(attn_validate_aligned(t, name));
    return ATTN_STATUS_OK;
}

static attn_status diff_paged_piecewise(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                        const attn_tensor *seq_lens, const attn_tensor *bt, const attn_span *spans,
                                        int64_t num_spans, const attn_query_range *ranges, int64_t num_ranges,
                                        const attn_params *params, attn_tensor *out, attn_tensor *lse) {
    ATTN_CHECK(!params || (!params->mask && !params->key_padding_mask && !params->additive_mask),
               ATTN_STATUS_UNSUPPORTED, "params.%s: explicit masks cannot be combined with piecewise spans",
               params && params->mask               ? "mask"
               : params && params->key_padding_mask ? "key_padding_mask"
                                                    : "additive_mask");
    ATTN_CHECK(!params || params->causal == ATTN_CAUSAL_NONE, ATTN_STATUS_UNSUPPORTED,
               "params.causal=%d: piecewise spans define causality themselves; pass ATTN_CAUSAL_NONE",
               params ? (int)params->causal : 0);
    diff_paged_call c;
    attn_problem p;
    memset(&c, 0, sizeof c);
    memset(&p, 0, sizeof p);
    ATTN_TRY(attn_kv_layout_of(kv_cache, "kv_cache", &c.cache));
    ATTN_TRY(attn_tensor_check(q, "q", 4, 1));
    ATTN_TRY(attn_tensor_check_float(q, "q"));
    ATTN_TRY(attn_validate_aligned(q, "q"));
    const int64_t rows = q->shape[0], query_len = q->shape[1], num_heads = q->shape[2];
    ATTN_CHECK(num_heads >= 1, ATTN_STATUS_INVALID_ARGUMENT, "q: num_heads=%lld, expected >= 1", (long long)num_heads);
    ATTN_TRY(attn_validate_dims(num_heads, c.cache.num_kv_heads, query_len, 0));
    ATTN_CHECK(rows <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT, "q: rows=%lld exceeds ATTN_MAX_SEQ_LEN=%lld",
               (long long)rows, (long long)ATTN_MAX_SEQ_LEN);
    ATTN_CHECK(num_heads % c.cache.num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: shape[3]=%lld does not divide num_heads=%lld", (long long)c.cache.num_kv_heads,
               (long long)num_heads);
    ATTN_TRY(attn_tensor_check_dim(q, "q", 3, c.cache.head_size, "kv_cache head_size"));
    ATTN_TRY(attn_tensor_check(out, "out", 4, 1));
    ATTN_TRY(attn_tensor_check_dtype(out, "out", q->dtype));
    ATTN_TRY(attn_validate_aligned(out, "out"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 0, rows, "rows"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 1, query_len, "query_len"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 2, num_heads, "num_heads"));
    ATTN_TRY(attn_tensor_check_dim(out, "out", 3, c.cache.head_size, "head_size"));
    if (lse) {
        ATTN_TRY(attn_tensor_check(lse, "lse", 3, 0));
        ATTN_TRY(attn_tensor_check_dtype(lse, "lse", ATTN_DTYPE_F32));
        ATTN_TRY(attn_validate_aligned(lse, "lse"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 0, rows, "rows"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 1, num_heads, "num_heads"));
        ATTN_TRY(attn_tensor_check_dim(lse, "lse", 2, query_len, "query_len"));
    }
    ATTN_TRY(attn_opts_resolve(params, num_heads, c.cache.head_size, 0, &p.opts));
    ATTN_TRY(attn_opts_resolve_kv_scales(params, c.cache.dtype, c.cache.num_kv_heads, &p.opts));
    ATTN_TRY(diff_check_i32(seq_lens, "seq_lens", 1));
    ATTN_TRY(attn_tensor_check_dim(seq_lens, "seq_lens", 0, rows, "rows"));
    /* spans: sorted and disjoint (any length first), then inside every row's keys */
    ATTN_TRY(diff_check_spans(spans, num_spans, ATTN_MAX_SEQ_LEN));
    const int32_t *sd = (const int32_t *)seq_lens->data;
    const int64_t sst = seq_lens->strides[0];
    for (int64_t r = 0; r < rows; r++)
        ATTN_CHECK(sd[r * sst] >= 0 && sd[r * sst] <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
                   "seq_lens: entry %lld = %lld is outside [0, ATTN_MAX_SEQ_LEN=%lld]", (long long)r,
                   (long long)sd[r * sst], (long long)ATTN_MAX_SEQ_LEN);
    ATTN_TRY(attn_validate_block_table(bt, sd, sst, rows, c.cache.block_size, c.cache.num_blocks, "rows"));
    int64_t pairs = 0, min_seq = ATTN_MAX_SEQ_LEN;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t seq_len = sd[r * sst];
        for (int64_t t = 0; t < num_spans; t++)
            ATTN_CHECK(spans[t].end <= seq_len, ATTN_STATUS_INVALID_ARGUMENT,
                       "spans[%lld]=(%lld,%lld): expected 0 <= start < end <= seq_lens[%lld]=%lld", (long long)t,
                       (long long)spans[t].start, (long long)spans[t].end, (long long)r, (long long)seq_len);
        if (ranges == NULL && num_ranges == 0) /* vllm-omni's row model: kv_start_pos = seq_len − query_len */
            ATTN_CHECK(query_len <= seq_len, ATTN_STATUS_INVALID_ARGUMENT,
                       "seq_lens: entry %lld = %lld < query_len=%lld without query_ranges: the row's queries are its "
                       "last query_len positions",
                       (long long)r, (long long)seq_len, (long long)query_len);
        ATTN_TRY(attn_work_add(&pairs, 1, num_heads, query_len, seq_len));
        if (seq_len < min_seq) min_seq = seq_len;
    }
    if (!(ranges == NULL && num_ranges == 0)) /* the same ranges for every row: inside the shortest one */
        ATTN_TRY(diff_check_ranges(ranges, num_ranges, query_len, min_seq));
    const attn_tensor *ins[] = {q, kv_cache, seq_lens, bt, lse};
    const char *names[] = {"q", "kv_cache", "seq_lens", "block_table", "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, names, 5));
    if (lse) ATTN_TRY(attn_validate_no_overlap(lse, "lse", ins, names, 4));

    c.q = diff_operand_of(q, 1, 2);
    c.out = diff_operand_of(out, 1, 2);
    if (lse) {
        c.lse = (float *)lse->data;
        for (int i = 0; i < 3; i++) c.lse_strides[i] = lse->strides[i];
    }
    c.query_len = query_len;
    c.seq_lens = sd, c.seq_lens_stride = sst;
    c.block_table = (const int32_t *)bt->data, c.bt_row_stride = bt->strides[0];
    p.num_heads = num_heads, p.num_kv_heads = c.cache.num_kv_heads;
    p.head_size = p.head_size_v = c.cache.head_size;
    p.q_dtype = p.out_dtype = q->dtype;
    p.kv_dtype = c.cache.dtype;
    p.num_seqs = rows;
    p.max_seq_q = query_len;
    p.get_seq = diff_paged_get_seq;
    p.user[0] = &c;
    p.opts.piecewise = 1;
    p.opts.spans = spans;
    p.opts.num_spans = num_spans;
    p.opts.query_ranges = ranges; /* NULL, 0: each row's last query_len positions (attn_mask_query_pos) */
    p.opts.num_query_ranges = ranges ? num_ranges : 0;
    return diff_run(ctx, &p);
}

attn_status attn_forward_paged_piecewise(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                         const attn_tensor *seq_lens, const attn_tensor *block_table,
                                         const attn_span *spans, int64_t num_spans,
                                         const attn_query_range *query_ranges, int64_t num_query_ranges,
                                         const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    return diff_paged_piecewise(ctx, q, kv_cache, seq_lens, block_table, spans, num_spans, query_ranges,
                                num_query_ranges, params, out, lse_opt);
}

attn_status attn_ref_forward_paged_piecewise(const attn_tensor *q, const attn_tensor *kv_cache,
                                             const attn_tensor *seq_lens, const attn_tensor *block_table,
                                             const attn_span *spans, int64_t num_spans,
                                             const attn_query_range *query_ranges, int64_t num_query_ranges,
                                             const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    return diff_paged_piecewise(NULL, q, kv_cache, seq_lens, block_table, spans, num_spans, query_ranges,
                                num_query_ranges, params, out, lse_opt);
}

/* ---------------------------------------------------------------------------------------------
 * Prefix K/V slicing (docs/DIFFUSION.md §4)
 * --------------------------------------------------------------------------------------------- */
attn_status attn_forward_kv_prefix(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, int64_t valid_kv_length, const attn_params *params,
                                   attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    diff_dims d = {0};
    ATTN_TRY(diff_check_qkv(layout, q, k, v, &d));
    ATTN_CHECK(valid_kv_length >= 0 && valid_kv_length <= d.seq_k, ATTN_STATUS_INVALID_ARGUMENT,
               "valid_kv_length=%lld is outside 0..seq_k=%lld", (long long)valid_kv_length, (long long)d.seq_k);
    ATTN_CHECK(!params || params->causal == ATTN_CAUSAL_NONE, ATTN_STATUS_UNSUPPORTED,
               "params.causal=%d: prefix K/V slicing moves the bottom-right causal diagonal; use a key padding "
               "mask instead",
               params ? (int)params->causal : 0);
    ATTN_CHECK(!params || (!params->mask && !params->key_padding_mask && !params->additive_mask),
               ATTN_STATUS_UNSUPPORTED,
               "params.%s: masks are sized for the unsliced keys and cannot be combined with prefix slicing",
               params && params->mask               ? "mask"
               : params && params->key_padding_mask ? "key_padding_mask"
                                                    : "additive_mask");
    attn_tensor ks = *k, vs = *v;
    ks.shape[d.s_dim] = valid_kv_length; /* zero-copy views of the valid prefix */
    vs.shape[d.s_dim] = valid_kv_length;
    return attn_forward(ctx, layout, q, &ks, &vs, params, out, lse_opt);
}

/* ---------------------------------------------------------------------------------------------
 * Power-of-two input pre-scaling (docs/DIFFUSION.md §4)
 * --------------------------------------------------------------------------------------------- */
static size_t diff_round64(size_t x) {
    return (x + 63) & ~(size_t)63;
}

static attn_status diff_contig_bytes(const attn_tensor *t, const char *name, size_t *bytes) {
    ATTN_TRY(attn_tensor_check(t, name, 4, 1));
    ATTN_TRY(attn_tensor_check_float(t, name));
    const int64_t n = attn_tensor_numel(t);
    ATTN_CHECK((uint64_t)n <= SIZE_MAX / 8, ATTN_STATUS_OVERFLOW, "%s: %lld elements overflow size_t", name,
               (long long)n);
    *bytes = diff_round64((size_t)n * attn_dtype_size(t->dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_forward_prescaled_workspace_size(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                                  size_t *bytes) {
    ATTN_CHECK(bytes != NULL, ATTN_STATUS_INVALID_ARGUMENT, "bytes: is NULL");
    size_t a = 0, b = 0, c = 0;
    ATTN_TRY(diff_contig_bytes(q, "q", &a));
    ATTN_TRY(diff_contig_bytes(k, "k", &b));
    ATTN_TRY(diff_contig_bytes(v, "v", &c));
    ATTN_CHECK(a <= SIZE_MAX - b && a + b <= SIZE_MAX - c, ATTN_STATUS_OVERFLOW, "workspace: q+k+v bytes overflow");
    *bytes = a + b + c;
    ATTN_CHECK((uint64_t)*bytes <= ATTN_MAX_WORKSPACE_BYTES, ATTN_STATUS_OVERFLOW,
               "workspace: q+k+v copies need %zu bytes > ATTN_MAX_WORKSPACE_BYTES=%llu", *bytes,
               (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    return ATTN_STATUS_OK;
}

/* dst (contiguous, same shape and dtype) = src · factor, element by element through float32. */
static void diff_scaled_copy(const attn_tensor *src, float factor, void *dst_data, attn_tensor *dst) {
    *dst = attn_tensor_make(dst_data, src->dtype, 4, src->shape);
    const int64_t es = (int64_t)attn_dtype_size(src->dtype);
    int64_t n = 0;
    for (int64_t a = 0; a < src->shape[0]; a++)
        for (int64_t b = 0; b < src->shape[1]; b++)
            for (int64_t c = 0; c < src->shape[2]; c++) {
                const char *row =
                    (const char *)src->data + (a * src->strides[0] + b * src->strides[1] + c * src->strides[2]) * es;
                for (int64_t e = 0; e < src->shape[3]; e++, n++)
                    attn_store_f(dst_data, src->dtype, n, attn_load_f(row, src->dtype, e) * factor);
            }
}

attn_status attn_forward_prescaled(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, int32_t input_scale_log2, const attn_params *params,
                                   attn_tensor *out, attn_tensor *lse_opt, void *workspace, size_t workspace_size) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    ATTN_CHECK(input_scale_log2 >= 0 && input_scale_log2 <= 30, ATTN_STATUS_INVALID_ARGUMENT,
               "input_scale_log2=%d is outside 0..30", (int)input_scale_log2);
    diff_dims d = {0};
    diff_call vcall;
    attn_problem vp;
    memset(&vp, 0, sizeof vp);
    /* the whole dense call (out, lse, masks, overlaps, limits) is validated before the workspace is measured */
    ATTN_TRY(diff_prepare(layout, q, k, v, params, 1, out, lse_opt, &d, &vcall, &vp));
    size_t need = 0;
    ATTN_TRY(attn_forward_prescaled_workspace_size(q, k, v, &need));
    ATTN_CHECK(workspace_size >= need, ATTN_STATUS_WORKSPACE_TOO_SMALL,
               "workspace_size=%zu, need %zu (contiguous copies of q, k, v)", workspace_size, need);
    ATTN_CHECK(workspace != NULL || need == 0, ATTN_STATUS_INVALID_ARGUMENT, "workspace: is NULL");
    ATTN_CHECK(need == 0 || (uintptr_t)workspace % 4 == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "workspace: %p is not 4-byte aligned", workspace);
    attn_params sp;
    if (params)
        sp = *params;
    else
        attn_params_init(&sp);
    ATTN_CHECK(isfinite(sp.softmax_scale), ATTN_STATUS_INVALID_ARGUMENT, "params.softmax_scale=%g is not finite",
               (double)sp.softmax_scale);
    const float base = sp.softmax_scale != 0.0f ? sp.softmax_scale : (float)(1.0 / sqrt((double)d.head_size));
    const float c = (float)ldexp(1.0, input_scale_log2), inv_c = (float)ldexp(1.0, -input_scale_log2);
    sp.softmax_scale = base * c * c; /* exact: a power of two */
    ATTN_CHECK(isfinite(sp.softmax_scale) && sp.softmax_scale != 0.0f, ATTN_STATUS_INVALID_ARGUMENT,
               "params.softmax_scale=%g × 4^%d leaves the float range", (double)base, (int)input_scale_log2);
    const attn_tensor *views[] = {q, k, v, sp.mask, sp.key_padding_mask, sp.additive_mask, out, lse_opt};
    const char *view_names[] = {"q", "k", "v", "params.mask", "params.key_padding_mask", "params.additive_mask",
                                "out", "lse"};
    ATTN_TRY(attn_validate_workspace(workspace, need, 1, views, view_names, 8));
    size_t qb = 0, kb = 0;
    ATTN_TRY(diff_contig_bytes(q, "q", &qb));
    ATTN_TRY(diff_contig_bytes(k, "k", &kb));
    attn_tensor qs, ks, vs;
    char *w = (char *)workspace;
    diff_scaled_copy(q, inv_c, w, &qs);
    diff_scaled_copy(k, inv_c, (char *)(uintptr_t)attn_byte_ptr(w, (int64_t)qb), &ks);
    diff_scaled_copy(v, inv_c, (char *)(uintptr_t)attn_byte_ptr(w, (int64_t)(qb + kb)), &vs);
    ATTN_TRY(attn_forward(ctx, layout, &qs, &ks, &vs, &sp, out, lse_opt));
    /* out ← out · c (the LSE is unchanged: the logits are the same numbers) */
    const int64_t es = (int64_t)attn_dtype_size(out->dtype);
    for (int64_t a = 0; a < out->shape[0]; a++)
        for (int64_t b = 0; b < out->shape[1]; b++)
            for (int64_t e = 0; e < out->shape[2]; e++) {
                char *row = (char *)out->data + (a * out->strides[0] + b * out->strides[1] + e * out->strides[2]) * es;
                for (int64_t f = 0; f < out->shape[3]; f++)
                    attn_store_f(row, out->dtype, f, attn_load_f(row, out->dtype, f) * c);
            }
    return ATTN_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Quantized attention (docs/DIFFUSION.md §5)
 * --------------------------------------------------------------------------------------------- */
/* attn_quant_params_init(_sized): src/api/api_info.c, with the other defaults. */

/* float32 BNSD sizes of the dequantized Q, K, V (each rounded up to 16 floats). */
static attn_status diff_quant_sizes(const diff_dims *d, size_t sizes[3]) {
    const int64_t dims[3][4] = {{d->batch, d->num_heads, d->seq_q, d->head_size},
                                {d->batch, d->num_kv_heads, d->seq_k, d->head_size},
                                {d->batch, d->num_kv_heads, d->seq_k, d->head_size_v}};
    for (int t = 0; t < 3; t++) {
        int64_t n = 1;
        for (int i = 0; i < 4; i++)
            ATTN_CHECK(attn_mul_i64(n, dims[t][i], &n), ATTN_STATUS_OVERFLOW, "workspace: operand %d overflows", t);
        ATTN_CHECK((uint64_t)n <= (SIZE_MAX - 64) / 8, ATTN_STATUS_OVERFLOW, "workspace: operand %d overflows", t);
        sizes[t] = diff_round64((size_t)n * sizeof(float));
    }
    ATTN_CHECK(sizes[0] <= SIZE_MAX / 4 && sizes[1] <= SIZE_MAX / 4 && sizes[2] <= SIZE_MAX / 4, ATTN_STATUS_OVERFLOW,
               "workspace: size overflows");
    ATTN_CHECK((uint64_t)(sizes[0] + sizes[1] + sizes[2]) <= ATTN_MAX_WORKSPACE_BYTES, ATTN_STATUS_OVERFLOW,
               "workspace: float32 Q, K, V need %zu bytes > ATTN_MAX_WORKSPACE_BYTES=%llu",
               sizes[0] + sizes[1] + sizes[2], (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    return ATTN_STATUS_OK;
}

/* Code-path sizes (each rounded up to 64 bytes): [0..3) the scales of Q, K, V — room for a float per row (FP8
 * with 1-row blocks at most) or the E8M0 bytes of MX (Q/K ceil(width/32) per row, V width per 32 rows) — then
 * [3..6) the codes of Q, K, V at one byte per element (E2M1 uses half of it), or with `wide` the wide bf16
 * operands of fwd_quant.h (Q/K rows of attn_fq_wide_qk_row_bytes, V pairs of attn_fq_wide_v_pair_bytes), which
 * are larger. The format is not an argument of the size function, so the size covers every format. */
static attn_status diff_quant_code_sizes(const diff_dims *d, int wide, size_t sizes[6]) {
    const int64_t mats[3] = {d->batch * d->num_heads, d->batch * d->num_kv_heads, d->batch * d->num_kv_heads};
    const int64_t seqs[3] = {d->seq_q, d->seq_k, d->seq_k};
    const int64_t widths[3] = {d->head_size, d->head_size, d->head_size_v};
    uint64_t total = 0;
    for (int t = 0; t < 3; t++) {
        int64_t elems, rows, per_row = (widths[t] + 31) / 32, sc, sv;
        if (per_row < 4)
            per_row = 4;
        const int64_t wide_rows = t == 2 ? (seqs[t] + 1) / 2 : seqs[t];
        const int64_t wide_bytes = t == 2 ? attn_fq_wide_v_pair_bytes(widths[t]) : attn_fq_wide_qk_row_bytes(widths[t]);
        ATTN_CHECK(attn_mul_i64(mats[t], seqs[t], &rows) && attn_mul_i64(rows, widths[t], &elems) &&
                       attn_mul_i64(rows, per_row, &sc) &&
                       attn_mul_i64(mats[t], ((seqs[t] + 31) / 32) * widths[t], &sv) &&
                       (!wide || (attn_mul_i64(mats[t], wide_rows, &elems) && attn_mul_i64(elems, wide_bytes, &elems))),
                   ATTN_STATUS_OVERFLOW, "workspace: operand %d overflows", t);
        if (t == 2 && sv > sc)
            sc = sv;
        ATTN_CHECK((uint64_t)elems <= ATTN_MAX_WORKSPACE_BYTES && (uint64_t)sc <= ATTN_MAX_WORKSPACE_BYTES,
                   ATTN_STATUS_OVERFLOW, "workspace: operand %d needs more than ATTN_MAX_WORKSPACE_BYTES=%llu", t,
                   (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
        sizes[t] = diff_round64((size_t)sc);
        sizes[3 + t] = diff_round64((size_t)elems);
        total += sizes[t] + sizes[3 + t];
    }
    ATTN_CHECK(total <= ATTN_MAX_WORKSPACE_BYTES, ATTN_STATUS_OVERFLOW,
               "workspace: quantized Q, K, V need %llu bytes > ATTN_MAX_WORKSPACE_BYTES=%llu",
               (unsigned long long)total, (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    return ATTN_STATUS_OK;
}

attn_status attn_forward_quant_workspace_size(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v, size_t *bytes) {
    ATTN_CHECK(bytes != NULL, ATTN_STATUS_INVALID_ARGUMENT, "bytes: is NULL");
    diff_dims d = {0};
    ATTN_TRY(diff_check_qkv(layout, q, k, v, &d));
    const struct attn_quant_kernels *qk = attn_dispatch_quant(NULL);
    if (qk) { /* room for the wide operands where the machine's table runs them */
        size_t s[6];
        ATTN_TRY(diff_quant_code_sizes(&d, attn_fq_wide_table(qk, ATTN_DTYPE_FP8_E4M3), s));
        *bytes = s[0] + s[1] + s[2] + s[3] + s[4] + s[5];
        return ATTN_STATUS_OK;
    }
    size_t s[3];
    ATTN_TRY(diff_quant_sizes(&d, s));
    *bytes = s[0] + s[1] + s[2];
    return ATTN_STATUS_OK;
}

const char *attn_forward_quant_kernels(const attn_ctx *ctx) {
    const struct attn_quant_kernels *qk = attn_dispatch_quant(ctx ? ctx->kern : attn_dispatch_default());
    return qk ? qk->name : "fake";
}

static attn_status diff_check_quant(const attn_quant_params *qp, const attn_params *params, const diff_dims *d) {
    ATTN_CHECK(qp->format >= ATTN_QUANT_FP8_E4M3 && qp->format <= ATTN_QUANT_MXFP4, ATTN_STATUS_INVALID_ARGUMENT,
               "qp.format=%d is not an attn_quant_format value", (int)qp->format);
    ATTN_CHECK(qp->rotate == 0 || qp->rotate == 1, ATTN_STATUS_INVALID_ARGUMENT, "qp.rotate=%d, expected 0 or 1",
               (int)qp->rotate);
    if (qp->format == ATTN_QUANT_FP8_E4M3 || qp->format == ATTN_QUANT_FP8_E5M2)
        ATTN_CHECK(qp->q_block_rows >= 1 && qp->kv_block_rows >= 1, ATTN_STATUS_INVALID_ARGUMENT,
                   "qp.q_block_rows=%d, qp.kv_block_rows=%d: expected >= 1", (int)qp->q_block_rows,
                   (int)qp->kv_block_rows);
    if (params) {
        ATTN_CHECK(params->causal == ATTN_CAUSAL_NONE, ATTN_STATUS_UNSUPPORTED,
                   "params.causal=%d: causal quantized attention is not supported (no float fallback)",
                   (int)params->causal);
        ATTN_CHECK(params->window_left == -1 && params->window_right == -1, ATTN_STATUS_UNSUPPORTED,
                   "params.window=(%d,%d): windowed quantized attention is not supported (no float fallback)",
                   (int)params->window_left, (int)params->window_right);
        ATTN_CHECK(!params->mask && !params->key_padding_mask && !params->additive_mask, ATTN_STATUS_UNSUPPORTED,
                   "params.%s: caller masks require the float attention path (no float fallback)",
                   params->mask ? "mask" : params->key_padding_mask ? "key_padding_mask" : "additive_mask");
    }
    ATTN_CHECK(!qp->rotate || attn_is_pow2(d->head_size), ATTN_STATUS_UNSUPPORTED,
               "q: head_size=%lld is not a power of two: the Hadamard rotation needs one (set qp.rotate=0 to "
               "quantize without rotation)",
               (long long)d->head_size);
    return ATTN_STATUS_OK;
}

/* x (float32 [batch][heads][seq][width]) ← t (any layout/dtype). */
static void diff_load_bnsd(const attn_tensor *t, const diff_dims *d, int64_t heads, int64_t seq, float *x) {
    const int64_t es = (int64_t)attn_dtype_size(t->dtype), width = t->shape[3];
    for (int64_t b = 0; b < d->batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t s = 0; s < seq; s++) {
                const char *row = (const char *)t->data +
                                  (b * t->strides[0] + s * t->strides[d->s_dim] + h * t->strides[d->n_dim]) * es;
                float *dst = x + ((b * heads + h) * seq + s) * width;
                for (int64_t e = 0; e < width; e++)
                    dst[e] = attn_load_f(row, t->dtype, e);
            }
}

/* The fast path: Q, K, V quantized into codes and scales in the workspace, attention on the codes
 * (src/attention/fwd_quant.c) with the quant table qk. Everything is validated before this is called, except the
 * workspace, checked first here. */
static attn_status diff_quant_codes(attn_ctx *ctx, const struct attn_quant_kernels *qk, const diff_dims *d,
                                    const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                    const attn_quant_params *qp, const attn_problem *p, attn_tensor *out,
                                    attn_tensor *lse, void *workspace, size_t workspace_size) {
    const int mx = qp->format == ATTN_QUANT_MXFP8 || qp->format == ATTN_QUANT_MXFP4;
    const attn_dtype elem = attn_quant_elem_dtype(qp->format);
    /* wide operands where the table runs them and the workspace holds them (a workspace sized for codes only
     * still runs, staging per work item: the same kernels on the same codes, the same bits) */
    size_t sizes[6];
    int wide = attn_fq_wide_table(qk, elem);
    if (wide) {
        ATTN_TRY(diff_quant_code_sizes(d, 1, sizes));
        wide = workspace_size >= sizes[0] + sizes[1] + sizes[2] + sizes[3] + sizes[4] + sizes[5];
    }
    if (!wide)
        ATTN_TRY(diff_quant_code_sizes(d, 0, sizes));
    const size_t need = sizes[0] + sizes[1] + sizes[2] + sizes[3] + sizes[4] + sizes[5];
    ATTN_CHECK(workspace_size >= need, ATTN_STATUS_WORKSPACE_TOO_SMALL,
               "workspace_size=%zu, need %zu (scales %zu + %zu + %zu, codes Q %zu + K %zu + V %zu bytes)",
               workspace_size, need, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5]);
    const attn_tensor *views[] = {q, k, v, out, lse};
    const char *view_names[] = {"q", "k", "v", "out", "lse"};
    ATTN_TRY(attn_validate_workspace(workspace, need, 4, views, view_names, 5));
    attn_qattn qa;
    memset(&qa, 0, sizeof qa);
    qa.elem = elem;
    qa.mx = mx;
    qa.wide = wide;
    qa.seq_q = d->seq_q, qa.seq_k = d->seq_k;
    attn_qoperand *ops[3] = {&qa.q, &qa.k, &qa.v};
    const int64_t widths[3] = {d->head_size, d->head_size, d->head_size_v};
    const int64_t rows[3] = {qp->q_block_rows, qp->kv_block_rows, qp->kv_block_rows};
    char *w = (char *)workspace;
    size_t off = 0;
    for (int t = 0; t < 3 && w; t++) { /* NULL workspace (need 0: empty operands): no offset is formed from it */
        ops[t]->codes = (uint8_t *)(w + sizes[0] + sizes[1] + sizes[2] + (t > 0 ? sizes[3] : 0) +
                                    (t > 1 ? sizes[4] : 0));
        ops[t]->row_bytes = qa.elem == ATTN_DTYPE_FP4_E2M1 ? (widths[t] + 1) / 2 : widths[t];
        if (mx)
            ops[t]->escale = (uint8_t *)(w + off);
        else
            ops[t]->fscale = (float *)(void *)(w + off), ops[t]->block_rows = rows[t];
        off += sizes[t];
    }
    const attn_tensor *src[3] = {q, k, v};
    const int64_t heads[3] = {d->num_heads, d->num_kv_heads, d->num_kv_heads};
    const int64_t seqs[3] = {d->seq_q, d->seq_k, d->seq_k};
    attn_problem pq = *p;
    pq.q_dtype = ATTN_DTYPE_F32, pq.kv_dtype = ATTN_DTYPE_F32; /* no fp8 k_scale/v_scale in the logit step */
    ATTN_TRY(attn_ctx_claim(ctx));
    const attn_exec ex = attn_ctx_exec(ctx);
    attn_qsrc s[3];
    for (int t = 0; t < 3; t++) {
        const int64_t es = (int64_t)attn_dtype_size(src[t]->dtype);
        s[t].data = (const char *)src[t]->data;
        s[t].dtype = src[t]->dtype;
        s[t].batch_stride = src[t]->strides[0] * es;
        s[t].seq_stride = src[t]->strides[d->s_dim] * es;
        s[t].head_stride = src[t]->strides[d->n_dim] * es;
    }
    attn_quant_codes(s, d->batch, heads, seqs, widths, qp, ctx->kern, qk, &ex, wide, ops);
    attn_fwd_quant_run(&pq, &qa, qk, &ex);
    attn_ctx_release(ctx);
    return ATTN_STATUS_OK;
}

static attn_status diff_quant(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_quant_params *qp_in, const attn_params *params,
                              attn_tensor *out, attn_tensor *lse, void *workspace, size_t workspace_size) {
    attn_quant_params qp;
    ATTN_TRY(attn_quant_params_read(qp_in, &qp)); /* NULL = FP8_E4M3 defaults; the struct_size rule */
    diff_dims d = {0};
    diff_call call;
    attn_problem p;
    memset(&p, 0, sizeof p);
    ATTN_TRY(diff_check_qkv(layout, q, k, v, &d));
    ATTN_TRY(diff_check_quant(&qp, params, &d));
    ATTN_TRY(diff_prepare(layout, q, k, v, params, 0, out, lse, &d, &call, &p));
    const struct attn_quant_kernels *qk = ctx ? attn_dispatch_quant(ctx->kern) : NULL;
    if (qk)
        return diff_quant_codes(ctx, qk, &d, q, k, v, &qp, &p, out, lse, workspace, workspace_size);
    size_t sizes[3];
    ATTN_TRY(diff_quant_sizes(&d, sizes));
    const size_t need = sizes[0] + sizes[1] + sizes[2];
    void *owned = NULL;
    if (ctx) {
        ATTN_CHECK(workspace_size >= need, ATTN_STATUS_WORKSPACE_TOO_SMALL,
                   "workspace_size=%zu, need %zu (float32 Q %zu + K %zu + V %zu bytes)", workspace_size, need, sizes[0],
                   sizes[1], sizes[2]);
        const attn_tensor *views[] = {q, k, v, out, lse};
        const char *view_names[] = {"q", "k", "v", "out", "lse"};
        ATTN_TRY(attn_validate_workspace(workspace, need, 4, views, view_names, 5));
    } else { /* the oracle owns its buffers */
        owned = malloc(need ? need : 1);
        ATTN_CHECK(owned != NULL, ATTN_STATUS_OUT_OF_MEMORY, "attn_ref_forward_quant: cannot allocate %zu bytes", need);
        workspace = owned;
    }
    float *qd = (float *)workspace;
    float *kd = (float *)(uintptr_t)attn_byte_ptr(workspace, (int64_t)sizes[0]);
    float *vd = (float *)(uintptr_t)attn_byte_ptr(workspace, (int64_t)(sizes[0] + sizes[1]));
    diff_load_bnsd(q, &d, d.num_heads, d.seq_q, qd);
    diff_load_bnsd(k, &d, d.num_kv_heads, d.seq_k, kd);
    diff_load_bnsd(v, &d, d.num_kv_heads, d.seq_k, vd);
    const int64_t mats_q = d.batch * d.num_heads, mats_kv = d.batch * d.num_kv_heads;
    if (ctx) {
        attn_quant_fake_tensor(qd, mats_q, d.seq_q, d.head_size, ATTN_QROLE_Q, &qp, ctx->num_threads);
        attn_quant_fake_tensor(kd, mats_kv, d.seq_k, d.head_size, ATTN_QROLE_K, &qp, ctx->num_threads);
        attn_quant_fake_tensor(vd, mats_kv, d.seq_k, d.head_size_v, ATTN_QROLE_V, &qp, ctx->num_threads);
    } else {
        attn_ref_quant_fake_tensor(qd, mats_q, d.seq_q, d.head_size, 0, &qp);
        attn_ref_quant_fake_tensor(kd, mats_kv, d.seq_k, d.head_size, 1, &qp);
        attn_ref_quant_fake_tensor(vd, mats_kv, d.seq_k, d.head_size_v, 2, &qp);
    }
    /* the driver reads the float32 BNSD copies; out and LSE stay the caller's views */
    const int64_t f = (int64_t)sizeof(float);
    call.q.data = (const char *)qd, call.q.batch_stride = d.num_heads * d.seq_q * d.head_size * f;
    call.q.head_stride = d.seq_q * d.head_size * f, call.q.seq_stride = d.head_size * f;
    call.k.data = (const char *)kd, call.k.batch_stride = d.num_kv_heads * d.seq_k * d.head_size * f;
    call.k.head_stride = d.seq_k * d.head_size * f, call.k.seq_stride = d.head_size * f;
    call.v.data = (const char *)vd, call.v.batch_stride = d.num_kv_heads * d.seq_k * d.head_size_v * f;
    call.v.head_stride = d.seq_k * d.head_size_v * f, call.v.seq_stride = d.head_size_v * f;
    p.q_dtype = ATTN_DTYPE_F32, p.kv_dtype = ATTN_DTYPE_F32;
    const attn_status st = diff_run(ctx, &p);
    free(owned);
    return st;
}

attn_status attn_forward_quant(attn_ctx *ctx, attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_quant_params *qp, const attn_params *params,
                               attn_tensor *out, attn_tensor *lse_opt, void *workspace, size_t workspace_size) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    return diff_quant(ctx, layout, q, k, v, qp, params, out, lse_opt, workspace, workspace_size);
}

attn_status attn_ref_forward_quant(attn_layout layout, const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                   const attn_quant_params *qp, const attn_params *params, attn_tensor *out,
                                   attn_tensor *lse_opt) {
    ATTN_PARAMS_LOAD(params);
    return diff_quant(NULL, layout, q, k, v, qp, params, out, lse_opt, NULL, 0);
}
