/*
 * mpi_common.h — plumbing shared by the libattn_mpi entries (issue 12): the thread-local error message,
 * the cross-rank agreement on a call's status, MPI error mapping, tensor checks for the views this library
 * reads or writes itself, float32 <-> f16/bf16 conversion, and timing. No attention math here.
 * libattn_mpi is a client of include/attn/attn.h only (it never includes src/ headers of libattn).
 */
#ifndef ATTN_MPI_COMMON_H
#define ATTN_MPI_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn_mpi.h"

/* Sets the thread-local message (printf format) and returns status. */
attn_status am_fail(attn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Copies libattn's attn_last_error() into our message, prefixed by `what`, and returns status. */
attn_status am_fail_attn(attn_status status, const char *what);
/* Maps an MPI return code to OK or INTERNAL with the MPI error string. */
attn_status am_mpi(int rc, const char *what);

#define AM_CHECK(cond, status, ...)                                                                            \
    do {                                                                                                       \
        if (!(cond))                                                                                           \
            return am_fail((status), __VA_ARGS__);                                                             \
    } while (0)
#define AM_TRY(expr)                                                                                           \
    do {                                                                                                       \
        attn_status am_try_st_ = (expr);                                                                       \
        if (am_try_st_ != ATTN_STATUS_OK)                                                                      \
            return am_try_st_;                                                                                 \
    } while (0)
#define AM_MPI(call) AM_TRY(am_mpi((call), #call))

/* Agreement of one collective call: every rank contributes its local status and `num_vals` values that must
 * be equal on every rank (shape facts); one MPI_Allreduce(MAX) over [status, failing rank, v..., −v...].
 * Returns the first failing rank's status on every rank (the failing rank keeps its own message; the others
 * get "rank R failed: ..."), INVALID_ARGUMENT if a value differs between ranks (message names `names[i]`),
 * else OK. vals may hold at most 14 values. */
attn_status am_agree(MPI_Comm comm, attn_status local, const int64_t *vals, const char *const *names,
                     int num_vals);

/* Duplicates comm into *dup with MPI_ERRORS_RETURN set; writes rank and size. */
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
