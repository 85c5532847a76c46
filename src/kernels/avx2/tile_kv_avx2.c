/*
 * tile_kv_avx2.c — qk_tile_kv / pv_rows_kv on AVX2+FMA+F16C: K/V rows in their storage dtype (f32, f16,
 * bf16) read in place and widened in registers, so a decode step makes no conversion pass through a
 * workspace (docs/KERNELS.md §5).
 *
 * Few rows (decode: one token × the GQA group) fill only R of the 8 lanes in the row-lane layout of
 * qk_tile_avx2/pv_tile_avx2, so here the lanes hold 8 keys (qk: K transposed 8×8 in registers, each row's
 * q[d] broadcast) or 8 head dimensions (pv_rows_kv: a row-major accumulator, V rows loaded in place, each
 * row's p[k] broadcast). Every output is the same FMA chain as in the row-lane kernels (qk over d ascending
 * from 0, pv over k ascending from the incoming o) and widening is exact, so results are bitwise the float
 * kernels' on converted rows. qk on more rows widens rows in chunks of 16 keys and calls qk_tile_avx2.
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "tile_kv_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include "kernels/avx2/transpose_avx2.h"
#include "kernels/generic/tile_kernels_kv.h"
#include "kernels/kernels.h"

#define K256_KV_QK_ROWS 8

/* 8 fp8 codes (low 8 bytes of b) widened exactly to f32. E5M2 is the high byte of the binary16 of the same
 * value (same exponent width and bias). E4M3's magnitude bits shifted into binary16 position read as the value
 * times 2^-8 (bias 15 instead of 7; its subnormals land on binary16 subnormals), so × 256 restores it exactly;
 * its NaN codes (S.1111.111) become NaN. The bits equal cvt_to_f32 (attn_fp8_to_float) of every code. */
static inline __attribute__((always_inline)) __m256 k256_fp8x8_to_f32(__m128i b, const int DT) {
    const __m128i w = _mm_cvtepu8_epi16(b), mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
    const __m128i sign16 = _mm_and_si128(w, _mm_set1_epi16(0x80));
    __m256 x;
    __m128i nan16;
    if (DT == ATTN_DTYPE_FP8_E5M2) {
        x = _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
        nan16 = _mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C)); /* S.11111.{01,10,11} */
    } else {
        x = _mm256_mul_ps(_mm256_cvtph_ps(_mm_or_si128(_mm_slli_epi16(sign16, 8), _mm_slli_epi16(mag, 7))),
                          _mm256_set1_ps(256.0f));
        nan16 = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)); /* S.1111.111 */
    }
    /* a NaN code gives the quiet NaN sign | 0x7fc00000, as the scalar widening (whatever cvtph's payload) */
    const __m256i qnan = _mm256_or_si256(_mm256_slli_epi32(_mm256_cvtepu16_epi32(sign16), 24),
                                         _mm256_set1_epi32(0x7fc00000));
    return _mm256_blendv_ps(x, _mm256_castsi256_ps(qnan), _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan16)));
}

static inline __attribute__((always_inline)) int k256_is_fp8(const int DT) {
    return DT == ATTN_DTYPE_FP8_E4M3 || DT == ATTN_DTYPE_FP8_E5M2;
}

/* 8 consecutive elements of a row from element d0, widened to f32 (nd < 8: the first nd, rest 0). */
static inline __attribute__((always_inline)) __m256 k256_kv_load8(const void *row, int64_t d0, const int DT) {
    if (DT == ATTN_DTYPE_F32)
        return _mm256_loadu_ps((const float *)row + d0);
    if (k256_is_fp8(DT)) return k256_fp8x8_to_f32(_mm_loadl_epi64((const __m128i *)((const uint8_t *)row + d0)), DT);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + d0));
    if (DT == ATTN_DTYPE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}
static inline __attribute__((always_inline)) __m256 k256_kv_load_part(const void *row, int64_t d0, int nd,
                                                                      const int DT) {
    float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (DT == ATTN_DTYPE_F32) {
        for (int j = 0; j < nd; j++)
            buf[j] = ((const float *)row)[d0 + j];
    } else if (k256_is_fp8(DT)) {
        uint8_t c[16] = {0};
        for (int j = 0; j < nd; j++)
            c[j] = ((const uint8_t *)row)[d0 + j];
        return k256_kv_load8(c, 0, DT);
    } else {
        uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = 0; j < nd; j++)
            h[j] = ((const uint16_t *)row)[d0 + j];
        return k256_kv_load8(h, 0, DT);
    }
    return _mm256_loadu_ps(buf);
}

