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
 * (dot·row_scale[r])·key_scale[k]. Softmax: the online update fused with the rounding of P (times the FP8 V scale
 * of its key) to bf16 by VCVTNEPS2BF16, paired over two consecutive keys. P·V: V staged as (v[2j][d], v[2j+1][d])
 * pairs; 8 columns × 2 zmm per pass.
 * Lane invariance holds: each lane's chain depends only on its own row.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) ||             \
    !defined(__AVX512BF16__)
#error "quant_tile_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/fp8_encode_avx512.h"
#include "kernels/avx512/softmax_step_avx512.h"
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

/* bf16 of every E4M3 magnitude code (exact; 0x7F: the quiet NaN of kq_decode16). */
static const uint16_t kq_e4m3_bf16[128] __attribute__((aligned(64))) = {
    0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60,
    0x3C80, 0x3C90, 0x3CA0, 0x3CB0, 0x3CC0, 0x3CD0, 0x3CE0, 0x3CF0,
    0x3D00, 0x3D10, 0x3D20, 0x3D30, 0x3D40, 0x3D50, 0x3D60, 0x3D70,
    0x3D80, 0x3D90, 0x3DA0, 0x3DB0, 0x3DC0, 0x3DD0, 0x3DE0, 0x3DF0,
    0x3E00, 0x3E10, 0x3E20, 0x3E30, 0x3E40, 0x3E50, 0x3E60, 0x3E70,
    0x3E80, 0x3E90, 0x3EA0, 0x3EB0, 0x3EC0, 0x3ED0, 0x3EE0, 0x3EF0,
    0x3F00, 0x3F10, 0x3F20, 0x3F30, 0x3F40, 0x3F50, 0x3F60, 0x3F70,
    0x3F80, 0x3F90, 0x3FA0, 0x3FB0, 0x3FC0, 0x3FD0, 0x3FE0, 0x3FF0,
    0x4000, 0x4010, 0x4020, 0x4030, 0x4040, 0x4050, 0x4060, 0x4070,
    0x4080, 0x4090, 0x40A0, 0x40B0, 0x40C0, 0x40D0, 0x40E0, 0x40F0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
    0x4180, 0x4190, 0x41A0, 0x41B0, 0x41C0, 0x41D0, 0x41E0, 0x41F0,
    0x4200, 0x4210, 0x4220, 0x4230, 0x4240, 0x4250, 0x4260, 0x4270,
    0x4280, 0x4290, 0x42A0, 0x42B0, 0x42C0, 0x42D0, 0x42E0, 0x42F0,
    0x4300, 0x4310, 0x4320, 0x4330, 0x4340, 0x4350, 0x4360, 0x4370,
    0x4380, 0x4390, 0x43A0, 0x43B0, 0x43C0, 0x43D0, 0x43E0, 0x7FC0};

/* 32 E4M3 codes (lanes >= n are 0) as bf16 words times 2^k, for k in [−117, 119] (every nonzero product then
 * stays a normal bf16, so adding k to the exponent field is the exact product the float path truncates): the
 * magnitude looked up in kq_e4m3_bf16 (two VPERMT2W of 64 entries), k added where nonzero and not NaN, the sign
 * put back except on NaN (kq_decode16 gives a positive NaN). */
static inline __attribute__((always_inline)) __m512i kq_e4m3_bf16x32(const uint8_t *codes, int n, int k) {
    const __m512i t0 = _mm512_load_si512(kq_e4m3_bf16), t1 = _mm512_load_si512(kq_e4m3_bf16 + 32);
    const __m512i t2 = _mm512_load_si512(kq_e4m3_bf16 + 64), t3 = _mm512_load_si512(kq_e4m3_bf16 + 96);
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(n >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << n) - 1u), codes));
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7F));
    __m512i r = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(mag, _mm512_set1_epi16(0x40)),
                                        _mm512_permutex2var_epi16(t0, mag, t1), _mm512_permutex2var_epi16(t2, mag, t3));
    const __mmask32 num = _mm512_cmpneq_epi16_mask(mag, _mm512_set1_epi16(0x7F));
    if (k != 0)
        r = _mm512_mask_add_epi16(r, _mm512_mask_test_epi16_mask(num, mag, mag), r,
                                  _mm512_set1_epi16((short)(k * 128)));
    return _mm512_or_si512(r, _mm512_maskz_slli_epi16(num, _mm512_and_si512(w, _mm512_set1_epi16(0x80)), 8));
}

/* The exponent k of a float factor that is a power of two in [2^-117, 2^119], else a value outside [−117, 119]. */
static inline int kq_pow2_exp(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    return (u & 0x807FFFFFu) == 0 ? (int)(u >> 23) - 127 : 1000;
}

