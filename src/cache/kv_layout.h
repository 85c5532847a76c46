/*
 * kv_layout.h — the paged KV cache layout [2, num_blocks, block_size, num_kv_heads, head_size] (index 0 =
 * key, 1 = value) as byte strides, its validation, and slot → row address helpers. Shared by the cache
 * ops (src/cache), the paged attention entries (src/api) and the reference cache ops (src/ref).
 */
#ifndef ATTN_CACHE_KV_LAYOUT_H
#define ATTN_CACHE_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "attn/attn.h"

struct attn_kernels;

typedef struct attn_kv_layout {
    char *base;            /* element [0][0][0][0][0]                                  */
    attn_dtype dtype;      /* f32 / f16 / bf16 / fp8_e4m3 / fp8_e5m2 (u8: byte moves only) */
    int64_t elem_size;     /* bytes per element                                         */
    int64_t num_blocks, block_size, num_kv_heads, head_size;
    int64_t kv_stride;     /* bytes between the key and the value cache                 */
    int64_t block_stride;  /* bytes between blocks                                      */
    int64_t row_stride;    /* bytes between token rows of a block                       */
    int64_t head_stride;   /* bytes between kv heads of a row                           */
} attn_kv_layout;

/* Validates a cache view (5-D, float or fp8 dtype, last dim contiguous, aligned) and fills *l. `name` is used in
 * messages ("kv_cache: shape[0]=3, expected 2"). */
attn_status attn_kv_layout_of(const attn_tensor *cache, const char *name, attn_kv_layout *l);
/* attn_kv_layout_of that also accepts a U8 cache (vLLM's allocation of an fp8 cache), for the entries that
 * move blocks as bytes (copy_blocks, swap_blocks). */
attn_status attn_kv_layout_of_bytes(const attn_tensor *cache, const char *name, attn_kv_layout *l);

/* A key cache and a value cache described apart (attn_paged_attention_kv, attn_reshape_and_cache_kv): each
 * [num_blocks, block_size, num_kv_heads, head_size] of the same shape and dtype (float or fp8, element-aligned);
 * the value cache's head dimension contiguous, the key cache's strides any non-negative ones but a zero strides[3]
 * (a key cache stored by dimension: strides[3] = block_size, strides[1] = 1). Fills *k and *v (kv_stride 0) and the
 * byte distance between a key's head dimensions. Messages name key_cache / value_cache. */
attn_status attn_kv_split_of(const attn_tensor *key_cache, const attn_tensor *value_cache, attn_kv_layout *k,
                             attn_kv_layout *v, int64_t *k_dim_stride);

/* Byte address of (kv, block, row, head): kv 0 = key, 1 = value. */
static inline char *attn_kv_row(const attn_kv_layout *l, int64_t kv, int64_t block, int64_t row, int64_t head) {
    return l->base + kv * l->kv_stride + block * l->block_stride + row * l->row_stride + head * l->head_stride;
}

/* Byte address of slot `slot` (>= 0, < num_blocks·block_size), kv head `head`. */
static inline char *attn_kv_slot(const attn_kv_layout *l, int64_t kv, int64_t slot, int64_t head) {
    return attn_kv_row(l, kv, slot / l->block_size, slot % l->block_size, head);
}

/* ---- operations (kv_cache.c); arguments already validated ---- */

/* Scatter of key/value rows [num_tokens, num_kv_heads, head_size] (byte strides) to slots (< 0 skipped). */
typedef struct attn_kv_rows {
    const char *key, *value;
    attn_dtype dtype;
    int64_t key_row_stride, key_head_stride, value_row_stride, value_head_stride; /* bytes */
    float k_scale, v_scale; /* fp8 cache: stored = encode(x / scale); ignored otherwise */
    const float *k_scales, *v_scales; /* [num_kv_heads] or NULL: per-head scales replacing the scalar */
} attn_kv_rows;
/* `kern`: the caller's kernel table, whose cvt_to_fp8 encodes the rows of an fp8 cache (bitwise the scalar
 * attn_fp8_from_float on every table, so the cache bytes do not depend on the table). */
void attn_kv_scatter(const attn_kv_layout *cache, const attn_kv_rows *rows, const attn_tensor *slot_mapping,
                     int64_t num_tokens, const struct attn_kernels *kern);
/* attn_kv_scatter into a key cache and a value cache described apart (attn_kv_split_of): each key element at its
 * own address (k_dim_stride apart), the same codes and conversions as attn_kv_scatter. */
void attn_kv_scatter_split(const attn_kv_layout *k, int64_t k_dim_stride, const attn_kv_layout *v,
                           const attn_kv_rows *rows, const attn_tensor *slot_mapping, int64_t num_tokens,
                           const struct attn_kernels *kern);
/* The scatter into an fp8 cache (attn_kv_scatter calls it for FP8_E4M3 / FP8_E5M2 caches). */
void attn_kv_scatter_fp8(const attn_kv_layout *cache, const attn_kv_rows *rows, const attn_tensor *slot_mapping,
                         int64_t num_tokens, const struct attn_kernels *kern);

/* Zero-filled memory for a cache of `bytes` (kv_alloc.c): 2 MiB-aligned and advised MADV_HUGEPAGE on Linux when
 * bytes >= 2 MiB, else 64-byte aligned; NULL when out of memory. Released by attn_kv_pages_free. */
void *attn_kv_pages_alloc(size_t bytes);
void attn_kv_pages_free(void *p);
/* Memory an engine allocated itself onto transparent huge pages (Linux; elsewhere nothing happens): the 2 MiB pages
 * within [data, data + bytes) are advised MADV_HUGEPAGE, and those holding only zero bytes, in a private anonymous
 * mapping, are released (MADV_DONTNEED) so that their next touch maps a zero-filled huge page; pages holding a
 * nonzero byte keep their memory. The bytes released (0 when nothing could be). No other thread may write the range
 * meanwhile. */
int64_t attn_kv_pages_to_huge(void *data, size_t bytes);

/* Whole-block copy (keys and values) from src block `src_block` to dst block `dst_block`. */
void attn_kv_copy_block(const attn_kv_layout *dst, int64_t dst_block, const attn_kv_layout *src, int64_t src_block);

#endif
