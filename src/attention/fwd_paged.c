/*
 * fwd_paged.c — the split-KV (flash-decoding) executor of a serving plan's work list (docs/KERNELS.md §6, §7):
 * phase 1 runs the split items (one ATTN_KV_PARTITION partition of a long decode block each, its partial
 * state stored in the caller's workspace) and the direct items (a run of blocks over their whole key range);
 * phase 2 folds each split block's partial states in ascending order and finalizes it. It only schedules:
 * blocks, partitions and the fold order are the driver's (fwd.c, fwd_exec.c), so every block makes the kernel
 * calls it would make alone and the bits equal attn_fwd_run's. The work list itself is built once per step
 * by src/plan/partition.c; validation and the description of the call stay in src/api/api_paged.c.
 */
#include <math.h>
#include <string.h>

#include "attention/fwd.h"
#include "parallel/parallel.h"

typedef struct attn_fp_job {
    const attn_problem *const *prob; /* [2] DECODER rows (params causal), ENCODER_ONLY / CROSS (non-causal) */
    const attn_fwd_work *work;
    const attn_exec *ex;
    attn_fwd_shape sh;
    float *ws;              /* caller workspace: split blocks' partial states                  */
    int64_t decode_run_max; /* blocks per decode-shaped item (<= attn_fwd_multi_capacity), 0: cap */
    int64_t super_size;     /* blocks per prefill super-block of a direct (not split) request      */
} attn_fp_job;

/* Partial state of partition `part` of split block `b` (layout: attn_fwd_split_state_floats). */
static float *attn_fp_state(const attn_fp_job *job, const attn_fwd_work_block *b, int64_t part, int64_t head_size_v) {
    return job->ws + b->ws_offset + part * attn_fwd_split_state_floats(b->num_rows, head_size_v);
}

static const attn_problem *attn_fp_block_problem(const attn_fp_job *job, const attn_fwd_work_block *b) {
    return job->prob[job->work->kinds[b->req] == ATTN_REQUEST_DECODER ? 0 : 1];
}

/* Sets up block `b` in thread `tid`'s scratch and packs its queries. */
static const attn_problem *attn_fp_block_begin(const attn_fp_job *job, const attn_fwd_work_block *b, int32_t tid,
                                               attn_fwd_scratch *sc, attn_fwd_block *blk, int pack) {
    const attn_problem *p = attn_fp_block_problem(job, b);
    attn_seq_view seq;
    p->get_seq(p, b->req, &seq);
    attn_fwd_scratch_carve(job->ex->scratch + (size_t)tid * attn_fwd_scratch_bytes(), sc);
    attn_fwd_block_init(p, &job->sh, &seq, b->kv_head, b->head_chunk, b->token_block, blk);
    if (pack)
        attn_fwd_pack_q(p, job->ex->kern, blk, sc);
    return p;
}

/* Multi-block items (fwd_exec.c): the blocks of a request sit in the work list in (kv head, head chunk,
 * token block descending) order, so an item is a run of consecutive block ids: all blocks of a decode-shaped
 * request (every kv head: its pages are read front to back once), or a GQA super-block of one kv head of a
 * prefill: job->super_size blocks (chosen for the thread count by attn_fwd_super_size, as the dense schedule
 * does: every K/V tile an item reads is fetched once for all of its blocks) where the request's blocks run
 * whole, ATTN_FWD_SUPER_MIN where the plan split them (its split items name those runs). The first block of
 * the run leads; the others' items do nothing. Which blocks share an item never changes a bit (each keeps its
 * own states and kernel calls). Returns the number of blocks the item of block `b` runs (0: not a leader). */