/* ---------------------------------------------------------------------------------------------
 * Q·Kᵀ: s[k][r] for 8 keys (nk valid) × R rows, keys in lanes.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k256_qk_kv_keys8(const float *restrict q_t, int64_t head_size,
                                                                   const void *const *k_rows, int nk, float *restrict s,
                                                                   const int R, const int DT, attn_kv_prefetch *pf,
                                                                   int64_t pfn) {
    __m256 acc[K256_KV_QK_ROWS];
    __m256 x[8];
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    int64_t d0 = 0;
    if (DT == ATTN_DTYPE_BF16) { /* 16 head dimensions per transpose: dword j of a row = (d0+2j, d0+2j+1) */
        const __m256i hi_mask = _mm256_set1_epi32((int)0xFFFF0000u);
        for (; d0 + 16 <= head_size; d0 += 16) {
            _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) x[b] =
                b < nk ? _mm256_loadu_ps((const float *)(const void *)((const uint16_t *)k_rows[b] + d0))
                       : _mm256_setzero_ps();
            k256_transpose8(x);
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
                attn_kv_prefetch_step(pf, pfn);
                const __m256i u = _mm256_castps_si256(x[j]);
                const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
                const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(u, hi_mask));
                const float *q0 = q_t + (d0 + 2 * j) * ATTN_QB, *q1 = q0 + ATTN_QB;
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
                    acc[r] = _mm256_fmadd_ps(lo, _mm256_broadcast_ss(q0 + r), acc[r]);
                    acc[r] = _mm256_fmadd_ps(hi, _mm256_broadcast_ss(q1 + r), acc[r]);
                }
            }
        }
    }
    for (; d0 + 8 <= head_size; d0 += 8) {
        _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) x[b] =
            b < nk ? k256_kv_load8(k_rows[b], d0, DT) : _mm256_setzero_ps();
        k256_transpose8(x); /* x[j] lane b = K[b][d0 + j] */
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            attn_kv_prefetch_step(pf, pfn);
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] =
                _mm256_fmadd_ps(x[j], _mm256_broadcast_ss(q + r), acc[r]);
        }
    }
    if (d0 < head_size) {
        const int nd = (int)(head_size - d0);
        _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) x[b] =
            b < nk ? k256_kv_load_part(k_rows[b], d0, nd, DT) : _mm256_setzero_ps();
        k256_transpose8(x);
        for (int j = 0; j < nd; j++) {
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r] =
                _mm256_fmadd_ps(x[j], _mm256_broadcast_ss(q + r), acc[r]);
        }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) x[r] = r < R ? acc[r] : _mm256_setzero_ps();
    k256_transpose8(x); /* x[b] lane r = s[b][r] */
    _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) if (b < nk) _mm256_storeu_ps(s + b * ATTN_QB, x[b]);
}

static inline __attribute__((always_inline)) void k256_qk_kv_few(const float *q_t, int64_t head_size,
                                                                 const void *const *k_rows, int64_t num_keys, float *s,
                                                                 const int R, const int DT, attn_kv_prefetch *pf) {
    /* one step per transposed column: head_size / (head dimensions per column) per 8 keys */
    const int64_t per = DT == ATTN_DTYPE_BF16 ? 2 : 1;
    const int64_t pfn = attn_kv_prefetch_rate(pf, (num_keys + 7) / 8 * ((head_size + per - 1) / per));
    int64_t k = 0;
    for (; k + 8 <= num_keys; k += 8)
        k256_qk_kv_keys8(q_t, head_size, k_rows + k, 8, s + k * ATTN_QB, R, DT, pf, pfn);
    if (k < num_keys)
        k256_qk_kv_keys8(q_t, head_size, k_rows + k, (int)(num_keys - k), s + k * ATTN_QB, R, DT, pf, pfn);
}

#define K256_QK_KV_CASE(n)                                                                                             \
    case n:                                                                                                            \
        if (kv_dtype == ATTN_DTYPE_F32)                                                                                \
            k256_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F32, pf);                                \
        else if (kv_dtype == ATTN_DTYPE_BF16)                                                                          \
            k256_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_BF16, pf);                               \
        else if (kv_dtype == ATTN_DTYPE_FP8_E4M3)                                                                      \
            k256_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_FP8_E4M3, pf);                           \
        else if (kv_dtype == ATTN_DTYPE_FP8_E5M2)                                                                      \
            k256_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_FP8_E5M2, pf);                           \
        else                                                                                                           \
            k256_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F16, pf);                                \
        *pf_io = st;                                                                                                   \
        return;

