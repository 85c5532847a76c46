/*
 * pv_e2m1_i8_avx512bf16.c — MXFP4 P·V of the avx512bf16 quant table on VPDPBUSD (AVX512-VNNI; kernels.h, struct
 * attn_quant_kernels; driver src/attention/fwd_quant.c): the online-softmax update that hands P·V its operand as
 * unsigned bytes, the staging of V's E2M1 codes as signed bytes, and the product.
 *
 * V's MX blocks are 32 tokens of one channel, so within such a block twice a V element is an integer in [−12, 12]
 * under one E8M0 factor. P is brought to the same shape: per query row and 32-key block (the same absolute keys
 * as V's blocks) P is quantized to unsigned bytes under a power of two, c = min(rne(P·2^(7−e)), 255), where 2^e
 * is the power of two at or below the block's largest P (so that P is 128..255 there). The block's dot
 * Σ c·(2v) is then an exact int32 (|Σ| <= 32·255·12), converted to float exactly and added once per block:
 * o = fma(float(Σ), fl(pfac[b][r]·vfac[b][d]), o), blocks ascending, with pfac = 2^(e−7) and vfac the V block's
 * E8M0 factor / 2. Compared with P·V on bf16(P) (a relative error of 2⁻⁹ per element), each element of P now
 * carries an absolute error of at most 2^(e−7) (half of that where no clamp applies), one unit of its block; l
 * and the LSE still use the float P. Blocks whose largest P is below 2⁻¹¹⁹ contribute 0 (their share of the
 * output is below float's resolution; the bf16 kernels drop P below 2⁻¹²⁶ the same way).
 *
 * Lanes are query rows, as in the other quant kernels, and each lane's chain depends only on its own row, so
 * the bits are the same for any thread count and any blocking of the rows.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) ||             \
    !defined(__AVX512BF16__)
#error "pv_e2m1_i8_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include <immintrin.h>
#include <math.h>

#include "kernels/avx512/softmax_step_avx512.h"
#include "kernels/avx512bf16/e2m1_i8_avx512.h"
#include "kernels/kernels.h"

_Static_assert(ATTN_KV_TILE == 64, "kp8_softmax holds the maxima of two 32-key blocks");

/* vq[d] = the bytes (2·v0[d], 2·v1[d], 2·v2[d], 2·v3[d]) of four consecutive keys' E2M1 rows, d < n. */
KI8_TARGET void attn_k_v_quads_e2m1_avx512bf16(const uint8_t *const rows[4], int64_t n, uint32_t *vq) {
    for (int64_t i = 0; i < n; i += 32) {
        const int m = n - i < 32 ? (int)(n - i) : 32;
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {
            const __m256i x = rows[r] ? ki8_e2m1x32(rows[r] + i / 2, m, 0) : _mm256_setzero_si256();
            lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(x)), 8 * r));
            hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(x, 1)), 8 * r));
        }
        _mm512_mask_storeu_epi32(vq + i, m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1u), lo);
        if (m > 16)
            _mm512_mask_storeu_epi32(vq + i + 16, m >= 32 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - 16)) - 1u), hi);
    }
}

/* The online-softmax update of kq_softmax_pairs (quant_tile_avx512bf16.c: the same m, l and Oᵀ bits, l summed in
 * key order) writing P as byte quads: pq[j][r] = c[4j] | c[4j+1] << 8 | c[4j+2] << 16 | c[4j+3] << 24 with
 * c = min(rne(P·2^(7−e_b)), 255) (a key past num_keys: 0), and pfac[b][r] = 2^(e_b − 7), for the 32-key blocks b
 * of the tile. The block's power of two comes from the P of its largest logit — the same operations as that key's
 * P — by exponent-field arithmetic: E = the biased exponent of that P; below 8 (P < 2⁻¹¹⁹) the block's scale and
 * factor are 0; else 2^(134 − E) and 2^(E − 134). Values that a rounding of the exponential might lift past 255
 * are clamped by saturating packs (which also send the integer conversion's NaN result to 0; a NaN logit makes
 * the row's l NaN, so its output is NaN whatever the bytes). */
