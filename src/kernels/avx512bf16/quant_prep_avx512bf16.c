/*
 * quant_prep_avx512bf16.c — the quantization helpers of the avx512bf16 quant table (kernels.h, struct
 * attn_quant_kernels): the portable bodies of generic/quant_prep.h compiled with this folder's flags, where the
 * compiler vectorizes them; bitwise the scalar reference (see that header).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512BF16__)
#error "quant_prep_avx512bf16.c must be compiled with -mavx512f -mavx512bf16"
#endif
#include <immintrin.h>

#include "kernels/avx512/fp8_encode_avx512.h"
#include "kernels/generic/quant_prep.h"
#include "kernels/kernels.h"

/* The butterflies of distance 1, 2 and 4 of the 8 doubles of x: partner y by a permute, then a + b in the lower
 * and a − b in the upper element of each pair as one fused multiply-add x·(±1) + y (the product by ±1 is exact,
 * so this is the one rounding of a + b or −b + a = a − b, signed zeros included; only which NaN comes out of two
 * may differ from an add). */
static inline __attribute__((always_inline)) __m512d kqp_bfly8(__m512d x) {
    const __m512d s1 = _mm512_setr_pd(1, -1, 1, -1, 1, -1, 1, -1), s2 = _mm512_setr_pd(1, 1, -1, -1, 1, 1, -1, -1);
    const __m512d s4 = _mm512_setr_pd(1, 1, 1, 1, -1, -1, -1, -1);
    x = _mm512_fmadd_pd(x, s1, _mm512_permute_pd(x, 0x55));
    x = _mm512_fmadd_pd(x, s2, _mm512_permutex_pd(x, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_fmadd_pd(x, s4, _mm512_shuffle_f64x2(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
}

static inline __attribute__((always_inline)) __m512d kqp_signed8(const float *src, const int8_t *signs, int64_t i) {
    const __m512d sg =
        _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(signs + i))));
    return _mm512_mul_pd(sg, _mm512_cvtps_pd(_mm256_loadu_ps(src + i)));
}

/* The transform of NV·8 doubles (NV <= 16) held in registers: the butterflies of distance 1, 2 and 4 inside each
 * register (kqp_bfly8, applied by the caller's load), then those between registers. */
static inline __attribute__((always_inline)) void kqp_fwht_regs(__m512d *x, const int NV) {
    _Pragma("GCC unroll 4") for (int lv = 1; lv < NV; lv *= 2) /* distance 8·lv */
        _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) if ((v & lv) == 0) {
            const __m512d a = x[v], b = x[v + lv];
            x[v] = _mm512_add_pd(a, b);
            x[v + lv] = _mm512_sub_pd(a, b);
        }
}

/* A row of NV·8 elements (NV <= 16) held in registers through every stage. */
static inline __attribute__((always_inline)) void kqp_hadamard_regs(const float *src, const int8_t *signs, float *dst,
                                                                    double norm, const int NV) {
    __m512d x[16];
    _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++) x[v] = kqp_bfly8(kqp_signed8(src, signs, 8 * v));
    kqp_fwht_regs(x, NV);
    const __m512d nm = _mm512_set1_pd(norm);
    _Pragma("GCC unroll 16") for (int v = 0; v < NV; v++)
        _mm256_storeu_ps(dst + 8 * v, _mm512_cvtpd_ps(_mm512_mul_pd(x[v], nm)));
}

/* kqp_hadamard_row with 8 doubles per zmm: the butterflies of distance 1, 2 and 4 inside a register
 * (kqp_bfly8), the others between registers — for rows of 16..128 elements all in registers, longer ones
 * through tmp; the same IEEE operations element by element, so bitwise the scalar transform. */
