/*
 * tile_kernels.h — portable C bodies of every kernel in kernel_list.h, written so compilers vectorise them
 * with query rows in SIMD lanes (docs/KERNELS.md §2). Only `static inline` functions (docs/CONTRIBUTING.md §7):
 * each ISA folder includes this file and compiles its own copy with its own flags, so an AVX-512 copy never
 * leaks into generic code. Hand-written intrinsic kernels replace these per kernel and per ISA.
 *
 * Numerical contract (what keeps results independent of blocking): every lane's arithmetic is the same
 * sequence of operations whatever the lane count W and whichever key group a key falls in — dot products
 * run over d ascending, P·V over k ascending, one multiply-add per term.
 */
#ifndef ATTN_KERNELS_GENERIC_TILE_KERNELS_H
#define ATTN_KERNELS_GENERIC_TILE_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "kernels/kernels.h"
#include "kernels/generic/tile_kernels_kv.h"

/* ---------------------------------------------------------------------------------------------
 * exp2 for one lane: round-to-nearest split t = n + f, f in [−½, ½], degree-7 Taylor of 2^f
 * (ln2^k/k!, truncation error < 1e-8 relative), 2^n by exponent bits. t < −126 flushes to 0.
 * --------------------------------------------------------------------------------------------- */
static inline float k_exp2(float t) {
    const float lo = -126.0f, hi = 127.0f;
    /* NaN fails both tests and is clamped to lo, so the int conversion below always sees a finite value in
     * [lo, hi]; the NaN itself is returned at the end (finite and ±inf inputs: unchanged results) */
    float tc = t > lo ? (t < hi ? t : hi) : lo;
    const float shifter = 12582912.0f; /* 1.5·2^23: adding it rounds to an integer (|tc| < 2^22) */
    float n = (tc + shifter) - shifter;
    float f = tc - n;
    float p = 1.5252733804059840e-5f;
    p = p * f + 1.5403530393381609e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    float r = p * scale;
    return t >= lo ? r : (t < lo ? 0.0f : t);
}

/* ---------------------------------------------------------------------------------------------
 * Row conversions
 * --------------------------------------------------------------------------------------------- */
static inline void k_cvt_to_f32(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == ATTN_DTYPE_FP8_E4M3) { /* exact widening, no scale (the driver folds it) */
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = attn_fp8_e4m3_to_f32(s[i]);
    } else if (dtype == ATTN_DTYPE_FP8_E5M2) {
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = attn_fp8_e5m2_to_f32(s[i]);
    } else if (dtype == ATTN_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) {
            uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &u, 4);
        }
    } else {
        const uint16_t *s = (const uint16_t *)src;
        int64_t i = 0;
#if defined(__F16C__)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
        for (; i < n; i++) dst[i] = attn_f16_to_f32(s[i]);
    }
}

static inline void k_cvt_from_f32(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    if (dtype == ATTN_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == ATTN_DTYPE_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = attn_f32_to_bf16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst;
        int64_t i = 0;
#if defined(__F16C__)
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(d + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
        for (; i < n; i++) d[i] = attn_f32_to_f16(src[i]);
    }
}

/* One row into an fp8 cache: the integer encoder of core/dtype.h on float(src[i]) / scale. Constant format
 * arguments after inlining, one straight loop per source dtype that the compiler may vectorise. */
static inline void k_cvt_to_fp8_m(const void *src, attn_dtype src_dtype, float scale, uint8_t *restrict dst, int64_t n,
                                  const int man_bits, const int bias) {
    const float *f = (const float *)src;
    const uint16_t *h = (const uint16_t *)src;
    if (src_dtype == ATTN_DTYPE_BF16) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = attn_f32_to_fp8_bits(attn_f32_bits(attn_bf16_to_f32(h[i]) / scale), man_bits, bias);
    } else if (src_dtype == ATTN_DTYPE_F16) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = attn_f32_to_fp8_bits(attn_f32_bits(attn_f16_to_f32(h[i]) / scale), man_bits, bias);
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = attn_f32_to_fp8_bits(attn_f32_bits(f[i] / scale), man_bits, bias);
    }
}
static inline void k_cvt_to_fp8(const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype,
                                uint8_t *restrict dst, int64_t n) {
    if (fp8_dtype == ATTN_DTYPE_FP8_E5M2)
        k_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 2, 15);
    else
        k_cvt_to_fp8_m(src, src_dtype, scale, dst, n, 3, 7);
}

