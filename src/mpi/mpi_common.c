/*
 * mpi_common.c — errors, cross-rank agreement, tensor checks and dtype conversion of libattn_mpi
 * (see mpi_common.h). Conversions are written from the IEEE binary16 / bfloat16 bit layouts.
 */
#include "mpi/mpi_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------------------ */
/* am_fail and attn_mpi_last_error over this library's own thread-local buffer: the channel libattn uses too
 * (core/error_channel.h, header-only), so libattn_mpi's message never overwrites attn_last_error() */
ATTN_ERROR_CHANNEL(am_msg, am_fail, attn_mpi_last_error)

attn_status am_params_load(const attn_params *in, attn_params *out) {
    const attn_status st = attn_params_copy(out, in);
    return st == ATTN_STATUS_OK ? st : am_fail(st, "%s", attn_last_error());
}

attn_status am_fail_attn(attn_status status, const char *what) {
    return am_fail(status, "%s: %s (%s)", what, attn_last_error(), attn_status_string(status));
}

attn_status am_mpi(int rc, const char *what) {
    if (rc == MPI_SUCCESS)
        return ATTN_STATUS_OK;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "error %d", rc);
    return am_fail(ATTN_STATUS_INTERNAL, "%s failed: %s", what, s);
}

am_fact am_float_fact(const char *name, float v) {
    uint32_t u = 0;
    if (v != 0.0f) /* +0 and −0 mean the same (off / default) */
        memcpy(&u, &v, 4);
    const am_fact f = {name, (int64_t)u, AM_FLOAT};
    return f;
}

