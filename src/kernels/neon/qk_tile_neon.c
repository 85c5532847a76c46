/*
 * qk_tile_neon.c — S = Q·Kᵀ for one (query block × kv tile) on Advanced SIMD (4 lanes, 32 registers).
 *
 * Lane invariance (the determinism contract, kernel_list.h): every s[k][r] is s = fma(k[d], q[d], s) for
 * d = 0, 1, … from s = 0 — the chain of qk_tile_avx2/avx512 — whatever num_rows, the lane or the key group,
 * so a row's bits do not depend on its neighbours; no reduction trees over d.
 *
 * > 4 rows: query rows in lanes (2, 4 or 8 vectors for ≤ 8, ≤ 16, ≤ 32 rows), register tiles of 8, 4 or 2
 * keys, each key's k[d] broadcast by element. ≤ 4 rows (decode: one token × a GQA group of ≤ 4) leave most
 * lanes idle, so there the lanes hold 4 keys: 4×4 blocks of K are transposed in registers and each row's
 * q[d] is broadcast (kn_qk_keys4, shared with qk_tile_kv through neon_qk.h); the same chains, operands of
 * the fma swapped, which the fma does not see.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "qk_tile_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>

#include "kernels/kernels.h"
#include "kernels/neon/neon_qk.h"

/* s[b][4·v + lane] = Σ_d k_rows[b][d]·q_t[d][4·v + lane] for b < NB keys, v < NV vectors. */
static KN_ALWAYS_INLINE void kn_qk_panel(const float *restrict q_t, int64_t head_size, const float *const *k_rows,
                                         float *restrict s, const int NB, const int NV) {
    float32x4_t acc[8][8];
    const float *kp[8];
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) {
        kp[b] = k_rows[b];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[b][v] = vdupq_n_f32(0.0f);
    }
    for (int64_t d = 0; d < head_size; d++) {
        float32x4_t q[8];
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) q[v] = vld1q_f32(q_t + d * ATTN_QB + 4 * v);
        _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) {
            const float x = kp[b][d];
            _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) acc[b][v] = vfmaq_n_f32(acc[b][v], q[v], x);
        }
    }
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 8") for (int v = 0; v < NV; v++) vst1q_f32(s + b * ATTN_QB + 4 * v, acc[b][v]);
}

/* All keys for NV row vectors: tiles of NB keys (NB · NV ≤ 16 accumulators), then single keys. */
static KN_ALWAYS_INLINE void kn_qk_rows(const float *q_t, int64_t head_size, const float *const *k_rows,
                                        int64_t num_keys, float *s, const int NB, const int NV) {
    int64_t k = 0;
    for (; k + NB <= num_keys; k += NB) kn_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, NB, NV);
    for (; k < num_keys; k++) kn_qk_panel(q_t, head_size, k_rows + k, s + k * ATTN_QB, 1, NV);
}

void attn_k_qk_tile_neon(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                         int64_t num_keys, float *s) {
    const void *const *rows = (const void *const *)k_rows;
    switch (num_rows) {
    case 1: kn_qk_keys(q_t, head_size, rows, ATTN_DTYPE_F32, num_keys, s, 1); return;
    case 2: kn_qk_keys(q_t, head_size, rows, ATTN_DTYPE_F32, num_keys, s, 2); return;
    case 3: kn_qk_keys(q_t, head_size, rows, ATTN_DTYPE_F32, num_keys, s, 3); return;
    case 4: kn_qk_keys(q_t, head_size, rows, ATTN_DTYPE_F32, num_keys, s, 4); return;
    default: break;
    }
    if (num_rows <= 8)
        kn_qk_rows(q_t, head_size, k_rows, num_keys, s, 8, 2);
    else if (num_rows <= 16)
        kn_qk_rows(q_t, head_size, k_rows, num_keys, s, 4, 4);
    else
        kn_qk_rows(q_t, head_size, k_rows, num_keys, s, 2, 8);
}
