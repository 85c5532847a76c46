/*
 * neon_qk.h — the keys-in-lanes Q·Kᵀ of the NEON table for ≤ 4 query rows, on K rows of any float storage
 * dtype (static inline only, docs/CONTRIBUTING.md §7). Used by qk_tile_neon.c (f32 rows) and tile_kv_neon.c (K rows
 * in place in f32/f16/bf16, widened in registers; the widening is exact, so the bits equal qk_tile's on
 * rows converted by cvt_to_f32).
 */
#ifndef ATTN_KERNELS_NEON_NEON_QK_H
#define ATTN_KERNELS_NEON_NEON_QK_H

#include "kernels/kernels.h"
#include "kernels/neon/neon_common.h"

/* s[b][r] for the 4 keys rows[0..4) (nk ≤ 4 of them real; a missing key reads row 0 and is not stored)
 * and r < R ≤ 4: acc[r] lane b = fma chain over d ascending from 0 of K[b][d]·q[d][r]. Lanes r ≥ R of the
 * stored s rows are set to 0. */
static KN_ALWAYS_INLINE void kn_qk_keys4(const float *restrict q_t, int64_t head_size, const void *const *rows,
                                         attn_dtype dt, int nk, float *restrict s, const int R) {
    const void *kp[4];
    for (int b = 0; b < 4; b++) kp[b] = rows[b < nk ? b : 0];
    float32x4_t acc[4];
    for (int r = 0; r < 4; r++) acc[r] = vdupq_n_f32(0.0f);
    int64_t d0 = 0;
    for (; d0 + 4 <= head_size; d0 += 4) {
        float32x4_t x[4];
        _Pragma("GCC unroll 4") for (int b = 0; b < 4; b++) x[b] = kn_load4(kp[b], d0, dt);
        kn_transpose4(x); /* x[j] lane b = K[b][d0 + j] */
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
            kn_fma_lanes(acc, x[j], vld1q_f32(q_t + (d0 + j) * ATTN_QB), R);
    }
    for (; d0 < head_size; d0++) {
        float32x4_t x = vdupq_n_f32(0.0f);
        x = vsetq_lane_f32(kn_load1(kp[0], d0, dt), x, 0);
        x = vsetq_lane_f32(kn_load1(kp[1], d0, dt), x, 1);
        x = vsetq_lane_f32(kn_load1(kp[2], d0, dt), x, 2);
        x = vsetq_lane_f32(kn_load1(kp[3], d0, dt), x, 3);
        kn_fma_lanes(acc, x, vld1q_f32(q_t + d0 * ATTN_QB), R);
    }
    for (int r = R; r < 4; r++) acc[r] = vdupq_n_f32(0.0f);
    kn_transpose4(acc); /* acc[b] lane r = s[b][r] */
    for (int b = 0; b < nk; b++) vst1q_f32(s + b * ATTN_QB, acc[b]);
}

/* All keys, 4 at a time, for R ≤ 4 rows. */
static KN_ALWAYS_INLINE void kn_qk_keys(const float *q_t, int64_t head_size, const void *const *rows, attn_dtype dt,
                                        int64_t num_keys, float *s, const int R) {
    int64_t k = 0;
    for (; k + 4 <= num_keys; k += 4) kn_qk_keys4(q_t, head_size, rows + k, dt, 4, s + k * ATTN_QB, R);
    if (k < num_keys) kn_qk_keys4(q_t, head_size, rows + k, dt, (int)(num_keys - k), s + k * ATTN_QB, R);
}

#endif
