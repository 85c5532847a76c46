/*
 * mpi_common.h — plumbing shared by the libattn_mpi entries: the thread-local error message,
 * the cross-rank agreement on a call's status, MPI error mapping, tensor checks for the views this library
 * reads or writes itself, float32 <-> f16/bf16 conversion, and timing. No attention math here.
 * libattn_mpi is a client of include/attn/attn.h only: the one src/ header of libattn it includes is the
 * header-only error plumbing core/error_channel.h (no libattn internal symbol is linked).
 */
#ifndef ATTN_MPI_COMMON_H
#define ATTN_MPI_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn_mpi.h"
#include "core/error_channel.h"

/* Sets the thread-local message (printf format) and returns status (defined by core/error_channel.h). */
attn_status am_fail(attn_status status, const char *fmt, ...) ATTN_PRINTF(2, 3);
/* Copies libattn's attn_last_error() into our message, prefixed by `what`, and returns status. */
attn_status am_fail_attn(attn_status status, const char *what);
/* *out = the caller's params read by libattn's struct_size rule (attn_params_copy; NULL = defaults); on failure
 * our message is libattn's ("params.struct_size=0: ...") and *out is untouched. Every entry reads a caller's
 * params through this, never by `*params` (which would read sizeof(attn_params) of this header from a struct
 * that an older caller made smaller). */
attn_status am_params_load(const attn_params *in, attn_params *out);
/* Maps an MPI return code to OK or INTERNAL with the MPI error string. */
attn_status am_mpi(int rc, const char *what);

#define AM_CHECK(cond, status, ...) ATTN_CHECK_WITH(am_fail, cond, status, __VA_ARGS__)
#define AM_TRY(expr)                ATTN_TRY(expr)
#define AM_MPI(call) AM_TRY(am_mpi((call), #call))

/* One fact that must be the same on every rank of a collective call, compared by its min and max over the
 * ranks. kind AM_INT prints the value, AM_FLOAT the float whose bits it holds (am_float_fact), AM_HASH
 * only that the contents differ (am_hash_fact: array contents, shapes). */
typedef enum { AM_INT, AM_FLOAT, AM_HASH } am_kind;
typedef struct am_fact {
    const char *name;
    int64_t value;
    am_kind kind;
} am_fact;
#define AM_MAX_FACTS 24

static inline am_fact am_int_fact(const char *name, int64_t v) {
    const am_fact f = {name, v, AM_INT};
    return f;
}
am_fact am_float_fact(const char *name, float v); /* −0 counts as +0 */
/* FNV-1a over n bytes, continuing from h (start with AM_HASH_SEED). */
#define AM_HASH_SEED 1469598103934665603ull
uint64_t am_hash(uint64_t h, const void *p, size_t n);
static inline am_fact am_hash_fact(const char *name, uint64_t h) {
    const am_fact f = {name, (int64_t)(h >> 1), AM_HASH}; /* >> 1: keeps −value representable */
    return f;
}

/* Agreement of one collective call over comm: every rank contributes its local status and `n` facts that
 * must be equal on every rank; ONE MPI_Allreduce(MAX) over [lowest failing rank and its status, highest
 * failing rank, fact..., −fact...]. Returns, on every rank:
 *   - a rank's own status (and message) when it failed locally;
 *   - on the ranks that did not, the lowest failing rank's status with the message
 *     "rank R <verb>: STATUS (that rank's attn_mpi_last_error() names the cause)" ("ranks R1..R2 <verb>"
 *     when several failed: the lowest and highest of them);
 *   - else INVALID_ARGUMENT naming the first fact that differs between ranks ("params.softcap differs
 *     between ranks (0 .. 5; this rank 5): every rank must pass the same value");
 *   - else OK.
 * `verb` says what the failing rank did, e.g. "rejected the config". Facts are compared only when every
 * rank succeeded. n <= AM_MAX_FACTS. */