void attn_k_dequant_row_bf16_avx512bf16(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                                        uint16_t *dst) {
    const int64_t ne = (n + 1) & ~(int64_t)1; /* the pad element of an odd row is 0 (decode lanes >= n are 0) */
    int64_t i0 = 0;
    if (elem == ATTN_DTYPE_FP8_E4M3 && (sc_shift >= 63 || sc_shift == 5)) /* one factor per 32 elements */
        for (; i0 < ne; i0 += 32) {
            const int k = kq_pow2_exp(sc[sc_shift >= 63 ? 0 : i0 >> 5]);
            if (k < -117 || k > 119)
                break; /* the float path below, from here */
            const int m = ne - i0 < 32 ? (int)(ne - i0) : 32;
            const int mv = n - i0 < m ? (int)(n - i0) : m;
            _mm512_mask_storeu_epi16(dst + i0, m >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << m) - 1u),
                                     kq_e4m3_bf16x32(codes + i0, mv, k));
        }
    for (int64_t i = i0; i < ne; i += 16) {
        const int m = ne - i < 16 ? (int)(ne - i) : 16;
        const int mv = n - i < m ? (int)(n - i) : m;
        const __m512 v = _mm512_mul_ps(kq_decode16(codes, elem, i, mv), kq_factor16(sc, sc_shift, i, mv));
        const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
        _mm256_mask_storeu_epi16(dst + i, (__mmask16)((1u << m) - 1u), h);
    }
}

/* The bf16 words (low half of each lane) dequant_row_bf16 / v_pairs_bf16 make of the codes of x: the grid value
 * times its factor f (kq_factor16's; NULL: no product — the value is exact in bf16), truncated. With a factor
 * this is their float path, whose bits their exponent-field path also gives. */
static inline __attribute__((always_inline)) __m512i kq_fp8_bf16(__m512 x, const float *fac, int fac_shift, int64_t i,
                                                                 int m, const int man_bits, const int bias) {
    __m512 v = k512_fp8_grid(x, man_bits, bias); /* kq_decode16's value of the code */
    if (fac)
        v = _mm512_mul_ps(v, kq_factor16(fac, fac_shift, i, m));
    return _mm512_srli_epi32(_mm512_castps_si512(v), 16);
}

static inline __attribute__((always_inline)) void kq_fp8_bf16_row(const float *x, int64_t n, float scale,
                                                                  const float *fac, int fac_shift, int half, void *dst,
                                                                  const int M, const int B) {
    const __m512 vs = _mm512_set1_ps(scale);
    const int div = scale != 1.0f; /* x / 1 is x, as cvt_to_fp8 skips it */
    for (int64_t i = 0; i < n; i += 16) {
        const int m = n - i >= 16 ? 16 : (int)(n - i);
        const __mmask16 k = (__mmask16)((1u << m) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        if (div)
            v = _mm512_div_ps(v, vs);
        const __m512i w = kq_fp8_bf16(v, fac, fac_shift, i, m, M, B);
        if (half < 0)
            _mm256_mask_storeu_epi16((uint16_t *)dst + i, k, _mm512_cvtepi32_epi16(w));
        else if (half == 0)
            _mm512_mask_storeu_epi32((uint32_t *)dst + i, k, w);
        else
            _mm512_mask_storeu_epi16((uint32_t *)dst + i,
                                     m == 16 ? (__mmask32)0xAAAAAAAAu
                                             : (__mmask32)(0xAAAAAAAAu & ((1u << (2 * m)) - 1u)),
                                     _mm512_slli_epi32(w, 16));
    }
    if (half < 0 && (n & 1))
        ((uint16_t *)dst)[n] = 0;
}

void attn_k_fp8_bf16_row_avx512bf16(const float *x, int64_t n, float scale, attn_dtype elem, const float *fac,
                                    int fac_shift, int half, void *dst) {
    if (elem == ATTN_DTYPE_FP8_E5M2)
        kq_fp8_bf16_row(x, n, scale, fac, fac_shift, half, dst, 2, 15);
    else
        kq_fp8_bf16_row(x, n, scale, fac, fac_shift, half, dst, 3, 7);
}

void attn_k_v_pairs_bf16_avx512bf16(const uint8_t *row0, const uint8_t *row1, attn_dtype elem, int64_t n,
                                    const float *sc, int sc_shift, uint32_t *vtp) {
    if (elem == ATTN_DTYPE_FP8_E4M3 && sc_shift >= 63 && sc[0] == 1.0f) { /* FP8 block scales: V is not scaled */
        static const uint16_t pairs[32] __attribute__((aligned(64))) = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                                        37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                                        11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
        const __m512i lo_idx = _mm512_load_si512(pairs); /* words 2i, 2i + 1 = element i of a, of b */
        const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
        for (int64_t i = 0; i < n; i += 32) {
            const int m = n - i < 32 ? (int)(n - i) : 32;
            const __m512i a = kq_e4m3_bf16x32(row0 + i, m, 0);
            const __m512i b = row1 ? kq_e4m3_bf16x32(row1 + i, m, 0) : _mm512_setzero_si512();
            _mm512_mask_storeu_epi32(vtp + i, m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1u),
                                     _mm512_permutex2var_epi16(a, lo_idx, b));
            if (m > 16)
                _mm512_mask_storeu_epi32(vtp + i + 16, m >= 32 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - 16)) - 1u),
                                         _mm512_permutex2var_epi16(a, hi_idx, b));
        }
        return;
    }
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

