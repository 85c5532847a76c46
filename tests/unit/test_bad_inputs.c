/*
 * test_bad_inputs.c — the bad-input table of docs/ROBUSTNESS.md, one row per bad call (docs/CONTRIBUTING.md §4):
 * every public entry gets a valid fixture, each row mutates it, calls the entry and checks the status, a message
 * substring naming the argument, and canaries on EVERY buffer: on failure the whole buffer block (inputs, outputs,
 * workspace, cache) is byte-identical to its state before the call; on success (the control rows) the inputs are.
 * `test_bad_inputs --markdown` prints the table that docs/ROBUSTNESS.md carries.
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

#define CANARY 0x5A

/* Every buffer any entry reads or writes. Inputs first; `outputs` marks where the written part begins. */
typedef struct bufs {
    /* inputs */
    float q[2 * 5 * 4 * 8], k[2 * 7 * 2 * 8], v[2 * 7 * 2 * 8];
    float lse_a[4 * 3], lse_b[4 * 3];
    int32_t cu_q[3], cu_k[3], qsl[3], seq_lens[2], bt[2 * 2];
    int64_t slots[3], mapping[2 * 2];
    unsigned char kpm[2 * 5], mask[5 * 7];
    /* outputs (canary bytes), then the cache (values) and the workspace (canary) */
    _Alignas(64) unsigned char outputs;
    float out[2 * 5 * 4 * 8 + 8], lse[2 * 4 * 5 + 8];
    float cache[2 * 4 * 4 * 2 * 8], cache2[2 * 4 * 4 * 2 * 8];
    _Alignas(64) unsigned char ws[16384];
} bufs;

typedef enum entry {
    E_FWD, E_REF_FWD, E_VARLEN, E_MERGE, E_PAGED, E_REF_PAGED, E_FPAGED, E_RESHAPE, E_COPY, E_SWAP, E_PLAN,
    E_PADDED, E_REF_PADDED, E_PRESCALED, E_QUANT, E_PIECEWISE, E_PREFIX, E_PACKED, E_CTX
} entry;

typedef struct fx {
    bufs *b, *snap;
    attn_ctx *ctx;
    attn_params p;
    attn_layout layout;
    attn_tensor q, k, v, out, lse;               /* dense BSND q [2,5,4,8], k/v [2,7,2,8], lse [2,4,5]  */
    attn_tensor vq, vk, vv, vo, vl, cuq, cuk;     /* varlen q [10,4,8], k/v [14,2,8], lse [4,10]          */
    attn_tensor ma, mb, mla, mlb, mo, mlo;        /* merge [3,4,8], lse [4,3]                              */
    attn_tensor pq, po, pl, cache, qsl, seq, bt;  /* paged q [3,4,8], cache [2,4,4,2,8]                    */
    attn_tensor rk, rv, slots, mapping, cache2;   /* cache ops: rows [3,2,8], slots [3], mapping [2,2]     */
    attn_tensor kpm, mask, pk, pv;                /* padded: k/v [2,5,2,8], key_padding_mask [2,5]         */
    attn_tensor *lse_opt;
    attn_plan_config cfg;
    attn_request reqs[2];
    int32_t req_blocks[2][2];
    int64_t nreqs;
    attn_plan *plan;
    void *ws;
    size_t ws_size;
    int32_t scale_log2;
    attn_quant_params qp;
    attn_span spans[2];
    int64_t nspans;
    int64_t valid_kv;
    int isa_generic;
} fx;

