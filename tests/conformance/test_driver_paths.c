/*
 * test_driver_paths.c — the driver's execution paths (GQA super-blocks for prefill, all-kv-heads items for
 * decode, the paged split-KV executor) against (a) the oracle within th_tol_for and (b) a straightforward
 * per-block execution written here with the driver's block functions (attn_fwd_block_init / pack_q /
 * partition / fold / finalize, one block at a time, partitions in ascending order): the "one reduction
 * structure" reference. (b) is BITWISE: scheduling may change how tiles are fetched, never a result bit.
 * Matrix: dense BSND/BNSD, varlen, paged (plan-less and plan + split-KV), f32/bf16/f16 K/V, GQA 1/4/7,
 * causal/window/ALiBi/soft-cap/sinks/masks, decode and prefill shapes, threads 1/2, every usable ISA (only the
 * fastest usable one when ATTN_TEST_ONE_ISA is set or th_test_emulated(): the sanitizer build and the qemu tier
 * do that to stay within their time budgets;
 * test_kernels still checks every table's kernels under the sanitizers).
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

#include "api/validate.h"
#include "attention/fwd.h"
#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "harness.h"

#define TD_MAX_SEQS 8

enum { TD_BSND = 0, TD_BNSD = 1, TD_VARLEN = 2, TD_PAGED = 3 };
/* Name of the fastest kernel table this CPU runs (the last usable one in attn_isa_name order). */
static const char *td_fastest_isa(void) {
    const char *best = "generic";
    for (int32_t i = 0; i < attn_isa_count(); i++)
        if (attn_isa_available(attn_isa_name(i))) best = attn_isa_name(i);
    return best;
}

static const char *const td_mode_names[] = {"bsnd", "bnsd", "varlen", "paged"};

typedef struct td_case {
    int mode;
    int64_t num_seqs;
    int64_t lq[TD_MAX_SEQS], lk[TD_MAX_SEQS]; /* dense modes use lq[0] / lk[0] for every sequence */
    int64_t H, Hk, D, Dv;
    attn_dtype q_dtype, kv_dtype;
    int causal, window_left, window_right;
    float softcap;
    int alibi, sinks, mask, kpm; /* mask: 1 = [B, H, Sq, Sk], 2 = [Sq, Sk] */
    int64_t block_size;          /* paged */
} td_case;

/* ---------------------------------------------------------------------------------------------
 * A test-side problem: sequences described by byte offsets and strides (or a block table)
 * --------------------------------------------------------------------------------------------- */
typedef struct td_view {
    const char *q, *k, *v;
    char *out;
    float *lse;
    int64_t seq_q[TD_MAX_SEQS], seq_k[TD_MAX_SEQS];
    int64_t q_off[TD_MAX_SEQS], k_off[TD_MAX_SEQS], v_off[TD_MAX_SEQS], o_off[TD_MAX_SEQS];
    int64_t lse_off[TD_MAX_SEQS];
    int64_t q_row, q_head, k_row, k_head, v_row, v_head, o_row, o_head, lse_row, lse_head;
    const int32_t *bt; /* paged: [num_seqs, bt_stride] */
    int64_t bt_stride, block_size, block_stride;
} td_view;

static void td_get_seq(const attn_problem *p, int64_t b, attn_seq_view *s) {
    const td_view *w = (const td_view *)p->user[0];
    memset(s, 0, sizeof *s);
    s->batch_idx = b;
    s->seq_q = w->seq_q[b];
    s->seq_k = w->seq_k[b];
    s->q = w->q + w->q_off[b];
    s->q_row_stride = w->q_row, s->q_head_stride = w->q_head;
    s->k = w->k + w->k_off[b];
    s->v = w->v + w->v_off[b];
    s->k_row_stride = w->k_row, s->k_head_stride = w->k_head;
    s->v_row_stride = w->v_row, s->v_head_stride = w->v_head;
    if (w->bt) {
        s->block_table = w->bt + b * w->bt_stride;
        s->block_size = w->block_size;
        s->k_block_stride = s->v_block_stride = w->block_stride;
    }
    s->out = w->out + w->o_off[b];
    s->out_row_stride = w->o_row, s->out_head_stride = w->o_head;
    s->lse = w->lse + w->lse_off[b];
    s->lse_row_stride = w->lse_row, s->lse_head_stride = w->lse_head;
}

/* The reference schedule: every block alone, partitions in ascending order, folded, finalized. */
static void td_run_per_block(const attn_problem *p, const struct attn_kernels *kern, void *scratch) {
    attn_fwd_scratch sc;
    attn_fwd_scratch_carve(scratch, &sc);
    attn_fwd_shape sh;
    attn_fwd_shape_of(p, &sh);
    for (int64_t b = 0; b < p->num_seqs; b++) {
        attn_seq_view seq;
        p->get_seq(p, b, &seq);
        const int64_t num_tb = (seq.seq_q + sh.tokens_per_block - 1) / sh.tokens_per_block;
        for (int64_t g = 0; g < p->num_kv_heads; g++)
            for (int64_t c = 0; c < sh.head_chunks; c++)
                for (int64_t tb = 0; tb < num_tb; tb++) {
                    attn_fwd_block blk;
                    attn_fwd_block_init(p, &sh, &seq, g, c, tb, &blk);
                    attn_fwd_pack_q(p, kern, &blk, &sc);
                    attn_fwd_state_reset(p->head_size_v, sc.m_acc, sc.l_acc, sc.o_acc);
                    int64_t first, last;
                    attn_fwd_partitions(&blk, &first, &last);
                    for (int64_t part = first; part < last; part++) {
                        attn_fwd_partition(p, kern, &blk, &sc, part, sc.m_part, sc.l_part, sc.o_part);
                        attn_fwd_fold(blk.num_rows, p->head_size_v, sc.m_acc, sc.l_acc, sc.o_acc, sc.m_part,
                                      sc.l_part, sc.o_part);
                    }
                    attn_fwd_finalize(p, kern, &blk, &sc, sc.m_acc, sc.l_acc, sc.o_acc);
                }
    }
}

