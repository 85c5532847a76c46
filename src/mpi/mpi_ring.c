/*
 * mpi_ring.c — ring attention (prefill context parallel, PCP) over MPI with zig-zag shards: the K/V shard
 * of every rank travels once around the ring (MPI_Isend to rank r+1, MPI_Irecv from r−1, double-buffered)
 * while the shard in hand is computed with attn_forward into float32 partial states, folded into the
 * accumulator with attn_merge_attn_states in step order. Not here: windows/ALiBi (positions are global,
 * attn_forward sees chunk-local ones), masks (Ulysses takes those), cached prefixes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_common.h"

struct attn_mpi_ring_plan {
    MPI_Comm comm;
    int rank, world;
    attn_mpi_ring_config cfg;
    int64_t seq_local;           /* this rank's rows: chunk_len[0] + chunk_len[1]                 */
    int64_t max_chunk;           /* longest chunk of any rank                                     */
    int64_t ring_bytes;          /* one ring buffer: the largest shard's K then V                 */
    char *ring[2];               /* [B, S_o, Hkv, Dk] K then [B, S_o, Hkv, Dv] V of the owner o     */
    float *qf;                   /* [B, seq_local, H, Dk] queries in float32                       */
    float *acc, *acc_lse;        /* [B, seq_local, H, Dv], [B, H, seq_local]                       */
    float *part, *part_lse;      /* [B, max_chunk, H, Dv], [B, H, max_chunk]                       */
};

attn_status attn_mpi_zigzag_chunks(int64_t seq_len, int32_t world, int32_t rank, int64_t chunk_start[2],
                                   int64_t chunk_len[2]) {
    AM_CHECK(seq_len >= 0 && seq_len <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
             "seq_len=%" PRId64 ", expected 0..%lld", seq_len, (long long)ATTN_MAX_SEQ_LEN);
    AM_CHECK(world >= 1 && world <= (1 << 20), ATTN_STATUS_INVALID_ARGUMENT, "world=%d, expected 1..2^20", world);
    AM_CHECK(rank >= 0 && rank < world, ATTN_STATUS_INVALID_ARGUMENT, "rank=%d, expected 0..%d", rank, world - 1);
    AM_CHECK(chunk_start && chunk_len, ATTN_STATUS_INVALID_ARGUMENT, "chunk_start / chunk_len: NULL");
    const int64_t n = 2 * (int64_t)world;
    const int64_t c[2] = {rank, n - 1 - rank};
    for (int i = 0; i < 2; i++) {
        chunk_start[i] = c[i] * seq_len / n;
        chunk_len[i] = (c[i] + 1) * seq_len / n - chunk_start[i];
    }
    return ATTN_STATUS_OK;
}

static void ring_chunks(const attn_mpi_ring_plan *p, int owner, int64_t start[2], int64_t len[2], int64_t gidx[2]) {
    attn_mpi_zigzag_chunks(p->cfg.seq_len, p->world, owner, start, len);
    gidx[0] = owner;
    gidx[1] = 2 * (int64_t)p->world - 1 - owner;
}

static int64_t ring_shard_bytes(const attn_mpi_ring_plan *p, int owner) {
    int64_t s[2], l[2], g[2];
    ring_chunks(p, owner, s, l, g);
    const attn_mpi_ring_config *c = &p->cfg;
    return c->batch * (l[0] + l[1]) * c->num_kv_heads * ((int64_t)c->head_size + c->head_size_v) *
           (int64_t)attn_dtype_size(c->kv_dtype);
}