void attn_k_qk_tile_kv_pf_avx2(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                               attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf_io) {
    attn_kv_prefetch st = *pf_io, *pf = &st; /* in registers (as in tile_kv_avx512.c) */
    switch (num_rows) {
        K256_QK_KV_CASE(1)
        K256_QK_KV_CASE(2)
        K256_QK_KV_CASE(3)
        K256_QK_KV_CASE(4)
        K256_QK_KV_CASE(5)
        K256_QK_KV_CASE(6)
        K256_QK_KV_CASE(7)
        K256_QK_KV_CASE(8)
    default:
        break;
    }
    k_qk_tile_kv_chunked(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, attn_k_qk_tile_avx2,
                         attn_k_cvt_to_f32_avx2);
}

void attn_k_qk_tile_kv_avx2(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                            attn_dtype kv_dtype, int64_t num_keys, float *s) {
    attn_kv_prefetch none = {0};
    attn_k_qk_tile_kv_pf_avx2(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, &none);
}

/* ---------------------------------------------------------------------------------------------
 * P·V into the row-major accumulator o_d[num_rows][head_size_v]: groups of RB rows × NC chunks of 8 head
 * dimensions in registers over all keys (keys outer, no transposes; ≤ 12 accumulators).
 * o_d[r][d] = fma(v[k][d], p[k][r], o_d[r][d]), k ascending.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k256_pv_rows_pass(const float *restrict p, int64_t num_keys,
                                                                    const void *const *v_rows, int64_t r0, int64_t d0,
                                                                    int nd, int64_t head_size_v, float *restrict o_d,
                                                                    const int RB, const int NC, const int DT,
                                                                    attn_kv_prefetch *pf, int64_t pfn) {
    __m256 acc[4][4];
    float *o = o_d + r0 * head_size_v + d0;
    if (nd == 8 * NC) {
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)
            acc[r][c] = _mm256_loadu_ps(o + r * head_size_v + 8 * c);
        for (int64_t k = 0; k < num_keys; k++) {
            __m256 v[4];
            attn_kv_prefetch_step(pf, pfn);
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) v[c] = k256_kv_load8(v_rows[k], d0 + 8 * c, DT);
            const float *pk = p + k * ATTN_QB + r0;
            _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
                const __m256 pr = _mm256_broadcast_ss(pk + r);
                _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++) acc[r][c] = _mm256_fmadd_ps(v[c], pr, acc[r][c]);
            }
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 4") for (int c = 0; c < NC; c++)
            _mm256_storeu_ps(o + r * head_size_v + 8 * c, acc[r][c]);
    } else { /* one partial chunk of nd < 8 columns (NC = 1) */
        float buf[4][8];
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            for (int j = 0; j < 8; j++)
                buf[r][j] = j < nd ? o[r * head_size_v + j] : 0.0f;
            acc[r][0] = _mm256_loadu_ps(buf[r]);
        }
        for (int64_t k = 0; k < num_keys; k++) {
            const __m256 v = k256_kv_load_part(v_rows[k], d0, nd, DT);
            const float *pk = p + k * ATTN_QB + r0;
            _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r][0] =
                _mm256_fmadd_ps(v, _mm256_broadcast_ss(pk + r), acc[r][0]);
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            _mm256_storeu_ps(buf[r], acc[r][0]);
            for (int j = 0; j < nd; j++)
                o[r * head_size_v + j] = buf[r][j];
        }
    }
}

/* bf16 V, one full 32-column block at d0 in the pair-split layout (attn_rows_kv_col), rows [r0, r0 + RB),
 * RB ≤ 2: two 32-byte loads per key (columns d0..15, d0+16..31); slots 0..7 = even columns of the first,
 * 8..15 = even of the second, 16..23 / 24..31 = their odd columns. */
