/*
 * tile_kv_neon.c — qk_tile_kv / pv_rows_kv on Advanced SIMD: K/V rows in their storage dtype (f32, f16,
 * bf16) read in place and widened in registers, so a decode step makes no conversion pass.
 *
 * qk ≤ 4 rows: the keys-in-lanes kernel of qk_tile_neon (neon_qk.h) on the raw rows; more rows: rows widened
 * in chunks of 16 keys on the stack and handed to qk_tile_neon (generic/tile_kernels_kv.h). pv_rows_kv: a
 * row-major accumulator with head dimensions in lanes, V loaded in place, each row's p[k] broadcast; for
 * bf16 V the 32-bit lanes are split into their two 16-bit halves by a shift and a mask, which is the
 * pair-split column order of attn_rows_kv_col (kernels.h). Every output is the same FMA chain as the float
 * kernels' (qk over d ascending from 0, pv over k ascending from the incoming o) and widening is exact, so
 * results are bitwise qk_tile_neon / pv_tile_neon on rows converted by cvt_to_f32.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "tile_kv_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>
#include <math.h>

#include "kernels/generic/tile_kernels_kv.h"
#include "kernels/kernels.h"
#include "kernels/neon/neon_qk.h"

/* kn_qk_keys for 1..4 rows (the row count a compile-time constant for each). */
static KN_ALWAYS_INLINE void kn_qk_kv_few(const float *q_t, int64_t num_rows, int64_t head_size,
                                          const void *const *k_rows, attn_dtype dt, int64_t num_keys, float *s) {
    switch (num_rows) {
    case 1: kn_qk_keys(q_t, head_size, k_rows, dt, num_keys, s, 1); return;
    case 2: kn_qk_keys(q_t, head_size, k_rows, dt, num_keys, s, 2); return;
    case 3: kn_qk_keys(q_t, head_size, k_rows, dt, num_keys, s, 3); return;
    default: kn_qk_keys(q_t, head_size, k_rows, dt, num_keys, s, 4); return;
    }
}

void attn_k_qk_tile_kv_neon(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                            attn_dtype kv_dtype, int64_t num_keys, float *s) {
    if (kv_dtype == ATTN_DTYPE_F32) {
        attn_k_qk_tile_neon(q_t, num_rows, head_size, (const float *const *)k_rows, num_keys, s);
        return;
    }
    if (num_rows <= 4) {
        switch (kv_dtype) {
        case ATTN_DTYPE_BF16: kn_qk_kv_few(q_t, num_rows, head_size, k_rows, ATTN_DTYPE_BF16, num_keys, s); return;
        case ATTN_DTYPE_F16: kn_qk_kv_few(q_t, num_rows, head_size, k_rows, ATTN_DTYPE_F16, num_keys, s); return;
        case ATTN_DTYPE_FP8_E4M3:
            kn_qk_kv_few(q_t, num_rows, head_size, k_rows, ATTN_DTYPE_FP8_E4M3, num_keys, s);
            return;
        case ATTN_DTYPE_FP8_E5M2:
            kn_qk_kv_few(q_t, num_rows, head_size, k_rows, ATTN_DTYPE_FP8_E5M2, num_keys, s);
            return;
        default: break;
        }
    }
    k_qk_tile_kv_chunked(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, attn_k_qk_tile_neon,
                         attn_k_cvt_to_f32_neon);
}

/* The 4 V vectors of the 16 dimensions [d0, d0 + 16) of a row, in the order of the accumulator columns
 * kn_pv_cols gives: in place for f32/f16; bf16 inside a full 32-column block: the even dimensions of the
 * two 8-element halves, then the odd ones. */
static KN_ALWAYS_INLINE void kn_v16(const void *row, int64_t d0, attn_dtype dt, float32x4_t x[4]) {
    if (dt == ATTN_DTYPE_BF16) {
        /* 16-bit loads reinterpreted (rows are only 2-byte aligned): u32 lane j = elements 2j (low), 2j + 1 */
        const uint32x4_t u0 = vreinterpretq_u32_u16(vld1q_u16((const uint16_t *)row + d0));
        const uint32x4_t u1 = vreinterpretq_u32_u16(vld1q_u16((const uint16_t *)row + d0 + 8));
        const uint32x4_t hi = vdupq_n_u32(0xffff0000u);
        x[0] = vreinterpretq_f32_u32(vshlq_n_u32(u0, 16));
        x[1] = vreinterpretq_f32_u32(vshlq_n_u32(u1, 16));
        x[2] = vreinterpretq_f32_u32(vandq_u32(u0, hi));
        x[3] = vreinterpretq_f32_u32(vandq_u32(u1, hi));
    } else if (kn_is_fp8(dt)) { /* 16 codes, in place */
        const uint8x16_t c = vld1q_u8((const uint8_t *)row + d0);
        const uint16x8_t lo = vmovl_u8(vget_low_u8(c)), hi = vmovl_u8(vget_high_u8(c));
        x[0] = kn_fp8x4(vget_low_u16(lo), dt);
        x[1] = kn_fp8x4(vget_high_u16(lo), dt);
        x[2] = kn_fp8x4(vget_low_u16(hi), dt);
        x[3] = kn_fp8x4(vget_high_u16(hi), dt);
    } else {
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) x[j] = kn_load4(row, d0 + 4 * j, dt);
    }
}