/* ---------------------------------------------------------------------------------------------
 * S = Q·Kᵀ with rows in lanes. W is a compile-time lane count after inlining (8, 16 or 32).
 * --------------------------------------------------------------------------------------------- */
static inline void k_qk_w(const float *restrict q_t, int64_t head_size, const float *const *k_rows,
                          int64_t num_keys, float *restrict s, const int W) {
    int64_t k = 0;
    for (; k + 4 <= num_keys; k += 4) {
        const float *k0 = k_rows[k], *k1 = k_rows[k + 1], *k2 = k_rows[k + 2], *k3 = k_rows[k + 3];
        float a0[ATTN_QB], a1[ATTN_QB], a2[ATTN_QB], a3[ATTN_QB];
        for (int r = 0; r < W; r++) a0[r] = a1[r] = a2[r] = a3[r] = 0.0f;
        for (int64_t d = 0; d < head_size; d++) {
            const float *q = q_t + d * ATTN_QB;
            const float x0 = k0[d], x1 = k1[d], x2 = k2[d], x3 = k3[d];
            for (int r = 0; r < W; r++) {
                a0[r] += x0 * q[r];
                a1[r] += x1 * q[r];
                a2[r] += x2 * q[r];
                a3[r] += x3 * q[r];
            }
        }
        for (int r = 0; r < W; r++) {
            s[(k + 0) * ATTN_QB + r] = a0[r];
            s[(k + 1) * ATTN_QB + r] = a1[r];
            s[(k + 2) * ATTN_QB + r] = a2[r];
            s[(k + 3) * ATTN_QB + r] = a3[r];
        }
    }
    for (; k < num_keys; k++) {
        const float *k0 = k_rows[k];
        float a0[ATTN_QB];
        for (int r = 0; r < W; r++) a0[r] = 0.0f;
        for (int64_t d = 0; d < head_size; d++) {
            const float *q = q_t + d * ATTN_QB;
            const float x0 = k0[d];
            for (int r = 0; r < W; r++) a0[r] += x0 * q[r];
        }
        for (int r = 0; r < W; r++) s[k * ATTN_QB + r] = a0[r];
    }
}

static inline void k_qk_tile(const float *q_t, int64_t num_rows, int64_t head_size,
                             const float *const *k_rows, int64_t num_keys, float *s) {
    if (num_rows <= 8)
        k_qk_w(q_t, head_size, k_rows, num_keys, s, 8);
    else if (num_rows <= 16)
        k_qk_w(q_t, head_size, k_rows, num_keys, s, 16);
    else
        k_qk_w(q_t, head_size, k_rows, num_keys, s, 32);
}

/* ---------------------------------------------------------------------------------------------
 * Online softmax over one kv tile (FlashAttention-2 with the lazy rescale of docs/KERNELS.md §4).
 * --------------------------------------------------------------------------------------------- */
static inline void k_softmax_w(float *restrict s, int64_t num_keys, float *restrict m, float *restrict l,
                               float *restrict o_t, int64_t head_size_v, const int W) {
    float tmax[ATTN_QB], alpha[ATTN_QB], sum[ATTN_QB];
    int rescale = 0;
    for (int r = 0; r < W; r++) tmax[r] = -INFINITY;
    for (int64_t k = 0; k < num_keys; k++)
        for (int r = 0; r < W; r++) tmax[r] = s[k * ATTN_QB + r] > tmax[r] ? s[k * ATTN_QB + r] : tmax[r];
    for (int r = 0; r < W; r++) {
        const float m_old = m[r];
        float m_new = m_old;
        if (tmax[r] > m_old + ATTN_RESCALE_THRESHOLD || m_old == -INFINITY) m_new = tmax[r];
        /* m_old = −inf: nothing accumulated yet, α is irrelevant (l = 0, o = 0); use 1 to avoid NaN */
        alpha[r] = (m_new == m_old || m_old == -INFINITY) ? 1.0f : k_exp2((m_old - m_new) * ATTN_LOG2E_F);
        if (alpha[r] != 1.0f) rescale = 1;
        m[r] = m_new;
        sum[r] = 0.0f;
    }
    for (int64_t k = 0; k < num_keys; k++) {
        float *row = s + k * ATTN_QB;
        for (int r = 0; r < W; r++) {
            const float x = row[r];
            const float p = x == -INFINITY ? 0.0f : k_exp2((x - m[r]) * ATTN_LOG2E_F);
            row[r] = p;
            sum[r] += p;
        }
    }
    for (int r = 0; r < W; r++) l[r] = alpha[r] * l[r] + sum[r];
    if (rescale) {
        for (int64_t d = 0; d < head_size_v; d++)
            for (int r = 0; r < W; r++) o_t[d * ATTN_QB + r] *= alpha[r];
    }
}

