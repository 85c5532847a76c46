/*
 * api_cache.c — entry points of the paged KV cache ops: the cache write (attn_reshape_and_cache_ex and its
 * wrappers), copy_blocks, swap_blocks.
 * Each validates every argument and every index (all slots, all block ids) before the first write, so a
 * failing call leaves the cache untouched. The copying itself lives in src/cache/kv_cache.c; the cache
 * allocation (attn_kv_cache_alloc: huge pages) in src/cache/kv_alloc.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/ctx.h"
#include "api/kv_events.h"
#include "api/validate.h"
#include "attn/attn_experimental.h"
#include "cache/kv_layout.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

/* key/value rows [num_tokens, num_kv_heads, head_size] matching the cache. */
static attn_status attn_check_new_kv(const attn_tensor *t, const char *name, const attn_kv_layout *c,
                                     const attn_tensor *key) {
    ATTN_TRY(attn_tensor_check(t, name, 3, 1));
    ATTN_TRY(attn_tensor_check_float(t, name));
    ATTN_TRY(attn_tensor_check_dim(t, name, 1, c->num_kv_heads, "num_kv_heads"));
    ATTN_TRY(attn_tensor_check_dim(t, name, 2, c->head_size, "head_size"));
    if (key) {
        ATTN_TRY(attn_tensor_check_dim(t, name, 0, key->shape[0], "num_tokens"));
        ATTN_TRY(attn_tensor_check_dtype(t, name, key->dtype));
    }
    const size_t es = attn_dtype_size(t->dtype);
    ATTN_CHECK(((uintptr_t)t->data % es) == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: data pointer is not aligned to its %zu-byte elements", name, es);
    return ATTN_STATUS_OK;
}

/* An index tensor of int32/int64 with `ndim` dims. */
static attn_status attn_check_index_tensor(const attn_tensor *t, const char *name, int32_t ndim) {
    ATTN_TRY(attn_tensor_check(t, name, ndim, 0));
    ATTN_CHECK(t->dtype == ATTN_DTYPE_I64 || t->dtype == ATTN_DTYPE_I32, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: dtype %s, expected i64 or i32", name, attn_dtype_name(t->dtype));
    const size_t es = attn_dtype_size(t->dtype);
    ATTN_CHECK(((uintptr_t)t->data % es) == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: data pointer is not aligned to its %zu-byte elements", name, es);
    return ATTN_STATUS_OK;
}

static int64_t attn_index2(const attn_tensor *t, int64_t i, int64_t j) {
    const int64_t off = i * t->strides[0] + j * t->strides[1];
    return t->dtype == ATTN_DTYPE_I64 ? ((const int64_t *)t->data)[off] : ((const int32_t *)t->data)[off];
}

/* The one cache write (attn.h attn_reshape_and_cache_ex); the four older entries below and in api_kv_events.c
 * are wrappers. Checks, in this order: opts (struct_size), notify, ctx, the cache, the fp8 scales, key/value,
 * slot_mapping, every slot, overlaps; then the scatter, then the callback. */
/* kv_cache, or key_cache (in kv_cache's place) and value_cache apart (value_cache non-NULL) */
static attn_status attn_cache_write(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                    attn_tensor *kv_cache, attn_tensor *value_cache, const attn_tensor *slot_mapping,
                                    const attn_cache_write_options *opts_in) {
    attn_cache_write_options o;
    ATTN_TRY(attn_cache_write_options_read(opts_in, &o));
    if (o.notify) ATTN_TRY(attn_kv_events_check_notify(o.notify));
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    attn_kv_layout c, vc;
    int64_t k_dim_stride = 0;
    const char *cn = value_cache ? "key_cache" : "kv_cache";
    if (value_cache) {
        ATTN_CHECK(!o.notify, ATTN_STATUS_UNSUPPORTED,
                   "notify: KV-stored events describe one kv_cache, not a key cache and a value cache apart");
        ATTN_TRY(attn_kv_split_of(kv_cache, value_cache, &c, &vc, &k_dim_stride));
        ATTN_TRY(attn_validate_distinct_elements(kv_cache, "key_cache")); /* (no halves: strides[0] is a block's) */
        ATTN_TRY(attn_validate_distinct_elements(value_cache, "value_cache"));
        ATTN_CHECK(!attn_tensor_overlap(kv_cache, value_cache), ATTN_STATUS_INVALID_ARGUMENT,
                   "value_cache: overlaps key_cache in memory");
    } else {
        ATTN_TRY(attn_kv_layout_of(kv_cache, "kv_cache", &c));
        ATTN_TRY(attn_validate_cache_elements(kv_cache, "kv_cache"));
    }
    if (attn_dtype_is_fp8(c.dtype)) { /* float caches ignore the scales, as vLLM does for "auto" */
        /* a per-head array replaces its scalar, which is then not read (nor checked) */
        if (o.k_scales) ATTN_TRY(attn_check_fp8_scales(o.k_scales, c.num_kv_heads, "k_scales", c.dtype));
        else ATTN_TRY(attn_check_fp8_scale(o.k_scale, "k_scale", c.dtype));
        if (o.v_scales) ATTN_TRY(attn_check_fp8_scales(o.v_scales, c.num_kv_heads, "v_scales", c.dtype));
        else ATTN_TRY(attn_check_fp8_scale(o.v_scale, "v_scale", c.dtype));
    }
    ATTN_TRY(attn_check_new_kv(key, "key", &c, NULL));
    ATTN_TRY(attn_check_new_kv(value, "value", &c, key));
    ATTN_TRY(attn_check_index_tensor(slot_mapping, "slot_mapping", 1));
    const int64_t num_tokens = slot_mapping->shape[0];
    ATTN_CHECK(num_tokens <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "slot_mapping: shape[0]=%lld exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)num_tokens,
               (long long)ATTN_MAX_SEQ_LEN);
    ATTN_CHECK(num_tokens <= key->shape[0], ATTN_STATUS_INVALID_ARGUMENT,
               "slot_mapping: shape[0]=%lld exceeds key rows=%lld", (long long)num_tokens,
               (long long)key->shape[0]);
    int64_t num_slots;
    ATTN_CHECK(!__builtin_mul_overflow(c.num_blocks, c.block_size, &num_slots), ATTN_STATUS_OVERFLOW,
               "kv_cache: num_blocks·block_size overflows int64");
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = attn_tensor_get_index(slot_mapping, t);
        ATTN_CHECK(slot < num_slots, ATTN_STATUS_INVALID_ARGUMENT,
                   "slot_mapping: entry %lld = %lld >= num_blocks·block_size = %lld", (long long)t,
                   (long long)slot, (long long)num_slots);
    }
    const attn_tensor *outs[2] = {kv_cache, value_cache};
    const char *out_names[2] = {cn, "value_cache"};
    for (int i = 0; i < 2 && outs[i]; i++) {
        ATTN_CHECK(!attn_tensor_overlap(outs[i], key), ATTN_STATUS_INVALID_ARGUMENT, "%s: overlaps key in memory",
                   out_names[i]);
        ATTN_CHECK(!attn_tensor_overlap(outs[i], value), ATTN_STATUS_INVALID_ARGUMENT, "%s: overlaps value in memory",
                   out_names[i]);
        ATTN_CHECK(!attn_tensor_overlap(outs[i], slot_mapping), ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: overlaps slot_mapping in memory", out_names[i]);
    }
    const int64_t ke = (int64_t)attn_dtype_size(key->dtype);
    attn_kv_rows rows;
    rows.key = (const char *)key->data;
    rows.value = (const char *)value->data;
    rows.dtype = key->dtype;
    rows.key_row_stride = key->strides[0] * ke;
    rows.key_head_stride = key->strides[1] * ke;
    rows.value_row_stride = value->strides[0] * ke;
    rows.value_head_stride = value->strides[1] * ke;
    rows.k_scale = o.k_scale, rows.v_scale = o.v_scale;
    rows.k_scales = o.k_scales, rows.v_scales = o.v_scales;
    if (value_cache)
        attn_kv_scatter_split(&c, k_dim_stride, &vc, &rows, slot_mapping, num_tokens, ctx->kern);
    else
        attn_kv_scatter(&c, &rows, slot_mapping, num_tokens, ctx->kern);
    if (o.notify) attn_kv_events_notify(kv_cache, slot_mapping, o.notify);
    return ATTN_STATUS_OK;
}

attn_status attn_reshape_and_cache_ex(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                      attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                      const attn_cache_write_options *opts_in) {
    return attn_cache_write(ctx, key, value, kv_cache, NULL, slot_mapping, opts_in);
}

attn_status attn_reshape_and_cache_kv(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                      attn_tensor *key_cache, attn_tensor *value_cache, const attn_tensor *slot_mapping,
                                      const attn_cache_write_options *opts) {
    ATTN_CHECK(value_cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "value_cache: is NULL");
    return attn_cache_write(ctx, key, value, key_cache, value_cache, slot_mapping, opts);
}

attn_status attn_reshape_and_cache_scaled(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                          attn_tensor *kv_cache, const attn_tensor *slot_mapping, float k_scale,
                                          float v_scale) {
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    o.k_scale = k_scale, o.v_scale = v_scale;
    return attn_reshape_and_cache_ex(ctx, key, value, kv_cache, slot_mapping, &o);
}

attn_status attn_reshape_and_cache(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                   attn_tensor *kv_cache, const attn_tensor *slot_mapping) {
    return attn_reshape_and_cache_ex(ctx, key, value, kv_cache, slot_mapping, NULL);
}

/* block_mapping [num_pairs, 2]: column 0 checked against src_blocks blocks of `src_name`, column 1 against
 * dst_blocks of `dst_name`. */
static attn_status attn_check_block_mapping(const attn_tensor *m, int64_t src_blocks, const char *src_name,
                                            int64_t dst_blocks, const char *dst_name) {
    ATTN_TRY(attn_check_index_tensor(m, "block_mapping", 2));
    ATTN_TRY(attn_tensor_check_dim(m, "block_mapping", 1, 2, "2 (src, dst)"));
    ATTN_CHECK(m->shape[0] <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
               "block_mapping: shape[0]=%lld pairs exceeds ATTN_MAX_SEQ_LEN=%lld", (long long)m->shape[0],
               (long long)ATTN_MAX_SEQ_LEN);
    for (int64_t i = 0; i < m->shape[0]; i++) {
        const int64_t s = attn_index2(m, i, 0), d = attn_index2(m, i, 1);
        ATTN_CHECK(s >= 0 && s < src_blocks, ATTN_STATUS_INVALID_ARGUMENT,
                   "block_mapping: entry [%lld][0] = %lld is outside [0, num_blocks=%lld) of %s", (long long)i,
                   (long long)s, (long long)src_blocks, src_name);
        ATTN_CHECK(d >= 0 && d < dst_blocks, ATTN_STATUS_INVALID_ARGUMENT,
                   "block_mapping: entry [%lld][1] = %lld is outside [0, num_blocks=%lld) of %s", (long long)i,
                   (long long)d, (long long)dst_blocks, dst_name);
    }
    return ATTN_STATUS_OK;
}

attn_status attn_copy_blocks(attn_ctx *ctx, attn_tensor *kv_cache, const attn_tensor *block_mapping) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    attn_kv_layout c;
    ATTN_TRY(attn_kv_layout_of_bytes(kv_cache, "kv_cache", &c)); /* a byte copy: vLLM's u8 fp8 caches too */
    ATTN_TRY(attn_validate_cache_elements(kv_cache, "kv_cache"));
    ATTN_TRY(attn_check_block_mapping(block_mapping, c.num_blocks, "kv_cache", c.num_blocks, "kv_cache"));
    ATTN_CHECK(!attn_tensor_overlap(kv_cache, block_mapping), ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: overlaps block_mapping in memory");
    for (int64_t i = 0; i < block_mapping->shape[0]; i++)
        attn_kv_copy_block(&c, attn_index2(block_mapping, i, 1), &c, attn_index2(block_mapping, i, 0));
    return ATTN_STATUS_OK;
}

attn_status attn_swap_blocks(attn_ctx *ctx, const attn_tensor *src_cache, attn_tensor *dst_cache,
                             const attn_tensor *block_mapping) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    attn_kv_layout s, d;
    ATTN_TRY(attn_kv_layout_of_bytes(src_cache, "src_cache", &s));
    ATTN_TRY(attn_kv_layout_of_bytes(dst_cache, "dst_cache", &d));
    ATTN_TRY(attn_validate_cache_elements(dst_cache, "dst_cache"));
    /* bytes move: equal dtypes, or a u8 view of fp8 codes with u8 or either fp8 format */
    const int bytes_ok = (s.dtype == ATTN_DTYPE_U8 && (d.dtype == ATTN_DTYPE_U8 || attn_dtype_is_fp8(d.dtype))) ||
                         (d.dtype == ATTN_DTYPE_U8 && attn_dtype_is_fp8(s.dtype));
    ATTN_CHECK(s.dtype == d.dtype || bytes_ok, ATTN_STATUS_INVALID_ARGUMENT,
               "dst_cache: dtype %s differs from src_cache dtype %s", attn_dtype_name(d.dtype),
               attn_dtype_name(s.dtype));
    ATTN_TRY(attn_tensor_check_dim(dst_cache, "dst_cache", 2, s.block_size, "src_cache block_size"));
    ATTN_TRY(attn_tensor_check_dim(dst_cache, "dst_cache", 3, s.num_kv_heads, "src_cache num_kv_heads"));
    ATTN_TRY(attn_tensor_check_dim(dst_cache, "dst_cache", 4, s.head_size, "src_cache head_size"));
    ATTN_TRY(attn_check_block_mapping(block_mapping, s.num_blocks, "src_cache", d.num_blocks, "dst_cache"));
    ATTN_CHECK(!attn_tensor_overlap(dst_cache, src_cache), ATTN_STATUS_INVALID_ARGUMENT,
               "dst_cache: overlaps src_cache in memory");
    ATTN_CHECK(!attn_tensor_overlap(dst_cache, block_mapping), ATTN_STATUS_INVALID_ARGUMENT,
               "dst_cache: overlaps block_mapping in memory");
    for (int64_t i = 0; i < block_mapping->shape[0]; i++)
        attn_kv_copy_block(&d, attn_index2(block_mapping, i, 1), &s, attn_index2(block_mapping, i, 0));
    return ATTN_STATUS_OK;
}

attn_status attn_swap_blocks_bytes(attn_ctx *ctx, const attn_tensor *src, attn_tensor *dst, int64_t block_size_in_bytes,
                                   const attn_tensor *block_mapping) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_TRY(attn_tensor_check(src, "src", -1, 0));
    ATTN_TRY(attn_tensor_check(dst, "dst", -1, 0));
    ATTN_CHECK(attn_dtype_size(src->dtype) > 0 && attn_dtype_size(dst->dtype) > 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: dtype %s packs two elements per byte, expected a view of whole bytes",
               attn_dtype_size(src->dtype) > 0 ? "dst" : "src",
               attn_dtype_name(attn_dtype_size(src->dtype) > 0 ? dst->dtype : src->dtype));
    ATTN_CHECK(block_size_in_bytes > 0, ATTN_STATUS_INVALID_ARGUMENT, "block_size_in_bytes: %lld, expected > 0",
               (long long)block_size_in_bytes);
    uintptr_t s_lo, s_hi, d_lo, d_hi; /* strides are >= 0: each span starts at its data pointer */
    attn_tensor_span(src, &s_lo, &s_hi);
    attn_tensor_span(dst, &d_lo, &d_hi);
    const int64_t s_bytes = (int64_t)(s_hi - s_lo), d_bytes = (int64_t)(d_hi - d_lo);
    char s_name[96], d_name[96];
    snprintf(s_name, sizeof s_name, "src (%lld bytes in blocks of %lld)", (long long)s_bytes,
             (long long)block_size_in_bytes);
    snprintf(d_name, sizeof d_name, "dst (%lld bytes in blocks of %lld)", (long long)d_bytes,
             (long long)block_size_in_bytes);
    ATTN_TRY(attn_check_block_mapping(block_mapping, s_bytes / block_size_in_bytes, s_name,
                                      d_bytes / block_size_in_bytes, d_name));
    uintptr_t m_lo, m_hi; /* dst is every byte of its span, gaps between its elements included */
    attn_tensor_span(block_mapping, &m_lo, &m_hi);
    ATTN_CHECK(m_lo == m_hi || d_lo == d_hi || m_hi <= d_lo || d_hi <= m_lo, ATTN_STATUS_INVALID_ARGUMENT,
               "dst: overlaps block_mapping in memory");
    const size_t n = (size_t)block_size_in_bytes;
    for (int64_t i = 0; i < block_mapping->shape[0]; i++) /* in order, memmove: src and dst may be one buffer */
        memmove((char *)d_lo + (size_t)attn_index2(block_mapping, i, 1) * n,
                (const char *)s_lo + (size_t)attn_index2(block_mapping, i, 0) * n, n);
    return ATTN_STATUS_OK;
}

attn_status attn_kv_cache_alloc(attn_dtype dtype, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                                int64_t head_size, attn_tensor *cache) {
    ATTN_CHECK(cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "cache: is NULL");
    ATTN_CHECK(attn_dtype_is_float(dtype) || attn_dtype_is_fp8(dtype), ATTN_STATUS_INVALID_ARGUMENT,
               "dtype: %s, expected f32, f16, bf16, fp8_e4m3 or fp8_e5m2", attn_dtype_name(dtype));
    ATTN_CHECK(num_blocks >= 1, ATTN_STATUS_INVALID_ARGUMENT, "num_blocks=%lld, expected >= 1", (long long)num_blocks);
    ATTN_CHECK(block_size >= 1, ATTN_STATUS_INVALID_ARGUMENT, "block_size=%lld, expected >= 1", (long long)block_size);
    ATTN_CHECK(num_kv_heads >= 1 && num_kv_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
               "num_kv_heads=%lld is outside 1..ATTN_MAX_HEADS=%d", (long long)num_kv_heads, ATTN_MAX_HEADS);
    ATTN_CHECK(head_size >= 1 && head_size <= 256, ATTN_STATUS_INVALID_ARGUMENT, "head_size=%lld is outside 1..256",
               (long long)head_size);
    int64_t n = 2, bytes;
    ATTN_CHECK(!__builtin_mul_overflow(n, num_blocks, &n) && !__builtin_mul_overflow(n, block_size, &n) &&
                   !__builtin_mul_overflow(n, num_kv_heads, &n) && !__builtin_mul_overflow(n, head_size, &n) &&
                   !__builtin_mul_overflow(n, (int64_t)attn_dtype_size(dtype), &bytes) &&
                   (uint64_t)bytes <= (uint64_t)SIZE_MAX,
               ATTN_STATUS_OVERFLOW, "num_blocks=%lld: the cache size 2*%lld*%lld*%lld*%lld elements overflows",
               (long long)num_blocks, (long long)num_blocks, (long long)block_size, (long long)num_kv_heads,
               (long long)head_size);
    void *data = attn_kv_pages_alloc((size_t)bytes);
    ATTN_CHECK(data != NULL, ATTN_STATUS_OUT_OF_MEMORY, "cache: allocating %lld bytes failed", (long long)bytes);
    const int64_t shape[5] = {2, num_blocks, block_size, num_kv_heads, head_size};
    *cache = attn_tensor_make(data, dtype, 5, shape);
    return ATTN_STATUS_OK;
}

attn_status attn_kv_cache_to_huge_pages(const attn_tensor *cache, int64_t *released_bytes_opt) {
    if (released_bytes_opt)
        *released_bytes_opt = 0;
    ATTN_CHECK(cache != NULL, ATTN_STATUS_INVALID_ARGUMENT, "cache: is NULL");
    ATTN_TRY(attn_tensor_check(cache, "cache", -1, 0));
    ATTN_CHECK(attn_dtype_size(cache->dtype) > 0, ATTN_STATUS_INVALID_ARGUMENT,
               "cache: dtype %s packs two elements per byte, expected a view of whole bytes (u8)",
               attn_dtype_name(cache->dtype));
    for (int32_t d = 0; d < cache->ndim; d++)
        ATTN_CHECK(cache->strides[d] >= 0, ATTN_STATUS_INVALID_ARGUMENT,
                   "cache: strides[%d]=%lld, expected >= 0 (a view over two allocations: pass each one)", (int)d,
                   (long long)cache->strides[d]);
    uintptr_t lo, hi;
    attn_tensor_span(cache, &lo, &hi);
    const int64_t released = attn_kv_pages_to_huge((void *)lo, (size_t)(hi - lo));
    if (released_bytes_opt)
        *released_bytes_opt = released;
    return ATTN_STATUS_OK;
}

void attn_kv_cache_free(attn_tensor *cache) {
    if (!cache)
        return;
    attn_kv_pages_free(cache->data);
    cache->data = NULL;
}
