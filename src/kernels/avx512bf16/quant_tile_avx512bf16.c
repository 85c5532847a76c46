/*
 * quant_tile_avx512bf16.c — the quantized-attention kernels of the avx512bf16 quant table (kernels.h,
 * struct attn_quant_kernels; driver src/attention/fwd_quant.c): code rows widened exactly to float32 in registers
 * (quant_decode_avx512.h), times their power-of-two MX factor, truncated to bf16 (exact for normal values), and
 * both products of attention on VDPBF16PS (Intel SDM: per f32 lane acc += a.hi·b.hi, then acc += a.lo·b.lo, each
 * rounded to nearest even with bf16 subnormal inputs read as 0 and subnormal results flushed to 0; a product of
 * two bf16 is exact in float32).
 *
 * Q·Kᵀ: lanes = query rows; qp[j][r] holds the bf16 pair (q[2j], q[2j+1]) of row r, each key's pair broadcast;
 * 8 keys × 2 zmm accumulators (32 rows) or 8 × 1 (≤ 16 rows). The FP8 block scales multiply the finished dot:
 * (dot·row_scale[r])·key_scale[k]. P·V: P (times the FP8 V scale of its key) rounded to bf16 by VCVTNEPS2BF16
 * and paired over two consecutive keys; V staged as (v[2j][d], v[2j+1][d]) pairs; 8 columns × 2 zmm per pass.
 * Lane invariance holds: each lane's chain depends only on its own row.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) ||             \
    !defined(__AVX512BF16__)
#error "quant_tile_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include <immintrin.h>

#include "kernels/avx512bf16/bf16_pairs_avx512.h"
#include "kernels/avx512bf16/quant_decode_avx512.h"
#include "kernels/kernels.h"

void attn_k_dequant_row_avx512bf16(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                                   float *dst) {
    for (int64_t i = 0; i < n; i += 16) {
        const int m = n - i < 16 ? (int)(n - i) : 16;
        const __m512 v = _mm512_mul_ps(kq_decode16(codes, elem, i, m), kq_factor16(sc, sc_shift, i, m));
        _mm512_mask_storeu_ps(dst + i, (__mmask16)((1u << m) - 1u), v);
    }
}

void attn_k_dequant_row_bf16_avx512bf16(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                                        uint16_t *dst) {
    const int64_t ne = (n + 1) & ~(int64_t)1; /* the pad element of an odd row is 0 (decode lanes >= n are 0) */
    for (int64_t i = 0; i < ne; i += 16) {
        const int m = ne - i < 16 ? (int)(ne - i) : 16;
        const int mv = n - i < m ? (int)(n - i) : m;
        const __m512 v = _mm512_mul_ps(kq_decode16(codes, elem, i, mv), kq_factor16(sc, sc_shift, i, mv));
        const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
        _mm256_mask_storeu_epi16(dst + i, (__mmask16)((1u << m) - 1u), h);
    }
}

void attn_k_v_pairs_bf16_avx512bf16(const uint8_t *row0, const uint8_t *row1, attn_dtype elem, int64_t n,
                                    const float *sc, int sc_shift, uint32_t *vtp) {
    for (int64_t i = 0; i < n; i += 16) {
        const int m = n - i < 16 ? (int)(n - i) : 16;
        const __m512 f = kq_factor16(sc, sc_shift, i, m);
        const __m512i a = _mm512_castps_si512(_mm512_mul_ps(kq_decode16(row0, elem, i, m), f));
        const __m512i b =
            row1 ? _mm512_castps_si512(_mm512_mul_ps(kq_decode16(row1, elem, i, m), f)) : _mm512_setzero_si512();
        const __m512i pr =
            _mm512_or_si512(_mm512_srli_epi32(a, 16), _mm512_and_si512(b, _mm512_set1_epi32((int)0xFFFF0000u)));
        _mm512_mask_storeu_epi32(vtp + i, (__mmask16)((1u << m) - 1u), pr);
    }
}

static inline __attribute__((always_inline)) __m512 kq_dp(__m512 acc, __m512i a, uint32_t b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)_mm512_set1_epi32((int)b));
}

/* NK keys from k × L zmm of rows. */
static inline __attribute__((always_inline)) void kq_qk_keys(const uint32_t *qp, int64_t np, const uint16_t *k16,
                                                             int64_t ks, int64_t k, const float *row_scale,
                                                             const float *key_scale, float *s, const int NK,
                                                             const int L) {
    __m512 acc[8][2];
    _Pragma("GCC unroll 8") for (int i = 0; i < NK; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) acc[i][h] =
        _mm512_setzero_ps();
    const uint32_t *kp[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < NK; i++) kp[i] = (const uint32_t *)(const void *)(k16 + (k + i) * ks);
    for (int64_t j = 0; j < np; j++) {
        __m512i q[2];
        _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) q[h] = _mm512_loadu_si512(qp + j * ATTN_QB + 16 * h);
        _Pragma("GCC unroll 8") for (int i = 0; i < NK; i++) {
            const uint32_t b = kp[i][j];
            _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) acc[i][h] = kq_dp(acc[i][h], q[h], b);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < NK; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) {
        __m512 x = acc[i][h];
        if (row_scale)
            x = _mm512_mul_ps(x, _mm512_loadu_ps(row_scale + 16 * h));
        if (key_scale)
            x = _mm512_mul_ps(x, _mm512_set1_ps(key_scale[k + i]));
        _mm512_storeu_ps(s + (k + i) * ATTN_QB + 16 * h, x);
    }
}

