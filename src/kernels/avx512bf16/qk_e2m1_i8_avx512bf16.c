/*
 * qk_e2m1_i8_avx512bf16.c — MXFP4 Q·Kᵀ of the avx512bf16 quant table on VPDPBUSD (AVX512-VNNI; kernels.h, struct
 * attn_quant_kernels; driver src/attention/fwd_quant.c) and the E2M1 → byte widening it reads.
 *
 * Twice an E2M1 value is an integer in [−12, 12], so the dot product of one 32-element MX block of q and k is an
 * exact int32: (1/4)·Σ (2q_i)(2k_i), |Σ| <= 32·144. VPDPBUSD multiplies unsigned by signed bytes, so K is staged
 * with a bias, u8 = 2k + 12, and the bias term 12·Σ 2q_i of each (row, block) is removed by starting that
 * block's accumulator at qcorr = −12·Σ 2q_i. Per block the exact integer is converted to float (exact) and fused
 * into the score with the product of the row's factor qsc (the E8M0 factor of q's block times softmax_scale / 4,
 * formed by the driver) and the key's E8M0 factor: s = fma(float(acc_b), fl(qsc[b][r]·ksc[k][b]), s), blocks
 * ascending from s = 0. Lanes are query rows (qi[j][r] holds q[r][4j..4j+3] as signed bytes, each key's quad
 * broadcast); 6 keys × 2 zmm (32 rows) or 12 × 1 (<= 16 rows), tails of 4 and 1 keys. Lane invariance holds.
 *
 * The file is compiled with the avx512bf16 folder's flags; VPDPBUSD comes from a function target attribute, and
 * the driver reaches these functions only through the table that dispatch hands out where the CPU reports
 * AVX512-VNNI (src/dispatch/dispatch.c).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) ||             \
    !defined(__AVX512BF16__)
#error "qk_e2m1_i8_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include <immintrin.h>

#include "kernels/avx512bf16/e2m1_i8_avx512.h"
#include "kernels/kernels.h"

/* dst[i] = 2·e2m1(code i) + bias, i < n (codes two per byte, element 2i in the low nibble), 32 elements a step. */
KI8_TARGET void attn_k_e2m1_bytes_avx512bf16(const uint8_t *codes, int64_t n, int bias, uint8_t *dst) {
    for (int64_t i = 0; i < n; i += 32) {
        const int m = n - i < 32 ? (int)(n - i) : 32;
        _mm256_mask_storeu_epi8(dst + i, (__mmask32)(m == 32 ? 0xFFFFFFFFu : (1u << m) - 1u),
                                ki8_e2m1x32(codes + i / 2, m, bias));
    }
}

/* NK keys from k × L zmm of rows, all blocks. */
static inline __attribute__((always_inline)) KI8_TARGET void ki8_keys(const uint32_t *qi, const int32_t *qcorr,
                                                                      const float *qsc, __mmask16 live[2],
                                                                      int64_t head_size, const uint8_t *k8, int64_t ks,
                                                                      const float *ksc, int64_t nb, int64_t k, float *s,
                                                                      const int NK, const int L, const int EXP_ADD) {
    __m512 f[12][2];
    _Pragma("GCC unroll 12") for (int i = 0; i < NK; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) f[i][h] =
        _mm512_setzero_ps();
    const int64_t nq = (head_size + 3) / 4;
    for (int64_t b = 0; b < nb; b++) {
        __m512i a[12][2];
        _Pragma("GCC unroll 12") for (int i = 0; i < NK; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++)
            a[i][h] = _mm512_loadu_si512(qcorr + b * ATTN_QB + 16 * h);
        const int64_t j1 = 8 * b + 8 < nq ? 8 * b + 8 : nq;
        for (int64_t j = 8 * b; j < j1; j++) {
            __m512i q[2];
            _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) q[h] = _mm512_loadu_si512(qi + j * ATTN_QB + 16 * h);
            _Pragma("GCC unroll 12") for (int i = 0; i < NK; i++) {
                uint32_t kw;
                __builtin_memcpy(&kw, k8 + (k + i) * ks + 4 * j, 4);
                const __m512i kb = _mm512_set1_epi32((int)kw);
                _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) a[i][h] = ki8_dp(a[i][h], kb, q[h]);
            }
        }
        _Pragma("GCC unroll 12") for (int i = 0; i < NK; i++) {
            /* the factor qsc·ksc: exponent fields added (ksc = 2^(E − 127): + (E − 127) << 23), or multiplied */
            int32_t kbits;
            __builtin_memcpy(&kbits, ksc + (k + i) * nb + b, 4);
            const __m512i kexp = _mm512_set1_epi32(kbits - 0x3F800000);
            const __m512 kf = _mm512_set1_ps(ksc[(k + i) * nb + b]);
            _Pragma("GCC unroll 2") for (int h = 0; h < L; h++) {
                const __m512 qf = _mm512_loadu_ps(qsc + b * ATTN_QB + 16 * h);
                const __m512 fac =
                    EXP_ADD ? _mm512_castsi512_ps(_mm512_maskz_add_epi32(live[h], _mm512_castps_si512(qf), kexp))
                            : _mm512_maskz_mul_ps(live[h], qf, kf);
                f[i][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[i][h]), fac, f[i][h]);
            }
        }
    }
    _Pragma("GCC unroll 12") for (int i = 0; i < NK; i++) _Pragma("GCC unroll 2") for (int h = 0; h < L; h++)
        _mm512_storeu_ps(s + (k + i) * ATTN_QB + 16 * h, f[i][h]);
}

