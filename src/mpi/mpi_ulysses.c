/*
 * mpi_ulysses.c — Ulysses sequence parallelism over MPI (DeepSpeed-Ulysses): an MPI_Alltoall turns sequence
 * shards [B, S/P, H, D] into head shards [B, S, H/P, D], any attn forward runs on the rank's heads over the
 * whole sequence, and a second all-to-all (plus one for the LSE) turns the output back. USP runs the ring
 * (mpi_ring.c) between the two all-to-alls. Pack/unpack copies go through plan buffers; nothing allocates.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/mpi_common.h"

struct attn_mpi_ulysses_plan {
    MPI_Comm comm;
    int rank, world;
    attn_mpi_ulysses_config cfg;
    int64_t heads_local, kv_heads_local, seq; /* H/P, Hkv/P, P·seq_local                           */
    int64_t buf_bytes;                        /* send / recv buffers: the largest of q, k, v, out     */
    char *send, *recv;
    char *fq, *fk, *fv, *fo;                  /* [B, S, H/P, Dk] q, [B, S, Hkv/P, D(v)] k, v, out       */
    float *flse;                              /* [B, H/P, S]                                            */
};

/* Local checks of an Ulysses config over `world` ranks (no collective). */
static attn_status uly_check_config(const attn_mpi_ulysses_config *config, attn_mpi_ulysses_plan **plan, int world) {
    AM_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    AM_CHECK(config != NULL, ATTN_STATUS_INVALID_ARGUMENT, "config: NULL");
    const attn_mpi_ulysses_config c = *config;
    AM_CHECK(c.batch >= 1 && c.batch <= (1 << 24), ATTN_STATUS_INVALID_ARGUMENT,
             "config.batch=%" PRId64 ", expected 1..2^24", c.batch);
    AM_CHECK(c.seq_local >= 0 && c.seq_local <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
             "config.seq_local=%" PRId64 ", expected 0..%lld", c.seq_local, (long long)ATTN_MAX_SEQ_LEN);
    AM_CHECK(c.num_heads >= 1 && c.num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_heads=%d, expected 1..%d", c.num_heads, ATTN_MAX_HEADS);
    AM_CHECK(c.num_kv_heads >= 1 && c.num_heads % c.num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_kv_heads=%d does not divide num_heads=%d", c.num_kv_heads, c.num_heads);
    AM_CHECK(c.head_size >= 1 && c.head_size <= 256 && c.head_size_v >= 1 && c.head_size_v <= 256,
             ATTN_STATUS_INVALID_ARGUMENT, "config.head_size=%d / head_size_v=%d, expected 1..256", c.head_size,
             c.head_size_v);
    AM_CHECK(am_float_size(c.dtype) && am_float_size(c.kv_dtype), ATTN_STATUS_INVALID_ARGUMENT,
             "config.dtype %s / kv_dtype %s, expected f32, f16 or bf16", attn_dtype_name(c.dtype),
             attn_dtype_name(c.kv_dtype));
    AM_CHECK(c.num_heads % world == 0 && c.num_kv_heads % world == 0, ATTN_STATUS_INVALID_ARGUMENT,
             "config.num_heads=%d / num_kv_heads=%d: both must be divisible by the %d ranks", c.num_heads,
             c.num_kv_heads, world);
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_ulysses_plan_create(MPI_Comm comm, const attn_mpi_ulysses_config *config,
                                         attn_mpi_ulysses_plan **plan) {
    if (plan)
        *plan = NULL;
    AM_TRY(am_comm_usable(comm)); /* no communicator to agree over: this rank only */
    int world0 = 1;
    AM_MPI(MPI_Comm_size(comm, &world0));
    /* agree on the config on comm BEFORE the collective MPI_Comm_dup (see attn_mpi_ring_plan_create) */
    attn_status st = uly_check_config(config, plan, world0);
    attn_mpi_ulysses_config c;
    memset(&c, 0, sizeof c);
    if (config)
        c = *config;
    const am_fact facts[8] = {
        am_int_fact("config.batch", c.batch),         am_int_fact("config.seq_local", c.seq_local),
        am_int_fact("config.num_heads", c.num_heads), am_int_fact("config.num_kv_heads", c.num_kv_heads),
        am_int_fact("config.head_size", c.head_size), am_int_fact("config.head_size_v", c.head_size_v),
        am_int_fact("config.dtype", c.dtype),         am_int_fact("config.kv_dtype", c.kv_dtype)};
    AM_TRY(am_agree(comm, st, facts, 8, "rejected the config"));
    MPI_Comm dup;
    int rank, world;
    AM_TRY(am_comm_dup(comm, &dup, &rank, &world));
    attn_mpi_ulysses_plan *p = NULL;
    if (st == ATTN_STATUS_OK) {
        p = (attn_mpi_ulysses_plan *)calloc(1, sizeof *p);
        if (!p)
            st = am_fail(ATTN_STATUS_OUT_OF_MEMORY, "attn_mpi_ulysses_plan_create: out of memory");
    }
    if (st == ATTN_STATUS_OK) {
        p->comm = MPI_COMM_NULL;
        p->rank = rank;
        p->world = world;
        p->cfg = c;
        p->heads_local = c.num_heads / world;
        p->kv_heads_local = c.num_kv_heads / world;
        p->seq = c.seq_local * world;
        const double big = (double)c.batch * (double)(p->seq + 1) * c.num_heads * 256.0 * 4.0;
        if (big > (double)ATTN_MAX_WORKSPACE_BYTES)
            st = am_fail(ATTN_STATUS_OVERFLOW, "config: buffers of %.3g bytes exceed ATTN_MAX_WORKSPACE_BYTES", big);
    }
    if (st == ATTN_STATUS_OK) {
        const int64_t B = c.batch, SL = c.seq_local, S = p->seq, H = c.num_heads, HK = c.num_kv_heads;
        const int64_t qes = (int64_t)attn_dtype_size(c.dtype), kes = (int64_t)attn_dtype_size(c.kv_dtype);
        int64_t m = B * SL * H * c.head_size * qes;
        const int64_t cand[3] = {B * SL * HK * c.head_size * kes, B * SL * HK * c.head_size_v * kes,
                                 B * SL * H * c.head_size_v * qes};
        for (int i = 0; i < 3; i++)
            m = cand[i] > m ? cand[i] : m;
        p->buf_bytes = m;
        if (m / world > INT32_MAX)
            st = am_fail(ATTN_STATUS_UNSUPPORTED, "config: an all-to-all block of %" PRId64 " bytes exceeds one MPI count",
                         m / world);
        if (st == ATTN_STATUS_OK) {
            const int64_t HL = p->heads_local, HKL = p->kv_heads_local;
            p->send = (char *)am_alloc(m);
            p->recv = (char *)am_alloc(m);
            p->fq = (char *)am_alloc(B * S * HL * c.head_size * qes);
            p->fk = (char *)am_alloc(B * S * HKL * c.head_size * kes);
            p->fv = (char *)am_alloc(B * S * HKL * c.head_size_v * kes);
            p->fo = (char *)am_alloc(B * S * HL * c.head_size_v * qes);
            p->flse = (float *)am_alloc(B * HL * S * 4);
            if (!p->send || !p->recv || !p->fq || !p->fk || !p->fv || !p->fo || !p->flse)
                st = am_fail(ATTN_STATUS_OUT_OF_MEMORY, "attn_mpi_ulysses_plan_create: out of memory");
        }
    }
    st = am_agree(dup, st, NULL, 0, "could not build its plan");
    if (st != ATTN_STATUS_OK) {
        attn_mpi_ulysses_plan_free(p);
        MPI_Comm_free(&dup);
        return st;
    }
    p->comm = dup;
    *plan = p;
    return ATTN_STATUS_OK;
}

void attn_mpi_ulysses_plan_free(attn_mpi_ulysses_plan *plan) {
    if (!plan)
        return;
    am_comm_release(&plan->comm);
    free(plan->send);
    free(plan->recv);
    free(plan->fq);
    free(plan->fk);
    free(plan->fv);
    free(plan->fo);
    free(plan->flse);
    free(plan);
}

/* ---- all-to-alls ------------------------------------------------------------------------------------- */
/* x [B, SL, HX, DX] (view) -> full [B, S, HX/P, DX] contiguous: this rank's head shard of every rank's rows. */
static attn_status uly_scatter(attn_mpi_ulysses_plan *p, const attn_tensor *x, int64_t HX, int64_t DX, char *full,
                               attn_mpi_stats *s) {
    const int P = p->world;
    const int64_t B = p->cfg.batch, SL = p->cfg.seq_local, S = p->seq, HXL = HX / P;
    const int64_t es = (int64_t)attn_dtype_size(x->dtype), row = DX * es;
    const int64_t block = B * SL * HXL * row;
    double t0 = MPI_Wtime();
    for (int j = 0; j < P; j++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < SL; t++)
                for (int64_t h = 0; h < HXL; h++)
                    memcpy(p->send + j * block + ((b * SL + t) * HXL + h) * row, am_at(x, b, t, j * HXL + h, 0), (size_t)row);
    double t1 = MPI_Wtime();
    AM_MPI(MPI_Alltoall(p->send, (int)block, MPI_BYTE, p->recv, (int)block, MPI_BYTE, p->comm));
    double t2 = MPI_Wtime();
    for (int j = 0; j < P; j++)
        for (int64_t b = 0; b < B; b++)
            memcpy(full + ((b * S + j * SL) * HXL) * row, p->recv + j * block + b * SL * HXL * row, (size_t)(SL * HXL * row));
    s->compute_seconds += (t1 - t0) + (MPI_Wtime() - t2);
    s->wait_seconds += t2 - t1;
    s->bytes_sent += block * (P - 1);
    s->bytes_received += block * (P - 1);
    s->num_messages += 1;
    return ATTN_STATUS_OK;
}

/* full out [B, S, H/P, DV] and lse [B, H/P, S] -> out [B, SL, H, DV] (view), lse [B, H, SL] (view or NULL). */
static attn_status uly_gather(attn_mpi_ulysses_plan *p, int64_t H, int64_t DV, const char *full, const float *flse,
                              attn_tensor *out, attn_tensor *lse, attn_mpi_stats *s) {
    const int P = p->world;
    const int64_t B = p->cfg.batch, SL = p->cfg.seq_local, S = p->seq, HL = H / P;
    const int64_t es = (int64_t)attn_dtype_size(out->dtype), row = DV * es;
    const int64_t block = B * SL * HL * row;
    double t0 = MPI_Wtime();
    for (int j = 0; j < P; j++)
        for (int64_t b = 0; b < B; b++)
            memcpy(p->send + j * block + b * SL * HL * row, full + ((b * S + j * SL) * HL) * row, (size_t)(SL * HL * row));
    double t1 = MPI_Wtime();
    AM_MPI(MPI_Alltoall(p->send, (int)block, MPI_BYTE, p->recv, (int)block, MPI_BYTE, p->comm));
    double t2 = MPI_Wtime();
    for (int j = 0; j < P; j++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < SL; t++)
                for (int64_t h = 0; h < HL; h++)
                    memcpy(am_at(out, b, t, j * HL + h, 0), p->recv + j * block + ((b * SL + t) * HL + h) * row, (size_t)row);
    double t3 = MPI_Wtime(), t4 = t3;
    int64_t lbytes = 0;
    if (lse) {
        const int64_t lblock = B * HL * SL;
        float *ls = (float *)p->send, *lr = (float *)p->recv;
        for (int j = 0; j < P; j++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < HL; h++)
                    memcpy(ls + j * lblock + (b * HL + h) * SL, flse + (b * HL + h) * S + j * SL, (size_t)SL * 4);
        t3 = MPI_Wtime();
        AM_MPI(MPI_Alltoall(ls, (int)lblock, MPI_FLOAT, lr, (int)lblock, MPI_FLOAT, p->comm));
        t4 = MPI_Wtime();
        for (int j = 0; j < P; j++)
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < HL; h++)
                    for (int64_t t = 0; t < SL; t++)
                        *(float *)am_at(lse, b, j * HL + h, t, 0) = lr[j * lblock + (b * HL + h) * SL + t];
        lbytes = lblock * 4;
        s->num_messages += 1;
    }
    s->compute_seconds += (t1 - t0) + (MPI_Wtime() - t4) + (t3 - t2);
    s->wait_seconds += (t2 - t1) + (t4 - t3);
    s->bytes_sent += (block + lbytes) * (P - 1);
    s->bytes_received += (block + lbytes) * (P - 1);
    s->num_messages += 1;
    return ATTN_STATUS_OK;
}

/* ---- validation -------------------------------------------------------------------------------------- */
static attn_status uly_check_io(const attn_mpi_ulysses_plan *p, attn_ctx *ctx, const attn_tensor *q,
                                const attn_tensor *k, const attn_tensor *v, const attn_tensor *out,
                                const attn_tensor *lse, int ndim) {
    const attn_mpi_ulysses_config *c = &p->cfg;
    AM_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: NULL");
    const int off = 4 - ndim;
    static const char *const qn[4] = {"config.batch", "config.seq_local", "config.num_heads", "config.head_size"};
    static const char *const kn[4] = {"config.batch", "config.seq_local", "config.num_kv_heads", "config.head_size"};
    static const char *const vn[4] = {"config.batch", "config.seq_local", "config.num_kv_heads", "config.head_size_v"};
    static const char *const on[4] = {"config.batch", "config.seq_local", "config.num_heads", "config.head_size_v"};
    static const char *const ln[3] = {"config.batch", "config.num_heads", "config.seq_local"};
    const int64_t qe[4] = {c->batch, c->seq_local, c->num_heads, c->head_size};
    const int64_t ke[4] = {c->batch, c->seq_local, c->num_kv_heads, c->head_size};
    const int64_t ve[4] = {c->batch, c->seq_local, c->num_kv_heads, c->head_size_v};
    const int64_t oe[4] = {c->batch, c->seq_local, c->num_heads, c->head_size_v};
    const int64_t le[3] = {c->batch, c->num_heads, c->seq_local};
    AM_TRY(am_check_view(q, "q", ndim, c->dtype, qe + off, qn + off));
    AM_TRY(am_check_view(k, "k", ndim, c->kv_dtype, ke + off, kn + off));
    AM_TRY(am_check_view(v, "v", ndim, c->kv_dtype, ve + off, vn + off));
    AM_TRY(am_check_view(out, "out", ndim, c->dtype, oe + off, on + off));
    if (lse)
        AM_TRY(am_check_view(lse, "lse", ndim - 1, ATTN_DTYPE_F32, le + off, ln + off));
    return ATTN_STATUS_OK;
}

/* A mask view cut to this rank's heads (the head dimension is dim ndim−3 of a right-aligned [B, H, Sq, Sk]). */
static attn_status uly_slice_mask(const attn_mpi_ulysses_plan *p, const attn_tensor *m, const char *name,
                                  attn_tensor *slice) {
    *slice = *m;
    const int hd = m->ndim - 3;
    if (hd < 0 || m->shape[hd] == 1)
        return ATTN_STATUS_OK;
    AM_CHECK(m->shape[hd] == p->cfg.num_heads, ATTN_STATUS_INVALID_ARGUMENT,
             "%s: shape[%d]=%" PRId64 ", expected num_heads=%d (or 1 to broadcast)", name, hd, m->shape[hd],
             p->cfg.num_heads);
    AM_CHECK(m->strides[hd] >= 0 && m->data, ATTN_STATUS_INVALID_ARGUMENT, "%s: bad view", name);
    slice->shape[hd] = p->heads_local;
    slice->data = (char *)m->data + p->rank * p->heads_local * m->strides[hd] * (int64_t)attn_dtype_size(m->dtype);
    return ATTN_STATUS_OK;
}

/* A mask view broadcast to full[4] = [batch, num_heads, seq_q, seq_k] (ndim 1..4, right-aligned, each
 * dimension 1 or the full size), as attn_forward requires. Checked here, before any data moves, so that a
 * mask refused on one rank fails every rank without an exchange (attn_forward checks it again). */
static attn_status uly_check_bcast(const attn_tensor *m, const char *name, const int64_t full[4], int float_dtype) {
    static const char *const dn[4] = {"batch", "num_heads", "seq_q", "seq_k"};
    if (float_dtype)
        AM_CHECK(am_float_size(m->dtype) != 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: dtype %s, expected f32, f16 or bf16",
                 name, attn_dtype_name(m->dtype));
    else
        AM_CHECK(m->dtype == ATTN_DTYPE_BOOL || m->dtype == ATTN_DTYPE_U8, ATTN_STATUS_INVALID_ARGUMENT,
                 "%s: dtype %s, expected bool or u8", name, attn_dtype_name(m->dtype));
    AM_CHECK(m->ndim >= 1 && m->ndim <= 4, ATTN_STATUS_INVALID_ARGUMENT, "%s: ndim=%d, expected 1..4", name,
             (int)m->ndim);
    for (int d = 0; d < m->ndim; d++) {
        const int f = 4 - m->ndim + d;
        AM_CHECK(m->shape[d] == 1 || m->shape[d] == full[f], ATTN_STATUS_INVALID_ARGUMENT,
                 "%s: shape[%d]=%" PRId64 ", expected %s=%" PRId64 " (or 1 to broadcast)", name, d, m->shape[d], dn[f],
                 full[f]);
    }
    return ATTN_STATUS_OK;
}

/* The options the entry (mode 0 dense, 1 varlen, 2 USP) can take, checked before any data moves. */
static attn_status uly_check_params(const attn_mpi_ulysses_plan *p, const attn_params *params, int mode) {
    attn_params loaded;
    AM_TRY(am_params_load(params, &loaded));
    if (!params)
        return ATTN_STATUS_OK;
    params = &loaded;
    const int has_mask = params->mask || params->key_padding_mask || params->additive_mask;
    AM_CHECK(mode == 0 || !has_mask, ATTN_STATUS_UNSUPPORTED, "params masks: not supported by the %s entry",
             mode == 1 ? "varlen" : "USP");
    if (mode == 2) {
        AM_CHECK(params->window_left == -1 && params->window_right == -1, ATTN_STATUS_UNSUPPORTED,
                 "params.window=(%d, %d): USP (ring attention) does not support windows", params->window_left,
                 params->window_right);
        AM_CHECK(params->alibi_slopes == NULL, ATTN_STATUS_UNSUPPORTED,
                 "params.alibi_slopes: USP (ring attention) does not support ALiBi");
    }
    const int64_t B = p->cfg.batch, S = p->seq;
    const int64_t full[4] = {B, p->cfg.num_heads, S, S};
    if (params->mask)
        AM_TRY(uly_check_bcast(params->mask, "params.mask", full, 0));
    if (params->additive_mask)
        AM_TRY(uly_check_bcast(params->additive_mask, "params.additive_mask", full, 1));
    if (params->key_padding_mask) {
        const attn_tensor *k = params->key_padding_mask;
        AM_CHECK(k->dtype == ATTN_DTYPE_BOOL || k->dtype == ATTN_DTYPE_U8, ATTN_STATUS_INVALID_ARGUMENT,
                 "params.key_padding_mask: dtype %s, expected bool or u8", attn_dtype_name(k->dtype));
        AM_CHECK(k->ndim == 2 && k->shape[0] == B && k->shape[1] == S, ATTN_STATUS_INVALID_ARGUMENT,
                 "params.key_padding_mask: expected [batch=%" PRId64 ", seq=%" PRId64 "]", B, S);
    }
    return ATTN_STATUS_OK;
}

/* cu_seqlens over the GLOBAL rows: int32 [num_docs + 1], from 0, non-decreasing, last <= P·seq_local. Returns
 * the hash of its entries in *h (they must be the same on every rank). */
static attn_status uly_check_cu(const attn_mpi_ulysses_plan *p, const attn_tensor *cu, const char *name, uint64_t *h) {
    AM_TRY(am_check_view(cu, name, 1, ATTN_DTYPE_I32, NULL, NULL));
    AM_CHECK(cu->shape[0] >= 1, ATTN_STATUS_INVALID_ARGUMENT, "%s: shape[0]=0, expected num_docs + 1 >= 1", name);
    *h = AM_HASH_SEED;
    int32_t prev = 0;
    for (int64_t i = 0; i < cu->shape[0]; i++) {
        const int32_t x = *(const int32_t *)am_at(cu, i, 0, 0, 0);
        AM_CHECK(i > 0 || x == 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: entry 0 = %d, expected 0", name, x);
        AM_CHECK(x >= prev, ATTN_STATUS_INVALID_ARGUMENT, "%s: entry %" PRId64 " = %d < entry %" PRId64 " = %d", name,
                 i, x, i - 1, prev);
        AM_CHECK(x <= p->seq, ATTN_STATUS_INVALID_ARGUMENT,
                 "%s: entry %" PRId64 " = %d > the global rows P·seq_local = %" PRId64, name, i, x, p->seq);
        *h = am_hash(*h, &x, sizeof x);
        prev = x;
    }
    return ATTN_STATUS_OK;
}

typedef struct uly_params {
    attn_params prm;
    attn_tensor mask, additive;
} uly_params;

static attn_status uly_local_params(const attn_mpi_ulysses_plan *p, const attn_params *params, uly_params *u) {
    AM_TRY(am_params_load(params, &u->prm)); /* the struct_size rule (uly_check_params read it first) */
    const int64_t h0 = p->rank * p->heads_local;
    if (u->prm.alibi_slopes)
        u->prm.alibi_slopes += h0;
    if (u->prm.sinks)
        u->prm.sinks += h0;
    if (u->prm.mask) {
        AM_TRY(uly_slice_mask(p, u->prm.mask, "params.mask", &u->mask));
        u->prm.mask = &u->mask;
    }
    if (u->prm.additive_mask) {
        AM_TRY(uly_slice_mask(p, u->prm.additive_mask, "params.additive_mask", &u->additive));
        u->prm.additive_mask = &u->additive;
    }
    return ATTN_STATUS_OK;
}

static attn_tensor uly_as4(const attn_tensor *t) {
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

/* mode 0 dense, 1 varlen, 2 USP (ring between the all-to-alls) */
static attn_status uly_forward(attn_ctx *ctx, attn_mpi_ulysses_plan *p, attn_mpi_ring_plan *ring, int mode,
                               const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *cu_q, const attn_tensor *cu_k, const attn_params *params,
                               attn_tensor *out, attn_tensor *lse_opt, attn_mpi_stats *stats_opt) {
    /* a NULL plan has no communicator to agree over: this rank returns alone (attn_mpi.h) */
    AM_CHECK(p != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: NULL");
    const double t_start = MPI_Wtime();
    const attn_mpi_ulysses_config *c = &p->cfg;
    const int ndim = mode == 1 ? 3 : 4;
    attn_status st = ATTN_STATUS_OK;
    if (mode == 1 && c->batch != 1)
        st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "plan: config.batch=%" PRId64 ", the varlen entry needs 1", c->batch);
    if (st == ATTN_STATUS_OK)
        st = uly_check_io(p, ctx, q, k, v, out, lse_opt, ndim);
    if (st == ATTN_STATUS_OK)
        st = uly_check_params(p, params, mode);
    uly_params up;
    if (st == ATTN_STATUS_OK)
        st = uly_local_params(p, params, &up);
    uint64_t hq = 0, hk = 0;
    if (st == ATTN_STATUS_OK && mode == 1)
        st = uly_check_cu(p, cu_q, "cu_seqlens_q", &hq);
    if (st == ATTN_STATUS_OK && mode == 1)
        st = uly_check_cu(p, cu_k, "cu_seqlens_k", &hk);
    if (st == ATTN_STATUS_OK && mode == 2) {
        if (!ring)
            st = am_fail(ATTN_STATUS_INVALID_ARGUMENT, "ring: NULL");
    }
    /* agree BEFORE any data moves: the local status and every option that must match across ranks (a window
     * or soft-cap on one rank only would otherwise silently apply to that rank's heads alone) */
    am_fact facts[3 + AM_PARAMS_FACTS];
    facts[0] = am_int_fact("the entry called (dense, varlen or USP)", mode);
    facts[1] = am_hash_fact("cu_seqlens_q (entries)", hq);
    facts[2] = am_hash_fact("cu_seqlens_k (entries)", hk);
    const int nf = 3 + am_params_facts(params, c->num_heads, 0, facts + 3);
    AM_TRY(am_agree(p->comm, st, facts, nf, "rejected its arguments"));
    attn_mpi_stats s;
    am_stats_clear(&s);
    attn_tensor q4 = ndim == 3 ? uly_as4(q) : *q, k4 = ndim == 3 ? uly_as4(k) : *k, v4 = ndim == 3 ? uly_as4(v) : *v;
    const int64_t B = c->batch, S = p->seq, HL = p->heads_local, HKL = p->kv_heads_local;
    AM_TRY(uly_scatter(p, &q4, c->num_heads, c->head_size, p->fq, &s));
    AM_TRY(uly_scatter(p, &k4, c->num_kv_heads, c->head_size, p->fk, &s));
    AM_TRY(uly_scatter(p, &v4, c->num_kv_heads, c->head_size_v, p->fv, &s));
    attn_tensor fq = am_view(p->fq, c->dtype, 4, B, S, HL, c->head_size);
    attn_tensor fk = am_view(p->fk, c->kv_dtype, 4, B, S, HKL, c->head_size);
    attn_tensor fv = am_view(p->fv, c->kv_dtype, 4, B, S, HKL, c->head_size_v);
    attn_tensor fo = am_view(p->fo, c->dtype, 4, B, S, HL, c->head_size_v);
    attn_tensor fl = am_view(p->flse, ATTN_DTYPE_F32, 3, B, HL, S, 0);
    attn_status local;
    const double t0 = MPI_Wtime();
    if (mode == 0) {
        local = attn_forward(ctx, ATTN_LAYOUT_BSND, &fq, &fk, &fv, &up.prm, &fo, &fl);
        if (local != ATTN_STATUS_OK)
            local = am_fail_attn(local, "attn_forward on this rank's heads");
    } else if (mode == 1) {
        attn_tensor q3 = am_view(p->fq, c->dtype, 3, S, HL, c->head_size, 0);
        attn_tensor k3 = am_view(p->fk, c->kv_dtype, 3, S, HKL, c->head_size, 0);
        attn_tensor v3 = am_view(p->fv, c->kv_dtype, 3, S, HKL, c->head_size_v, 0);
        attn_tensor o3 = am_view(p->fo, c->dtype, 3, S, HL, c->head_size_v, 0);
        attn_tensor l2 = am_view(p->flse, ATTN_DTYPE_F32, 2, HL, S, 0, 0);
        local = attn_forward_varlen(ctx, &q3, &k3, &v3, cu_q, cu_k, &up.prm, &o3, &l2);
        if (local != ATTN_STATUS_OK)
            local = am_fail_attn(local, "attn_forward_varlen on this rank's heads");
    } else {
        /* USP: the ring entry validates and agrees on its own communicator */
        attn_mpi_stats rs;
        local = attn_mpi_ring_forward(ctx, ring, &fq, &fk, &fv, &up.prm, &fo, &fl, &rs);
        if (local == ATTN_STATUS_OK) {
            s.bytes_sent += rs.bytes_sent;
            s.bytes_received += rs.bytes_received;
            s.num_messages += rs.num_messages;
            s.wait_seconds += rs.wait_seconds;
            s.compute_seconds -= rs.wait_seconds; /* added back below with the whole stage */
        }
    }
    s.compute_seconds += MPI_Wtime() - t0;
    AM_TRY(am_agree(p->comm, local, NULL, 0, "failed in its local compute"));
    attn_tensor out4 = ndim == 3 ? uly_as4(out) : *out, lse3 = lse_opt && ndim == 3 ? uly_as4(lse_opt) : lse_opt ? *lse_opt : out4;
    AM_TRY(uly_gather(p, c->num_heads, c->head_size_v, p->fo, p->flse, &out4, lse_opt ? &lse3 : NULL, &s));
    s.total_seconds = MPI_Wtime() - t_start;
    if (stats_opt)
        *stats_opt = s;
    return ATTN_STATUS_OK;
}

attn_status attn_mpi_ulysses_forward(attn_ctx *ctx, attn_mpi_ulysses_plan *plan, const attn_tensor *q,
                                     const attn_tensor *k, const attn_tensor *v, const attn_params *params,
                                     attn_tensor *out, attn_tensor *lse_opt, attn_mpi_stats *stats_opt) {
    return uly_forward(ctx, plan, NULL, 0, q, k, v, NULL, NULL, params, out, lse_opt, stats_opt);
}

attn_status attn_mpi_ulysses_forward_varlen(attn_ctx *ctx, attn_mpi_ulysses_plan *plan, const attn_tensor *q,
                                            const attn_tensor *k, const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                            const attn_tensor *cu_seqlens_k, const attn_params *params,
                                            attn_tensor *out, attn_tensor *lse_opt, attn_mpi_stats *stats_opt) {
    return uly_forward(ctx, plan, NULL, 1, q, k, v, cu_seqlens_q, cu_seqlens_k, params, out, lse_opt, stats_opt);
}

attn_status attn_mpi_usp_forward(attn_ctx *ctx, attn_mpi_ulysses_plan *ulysses, attn_mpi_ring_plan *ring,
                                 const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                 const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                 attn_mpi_stats *stats_opt) {
    return uly_forward(ctx, ulysses, ring, 2, q, k, v, NULL, NULL, params, out, lse_opt, stats_opt);
}