static int64_t attn_fp_run_len(const attn_fp_job *job, const attn_problem *p, const attn_fwd_work_block *b) {
    const int32_t *qsl = job->work->query_start_loc;
    const int64_t q_len = qsl[b->req + 1] - qsl[b->req];
    const int64_t tbs = (q_len + job->sh.tokens_per_block - 1) / job->sh.tokens_per_block;
    const int64_t per_head = job->sh.head_chunks * tbs, per_req = p->num_kv_heads * per_head;
    const int64_t pos = b->kv_head * per_head + b->head_chunk * tbs + (tbs - 1 - b->token_block);
    if (q_len <= ATTN_FWD_DECODE_Q) { /* decode-shaped: runs of up to `cap` blocks over all kv heads */
        int64_t cap = attn_fwd_multi_capacity(p);
        if (job->decode_run_max > 0 && job->decode_run_max < cap)
            cap = job->decode_run_max;
        if (pos % cap != 0)
            return 0;
        return per_req - pos < cap ? per_req - pos : cap;
    }
    const int64_t in_head = pos % per_head, ss = b->ws_offset < 0 ? job->super_size : ATTN_FWD_SUPER_MIN;
    if (in_head % ss != 0)
        return 0;
    return per_head - in_head < ss ? per_head - in_head : ss;
}

/* The prefill items of the call for super-block size `ss` (attn_fwd_super_size's count): per (request, kv
 * head) of a prefill-shaped request whose blocks run whole, ceil(blocks per kv head / ss). */
static int64_t attn_fp_prefill_items(const void *arg, int64_t ss) {
    const attn_fp_job *job = (const attn_fp_job *)arg;
    const attn_fwd_work *w = job->work;
    const int32_t *qsl = w->query_start_loc;
    int64_t items = 0;
    for (int64_t i = 0; i < w->num_direct; i++) {
        const attn_fwd_work_block *b = &w->blocks[w->direct[i]];
        const int64_t q_len = qsl[b->req + 1] - qsl[b->req];
        const int64_t tbs = (q_len + job->sh.tokens_per_block - 1) / job->sh.tokens_per_block;
        if (q_len > ATTN_FWD_DECODE_Q && b->head_chunk == 0 && b->token_block == tbs - 1) /* a head's first */
            items += (job->sh.head_chunks * tbs + ss - 1) / ss;
    }
    return items;
}

/* Fills the item's blocks from work blocks [block, block + n) and packs their queries. */
static void attn_fp_multi_begin(const attn_fp_job *job, const attn_problem *p, int64_t block, int64_t n, int32_t tid,
                                attn_fwd_scratch *sc) {
    attn_seq_view seq;
    p->get_seq(p, job->work->blocks[block].req, &seq);
    attn_fwd_scratch_carve(job->ex->scratch + (size_t)tid * attn_fwd_scratch_bytes(), sc);
    for (int64_t k = 0; k < n; k++) {
        const attn_fwd_work_block *b = &job->work->blocks[block + k];
        attn_fwd_block_init(p, &job->sh, &seq, b->kv_head, b->head_chunk, b->token_block,
                            attn_fwd_multi_block(p, sc, k));
    }
    attn_fwd_multi_begin(p, job->ex->kern, sc, n);
}

/* A direct item: the run of blocks led by work block `block` over their whole key range, partitions folded
 * in ascending order in the thread's scratch, then finalized (non-leaders do nothing). */
static void attn_fp_direct(const attn_fp_job *job, int64_t block, int32_t tid) {
    const struct attn_kernels *kern = job->ex->kern;
    attn_fwd_scratch sc;
    const attn_problem *p = attn_fp_block_problem(job, &job->work->blocks[block]);
    const int64_t n = attn_fp_run_len(job, p, &job->work->blocks[block]);
    if (n == 0)
        return;
    attn_fp_multi_begin(job, p, block, n, tid, &sc);
    int64_t first, last;
    attn_fwd_multi_partitions(p, &sc, n, &first, &last);
    for (int64_t part = first; part < last; part++)
        attn_fwd_multi_partition(p, kern, &sc, n, part, 1);
    attn_fwd_multi_finalize(p, kern, &sc, n);
}