static inline __attribute__((always_inline)) KI8_TARGET void ki8_qk(const uint32_t *qi, const int32_t *qcorr,
                                                                    const float *qsc, int64_t num_rows,
                                                                    int64_t head_size, const uint8_t *k8, int64_t ks,
                                                                    const float *ksc, int64_t num_keys, float *s,
                                                                    const int NK, const int L, const int EXP_ADD) {
    const int64_t nb = (head_size + 31) / 32;
    __mmask16 live[2]; /* lanes with a row */
    for (int h = 0; h < 2; h++) {
        const int64_t n = num_rows - 16 * h;
        live[h] = n >= 16 ? (__mmask16)0xFFFF : n > 0 ? (__mmask16)((1u << n) - 1u) : 0;
    }
    int64_t k = 0;
    for (; k + NK <= num_keys; k += NK)
        ki8_keys(qi, qcorr, qsc, live, head_size, k8, ks, ksc, nb, k, s, NK, L, EXP_ADD);
    for (; k + 4 <= num_keys; k += 4)
        ki8_keys(qi, qcorr, qsc, live, head_size, k8, ks, ksc, nb, k, s, 4, L, EXP_ADD);
    for (; k < num_keys; k++)
        ki8_keys(qi, qcorr, qsc, live, head_size, k8, ks, ksc, nb, k, s, 1, L, EXP_ADD);
}

/* 12 keys × 1 zmm or 6 keys × 2 zmm: 12 independent VPDPBUSD chains, enough to cover the instruction's latency at
 * two per cycle (8 chains left the kernel latency-bound), with the float sums in registers too. Per block the
 * factor is one integer add on the exponent fields where the caller vouches for the range (exp_add): the
 * multiply it replaces competed with VPDPBUSD for the same pipes. */
KI8_TARGET void attn_k_qk_e2m1_i8_avx512bf16(const uint32_t *qi, const int32_t *qcorr, const float *qsc,
                                             int64_t num_rows, int64_t head_size, const uint8_t *k8, int64_t k_stride,
                                             const float *ksc, int64_t num_keys, int exp_add, float *s) {
    if (num_rows <= 16) {
        if (exp_add)
            ki8_qk(qi, qcorr, qsc, num_rows, head_size, k8, k_stride, ksc, num_keys, s, 12, 1, 1);
        else
            ki8_qk(qi, qcorr, qsc, num_rows, head_size, k8, k_stride, ksc, num_keys, s, 12, 1, 0);
    } else {
        if (exp_add)
            ki8_qk(qi, qcorr, qsc, num_rows, head_size, k8, k_stride, ksc, num_keys, s, 6, 2, 1);
        else
            ki8_qk(qi, qcorr, qsc, num_rows, head_size, k8, k_stride, ksc, num_keys, s, 6, 2, 0);
    }
}