/* Column of accumulator vector j (of 4) for the 16 dimensions at d0 (see kn_v16). */
static KN_ALWAYS_INLINE int64_t kn_pv_col(int64_t d0, int j, attn_dtype dt) {
    if (dt == ATTN_DTYPE_BF16) return (d0 & ~(int64_t)31) + ((d0 & 16) >> 1) + (j & 1) * 4 + (j >> 1) * 16;
    return d0 + 4 * j;
}

/* Rows [r0, r0 + R) of o_d, dimensions [d0, d0 + 16): acc = fma(v[k][d], p[k][r], acc), k ascending. */
static KN_ALWAYS_INLINE void kn_pv_rows16(const float *p, int64_t num_keys, int64_t r0, const void *const *v_rows,
                                          attn_dtype dt, int64_t head_size_v, int64_t d0, float *o_d, const int R) {
    float32x4_t acc[4][4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
            acc[r][j] = vld1q_f32(o_d + (r0 + r) * head_size_v + kn_pv_col(d0, j, dt));
    for (int64_t k = 0; k < num_keys; k++) {
        float32x4_t x[4];
        kn_v16(v_rows[k], d0, dt, x);
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
            const float pr = pk[r];
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) acc[r][j] = vfmaq_n_f32(acc[r][j], x[j], pr);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
            vst1q_f32(o_d + (r0 + r) * head_size_v + kn_pv_col(d0, j, dt), acc[r][j]);
}

static KN_ALWAYS_INLINE void kn_pv_rows_kv(const float *p, int64_t num_keys, int64_t num_rows,
                                           const void *const *v_rows, attn_dtype dt, int64_t head_size_v,
                                           float *o_d) {
    /* vector part: 16-dimension units (bf16: only inside full 32-column blocks), then scalar tail columns */
    const int64_t dv = dt == ATTN_DTYPE_BF16 ? (head_size_v & ~(int64_t)31) : (head_size_v & ~(int64_t)15);
    for (int64_t d0 = 0; d0 < dv; d0 += 16) {
        int64_t r = 0;
        for (; r + 4 <= num_rows; r += 4) kn_pv_rows16(p, num_keys, r, v_rows, dt, head_size_v, d0, o_d, 4);
        switch (num_rows - r) {
        case 3: kn_pv_rows16(p, num_keys, r, v_rows, dt, head_size_v, d0, o_d, 3); break;
        case 2: kn_pv_rows16(p, num_keys, r, v_rows, dt, head_size_v, d0, o_d, 2); break;
        case 1: kn_pv_rows16(p, num_keys, r, v_rows, dt, head_size_v, d0, o_d, 1); break;
        default: break;
        }
    }
    /* columns past the vector part sit in place (attn_rows_kv_col) */
    for (int64_t r = 0; r < num_rows; r++) {
        float *o = o_d + r * head_size_v;
        for (int64_t d = dv; d < head_size_v; d++) {
            float acc = o[d];
            for (int64_t k = 0; k < num_keys; k++) acc = fmaf(kn_load1(v_rows[k], d, dt), p[k * ATTN_QB + r], acc);
            o[d] = acc;
        }
    }
}

void attn_k_pv_rows_kv_neon(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                            attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    switch (kv_dtype) {
    case ATTN_DTYPE_F32: kn_pv_rows_kv(p, num_keys, num_rows, v_rows, ATTN_DTYPE_F32, head_size_v, o_d); return;
    case ATTN_DTYPE_F16: kn_pv_rows_kv(p, num_keys, num_rows, v_rows, ATTN_DTYPE_F16, head_size_v, o_d); return;
    case ATTN_DTYPE_BF16: kn_pv_rows_kv(p, num_keys, num_rows, v_rows, ATTN_DTYPE_BF16, head_size_v, o_d); return;
    case ATTN_DTYPE_FP8_E4M3:
        kn_pv_rows_kv(p, num_keys, num_rows, v_rows, ATTN_DTYPE_FP8_E4M3, head_size_v, o_d);
        return;
    case ATTN_DTYPE_FP8_E5M2:
        kn_pv_rows_kv(p, num_keys, num_rows, v_rows, ATTN_DTYPE_FP8_E5M2, head_size_v, o_d);
        return;
    default: k_pv_rows_kv(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, attn_k_cvt_to_f32_neon); return;
    }
}
