/*
 * kv_cache.c — the paged KV cache operations once validated: slot_mapping scatter (negative slots
 * skipped, dtype conversion with round-to-nearest-even; fp8 caches: encode(x / scale), saturating), and
 * whole-block copies for copy_blocks /
 * swap_blocks. Validation lives in src/api/api_cache.c; nothing here checks ranges again.
 */
#include "cache/kv_layout.h"

#include <string.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/kernels.h"

/* The checks and fields a 5-D kv_cache and a 4-D cache of a pair share: dimensions d0 .. d0 + 3 of c are num_blocks,
 * block_size, num_kv_heads, head_size (messages name them by index). Fills *l but kv_stride (0). */
static attn_status attn_kv_dims(const attn_tensor *c, const char *name, int d0, attn_kv_layout *l) {
    const int64_t bs = c->shape[d0 + 1], hk = c->shape[d0 + 2], hd = c->shape[d0 + 3];
    ATTN_CHECK(bs >= 1, ATTN_STATUS_INVALID_ARGUMENT, "%s: block_size (shape[%d])=%lld, expected >= 1", name, d0 + 1,
               (long long)bs);
    ATTN_CHECK(hk >= 1, ATTN_STATUS_INVALID_ARGUMENT, "%s: num_kv_heads (shape[%d])=%lld, expected >= 1", name, d0 + 2,
               (long long)hk);
    ATTN_CHECK(hk <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: num_kv_heads (shape[%d])=%lld exceeds ATTN_MAX_HEADS=%d", name, d0 + 2, (long long)hk,
               ATTN_MAX_HEADS);
    ATTN_CHECK(hd >= 1 && hd <= 256, ATTN_STATUS_INVALID_ARGUMENT, "%s: head_size (shape[%d])=%lld is outside 1..256",
               name, d0 + 3, (long long)hd);
    const int64_t es = (int64_t)attn_dtype_size(c->dtype);
    ATTN_CHECK(((uintptr_t)c->data % (uintptr_t)es) == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: data pointer is not aligned to its %lld-byte elements", name, (long long)es);
    l->base = (char *)c->data;
    l->dtype = c->dtype;
    l->elem_size = es;
    l->num_blocks = c->shape[d0];
    l->block_size = bs;
    l->num_kv_heads = hk;
    l->head_size = hd;
    l->kv_stride = 0;
    /* byte strides: attn_tensor_check proved the last element's byte offset fits in int64 */
    l->block_stride = c->strides[d0] * es;
    l->row_stride = c->strides[d0 + 1] * es;
    l->head_stride = c->strides[d0 + 2] * es;
    return ATTN_STATUS_OK;
}

static attn_status attn_kv_layout_check(const attn_tensor *c, const char *name, int allow_u8, attn_kv_layout *l) {
    ATTN_CHECK(c != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL", name);
    attn_tensor m; /* strides[0] may be negative: two allocations, the value cache below the key cache */
    ATTN_TRY(attn_tensor_mirror0(c, name, &m));
    ATTN_TRY(attn_tensor_check(&m, name, 5, 1));
    if (allow_u8)
        ATTN_CHECK(attn_dtype_is_float(c->dtype) || attn_dtype_is_fp8(c->dtype) || c->dtype == ATTN_DTYPE_U8,
                   ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: dtype %s, expected f32, f16, bf16, fp8_e4m3, fp8_e5m2 or u8 (an fp8 cache's bytes)", name,
                   attn_dtype_name(c->dtype));
    else
        ATTN_CHECK(attn_dtype_is_float(c->dtype) || attn_dtype_is_fp8(c->dtype), ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: dtype %s, expected f32, f16, bf16, fp8_e4m3 or fp8_e5m2", name, attn_dtype_name(c->dtype));
    ATTN_CHECK(c->shape[0] == 2, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: shape[0]=%lld, expected 2 ([2, num_blocks, block_size, num_kv_heads, head_size])", name,
               (long long)c->shape[0]);
    ATTN_TRY(attn_kv_dims(c, name, 1, l));
    l->kv_stride = c->strides[0] * l->elem_size; /* fits: attn_tensor_check */
    return ATTN_STATUS_OK;
}

/* One cache of the pair: [num_blocks, block_size, num_kv_heads, head_size], float or fp8, any non-negative strides
 * (key_cache), the head dimension contiguous where `rows` (value_cache). */
static attn_status attn_kv_half_check(const attn_tensor *c, const char *name, int rows, attn_kv_layout *l) {
    ATTN_CHECK(c != NULL, ATTN_STATUS_INVALID_ARGUMENT, "%s: is NULL", name);
    ATTN_TRY(attn_tensor_check(c, name, 4, rows));
    ATTN_CHECK(attn_dtype_is_float(c->dtype) || attn_dtype_is_fp8(c->dtype), ATTN_STATUS_INVALID_ARGUMENT,
               "%s: dtype %s, expected f32, f16, bf16, fp8_e4m3 or fp8_e5m2", name, attn_dtype_name(c->dtype));
    return attn_kv_dims(c, name, 0, l);
}

attn_status attn_kv_split_of(const attn_tensor *key_cache, const attn_tensor *value_cache, attn_kv_layout *k,
                             attn_kv_layout *v, int64_t *k_dim_stride) {
    ATTN_TRY(attn_kv_half_check(key_cache, "key_cache", 0, k));
    ATTN_TRY(attn_kv_half_check(value_cache, "value_cache", 1, v));
    ATTN_TRY(attn_tensor_check_dtype(value_cache, "value_cache", key_cache->dtype));
    static const char *const what[4] = {"num_blocks", "block_size", "num_kv_heads", "head_size"};
    for (int32_t i = 0; i < 4; i++)
        ATTN_TRY(attn_tensor_check_dim(value_cache, "value_cache", i, key_cache->shape[i], what[i]));
    ATTN_CHECK(key_cache->strides[3] != 0 || key_cache->shape[3] == 1, ATTN_STATUS_INVALID_ARGUMENT,
               "key_cache: strides[3]=0, expected > 0 (a key's head dimensions at one address)");
    *k_dim_stride = key_cache->strides[3] * k->elem_size;
    return ATTN_STATUS_OK;
}

attn_status attn_kv_layout_of(const attn_tensor *c, const char *name, attn_kv_layout *l) {
    return attn_kv_layout_check(c, name, 0, l);
}

attn_status attn_kv_layout_of_bytes(const attn_tensor *c, const char *name, attn_kv_layout *l) {
    return attn_kv_layout_check(c, name, 1, l);
}

/* One head row of head_size (<= ATTN_HEAD_SIZE_MAX) elements: copy when dtypes match, else convert through
 * float32 by the table's row conversions (exact widening, round to nearest even on narrowing). */
static void attn_kv_put_row(char *dst, attn_dtype dst_dtype, const char *src, attn_dtype src_dtype, int64_t n,
                            int64_t dst_es, const struct attn_kernels *kern) {
    if (dst_dtype == src_dtype) {
        memcpy(dst, src, (size_t)(n * dst_es));
        return;
    }
    if (src_dtype == ATTN_DTYPE_F32) {
        kern->cvt_from_f32((const float *)(const void *)src, dst_dtype, dst, n);
        return;
    }
    if (dst_dtype == ATTN_DTYPE_F32) {
        kern->cvt_to_f32(src, src_dtype, (float *)(void *)dst, n);
        return;
    }
    float row[ATTN_HEAD_SIZE_MAX];
    kern->cvt_to_f32(src, src_dtype, row, n);
    kern->cvt_from_f32(row, dst_dtype, dst, n);
}

void attn_kv_scatter(const attn_kv_layout *c, const attn_kv_rows *rows, const attn_tensor *slot_mapping,
                     int64_t num_tokens, const struct attn_kernels *kern) {
    if (attn_dtype_is_fp8(c->dtype)) {
        attn_kv_scatter_fp8(c, rows, slot_mapping, num_tokens, kern);
        return;
    }
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = attn_tensor_get_index(slot_mapping, t);
        if (slot < 0) continue; /* PAD_SLOT_ID: padding or a token owned by another rank */
        for (int64_t g = 0; g < c->num_kv_heads; g++) {
            attn_kv_put_row(attn_kv_slot(c, 0, slot, g), c->dtype,
                            rows->key + t * rows->key_row_stride + g * rows->key_head_stride, rows->dtype,
                            c->head_size, c->elem_size, kern);
            attn_kv_put_row(attn_kv_slot(c, 1, slot, g), c->dtype,
                            rows->value + t * rows->value_row_stride + g * rows->value_head_stride, rows->dtype,
                            c->head_size, c->elem_size, kern);
        }
    }
}

/* One head row of key or value (src, the rows' dtype) into dst in the cache's dtype: encode(x / scale) for an fp8
 * cache, as attn_kv_scatter_fp8; else attn_kv_put_row. */
static void attn_kv_encode_row(char *dst, const attn_kv_layout *c, const char *src, const attn_kv_rows *rows,
                               float scale, const struct attn_kernels *kern) {
    if (attn_dtype_is_fp8(c->dtype))
        kern->cvt_to_fp8(src, rows->dtype, scale, c->dtype, (uint8_t *)dst, c->head_size);
    else
        attn_kv_put_row(dst, c->dtype, src, rows->dtype, c->head_size, c->elem_size, kern);
}

void attn_kv_scatter_split(const attn_kv_layout *k, int64_t k_dim_stride, const attn_kv_layout *v,
                           const attn_kv_rows *rows, const attn_tensor *slot_mapping, int64_t num_tokens,
                           const struct attn_kernels *kern) {
    const int64_t es = k->elem_size;
    _Alignas(64) char row[ATTN_HEAD_SIZE_MAX * 4]; /* float rows are converted through it */
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = attn_tensor_get_index(slot_mapping, t);
        if (slot < 0)
            continue; /* PAD_SLOT_ID */
        for (int64_t g = 0; g < k->num_kv_heads; g++) {
            /* the key row encoded, then each element to its own address */
            attn_kv_encode_row(row, k, rows->key + t * rows->key_row_stride + g * rows->key_head_stride, rows,
                               rows->k_scales ? rows->k_scales[g] : rows->k_scale, kern);
            char *kd = attn_kv_slot(k, 0, slot, g);
            for (int64_t d = 0; d < k->head_size; d++)
                memcpy(kd + d * k_dim_stride, row + d * es, (size_t)es);
            attn_kv_encode_row(attn_kv_slot(v, 0, slot, g), v,
                               rows->value + t * rows->value_row_stride + g * rows->value_head_stride, rows,
                               rows->v_scales ? rows->v_scales[g] : rows->v_scale, kern);
        }
    }
}

/* Each head row into an fp8 cache: dst[d] = encode(x / scale), x / scale in float32, saturating RNE (vLLM's
 * scaled_convert), by the table's cvt_to_fp8 (bitwise attn_fp8_from_float). The scale of
 * kv head g is the per-head entry when the rows carry an array, else the scalar. */
void attn_kv_scatter_fp8(const attn_kv_layout *c, const attn_kv_rows *rows, const attn_tensor *slot_mapping,
                         int64_t num_tokens, const struct attn_kernels *kern) {
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = attn_tensor_get_index(slot_mapping, t);
        if (slot < 0) continue;
        for (int64_t g = 0; g < c->num_kv_heads; g++) {
            const float ks = rows->k_scales ? rows->k_scales[g] : rows->k_scale;
            const float vs = rows->v_scales ? rows->v_scales[g] : rows->v_scale;
            kern->cvt_to_fp8(rows->key + t * rows->key_row_stride + g * rows->key_head_stride, rows->dtype, ks,
                             c->dtype, (uint8_t *)attn_kv_slot(c, 0, slot, g), c->head_size);
            kern->cvt_to_fp8(rows->value + t * rows->value_row_stride + g * rows->value_head_stride, rows->dtype, vs,
                             c->dtype, (uint8_t *)attn_kv_slot(c, 1, slot, g), c->head_size);
        }
    }
}

void attn_kv_copy_block(const attn_kv_layout *dst, int64_t dst_block, const attn_kv_layout *src, int64_t src_block) {
    const size_t row_bytes = (size_t)(src->head_size * src->elem_size);
    for (int64_t kv = 0; kv < 2; kv++)
        for (int64_t r = 0; r < src->block_size; r++)
            for (int64_t g = 0; g < src->num_kv_heads; g++) {
                const char *s = attn_kv_row(src, kv, src_block, r, g);
                char *d = attn_kv_row(dst, kv, dst_block, r, g);
                if (s != d) memmove(d, s, row_bytes);
            }
}