/* ---------------------------------------------------------------------------------------------
 * One case: inputs, the public entries (fast + oracle) and the per-block reference
 * --------------------------------------------------------------------------------------------- */
typedef struct td_data {
    int64_t B, total_q, total_k, max_q, max_k, num_blocks, max_blocks;
    int32_t cu_q[TD_MAX_SEQS + 1], cu_k[TD_MAX_SEQS + 1], seq_lens[TD_MAX_SEQS];
    void *q, *k, *v, *cache;  /* layout per mode; paged: cache [2, num_blocks, bs, Hk, D] */
    int32_t *bt;               /* paged: [B, max_blocks] */
    float *alibi, *sinks;
    unsigned char *mask, *kpm;
    attn_tensor mask_t, kpm_t;
    size_t out_elems, lse_elems;
} td_data;

static void td_data_make(const td_case *c, uint64_t seed, td_data *d) {
    memset(d, 0, sizeof *d);
    th_rng r;
    th_rng_seed(&r, seed);
    const int dense = c->mode == TD_BSND || c->mode == TD_BNSD;
    d->B = c->num_seqs;
    for (int64_t b = 0; b < d->B; b++) {
        const int64_t lq = dense ? c->lq[0] : c->lq[b], lk = dense ? c->lk[0] : c->lk[b];
        d->cu_q[b + 1] = d->cu_q[b] + (int32_t)lq;
        d->cu_k[b + 1] = d->cu_k[b] + (int32_t)lk;
        d->seq_lens[b] = (int32_t)lk;
        if (lq > d->max_q) d->max_q = lq;
        if (lk > d->max_k) d->max_k = lk;
    }
    d->total_q = d->cu_q[d->B], d->total_k = d->cu_k[d->B];
    d->q = th_alloc_fill(&r, c->q_dtype, (size_t)(d->total_q * c->H * c->D), -1, 1);
    if (c->mode == TD_PAGED) {
        const int64_t bs = c->block_size;
        d->max_blocks = (d->max_k + bs - 1) / bs + 1;
        d->num_blocks = d->B * d->max_blocks + 3;
        d->cache = th_alloc_fill(&r, c->kv_dtype, (size_t)(2 * d->num_blocks * bs * c->Hk * c->D), -1, 1);
        d->bt = (int32_t *)calloc((size_t)(d->B * d->max_blocks), sizeof(int32_t));
        /* a random permutation of the block ids: pages in random order */
        int32_t *perm = (int32_t *)malloc((size_t)d->num_blocks * sizeof(int32_t));
        for (int64_t i = 0; i < d->num_blocks; i++) perm[i] = (int32_t)i;
        for (int64_t i = d->num_blocks - 1; i > 0; i--) {
            const int64_t j = th_rng_int(&r, 0, i);
            const int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int64_t i = 0; i < d->B * d->max_blocks; i++) d->bt[i] = perm[i];
        free(perm);
    } else {
        d->k = th_alloc_fill(&r, c->kv_dtype, (size_t)(d->total_k * c->Hk * c->D), -1, 1);
        d->v = th_alloc_fill(&r, c->kv_dtype, (size_t)(d->total_k * c->Hk * c->Dv), -1, 1);
    }
    d->out_elems = (size_t)(d->total_q * c->H * c->Dv);
    d->lse_elems = (size_t)(d->total_q * c->H);
    if (c->alibi) {
        d->alibi = (float *)malloc((size_t)c->H * sizeof(float));
        for (int64_t h = 0; h < c->H; h++) d->alibi[h] = (float)th_rng_range(&r, 0.01, 0.5);
    }
    if (c->sinks) {
        d->sinks = (float *)malloc((size_t)c->H * sizeof(float));
        for (int64_t h = 0; h < c->H; h++) d->sinks[h] = (float)th_rng_range(&r, -2, 2);
    }
    const int64_t Sq = d->max_q, Sk = d->max_k;
    if (c->mask == 1) {
        const int64_t shp[4] = {d->B, c->H, Sq, Sk};
        d->mask = (unsigned char *)malloc((size_t)(d->B * c->H * Sq * Sk));
        for (int64_t i = 0; i < d->B * c->H * Sq * Sk; i++) d->mask[i] = th_rng_uniform(&r) < 0.8;
        d->mask_t = attn_tensor_make(d->mask, ATTN_DTYPE_BOOL, 4, shp);
    } else if (c->mask == 2) {
        const int64_t shp[2] = {Sq, Sk};
        d->mask = (unsigned char *)malloc((size_t)(Sq * Sk));
        for (int64_t i = 0; i < Sq * Sk; i++) d->mask[i] = th_rng_uniform(&r) < 0.7;
        d->mask_t = attn_tensor_make(d->mask, ATTN_DTYPE_BOOL, 2, shp);
    }
    if (c->kpm) {
        const int64_t shp[2] = {d->B, Sk};
        d->kpm = (unsigned char *)malloc((size_t)(d->B * Sk));
        for (int64_t i = 0; i < d->B * Sk; i++) d->kpm[i] = th_rng_uniform(&r) < 0.85;
        d->kpm_t = attn_tensor_make(d->kpm, ATTN_DTYPE_BOOL, 2, shp);
    }
}

static void td_data_free(td_data *d) {
    free(d->q), free(d->k), free(d->v), free(d->cache), free(d->bt);
    free(d->alibi), free(d->sinks), free(d->mask), free(d->kpm);
}

