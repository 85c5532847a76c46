/*
 * tensor.h — validation helpers for attn_tensor views used by every entry point (docs/CONTRIBUTING.md §4).
 * Each helper sets the thread-local message naming the argument and returns a status; none writes data.
 */
#ifndef ATTN_CORE_TENSOR_H
#define ATTN_CORE_TENSOR_H

#include <stdint.h>

#include "attn/attn.h"

/* The view is usable: non-NULL, ndim == `ndim` (or any 0..MAX if ndim < 0), shapes/strides >= 0, data
 * non-NULL when it has elements, last stride 1 when `rows` != 0 and the last dim > 1, and the byte offset
 * of the last element fits in int64 (OVERFLOW otherwise). */
attn_status attn_tensor_check(const attn_tensor *t, const char *name, int32_t ndim, int rows);

/* dtype is one of F32/F16/BF16. */
attn_status attn_tensor_check_float(const attn_tensor *t, const char *name);

/* The mirror image of a view whose strides[0] is negative (a kv_cache over two allocations, the value cache
 * below the key cache): the same elements with dim 0 reversed, strides[0] positive, in *m, which attn_tensor_check
 * then validates as any view; other views are copied unchanged (a negative stride elsewhere, or INT64_MIN, is left
 * for attn_tensor_check to refuse). OVERFLOW when strides[0]·element size does not fit; INVALID_ARGUMENT when the
 * mirror would start below address 0 or dim 0 is longer than 2 (only a kv_cache's halves may run backwards). */
attn_status attn_tensor_mirror0(const attn_tensor *t, const char *name, attn_tensor *m);

/* dtype equals `dtype`. */
attn_status attn_tensor_check_dtype(const attn_tensor *t, const char *name, attn_dtype dtype);

/* shape[dim] == value; `what` names the expected quantity, e.g. "num_heads". */
attn_status attn_tensor_check_dim(const attn_tensor *t, const char *name, int32_t dim, int64_t value,
                                  const char *what);

/* Number of elements (0 if any dim is 0); assumes attn_tensor_check passed. */
int64_t attn_tensor_numel(const attn_tensor *t);

/* Byte address range [lo, hi) spanned by the view (hi == lo for an empty view); a negative stride (only a kv_cache's
 * strides[0] passes validation with one) reaches below data. */
void attn_tensor_span(const attn_tensor *t, uintptr_t *lo, uintptr_t *hi);

/* 1 if the byte spans of a and b intersect (both non-empty); a [2, ...] view whose two slices span disjoint ranges
 * (a kv_cache over two allocations) is compared slice by slice, so that a view lying between them does not count. */
int attn_tensor_overlap(const attn_tensor *a, const attn_tensor *b);

/* 1 unless the view's elements provably occupy distinct memory: with its size > 1 dims in ascending |stride|
 * order, each stride must exceed the extent of the dims inside it (a stride-0 dim of size > 1, as from
 * broadcast_to / expand, fails; so do exotic interleavings such as shape [3, 2] strides [2, 3], which an
 * output never needs). 0 for empty views. Call on validated views only. */
int attn_tensor_self_overlaps(const attn_tensor *t);

/* Reads element idx (flat index into a 1-D int32/int64 view) as int64. */
static inline int64_t attn_tensor_get_index(const attn_tensor *t, int64_t idx) {
    const char *p = (const char *)t->data;
    if (t->dtype == ATTN_DTYPE_I64) return ((const int64_t *)p)[idx * t->strides[0]];
    return ((const int32_t *)p)[idx * t->strides[0]];
}

#endif