static void fx_reset(fx *f) {
    bufs *b = f->b;
    memset(b, 0, sizeof *b);
    for (size_t i = 0; i < sizeof b->q / 4; i++) b->q[i] = 0.01f * (float)(i % 97);
    for (size_t i = 0; i < sizeof b->k / 4; i++) b->k[i] = 0.02f * (float)(i % 89), b->v[i] = -0.01f * (float)(i % 83);
    for (int i = 0; i < 12; i++) b->lse_a[i] = 0.1f * (float)i, b->lse_b[i] = -0.1f * (float)i;
    const int32_t cq[3] = {0, 4, 10}, ck[3] = {0, 6, 14}, qs[3] = {0, 1, 3}, sl[2] = {5, 3}, bt[4] = {0, 1, 2, 3};
    memcpy(b->cu_q, cq, sizeof cq), memcpy(b->cu_k, ck, sizeof ck), memcpy(b->qsl, qs, sizeof qs);
    memcpy(b->seq_lens, sl, sizeof sl), memcpy(b->bt, bt, sizeof bt);
    const int64_t slots[3] = {0, 5, -1}, map[4] = {0, 1, 2, 3};
    memcpy(b->slots, slots, sizeof slots), memcpy(b->mapping, map, sizeof map);
    for (int i = 0; i < 10; i++) b->kpm[i] = (unsigned char)(i % 5 != 3);
    for (int i = 0; i < 35; i++) b->mask[i] = (unsigned char)(i % 7 <= i / 7);
    memset(&b->outputs, CANARY, sizeof *b - offsetof(bufs, outputs));
    for (size_t i = 0; i < sizeof b->cache / 4; i++) b->cache[i] = 0.001f * (float)(i % 101), b->cache2[i] = 0.5f;

    const int64_t qd[4] = {2, 5, 4, 8}, kd[4] = {2, 7, 2, 8}, ld[3] = {2, 4, 5};
    f->q = attn_tensor_make(b->q, ATTN_DTYPE_F32, 4, qd);
    f->k = attn_tensor_make(b->k, ATTN_DTYPE_F32, 4, kd);
    f->v = attn_tensor_make(b->v, ATTN_DTYPE_F32, 4, kd);
    f->out = attn_tensor_make(b->out, ATTN_DTYPE_F32, 4, qd);
    f->lse = attn_tensor_make(b->lse, ATTN_DTYPE_F32, 3, ld);
    f->lse_opt = &f->lse;
    const int64_t vqd[3] = {10, 4, 8}, vkd[3] = {14, 2, 8}, vld[2] = {4, 10}, c3[1] = {3};
    f->vq = attn_tensor_make(b->q, ATTN_DTYPE_F32, 3, vqd);
    f->vk = attn_tensor_make(b->k, ATTN_DTYPE_F32, 3, vkd);
    f->vv = attn_tensor_make(b->v, ATTN_DTYPE_F32, 3, vkd);
    f->vo = attn_tensor_make(b->out, ATTN_DTYPE_F32, 3, vqd);
    f->vl = attn_tensor_make(b->lse, ATTN_DTYPE_F32, 2, vld);
    f->cuq = attn_tensor_make(b->cu_q, ATTN_DTYPE_I32, 1, c3);
    f->cuk = attn_tensor_make(b->cu_k, ATTN_DTYPE_I32, 1, c3);
    const int64_t md[3] = {3, 4, 8}, mld[2] = {4, 3};
    f->ma = attn_tensor_make(b->q, ATTN_DTYPE_F32, 3, md);
    f->mb = attn_tensor_make(b->k, ATTN_DTYPE_F32, 3, md);
    f->mla = attn_tensor_make(b->lse_a, ATTN_DTYPE_F32, 2, mld);
    f->mlb = attn_tensor_make(b->lse_b, ATTN_DTYPE_F32, 2, mld);
    f->mo = attn_tensor_make(b->out, ATTN_DTYPE_F32, 3, md);
    f->mlo = attn_tensor_make(b->lse, ATTN_DTYPE_F32, 2, mld);
    const int64_t cd[5] = {2, 4, 4, 2, 8}, q1[1] = {3}, s1[1] = {2}, b2[2] = {2, 2};
    f->pq = attn_tensor_make(b->q, ATTN_DTYPE_F32, 3, md);
    f->po = attn_tensor_make(b->out, ATTN_DTYPE_F32, 3, md);
    f->pl = attn_tensor_make(b->lse, ATTN_DTYPE_F32, 2, mld);
    f->cache = attn_tensor_make(b->cache, ATTN_DTYPE_F32, 5, cd);
    f->cache2 = attn_tensor_make(b->cache2, ATTN_DTYPE_F32, 5, cd);
    f->qsl = attn_tensor_make(b->qsl, ATTN_DTYPE_I32, 1, q1);
    f->seq = attn_tensor_make(b->seq_lens, ATTN_DTYPE_I32, 1, s1);
    f->bt = attn_tensor_make(b->bt, ATTN_DTYPE_I32, 2, b2);
    const int64_t rd[3] = {3, 2, 8};
    f->rk = attn_tensor_make(b->k, ATTN_DTYPE_F32, 3, rd);
    f->rv = attn_tensor_make(b->v, ATTN_DTYPE_F32, 3, rd);
    f->slots = attn_tensor_make(b->slots, ATTN_DTYPE_I64, 1, q1);
    f->mapping = attn_tensor_make(b->mapping, ATTN_DTYPE_I64, 2, b2);
    const int64_t kpd[2] = {2, 5}, mkd[2] = {5, 7};
    f->kpm = attn_tensor_make(b->kpm, ATTN_DTYPE_U8, 2, kpd);
    f->mask = attn_tensor_make(b->mask, ATTN_DTYPE_BOOL, 2, mkd);
    f->pk = f->k, f->pv = f->v; /* [2,5,2,8] views of the [2,7,2,8] buffers (self-attention) */
    f->pk.shape[1] = f->pv.shape[1] = 5;
    attn_params_init(&f->p);
    f->layout = ATTN_LAYOUT_BSND;

    attn_plan_config_init(&f->cfg);
    f->cfg.num_blocks = 4, f->cfg.block_size = 4, f->cfg.num_heads = 4, f->cfg.num_kv_heads = 2;
    f->cfg.head_size = 8, f->cfg.max_blocks_per_req = 2;
    memset(f->reqs, 0, sizeof f->reqs);
    f->req_blocks[0][0] = 0, f->req_blocks[0][1] = 1, f->req_blocks[1][0] = 2, f->req_blocks[1][1] = 3;
    f->reqs[0].kind = f->reqs[1].kind = ATTN_REQUEST_DECODER;
    f->reqs[0].num_computed_tokens = 4, f->reqs[0].num_scheduled_tokens = 1;
    f->reqs[0].block_ids = f->req_blocks[0], f->reqs[0].num_block_ids = 2;
    f->reqs[1].num_computed_tokens = 0, f->reqs[1].num_scheduled_tokens = 2;
    f->reqs[1].block_ids = f->req_blocks[1], f->reqs[1].num_block_ids = 1;
    f->nreqs = 2;
    f->plan = NULL;
    f->ws = b->ws;
    f->ws_size = sizeof b->ws;
    f->scale_log2 = 3;
    attn_quant_params_init(&f->qp, ATTN_QUANT_FP8_E4M3);
    f->spans[0].start = 1, f->spans[0].end = 3, f->spans[1].start = 4, f->spans[1].end = 6;
    f->nspans = 2;
    f->valid_kv = 5;
    f->isa_generic = 0;
}

static attn_status call_entry(fx *f, entry e) {
    switch (e) {
    case E_FWD: return attn_forward(f->ctx, f->layout, &f->q, &f->k, &f->v, &f->p, &f->out, f->lse_opt);
    case E_REF_FWD: return attn_ref_forward(f->layout, &f->q, &f->k, &f->v, &f->p, &f->out, f->lse_opt);
    case E_VARLEN:
        return attn_forward_varlen(f->ctx, &f->vq, &f->vk, &f->vv, &f->cuq, &f->cuk, &f->p, &f->vo,
                                   f->lse_opt ? &f->vl : NULL);
    case E_MERGE: return attn_merge_attn_states(f->ctx, &f->ma, &f->mla, &f->mb, &f->mlb, &f->mo, &f->mlo);
    case E_PAGED:
        return attn_paged_attention(f->ctx, &f->pq, &f->cache, &f->qsl, &f->seq, &f->bt, &f->p, &f->po,
                                    f->lse_opt ? &f->pl : NULL);
    case E_REF_PAGED:
        return attn_ref_paged_attention(&f->pq, &f->cache, &f->qsl, &f->seq, &f->bt, &f->p, &f->po,
                                        f->lse_opt ? &f->pl : NULL);
    case E_FPAGED: {
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = 4, cfg.block_size = 4, cfg.num_heads = 4, cfg.num_kv_heads = 2, cfg.head_size = 8;
        cfg.max_blocks_per_req = 2;
        attn_request r[2];
        memcpy(r, f->reqs, sizeof r);
        attn_plan *plan = NULL;
        attn_status st = attn_plan_create(&cfg, r, 2, &plan);
        if (st != ATTN_STATUS_OK) return ATTN_STATUS_INTERNAL; /* the fixture's plan is valid */
        st = attn_forward_paged(f->ctx, plan, &f->pq, NULL, NULL, &f->cache, &f->p, &f->po, f->lse_opt ? &f->pl : NULL,
                                f->ws, f->ws_size);
        attn_plan_free(plan);
        return st;
    }
    case E_RESHAPE: return attn_reshape_and_cache(f->ctx, &f->rk, &f->rv, &f->cache, &f->slots);
    case E_COPY: return attn_copy_blocks(f->ctx, &f->cache, &f->mapping);
    case E_SWAP: return attn_swap_blocks(f->ctx, &f->cache, &f->cache2, &f->mapping);
    case E_PLAN: {
        f->plan = (attn_plan *)(uintptr_t)1; /* must be reset to NULL on failure */
        const attn_status st = attn_plan_create(&f->cfg, f->reqs, f->nreqs, &f->plan);
        if (st != ATTN_STATUS_OK) assert_null(f->plan);
        attn_plan_free(st == ATTN_STATUS_OK ? f->plan : NULL);
        f->plan = NULL;
        return st;
    }
    case E_PADDED:
        return attn_forward_padded(f->ctx, f->layout, &f->q, &f->pk, &f->pv, &f->kpm, &f->p, &f->out, f->lse_opt, f->ws,
                                   f->ws_size);
    case E_REF_PADDED:
        return attn_ref_forward_padded(f->layout, &f->q, &f->pk, &f->pv, &f->kpm, &f->p, &f->out, f->lse_opt, f->ws,
                                       f->ws_size);
    case E_PRESCALED:
        return attn_forward_prescaled(f->ctx, f->layout, &f->q, &f->k, &f->v, f->scale_log2, &f->p, &f->out, f->lse_opt,
                                      f->ws, f->ws_size);
    case E_QUANT:
        return attn_forward_quant(f->ctx, f->layout, &f->q, &f->k, &f->v, &f->qp, &f->p, &f->out, f->lse_opt, f->ws,
                                  f->ws_size);
    case E_PIECEWISE:
        return attn_forward_piecewise(f->ctx, f->layout, &f->q, &f->k, &f->v, f->spans, f->nspans, NULL, 0, &f->p,
                                      &f->out, f->lse_opt);
    case E_PREFIX:
        return attn_forward_kv_prefix(f->ctx, f->layout, &f->q, &f->k, &f->v, f->valid_kv, &f->p, &f->out, f->lse_opt);
    case E_PACKED: {
        attn_tensor q4 = f->vq, k4 = f->vk, v4 = f->vv, o4 = f->vo; /* [1, rows, heads, head_size] */
        attn_tensor *t4[4] = {&q4, &k4, &v4, &o4};
        for (int i = 0; i < 4; i++) {
            attn_tensor *t = t4[i];
            for (int d = 3; d > 0; d--) t->shape[d] = t->shape[d - 1], t->strides[d] = t->strides[d - 1];
            t->shape[0] = 1, t->strides[0] = 0, t->ndim = 4;
        }
        return attn_forward_packed(f->ctx, &q4, &k4, &v4, &f->cuq, &f->cuk, &f->p, &o4, f->lse_opt ? &f->vl : NULL);
    }
    case E_CTX: return attn_ctx_set_num_threads(f->ctx, f->scale_log2);
    }
    return ATTN_STATUS_INTERNAL;
}

