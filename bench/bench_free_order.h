/*
 * bench_free_order.h — the free-order decode Q·Kᵀ of bench_free_order.c (a bench-only comparison point).
 */
#ifndef ATTN_BENCH_FREE_ORDER_H
#define ATTN_BENCH_FREE_ORDER_H

#include <stdint.h>

#define BFO_QB 32 /* the s tile's row stride, as ATTN_QB */

/* 1 where the CPU runs the variant (AVX-512 F/BW on x86-64). */
int bench_free_order_available(void);
/* qp [num_rows][D] from q_t [D][BFO_QB]: for bf16 K each 32-dimension block even dimensions first. */
void bench_free_order_prep(const float *q_t, int64_t num_rows, int64_t D, int bf16, float *qp);
/* s[k][r] = Σ_d K[k][d]·q[r][d] in a free order, r < num_rows (4 or 8), k < num_keys (a multiple of 16 /
 * num_rows), K rows f32 (bf16 = 0) or bf16, D a multiple of 32. */
void bench_free_order_qk(const float *qp, int64_t num_rows, int64_t D, const void *const *k_rows, int bf16,
                         int64_t num_keys, float *s);
/* The ordered Q·Kᵀ on K stored dimension by dimension: element (k, d) at k_cols[d·ld + k] (f32, or bf16 with
 * bf16 = 1), ld >= num_keys elements, num_keys a multiple of 32, num_rows 1–4 or 8. Keys in the lanes as in
 * qk_tile_kv and each score the same single FMA chain over d ascending, so the scores are bitwise qk_tile_kv's;
 * each column of 32 keys is one or two loads, no transpose. */
void bench_columns_qk(const float *q_t, int64_t num_rows, int64_t D, const void *k_cols, int64_t ld, int bf16,
                      int64_t num_keys, float *s);

#endif
