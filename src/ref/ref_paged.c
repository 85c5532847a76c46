/*
 * ref_paged.c — literal reference versions of the paged-cache data movement, for tests and `attn check`:
 * the slot_mapping scatter and the gather of one sequence's keys/values through its block ids into
 * contiguous rows. Contiguous caches only, element by element, no validation (callers pass valid input).
 * fp8 caches: encode(x / scale) by a nearest-code search over the format's values read literally.
 */
#include <math.h>

#include "core/dtype.h"
#include "ref/ref.h"

/* Element offset of (kv, slot, head, d) in a contiguous [2, num_blocks, block_size, num_kv_heads, head_size]. */
static int64_t ref_cache_index(int64_t num_blocks, int64_t block_size, int64_t num_kv_heads, int64_t head_size,
                               int64_t kv, int64_t slot, int64_t head, int64_t d) {
    const int64_t block = slot / block_size, row = slot % block_size;
    return (((kv * num_blocks + block) * block_size + row) * num_kv_heads + head) * head_size + d;
}

/* Value of FP8 code c (OCP OFP8 rev 1.0 read literally); NaN for NaN codes, ±inf for E5M2 infinities. */
static double ref_fp8_value(attn_dtype fmt, int c) {
    const int e5m2 = fmt == ATTN_DTYPE_FP8_E5M2, man_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const int mag = c & 0x7F, e = mag >> man_bits, m = mag & ((1 << man_bits) - 1);
    const double sign = (c & 0x80) ? -1.0 : 1.0;
    if (!e5m2 && mag == 0x7F) return NAN;
    if (e5m2 && e == 31) return m == 0 ? sign * INFINITY : NAN;
    const double v = e == 0 ? ldexp((double)m, 1 - bias - man_bits) : ldexp(1.0 + ldexp((double)m, -man_bits), e - bias);
    return sign * v;
}

uint8_t attn_ref_fp8_encode(attn_dtype fmt, float x) {
    const uint8_t sign = signbit(x) ? 0x80 : 0x00;
    if (isnan(x)) return (uint8_t)(sign | 0x7F);
    const double max = fmt == ATTN_DTYPE_FP8_E5M2 ? 57344.0 : 448.0;
    const double a = fabs((double)x) > max ? max : fabs((double)x); /* saturation, ±inf included */
    int best = 0; /* nearest finite magnitude code; ties to the even code */
    double best_d = INFINITY;
    for (int c = 0; c < 0x80; c++) {
        const double v = ref_fp8_value(fmt, c);
        if (!isfinite(v)) continue;
        const double dist = fabs(a - v);
        if (dist < best_d || (dist == best_d && (c & 1) == 0)) best = c, best_d = dist;
    }
    return (uint8_t)(sign | best);
}

void attn_ref_reshape_and_cache(const float *key, const float *value, int64_t num_tokens, int64_t num_kv_heads,
                                int64_t head_size, const int64_t *slot_mapping, void *cache, attn_dtype cache_dtype,
                                int64_t num_blocks, int64_t block_size) {
    attn_ref_reshape_and_cache_scaled(key, value, num_tokens, num_kv_heads, head_size, slot_mapping, cache, cache_dtype,
                                      num_blocks, block_size, 1.0f, 1.0f);
}

void attn_ref_reshape_and_cache_scaled(const float *key, const float *value, int64_t num_tokens, int64_t num_kv_heads,
                                       int64_t head_size, const int64_t *slot_mapping, void *cache,
                                       attn_dtype cache_dtype, int64_t num_blocks, int64_t block_size, float k_scale,
                                       float v_scale) {
    attn_ref_reshape_and_cache_head_scaled(key, value, num_tokens, num_kv_heads, head_size, slot_mapping, cache,
                                           cache_dtype, num_blocks, block_size, k_scale, v_scale, NULL, NULL);
}

void attn_ref_reshape_and_cache_head_scaled(const float *key, const float *value, int64_t num_tokens,
                                            int64_t num_kv_heads, int64_t head_size, const int64_t *slot_mapping,
                                            void *cache, attn_dtype cache_dtype, int64_t num_blocks,
                                            int64_t block_size, float k_scale, float v_scale, const float *k_scales,
                                            const float *v_scales) {
    const int fp8 = attn_dtype_is_fp8(cache_dtype);
    for (int64_t t = 0; t < num_tokens; t++) {
        const int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        for (int64_t g = 0; g < num_kv_heads; g++)
            for (int64_t d = 0; d < head_size; d++) {
                const int64_t src = (t * num_kv_heads + g) * head_size + d;
                const int64_t ki = ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 0, slot, g, d);
                const int64_t vi = ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 1, slot, g, d);
                if (fp8) { /* stored = encode(x / scale), x / scale in float32 (vLLM scaled_convert) */
                    const float ks = k_scales ? k_scales[g] : k_scale, vs = v_scales ? v_scales[g] : v_scale;
                    ((uint8_t *)cache)[ki] = attn_ref_fp8_encode(cache_dtype, key[src] / ks);
                    ((uint8_t *)cache)[vi] = attn_ref_fp8_encode(cache_dtype, value[src] / vs);
                } else {
                    attn_store_f(cache, cache_dtype, ki, key[src]);
                    attn_store_f(cache, cache_dtype, vi, value[src]);
                }
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
                if (attn_dtype_is_fp8(dtype)) { /* codes copied as they are */
                    ((uint8_t *)k_out)[dst] = ((const uint8_t *)cache)[ref_cache_index(
                        num_blocks, block_size, num_kv_heads, head_size, 0, slot, g, d)];
                    ((uint8_t *)v_out)[dst] = ((const uint8_t *)cache)[ref_cache_index(
                        num_blocks, block_size, num_kv_heads, head_size, 1, slot, g, d)];
                    continue;
                }
                attn_store_f(k_out, dtype, dst,
                             attn_load_f(cache, dtype,
                                         ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 0, slot, g, d)));
                attn_store_f(v_out, dtype, dst,
                             attn_load_f(cache, dtype,
                                         ref_cache_index(num_blocks, block_size, num_kv_heads, head_size, 1, slot, g, d)));
            }
    }
}