static void td_params(const td_case *c, const td_data *d, attn_params *prm) {
    attn_params_init(prm);
    prm->causal = c->causal;
    prm->window_left = c->window_left;
    prm->window_right = c->window_right;
    prm->softcap = c->softcap;
    prm->alibi_slopes = d->alibi;
    prm->sinks = d->sinks;
    prm->mask = c->mask ? &d->mask_t : NULL;
    prm->key_padding_mask = c->kpm ? &d->kpm_t : NULL;
}

/* Tensor views of q/k/v/out/lse for the dense and varlen modes. */
typedef struct td_views {
    attn_tensor q, k, v, out, lse;
} td_views;

static td_views td_views_of(const td_case *c, const td_data *d, void *out, float *lse) {
    td_views t;
    const int64_t B = d->B, Sq = d->max_q, Sk = d->max_k;
    if (c->mode == TD_BSND) {
        t.q = attn_tensor_make(d->q, c->q_dtype, 4, (const int64_t[]){B, Sq, c->H, c->D});
        t.k = attn_tensor_make(d->k, c->kv_dtype, 4, (const int64_t[]){B, Sk, c->Hk, c->D});
        t.v = attn_tensor_make(d->v, c->kv_dtype, 4, (const int64_t[]){B, Sk, c->Hk, c->Dv});
        t.out = attn_tensor_make(out, c->q_dtype, 4, (const int64_t[]){B, Sq, c->H, c->Dv});
        t.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, (const int64_t[]){B, c->H, Sq});
    } else if (c->mode == TD_BNSD) {
        t.q = attn_tensor_make(d->q, c->q_dtype, 4, (const int64_t[]){B, c->H, Sq, c->D});
        t.k = attn_tensor_make(d->k, c->kv_dtype, 4, (const int64_t[]){B, c->Hk, Sk, c->D});
        t.v = attn_tensor_make(d->v, c->kv_dtype, 4, (const int64_t[]){B, c->Hk, Sk, c->Dv});
        t.out = attn_tensor_make(out, c->q_dtype, 4, (const int64_t[]){B, c->H, Sq, c->Dv});
        t.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, (const int64_t[]){B, c->H, Sq});
    } else {
        t.q = attn_tensor_make(d->q, c->q_dtype, 3, (const int64_t[]){d->total_q, c->H, c->D});
        t.k = attn_tensor_make(d->k, c->kv_dtype, 3, (const int64_t[]){d->total_k, c->Hk, c->D});
        t.v = attn_tensor_make(d->v, c->kv_dtype, 3, (const int64_t[]){d->total_k, c->Hk, c->Dv});
        t.out = attn_tensor_make(out, c->q_dtype, 3, (const int64_t[]){d->total_q, c->H, c->Dv});
        t.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, (const int64_t[]){c->H, d->total_q});
    }
    return t;
}

/* The test-side view of the same memory (paged: the plan's metadata arrays). */
static void td_view_of(const td_case *c, const td_data *d, const void *q, const int32_t *qsl, const int32_t *lens,
                       const int32_t *bt, int64_t bt_stride, void *out, float *lse, td_view *w) {
    memset(w, 0, sizeof *w);
    const int64_t qe = (int64_t)attn_dtype_size(c->q_dtype), ke = (int64_t)attn_dtype_size(c->kv_dtype);
    const int64_t Sq = d->max_q, Sk = d->max_k;
    w->q = (const char *)q, w->k = (const char *)d->k, w->v = (const char *)d->v;
    w->out = (char *)out, w->lse = lse;
    for (int64_t b = 0; b < d->B; b++) {
        w->seq_q[b] = d->cu_q[b + 1] - d->cu_q[b];
        w->seq_k[b] = d->cu_k[b + 1] - d->cu_k[b];
    }
    if (c->mode == TD_BSND) {
        for (int64_t b = 0; b < d->B; b++) {
            w->q_off[b] = b * Sq * c->H * c->D * qe, w->o_off[b] = b * Sq * c->H * c->Dv * qe;
            w->k_off[b] = b * Sk * c->Hk * c->D * ke, w->v_off[b] = b * Sk * c->Hk * c->Dv * ke;
            w->lse_off[b] = b * c->H * Sq;
        }
        w->q_row = c->H * c->D * qe, w->q_head = c->D * qe;
        w->k_row = c->Hk * c->D * ke, w->k_head = c->D * ke;
        w->v_row = c->Hk * c->Dv * ke, w->v_head = c->Dv * ke;
        w->o_row = c->H * c->Dv * qe, w->o_head = c->Dv * qe;
        w->lse_row = 1, w->lse_head = Sq;
    } else if (c->mode == TD_BNSD) {
        for (int64_t b = 0; b < d->B; b++) {
            w->q_off[b] = b * Sq * c->H * c->D * qe, w->o_off[b] = b * Sq * c->H * c->Dv * qe;
            w->k_off[b] = b * Sk * c->Hk * c->D * ke, w->v_off[b] = b * Sk * c->Hk * c->Dv * ke;
            w->lse_off[b] = b * c->H * Sq;
        }
        w->q_row = c->D * qe, w->q_head = Sq * c->D * qe;
        w->k_row = c->D * ke, w->k_head = Sk * c->D * ke;
        w->v_row = c->Dv * ke, w->v_head = Sk * c->Dv * ke;
        w->o_row = c->Dv * qe, w->o_head = Sq * c->Dv * qe;
        w->lse_row = 1, w->lse_head = Sq;
    } else {
        const int32_t *cq = qsl ? qsl : d->cu_q;
        for (int64_t b = 0; b < d->B; b++) {
            w->seq_q[b] = cq[b + 1] - cq[b];
            if (lens) w->seq_k[b] = lens[b];
            w->q_off[b] = cq[b] * c->H * c->D * qe, w->o_off[b] = cq[b] * c->H * c->Dv * qe;
            w->k_off[b] = d->cu_k[b] * c->Hk * c->D * ke, w->v_off[b] = d->cu_k[b] * c->Hk * c->Dv * ke;
            w->lse_off[b] = cq[b];
        }
        w->q_row = c->H * c->D * qe, w->q_head = c->D * qe;
        w->k_row = c->Hk * c->D * ke, w->k_head = c->D * ke;
        w->v_row = c->Hk * c->Dv * ke, w->v_head = c->Dv * ke;
        w->o_row = c->H * c->Dv * qe, w->o_head = c->Dv * qe;
        w->lse_row = 1, w->lse_head = d->total_q;
    }
    if (c->mode == TD_PAGED) {
        const int64_t bs = c->block_size;
        w->k = (const char *)d->cache;
        w->v = (const char *)d->cache + d->num_blocks * bs * c->Hk * c->D * ke;
        for (int64_t b = 0; b < d->B; b++) w->k_off[b] = w->v_off[b] = 0;
        w->bt = bt, w->bt_stride = bt_stride, w->block_size = bs;
        w->block_stride = bs * c->Hk * c->D * ke;
    }
}

