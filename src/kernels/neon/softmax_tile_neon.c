/*
 * softmax_tile_neon.c — the online-softmax update of one kv tile, query rows in 4-lane vectors (one vector
 * per 4 rows, ceil(num_rows / 4) of them). Lane for lane the rule of k_softmax_w (generic/tile_kernels.h)
 * and of softmax_tile_avx2/avx512:
 *   tmax = max_k s (−inf start; NaN scores ignored, as by `s > tmax ? s : tmax`);
 *   m_new = tmax if tmax > m_old + 8·ln 2 or m_old = −inf, else m_old (lazy rescale; natural units);
 *   α = 1 if m_new = m_old or m_old = −inf, else exp2((m_old − m_new)·log2 e);
 *   P = exp2((s − m_new)·log2 e), exactly +0 where s = −inf; l = fma(α, l, Σ_k P) (k ascending); Oᵀ *= α when some
 *   α ≠ 1 (a lane with α = 1 is unchanged by it).
 * An all-masked tile therefore leaves m, l and Oᵀ bitwise unchanged. Masks are the driver's.
 */
#if !defined(__ARM_NEON) || !defined(__aarch64__)
#error "softmax_tile_neon.c must be compiled for aarch64 with Advanced SIMD"
#endif
#include <arm_neon.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/neon/neon_common.h"

void attn_k_softmax_tile_neon(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t,
                              int64_t head_size_v) {
    const int nv = (int)((num_rows + 3) / 4);
    const float32x4_t neg_inf = vdupq_n_f32(-INFINITY), one = vdupq_n_f32(1.0f), log2e = vdupq_n_f32(ATTN_LOG2E_F);
    float32x4_t alpha[ATTN_QB / 4];
    uint32x4_t any_rescale = vdupq_n_u32(0);
    for (int v = 0; v < nv; v++) {
        float *sv = s + 4 * v;
        float32x4_t tmax = neg_inf;
        for (int64_t k = 0; k < num_keys; k++) {
            const float32x4_t x = vld1q_f32(sv + k * ATTN_QB);
            tmax = vbslq_f32(vcgtq_f32(x, tmax), x, tmax);
        }
        const float32x4_t m_old = vld1q_f32(m + 4 * v);
        const uint32x4_t empty = vceqq_f32(m_old, neg_inf);
        const uint32x4_t grow = vcgtq_f32(tmax, vaddq_f32(m_old, vdupq_n_f32(ATTN_RESCALE_THRESHOLD)));
        const float32x4_t m_new = vbslq_f32(vorrq_u32(grow, empty), tmax, m_old);
        const uint32x4_t keep = vorrq_u32(vceqq_f32(m_new, m_old), empty);
        alpha[v] = vbslq_f32(keep, one, kn_exp2(vmulq_f32(vsubq_f32(m_old, m_new), log2e)));
        any_rescale = vorrq_u32(any_rescale, vmvnq_u32(vceqq_f32(alpha[v], one)));
        vst1q_f32(m + 4 * v, m_new);

        float32x4_t sum = vdupq_n_f32(0.0f);
        for (int64_t k = 0; k < num_keys; k++) {
            const float32x4_t x = vld1q_f32(sv + k * ATTN_QB);
            /* s = −inf gives exactly +0, even when m_new = −inf too (t would be NaN there) */
            const uint32x4_t dead = vceqq_f32(x, neg_inf);
            const float32x4_t pe = vbslq_f32(dead, vdupq_n_f32(0.0f), kn_exp2(vmulq_f32(vsubq_f32(x, m_new), log2e)));
            vst1q_f32(sv + k * ATTN_QB, pe);
            sum = vaddq_f32(sum, pe);
        }
        vst1q_f32(l + 4 * v, vfmaq_f32(sum, alpha[v], vld1q_f32(l + 4 * v)));
    }
    if (vmaxvq_u32(any_rescale) != 0) {
        for (int64_t d = 0; d < head_size_v; d++)
            for (int v = 0; v < nv; v++) {
                float *o = o_t + d * ATTN_QB + 4 * v;
                vst1q_f32(o, vmulq_f32(vld1q_f32(o), alpha[v]));
            }
    }
}
