/*
 * ref.h — the oracle (docs/CONTRIBUTING.md §5): scalar C, double accumulation, one thread, loops in formula order.
 * Used by tests, `attn check` and the attn_ref_* entry points only; never optimised.
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include "core/problem.h"

/* Computes every sequence of `p` literally: for each (sequence, head, query row) the visible logits in
 * double, soft-cap, ALiBi, the softmax with the optional sink, out and LSE (natural log).
 * Returns OUT_OF_MEMORY if its scratch row cannot be allocated (nothing written then). */
attn_status attn_ref_run(const attn_problem *p);

/* The oracle's own literal visibility rule (docs/SEMANTICS.md §2) for query row i and key
 * j of sequence s and query head h: causal, window, key-padding mask and explicit mask, ANDed. */
int attn_ref_visible(const attn_problem *p, const attn_seq_view *s, int64_t h, int64_t i, int64_t j);

/* ref_paged.c: literal paged-cache data movement on a contiguous cache
 * [2, num_blocks, block_size, num_kv_heads, head_size]. key/value: float [num_tokens, num_kv_heads, head_size];
 * slot_mapping [num_tokens] (< 0 skipped). gather: the first seq_len keys/values of a sequence with the given
 * block ids into k_out/v_out [seq_len, num_kv_heads, head_size] of the cache dtype. */
void attn_ref_reshape_and_cache(const float *key, const float *value, int64_t num_tokens, int64_t num_kv_heads,
                                int64_t head_size, const int64_t *slot_mapping, void *cache, attn_dtype cache_dtype,
                                int64_t num_blocks, int64_t block_size);
/* fp8 cache (FP8_E4M3 / FP8_E5M2): element = encode(x / scale) with x / scale in float32 (scales ignored for
 * float caches); attn_ref_reshape_and_cache is this with scales 1. gather copies fp8 codes as they are. */
void attn_ref_reshape_and_cache_scaled(const float *key, const float *value, int64_t num_tokens, int64_t num_kv_heads,
                                       int64_t head_size, const int64_t *slot_mapping, void *cache,
                                       attn_dtype cache_dtype, int64_t num_blocks, int64_t block_size, float k_scale,
                                       float v_scale);
/* Per-head scales: k_scales / v_scales [num_kv_heads] (kv head g stored as encode(x / k_scales[g])); NULL = the
 * scalar for every head. attn_ref_reshape_and_cache_scaled is this with NULL arrays. */
void attn_ref_reshape_and_cache_head_scaled(const float *key, const float *value, int64_t num_tokens,
                                            int64_t num_kv_heads, int64_t head_size, const int64_t *slot_mapping,
                                            void *cache, attn_dtype cache_dtype, int64_t num_blocks,
                                            int64_t block_size, float k_scale, float v_scale, const float *k_scales,
                                            const float *v_scales);
/* Literal saturating round-to-nearest-even FP8 encode: the nearest finite code by search (ties to the even code),
 * beyond max → ±max, NaN → S.1111111. */
uint8_t attn_ref_fp8_encode(attn_dtype fmt, float x);
void attn_ref_gather_kv(const void *cache, attn_dtype dtype, int64_t num_blocks, int64_t block_size,
                        int64_t num_kv_heads, int64_t head_size, const int32_t *block_ids, int64_t seq_len,
                        void *k_out, void *v_out);

#endif