uint64_t am_hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static float am_bits_float(int64_t v) {
    const uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

attn_status am_agree(MPI_Comm comm, attn_status local, const am_fact *facts, int n, const char *verb) {
    enum { HEAD = 2 };
    int64_t in[HEAD + 2 * AM_MAX_FACTS], out[HEAD + 2 * AM_MAX_FACTS];
    if (n > AM_MAX_FACTS)
        n = AM_MAX_FACTS;
    int rank = 0;
    AM_MPI(MPI_Comm_rank(comm, &rank));
    const int failed = local != ATTN_STATUS_OK;
    /* MAX of (INT32_MAX − rank)·64 + status picks the lowest failing rank and carries its status */
    in[0] = failed ? ((int64_t)INT32_MAX - rank) * 64 + (int64_t)local : -1;
    in[1] = failed ? rank : -1;
    for (int i = 0; i < n; i++) {
        in[HEAD + 2 * i] = facts[i].value;
        in[HEAD + 2 * i + 1] = -facts[i].value;
    }
    /* keep the local message: MPI failure messages overwrite it only when the collective itself fails */
    char keep[sizeof am_msg];
    memcpy(keep, am_msg, sizeof keep);
    AM_MPI(MPI_Allreduce(in, out, HEAD + 2 * n, MPI_INT64_T, MPI_MAX, comm));
    memcpy(am_msg, keep, sizeof keep);
    if (out[0] >= 0) {
        if (failed)
            return local;
        const int64_t lo = (int64_t)INT32_MAX - out[0] / 64, hi = out[1];
        const attn_status st = (attn_status)(out[0] % 64);
        if (lo == hi)
            return am_fail(st, "rank %" PRId64 " %s: %s (that rank's attn_mpi_last_error() names the cause)", lo, verb,
                           attn_status_string(st));
        return am_fail(st,
                       "ranks %" PRId64 "..%" PRId64 " (lowest and highest failing) %s: %s (rank %" PRId64
                       "'s attn_mpi_last_error() names the cause)",
                       lo, hi, verb, attn_status_string(st), lo);
    }
    for (int i = 0; i < n; i++) {
        const int64_t mx = out[HEAD + 2 * i], mn = -out[HEAD + 2 * i + 1];
        if (mx == mn)
            continue;
        if (facts[i].kind == AM_FLOAT)
            return am_fail(ATTN_STATUS_INVALID_ARGUMENT,
                           "%s differs between ranks (this rank %.9g): every rank must pass the same value",
                           facts[i].name, (double)am_bits_float(facts[i].value));
        if (facts[i].kind == AM_HASH)
            return am_fail(ATTN_STATUS_INVALID_ARGUMENT,
                           "%s differs between ranks (contents hash differently): every rank must pass the same",
                           facts[i].name);
        return am_fail(ATTN_STATUS_INVALID_ARGUMENT,
                       "%s differs between ranks (%" PRId64 " .. %" PRId64 "; this rank %" PRId64
                       "): every rank must pass the same value",
                       facts[i].name, mn, mx, facts[i].value);
    }
    return ATTN_STATUS_OK;
}

static uint64_t am_floats_hash(const float *x, int32_t n) {
    if (!x)
        return 0;
    return am_hash(AM_HASH_SEED, x, (size_t)(n > 0 ? n : 0) * sizeof(float)) | 2u; /* never 0 (= NULL) */
}

static uint64_t am_view_shape_hash(const attn_tensor *t) {
    if (!t)
        return 0;
    const int32_t nd = t->ndim < 0 ? 0 : t->ndim > ATTN_MAX_DIMS ? ATTN_MAX_DIMS : t->ndim;
    uint64_t h = am_hash(AM_HASH_SEED, &t->ndim, sizeof t->ndim);
    h = am_hash(h, &t->dtype, sizeof t->dtype);
    return am_hash(h, t->shape, (size_t)nd * sizeof t->shape[0]) | 2u;
}

int am_params_facts(const attn_params *params, int32_t num_heads, int kv_scales, am_fact *facts) {
    attn_params d; /* the struct_size rule; an invalid struct reads as the defaults here and fails in the check */
    if (attn_params_copy(&d, params) != ATTN_STATUS_OK)
        attn_params_init(&d);
    const attn_params *p = &d;
    int n = 0;
    facts[n++] = am_int_fact("params.causal", p->causal);
    facts[n++] = am_int_fact("params.window_left", p->window_left);
    facts[n++] = am_int_fact("params.window_right", p->window_right);
    facts[n++] = am_float_fact("params.softmax_scale", p->softmax_scale);
    facts[n++] = am_float_fact("params.softcap", p->softcap);
    facts[n++] = am_hash_fact("params.alibi_slopes (NULL or not, values)", am_floats_hash(p->alibi_slopes, num_heads));
    facts[n++] = am_hash_fact("params.sinks (NULL or not, values)", am_floats_hash(p->sinks, num_heads));
    facts[n++] = am_hash_fact("params.mask (NULL or not, dtype, shape)", am_view_shape_hash(p->mask));
    facts[n++] =
        am_hash_fact("params.key_padding_mask (NULL or not, dtype, shape)", am_view_shape_hash(p->key_padding_mask));
    facts[n++] = am_hash_fact("params.additive_mask (NULL or not, dtype, shape)", am_view_shape_hash(p->additive_mask));
    if (kv_scales) {
        facts[n++] = am_float_fact("params.k_scale", p->k_scale);
        facts[n++] = am_float_fact("params.v_scale", p->v_scale);
    }
    return n;
}

void am_comm_release(MPI_Comm *comm) {
    if (*comm == MPI_COMM_NULL)
        return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Comm_free(comm);
    *comm = MPI_COMM_NULL;
}

attn_status am_comm_usable(MPI_Comm comm) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    AM_CHECK(init, ATTN_STATUS_INVALID_ARGUMENT, "comm: MPI is not initialized (call MPI_Init first)");
    MPI_Finalized(&fin);
    AM_CHECK(!fin, ATTN_STATUS_INVALID_ARGUMENT, "comm: MPI is already finalized");
    AM_CHECK(comm != MPI_COMM_NULL, ATTN_STATUS_INVALID_ARGUMENT, "comm: MPI_COMM_NULL");
    return ATTN_STATUS_OK;
}

attn_status am_comm_dup(MPI_Comm comm, MPI_Comm *dup, int *rank, int *size) {
    AM_MPI(MPI_Comm_dup(comm, dup));
    MPI_Comm_set_errhandler(*dup, MPI_ERRORS_RETURN);
    MPI_Comm_rank(*dup, rank);
    MPI_Comm_size(*dup, size);
    return ATTN_STATUS_OK;
}

/* ---- tensor checks ----------------------------------------------------------------------------------- */
size_t am_float_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_F32:
        return 4;
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_BF16:
        return 2;
    default:
        return 0;
    }
}