void attn_k_hadamard_row_avx512bf16(const float *src, const int8_t *signs, int64_t n, double *tmp, float *dst,
                                    double norm) {
    switch (n) {
    case 16:
        kqp_hadamard_regs(src, signs, dst, norm, 2);
        return;
    case 32:
        kqp_hadamard_regs(src, signs, dst, norm, 4);
        return;
    case 64:
        kqp_hadamard_regs(src, signs, dst, norm, 8);
        return;
    case 128:
        kqp_hadamard_regs(src, signs, dst, norm, 16);
        return;
    default:
        break;
    }
    if (n < 16) {
        kqp_hadamard_row(src, signs, n, tmp, dst, norm);
        return;
    }
    for (int64_t i = 0; i < n; i += 8)
        _mm512_storeu_pd(tmp + i, kqp_bfly8(kqp_signed8(src, signs, i)));
    for (int64_t len = 8; len < n; len *= 2)
        for (int64_t i = 0; i < n; i += 2 * len)
            for (int64_t j = 0; j < len; j += 8) {
                const __m512d a = _mm512_loadu_pd(tmp + i + j), b = _mm512_loadu_pd(tmp + i + len + j);
                _mm512_storeu_pd(tmp + i + j, _mm512_add_pd(a, b));
                _mm512_storeu_pd(tmp + i + len + j, _mm512_sub_pd(a, b));
            }
    const __m512d nm = _mm512_set1_pd(norm);
    for (int64_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(dst + i, _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_loadu_pd(tmp + i), nm)));
}

uint32_t attn_k_absmax_bits_avx512bf16(const float *x, int64_t n, uint32_t *nonfinite) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __m512i m = _mm512_setzero_si512();
    __mmask16 nf = 0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        const __m512i a = _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), abs_mask);
        nf |= _mm512_cmpge_epu32_mask(a, inf);
        m = _mm512_max_epu32(m, _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a, inf), a));
    }
    *nonfinite |= nf != 0;
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

/* Up to four whole MX blocks (nb of them, 32 floats each, two vectors per block in v) scaled in place, their E8M0
 * bytes in e8: the blocks' maxima of |x| as bits reduced side by side (one lane group of 4 per block), then the
 * shared exponent of attn_mx_shared_exp_bits lane-wise — floor(log2 amax) − emax from the exponent field, clamped
 * to [−127, 127]; a zero or subnormal amax (floor(log2 amax) <= −127) gives −127 for every format's emax >= 0 —
 * and the exact power of two 2^-se of attn_pow2_f32. A block holding inf or NaN has amax bits >= 0x7F800000: byte
 * 0xFF, factor 0 (as the scalar code, which takes the maximum over finite values only when it is used). The same
 * values, so bitwise kqp_mx_scale_row. */