/* Phase 1: direct blocks (whole key range, sequential fold) and split items (one partition each). */
static void attn_fp_phase1(void *arg, int64_t item, int32_t tid) {
    const attn_fp_job *job = (const attn_fp_job *)arg;
    const attn_fwd_work *w = job->work;
    const struct attn_kernels *kern = job->ex->kern;
    attn_fwd_scratch sc;
    if (item < w->num_split_items) { /* split items first: they are short and gate phase 2 */
        const attn_fwd_split_item *it = &w->splits[item];
        const attn_problem *p = attn_fp_block_problem(job, &w->blocks[it->block]);
        const int64_t n = attn_fp_run_len(job, p, &w->blocks[it->block]);
        if (n == 0)
            return;
        attn_fp_multi_begin(job, p, it->block, n, tid, &sc);
        attn_fwd_multi_partition(p, kern, &sc, n, it->part, 0);
        for (int64_t k = 0; k < n; k++) {
            const attn_fwd_work_block *b = &w->blocks[it->block + k];
            int64_t first, last;
            attn_fwd_partitions(attn_fwd_multi_block(p, &sc, k), &first, &last);
            if (it->part < first || it->part >= last)
                continue; /* masked out: phase 2 skips it too */
            float *m, *l, *o;
            attn_fwd_multi_part_state(p, &sc, k, &m, &l, &o);
            const int64_t rows = b->num_rows, dv = p->head_size_v;
            float *st = attn_fp_state(job, b, it->part, dv);
            for (int64_t r = 0; r < rows; r++)
                st[r] = m[r], st[rows + r] = l[r];
            for (int64_t d = 0; d < dv; d++)
                memcpy(st + 2 * rows + d * rows, o + d * ATTN_QB, (size_t)rows * sizeof(float));
        }
        return;
    }
    attn_fp_direct(job, w->direct[item - w->num_split_items], tid);
}

/* Phase 2: fold a split block's partition states in ascending order (as attn_fwd_run does), finalize. */
static void attn_fp_phase2(void *arg, int64_t item, int32_t tid) {
    const attn_fp_job *job = (const attn_fp_job *)arg;
    const attn_fwd_work_block *b = &job->work->blocks[job->work->split_blocks[item]];
    attn_fwd_scratch sc;
    attn_fwd_block blk;
    const attn_problem *p = attn_fp_block_begin(job, b, tid, &sc, &blk, 0);
    const int64_t rows = b->num_rows, dv = p->head_size_v;
    int64_t first, last;
    attn_fwd_partitions(&blk, &first, &last);
    attn_fwd_state_reset(dv, sc.m_acc, sc.l_acc, sc.o_acc);
    attn_fwd_state_reset(dv, sc.m_part, sc.l_part, sc.o_part);
    for (int64_t part = first; part < last; part++) {
        const float *st = attn_fp_state(job, b, part, dv);
        for (int64_t r = 0; r < rows; r++)
            sc.m_part[r] = st[r], sc.l_part[r] = st[rows + r];
        for (int64_t d = 0; d < dv; d++)
            memcpy(sc.o_part + d * ATTN_QB, st + 2 * rows + d * rows, (size_t)rows * sizeof(float));
        attn_fwd_fold(blk.num_rows, dv, sc.m_acc, sc.l_acc, sc.o_acc, sc.m_part, sc.l_part, sc.o_part);
    }
    attn_fwd_finalize(p, job->ex->kern, &blk, &sc, sc.m_acc, sc.l_acc, sc.o_acc);
}

/* The flop of the work list's blocks (2·rows·keys·(head_size + head_size_v)), or +inf when it has more than
 * ATTN_FWD_SMALL_MAX_BLOCKS blocks (not counted). */
