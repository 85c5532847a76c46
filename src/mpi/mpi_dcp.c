/*
 * mpi_dcp.c — decode context parallel (DCP) over MPI: interleaved KV shards in each rank's paged cache,
 * a float32 partial state (out, LSE) per rank from attn_paged_attention, one MPI_Allgather of the states
 * and a left fold in rank order with attn_merge_attn_states. Not here: head-sharded outputs (every rank
 * gets the whole result), windows/ALiBi (they would need global key positions inside the kernel).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_common.h"

struct attn_mpi_dcp_plan {
    MPI_Comm comm;
    int rank, world;
    attn_mpi_dcp_config cfg;
    int64_t state_floats; /* max_tokens · num_heads · (head_size + 1)                           */
    float *states;        /* [world][per-call state]: out f32 [T, H, D] then lse f32 [H, T]       */
    float *acc;           /* [max_tokens · H · (D + 1)] the fold's accumulator                     */
    float *qf;            /* [max_tokens, H, D] the queries in float32                             */
    int32_t *row_qsl;     /* [max_tokens + 1] one pseudo-request per query row                     */
    int32_t *row_seq;     /* [max_tokens] local keys visible to that row                           */
    int32_t *row_bt;      /* [max_tokens, max_blocks_per_req] the row's request's local block table */
};

/* ---- sharding ---------------------------------------------------------------------------------------- */
int64_t attn_mpi_dcp_local_len(int64_t seq_len, int32_t world, int32_t interleave, int32_t rank) {
    if (seq_len < 0 || world < 1 || interleave < 1 || rank < 0 || rank >= world)
        return 0;
    const int64_t span = (int64_t)interleave * world; /* one round of the interleave over all ranks */
    const int64_t rounds = seq_len / span, rem = seq_len - rounds * span;
    int64_t tail = rem - (int64_t)rank * interleave;
    tail = tail < 0 ? 0 : tail > interleave ? interleave : tail;
    return rounds * interleave + tail;
}

attn_status attn_mpi_dcp_slot_mapping(int32_t rank, int32_t world, int32_t interleave, int32_t block_size,
                                      int64_t first_pos, int64_t num_tokens, const int32_t *block_ids,
                                      int64_t num_block_ids, int64_t *slots) {
    AM_CHECK(world >= 1, ATTN_STATUS_INVALID_ARGUMENT, "world=%d, expected >= 1", world);
    AM_CHECK(rank >= 0 && rank < world, ATTN_STATUS_INVALID_ARGUMENT, "rank=%d, expected 0..%d", rank, world - 1);
    AM_CHECK(interleave >= 1, ATTN_STATUS_INVALID_ARGUMENT, "interleave=%d, expected >= 1", interleave);
    AM_CHECK(block_size >= 1, ATTN_STATUS_INVALID_ARGUMENT, "block_size=%d, expected >= 1", block_size);
    AM_CHECK(first_pos >= 0 && num_tokens >= 0 && first_pos <= ATTN_MAX_SEQ_LEN - num_tokens,
             ATTN_STATUS_INVALID_ARGUMENT, "first_pos=%" PRId64 ", num_tokens=%" PRId64 ": expected >= 0 and a sum <= %lld",
             first_pos, num_tokens, (long long)ATTN_MAX_SEQ_LEN);
    AM_CHECK(num_block_ids >= 0, ATTN_STATUS_INVALID_ARGUMENT, "num_block_ids=%" PRId64 " < 0", num_block_ids);
    AM_CHECK(block_ids != NULL || num_block_ids == 0, ATTN_STATUS_INVALID_ARGUMENT, "block_ids: NULL");
    AM_CHECK(slots != NULL || num_tokens == 0, ATTN_STATUS_INVALID_ARGUMENT, "slots: NULL");
    const int64_t span = (int64_t)interleave * world;
    for (int pass = 0; pass < 2; pass++) { /* pass 0 checks everything, pass 1 writes */
        for (int64_t t = 0; t < num_tokens; t++) {
            const int64_t p = first_pos + t;
            if ((p / interleave) % world != rank) {
                if (pass)
                    slots[t] = -1;
                continue;
            }
            const int64_t local = (p / span) * interleave + p % interleave;
            const int64_t blk = local / block_size;
            if (!pass) {
                AM_CHECK(blk < num_block_ids, ATTN_STATUS_INVALID_ARGUMENT,
                         "block_ids: local token %" PRId64 " needs block %" PRId64 " >= num_block_ids=%" PRId64,
                         local, blk, num_block_ids);
                AM_CHECK(block_ids[blk] >= 0, ATTN_STATUS_INVALID_ARGUMENT,
                         "block_ids: entry %" PRId64 " = %d < 0", blk, block_ids[blk]);
            } else {
                slots[t] = (int64_t)block_ids[blk] * block_size + local % block_size;
            }
        }
    }
    return ATTN_STATUS_OK;
}

