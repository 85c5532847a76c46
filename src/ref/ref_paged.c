/*
 * ref_paged.c — literal reference versions of the paged-cache data movement, for tests and `attn check`:
 * the slot_mapping scatter and the gather of one sequence's keys/values through its block ids into
 * contiguous rows. Contiguous caches only, element by element, no validation (callers pass valid input).
 */
#include "core/dtype.h"
#include "ref/ref.h"

/* Element offset of (kv, slot, head, d) in a contiguous [2, num_blocks, block_size, num_kv_heads, head_size]. */
static int64_t ref_cache_index(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                               int64_t kv, int64_t slot, int64_t head, int64_t d) {
    const int64_t block = slot / block_size, row = slot % block_size;
    return (((kv * num_blocks + block) * block_size + row) * num_kv_heads + head) * head_size + d;
}

void attn_ref_reshape_and_cache(const float *key, const float *value, int64_t num_tokens, int64_t num_kv_heads,
                                int64_t head_size, const int64_t *slot_mapping, void *cache, attn_dtype cache_dtype,
                                int64_t num_blocks, int64_t block_size) {
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        for (int64_t g = 0; g < num_kv_heads; g++)
            for (int64_t d = 0; d < head_size; d++) {
                const int64_t src = (t * num_kv_heads + g) * head_size + d;
                attn_store_f(cache, cache_dtype,
                             ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 0, slot, g, d), key[src]);
                attn_store_f(cache, cache_dtype,
                             ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 1, slot, g, d),
                             value[src]);
            }
    }
}

void attn_ref_gather_kv(const void *cache, attn_dtype dtype, int64_t num_blocks, int64_t block_size,
                        int64_t num_kv_heads, int64_t head_size, const int32_t *block_ids, int64_t seq_len,
                        void *k_out, void *v_out) {
    for (int64_t j = 0; j < seq_len; j++) {
        const int64_t slot = (int64_t)block_ids[j / block_size] * block_size + j % block_size;
        for (int64_t g = 0; g < num_kv_heads; g++)
            for (int64_t d = 0; d < head_size; d++) {
                const int64_t dst = (j * num_kv_heads + g) * head_size + d;
                attn_store_f(k_out, dtype, dst,
                             attn_load_f(cache, dtype,
                                         ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 0, slot, g, d)));
                attn_store_f(v_out, dtype, dst,
                             attn_load_f(cache, dtype,
                                         ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 1, slot, g, d)));
            }
    }
}