static inline void k_softmax_tile(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l,
                                  float *o_t, int64_t head_size_v) {
    if (num_rows <= 8)
        k_softmax_w(s, num_keys, m, l, o_t, head_size_v, 8);
    else if (num_rows <= 16)
        k_softmax_w(s, num_keys, m, l, o_t, head_size_v, 16);
    else
        k_softmax_w(s, num_keys, m, l, o_t, head_size_v, 32);
}

/* ---------------------------------------------------------------------------------------------
 * O += P·V with rows in lanes; V rows used in place (broadcast per element).
 * --------------------------------------------------------------------------------------------- */
static inline void k_pv_w(const float *restrict p, int64_t num_keys, const float *const *v_rows,
                          int64_t head_size_v, float *restrict o_t, const int W) {
    int64_t d = 0;
    for (; d + 4 <= head_size_v; d += 4) {
        float a0[ATTN_QB], a1[ATTN_QB], a2[ATTN_QB], a3[ATTN_QB];
        for (int r = 0; r < W; r++) {
            a0[r] = o_t[(d + 0) * ATTN_QB + r];
            a1[r] = o_t[(d + 1) * ATTN_QB + r];
            a2[r] = o_t[(d + 2) * ATTN_QB + r];
            a3[r] = o_t[(d + 3) * ATTN_QB + r];
        }
        for (int64_t k = 0; k < num_keys; k++) {
            const float *pk = p + k * ATTN_QB;
            const float *v = v_rows[k] + d;
            const float x0 = v[0], x1 = v[1], x2 = v[2], x3 = v[3];
            for (int r = 0; r < W; r++) {
                a0[r] += x0 * pk[r];
                a1[r] += x1 * pk[r];
                a2[r] += x2 * pk[r];
                a3[r] += x3 * pk[r];
            }
        }
        for (int r = 0; r < W; r++) {
            o_t[(d + 0) * ATTN_QB + r] = a0[r];
            o_t[(d + 1) * ATTN_QB + r] = a1[r];
            o_t[(d + 2) * ATTN_QB + r] = a2[r];
            o_t[(d + 3) * ATTN_QB + r] = a3[r];
        }
    }
    for (; d < head_size_v; d++) {
        float a0[ATTN_QB];
        for (int r = 0; r < W; r++) a0[r] = o_t[d * ATTN_QB + r];
        for (int64_t k = 0; k < num_keys; k++) {
            const float *pk = p + k * ATTN_QB;
            const float x0 = v_rows[k][d];
            for (int r = 0; r < W; r++) a0[r] += x0 * pk[r];
        }
        for (int r = 0; r < W; r++) o_t[d * ATTN_QB + r] = a0[r];
    }
}

static inline void k_pv_tile(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                             int64_t head_size_v, float *o_t) {
    if (num_rows <= 8)
        k_pv_w(p, num_keys, v_rows, head_size_v, o_t, 8);
    else if (num_rows <= 16)
        k_pv_w(p, num_keys, v_rows, head_size_v, o_t, 16);
    else
        k_pv_w(p, num_keys, v_rows, head_size_v, o_t, 32);
}

/* kernel_list.h transpose: 8 × 8 blocks, so both sides are walked a cache line at a time. */
static inline void k_transpose(const float *restrict src, int64_t src_stride, int64_t rows, int64_t cols,
                               float *restrict dst, int64_t dst_stride) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8)
            for (int64_t r = r0; r < r0 + 8 && r < rows; r++)
                for (int64_t c = c0; c < c0 + 8 && c < cols; c++)
                    dst[c * dst_stride + r] = src[r * src_stride + c];
}