attn_status am_agree(MPI_Comm comm, attn_status local, const am_fact *facts, int n, const char *verb);

/* The attn_params facts that must agree across the ranks of a forward call (NULL params = the
 * attn_params_init defaults): causal, window_left, window_right, softmax_scale, softcap, alibi_slopes and
 * sinks (NULL or not, and their num_heads values), mask / key_padding_mask / additive_mask (NULL or not,
 * dtype and shape; their contents are not compared), and with kv_scales k_scale and v_scale. Writes them
 * to facts[0..AM_PARAMS_FACTS) and returns their count. */
#define AM_PARAMS_FACTS 12
int am_params_facts(const attn_params *params, int32_t num_heads, int kv_scales, am_fact *facts);

/* Entry check of a plan creation, before any MPI call that needs a communicator: MPI initialized and not
 * finalized, comm not MPI_COMM_NULL. These cannot be agreed on (there is no communicator to talk over), so
 * a failure here returns at once on the calling rank only. */
attn_status am_comm_usable(MPI_Comm comm);

/* Duplicates comm into *dup with MPI_ERRORS_RETURN set; writes rank and size. Collective over comm: call it
 * only once every rank has agreed (am_agree on comm) that the plan is valid, so no rank is left waiting in
 * MPI_Comm_dup while another has returned. */
attn_status am_comm_dup(MPI_Comm comm, MPI_Comm *dup, int *rank, int *size);

/* Frees a plan's duplicated communicator (MPI_COMM_NULL: nothing; after MPI_Finalize: left alone, since
 * MPI may no longer be called) and sets *comm to MPI_COMM_NULL. */
void am_comm_release(MPI_Comm *comm);

/* Checks a view: non-NULL, data non-NULL when it has elements, ndim, dtype (dtype < 0: any float
 * f32/f16/bf16), non-negative strides, last dimension contiguous unless the view is empty (a zero-size
 * dimension: no element is addressed, so the strides do not matter, as in libattn's own check), and each
 * shape[i] == expect[i] (expect[i] < 0: any). Messages name `name`, e.g. "q: shape[1]=3, expected
 * num_heads=4". dim_names may be NULL. */
attn_status am_check_view(const attn_tensor *t, const char *name, int ndim, int dtype, const int64_t *expect,
                          const char *const *dim_names);

/* Element size of a float dtype (f32 4, f16/bf16 2), 0 otherwise. */
size_t am_float_size(attn_dtype dtype);

/* n values from src (dtype) to float32 dst, and float32 to dst (dtype), round-to-nearest-even. */
void am_to_f32(const void *src, attn_dtype dtype, float *dst, int64_t n);
void am_from_f32(const float *src, void *dst, attn_dtype dtype, int64_t n);

/* Byte pointer of element (i0, i1, i2, i3) of a view (unused trailing indices 0). */
static inline char *am_at(const attn_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    const size_t es = attn_dtype_size(t->dtype);
    int64_t off = 0;
    const int64_t idx[4] = {i0, i1, i2, i3};
    for (int d = 0; d < t->ndim && d < 4; d++)
        off += idx[d] * t->strides[d];
    return (char *)t->data + off * (int64_t)es;
}

/* A contiguous view helper (strides computed). */
attn_tensor am_view(void *data, attn_dtype dtype, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3);

/* Overflow-checked a·b and a+b for sizes (return 0 on overflow). */
int am_mul(int64_t a, int64_t b, int64_t *r);
int am_add(int64_t a, int64_t b, int64_t *r);

/* Aligned allocation (64 bytes) of `bytes` (0 -> a 64-byte block); NULL on failure. */
void *am_alloc(int64_t bytes);

static inline void am_stats_clear(attn_mpi_stats *s) {
    s->bytes_sent = s->bytes_received = s->num_messages = 0;
    s->compute_seconds = s->wait_seconds = s->total_seconds = 0.0;
}

#endif /* ATTN_MPI_COMMON_H */