static inline __attribute__((always_inline)) void kq_qk(const uint32_t *qp, int64_t head_size, const uint16_t *k16,
                                                        int64_t ks, int64_t num_keys, const float *row_scale,
                                                        const float *key_scale, float *s, const int L) {
    const int64_t np = (head_size + 1) / 2;
    int64_t k = 0;
    for (; k + 8 <= num_keys; k += 8)
        kq_qk_keys(qp, np, k16, ks, k, row_scale, key_scale, s, 8, L);
    for (; k < num_keys; k++)
        kq_qk_keys(qp, np, k16, ks, k, row_scale, key_scale, s, 1, L);
}

void attn_k_qk_bf16_avx512bf16(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16,
                               int64_t k_stride, int64_t num_keys, const float *row_scale, const float *key_scale,
                               float *s) {
    if (num_rows <= 16)
        kq_qk(qp, head_size, k16, k_stride, num_keys, row_scale, key_scale, s, 1);
    else
        kq_qk(qp, head_size, k16, k_stride, num_keys, row_scale, key_scale, s, 2);
}

/* ND columns from d × L zmm of rows. */
static inline __attribute__((always_inline)) void kq_pv_cols(const uint32_t *pp, int64_t npairs, const uint32_t *vtp,
                                                             int64_t vts, int64_t d, float *o_t, const int ND,
                                                             const int L) {
    __m512 acc[8][2];
    _Pragma("GCC unroll 8") for (int i = 0; i < ND; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) acc[i][h] =
        _mm512_loadu_ps(o_t + (d + i) * ATTN_QB + 16 * h);
    for (int64_t j = 0; j < npairs; j++) {
        __m512i p[2];
        _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) p[h] = _mm512_loadu_si512(pp + j * ATTN_QB + 16 * h);
        const uint32_t *v = vtp + j * vts + d;
        _Pragma("GCC unroll 8") for (int i = 0; i < ND; i++) {
            const uint32_t b = v[i];
            _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) acc[i][h] = kq_dp(acc[i][h], p[h], b);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < ND; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++)
        _mm512_storeu_ps(o_t + (d + i) * ATTN_QB + 16 * h, acc[i][h]);
}

static inline __attribute__((always_inline)) void kq_pv(const float *p, int64_t num_keys, const float *vs,
                                                        const uint32_t *vtp, int64_t vts, int64_t dv, uint32_t *pp,
                                                        float *o_t, const int L) {
    const int64_t npairs = (num_keys + 1) / 2;
    for (int64_t j = 0; j < npairs; j++)
        for (int h = 0; h < L; h++) {
            __m512 lo = _mm512_loadu_ps(p + 2 * j * ATTN_QB + 16 * h);
            __m512 hi =
                2 * j + 1 < num_keys ? _mm512_loadu_ps(p + (2 * j + 1) * ATTN_QB + 16 * h) : _mm512_setzero_ps();
            if (vs) {
                lo = _mm512_mul_ps(lo, _mm512_set1_ps(vs[2 * j]));
                if (2 * j + 1 < num_keys)
                    hi = _mm512_mul_ps(hi, _mm512_set1_ps(vs[2 * j + 1]));
            }
            _mm512_storeu_si512(pp + j * ATTN_QB + 16 * h,
                                _mm512_or_si512(kbf_round_lo(lo), _mm512_slli_epi32(kbf_round_lo(hi), 16)));
        }
    int64_t d = 0;
    for (; d + 8 <= dv; d += 8)
        kq_pv_cols(pp, npairs, vtp, vts, d, o_t, 8, L);
    for (; d < dv; d++)
        kq_pv_cols(pp, npairs, vtp, vts, d, o_t, 1, L);
}

void attn_k_pv_bf16_avx512bf16(const float *p, int64_t num_keys, int64_t num_rows, const float *vs, const uint32_t *vtp,
                               int64_t vt_stride, int64_t head_size_v, uint32_t *pp, float *o_t) {
    if (num_rows <= 16)
        kq_pv(p, num_keys, vs, vtp, vt_stride, head_size_v, pp, o_t, 1);
    else
        kq_pv(p, num_keys, vs, vtp, vt_stride, head_size_v, pp, o_t, 2);
}
