/*
 * tensor.c — attn_tensor helpers: the public contiguous constructor and the validation helpers of tensor.h.
 */
#include "core/tensor.h"

#include "core/checked_math.h"
#include "core/error.h"

attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int32_t ndim, const int64_t *shape) {
    attn_tensor t;
    int64_t stride = 1;
    if (ndim < 0) ndim = 0;
    if (ndim > ATTN_MAX_DIMS) ndim = ATTN_MAX_DIMS;
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int32_t i = 0; i < ATTN_MAX_DIMS; i++) {
        t.shape[i] = 0;
        t.strides[i] = 0;
    }
    for (int32_t i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape ? shape[i] : 0;
        t.strides[i] = stride;
        /* saturate instead of overflowing (signed overflow is undefined): such a view fails attn_tensor_check */
        if (__builtin_mul_overflow(stride, t.shape[i] > 0 ? t.shape[i] : 1, &stride)) stride = INT64_MAX;
    }
    return t;
}

int64_t attn_tensor_numel(const attn_tensor *t) {
    /* An empty view has 0 elements whatever its other dims: no product of them is formed (they may be huge;
     * signed overflow is undefined, F10). A product beyond int64 saturates (attn_tensor_check refuses it). */
    for (int32_t i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return 0;
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return INT64_MAX;
    return n;
}

attn_status attn_tensor_check(const attn_tensor *t, const char *name, int32_t ndim, int rows) {
    ATTN_CHECK(t != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL", name);
    ATTN_CHECK(t->ndim >= 0 && t->ndim <= ATTN_MAX_DIMS, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: ndim=%d is outside 0..%d", name, (int)t->ndim, ATTN_MAX_DIMS);
    ATTN_CHECK(ndim < 0 || t->ndim == ndim, ATTN_STATUS_INVALID_ARGUMENT, "%s: ndim=%d, expected %d", name,
               (int)t->ndim, (int)ndim);
    ATTN_CHECK(attn_dtype_size(t->dtype) > 0 || t->dtype == ATTN_DTYPE_FP4_E2M1,
               ATTN_STATUS_INVALID_ARGUMENT, "%s: unknown dtype %d", name, (int)t->dtype);
    int64_t esize = (int64_t)attn_dtype_size(t->dtype);
    if (esize == 0) esize = 1;
    int empty = 0;
    for (int32_t i = 0; i < t->ndim; i++) {
        ATTN_CHECK(t->shape[i] >= 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: shape[%d]=%lld is negative", name,
                   (int)i, (long long)t->shape[i]);
        ATTN_CHECK(t->strides[i] >= 0, ATTN_STATUS_INVALID_ARGUMENT, "%s: strides[%d]=%lld is negative",
                   name, (int)i, (long long)t->strides[i]);
        if (t->shape[i] == 0) empty = 1;
    }
    /* Every address computation on the view fits in int64, also for size-1 and empty dimensions and for
     * index shape[i] (one past the end, e.g. the start of an empty last sequence): each strides[i]·esize and
     * the sum of shape[i]·strides[i]·esize over all dimensions, plus one element. */
    int64_t end = esize, n = 1;
    for (int32_t i = 0; i < t->ndim; i++) {
        int64_t bstride, ext;
        ATTN_CHECK(attn_mul_i64(t->strides[i], esize, &bstride), ATTN_STATUS_OVERFLOW,
                   "%s: strides[%d]=%lld times the element size %lld overflows int64", name, (int)i,
                   (long long)t->strides[i], (long long)esize);
        ATTN_CHECK(attn_mul_i64(t->shape[i], bstride, &ext) && attn_add_i64(end, ext, &end), ATTN_STATUS_OVERFLOW,
                   "%s: offset of the last element overflows int64 (dim %d: shape %lld, stride %lld)", name, (int)i,
                   (long long)t->shape[i], (long long)t->strides[i]);
        if (!empty)
            ATTN_CHECK(attn_mul_i64(n, t->shape[i], &n), ATTN_STATUS_OVERFLOW,
                       "%s: the number of elements overflows int64 (dim %d)", name, (int)i);
    }
    if (empty) return ATTN_STATUS_OK;
    int64_t bytes;
    ATTN_CHECK(attn_mul_i64(n, esize, &bytes), ATTN_STATUS_OVERFLOW, "%s: byte size of %lld elements overflows int64",
               name, (long long)n);
    ATTN_CHECK(t->data != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: data is NULL but the view has elements",
               name);
    if (rows && t->ndim > 0 && t->shape[t->ndim - 1] > 1) {
        ATTN_CHECK(t->strides[t->ndim - 1] == 1, ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: strides[%d]=%lld, the last dimension must be contiguous (stride 1)", name,
                   (int)t->ndim - 1, (long long)t->strides[t->ndim - 1]);
    }
    return ATTN_STATUS_OK;
}

attn_status attn_tensor_mirror0(const attn_tensor *t, const char *name, attn_tensor *m) {
    *m = *t;
    if (t->ndim < 1 || t->strides[0] >= 0 || t->strides[0] == INT64_MIN)
        return ATTN_STATUS_OK;
    const int64_t es = attn_dtype_size(t->dtype) ? (int64_t)attn_dtype_size(t->dtype) : 1;
    int64_t back;
    ATTN_CHECK(attn_mul_i64(t->strides[0], es, &back) && back > INT64_MIN, ATTN_STATUS_OVERFLOW,
               "%s: strides[0]=%lld times the element size overflows int64", name, (long long)t->strides[0]);
    m->strides[0] = -t->strides[0];
    if (t->shape[0] <= 1)
        return ATTN_STATUS_OK; /* one slice (or none): the stride is never followed */
    ATTN_CHECK(t->shape[0] == 2, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: strides[0]=%lld is negative (only the two halves of a kv_cache may run backwards)", name,
               (long long)t->strides[0]);
    if (t->data != NULL) {
        ATTN_CHECK((uintptr_t)t->data >= (uintptr_t)(-back), ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: strides[0]=%lld reaches below address 0", name, (long long)t->strides[0]);
        m->data = (void *)((uintptr_t)t->data - (uintptr_t)(-back));
    }
    return ATTN_STATUS_OK;
}

attn_status attn_tensor_check_float(const attn_tensor *t, const char *name) {
    ATTN_CHECK(t->dtype == ATTN_DTYPE_F32 || t->dtype == ATTN_DTYPE_F16 || t->dtype == ATTN_DTYPE_BF16,
               ATTN_STATUS_INVALID_ARGUMENT, "%s: dtype %s, expected f32, f16 or bf16", name,
               attn_dtype_name(t->dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_tensor_check_dtype(const attn_tensor *t, const char *name, attn_dtype dtype) {
    ATTN_CHECK(t->dtype == dtype, ATTN_STATUS_INVALID_ARGUMENT, "%s: dtype %s, expected %s", name,
               attn_dtype_name(t->dtype), attn_dtype_name(dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_tensor_check_dim(const attn_tensor *t, const char *name, int32_t dim, int64_t value,
                                  const char *what) {
    ATTN_CHECK(t->shape[dim] == value, ATTN_STATUS_INVALID_ARGUMENT, "%s: shape[%d]=%lld, expected %s=%lld",
               name, (int)dim, (long long)t->shape[dim], what, (long long)value);
    return ATTN_STATUS_OK;
}

void attn_tensor_span(const attn_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    size_t esize = attn_dtype_size(t->dtype);
    uintptr_t base = (uintptr_t)t->data;
    int64_t below = 0, above = 0;
    if (esize == 0) esize = 1;
    /* validated views bound every term below (attn_tensor_check; a kv_cache's strides[0], which may be negative,
     * by attn_kv_layout_of's check of its mirror image); a negative stride reaches below data */
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            *lo = *hi = base;
            return;
        }
        const int64_t reach = (t->shape[i] - 1) * t->strides[i];
        if (reach < 0)
            below -= reach;
        else
            above += reach;
    }
    *lo = base - (uintptr_t)below * esize;
    *hi = base + (uintptr_t)(above + 1) * esize;
}

int attn_tensor_self_overlaps(const attn_tensor *t) {
    int32_t dims[ATTN_MAX_DIMS], m = 0;
    for (int32_t d = 0; d < t->ndim && d < ATTN_MAX_DIMS; d++) {
        if (t->shape[d] == 0) return 0;
        if (t->shape[d] > 1) dims[m++] = d;
    }
    int64_t mag[ATTN_MAX_DIMS]; /* |stride|: a negative stride walks the same addresses downwards */
    for (int32_t d = 0; d < ATTN_MAX_DIMS; d++)
        mag[d] = d < t->ndim && t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
    for (int32_t i = 1; i < m; i++) /* insertion sort by |stride| (m <= ATTN_MAX_DIMS) */
        for (int32_t j = i; j > 0 && mag[dims[j]] < mag[dims[j - 1]]; j--) {
            const int32_t x = dims[j];
            dims[j] = dims[j - 1], dims[j - 1] = x;
        }
    int64_t extent = 1; /* elements spanned by the dims seen so far (validated views: no overflow) */
    for (int32_t i = 0; i < m; i++) {
        const int32_t d = dims[i];
        if (mag[d] < extent)
            return 1;
        extent += mag[d] * (t->shape[d] - 1);
    }
    return 0;
}

/* 1 with t's two dim-0 slices in *h0 / *h1 when t is [2, ...] and the slices' spans are disjoint (a kv_cache
 * whose key and value caches are separate allocations), so that a view in the gap between them is not taken
 * for an overlap. */
static int attn_tensor_halves(const attn_tensor *t, attn_tensor *h0, attn_tensor *h1) {
    if (t->ndim < 1 || t->shape[0] != 2)
        return 0;
    *h0 = *t;
    h0->ndim = t->ndim - 1;
    for (int32_t i = 0; i + 1 < t->ndim; i++) {
        h0->shape[i] = t->shape[i + 1];
        h0->strides[i] = t->strides[i + 1];
    }
    *h1 = *h0;
    const int64_t es = attn_dtype_size(t->dtype) ? (int64_t)attn_dtype_size(t->dtype) : 1; /* as attn_tensor_span */
    h1->data = (char *)(uintptr_t)attn_byte_ptr(t->data, t->strides[0] * es);
    uintptr_t lo0, hi0, lo1, hi1;
    attn_tensor_span(h0, &lo0, &hi0);
    attn_tensor_span(h1, &lo1, &hi1);
    return lo0 < hi0 && lo1 < hi1 && (hi0 <= lo1 || hi1 <= lo0);
}

int attn_tensor_overlap(const attn_tensor *a, const attn_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    attn_tensor_span(a, &alo, &ahi);
    attn_tensor_span(b, &blo, &bhi);
    if (alo == ahi || blo == bhi || !(alo < bhi && blo < ahi))
        return 0;
    attn_tensor h0, h1;
    if (attn_tensor_halves(a, &h0, &h1))
        return attn_tensor_overlap(&h0, b) || attn_tensor_overlap(&h1, b);
    if (attn_tensor_halves(b, &h0, &h1))
        return attn_tensor_overlap(a, &h0) || attn_tensor_overlap(a, &h1);
    return 1;
}