/* Local checks of a ring config (no MPI). */
static attn_status ring_check_config(const attn_mpi_ring_config *config, attn_mpi_ring_plan **plan) {
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    AM_CHECK(config != NULL, ATTN_STATUS_INVALID_ARGUMENT, "config: NULL");
    const attn_mpi_ring_config c = *config;
    AM_CHECK(c.batch >= 1 && c.batch <= (1 << 24), ATTN_STATUS_INVALID_ARGUMENT,
             "config.batch=%" PRId64 ", expected 1..2^24", c.batch);
    AM_CHECK(c.seq_len >= 0 && c.seq_len <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
             "config.seq_len=%" PRId64 ", expected 0..%lld", c.seq_len, (long long)ATTN_MAX_SEQ_LEN);
    AM_CHECK(c.num_heads >= 1 && c.num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_heads=%d, expected 1..%d", c.num_heads, ATTN_MAX_HEADS);
    AM_CHECK(c.num_kv_heads >= 1 && c.num_heads % c.num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_kv_heads=%d does not divide num_heads=%d", c.num_kv_heads, c.num_heads);
    AM_CHECK(c.head_size >= 1 && c.head_size <= 256 && c.head_size_v >= 1 && c.head_size_v <= 256,
             ATTN_STATUS_INVALID_ARGUMENT, "config.head_size=%d / head_size_v=%d, expected 1..256", c.head_size,
             c.head_size_v);
    AM_CHECK(am_float_size(c.kv_dtype) != 0, ATTN_STATUS_INVALID_ARGUMENT,
             "config.kv_dtype %s, expected f32, f16 or bf16", attn_dtype_name(c.kv_dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_ring_plan_create(MPI_Comm comm, const attn_mpi_ring_config *config, attn_mpi_ring_plan **plan) {
    if (plan)
        *plan = NULL;
    AM_TRY(am_comm_usable(comm)); /* no communicator to agree over: this rank only */
    /* 1. every rank checks its config, then all agree on comm BEFORE the collective MPI_Comm_dup, so a config
     *    refused on one rank is refused on every rank instead of leaving the others in the dup */
    attn_status st = ring_check_config(config, plan);
    attn_mpi_ring_config c;
    memset(&c, 0, sizeof c);
    if (config)
        c = *config;
    const am_fact facts[7] = {
        am_int_fact("config.batch", c.batch),         am_int_fact("config.seq_len", c.seq_len),
        am_int_fact("config.num_heads", c.num_heads), am_int_fact("config.num_kv_heads", c.num_kv_heads),
        am_int_fact("config.head_size", c.head_size), am_int_fact("config.head_size_v", c.head_size_v),
        am_int_fact("config.kv_dtype", c.kv_dtype)};
    AM_TRY(am_agree(comm, st, facts, 7, "rejected the config"));
    /* 2. duplicate (every rank gets here) and allocate; a local failure is agreed on the duplicate */
    MPI_Comm dup;
    int rank, world;
    AM_TRY(am_comm_dup(comm, &dup, &rank, &world));
    attn_mpi_ring_plan *p = (attn_mpi_ring_plan *)calloc(1, sizeof *p);
    st = p ? ATTN_STATUS_OK : am_fail(ATTN_STATUS_OUT_OF_MEMORY, "attn_mpi_ring_plan_create: out of memory");
    if (p) {
        p->comm = MPI_COMM_NULL;
        p->rank = rank;
        p->world = world;
        p->cfg = c;
        int64_t s[2], l[2], g[2];
        ring_chunks(p, rank, s, l, g);
        p->seq_local = l[0] + l[1];
        p->max_chunk = (c.seq_len + 2 * (int64_t)world - 1) / (2 * (int64_t)world);
        /* sizes: everything below 2^40 bytes keeps every product in int64 */
        const double big = (double)c.batch * (double)(p->seq_local + 1) * c.num_heads * 257.0 * 4.0;
        if (big > (double)ATTN_MAX_WORKSPACE_BYTES)
            st = am_fail(ATTN_STATUS_OVERFLOW, "config: buffers of %.3g bytes exceed ATTN_MAX_WORKSPACE_BYTES", big);
        for (int o = 0; o < world && st == ATTN_STATUS_OK; o++) {
            const int64_t b = ring_shard_bytes(p, o);
            p->ring_bytes = b > p->ring_bytes ? b : p->ring_bytes;
        }
        if (st == ATTN_STATUS_OK && p->ring_bytes > INT32_MAX)
            st = am_fail(ATTN_STATUS_UNSUPPORTED,
                         "config: a K/V shard of %" PRId64 " bytes exceeds one MPI message (2^31-1)", p->ring_bytes);
        if (st == ATTN_STATUS_OK) {
            const int64_t B = c.batch, SL = p->seq_local, H = c.num_heads, MC = p->max_chunk;
            p->ring[0] = (char *)am_alloc(p->ring_bytes);
            p->ring[1] = (char *)am_alloc(p->ring_bytes);
            p->qf = (float *)am_alloc(B * SL * H * c.head_size * 4);
            p->acc = (float *)am_alloc(B * SL * H * c.head_size_v * 4);
            p->acc_lse = (float *)am_alloc(B * H * SL * 4);
            p->part = (float *)am_alloc(B * MC * H * c.head_size_v * 4);
            p->part_lse = (float *)am_alloc(B * H * MC * 4);
            if (!p->ring[0] || !p->ring[1] || !p->qf || !p->acc || !p->acc_lse || !p->part || !p->part_lse)
                st = am_fail(ATTN_STATUS_OUT_OF_MEMORY, "attn_mpi_ring_plan_create: out of memory");
        }
    }
    st = am_agree(dup, st, NULL, 0, "could not build its plan");
    if (st != ATTN_STATUS_OK) {
        attn_mpi_ring_plan_free(p);
        MPI_Comm_free(&dup);
        return st;
    }
    p->comm = dup;
    *plan = p;
    return ATTN_STATUS_OK;
}

void attn_mpi_ring_plan_free(attn_mpi_ring_plan *plan) {
    if (!plan)
        return;
    am_comm_release(&plan->comm);
    free(plan->ring[0]);
    free(plan->ring[1]);
    free(plan->qf);
    free(plan->acc);
    free(plan->acc_lse);
    free(plan->part);
    free(plan->part_lse);
    free(plan);
}

/* ---- validation -------------------------------------------------------------------------------------- */
static attn_status ring_check_params(const attn_params *params) {
    attn_params loaded;
    AM_TRY(am_params_load(params, &loaded));
    if (!params)
        return ATTN_STATUS_OK;
    params = &loaded;
    AM_CHECK(params->causal >= ATTN_CAUSAL_NONE && params->causal <= ATTN_CAUSAL_TOP_LEFT, ATTN_STATUS_INVALID_ARGUMENT,
             "params.causal=%d, expected 0..2", params->causal);
    AM_CHECK(params->window_left == -1 && params->window_right == -1, ATTN_STATUS_UNSUPPORTED,
             "params.window=(%d, %d): ring attention does not support windows", params->window_left,
             params->window_right);
    AM_CHECK(params->alibi_slopes == NULL, ATTN_STATUS_UNSUPPORTED,
             "params.alibi_slopes: ring attention does not support ALiBi");
    AM_CHECK(!params->mask && !params->key_padding_mask && !params->additive_mask, ATTN_STATUS_UNSUPPORTED,
             "params masks: not supported by ring attention (use attn_mpi_ulysses_forward)");
    return ATTN_STATUS_OK;
}

/* q/out 4-D [B, SL, H, D] views (a 3-D view gets a leading batch of 1); lse [B, H, SL]. */
static attn_status ring_check_io(const attn_mpi_ring_plan *p, attn_ctx *ctx, const attn_tensor *q,
                                 const attn_tensor *out, const attn_tensor *lse, int ndim) {
    const attn_mpi_ring_config *c = &p->cfg;
    AM_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: NULL");
    static const char *const qn4[4] = {"config.batch", "seq_local", "config.num_heads", "config.head_size"};
    static const char *const on4[4] = {"config.batch", "seq_local", "config.num_heads", "config.head_size_v"};
    const int64_t qe4[4] = {c->batch, p->seq_local, c->num_heads, c->head_size};
    const int64_t oe4[4] = {c->batch, p->seq_local, c->num_heads, c->head_size_v};
    const int off = 4 - ndim;
    AM_TRY(am_check_view(q, "q", ndim, -1, qe4 + off, qn4 + off));
    AM_TRY(am_check_view(out, "out", ndim, q->dtype, oe4 + off, on4 + off));
    if (lse) {
        static const char *const ln[3] = {"config.batch", "config.num_heads", "seq_local"};
        const int64_t le[3] = {c->batch, c->num_heads, p->seq_local};
        AM_TRY(am_check_view(lse, "lse", ndim - 1, ATTN_DTYPE_F32, le + off, ln + off));
    }
    return ATTN_STATUS_OK;
}

static attn_tensor as4(const attn_tensor *t) { /* [S, H, D] -> [1, S, H, D]; [H, S] -> [1, H, S] */
    attn_tensor r = *t;
    for (int d = t->ndim; d > 0; d--) {
        r.shape[d] = t->shape[d - 1];
        r.strides[d] = t->strides[d - 1];
    }
    r.shape[0] = 1;
    r.strides[0] = 0;
    r.ndim = t->ndim + 1;
    return r;
}

/* ---- the ring ---------------------------------------------------------------------------------------- */
/* Runs the P steps on ring[0] (already holding this rank's shard) and p->qf. Returns the local status of the
 * compute; communication errors are returned as INTERNAL at once (the ring cannot continue). */
static attn_status ring_run(attn_ctx *ctx, attn_mpi_ring_plan *p, const attn_params *params, attn_mpi_stats *st_out) {
    const attn_mpi_ring_config *c = &p->cfg;
    const int P = p->world, r = p->rank;
    const int64_t B = c->batch, SL = p->seq_local, H = c->num_heads, HK = c->num_kv_heads;
    const int64_t DK = c->head_size, DV = c->head_size_v;
    const size_t kes = attn_dtype_size(c->kv_dtype);
    const int causal = params && params->causal != ATTN_CAUSAL_NONE;
    int64_t qs[2], ql[2], qg[2];
    ring_chunks(p, r, qs, ql, qg);
    for (int64_t i = 0; i < B * SL * H * DV; i++)
        p->acc[i] = 0.0f;
    for (int64_t i = 0; i < B * H * SL; i++)
        p->acc_lse[i] = -INFINITY;
    attn_status local = ATTN_STATUS_OK;
    const int left = (r - 1 + P) % P, right = (r + 1) % P;
    for (int s = 0; s < P; s++) {
        const int owner = (r - s + P) % P;
        char *cur = p->ring[s & 1];
        MPI_Request req[2];
        int nreq = 0;
        const double t0 = MPI_Wtime();
        if (s < P - 1) {
            const int nxt = (r - s - 1 + 2 * P) % P;
            AM_MPI(MPI_Irecv(p->ring[(s + 1) & 1], (int)ring_shard_bytes(p, nxt), MPI_BYTE, left, s, p->comm, &req[nreq++]));
            AM_MPI(MPI_Isend(cur, (int)ring_shard_bytes(p, owner), MPI_BYTE, right, s, p->comm, &req[nreq++]));
            st_out->bytes_sent += ring_shard_bytes(p, owner);
            st_out->bytes_received += ring_shard_bytes(p, nxt);
            st_out->num_messages += 1;
        }
        int64_t ks[2], kl[2], kg[2];
        ring_chunks(p, owner, ks, kl, kg);
        const int64_t SO = kl[0] + kl[1];
        const char *vbase = cur + B * SO * HK * DK * (int64_t)kes;
        for (int qc = 0; qc < 2 && local == ATTN_STATUS_OK; qc++) {
            const int64_t qoff = qc ? ql[0] : 0, lq = ql[qc];
            for (int kc = 0; kc < 2 && local == ATTN_STATUS_OK; kc++) {
                const int64_t koff = kc ? kl[0] : 0, lk = kl[kc];
                if (lq == 0 || lk == 0 || (causal && kg[kc] > qg[qc]))
                    continue;
                attn_params lp;
                (void)am_params_load(params, &lp); /* cannot fail: ring_check_params read it first */
                lp.causal = kg[kc] == qg[qc] && causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
                if (!(s == 0 && kc == qc))
                    lp.sinks = NULL; /* the sink joins the denominator once: with the diagonal chunk */
                const int64_t qsh[4] = {B, lq, H, DK}, ksh[4] = {B, lk, HK, DK}, vsh[4] = {B, lk, HK, DV};
                attn_tensor qv = {p->qf + qoff * H * DK, ATTN_DTYPE_F32, 4, {0}, {SL * H * DK, H * DK, DK, 1}};
                attn_tensor kv = {(void *)(cur + koff * HK * DK * (int64_t)kes), c->kv_dtype, 4, {0}, {SO * HK * DK, HK * DK, DK, 1}};
                attn_tensor vv = {(void *)(vbase + koff * HK * DV * (int64_t)kes), c->kv_dtype, 4, {0}, {SO * HK * DV, HK * DV, DV, 1}};
                memcpy(qv.shape, qsh, sizeof qsh);
                memcpy(kv.shape, ksh, sizeof ksh);
                memcpy(vv.shape, vsh, sizeof vsh);
                attn_tensor pv = am_view(p->part, ATTN_DTYPE_F32, 4, B, lq, H, DV);
                attn_tensor pl = am_view(p->part_lse, ATTN_DTYPE_F32, 3, B, H, lq, 0);
                attn_status a = attn_forward(ctx, ATTN_LAYOUT_BSND, &qv, &kv, &vv, &lp, &pv, &pl);
                if (a != ATTN_STATUS_OK) {
                    local = am_fail_attn(a, "attn_forward on a ring step");
                    break;
                }
                for (int64_t b = 0; b < B && local == ATTN_STATUS_OK; b++) {
                    attn_tensor ao = {p->acc + (b * SL + qoff) * H * DV, ATTN_DTYPE_F32, 3, {lq, H, DV}, {H * DV, DV, 1}};
                    attn_tensor al = {p->acc_lse + b * H * SL + qoff, ATTN_DTYPE_F32, 2, {H, lq}, {SL, 1}};
                    attn_tensor bo = am_view(p->part + b * lq * H * DV, ATTN_DTYPE_F32, 3, lq, H, DV, 0);
                    attn_tensor bl = am_view(p->part_lse + b * H * lq, ATTN_DTYPE_F32, 2, H, lq, 0, 0);
                    a = attn_merge_attn_states(ctx, &ao, &al, &bo, &bl, &ao, &al);
                    if (a != ATTN_STATUS_OK)
                        local = am_fail_attn(a, "attn_merge_attn_states on a ring step");
                }
            }
        }
        const double t1 = MPI_Wtime();
        if (nreq)
            AM_MPI(MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE));
        const double t2 = MPI_Wtime();
        st_out->compute_seconds += t1 - t0;
        st_out->wait_seconds += t2 - t1;
    }
    return local;
}

static void ring_write_out(const attn_mpi_ring_plan *p, attn_tensor *out4, attn_tensor *lse3) {
    const int64_t B = p->cfg.batch, SL = p->seq_local, H = p->cfg.num_heads, DV = p->cfg.head_size_v;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < SL; t++)
            for (int64_t h = 0; h < H; h++)
                am_from_f32(p->acc + ((b * SL + t) * H + h) * DV, am_at(out4, b, t, h, 0), out4->dtype, DV);
    if (lse3)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < SL; t++)
                    *(float *)am_at(lse3, b, h, t, 0) = p->acc_lse[(b * H + h) * SL + t];
}

static void ring_load_q(attn_mpi_ring_plan *p, const attn_tensor *q4) {
    const int64_t B = p->cfg.batch, SL = p->seq_local, H = p->cfg.num_heads, DK = p->cfg.head_size;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < SL; t++)
            for (int64_t h = 0; h < H; h++)
                am_to_f32(am_at(q4, b, t, h, 0), q4->dtype, p->qf + ((b * SL + t) * H + h) * DK, DK);
}

/* Agrees on the local status and on every option that must match across ranks (q's dtype, the attn_params
 * facts) BEFORE any data moves, then runs the ring and agrees on the compute before anything is written. */
static attn_status ring_finish(attn_ctx *ctx, attn_mpi_ring_plan *p, const attn_params *params, attn_status st,
                               int64_t q_dtype, attn_tensor *out4, attn_tensor *lse3, attn_mpi_stats *stats_opt,
                               double t_start) {
    am_fact facts[1 + AM_PARAMS_FACTS];
    facts[0] = am_int_fact("q.dtype", q_dtype);
    const int n = 1 + am_params_facts(params, p->cfg.num_heads, 0, facts + 1);
    AM_TRY(am_agree(p->comm, st, facts, n, "rejected its arguments"));
    attn_mpi_stats s;
    am_stats_clear(&s);
    attn_status local = ring_run(ctx, p, params, &s);
    AM_TRY(am_agree(p->comm, local, NULL, 0, "failed in its local compute"));
    const double t0 = MPI_Wtime();
    ring_write_out(p, out4, lse3);
    s.compute_seconds += MPI_Wtime() - t0;
    s.total_seconds = MPI_Wtime() - t_start;
    if (stats_opt)
        *stats_opt = s;
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_ring_forward(attn_ctx *ctx, attn_mpi_ring_plan *plan, const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_params *params, attn_tensor *out,
                                  attn_tensor *lse_opt, attn_mpi_stats *stats_opt) {
    /* a NULL plan has no communicator to agree over: this rank returns alone (attn_mpi.h) */
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    attn_mpi_ring_plan *p = plan;
    const double t_start = MPI_Wtime();
    const attn_mpi_ring_config *c = &p->cfg;
    attn_status st = ring_check_io(p, ctx, q, out, lse_opt, 4);
    if (st == ATTN_STATUS_OK) {
        static const char *const kn[4] = {"config.batch", "seq_local", "config.num_kv_heads", "config.head_size"};
        static const char *const vn[4] = {"config.batch", "seq_local", "config.num_kv_heads", "config.head_size_v"};
        const int64_t ke[4] = {c->batch, p->seq_local, c->num_kv_heads, c->head_size};
        const int64_t ve[4] = {c->batch, p->seq_local, c->num_kv_heads, c->head_size_v};
        st = am_check_view(k, "k", 4, c->kv_dtype, ke, kn);
        if (st == ATTN_STATUS_OK)
            st = am_check_view(v, "v", 4, c->kv_dtype, ve, vn);
    }
    if (st == ATTN_STATUS_OK)
        st = ring_check_params(params);
    if (st == ATTN_STATUS_OK) { /* pack the local shard into ring[0] and the queries into qf (plan memory) */
        const int64_t B = c->batch, SL = p->seq_local, HK = c->num_kv_heads, DK = c->head_size, DV = c->head_size_v;
        const size_t es = attn_dtype_size(c->kv_dtype);
        char *kd = p->ring[0], *vd = p->ring[0] + B * SL * HK * DK * (int64_t)es;
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < SL; t++)
                for (int64_t h = 0; h < HK; h++) {
                    memcpy(kd + ((b * SL + t) * HK + h) * DK * (int64_t)es, am_at(k, b, t, h, 0), (size_t)DK * es);
                    memcpy(vd + ((b * SL + t) * HK + h) * DV * (int64_t)es, am_at(v, b, t, h, 0), (size_t)DV * es);
                }
        ring_load_q(p, q);
    }
    return ring_finish(ctx, p, params, st, st == ATTN_STATUS_OK ? (int64_t)q->dtype : -1, out, lse_opt, stats_opt,
                       t_start);
}

attn_status attn_mpi_ring_forward_paged(attn_ctx *ctx, attn_mpi_ring_plan *plan, const attn_tensor *q,
                                        const attn_tensor *kv_cache, const attn_tensor *block_table,
                                        const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                        attn_mpi_stats *stats_opt) {
    /* a NULL plan has no communicator to agree over: this rank returns alone (attn_mpi.h) */
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    attn_mpi_ring_plan *p = plan;
    const double t_start = MPI_Wtime();
    const attn_mpi_ring_config *c = &p->cfg;
    attn_status st = ATTN_STATUS_OK;
    if (c->batch != 1)
        st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "plan: config.batch=%" PRId64 ", the paged entry needs 1", c->batch);
    else if (c->head_size_v != c->head_size)
        st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "plan: head_size_v=%d != head_size=%d (one paged cache head size)",
                     c->head_size_v, c->head_size);
    if (st == ATTN_STATUS_OK)
        st = ring_check_io(p, ctx, q, out, lse_opt, 3);
    if (st == ATTN_STATUS_OK) {
        static const char *const cn[5] = {"2", "num_blocks", "block_size", "config.num_kv_heads", "config.head_size"};
        const int64_t ce[5] = {2, -1, -1, c->num_kv_heads, c->head_size};
        st = am_check_view(kv_cache, "kv_cache", 5, c->kv_dtype, ce, cn);
    }
    if (st == ATTN_STATUS_OK) {
        st = am_check_view(block_table, "block_table", 1, ATTN_DTYPE_I32, NULL, NULL);
        const int64_t bs = st == ATTN_STATUS_OK ? kv_cache->shape[2] : 0, nb = st == ATTN_STATUS_OK ? kv_cache->shape[1] : 0;
        if (st == ATTN_STATUS_OK && bs < 1)
            st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "kv_cache: block_size=%" PRId64 ", expected >= 1", bs);
        const int64_t need = bs ? (p->seq_local + bs - 1) / bs : 0;
        if (st == ATTN_STATUS_OK && block_table->shape[0] < need)
            st = am_fail(ATTN_STATUS_INVALID_ARGUMENT,
                         "block_table: shape[0]=%" PRId64 " < ceil(seq_local=%" PRId64 " / block_size=%" PRId64 ") = %" PRId64,
                         block_table->shape[0], p->seq_local, bs, need);
        for (int64_t i = 0; i < need && st == ATTN_STATUS_OK; i++) {
            const int32_t id = *(const int32_t *)am_at(block_table, i, 0, 0, 0);
            if (id < 0 || id >= nb)
                st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "block_table: entry %" PRId64 " = %d outside [0, num_blocks=%" PRId64 ")",
                             i, id, nb);
        }
    }
    if (st == ATTN_STATUS_OK)
        st = ring_check_params(params);
    attn_tensor q4 = {0}, out4 = {0}, lse3 = {0};
    if (st == ATTN_STATUS_OK) {
        q4 = as4(q);
        out4 = as4(out);
        if (lse_opt)
            lse3 = as4(lse_opt);
        const int64_t SL = p->seq_local, HK = c->num_kv_heads, DK = c->head_size, bs = kv_cache->shape[2];
        const size_t es = attn_dtype_size(c->kv_dtype);
        char *kd = p->ring[0], *vd = p->ring[0] + SL * HK * DK * (int64_t)es;
        const int64_t *cs = kv_cache->strides;
        for (int64_t t = 0; t < SL; t++) {
            const int64_t blk = *(const int32_t *)am_at(block_table, t / bs, 0, 0, 0), row = t % bs;
            for (int64_t h = 0; h < HK; h++) {
                const int64_t off = blk * cs[1] + row * cs[2] + h * cs[3];
                memcpy(kd + (t * HK + h) * DK * (int64_t)es, (const char *)kv_cache->data + off * (int64_t)es, (size_t)DK * es);
                memcpy(vd + (t * HK + h) * DK * (int64_t)es, (const char *)kv_cache->data + (cs[0] + off) * (int64_t)es,
                       (size_t)DK * es);
            }
        }
        ring_load_q(p, &q4);
    }
    return ring_finish(ctx, p, params, st, st == ATTN_STATUS_OK ? (int64_t)q->dtype : -1, &out4, lse_opt ? &lse3 : NULL,
                       stats_opt, t_start);
}
