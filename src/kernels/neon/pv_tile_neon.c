/*
 * pv_tile_neon.c — O += P·V for one (query block × kv tile), query rows in 4-lane vectors: register tiles of
 * DB head dimensions × NV row vectors (8 × 1/2, 4 × 4, 2 × 8), each V element broadcast by element.
 *
 * Lane invariance: every o_t[d][r] is o = fma(v[k][d], p[k][r], o) for k = 0, 1, … from the incoming o —
 * the chain of pv_tile_avx2/avx512 and of pv_rows_kv — whatever num_rows or the dimension group.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "pv_tile_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>

#include "kernels/kernels.h"
#include "kernels/neon/neon_common.h"

/* o_t[d0 + j][4·v + lane] += Σ_k p[k][4·v + lane]·v_rows[k][d0 + j] for j < DB, v < NV. */
static KN_ALWAYS_INLINE void kn_pv_panel(const float *restrict p, int64_t num_keys, const float *const *v_rows,
                                         int64_t d0, float *restrict o_t, const int DB, const int NV) {
    float32x4_t acc[8][8];
    _Pragma("GCC unroll 8") for (int j = 0; j < DB; j++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[j][v] = vld1q_f32(o_t + (d0 + j) * ATTN_QB + 4 * v);
    for (int64_t k = 0; k < num_keys; k++) {
        float32x4_t pk[8];
        const float *vr = v_rows[k] + d0;
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) pk[v] = vld1q_f32(p + k * ATTN_QB + 4 * v);
        _Pragma("GCC unroll 8") for (int j = 0; j < DB; j++) {
            const float x = vr[j];
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[j][v] = vfmaq_n_f32(acc[j][v], pk[v], x);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < DB; j++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) vst1q_f32(o_t + (d0 + j) * ATTN_QB + 4 * v, acc[j][v]);
}

static KN_ALWAYS_INLINE void kn_pv_rows(const float *p, int64_t num_keys, const float *const *v_rows,
                                        int64_t head_size_v, float *o_t, const int DB, const int NV) {
    int64_t d = 0;
    for (; d + DB <= head_size_v; d += DB) kn_pv_panel(p, num_keys, v_rows, d, o_t, DB, NV);
    for (; d < head_size_v; d++) kn_pv_panel(p, num_keys, v_rows, d, o_t, 1, NV);
}

void attn_k_pv_tile_neon(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                         int64_t head_size_v, float *o_t) {
    if (num_rows <= 4)
        kn_pv_rows(p, num_keys, v_rows, head_size_v, o_t, 8, 1);
    else if (num_rows <= 8)
        kn_pv_rows(p, num_keys, v_rows, head_size_v, o_t, 8, 2);
    else if (num_rows <= 16)
        kn_pv_rows(p, num_keys, v_rows, head_size_v, o_t, 4, 4);
    else
        kn_pv_rows(p, num_keys, v_rows, head_size_v, o_t, 2, 8);
}