static void td_problem_of(const td_case *c, const attn_params *prm, const td_view *w, int64_t B, attn_problem *p) {
    memset(p, 0, sizeof *p);
    assert_int_equal(attn_opts_resolve(prm, c->H, c->D, 1, &p->opts), ATTN_STATUS_OK);
    p->num_heads = c->H, p->num_kv_heads = c->Hk, p->head_size = c->D, p->head_size_v = c->Dv;
    p->q_dtype = p->out_dtype = c->q_dtype;
    p->kv_dtype = c->kv_dtype;
    p->num_seqs = B;
    for (int64_t b = 0; b < B; b++)
        if (w->seq_q[b] > p->max_seq_q) p->max_seq_q = w->seq_q[b];
    p->get_seq = td_get_seq;
    p->user[0] = w;
}

static void td_describe(const td_case *c, const char *isa, int threads, char *buf, size_t n) {
    snprintf(buf, n,
             "%s isa=%s threads=%d B=%lld lq0=%lld lk0=%lld H=%lld Hk=%lld D=%lld Dv=%lld q=%s kv=%s causal=%d "
             "win=(%d,%d) softcap=%g alibi=%d sinks=%d mask=%d kpm=%d bs=%lld",
             td_mode_names[c->mode], isa, threads, (long long)c->num_seqs, (long long)c->lq[0], (long long)c->lk[0],
             (long long)c->H, (long long)c->Hk, (long long)c->D, (long long)c->Dv, attn_dtype_name(c->q_dtype),
             attn_dtype_name(c->kv_dtype), c->causal, c->window_left, c->window_right, (double)c->softcap, c->alibi,
             c->sinks, c->mask, c->kpm, (long long)c->block_size);
}

static int td_failures;

static void td_expect_same(const void *a, const void *b, size_t bytes, const char *what, const char *desc) {
    if (memcmp(a, b, bytes) != 0) {
        size_t i = 0;
        while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i]) i++;
        print_message("BITWISE MISMATCH (%s) at byte %zu: %s\n", what, i, desc);
        td_failures++;
    }
}

static void td_expect_close(const attn_tensor *got, const attn_tensor *exp, const attn_tensor *gl,
                            const attn_tensor *el, attn_dtype dt, const char *desc) {
    size_t bad = 0, bad_l = 0;
    const double err = th_compare(got, exp, th_tol_for(dt), 1.0, &bad);
    const double err_l = th_compare_lse(gl, el, th_tol_for(dt), &bad_l);
    if (bad || bad_l) {
        print_message("ORACLE MISMATCH out err %.3g (%zu bad) lse err %.3g (%zu bad): %s\n", err, bad, err_l, bad_l,
                      desc);
        td_failures++;
    }
}