static const char *entry_name(entry e) {
    static const char *n[] = {"attn_forward", "attn_ref_forward", "attn_forward_varlen", "attn_merge_attn_states",
                              "attn_paged_attention", "attn_ref_paged_attention", "attn_forward_paged",
                              "attn_reshape_and_cache", "attn_copy_blocks", "attn_swap_blocks", "attn_plan_create",
                              "attn_forward_padded", "attn_ref_forward_padded", "attn_forward_prescaled",
                              "attn_forward_quant", "attn_forward_piecewise", "attn_forward_kv_prefix",
                              "attn_forward_packed", "attn_ctx_set_num_threads"};
    return n[e];
}

/* ---------------------------------------------------------------------------------------------
 * The table: entry, what is wrong, the mutation, the expected status and message substring.
 * --------------------------------------------------------------------------------------------- */
typedef struct row {
    entry e;
    const char *what;
    void (*mutate)(fx *f);
    attn_status status;
    const char *msg;
} row;

#define M(name, body) static void name(fx *f) { (void)f; body; }
M(m_none, {})
M(m_q_null, f->q.data = NULL)
M(m_q_ndim64, f->q.ndim = 64)
M(m_q_ndim3, f->q.ndim = 3)
M(m_q_neg_shape, f->q.shape[1] = -1)
M(m_q_neg_stride, f->q.strides[0] = -8)
M(m_q_last_stride, f->q.strides[3] = 2)
M(m_q_dtype_i32, f->q.dtype = ATTN_DTYPE_I32)
M(m_q_dtype_unknown, f->q.dtype = (attn_dtype)77)
M(m_q_misaligned, f->q.data = (char *)f->b->q + 1)
M(m_q_stride_huge_size1, { f->q.shape[0] = 1; f->out.shape[0] = 1; f->k.shape[0] = 1; f->v.shape[0] = 1;
                           f->lse.shape[0] = 1; f->q.strides[0] = INT64_MAX; })
M(m_q_stride_huge_empty, { f->q.shape[1] = 0; f->out.shape[1] = 0; f->lse.shape[2] = 0; f->q.strides[0] = INT64_MAX / 2; })
M(m_q_one_past_end, { f->q.shape[0] = 2; f->q.strides[0] = (int64_t)1 << 60; })
M(m_q_numel_overflow, { f->q.shape[1] = (int64_t)1 << 40; f->q.strides[1] = 0; f->q.shape[2] = (int64_t)1 << 40;
                        f->q.strides[2] = 0; })
M(m_k_batch, f->k.shape[0] = 1)
M(m_k_head_size, f->k.shape[3] = 4)
M(m_v_seq, f->v.shape[1] = 6)
M(m_v_dtype, f->v.dtype = ATTN_DTYPE_F16)
M(m_out_dtype, f->out.dtype = ATTN_DTYPE_BF16)
M(m_out_shape, f->out.shape[2] = 3)
M(m_out_overlaps_q, f->out.data = f->b->q)
M(m_out_overlaps_lse, f->lse.data = (float *)f->b->out + 8)
M(m_out_broadcast, f->out.strides[0] = 0) /* torch expand / NumPy broadcast_to: every batch row the same memory */
M(m_merge_out_broadcast, f->mo.strides[1] = 0)
M(m_paged_out_broadcast, f->po.strides[0] = 0)
M(m_heads_not_multiple, { f->q.shape[2] = 3; f->out.shape[2] = 3; f->lse.shape[1] = 3; })
M(m_head_size_big, { f->q.shape[3] = 300; f->k.shape[3] = 300; })
M(m_heads_limit, { f->q.shape[2] = 8192; f->q.strides[2] = 0; f->out.shape[2] = 8192; f->out.strides[2] = 0;
                   f->lse.shape[1] = 8192; f->lse.strides[1] = 0; })
M(m_seq_k_2_40, { f->k.shape[1] = (int64_t)1 << 40; f->k.strides[1] = 0; f->v.shape[1] = (int64_t)1 << 40;
                  f->v.strides[1] = 0; })
M(m_work_limit, { const int64_t n = ATTN_MAX_SEQ_LEN; f->k.shape[1] = f->v.shape[1] = n; f->k.strides[1] = 0;
                  f->v.strides[1] = 0; f->q.shape[1] = f->out.shape[1] = n; f->q.strides[1] = f->out.strides[1] = 0;
                  f->lse.shape[2] = n; f->lse.strides[2] = 0; })