static inline __attribute__((always_inline)) void kp8_softmax(const float *s, int64_t num_keys, float *m, float *l,
                                                              float *o_t, int64_t dv, uint32_t *pq, float *pfac,
                                                              const int L) {
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY), log2e = _mm512_set1_ps(ATTN_LOG2E_F);
    const __m512i quads = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    const int64_t nblk = (num_keys + 31) / 32;
    __m512 alpha[2];
    int rescale = 0;
    for (int h = 0; h < L; h++) {
        const float *sv = s + 16 * h;
        __m512 bmax[ATTN_KV_TILE / 32] = {neg_inf, neg_inf};
        for (int64_t b = 0; b < nblk; b++)
            bmax[b] = k512_rows_max(sv, 32 * b, 32 * b + 32 < num_keys ? 32 * b + 32 : num_keys);
        const __m512 tmax = _mm512_max_ps(bmax[1], bmax[0]); /* a block past the keys is −inf */
        const __m512 m_new = k512_softmax_max_step(tmax, m + 16 * h, &alpha[h], &rescale);
        __m512 sum = _mm512_setzero_ps();
        for (int64_t b = 0; b < nblk; b++) {
            const __m512 pmax = k512_exp2_masked_q(_mm512_cmp_ps_mask(bmax[b], neg_inf, _CMP_NEQ_UQ),
                                                   _mm512_mul_ps(_mm512_sub_ps(bmax[b], m_new), log2e));
            const __m512i e = _mm512_srli_epi32(_mm512_castps_si512(pmax), 23);
            const __mmask16 live = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(8));
            const __m512 scale =
                _mm512_castsi512_ps(_mm512_maskz_slli_epi32(live, _mm512_sub_epi32(_mm512_set1_epi32(261), e), 23));
            _mm512_storeu_ps(pfac + b * ATTN_QB + 16 * h, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                                              live, _mm512_sub_epi32(e, _mm512_set1_epi32(7)), 23)));
            const int64_t k1 = 32 * b + 32 < num_keys ? 32 * b + 32 : num_keys;
            for (int64_t k = 32 * b; k < k1; k += 4) {
                __m512i c[4];
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                    c[i] = _mm512_setzero_si512();
                    if (k + i < k1) {
                        /* s = −inf gives exactly +0 even when m_new = −inf too (t would be NaN there) */
                        const __m512 x = _mm512_loadu_ps(sv + (k + i) * ATTN_QB);
                        const __m512 p = k512_exp2_masked_q(_mm512_cmp_ps_mask(x, neg_inf, _CMP_NEQ_UQ),
                                                            _mm512_mul_ps(_mm512_sub_ps(x, m_new), log2e));
                        sum = _mm512_add_ps(sum, p);
                        c[i] = _mm512_cvtps_epi32(_mm512_mul_ps(p, scale));
                    }
                }
                /* saturating packs (0..255; a NaN's negative integer becomes 0): 128-bit lane l then holds
                 * c0[4l..4l+3], c1[..], c2[..], c3[..] as bytes, which one in-lane shuffle turns into quads */
                const __m512i bytes =
                    _mm512_packus_epi16(_mm512_packus_epi32(c[0], c[1]), _mm512_packus_epi32(c[2], c[3]));
                _mm512_storeu_si512(pq + (k / 4) * ATTN_QB + 16 * h, _mm512_shuffle_epi8(bytes, quads));
            }
        }
        _mm512_storeu_ps(l + 16 * h, _mm512_fmadd_ps(alpha[h], _mm512_loadu_ps(l + 16 * h), sum));
    }
    if (rescale)
        k512_rescale_o(o_t, dv, alpha, L);
}

void attn_k_softmax_quads_u8_avx512bf16(const float *s, int64_t num_keys, int64_t num_rows, float *m, float *l,
                                        float *o_t, int64_t head_size_v, uint32_t *pq, float *pfac) {
    if (num_rows <= 16)
        kp8_softmax(s, num_keys, m, l, o_t, head_size_v, pq, pfac, 1);
    else
        kp8_softmax(s, num_keys, m, l, o_t, head_size_v, pq, pfac, 2);
}

/* ND channels from d × L zmm of rows: per 32-key block the int32 dots in registers (ND·L independent chains), then
 * one FMA each into Oᵀ in memory. */
static inline __attribute__((always_inline)) KI8_TARGET void
kp8_pv_cols(const uint32_t *pq, const float *pfac, int64_t num_keys, const uint32_t *vq, int64_t vqs, const float *vfac,
            int64_t vfs, int64_t d, float *o_t, const int ND, const int L) {
    const int64_t nq = (num_keys + 3) / 4;
    for (int64_t b = 0; 8 * b < nq; b++) {
        __m512i acc[16][2];
        _Pragma("GCC unroll 16") for (int i = 0; i < ND; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++)
            acc[i][h] = _mm512_setzero_si512();
        const int64_t j1 = 8 * b + 8 < nq ? 8 * b + 8 : nq;
        for (int64_t j = 8 * b; j < j1; j++) {
            __m512i p[2];
            _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) p[h] = _mm512_loadu_si512(pq + j * ATTN_QB + 16 * h);
            const uint32_t *v = vq + j * vqs + d;
            _Pragma("GCC unroll 16") for (int i = 0; i < ND; i++) {
                const __m512i vb = _mm512_set1_epi32((int)v[i]);
                _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) acc[i][h] = ki8_dp(acc[i][h], p[h], vb);
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) {
            const __m512 pf = _mm512_loadu_ps(pfac + b * ATTN_QB + 16 * h);
            _Pragma("GCC unroll 16") for (int i = 0; i < ND; i++) {
                float *o = o_t + (d + i) * ATTN_QB + 16 * h;
                const __m512 fac = _mm512_mul_ps(pf, _mm512_set1_ps(vfac[b * vfs + d + i]));
                _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][h]), fac, _mm512_loadu_ps(o)));
            }
        }
    }
}

static inline __attribute__((always_inline)) KI8_TARGET void kp8_pv(const uint32_t *pq, const float *pfac,
                                                                    int64_t num_keys, const uint32_t *vq, int64_t vqs,
                                                                    const float *vfac, int64_t vfs, int64_t dv,
                                                                    float *o_t, const int ND, const int L) {
    int64_t d = 0;
    for (; d + ND <= dv; d += ND)
        kp8_pv_cols(pq, pfac, num_keys, vq, vqs, vfac, vfs, d, o_t, ND, L);
    for (; d < dv; d++)
        kp8_pv_cols(pq, pfac, num_keys, vq, vqs, vfac, vfs, d, o_t, 1, L);
}

/* 16 channels × 1 zmm (<= 16 rows) or 8 × 2: 16 VPDPBUSD chains per block. */
KI8_TARGET void attn_k_pv_e2m1_i8_avx512bf16(const uint32_t *pq, const float *pfac, int64_t num_keys, int64_t num_rows,
                                             const uint32_t *vq, int64_t vq_stride, const float *vfac,
                                             int64_t vfac_stride, int64_t head_size_v, float *o_t) {
    if (num_rows <= 16)
        kp8_pv(pq, pfac, num_keys, vq, vq_stride, vfac, vfac_stride, head_size_v, o_t, 16, 1);
    else
        kp8_pv(pq, pfac, num_keys, vq, vq_stride, vfac, vfac_stride, head_size_v, o_t, 8, 2);
}