/* Runs one case on every usable ISA and thread count. */
static void td_run_case(attn_ctx *ctx, const td_case *c, uint64_t seed) {
    td_data d;
    td_data_make(c, seed, &d);
    attn_params prm;
    td_params(c, &d, &prm);
    const size_t ob = d.out_elems * attn_dtype_size(c->q_dtype), lb = d.lse_elems * sizeof(float);
    void *o_ref = th_alloc_nan(c->q_dtype, d.out_elems), *o_blk = th_alloc_nan(c->q_dtype, d.out_elems);
    void *o_fast = th_alloc_nan(c->q_dtype, d.out_elems), *o_plan = th_alloc_nan(c->q_dtype, d.out_elems);
    float *l_ref = (float *)th_alloc_nan(ATTN_DTYPE_F32, d.lse_elems);
    float *l_blk = (float *)th_alloc_nan(ATTN_DTYPE_F32, d.lse_elems);
    float *l_fast = (float *)th_alloc_nan(ATTN_DTYPE_F32, d.lse_elems);
    float *l_plan = (float *)th_alloc_nan(ATTN_DTYPE_F32, d.lse_elems);
    void *scratch = aligned_alloc(64, attn_fwd_scratch_bytes());
    assert_non_null(scratch);

    /* paged: a plan over the same requests; everything then runs in plan order on q_plan */
    attn_plan *plan = NULL;
    attn_plan_info info;
    memset(&info, 0, sizeof info);
    void *q_use = d.q, *ws = NULL;
    attn_tensor cache_t, qsl_t, lens_t, bt_t;
    const int64_t qe = (int64_t)attn_dtype_size(c->q_dtype);
    if (c->mode == TD_PAGED) {
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = (int32_t)d.num_blocks, cfg.block_size = (int32_t)c->block_size;
        cfg.num_heads = (int32_t)c->H, cfg.num_kv_heads = (int32_t)c->Hk, cfg.head_size = (int32_t)c->D;
        cfg.max_blocks_per_req = (int32_t)d.max_blocks;
        cfg.num_speculative_tokens = 7;
        attn_request reqs[TD_MAX_SEQS];
        memset(reqs, 0, sizeof reqs);
        for (int64_t b = 0; b < d.B; b++) {
            const int64_t lq = d.cu_q[b + 1] - d.cu_q[b], lk = d.seq_lens[b];
            reqs[b].num_computed_tokens = lk - lq;
            reqs[b].num_scheduled_tokens = lq;
            reqs[b].kind = ATTN_REQUEST_DECODER;
            reqs[b].block_ids = d.bt + b * d.max_blocks;
            reqs[b].num_block_ids = (lk + c->block_size - 1) / c->block_size;
        }
        assert_int_equal(attn_plan_create(&cfg, reqs, d.B, &plan), ATTN_STATUS_OK);
        assert_int_equal(attn_plan_get_info(plan, &info), ATTN_STATUS_OK);
        q_use = malloc((size_t)(d.total_q * c->H * c->D * qe));
        for (int64_t t = 0; t < d.total_q; t++)
            memcpy((char *)q_use + t * c->H * c->D * qe, (const char *)d.q + info.token_src[t] * c->H * c->D * qe,
                   (size_t)(c->H * c->D * qe));
        if (info.workspace_size) ws = aligned_alloc(64, (info.workspace_size + 63) & ~(size_t)63);
        cache_t = attn_tensor_make(d.cache, c->kv_dtype, 5,
                                   (const int64_t[]){2, d.num_blocks, c->block_size, c->Hk, c->D});
        qsl_t = attn_tensor_make((void *)info.query_start_loc, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B + 1});
        lens_t = attn_tensor_make((void *)info.seq_lens, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B});
        bt_t = attn_tensor_make((void *)info.block_table, ATTN_DTYPE_I32, 2,
                                (const int64_t[]){d.B, info.max_blocks_per_req});
    }

    /* oracle */
    td_views tr = td_views_of(c, &d, o_ref, l_ref);
    if (c->mode == TD_PAGED) {
        tr.q.data = q_use;
        assert_int_equal(attn_ref_paged_attention(&tr.q, &cache_t, &qsl_t, &lens_t, &bt_t, &prm, &tr.out, &tr.lse),
                         ATTN_STATUS_OK);
    } else if (c->mode == TD_VARLEN) {
        attn_tensor cq = attn_tensor_make(d.cu_q, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B + 1});
        attn_tensor ck = attn_tensor_make(d.cu_k, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B + 1});
        assert_int_equal(attn_ref_forward_varlen(&tr.q, &tr.k, &tr.v, &cq, &ck, &prm, &tr.out, &tr.lse),
                         ATTN_STATUS_OK);
    } else {
        assert_int_equal(attn_ref_forward(c->mode == TD_BSND ? ATTN_LAYOUT_BSND : ATTN_LAYOUT_BNSD, &tr.q, &tr.k,
                                          &tr.v, &prm, &tr.out, &tr.lse),
                         ATTN_STATUS_OK);
    }

    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *isa = attn_isa_name(i);
        if (!attn_isa_available(isa)) continue;
        if ((getenv("ATTN_TEST_ONE_ISA") || th_test_emulated()) && strcmp(isa, td_fastest_isa()) != 0)
            continue; /* one table only (the sanitizer and the emulated tiers) */
        assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
        const struct attn_kernels *kern = attn_dispatch_by_name(isa);
        assert_non_null(kern);

        /* the per-block reference */
        td_view w;
        td_view_of(c, &d, q_use, c->mode == TD_PAGED ? info.query_start_loc : NULL,
                   c->mode == TD_PAGED ? info.seq_lens : NULL, info.block_table, info.max_blocks_per_req, o_blk,
                   l_blk, &w);
        attn_problem p;
        td_problem_of(c, &prm, &w, d.B, &p);
        memset(o_blk, 0xFF, ob), memset(l_blk, 0xFF, lb);
        td_run_per_block(&p, kern, scratch);

        for (int threads = 1; threads <= 2; threads++) {
            char desc[512];
            td_describe(c, isa, threads, desc, sizeof desc);
            assert_int_equal(attn_ctx_set_num_threads(ctx, threads), ATTN_STATUS_OK);
            memset(o_fast, 0xFF, ob), memset(l_fast, 0xFF, lb);
            td_views t = td_views_of(c, &d, o_fast, l_fast);
            if (c->mode == TD_PAGED) {
                t.q.data = q_use;
                assert_int_equal(attn_paged_attention(ctx, &t.q, &cache_t, &qsl_t, &lens_t, &bt_t, &prm, &t.out,
                                                      &t.lse),
                                 ATTN_STATUS_OK);
                memset(o_plan, 0xFF, ob), memset(l_plan, 0xFF, lb);
                attn_tensor po = t.out, pl = t.lse;
                po.data = o_plan, pl.data = l_plan;
                assert_int_equal(attn_forward_paged(ctx, plan, &t.q, NULL, NULL, &cache_t, &prm, &po, &pl, ws,
                                                    info.workspace_size),
                                 ATTN_STATUS_OK);
                td_expect_same(o_plan, o_blk, ob, "plan out vs per-block", desc);
                td_expect_same(l_plan, l_blk, lb, "plan lse vs per-block", desc);
            } else if (c->mode == TD_VARLEN) {
                attn_tensor cq = attn_tensor_make(d.cu_q, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B + 1});
                attn_tensor ck = attn_tensor_make(d.cu_k, ATTN_DTYPE_I32, 1, (const int64_t[]){d.B + 1});
                assert_int_equal(attn_forward_varlen(ctx, &t.q, &t.k, &t.v, &cq, &ck, &prm, &t.out, &t.lse),
                                 ATTN_STATUS_OK);
            } else {
                assert_int_equal(attn_forward(ctx, c->mode == TD_BSND ? ATTN_LAYOUT_BSND : ATTN_LAYOUT_BNSD, &t.q,
                                              &t.k, &t.v, &prm, &t.out, &t.lse),
                                 ATTN_STATUS_OK);
            }
            td_expect_same(o_fast, o_blk, ob, "out vs per-block", desc);
            td_expect_same(l_fast, l_blk, lb, "lse vs per-block", desc);
            if (threads == 1) td_expect_close(&t.out, &tr.out, &t.lse, &tr.lse, c->q_dtype, desc);
        }
    }
    assert_int_equal(attn_ctx_set_num_threads(ctx, 1), ATTN_STATUS_OK);
    attn_plan_free(plan);
    if (q_use != d.q) free(q_use);
    free(ws), free(scratch);
    free(o_ref), free(o_blk), free(o_fast), free(o_plan), free(l_ref), free(l_blk), free(l_fast), free(l_plan);
    td_data_free(&d);
}