M(m_layout, f->layout = (attn_layout)9)
M(m_lse_dtype, f->lse.dtype = ATTN_DTYPE_F16)
M(m_lse_ndim64, f->lse.ndim = 64)
M(m_lse_shape, f->lse.shape[2] = 4)
M(m_scale_nan, f->p.softmax_scale = NAN)
M(m_causal_bad, f->p.causal = (attn_causal)7)
M(m_window_bad, f->p.window_left = -2)
M(m_softcap_neg, f->p.softcap = -1.0f)
M(m_mask_shape, { f->mask.shape[1] = 6; f->p.mask = &f->mask; })
M(m_mask_dtype, { f->mask.dtype = ATTN_DTYPE_F32; f->mask.strides[0] = 1; f->p.mask = &f->mask; })
M(m_mask_ok, f->p.mask = &f->mask)
M(m_varlen_cu_null, f->cuq.data = NULL)
M(m_varlen_cu_first, f->b->cu_q[0] = 1)
M(m_varlen_cu_decreasing, f->b->cu_k[1] = 15)
M(m_varlen_cu_last, f->b->cu_q[2] = 11)
M(m_varlen_cu_dtype, f->cuq.dtype = ATTN_DTYPE_I64)
M(m_varlen_cu_len, f->cuk.shape[0] = 2)
M(m_varlen_mask, f->p.mask = &f->mask)
M(m_varlen_cu_stride0, { f->cuq.shape[0] = ((int64_t)1 << 40); f->cuq.strides[0] = 0; })
M(m_merge_shape, f->mb.shape[1] = 3)
M(m_merge_lse_dtype, f->mlb.dtype = ATTN_DTYPE_F16)
M(m_merge_partial_overlap, f->mo.data = (float *)f->b->q + 4)
M(m_merge_lse_null, f->mla.data = NULL)
M(m_paged_qsl_first, f->b->qsl[0] = 1)
M(m_paged_qsl_past, f->b->qsl[2] = 4)
M(m_paged_seq_neg, f->b->seq_lens[1] = -1)
M(m_paged_seq_blocks, f->b->seq_lens[0] = 9)
M(m_paged_bt_range, f->b->bt[1] = 4)
M(m_paged_bt_neg, f->b->bt[0] = -1)
M(m_paged_cache_shape0, f->cache.shape[0] = 3)
M(m_paged_cache_head, f->cache.shape[4] = 4)
M(m_paged_cache_heads_limit, { f->cache.shape[3] = 8192; f->cache.strides[3] = 0; })
M(m_paged_bt_last_stride, { f->bt.strides[1] = 2; f->bt.strides[0] = 4; f->bt.shape[0] = 1; f->b->qsl[2] = 1;
                            f->seq.shape[0] = 1; f->qsl.shape[0] = 2; })
M(m_paged_out_overlaps_cache, f->po.data = f->b->cache)
M(m_paged_mask, f->p.mask = &f->mask)
M(m_fpaged_ws_small, { f->pq.shape[0] = 2; })
M(m_fpaged_heads, { f->pq.shape[1] = 2; f->po.shape[1] = 2; f->pl.shape[0] = 2; })
/* q with 8 heads on a 4-head plan, ALiBi slopes sized for the plan: the four valid slopes are followed by NaNs,
 * so reading them for q's heads (before the head check) would report a slope instead of the heads */
static float g_plan_slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, NAN, NAN, NAN, NAN};
M(m_fpaged_heads_alibi, {
    f->pq.shape[1] = 8;
    f->po.shape[1] = 8;
    f->pl.shape[0] = 8;
    f->p.alibi_slopes = g_plan_slopes;
})
M(m_reshape_slot_range, f->b->slots[1] = 16)
M(m_reshape_slots_long, f->slots.shape[0] = 4)
M(m_reshape_slots_dtype, f->slots.dtype = ATTN_DTYPE_F32)
M(m_reshape_heads, f->rk.shape[1] = 1)
M(m_reshape_overlap, { f->rk.data = f->b->cache; })
M(m_reshape_cache_token_stride0, f->cache.strides[2] = 0)
M(m_reshape_cache_halves_meet, f->cache.strides[0] = 1)
M(m_reshape_cache_halves_one, f->cache.strides[0] = 0)
M(m_reshape_slots_stride0, { f->slots.shape[0] = (int64_t)1 << 40; f->slots.strides[0] = 0; })
M(m_copy_range, f->b->mapping[3] = 4)
M(m_copy_neg, f->b->mapping[0] = -1)
M(m_copy_shape, f->mapping.shape[1] = 3)
M(m_swap_dtype, f->cache2.dtype = ATTN_DTYPE_F16)
M(m_swap_block_size, f->cache2.shape[2] = 2)
M(m_swap_overlap, f->cache2.data = (float *)f->b->cache + 8)
M(m_swap_dst_halves_meet, f->cache2.strides[0] = 1)
M(m_plan_heads_limit, { f->cfg.num_heads = INT32_MAX; f->cfg.num_kv_heads = INT32_MAX; })
M(m_plan_kv_heads, f->cfg.num_kv_heads = 3)
M(m_plan_head_size, f->cfg.head_size = 512)
M(m_plan_block_size, f->cfg.block_size = 0)
M(m_plan_max_blocks_limit, f->cfg.max_blocks_per_req = INT32_MAX)
M(m_plan_tokens_limit, { f->reqs[1].kind = ATTN_REQUEST_ENCODER_ONLY; f->reqs[1].num_scheduled_tokens = INT32_MAX;
                         f->reqs[1].num_block_ids = 0; })
M(m_plan_block_ids, f->req_blocks[0][1] = 4)
M(m_plan_few_blocks, f->reqs[0].num_block_ids = 1)
M(m_plan_sched_zero, f->reqs[1].num_scheduled_tokens = 0)
M(m_plan_kind, f->reqs[0].kind = 9)
M(m_plan_spec, f->cfg.num_speculative_tokens = 16)
M(m_plan_table_bytes, { f->cfg.num_heads = f->cfg.num_kv_heads = 4096; f->reqs[1].kind = ATTN_REQUEST_CROSS;
                        f->reqs[1].encoder_len = 0; f->reqs[1].num_block_ids = 0;
                        f->reqs[1].num_scheduled_tokens = ATTN_MAX_PLAN_TOKENS - 1; })
M(m_plan_nreqs_neg, f->nreqs = -1)
M(m_padded_kpm_null, f->kpm.data = NULL)
M(m_padded_kpm_dtype, f->kpm.dtype = ATTN_DTYPE_F32)
M(m_padded_cross, { f->pk = f->k; f->pv = f->v; })
M(m_padded_ws_small, f->ws_size = 8)
M(m_padded_ws_null, f->ws = NULL)
M(m_padded_ws_overlaps_q, f->ws = f->b->q)
M(m_padded_ws_overlaps_out, f->ws = (void *)(((uintptr_t)f->b->out + 64) & ~(uintptr_t)7))
M(m_prescaled_log2, f->scale_log2 = 31)
M(m_prescaled_ws_small, f->ws_size = 100)
M(m_prescaled_ws_overlaps_k, f->ws = f->b->k)
M(m_prescaled_ws_overlaps_mask, { f->p.mask = &f->mask; f->ws = (char *)f->b->kpm; })
M(m_prescaled_lse_ndim64, f->lse.ndim = 64)
M(m_quant_format, f->qp.format = 9)
M(m_quant_causal, f->p.causal = ATTN_CAUSAL_BOTTOM_RIGHT)
M(m_quant_ws_overlaps_q, f->ws = f->b->q)
M(m_quant_ws_small, f->ws_size = 64)
M(m_piecewise_overlap, f->spans[1].start = 2)
M(m_piecewise_end, f->spans[1].end = 8)
M(m_piecewise_causal, f->p.causal = ATTN_CAUSAL_BOTTOM_RIGHT)
M(m_prefix_range, f->valid_kv = 8)
M(m_prefix_causal, f->p.causal = ATTN_CAUSAL_BOTTOM_RIGHT)
M(m_ctx_threads, f->scale_log2 = 0)
M(m_ctx_null, f->ctx = NULL)

