/*
 * tile_kernels_kv.h — the storage-dtype K/V entries (qk_tile_kv, pv_rows_kv) in portable C. qk: K rows are widened
 * to float32 in chunks of 16 keys on the stack and handed to the table's own float qk kernel; the widening is exact
 * and every score is an independent chain, so the result is bitwise that of qk_tile on rows converted by
 * cvt_to_f32. pv_rows_kv: the generic pv chain per element, row-major accumulator. Only `static inline` functions
 * (docs/CONTRIBUTING.md §7): each ISA folder compiles its own copy; hand-written ISA versions replace these on
 * the few-row (decode) shapes and fall back to them elsewhere.
 */
#ifndef ATTN_KERNELS_GENERIC_TILE_KERNELS_KV_H
#define ATTN_KERNELS_GENERIC_TILE_KERNELS_KV_H

#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "kernels/kernels.h"

#define ATTN_KV_CHUNK 16 /* keys widened at a time */

typedef void (*attn_qk_fn)(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                           int64_t num_keys, float *s);
typedef void (*attn_cvt_fn)(const void *src, attn_dtype dtype, float *dst, int64_t n);

/* qk_tile_kv through `qk` (the table's float kernel) on rows widened by `cvt` (s: [num_keys][ATTN_QB]). */
static inline void k_qk_tile_kv_chunked(const float *q_t, int64_t num_rows, int64_t head_size,
                                        const void *const *k_rows, attn_dtype kv_dtype, int64_t num_keys, float *s,
                                        attn_qk_fn qk, attn_cvt_fn cvt) {
    float buf[ATTN_KV_CHUNK][ATTN_HEAD_SIZE_MAX + 16];
    const float *rows[ATTN_KV_CHUNK];
    for (int64_t k = 0; k < num_keys; k += ATTN_KV_CHUNK) {
        const int64_t nk = num_keys - k < ATTN_KV_CHUNK ? num_keys - k : ATTN_KV_CHUNK;
        for (int64_t j = 0; j < nk; j++) {
            if (kv_dtype == ATTN_DTYPE_F32) {
                rows[j] = (const float *)k_rows[k + j];
            } else {
                cvt(k_rows[k + j], kv_dtype, buf[j], head_size);
                rows[j] = buf[j];
            }
        }
        qk(q_t, num_rows, head_size, rows, nk, s + k * ATTN_QB);
    }
}

/* pv_rows_kv in portable C: o_d[r][c(d)] = o_d[r][c(d)] + v[k][d]·p[k][r], k ascending (the operations of
 * k_pv_w, one multiply and one add per term; c = attn_rows_kv_col), each V row widened on the stack. */
static inline void k_pv_rows_kv(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_cvt_fn cvt) {
    float buf[ATTN_HEAD_SIZE_MAX + 16];
    for (int64_t k = 0; k < num_keys; k++) {
        const float *v = (const float *)v_rows[k];
        if (kv_dtype != ATTN_DTYPE_F32) {
            cvt(v_rows[k], kv_dtype, buf, head_size_v);
            v = buf;
        }
        for (int64_t r = 0; r < num_rows; r++) {
            const float pk = p[k * ATTN_QB + r];
            float *o = o_d + r * head_size_v;
            if (kv_dtype == ATTN_DTYPE_BF16)
                for (int64_t d = 0; d < head_size_v; d++)
                    o[attn_rows_kv_col(d, head_size_v, kv_dtype)] += v[d] * pk;
            else
                for (int64_t d = 0; d < head_size_v; d++)
                    o[d] += v[d] * pk;
        }
    }
}

#endif