/* ---- plan -------------------------------------------------------------------------------------------- */
/* Local checks of a DCP config (no MPI). */
static attn_status dcp_check_config(const attn_mpi_dcp_config *config, attn_mpi_dcp_plan **plan) {
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    AM_CHECK(config != NULL, ATTN_STATUS_INVALID_ARGUMENT, "config: NULL");
    const attn_mpi_dcp_config c = *config;
    AM_CHECK(c.interleave_size >= 1, ATTN_STATUS_INVALID_ARGUMENT, "config.interleave_size=%d, expected >= 1",
             c.interleave_size);
    AM_CHECK(c.num_heads >= 1 && c.num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_heads=%d, expected 1..%d", c.num_heads, ATTN_MAX_HEADS);
    AM_CHECK(c.head_size >= 1 && c.head_size <= 256, ATTN_STATUS_INVALID_ARGUMENT,
             "config.head_size=%d, expected 1..256", c.head_size);
    AM_CHECK(c.max_tokens >= 1, ATTN_STATUS_INVALID_ARGUMENT, "config.max_tokens=%d, expected >= 1", c.max_tokens);
    AM_CHECK(c.max_blocks_per_req >= 1 && c.max_blocks_per_req <= ATTN_MAX_BLOCKS_PER_REQ,
             ATTN_STATUS_INVALID_ARGUMENT, "config.max_blocks_per_req=%d, expected 1..%d", c.max_blocks_per_req,
             ATTN_MAX_BLOCKS_PER_REQ);
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_dcp_plan_create(MPI_Comm comm, const attn_mpi_dcp_config *config, attn_mpi_dcp_plan **plan) {
    if (plan)
        *plan = NULL;
    AM_TRY(am_comm_usable(comm)); /* no communicator to agree over: this rank only */
    /* agree on the config on comm BEFORE the collective MPI_Comm_dup (see attn_mpi_ring_plan_create) */
    attn_status st = dcp_check_config(config, plan);
    attn_mpi_dcp_config c;
    memset(&c, 0, sizeof c);
    if (config)
        c = *config;
    const am_fact facts[5] = {
        am_int_fact("config.interleave_size", c.interleave_size), am_int_fact("config.num_heads", c.num_heads),
        am_int_fact("config.head_size", c.head_size), am_int_fact("config.max_tokens", c.max_tokens),
        am_int_fact("config.max_blocks_per_req", c.max_blocks_per_req)};
    AM_TRY(am_agree(comm, st, facts, 5, "rejected the config"));
    MPI_Comm dup;
    int rank, world;
    AM_TRY(am_comm_dup(comm, &dup, &rank, &world));
    attn_mpi_dcp_plan *p = NULL;
    int64_t state = 0, all = 0, bt = 0, qn = 0;
    if (!(am_mul((int64_t)c.max_tokens * c.num_heads, (int64_t)c.head_size + 1, &state) &&
          am_mul(state, world, &all) && am_mul(all, 4, &all) && am_mul(c.max_tokens, c.max_blocks_per_req, &bt) &&
          am_mul((int64_t)c.max_tokens * c.num_heads, (int64_t)c.head_size * 4, &qn)))
        st = am_fail(ATTN_STATUS_OVERFLOW, "config: buffer sizes overflow int64");
    if (st == ATTN_STATUS_OK) {
        p = (attn_mpi_dcp_plan *)calloc(1, sizeof *p);
        if (p) {
            p->states = (float *)am_alloc(all);
            p->acc = (float *)am_alloc(state * 4);
            p->qf = (float *)am_alloc(qn);
            p->row_qsl = (int32_t *)am_alloc(((int64_t)c.max_tokens + 1) * 4);
            p->row_seq = (int32_t *)am_alloc((int64_t)c.max_tokens * 4);
            p->row_bt = (int32_t *)am_alloc(bt * 4);
        }
        if (!p || !p->states || !p->acc || !p->qf || !p->row_qsl || !p->row_seq || !p->row_bt)
            st = am_fail(ATTN_STATUS_OUT_OF_MEMORY, "attn_mpi_dcp_plan_create: out of memory");
    }
    st = am_agree(dup, st, NULL, 0, "could not build its plan");
    if (st != ATTN_STATUS_OK) {
        if (p) {
            p->comm = MPI_COMM_NULL;
            attn_mpi_dcp_plan_free(p);
        }
        MPI_Comm_free(&dup);
        return st;
    }
    p->comm = dup;
    p->rank = rank;
    p->world = world;
    p->cfg = c;
    p->state_floats = state;
    *plan = p;
    return ATTN_STATUS_OK;
}

void attn_mpi_dcp_plan_free(attn_mpi_dcp_plan *plan) {
    if (!plan)
        return;
    am_comm_release(&plan->comm);
    free(plan->states);
    free(plan->acc);
    free(plan->qf);
    free(plan->row_qsl);
    free(plan->row_seq);
    free(plan->row_bt);
    free(plan);
}

/* ---- forward ----------------------------------------------------------------------------------------- */
static int32_t am_i32(const attn_tensor *t, int64_t i) {
    return *(const int32_t *)am_at(t, i, 0, 0, 0);
}

/* Local checks of one call; fills *num_rows. Nothing is written. */
static attn_status dcp_validate(attn_ctx *ctx, const attn_mpi_dcp_plan *p, const attn_tensor *q,
                                const attn_tensor *kv_cache, const attn_tensor *qsl, const attn_tensor *seq_lens,
                                const attn_tensor *bt, const attn_params *params, const attn_tensor *out,
                                const attn_tensor *lse) {
    const attn_mpi_dcp_config *c = &p->cfg;
    AM_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: NULL");
    attn_params loaded;
    AM_TRY(am_params_load(params, &loaded)); /* struct_size rule, before any field is read */
    static const char *const qn[3] = {"num_tokens", "config.num_heads", "config.head_size"};
    const int64_t qe[3] = {-1, c->num_heads, c->head_size};
    AM_TRY(am_check_view(q, "q", 3, -1, qe, qn));
    const int64_t T = q->shape[0];
    AM_CHECK(T <= c->max_tokens, ATTN_STATUS_INVALID_ARGUMENT, "q: shape[0]=%" PRId64 " > config.max_tokens=%d", T,
             c->max_tokens);
    AM_CHECK(kv_cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "kv_cache: NULL");
    AM_CHECK(kv_cache->ndim == 5 && kv_cache->shape[4] == c->head_size, ATTN_STATUS_INVALID_ARGUMENT,
             "kv_cache: expected [2, num_blocks, block_size, num_kv_heads, head_size=%d]", c->head_size);
    AM_TRY(am_check_view(qsl, "query_start_loc", 1, ATTN_DTYPE_I32, NULL, NULL));
    const int64_t R = qsl->shape[0] - 1;
    AM_CHECK(R >= 0, ATTN_STATUS_INVALID_ARGUMENT, "query_start_loc: shape[0]=0, expected num_reqs + 1 >= 1");
    const int64_t se[1] = {R};
    static const char *const sn[1] = {"num_reqs"};
    AM_TRY(am_check_view(seq_lens, "seq_lens", 1, ATTN_DTYPE_I32, se, sn));
    const int64_t be[2] = {R, -1};
    AM_TRY(am_check_view(bt, "block_table", 2, ATTN_DTYPE_I32, be, sn));
    AM_CHECK(bt->shape[1] <= c->max_blocks_per_req, ATTN_STATUS_INVALID_ARGUMENT,
             "block_table: shape[1]=%" PRId64 " > config.max_blocks_per_req=%d", bt->shape[1], c->max_blocks_per_req);
    AM_CHECK(am_i32(qsl, 0) == 0, ATTN_STATUS_INVALID_ARGUMENT, "query_start_loc: entry 0 = %d, expected 0",
             am_i32(qsl, 0));
    for (int64_t r = 0; r < R; r++) {
        const int32_t a = am_i32(qsl, r), b = am_i32(qsl, r + 1), L = am_i32(seq_lens, r);
        AM_CHECK(b >= a && b - a <= 16, ATTN_STATUS_INVALID_ARGUMENT,
                 "query_start_loc: entries %" PRId64 "..%" PRId64 " = %d..%d: a decode q_len must be 0..16", r, r + 1,
                 a, b);
        AM_CHECK(L >= b - a, ATTN_STATUS_INVALID_ARGUMENT,
                 "seq_lens: entry %" PRId64 " = %d < q_len=%d (seq_lens counts cached + new keys)", r, L, b - a);
    }
    AM_CHECK(am_i32(qsl, R) == T, ATTN_STATUS_INVALID_ARGUMENT,
             "query_start_loc: last entry %d, expected num_tokens=%" PRId64, am_i32(qsl, R), T);
    if (params) {
        AM_CHECK(params->causal == ATTN_CAUSAL_NONE || params->causal == ATTN_CAUSAL_BOTTOM_RIGHT,
                 ATTN_STATUS_UNSUPPORTED, "params.causal=%d: DCP supports NONE and BOTTOM_RIGHT", params->causal);
        AM_CHECK(params->window_left == -1 && params->window_right == -1, ATTN_STATUS_UNSUPPORTED,
                 "params.window=(%d, %d): DCP does not support windows", params->window_left, params->window_right);
        AM_CHECK(params->alibi_slopes == NULL, ATTN_STATUS_UNSUPPORTED, "params.alibi_slopes: DCP does not support ALiBi");
        AM_CHECK(!params->mask && !params->key_padding_mask && !params->additive_mask, ATTN_STATUS_UNSUPPORTED,
                 "params masks: not supported by DCP");
    }
    static const char *const on[3] = {"num_tokens", "config.num_heads", "config.head_size"};
    const int64_t oe[3] = {T, c->num_heads, c->head_size};
    AM_TRY(am_check_view(out, "out", 3, q->dtype, oe, on));
    if (lse) {
        static const char *const ln[2] = {"config.num_heads", "num_tokens"};
        const int64_t le[2] = {c->num_heads, T};
        AM_TRY(am_check_view(lse, "lse", 2, ATTN_DTYPE_F32, le, ln));
    }
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_dcp_forward(attn_ctx *ctx, attn_mpi_dcp_plan *plan, const attn_tensor *q,
                                 const attn_tensor *kv_cache, const attn_tensor *query_start_loc,
                                 const attn_tensor *seq_lens, const attn_tensor *block_table,
                                 const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                 attn_mpi_stats *stats_opt) {
    /* a NULL plan has no communicator to agree over: this rank returns alone (attn_mpi.h) */
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    attn_mpi_dcp_plan *p = plan;
    const double t0 = MPI_Wtime();
    attn_status st = dcp_validate(ctx, p, q, kv_cache, query_start_loc, seq_lens, block_table, params, out, lse_opt);
    const int64_t H = p->cfg.num_heads, D = p->cfg.head_size;
    const int64_t T = st == ATTN_STATUS_OK ? q->shape[0] : 0;
    const int64_t R = st == ATTN_STATUS_OK ? query_start_loc->shape[0] - 1 : 0;
    const int64_t n = T * H * (D + 1); /* floats of one rank's state this call */
    float *mine = p->states + (int64_t)p->rank * n;
    int64_t seq_sum = 0;
    if (st == ATTN_STATUS_OK) {
        /* one pseudo-request per query row: the row's visible local prefix (causal: global keys <= its position) */
        const int causal = params && params->causal == ATTN_CAUSAL_BOTTOM_RIGHT;
        const int64_t MB = block_table->shape[1];
        p->row_qsl[0] = 0;
        for (int64_t r = 0; r < R; r++) {
            const int32_t a = am_i32(query_start_loc, r), b = am_i32(query_start_loc, r + 1);
            const int64_t L = am_i32(seq_lens, r);
            seq_sum += L;
            for (int32_t t = a; t < b; t++) {
                const int64_t visible = causal ? L - (b - a) + (t - a) + 1 : L;
                p->row_seq[t] = (int32_t)attn_mpi_dcp_local_len(visible, p->world, p->cfg.interleave_size, p->rank);
                p->row_qsl[t + 1] = t + 1;
                for (int64_t j = 0; j < MB; j++)
                    p->row_bt[t * MB + j] = *(const int32_t *)am_at(block_table, r, j, 0, 0);
            }
        }
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                am_to_f32(am_at(q, t, h, 0, 0), q->dtype, p->qf + (t * H + h) * D, D);
        attn_params lp;
        (void)am_params_load(params, &lp); /* cannot fail: dcp_validate read it first */
        if (p->rank != 0)
            lp.sinks = NULL; /* the sink joins the denominator once: rank 0's state carries it */
        attn_tensor qf = am_view(p->qf, ATTN_DTYPE_F32, 3, T, H, D, 0);
        attn_tensor rq = am_view(p->row_qsl, ATTN_DTYPE_I32, 1, T + 1, 0, 0, 0);
        attn_tensor rs = am_view(p->row_seq, ATTN_DTYPE_I32, 1, T, 0, 0, 0);
        attn_tensor rb = am_view(p->row_bt, ATTN_DTYPE_I32, 2, T, MB, 0, 0);
        attn_tensor po = am_view(mine, ATTN_DTYPE_F32, 3, T, H, D, 0);
        attn_tensor pl = am_view(mine + T * H * D, ATTN_DTYPE_F32, 2, H, T, 0, 0);
        const attn_status a = attn_paged_attention(ctx, &qf, kv_cache, &rq, &rs, &rb, &lp, &po, &pl);
        if (a != ATTN_STATUS_OK)
            st = am_fail_attn(a, "attn_paged_attention on this rank's shard");
    }
    const double t1 = MPI_Wtime();
    /* agree before the all-gather: the local status, the replicated request layout, q's dtype, the cache
     * geometry every rank's partial state depends on, and the attn_params options */
    uint64_t hl = AM_HASH_SEED;
    for (int64_t r = 0; r <= R && st == ATTN_STATUS_OK; r++) {
        const int32_t x[2] = {am_i32(query_start_loc, r), r < R ? am_i32(seq_lens, r) : -1};
        hl = am_hash(hl, x, sizeof x);
    }
    const int ok = st == ATTN_STATUS_OK;
    am_fact facts[7 + AM_PARAMS_FACTS];
    facts[0] = am_int_fact("num_tokens (q.shape[0])", T);
    facts[1] = am_int_fact("num_reqs", R);
    facts[2] = am_int_fact("sum of seq_lens", seq_sum);
    facts[3] = am_hash_fact("query_start_loc / seq_lens (entries)", hl);
    facts[4] = am_int_fact("q.dtype", ok ? (int64_t)q->dtype : -1);
    facts[5] = am_int_fact("kv_cache.dtype", ok ? (int64_t)kv_cache->dtype : -1);
    facts[6] = am_int_fact("kv_cache num_kv_heads (shape[3])", ok ? kv_cache->shape[3] : -1);
    const int nf = 7 + am_params_facts(params, p->cfg.num_heads, 1, facts + 7);
    AM_TRY(am_agree(p->comm, st, facts, nf, "rejected its arguments or failed in its local compute"));
    if (n > 0 && p->world > 1) {
        AM_CHECK(n <= INT32_MAX, ATTN_STATUS_OVERFLOW, "state of %" PRId64 " floats exceeds an MPI count", n);
        AM_MPI(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p->states, (int)n, MPI_FLOAT, p->comm));
    }
    const double t2 = MPI_Wtime();
    /* fixed fold: acc = state_0, then acc = merge(acc, state_r) for r = 1..P-1 */
    memcpy(p->acc, p->states, (size_t)n * 4);
    attn_tensor ao = am_view(p->acc, ATTN_DTYPE_F32, 3, T, H, D, 0);
    attn_tensor al = am_view(p->acc + T * H * D, ATTN_DTYPE_F32, 2, H, T, 0, 0);
    for (int r = 1; r < p->world && T > 0; r++) {
        float *s = p->states + (int64_t)r * n;
        attn_tensor bo = am_view(s, ATTN_DTYPE_F32, 3, T, H, D, 0);
        attn_tensor bl = am_view(s + T * H * D, ATTN_DTYPE_F32, 2, H, T, 0, 0);
        const attn_status m = attn_merge_attn_states(ctx, &ao, &al, &bo, &bl, &ao, &al);
        if (m != ATTN_STATUS_OK)
            return am_fail_attn(m, "attn_merge_attn_states"); /* cannot happen after validation */
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            am_from_f32(p->acc + (t * H + h) * D, am_at(out, t, h, 0, 0), out->dtype, D);
    if (lse_opt)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                *(float *)am_at(lse_opt, h, t, 0, 0) = p->acc[T * H * D + h * T + t];
    const double t3 = MPI_Wtime();
    if (stats_opt) {
        am_stats_clear(stats_opt);
        stats_opt->bytes_sent = stats_opt->bytes_received = n * 4 * (p->world - 1);
        stats_opt->num_messages = p->world > 1 ? 1 : 0;
        stats_opt->compute_seconds = (t1 - t0) + (t3 - t2);
        stats_opt->wait_seconds = t2 - t1;
        stats_opt->total_seconds = t3 - t0;
    }
    return ATTN_STATUS_OK;
}