static double attn_fp_flops(const attn_problem *const prob[2], const attn_fwd_work *work) {
    if (work->num_direct + work->num_split_blocks > ATTN_FWD_SMALL_MAX_BLOCKS)
        return INFINITY;
    double flops = 0.0;
    for (int64_t i = 0; i < work->num_direct + work->num_split_blocks; i++) {
        const attn_fwd_work_block *b =
            &work->blocks[i < work->num_direct ? work->direct[i] : work->split_blocks[i - work->num_direct]];
        const attn_problem *p = prob[work->kinds[b->req] == ATTN_REQUEST_DECODER ? 0 : 1];
        attn_seq_view seq;
        p->get_seq(p, b->req, &seq);
        flops += attn_fwd_flops(p, b->num_rows, seq.seq_k);
    }
    return flops;
}

static void attn_fp_run(const attn_problem *const prob[2], const attn_fwd_work *work, float *ws, const attn_exec *ex) {
    attn_fp_job job;
    memset(&job, 0, sizeof job);
    job.prob = prob;
    job.work = work;
    job.ex = ex;
    job.ws = ws;
    attn_fwd_shape_of(prob[0], &job.sh);
    /* fewer decode requests than threads: split each request's blocks over several items by attn_fwd_run's
     * rule (attn_fwd_units_per_item: at least one item per thread), so a short-context decode uses every
     * thread; which blocks share an item never changes a bit */
    if (work->num_decodes > 0 && work->num_decodes < ex->num_threads) {
        const int64_t per_req = prob[0]->num_kv_heads * job.sh.head_chunks;
        /* unless split-KV already gives every thread enough items of whole runs (one per partition of a split
         * decode request, one per unsplit one): a whole run reads each token's rows of every kv head as one
         * span of the cache page, split runs read every other part of it */
        const int64_t split_reqs = work->num_split_blocks / per_req;
        const int64_t whole =
            work->num_split_items / per_req + (work->num_decodes > split_reqs ? work->num_decodes - split_reqs : 0);
        if (whole < (int64_t)ATTN_FWD_ITEMS_PER_THREAD * ex->num_threads)
            job.decode_run_max = attn_fwd_units_per_item(per_req, work->num_decodes, per_req, ex->num_threads);
    }
    /* prefill super-blocks as large as the threads allow (dense rule); a step without a prefill-shaped request
     * (every decode step) skips the count: the size is then never used */
    job.super_size = ATTN_FWD_SUPER_MIN;
    if (work->max_query_len > ATTN_FWD_DECODE_Q && attn_fp_prefill_items(&job, ATTN_FWD_SUPER_MIN) > 0)
        job.super_size = attn_fwd_super_size(attn_fwd_multi_capacity(prob[0]), ex->num_threads, attn_fp_prefill_items,
                                             &job);
    if (ex->num_threads == 1) {
        /* one thread gains nothing from split-KV: every block runs as a direct item (the sequential fold, the
         * same bits as the split path), without the partial states' round trip through the workspace */
        for (int64_t i = 0; i < work->num_direct; i++)
            attn_fp_direct(&job, work->direct[i], 0);
        for (int64_t i = 0; i < work->num_split_blocks; i++)
            attn_fp_direct(&job, work->split_blocks[i], 0);
        return;
    }
    attn_parallel_for(ex->num_threads, work->num_split_items + work->num_direct, attn_fp_phase1, &job);
    attn_parallel_for(ex->num_threads, work->num_split_blocks, attn_fp_phase2, &job);
}

void attn_fwd_run_work(const attn_problem *const prob[2], const attn_fwd_work *work, float *ws, const attn_exec *ex) {
    attn_exec one = *ex; /* a small call: alone or on every thread (attn_fwd_small_rule) */
    int way = -1;
    double flops = 0.0, t0 = 0.0;
    if (attn_fwd_may_run_alone(ex) && (flops = attn_fp_flops(prob, work)) < ex->parallel_min_flops)
        one.num_threads = attn_fwd_small_threads(ex, &way, &t0);
    attn_fp_run(prob, work, ws, &one);
    if (way >= 0)
        attn_fwd_small_done(ex, way, flops, t0);
}