static inline __attribute__((always_inline)) void
k256_pv_rows_pass_pairs(const float *restrict p, int64_t num_keys, const void *const *v_rows, int64_t r0, int64_t d0,
                        int64_t head_size_v, float *restrict o_d, const int RB, attn_kv_prefetch *pf, int64_t pfn) {
    __m256 acc[2][4];
    float *o = o_d + r0 * head_size_v + d0;
    _Pragma("GCC unroll 2") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[r][c] =
        _mm256_loadu_ps(o + r * head_size_v + 8 * c);
    const __m256i hi_mask = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int64_t k = 0; k < num_keys; k++) {
        attn_kv_prefetch_step(pf, pfn);
        const uint16_t *vr = (const uint16_t *)v_rows[k] + d0;
        const __m256i a = _mm256_loadu_si256((const __m256i *)vr), b = _mm256_loadu_si256((const __m256i *)(vr + 16));
        const __m256 v[4] = {
            _mm256_castsi256_ps(_mm256_slli_epi32(a, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(a, hi_mask)), _mm256_castsi256_ps(_mm256_and_si256(b, hi_mask))};
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 2") for (int r = 0; r < RB; r++) {
            const __m256 pr = _mm256_broadcast_ss(pk + r);
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) acc[r][c] = _mm256_fmadd_ps(v[c], pr, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 2") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
        _mm256_storeu_ps(o + r * head_size_v + 8 * c, acc[r][c]);
}

/* Rows [r0, r0 + RB): 4 chunks (32 columns) per pass for 1–2 rows, 3 for 3–4, then 1-chunk passes; bf16 V
 * in 32-column pair blocks (two rows at a time) over the full blocks first. */
static inline __attribute__((always_inline)) void k256_pv_rows_group(const float *p, int64_t num_keys,
                                                                     const void *const *v_rows, int64_t r0,
                                                                     int64_t head_size_v, float *o_d, const int RB,
                                                                     const int DT, attn_kv_prefetch *pf, int64_t pfn) {
    const int NC = RB <= 2 ? 4 : 3;
    int64_t d0 = 0;
    if (DT == ATTN_DTYPE_BF16) {
        const int64_t full = head_size_v & ~(int64_t)31;
        for (; d0 < full; d0 += 32) {
            int r = 0;
            for (; r + 2 <= RB; r += 2)
                k256_pv_rows_pass_pairs(p, num_keys, v_rows, r0 + r, d0, head_size_v, o_d, 2, pf, pfn);
            if (r < RB)
                k256_pv_rows_pass_pairs(p, num_keys, v_rows, r0 + r, d0, head_size_v, o_d, 1, pf, pfn);
        }
    }
    for (; d0 + 8 * NC <= head_size_v; d0 += 8 * NC)
        k256_pv_rows_pass(p, num_keys, v_rows, r0, d0, 8 * NC, head_size_v, o_d, RB, NC, DT, pf, pfn);
    for (; d0 + 8 <= head_size_v; d0 += 8)
        k256_pv_rows_pass(p, num_keys, v_rows, r0, d0, 8, head_size_v, o_d, RB, 1, DT, pf, pfn);
    if (d0 < head_size_v)
        k256_pv_rows_pass(p, num_keys, v_rows, r0, d0, (int)(head_size_v - d0), head_size_v, o_d, RB, 1, DT, pf, pfn);
}

static inline __attribute__((always_inline)) void k256_pv_rows_dt(const float *p, int64_t num_keys, int64_t num_rows,
                                                                  const void *const *v_rows, int64_t head_size_v,
                                                                  float *o_d, const int DT, attn_kv_prefetch *pf) {
    /* one step per key of each pass: at least one pass of up to 32 head dimensions per group of four rows */
    const int64_t pfn =
        attn_kv_prefetch_rate(pf, num_keys * ((num_rows + 3) / 4) * (head_size_v >= 64 ? head_size_v / 32 : 1));
    int64_t r0 = 0;
    for (; r0 + 4 <= num_rows; r0 += 4)
        k256_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 4, DT, pf, pfn);
    switch (num_rows - r0) {
    case 3:
        k256_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 3, DT, pf, pfn);
        break;
    case 2:
        k256_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 2, DT, pf, pfn);
        break;
    case 1:
        k256_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 1, DT, pf, pfn);
        break;
    default:
        break;
    }
}

void attn_k_pv_rows_kv_pf_avx2(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                               attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf_io) {
    attn_kv_prefetch st = *pf_io, *pf = &st;
    if (kv_dtype == ATTN_DTYPE_F32)
        k256_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F32, pf);
    else if (kv_dtype == ATTN_DTYPE_BF16)
        k256_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_BF16, pf);
    else if (kv_dtype == ATTN_DTYPE_FP8_E4M3)
        k256_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_FP8_E4M3, pf);
    else if (kv_dtype == ATTN_DTYPE_FP8_E5M2)
        k256_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_FP8_E5M2, pf);
    else
        k256_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F16, pf);
    *pf_io = st;
}

void attn_k_pv_rows_kv_avx2(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                            attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    attn_kv_prefetch none = {0};
    attn_k_pv_rows_kv_pf_avx2(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, &none);
}