/* The online-softmax update of attn_k_softmax_tile_avx512 (kernels/avx512/softmax_tile_avx512.c) — the same m
 * and α, P from the quantized kernels' shorter exponential (k512_exp2_masked_q: within 1.9e-7 relative, so l and
 * Oᵀ within that of the float table's) — fused with the rounding of P for P·V: instead of writing P back into s
 * it writes the bf16 pairs pp[j] = bf16(P[2j]·vs[2j]) | bf16(P[2j + 1]·vs[2j + 1]) << 16 that kq_pv_cols reads.
 * The tile maximum is taken over four interleaved partial maxima (the same value; only which of +0 / −0 is kept
 * may differ, and either gives the same P, α and LSE), the sum of P in key order as there. */
static inline __attribute__((always_inline)) void kq_softmax_pairs(const float *s, int64_t num_keys, const float *vs,
                                                                   float *m, float *l, float *o_t, int64_t dv,
                                                                   uint32_t *pp, const int L) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), log2e = _mm512_set1_ps(ATTN_LOG2E_F);
    __m512 alpha[2];
    int rescale = 0;
    for (int h = 0; h < L; h++) {
        const float *sv = s + 16 * h;
        const __m512 tmax = k512_rows_max(sv, 0, num_keys);
        const __m512 m_new = k512_softmax_max_step(tmax, m + 16 * h, &alpha[h], &rescale);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t j = 0; 2 * j < num_keys; j++) {
            /* s = −inf gives exactly +0 even when m_new = −inf too (t would be NaN there) */
            const __m512 x0 = _mm512_loadu_ps(sv + 2 * j * ATTN_QB);
            __m512 p0 = k512_exp2_masked_q(_mm512_cmp_ps_mask(x0, neg_inf, _CMP_NEQ_UQ),
                                           _mm512_mul_ps(_mm512_sub_ps(x0, m_new), log2e));
            sum = _mm512_add_ps(sum, p0);
            __m512 p1 = _mm512_setzero_ps();
            if (2 * j + 1 < num_keys) {
                const __m512 x1 = _mm512_loadu_ps(sv + (2 * j + 1) * ATTN_QB);
                p1 = k512_exp2_masked_q(_mm512_cmp_ps_mask(x1, neg_inf, _CMP_NEQ_UQ),
                                        _mm512_mul_ps(_mm512_sub_ps(x1, m_new), log2e));
                sum = _mm512_add_ps(sum, p1);
                if (vs)
                    p1 = _mm512_mul_ps(p1, _mm512_set1_ps(vs[2 * j + 1]));
            }
            if (vs)
                p0 = _mm512_mul_ps(p0, _mm512_set1_ps(vs[2 * j]));
            _mm512_storeu_si512(pp + j * ATTN_QB + 16 * h,
                                kbf_pair(p0, p1));
        }
        _mm512_storeu_ps(l + 16 * h, _mm512_fmadd_ps(alpha[h], _mm512_loadu_ps(l + 16 * h), sum));
    }
    if (rescale)
        k512_rescale_o(o_t, dv, alpha, L);
}

void attn_k_softmax_pairs_bf16_avx512bf16(const float *s, int64_t num_keys, int64_t num_rows, const float *vs,
                                          float *m, float *l, float *o_t, int64_t head_size_v, uint32_t *pp) {
    if (num_rows <= 16)
        kq_softmax_pairs(s, num_keys, vs, m, l, o_t, head_size_v, pp, 1);
    else
        kq_softmax_pairs(s, num_keys, vs, m, l, o_t, head_size_v, pp, 2);
}

static inline __attribute__((always_inline)) void kq_pv_pairs(const uint32_t *pp, int64_t num_keys,
                                                              const uint32_t *vtp, int64_t vts, int64_t dv,
                                                              float *o_t, const int L) {
    const int64_t npairs = (num_keys + 1) / 2;
    int64_t d = 0;
    for (; d + 8 <= dv; d += 8)
        kq_pv_cols(pp, npairs, vtp, vts, d, o_t, 8, L);
    for (; d < dv; d++)
        kq_pv_cols(pp, npairs, vtp, vts, d, o_t, 1, L);
}

void attn_k_pv_pairs_bf16_avx512bf16(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtp,
                                     int64_t vt_stride, int64_t head_size_v, float *o_t) {
    if (num_rows <= 16)
        kq_pv_pairs(pp, num_keys, vtp, vt_stride, head_size_v, o_t, 1);
    else
        kq_pv_pairs(pp, num_keys, vtp, vt_stride, head_size_v, o_t, 2);
}