static inline __attribute__((always_inline)) void kqp_mx_regs4(__m512 *v, int nb, int32_t emax, uint8_t *e8) {
    /* emax >= 0 (8 / 15 / 2) is what makes every zero or subnormal block −127 below */
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m[4];
    _Pragma("GCC unroll 4") for (int b = 0; b < 4; b++) {
        m[b] = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v[2 * b]), abs_mask),
                                _mm512_and_si512(_mm512_castps_si512(v[2 * b + 1]), abs_mask));
    }
    /* 128-bit lane b of c holds four partial maxima of block b; then every element of lane b its maximum */
    const __m512i a01 =
        _mm512_max_epu32(_mm512_shuffle_i32x4(m[0], m[1], 0x44), _mm512_shuffle_i32x4(m[0], m[1], 0xEE));
    const __m512i a23 =
        _mm512_max_epu32(_mm512_shuffle_i32x4(m[2], m[3], 0x44), _mm512_shuffle_i32x4(m[2], m[3], 0xEE));
    __m512i c = _mm512_max_epu32(_mm512_shuffle_i32x4(a01, a23, 0x88), _mm512_shuffle_i32x4(a01, a23, 0xDD));
    c = _mm512_max_epu32(c, _mm512_shuffle_epi32(c, (_MM_PERM_ENUM)0x4E));
    c = _mm512_max_epu32(c, _mm512_shuffle_epi32(c, (_MM_PERM_ENUM)0xB1));
    const __m512i e = _mm512_srli_epi32(c, 23);
    __m512i se =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(127 + emax)), _mm512_set1_epi32(-127)),
                         _mm512_set1_epi32(127));
    se = _mm512_mask_mov_epi32(se, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), _mm512_set1_epi32(-127));
    const __mmask16 bad = _mm512_cmpge_epu32_mask(c, _mm512_set1_epi32(0x7F800000));
    const __m512i k = _mm512_sub_epi32(_mm512_setzero_si512(), se); /* 2^k, k = -se in [-127, 127] */
    __m512i inv =
        _mm512_mask_mov_epi32(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23),
                              _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(-126)), _mm512_set1_epi32(0x00400000));
    inv = _mm512_maskz_mov_epi32((__mmask16)~bad, inv);
    const __m512i code =
        _mm512_mask_mov_epi32(_mm512_add_epi32(se, _mm512_set1_epi32(127)), bad, _mm512_set1_epi32(0xFF));
    const __m128i bytes = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(code),
                                           _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    _mm_mask_storeu_epi8(e8, (__mmask16)((1u << nb) - 1u), bytes);
    _Pragma("GCC unroll 4") for (int b = 0; b < 4; b++) if (b < nb) {
        const __m512 f = _mm512_castsi512_ps(_mm512_permutexvar_epi32(_mm512_set1_epi32(4 * b), inv));
        v[2 * b] = _mm512_mul_ps(v[2 * b], f);
        v[2 * b + 1] = _mm512_mul_ps(v[2 * b + 1], f);
    }
}

/* kqp_mx_regs4 on x in memory (blocks past nb are neither read nor written). */
static inline __attribute__((always_inline)) void kqp_mx_blocks4(float *x, int nb, int32_t emax, uint8_t *e8) {
    __m512 v[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) v[i] =
        i < 2 * nb ? _mm512_loadu_ps(x + 16 * i) : _mm512_setzero_ps();
    kqp_mx_regs4(v, nb, emax, e8);
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) if (i < 2 * nb) _mm512_storeu_ps(x + 16 * i, v[i]);
}

/* kqp_mx_scale_row: rows of whole 32-element blocks four blocks at a time (kqp_mx_blocks4); otherwise a block of
 * 32 in two zmm: the maximum as in attn_k_absmax_bits_avx512bf16, the shared exponent of the scalar code, one
 * multiply by the exact power of two per element. */
void attn_k_mx_scale_row_avx512bf16(float *x, int64_t n, int32_t emax, uint8_t *e8) {
    if (n % 32 == 0) {
        for (int64_t c0 = 0; c0 < n; c0 += 128)
            kqp_mx_blocks4(x + c0, n - c0 >= 128 ? 4 : (int)((n - c0) / 32), emax, e8 + c0 / 32);
        return;
    }
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    for (int64_t c0 = 0; c0 < n; c0 += 32) {
        const int64_t m = n - c0 < 32 ? n - c0 : 32;
        const __mmask16 k0 = m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1u);
        const __mmask16 k1 = m >= 32 ? (__mmask16)0xFFFF : m > 16 ? (__mmask16)((1u << (m - 16)) - 1u) : 0;
        const __m512 x0 = _mm512_maskz_loadu_ps(k0, x + c0), x1 = _mm512_maskz_loadu_ps(k1, x + c0 + 16);
        const __m512i a0 = _mm512_and_si512(_mm512_castps_si512(x0), abs_mask);
        const __m512i a1 = _mm512_and_si512(_mm512_castps_si512(x1), abs_mask);
        const __mmask16 nf = _mm512_cmpge_epu32_mask(a0, inf) | _mm512_cmpge_epu32_mask(a1, inf);
        const __m512i mx = _mm512_max_epu32(_mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a0, inf), a0),
                                            _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(a1, inf), a1));
        const int bad = nf != 0;
        const int32_t se = bad ? 0 : attn_mx_shared_exp_bits(emax, (uint32_t)_mm512_reduce_max_epu32(mx));
        e8[c0 / 32] = bad ? 0xFF : (uint8_t)(se + 127);
        const __m512 inv = _mm512_set1_ps(bad ? 0.0f : attn_pow2_f32(-se));
        _mm512_mask_storeu_ps(x + c0, k0, _mm512_mul_ps(x0, inv));
        _mm512_mask_storeu_ps(x + c0 + 16, k1, _mm512_mul_ps(x1, inv));
    }
}