static const row rows[] = {
    /* attn_forward (dense) */
    {E_FWD, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_FWD, "valid call with a 2-D mask (control)", m_mask_ok, ATTN_STATUS_OK, ""},
    {E_FWD, "ctx NULL", m_ctx_null, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL"},
    {E_FWD, "q data NULL with elements", m_q_null, ATTN_STATUS_INVALID_ARGUMENT, "q: data is NULL"},
    {E_FWD, "q ndim 64", m_q_ndim64, ATTN_STATUS_INVALID_ARGUMENT, "q: ndim=64 is outside 0..6"},
    {E_FWD, "q ndim 3", m_q_ndim3, ATTN_STATUS_INVALID_ARGUMENT, "q: ndim=3, expected 4"},
    {E_FWD, "q negative shape", m_q_neg_shape, ATTN_STATUS_INVALID_ARGUMENT, "q: shape[1]=-1 is negative"},
    {E_FWD, "q negative stride", m_q_neg_stride, ATTN_STATUS_INVALID_ARGUMENT, "q: strides[0]=-8 is negative"},
    {E_FWD, "q last dimension not contiguous", m_q_last_stride, ATTN_STATUS_INVALID_ARGUMENT,
     "q: strides[3]=2, the last dimension must be contiguous"},
    {E_FWD, "q dtype i32", m_q_dtype_i32, ATTN_STATUS_INVALID_ARGUMENT, "q: dtype i32, expected f32, f16 or bf16"},
    {E_FWD, "q unknown dtype", m_q_dtype_unknown, ATTN_STATUS_INVALID_ARGUMENT, "q: unknown dtype 77"},
    {E_FWD, "q data misaligned", m_q_misaligned, ATTN_STATUS_INVALID_ARGUMENT, "q: data pointer"},
    {E_FWD, "q size-1 dim with stride INT64_MAX (F2)", m_q_stride_huge_size1, ATTN_STATUS_OVERFLOW,
     "q: strides[0]=9223372036854775807 times the element size 4 overflows int64"},
    {E_FWD, "q empty view, stride INT64_MAX/2 (F4)", m_q_stride_huge_empty, ATTN_STATUS_OVERFLOW,
     "q: strides[0]=4611686018427387903 times the element size 4 overflows int64"},
    {E_FWD, "q one-past-the-end offset overflows (F4)", m_q_one_past_end, ATTN_STATUS_OVERFLOW,
     "q: offset of the last element overflows int64 (dim 0"},
    {E_FWD, "q stride-0 dims, 2^80 elements", m_q_numel_overflow, ATTN_STATUS_OVERFLOW,
     "q: the number of elements overflows int64"},
    {E_FWD, "k batch differs", m_k_batch, ATTN_STATUS_INVALID_ARGUMENT, "k: shape[0]=1, expected batch=2"},
    {E_FWD, "k head_size differs", m_k_head_size, ATTN_STATUS_INVALID_ARGUMENT, "k: shape[3]=4, expected head_size=8"},
    {E_FWD, "v seq_k differs", m_v_seq, ATTN_STATUS_INVALID_ARGUMENT, "v: shape[1]=6, expected seq_k=7"},
    {E_FWD, "v dtype differs from k", m_v_dtype, ATTN_STATUS_INVALID_ARGUMENT, "v: dtype f16 differs from k dtype f32"},
    {E_FWD, "out dtype differs from q", m_out_dtype, ATTN_STATUS_INVALID_ARGUMENT, "out: dtype bf16 differs from q"},
    {E_FWD, "out num_heads differs", m_out_shape, ATTN_STATUS_INVALID_ARGUMENT, "out: shape[2]=3, expected num_heads=4"},
    {E_FWD, "out overlaps q", m_out_overlaps_q, ATTN_STATUS_INVALID_ARGUMENT, "out: overlaps q in memory"},
    {E_FWD, "lse overlaps out", m_out_overlaps_lse, ATTN_STATUS_INVALID_ARGUMENT, "out: overlaps lse in memory"},
    {E_FWD, "out overlaps itself (stride-0 batch, a broadcast view)", m_out_broadcast, ATTN_STATUS_INVALID_ARGUMENT,
     "out: its elements overlap in memory"},
    {E_FWD, "num_kv_heads does not divide num_heads", m_heads_not_multiple, ATTN_STATUS_INVALID_ARGUMENT,
     "does not divide num_heads=3"},
    {E_FWD, "head_size 300", m_head_size_big, ATTN_STATUS_INVALID_ARGUMENT, "q: head_size=300 is outside 1..256"},
    {E_FWD, "num_heads 8192 (stride-0 heads)", m_heads_limit, ATTN_STATUS_INVALID_ARGUMENT,
     "exceeds ATTN_MAX_HEADS=4096"},
    {E_FWD, "seq_k 2^40 through a stride-0 K/V view", m_seq_k_2_40, ATTN_STATUS_INVALID_ARGUMENT,
     "k: seq_k=1099511627776 exceeds ATTN_MAX_SEQ_LEN=2147483647"},
    {E_FWD, "seq_q = seq_k = 2^31-1 stride-0 views", m_work_limit, ATTN_STATUS_OVERFLOW, "exceed ATTN_MAX_WORK=2^48"},
    {E_FWD, "layout 9", m_layout, ATTN_STATUS_INVALID_ARGUMENT, "layout=9 is not an attn_layout value"},
    {E_FWD, "lse dtype f16", m_lse_dtype, ATTN_STATUS_INVALID_ARGUMENT, "lse: dtype f16, expected f32"},
    {E_FWD, "lse ndim 64", m_lse_ndim64, ATTN_STATUS_INVALID_ARGUMENT, "lse: ndim=64 is outside 0..6"},
    {E_FWD, "lse seq_q differs", m_lse_shape, ATTN_STATUS_INVALID_ARGUMENT, "lse: shape[2]=4, expected seq_q=5"},
    {E_FWD, "softmax_scale NaN", m_scale_nan, ATTN_STATUS_INVALID_ARGUMENT, "params.softmax_scale=nan is not finite"},
    {E_FWD, "causal 7", m_causal_bad, ATTN_STATUS_INVALID_ARGUMENT, "params.causal=7 is not an attn_causal value"},
    {E_FWD, "window_left -2", m_window_bad, ATTN_STATUS_INVALID_ARGUMENT, "params.window_left=-2, expected >= -1"},
    {E_FWD, "softcap -1", m_softcap_neg, ATTN_STATUS_INVALID_ARGUMENT, "params.softcap=-1"},
    {E_FWD, "mask seq_k differs", m_mask_shape, ATTN_STATUS_INVALID_ARGUMENT, "params.mask: shape[1]=6, expected seq_k=7"},
    {E_FWD, "mask dtype f32", m_mask_dtype, ATTN_STATUS_INVALID_ARGUMENT, "params.mask: dtype f32, expected bool or u8"},
    {E_REF_FWD, "oracle: valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_REF_FWD, "oracle: q ndim 64", m_q_ndim64, ATTN_STATUS_INVALID_ARGUMENT, "q: ndim=64 is outside 0..6"},
    {E_REF_FWD, "oracle: seq_k 2^40 stride-0", m_seq_k_2_40, ATTN_STATUS_INVALID_ARGUMENT, "exceeds ATTN_MAX_SEQ_LEN"},
    /* varlen */
    {E_VARLEN, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_VARLEN, "cu_seqlens_q data NULL", m_varlen_cu_null, ATTN_STATUS_INVALID_ARGUMENT, "cu_seqlens_q: data is NULL"},
    {E_VARLEN, "cu_seqlens_q[0] = 1", m_varlen_cu_first, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_q: entry 0 = 1, expected 0"},
    {E_VARLEN, "cu_seqlens_k decreasing", m_varlen_cu_decreasing, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_k: entry 2 = 14 < entry 1 = 15"},
    {E_VARLEN, "cu_seqlens_q last entry past the rows", m_varlen_cu_last, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_q: last entry 11 exceeds the 10 packed rows"},
    {E_VARLEN, "cu_seqlens_q dtype i64", m_varlen_cu_dtype, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_q: dtype i64, expected i32"},
    {E_VARLEN, "cu_seqlens_k length differs", m_varlen_cu_len, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_k: shape[0]=2, expected batch+1=3"},
    {E_VARLEN, "mask given (unsupported)", m_varlen_mask, ATTN_STATUS_UNSUPPORTED, "params.mask"},
    {E_VARLEN, "cu_seqlens_q 2^40 entries, stride 0", m_varlen_cu_stride0, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_q: shape[0]=1099511627776 exceeds ATTN_MAX_SEQ_LEN"},
    {E_PACKED, "packed documents: valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PACKED, "packed documents: cu_seqlens_q last entry past the rows", m_varlen_cu_last, ATTN_STATUS_INVALID_ARGUMENT,
     "cu_seqlens_q: last entry"},
    /* merge */
    {E_MERGE, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_MERGE, "out_b num_heads differs", m_merge_shape, ATTN_STATUS_INVALID_ARGUMENT,
     "out_b: shape[1]=3, expected num_heads=4"},
    {E_MERGE, "lse_b dtype f16", m_merge_lse_dtype, ATTN_STATUS_INVALID_ARGUMENT, "lse_b: dtype f16, expected f32"},
    {E_MERGE, "out partially overlaps out_a", m_merge_partial_overlap, ATTN_STATUS_INVALID_ARGUMENT,
     "out: partially overlaps out_a in memory"},
    {E_MERGE, "out overlaps itself (stride-0 heads)", m_merge_out_broadcast, ATTN_STATUS_INVALID_ARGUMENT,
     "out: its elements overlap in memory"},
    {E_MERGE, "lse_a data NULL", m_merge_lse_null, ATTN_STATUS_INVALID_ARGUMENT, "lse_a: data is NULL"},
    /* plan-less paged */
    {E_PAGED, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PAGED, "query_start_loc[0] = 1", m_paged_qsl_first, ATTN_STATUS_INVALID_ARGUMENT,
     "query_start_loc: entry 0 = 1, expected 0"},
    {E_PAGED, "query_start_loc past num_tokens", m_paged_qsl_past, ATTN_STATUS_INVALID_ARGUMENT,
     "query_start_loc: entry 2 = 4 exceeds num_tokens=3"},
    {E_PAGED, "seq_lens negative", m_paged_seq_neg, ATTN_STATUS_INVALID_ARGUMENT, "seq_lens: entry 1 = -1 is negative"},
    {E_PAGED, "seq_lens needs more blocks than the table", m_paged_seq_blocks, ATTN_STATUS_INVALID_ARGUMENT,
     "seq_lens: entry 0 = 9 needs 3 blocks of 4 > block_table width 2"},
    {E_PAGED, "block_table id >= num_blocks", m_paged_bt_range, ATTN_STATUS_INVALID_ARGUMENT,
     "block_table: entry [0][1] = 4 >= num_blocks=4"},
    {E_PAGED, "block_table id negative", m_paged_bt_neg, ATTN_STATUS_INVALID_ARGUMENT, "block_table: entry [0][0] = -1"},
    {E_PAGED, "kv_cache shape[0] = 3", m_paged_cache_shape0, ATTN_STATUS_INVALID_ARGUMENT, "kv_cache: shape[0]=3, expected 2"},
    {E_PAGED, "kv_cache head_size differs from q", m_paged_cache_head, ATTN_STATUS_INVALID_ARGUMENT,
     "q: shape[2]=8, expected kv_cache head_size=4"},
    {E_PAGED, "kv_cache 8192 kv heads (stride 0)", m_paged_cache_heads_limit, ATTN_STATUS_INVALID_ARGUMENT,
     "kv_cache: num_kv_heads (shape[3])=8192 exceeds ATTN_MAX_HEADS=4096"},
    {E_PAGED, "block_table last dimension strided", m_paged_bt_last_stride, ATTN_STATUS_INVALID_ARGUMENT,
     "block_table: strides[1]=2, the last dimension must be contiguous"},
    {E_PAGED, "out overlaps kv_cache", m_paged_out_overlaps_cache, ATTN_STATUS_INVALID_ARGUMENT,
     "out: overlaps kv_cache in memory"},
    {E_PAGED, "out overlaps itself (stride-0 tokens)", m_paged_out_broadcast, ATTN_STATUS_INVALID_ARGUMENT,
     "out: its elements overlap in memory"},
    {E_PAGED, "mask given (unsupported)", m_paged_mask, ATTN_STATUS_UNSUPPORTED, "params.mask"},
    {E_REF_PAGED, "oracle: valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_REF_PAGED, "oracle: block_table id >= num_blocks", m_paged_bt_range, ATTN_STATUS_INVALID_ARGUMENT,
     "block_table: entry [0][1] = 4"},
    /* plan + paged */
    {E_FPAGED, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_FPAGED, "q rows differ from the plan's tokens", m_fpaged_ws_small, ATTN_STATUS_INVALID_ARGUMENT,
     "out: shape[0]=3, expected num_tokens=2"},
    {E_FPAGED, "q heads differ from the plan's", m_fpaged_heads, ATTN_STATUS_INVALID_ARGUMENT,
     "q: shape[1]=2, expected plan num_heads=4"},
    {E_FPAGED, "q heads exceed the plan's, ALiBi sized for the plan", m_fpaged_heads_alibi,
     ATTN_STATUS_INVALID_ARGUMENT, "q: shape[1]=8, expected plan num_heads=4"},
    {E_PLAN, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PLAN, "num_heads = num_kv_heads = INT32_MAX (F7)", m_plan_heads_limit, ATTN_STATUS_INVALID_ARGUMENT,
     "config.num_heads=2147483647 exceeds ATTN_MAX_HEADS=4096"},
    {E_PLAN, "num_kv_heads 3 does not divide 4", m_plan_kv_heads, ATTN_STATUS_INVALID_ARGUMENT,
     "config.num_kv_heads=3 does not divide num_heads=4"},
    {E_PLAN, "head_size 512", m_plan_head_size, ATTN_STATUS_INVALID_ARGUMENT, "config.head_size=512 is outside 1..256"},
    {E_PLAN, "block_size 0", m_plan_block_size, ATTN_STATUS_INVALID_ARGUMENT, "config.block_size=0, expected >= 1"},
    {E_PLAN, "max_blocks_per_req = INT32_MAX (F5)", m_plan_max_blocks_limit, ATTN_STATUS_INVALID_ARGUMENT,
     "config.max_blocks_per_req=2147483647 is outside 0..ATTN_MAX_BLOCKS_PER_REQ=16777216"},
    {E_PLAN, "encoder-only num_scheduled_tokens = INT32_MAX (F5)", m_plan_tokens_limit, ATTN_STATUS_INVALID_ARGUMENT,
     "exceed ATTN_MAX_PLAN_TOKENS=16777216"},
    {E_PLAN, "4096 kv heads x 2^24-1 cross tokens: 2^31 work blocks", m_plan_table_bytes, ATTN_STATUS_OVERFLOW,
     "(limit ATTN_MAX_PLAN_BYTES=1073741824)"},
    {E_PLAN, "block id >= num_blocks", m_plan_block_ids, ATTN_STATUS_INVALID_ARGUMENT,
     "requests[0].block_ids[1] = 4 is outside [0, num_blocks=4)"},
    {E_PLAN, "too few block ids", m_plan_few_blocks, ATTN_STATUS_INVALID_ARGUMENT,
     "requests[0].num_block_ids=1 < ceil(5 keys / block_size 4) = 2"},
    {E_PLAN, "num_scheduled_tokens 0", m_plan_sched_zero, ATTN_STATUS_INVALID_ARGUMENT,
     "requests[1].num_scheduled_tokens=0, expected >= 1"},
    {E_PLAN, "request kind 9", m_plan_kind, ATTN_STATUS_INVALID_ARGUMENT, "requests[0].kind=9 is not an attn_request_kind"},
    {E_PLAN, "num_speculative_tokens 16", m_plan_spec, ATTN_STATUS_INVALID_ARGUMENT, "config.num_speculative_tokens=16"},
    {E_PLAN, "num_requests -1", m_plan_nreqs_neg, ATTN_STATUS_INVALID_ARGUMENT, "num_requests=-1 is outside"},
    /* cache ops */
    {E_RESHAPE, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_RESHAPE, "slot >= num_blocks*block_size", m_reshape_slot_range, ATTN_STATUS_INVALID_ARGUMENT,
     "slot_mapping: entry 1 = 16 >= num_blocks·block_size = 16"},
    {E_RESHAPE, "more slots than key rows", m_reshape_slots_long, ATTN_STATUS_INVALID_ARGUMENT,
     "slot_mapping: shape[0]=4 exceeds key rows=3"},
    {E_RESHAPE, "slot_mapping dtype f32", m_reshape_slots_dtype, ATTN_STATUS_INVALID_ARGUMENT,
     "slot_mapping: dtype f32, expected i64 or i32"},
    {E_RESHAPE, "key num_kv_heads differs", m_reshape_heads, ATTN_STATUS_INVALID_ARGUMENT,
     "key: shape[1]=1, expected num_kv_heads=2"},
    {E_RESHAPE, "key overlaps kv_cache", m_reshape_overlap, ATTN_STATUS_INVALID_ARGUMENT, "kv_cache: overlaps key"},
    {E_RESHAPE, "kv_cache token stride 0 (written rows meet)", m_reshape_cache_token_stride0,
     ATTN_STATUS_INVALID_ARGUMENT, "kv_cache: its elements overlap in memory"},
    {E_RESHAPE, "kv_cache halves one element apart", m_reshape_cache_halves_meet, ATTN_STATUS_INVALID_ARGUMENT,
     "kv_cache: its elements overlap in memory"},
    {E_RESHAPE, "kv_cache halves one cache, strides[0] = 0 (control)", m_reshape_cache_halves_one, ATTN_STATUS_OK, ""},
    {E_COPY, "kv_cache token stride 0", m_reshape_cache_token_stride0, ATTN_STATUS_INVALID_ARGUMENT,
     "kv_cache: its elements overlap in memory"},
    {E_RESHAPE, "slot_mapping 2^40 entries, stride 0", m_reshape_slots_stride0, ATTN_STATUS_INVALID_ARGUMENT,
     "slot_mapping: shape[0]=1099511627776 exceeds ATTN_MAX_SEQ_LEN"},
    {E_COPY, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_COPY, "block_mapping dst >= num_blocks", m_copy_range, ATTN_STATUS_INVALID_ARGUMENT,
     "block_mapping: entry [1][1] = 4 is outside [0, num_blocks=4)"},
    {E_COPY, "block_mapping src negative", m_copy_neg, ATTN_STATUS_INVALID_ARGUMENT, "block_mapping: entry [0][0] = -1"},
    {E_COPY, "block_mapping shape[1] = 3", m_copy_shape, ATTN_STATUS_INVALID_ARGUMENT,
     "block_mapping: shape[1]=3, expected 2 (src, dst)=2"},
    {E_SWAP, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_SWAP, "dst_cache dtype differs", m_swap_dtype, ATTN_STATUS_INVALID_ARGUMENT,
     "dst_cache: dtype f16 differs from src_cache dtype f32"},
    {E_SWAP, "dst_cache block_size differs", m_swap_block_size, ATTN_STATUS_INVALID_ARGUMENT,
     "dst_cache: shape[2]=2, expected src_cache block_size=4"},
    {E_SWAP, "dst_cache halves one element apart", m_swap_dst_halves_meet, ATTN_STATUS_INVALID_ARGUMENT,
     "dst_cache: its elements overlap in memory"},
    {E_SWAP, "dst_cache overlaps src_cache", m_swap_overlap, ATTN_STATUS_INVALID_ARGUMENT,
     "dst_cache: overlaps src_cache in memory"},
    /* diffusion: padded */
    {E_PADDED, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PADDED, "key_padding_mask data NULL", m_padded_kpm_null, ATTN_STATUS_INVALID_ARGUMENT,
     "key_padding_mask: data is NULL"},
    {E_PADDED, "key_padding_mask dtype f32", m_padded_kpm_dtype, ATTN_STATUS_INVALID_ARGUMENT,
     "key_padding_mask: dtype f32, expected bool or u8"},
    {E_PADDED, "cross-attention (seq_k != seq_q)", m_padded_cross, ATTN_STATUS_INVALID_ARGUMENT,
     "k: seq_k=7 differs from seq_q=5"},
    {E_PADDED, "workspace too small", m_padded_ws_small, ATTN_STATUS_WORKSPACE_TOO_SMALL, "workspace_size=8, need 56"},
    {E_PADDED, "workspace NULL", m_padded_ws_null, ATTN_STATUS_INVALID_ARGUMENT, "workspace: (nil) is NULL"},
    {E_PADDED, "workspace overlaps q (F6)", m_padded_ws_overlaps_q, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps q in memory"},
    {E_PADDED, "workspace overlaps out", m_padded_ws_overlaps_out, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps out in memory"},
    {E_REF_PADDED, "oracle: valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_REF_PADDED, "oracle: workspace overlaps q (F6)", m_padded_ws_overlaps_q, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps q in memory"},
    /* diffusion: prescaled */
    {E_PRESCALED, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PRESCALED, "input_scale_log2 31", m_prescaled_log2, ATTN_STATUS_INVALID_ARGUMENT,
     "input_scale_log2=31 is outside 0..30"},
    {E_PRESCALED, "workspace too small", m_prescaled_ws_small, ATTN_STATUS_WORKSPACE_TOO_SMALL, "workspace_size=100"},
    {E_PRESCALED, "workspace overlaps k (F6)", m_prescaled_ws_overlaps_k, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps k in memory"},
    {E_PRESCALED, "workspace overlaps params.mask (F6)", m_prescaled_ws_overlaps_mask, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps params.mask in memory"},
    {E_PRESCALED, "lse ndim 64 (F8)", m_prescaled_lse_ndim64, ATTN_STATUS_INVALID_ARGUMENT,
     "lse: ndim=64 is outside 0..6"},
    {E_PRESCALED, "out overlaps q", m_out_overlaps_q, ATTN_STATUS_INVALID_ARGUMENT, "out: overlaps q in memory"},
    /* diffusion: quantized */
    {E_QUANT, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_QUANT, "qp.format 9", m_quant_format, ATTN_STATUS_INVALID_ARGUMENT, "qp.format=9 is not an attn_quant_format"},
    {E_QUANT, "causal (unsupported)", m_quant_causal, ATTN_STATUS_UNSUPPORTED, "params.causal=1"},
    {E_QUANT, "workspace overlaps q (F6)", m_quant_ws_overlaps_q, ATTN_STATUS_INVALID_ARGUMENT,
     "workspace: overlaps q in memory"},
    {E_QUANT, "workspace too small", m_quant_ws_small, ATTN_STATUS_WORKSPACE_TOO_SMALL, "workspace_size=64"},
    /* diffusion: piecewise, prefix */
    {E_PIECEWISE, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PIECEWISE, "spans overlap", m_piecewise_overlap, ATTN_STATUS_INVALID_ARGUMENT,
     "spans[1]=(2,6) starts before spans[0] ends at 3"},
    {E_PIECEWISE, "span past seq_k", m_piecewise_end, ATTN_STATUS_INVALID_ARGUMENT,
     "spans[1]=(4,8): expected 0 <= start < end <= seq_k=7"},
    {E_PIECEWISE, "causal with spans", m_piecewise_causal, ATTN_STATUS_UNSUPPORTED, "params.causal=1"},
    {E_PREFIX, "valid call (control)", m_none, ATTN_STATUS_OK, ""},
    {E_PREFIX, "valid_kv_length past seq_k", m_prefix_range, ATTN_STATUS_INVALID_ARGUMENT,
     "valid_kv_length=8 is outside 0..seq_k=7"},
    {E_PREFIX, "causal with prefix slicing", m_prefix_causal, ATTN_STATUS_UNSUPPORTED, "params.causal=1"},
    {E_PREFIX, "seq_k 2^40 stride-0", m_seq_k_2_40, ATTN_STATUS_INVALID_ARGUMENT, "exceeds ATTN_MAX_SEQ_LEN"},
    /* context */
    {E_CTX, "num_threads 0", m_ctx_threads, ATTN_STATUS_INVALID_ARGUMENT, "num_threads"},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

static void test_table(void **state) {
    (void)state;
    fx f;
    memset(&f, 0, sizeof f);
    f.b = (bufs *)aligned_alloc(64, (sizeof(bufs) + 63) / 64 * 64);
    f.snap = (bufs *)aligned_alloc(64, (sizeof(bufs) + 63) / 64 * 64);
    assert_non_null(f.b), assert_non_null(f.snap);
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    int failures = 0;
    for (int i = 0; i < NROWS; i++) {
        const row *r = &rows[i];
        fx_reset(&f);
        f.ctx = ctx;
        r->mutate(&f);
        memcpy(f.snap, f.b, sizeof *f.b);
        attn_clear_error();
        const attn_status st = call_entry(&f, r->e);
        int ok = st == r->status;
        if (st != ATTN_STATUS_OK) {
            ok = ok && strstr(attn_last_error(), r->msg) != NULL;
            ok = ok && memcmp(f.b, f.snap, sizeof *f.b) == 0; /* nothing written: outputs, workspace, cache, inputs */
        } else {
            ok = ok && memcmp(f.b, f.snap, offsetof(bufs, outputs)) == 0; /* inputs untouched */
        }
        if (!ok) {
            failures++;
            fprintf(stderr, "row %d (%s: %s): got %s \"%s\", want %s containing \"%s\"%s\n", i, entry_name(r->e),
                    r->what, attn_status_string(st), attn_last_error(), attn_status_string(r->status), r->msg,
                    memcmp(f.b, f.snap, offsetof(bufs, outputs)) ? " [inputs changed]" : "");
        }
    }
    attn_ctx_destroy(ctx);
    free(f.b), free(f.snap);
    assert_true(NROWS >= 60);
    assert_int_equal(failures, 0);
}

/* The markdown table of docs/ROBUSTNESS.md, from the rows above (run the test binary with --markdown). */
static void print_markdown(void) {
    printf("| # | entry | bad input | status | message contains |\n|---|---|---|---|---|\n");
    int n = 0;
    for (int i = 0; i < NROWS; i++) {
        if (rows[i].status == ATTN_STATUS_OK) continue;
        printf("| %d | `%s` | %s | %s | `%s` |\n", ++n, entry_name(rows[i].e), rows[i].what,
               attn_status_string(rows[i].status), rows[i].msg);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--markdown") == 0) {
        print_markdown();
        return 0;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