/* kernel_list.h scale_tile. */
static inline void k_scale_tile(float *s, int64_t num_keys, int64_t num_rows, float scale) {
    for (int64_t k = 0; k < num_keys; k++)
        for (int64_t r = 0; r < num_rows; r++) s[k * ATTN_QB + r] *= scale;
}

/* Defines the exported kernel functions and the table of one ISA (used once per ISA .c file). */
#define ATTN_DEFINE_KERNEL_TABLE(isa)                                                                    \
    void attn_k_cvt_to_f32_##isa(const void *src, attn_dtype dtype, float *dst, int64_t n) {             \
        k_cvt_to_f32(src, dtype, dst, n);                                                                \
    }                                                                                                    \
    void attn_k_cvt_from_f32_##isa(const float *src, attn_dtype dtype, void *dst, int64_t n) {           \
        k_cvt_from_f32(src, dtype, dst, n);                                                              \
    }                                                                                                    \
    void attn_k_cvt_to_fp8_##isa(const void *src, attn_dtype src_dtype, float scale, attn_dtype fp8_dtype,\
                                 uint8_t *dst, int64_t n) {                                              \
        k_cvt_to_fp8(src, src_dtype, scale, fp8_dtype, dst, n);                                          \
    }                                                                                                    \
    void attn_k_qk_tile_##isa(const float *q_t, int64_t num_rows, int64_t head_size,                     \
                              const float *const *k_rows, int64_t num_keys, float *s) {                  \
        k_qk_tile(q_t, num_rows, head_size, k_rows, num_keys, s);                                        \
    }                                                                                                    \
    void attn_k_softmax_tile_##isa(float *s, int64_t num_keys, int64_t num_rows, float *m, float *l,     \
                                   float *o_t, int64_t head_size_v) {                                    \
        k_softmax_tile(s, num_keys, num_rows, m, l, o_t, head_size_v);                                   \
    }                                                                                                    \
    void attn_k_pv_tile_##isa(const float *p, int64_t num_keys, int64_t num_rows,                        \
                              const float *const *v_rows, int64_t head_size_v, float *o_t) {             \
        k_pv_tile(p, num_keys, num_rows, v_rows, head_size_v, o_t);                                      \
    }                                                                                                    \
    void attn_k_qk_tile_kv_##isa(const float *q_t, int64_t num_rows, int64_t head_size,                  \
                                 const void *const *k_rows, attn_dtype kv_dtype, int64_t num_keys,       \
                                 float *s) {                                                             \
        k_qk_tile_kv_chunked(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s,                    \
                             attn_k_qk_tile_##isa, attn_k_cvt_to_f32_##isa);                             \
    }                                                                                                    \
    void attn_k_pv_rows_kv_##isa(const float *p, int64_t num_keys, int64_t num_rows,                     \
                                 const void *const *v_rows, attn_dtype kv_dtype, int64_t head_size_v,    \
                                 float *o_d) {                                                           \
        k_pv_rows_kv(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, attn_k_cvt_to_f32_##isa);\
    }                                                                                                    \
    void attn_k_transpose_##isa(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst, \
                                int64_t dst_stride) {                                                    \
        k_transpose(src, src_stride, rows, cols, dst, dst_stride);                                       \
    }                                                                                                    \
    void attn_k_scale_tile_##isa(float *s, int64_t num_keys, int64_t num_rows, float scale) {            \
        k_scale_tile(s, num_keys, num_rows, scale);                                                      \
    }                                                                                                    \
    const struct attn_kernels attn_kernels_##isa = {                                                     \
        #isa,                    attn_k_cvt_to_f32_##isa, attn_k_cvt_from_f32_##isa,                     \
        attn_k_cvt_to_fp8_##isa,                                                                         \
        attn_k_qk_tile_##isa,    attn_k_softmax_tile_##isa, attn_k_pv_tile_##isa,                        \
        attn_k_qk_tile_kv_##isa, attn_k_pv_rows_kv_##isa, attn_k_transpose_##isa,                       \
        attn_k_scale_tile_##isa, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};

#endif