void attn_k_absmax_cols_avx512bf16(const float *x, int64_t rows, int64_t width, uint32_t *amax, uint32_t *nonfinite) {
    kqp_absmax_cols(x, rows, width, amax, nonfinite);
}

/* 16 values per step, by rounding instead of kqp_e2m1's seven comparisons: E2M1's thresholds are the midpoints of
 * its grid with ties to the even code, which is round to nearest even of |y| to the grid spacing of its binade,
 * 2^(max(E, 0) − 1) for |y| in [2^E, 2^(E+1)): (|y| + M) − M with M = 2^(max(E, 0) + 22) rounds there in one
 * addition (the float spacing at M is that grid spacing), min(·, 6) saturates (inf included; the exponent is
 * clamped so M stays finite), and 2r ∈ {0, 1, 2, 3, 4, 6, 8, 12} indexes the code. Sign bit as there, NaN → 0.
 * Bitwise kqp_e2m1 (tests/conformance/test_quant_codes.c sweeps the float bit patterns). */
static inline __attribute__((always_inline)) __m128i kqp_e2m1_16(__m512 y) {
    const __m512i lut = _mm512_setr_epi32(0, 1, 2, 3, 4, 0, 5, 0, 6, 0, 0, 0, 7, 0, 0, 0);
    const __m512i u = _mm512_castps_si512(y);
    const __m512i ab = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i e =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_srli_epi32(ab, 23), _mm512_set1_epi32(127)), _mm512_set1_epi32(140));
    const __m512 big = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(22)), 23));
    const __m512 r =
        _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(_mm512_castsi512_ps(ab), big), big), _mm512_set1_ps(6.0f));
    __m512i c = _mm512_permutexvar_epi32(_mm512_cvtps_epi32(_mm512_add_ps(r, r)), lut);
    c = _mm512_or_si512(c, _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8)));
    c = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(ab, _mm512_set1_epi32(0x7F800000)), c);
    const __m512i pairs = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
    return _mm512_cvtepi64_epi8(pairs); /* 8 bytes: elements 2i (low nibble) and 2i + 1 */
}

void attn_k_encode_e2m1_avx512bf16(const float *y, int64_t n, uint8_t *dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm_storel_epi64((__m128i *)(void *)(dst + i / 2), kqp_e2m1_16(_mm512_loadu_ps(y + i)));
    if (i < n)
        kqp_encode_e2m1(y + i, n - i, dst + i / 2);
}

/* 16 elements of a F32/F16/BF16 row from i (DT a constant after inlining), widened exactly, with the sign bit
 * flipped where the sign is −1 (sgn: 0x80000000 there, else 0): as doubles, the values s·x of kqp_signed8 (a NaN
 * may differ in sign, which no later step looks at). */
static inline __attribute__((always_inline)) void kqp_signed16_dt(const void *src, const uint32_t *sgn, int64_t i,
                                                                  __m512d *lo, __m512d *hi, const int DT) {
    __m512 f;
    if (DT == ATTN_DTYPE_BF16)
        f = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)src + i))), 16));
    else if (DT == ATTN_DTYPE_F16)
        f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)src + i)));
    else
        f = _mm512_loadu_ps((const float *)src + i);
    f = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(f), _mm512_loadu_si512(sgn + i)));
    *lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
    *hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1));
}