attn_status am_check_view(const attn_tensor *t, const char *name, int ndim, int dtype, const int64_t *expect,
                          const char *const *dim_names) {
    AM_CHECK(t != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: NULL", name);
    AM_CHECK(t->ndim == ndim, ATTN_STATUS_INVALID_ARGUMENT, "%s: ndim=%d, expected %d", name, (int)t->ndim, ndim);
    if (dtype < 0)
        AM_CHECK(am_float_size(t->dtype) != 0, ATTN_STATUS_INVALID_ARGUMENT,
                 "%s: dtype %s, expected f32, f16 or bf16", name, attn_dtype_name(t->dtype));
    else
        AM_CHECK(t->dtype == (attn_dtype)dtype, ATTN_STATUS_INVALID_ARGUMENT, "%s: dtype %s, expected %s", name,
                 attn_dtype_name(t->dtype), attn_dtype_name((attn_dtype)dtype));
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        AM_CHECK(t->shape[d] >= 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: shape[%d]=%" PRId64 " < 0", name, d,
                 t->shape[d]);
        AM_CHECK(t->strides[d] >= 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: strides[%d]=%" PRId64 " < 0", name, d,
                 t->strides[d]);
        if (expect && expect[d] >= 0)
            AM_CHECK(t->shape[d] == expect[d], ATTN_STATUS_INVALID_ARGUMENT,
                     "%s: shape[%d]=%" PRId64 ", expected %s=%" PRId64, name, d, t->shape[d],
                     dim_names && dim_names[d] ? dim_names[d] : "size", expect[d]);
    }
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] == 0)
            numel = 0;
    for (int d = 0; d < ndim && numel > 0; d++)
        AM_CHECK(am_mul(numel, t->shape[d], &numel), ATTN_STATUS_OVERFLOW, "%s: element count overflows", name);
    /* a view with no elements is never addressed: like attn_tensor_check, skip the contiguity rule for it
     * (NumPy gives empty arrays zero strides) */
    if (ndim > 0 && numel > 0 && t->shape[ndim - 1] > 1)
        AM_CHECK(t->strides[ndim - 1] == 1, ATTN_STATUS_INVALID_ARGUMENT,
                 "%s: strides[%d]=%" PRId64 ", the last dimension must be contiguous (1)", name, ndim - 1,
                 t->strides[ndim - 1]);
    /* the byte extent must fit in int64 */
    int64_t ext = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t term = 0;
        if (t->shape[d] > 0)
            AM_CHECK(am_mul(t->shape[d] - 1, t->strides[d], &term) && am_add(ext, term, &ext), ATTN_STATUS_OVERFLOW,
                     "%s: extent overflows int64", name);
    }
    AM_CHECK(am_mul(ext + 1, (int64_t)attn_dtype_size(t->dtype), &ext), ATTN_STATUS_OVERFLOW,
             "%s: byte extent overflows int64", name);
    AM_CHECK(numel == 0 || t->data != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: data is NULL", name);
    return ATTN_STATUS_OK;
}

attn_tensor am_view(void *data, attn_dtype dtype, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const int64_t shape[4] = {d0, d1, d2, d3};
    return attn_tensor_make(data, dtype, ndim, shape);
}

int am_mul(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0)
        return 0;
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *r = a * b;
    return 1;
}

int am_add(int64_t a, int64_t b, int64_t *r) {
    if (a < 0 || b < 0 || a > INT64_MAX - b)
        return 0;
    *r = a + b;
    return 1;
}

void *am_alloc(int64_t bytes) {
    if (bytes < 0 || (uint64_t)bytes > (uint64_t)SIZE_MAX - 64)
        return NULL;
    const size_t n = ((size_t)bytes + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

/* ---- dtype conversion -------------------------------------------------------------------------------- */
/* f16/bf16 through libattn's codecs (attn_f16_from_float ...), the bits its entries use. */
static float am_f16_to_f32(uint16_t h) { return attn_f16_to_float(h); }
static uint16_t am_f32_to_f16(float f) { return attn_f16_from_float(f); }
static float am_bf16_to_f32(uint16_t b) { return attn_bf16_to_float(b); }
static uint16_t am_f32_to_bf16(float f) { return attn_bf16_from_float(f); }

void am_to_f32(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    const uint16_t *s = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = dtype == ATTN_DTYPE_BF16 ? am_bf16_to_f32(s[i]) : am_f16_to_f32(s[i]);
}

void am_from_f32(const float *src, void *dst, attn_dtype dtype, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    for (int64_t i = 0; i < n; i++)
        d[i] = dtype == ATTN_DTYPE_BF16 ? am_f32_to_bf16(src[i]) : am_f32_to_f16(src[i]);
}
