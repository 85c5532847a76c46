/*
 * kernel_list.h — THE list of micro-kernels (docs/KERNELS.md §3, docs/CONTRIBUTING.md §7). One X-macro
 * generates the table fields, the per-ISA prototypes and the table initialisers, so tables cannot drift.
 * Kernels know nothing of batches, pages, masks or threads: tiles in, tiles out, explicit sizes
 * (docs/CONTRIBUTING.md §6).
 *
 * Tile layouts (lanes = query rows, docs/KERNELS.md §2), lane stride ATTN_QB:
 *   q_t  [head_size][ATTN_QB]   query block transposed, unscaled (the driver scales finished dot products)
 *   s    [num_keys][ATTN_QB]    scores scale·q·k (natural units); −inf marks an invisible key; P in place after softmax
 *   o_t  [head_size_v][ATTN_QB] unnormalised output accumulator
 *   m, l [ATTN_QB]              running max (natural units) and running sum of exp2((s − m)·log2 e)
 * k_rows / v_rows are num_keys pointers to float32 rows (in place in the caller's tensor or a converted
 * copy). Only lanes [0, num_rows) are meaningful; kernels may compute other lanes on whatever is there.
 */
#ifndef ATTN_KERNEL_LIST_H
#define ATTN_KERNEL_LIST_H

#define ATTN_KERNEL_LIST(X)                                                                              \
    /* dst[0..n) = float(src[0..n)) for F32/F16/BF16 rows */                                             \
    X(void, cvt_to_f32, (const void *src, attn_dtype dtype, float *dst, int64_t n))                      \
    /* dst[0..n) = dtype(src[0..n)) with round-to-nearest-even */                                        \
    X(void, cvt_from_f32, (const float *src, attn_dtype dtype, void *dst, int64_t n))                    \
    /* dst[0..n) = fp8_dtype code (FP8_E4M3 / FP8_E5M2) of float(src[i]) / scale, src F32/F16/BF16: the   \
       float32 quotient encoded bitwise as attn_fp8_from_float does (attn_f32_to_fp8_bits, core/dtype.h:  \
       RNE, saturating, NaN → sign|0x7F). Used by the fp8 KV cache write (src/cache/kv_cache.c) */       \
    X(void, cvt_to_fp8, (const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype,        \
                         uint8_t *dst, int64_t n))                                                       \
    /* s[k][r] = Σ_d k_rows[k][d]·q_t[d][r], d ascending, for k < num_keys, r < num_rows */              \
    X(void, qk_tile, (const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows, \
                      int64_t num_keys, float *s))                                                       \
    /* online-softmax update of one kv tile: per lane tile max, lazy rescale (ATTN_RESCALE_THRESHOLD),  \
       s ← P = exp2((s − m)·ATTN_LOG2E_F) (exact 0 where s = −inf), l ← α·l + Σ P, o_t ← α·o_t */       \
    X(void, softmax_tile, (float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t, \
                           int64_t head_size_v))                                                         \
    /* o_t[d][r] += Σ_k p[k][r]·v_rows[k][d], k ascending */                                            \
    X(void, pv_tile, (const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,     \
                      int64_t head_size_v, float *o_t))                                                  \
    /* qk_tile on K rows in their storage dtype (F32/F16/BF16), read in place and widened in registers: \
       bitwise equal to qk_tile on the rows converted by cvt_to_f32 (the widening is exact). Decode  \
       blocks (few rows) use it so that no conversion pass through a workspace is made. */           \
    X(void, qk_tile_kv, (const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows, \
                         attn_dtype kv_dtype, int64_t num_keys, float *s))                               \
    /* o_d[r][c(d)] += Σ_k p[k][r]·v_rows[k][d], k ascending, for r < num_rows: P·V of few-row        \
       (decode) blocks with V rows in their storage dtype and a row-major accumulator o_d               \
       [num_rows][head_size_v] (d in lanes, no transposes; c = attn_rows_kv_col, kernels.h). Each       \
       element is the same chain as pv_tile's o_t[d][r] on the converted rows, so the bits are equal. */ \
    X(void, pv_rows_kv, (const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,   \
                         attn_dtype kv_dtype, int64_t head_size_v, float *o_d))                          \
    /* dst[c·dst_stride + r] = src[r·src_stride + c] for r < rows, c < cols: the copies between row-major \
       rows and the lane tiles (query rows into q_t, finished o_t rows out); exact */                   \
    X(void, transpose, (const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,      \
                        int64_t dst_stride))                                                             \
    /* s[k][r] = scale·s[k][r] for k < num_keys, r < num_rows (one multiply each): the logit scale */    \
    X(void, scale_tile, (float *s, int64_t num_keys, int64_t num_rows, float scale))

#endif