/* EL: the element format — 0 E2M1 (two codes per byte), 1 FP8 E4M3, 2 FP8 E5M2 (a byte each; the codes of
 * cvt_to_fp8 with scale 1, which is how the unfused path encodes MX FP8 elements), or 3 / 4: no codes but their
 * bf16 operands, E4M3 / E5M2 (uint16 words at codes: the code's value times its block's factor, truncated — what
 * dequant_row_bf16 makes of the code with factors from the E8M0 bytes, shift 5) — a constant after inlining. */
static inline __attribute__((always_inline)) void kqp_mx_rot_regs(const void *src, const uint32_t *sgn, double norm,
                                                                  int32_t emax, uint8_t *codes, uint8_t *e8,
                                                                  const int NV, const int DT, const int EL) {
    __m512d x[16];
    _Pragma("GCC unroll 8") for (int v = 0; v < NV; v += 2) {
        kqp_signed16_dt(src, sgn, 8 * v, &x[v], &x[v + 1], DT);
        x[v] = kqp_bfly8(x[v]);
        x[v + 1] = kqp_bfly8(x[v + 1]);
    }
    kqp_fwht_regs(x, NV);
    const __m512d nm = _mm512_set1_pd(norm);
    __m512 y[8];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) y[i] =
        2 * i < NV ? _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(x[2 * i], nm))),
                                        _mm512_cvtpd_ps(_mm512_mul_pd(x[2 * i + 1], nm)), 1)
                   : _mm512_setzero_ps();
    kqp_mx_regs4(y, NV / 4, emax, e8);
    if (EL >= 3) {
        static const uint16_t lows[32]
            __attribute__((aligned(64))) = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                            32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62};
        const __m512i idx = _mm512_load_si512(lows); /* the low words of two vectors of 16 lanes */
        _Pragma("GCC unroll 4") for (int i = 0; i < 8; i += 2) if (2 * i < NV) {
            const __m512 f = _mm512_set1_ps(attn_e8m0_factor(e8[i / 2])); /* both vectors are block i / 2 */
            const __m512i w0 =
                _mm512_castps_si512(_mm512_mul_ps(k512_fp8_grid(y[i], EL == 3 ? 3 : 2, EL == 3 ? 7 : 15), f));
            const __m512i w1 =
                _mm512_castps_si512(_mm512_mul_ps(k512_fp8_grid(y[i + 1], EL == 3 ? 3 : 2, EL == 3 ? 7 : 15), f));
            _mm512_storeu_si512(codes + 32 * i,
                                _mm512_permutex2var_epi16(_mm512_srli_epi32(w0, 16), idx, _mm512_srli_epi32(w1, 16)));
        }
        return;
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) if (2 * i < NV) {
        if (EL == 0)
            _mm_storel_epi64((__m128i *)(void *)(codes + 8 * i), kqp_e2m1_16(y[i]));
        else
            _mm_storeu_si128((__m128i *)(void *)(codes + 16 * i),
                             _mm512_cvtepi32_epi8(k512_f32_to_fp8(y[i], EL == 1 ? 3 : 2, EL == 1 ? 7 : 15)));
    }
}

static inline __attribute__((always_inline)) int kqp_mx_rot_n(const void *src, const uint32_t *sgn, int64_t n,
                                                              double norm, int32_t emax, uint8_t *codes, uint8_t *e8,
                                                              const int DT, const int EL) {
    switch (n) {
    case 32:
        kqp_mx_rot_regs(src, sgn, norm, emax, codes, e8, 4, DT, EL);
        return 1;
    case 64:
        kqp_mx_rot_regs(src, sgn, norm, emax, codes, e8, 8, DT, EL);
        return 1;
    case 128:
        kqp_mx_rot_regs(src, sgn, norm, emax, codes, e8, 16, DT, EL);
        return 1;
    default:
        return 0;
    }
}