/* ---------------------------------------------------------------------------------------------
 * The matrix
 * --------------------------------------------------------------------------------------------- */
static td_case td_base(int mode, int64_t H, int64_t Hk, int64_t D, attn_dtype kv) {
    td_case c;
    memset(&c, 0, sizeof c);
    c.mode = mode, c.num_seqs = 2, c.H = H, c.Hk = Hk, c.D = D, c.Dv = D;
    c.q_dtype = kv == ATTN_DTYPE_F32 ? ATTN_DTYPE_F32 : kv, c.kv_dtype = kv;
    c.window_left = c.window_right = -1;
    c.block_size = 16;
    return c;
}

static attn_ctx *td_ctx(void) {
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    return ctx;
}

/* Sanitizer tier (th_test_small): one kv dtype per matrix point instead of all of them, rotating with `k` so
 * every dtype, group and mode still runs (the same code paths, about a third of the cases). */
static int td_skip_dtype(int di, int k, int n) { return th_test_small() && di != k % n; }

/* Prefill shapes: several query blocks per kv head (super-blocks), partial super-blocks, > 2 partitions. */
static void test_prefill_dense(void **state) {
    (void)state;
    td_failures = 0;
    attn_ctx *ctx = td_ctx();
    const attn_dtype kvs[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t gqa[3][2] = {{4, 4}, {8, 2}, {14, 2}}; /* GQA 1, 4, 7 */
    uint64_t seed = 100;
    for (int mode = TD_BSND; mode <= TD_BNSD; mode++)
        for (int di = 0; di < 3; di++)
            for (int gi = 0; gi < 3; gi++) {
                if (td_skip_dtype(di, mode + gi, 3)) continue;
                td_case c = td_base(mode, gqa[gi][0], gqa[gi][1], gi == 2 ? 40 : 64, kvs[di]);
                c.lq[0] = gi == 1 ? 100 : 70, c.lk[0] = gi == 1 ? 1100 : 600;
                if (th_test_emulated()) /* emulated: 2 partitions instead of 3, still several query blocks */
                    c.lq[0] = gi == 1 ? 70 : 40, c.lk[0] = gi == 1 ? 600 : 300;
                c.causal = (di + gi) % 2 ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
                td_run_case(ctx, &c, seed++);
            }
    attn_ctx_destroy(ctx);
    assert_int_equal(td_failures, 0);
}

/* Every option on prefill shapes (dense BSND f32 in place and bf16 converted). */
static void test_prefill_options(void **state) {
    (void)state;
    td_failures = 0;
    attn_ctx *ctx = td_ctx();
    uint64_t seed = 200;
    for (int opt = 0; opt < 9; opt++)
        for (int di = 0; di < 2; di++) {
            if (td_skip_dtype(di, opt, 2)) continue;
            td_case c = td_base(opt % 2 ? TD_BNSD : TD_BSND, 8, 2, 32, di ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32);
            c.lq[0] = 64, c.lk[0] = th_test_emulated() ? 300 : 600; /* emulated: one partition, same options */
            c.Dv = opt == 8 ? 24 : 32;
            switch (opt) {
            case 0: c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.window_left = 100, c.window_right = 0; break;
            case 1: c.causal = ATTN_CAUSAL_TOP_LEFT, c.window_left = 37, c.window_right = 5; break;
            case 2: c.softcap = 3.0f, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT; break;
            case 3: c.alibi = 1, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT; break;
            case 4: c.sinks = 1, c.softcap = 5.0f; break;
            case 5: c.mask = 1; break;
            case 6: c.mask = 2, c.kpm = 1, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT; break;
            case 7: c.kpm = 1, c.alibi = 1, c.sinks = 1, c.window_left = 200; break;
            default: c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.window_left = 3, c.window_right = 3; break;
            }
            td_run_case(ctx, &c, seed++);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(td_failures, 0);
}

/* Decode and speculative-decode shapes (few rows per block): dense, varlen, every dtype and group. */
static void test_decode(void **state) {
    (void)state;
    td_failures = 0;
    attn_ctx *ctx = td_ctx();
    const attn_dtype kvs[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t gqa[4][2] = {{8, 8}, {32, 8}, {14, 2}, {40, 1}};
    uint64_t seed = 300;
    for (int mode = TD_BSND; mode <= TD_VARLEN; mode++)
        for (int di = 0; di < 3; di++)
            for (int gi = 0; gi < 4; gi++) {
                if (td_skip_dtype(di, mode + gi, 3)) continue;
                td_case c = td_base(mode, gqa[gi][0], gqa[gi][1], gi == 2 ? 72 : 64, kvs[di]);
                c.num_seqs = 3;
                /* emulated: contexts 150 / 550 / 950 instead of 300 / 817 / 1334 (still 1 and 2 partitions) */
                for (int b = 0; b < 3; b++)
                    c.lq[b] = 1 + (mode == TD_VARLEN ? b * 3 : 0),
                    c.lk[b] = th_test_emulated() ? 150 + 400 * b : 300 + 517 * b;
                c.lq[0] = gi == 3 ? 3 : 1; /* GQA 40 with 3 tokens: more than one head chunk */
                c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                if (gi == 1) c.alibi = 1, c.sinks = 1;
                if (gi == 2) c.window_left = 400, c.softcap = 4.0f;
                td_run_case(ctx, &c, seed++);
            }
    attn_ctx_destroy(ctx);
    assert_int_equal(td_failures, 0);
}

/* Paged: decode, spec decode and chunked prefill batches through attn_paged_attention and the plan. */
static void test_paged(void **state) {
    (void)state;
    td_failures = 0;
    attn_ctx *ctx = td_ctx();
    const attn_dtype kvs[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    const int64_t gqa[3][2] = {{4, 4}, {16, 4}, {14, 2}};
    const int64_t bss[3] = {16, 5, 64};
    uint64_t seed = 400;
    for (int di = 0; di < 3; di++)
        for (int gi = 0; gi < 3; gi++)
            for (int shape = 0; shape < 2; shape++) {
                if (td_skip_dtype(di, gi + shape, 3)) continue;
                td_case c = td_base(TD_PAGED, gqa[gi][0], gqa[gi][1], gi == 2 ? 48 : 64, kvs[di]);
                c.block_size = bss[(di + gi) % 3];
                c.num_seqs = 4;
                const int64_t lq_dec[4] = {1, 1, 4, 1}, lq_mix[4] = {1, 3, 70, 200};
                const int64_t lk[4] = {1200, 37, 600, 900};
                /* emulated: shorter, the first and last requests still split over partitions */
                const int64_t lq_mix_emu[4] = {1, 3, 40, 70}, lk_emu[4] = {600, 37, 300, 530};
                const int emu = th_test_emulated();
                for (int b = 0; b < 4; b++)
                    c.lq[b] = shape ? (emu ? lq_mix_emu : lq_mix)[b] : lq_dec[b], c.lk[b] = (emu ? lk_emu : lk)[b];
                c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
                if (gi == 1) c.sinks = 1, c.window_left = 700;
                if (gi == 2) c.alibi = 1, c.softcap = 2.0f;
                td_run_case(ctx, &c, seed++);
            }
    attn_ctx_destroy(ctx);
    assert_int_equal(td_failures, 0);
}

/* Many kv heads (more than one multi-head item per sequence) and head sizes up to the maximum. */
/* The decode prefetch span: one token's rows of the item's kv heads where they fit that token's row, else one row
 * (a span over other tokens' rows, prefetched per token, made BNSD decode 200-2000x slower). */
static void test_token_span(void **state) {
    (void)state;
    assert_int_equal(attn_fwd_token_span(7, 256, 256, 8 * 256), 8 * 256);            /* BSND, 8 heads of bf16 × 128 */
    assert_int_equal(attn_fwd_token_span(7, 300, 256, 8 * 300 + 64), 7 * 300 + 256); /* padded heads */
    assert_int_equal(attn_fwd_token_span(0, 0, 256, 256), 256);                      /* one head */
    assert_int_equal(attn_fwd_token_span(7, 4096 * 256, 256, 256), 256);             /* BNSD, 4096 tokens */
    assert_int_equal(attn_fwd_token_span(7, 16 * 256, 256, 256), 256);               /* head-major page of 16 */
    assert_int_equal(attn_fwd_token_span(1, 256, 256, 256), 256);                    /* a single-head view */
}

/* Paged decode over a head-major cache ([2, num_blocks, num_kv_heads, block_size, head_size] memory, passed as a
 * view with attn's dimension order): bitwise the output and LSE of the same values in a token-major cache, on 1 and
 * 2 threads, for f32, bf16 and E4M3 K/V, with blocks of 16 rows (two runs per 32-token chunk), of 5 (runs the driver
 * prefetches itself) and of 16 rows padded apart (rows not back to back); the decode schedule walks and prefetches
 * such pages head by head. */
static void test_head_major_pages(void **state) {
    (void)state;
    enum { B = 3, H = 16, HK = 4, D = 64 };
    const int64_t lens[B] = {700, 37, 1100}, pages[3][2] = {{16, 0}, {5, 0}, {16, 8}}; /* block_size, row padding */
    const attn_dtype dts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_FP8_E4M3};
    attn_ctx *ctx = td_ctx();
    th_rng r;
    th_rng_seed(&r, 77);
    float *q = (float *)malloc(sizeof(float) * B * H * D), *out[2], lse[2][B * H];
    out[0] = (float *)malloc(sizeof(float) * B * H * D), out[1] = (float *)malloc(sizeof(float) * B * H * D);
    int32_t *bt = (int32_t *)malloc(sizeof(int32_t) * B * (1100 / 5 + 1)), qsl[B + 1], sl[B];
    for (int64_t i = 0; i < B * H * D; i++)
        q[i] = (float)th_rng_range(&r, -1, 1);
    for (int b = 0; b < B; b++)
        qsl[b] = b, sl[b] = (int32_t)lens[b];
    qsl[B] = B;
    int fails = 0;
    for (int pi = 0; pi < 3; pi++)
        for (int di = 0; di < 3; di++) {
            const int64_t BS = pages[pi][0], RS = D + pages[pi][1]; /* head-major row stride */
            const int64_t max_blocks = (1100 + BS - 1) / BS, nb = B * max_blocks;
            for (int b = 0; b < B; b++)
                for (int64_t k = 0; k < max_blocks; k++)
                    bt[b * max_blocks + k] = (int32_t)((k * B + b) % nb); /* interleaved */
            const size_t es = attn_dtype_size(dts[di]), n = (size_t)2 * (size_t)nb * BS * HK * D;
            unsigned char *nhd = (unsigned char *)malloc(n * es);
            /* views of the same values: [1] head-major ([blk][h][t][d], rows RS apart); [2] / [3] vLLM's per-layer
             * cache, a head's key then its value in one row of P = 2·D (+ padding), token-major ([blk][t][h][P]) /
             * head-major ([blk][h][t][P]) */
            const int64_t P = 2 * D + pages[pi][1];
            unsigned char *view[4] = {nhd, (unsigned char *)calloc((size_t)2 * (size_t)nb * BS * HK * RS, es),
                                      (unsigned char *)calloc((size_t)nb * BS * HK * P, es),
                                      (unsigned char *)calloc((size_t)nb * BS * HK * P, es)};
            for (size_t i = 0; i < n; i++) {
                const float x = (float)th_rng_range(&r, -1, 1);
                if (dts[di] == ATTN_DTYPE_F32)
                    memcpy(nhd + 4 * i, &x, 4);
                else if (dts[di] == ATTN_DTYPE_BF16) {
                    const uint16_t h = attn_f32_to_bf16(x);
                    memcpy(nhd + 2 * i, &h, 2);
                } else {
                    const uint8_t c = (uint8_t)th_rng_int(&r, 0, 255);
                    nhd[i] = (c & 0x7F) == 0x7F ? (uint8_t)(c - 1) : c;
                }
            }
            for (int64_t kv = 0; kv < 2; kv++) /* [kv][blk][t][h][d] → each view */
                for (int64_t blk = 0; blk < nb; blk++)
                    for (int64_t t = 0; t < BS; t++)
                        for (int64_t h = 0; h < HK; h++) {
                            const unsigned char *src = nhd + ((((size_t)kv * nb + blk) * BS + t) * HK + h) * D * es;
                            memcpy(view[1] + (((size_t)(kv * nb + blk) * HK + h) * BS + t) * RS * es, src, D * es);
                            memcpy(view[2] + ((((size_t)blk * BS + t) * HK + h) * P + kv * D) * es, src, D * es);
                            memcpy(view[3] + ((((size_t)blk * HK + h) * BS + t) * P + kv * D) * es, src, D * es);
                        }
            const int64_t shape[5] = {2, nb, BS, HK, D};
            const int64_t strides[4][4] = {{nb * BS * HK * D, BS * HK * D, HK * D, D},
                                           {nb * HK * BS * RS, HK * BS * RS, RS, BS * RS},
                                           {D, BS * HK * P, HK * P, P},
                                           {D, HK * BS * P, P, BS * P}};
            const int64_t qs[3] = {B, H, D}, s1[1] = {B + 1}, sb[1] = {B}, sbt[2] = {B, max_blocks}, sl2[2] = {H, B};
            attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qs),
                        tqsl = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, s1);
            attn_tensor tsl = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, sb),
                        tbt = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, sbt);
            attn_params p;
            attn_params_init(&p);
            p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            if (dts[di] == ATTN_DTYPE_FP8_E4M3)
                p.k_scale = 0.05f, p.v_scale = 0.02f;
            for (int threads = 1; threads <= 2; threads++) {
                attn_ctx_set_num_threads(ctx, threads);
                for (int v = 0; v < 4; v++) {
                    attn_tensor cache = attn_tensor_make(view[v], dts[di], 5, shape);
                    for (int d = 0; d < 4; d++)
                        cache.strides[d] = strides[v][d];
                    attn_tensor to = attn_tensor_make(out[v > 0], ATTN_DTYPE_F32, 3, qs),
                                tl = attn_tensor_make(lse[v > 0], ATTN_DTYPE_F32, 2, sl2);
                    const attn_status st = attn_paged_attention(ctx, &tq, &cache, &tqsl, &tsl, &tbt, &p, &to, &tl);
                    if (st != ATTN_STATUS_OK)
                        fprintf(stderr, "test_head_major_pages: %s\n", attn_last_error());
                    assert_int_equal(st, ATTN_STATUS_OK);
                    if (v > 0 && (memcmp(out[0], out[1], sizeof(float) * B * H * D) != 0 ||
                                  memcmp(lse[0], lse[1], sizeof lse[0]) != 0)) {
                        static const char *const names[4] = {"", "head-major", "vLLM token-major", "vLLM head-major"};
                        fprintf(stderr,
                                "REPRO test_head_major_pages: dtype %s, block_size %lld, row padding %lld, %d "
                                "thread(s): %s output differs\n",
                                attn_dtype_name(dts[di]), (long long)BS, (long long)pages[pi][1], threads, names[v]);
                        fails++;
                    }
                }
            }
            for (int v = 0; v < 4; v++)
                free(view[v]);
        }
    free(q), free(out[0]), free(out[1]), free(bt);
    attn_ctx_destroy(ctx);
    assert_int_equal(fails, 0);
}

static void test_wide(void **state) {
    (void)state;
    td_failures = 0;
    attn_ctx *ctx = td_ctx();
    uint64_t seed = 500;
    const int64_t shapes[4][4] = {{96, 96, 16, 1}, {128, 64, 8, 1}, {8, 8, 256, 5}, {16, 2, 256, 40}};
    for (int si = 0; si < 4; si++)
        for (int mode = TD_BSND; mode <= TD_PAGED; mode += 3) {
            td_case c = td_base(mode, shapes[si][0], shapes[si][1], shapes[si][2], si % 2 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32);
            c.num_seqs = 2;
            c.lq[0] = c.lq[1] = shapes[si][3];
            c.lk[0] = c.lk[1] = th_test_emulated() ? 130 : 530; /* emulated: the heads and widths, one partition */
            c.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            td_run_case(ctx, &c, seed++);
        }
    attn_ctx_destroy(ctx);
    assert_int_equal(td_failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_dense),
        cmocka_unit_test(test_prefill_options),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_paged),
        cmocka_unit_test(test_wide),
        cmocka_unit_test(test_token_span),
        cmocka_unit_test(test_head_major_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