static inline __attribute__((always_inline)) int kqp_mx_rot_dt(const void *src, attn_dtype src_dtype,
                                                               const uint32_t *sgn, int64_t n, double norm,
                                                               int32_t emax, uint8_t *codes, uint8_t *e8,
                                                               const int EL) {
    switch (src_dtype) {
    case ATTN_DTYPE_F32:
        return kqp_mx_rot_n(src, sgn, n, norm, emax, codes, e8, ATTN_DTYPE_F32, EL);
    case ATTN_DTYPE_F16:
        return kqp_mx_rot_n(src, sgn, n, norm, emax, codes, e8, ATTN_DTYPE_F16, EL);
    case ATTN_DTYPE_BF16:
        return kqp_mx_rot_n(src, sgn, n, norm, emax, codes, e8, ATTN_DTYPE_BF16, EL);
    default:
        return 0;
    }
}

/* The signs (±1) of a row of n <= 128 as sign-bit masks: 0x80000000 where −1, else 0. */
static inline void kqp_sign_masks(const int8_t *signs, int64_t n, uint32_t *sgn) {
    for (int64_t i = 0; i < n; i += 16)
        _mm512_storeu_si512(
            sgn + i, _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(signs + i))),
                                      _mm512_set1_epi32((int)0x80000000u)));
}

/* hadamard_row, mx_scale_row and the element encoding (encode_e2m1, or cvt_to_fp8 with scale 1 for MXFP8) of one
 * row in registers, for n of 32, 64 or 128: the same operations on the same values, so the same codes and E8M0
 * bytes. The signs enter as sign-bit masks, 16 per step, built once per call. */
int attn_k_mx_rot_row_avx512bf16(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n, double norm,
                                 int32_t emax, attn_dtype elem, uint8_t *codes, uint8_t *e8) {
    if ((elem != ATTN_DTYPE_FP4_E2M1 && elem != ATTN_DTYPE_FP8_E4M3 && elem != ATTN_DTYPE_FP8_E5M2) ||
        (n != 32 && n != 64 && n != 128) ||
        (src_dtype != ATTN_DTYPE_F32 && src_dtype != ATTN_DTYPE_F16 && src_dtype != ATTN_DTYPE_BF16))
        return 0;
    uint32_t sgn[128];
    kqp_sign_masks(signs, n, sgn);
    if (elem == ATTN_DTYPE_FP4_E2M1)
        return kqp_mx_rot_dt(src, src_dtype, sgn, n, norm, emax, codes, e8, 0);
    if (elem == ATTN_DTYPE_FP8_E4M3)
        return kqp_mx_rot_dt(src, src_dtype, sgn, n, norm, emax, codes, e8, 1);
    return kqp_mx_rot_dt(src, src_dtype, sgn, n, norm, emax, codes, e8, 2);
}

/* attn_k_mx_rot_row_avx512bf16 for MX FP8 rows writing, instead of the codes, their bf16 operands (the
 * quantization's wide operands, fwd_quant.h). */
int attn_k_mx_rot_row_bf16_avx512bf16(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n,
                                      double norm, int32_t emax, attn_dtype elem, uint16_t *dst, uint8_t *e8) {
    if ((elem != ATTN_DTYPE_FP8_E4M3 && elem != ATTN_DTYPE_FP8_E5M2) || (n != 32 && n != 64 && n != 128) ||
        (src_dtype != ATTN_DTYPE_F32 && src_dtype != ATTN_DTYPE_F16 && src_dtype != ATTN_DTYPE_BF16))
        return 0;
    uint32_t sgn[128];
    kqp_sign_masks(signs, n, sgn);
    uint8_t *w = (uint8_t *)(void *)dst;
    return kqp_mx_rot_dt(src, src_dtype, sgn, n, norm, emax, w, e8, elem == ATTN_DTYPE_FP8_E4M3 ? 3 : 4);
}
