/*
 * tile_kv_avx512.c — qk_tile_kv / pv_rows_kv on AVX-512: K/V rows in their storage dtype (f32, f16, bf16)
 * read in place from the caller's tensor or cache page and widened in registers, so a decode step makes no
 * conversion pass through a workspace (docs/KERNELS.md §5).
 *
 * qk, few rows (decode: one token × the GQA group, or a short speculative block): 16 keys in the lanes, K
 * transposed in registers, the same FMA chain over d ascending from 0 as qk_tile. pv_rows_kv: head
 * dimensions in the lanes of a row-major accumulator, the same chain over k ascending as pv_tile (bf16 V:
 * even/odd column halves of 64-byte loads, the pair-split layout of attn_rows_kv_col).
 * Widening bf16/f16 to f32 is exact, so every output is bitwise the float kernels' on the converted rows
 * (tests/kernels checks it for every dtype and row count).
 * 16-bit K is transposed as 32-bit pairs (d, d+1), 32 head dimensions per transpose, then split into the
 * even and odd halves: half the shuffles of transposing widened floats. qk on more rows widens rows in
 * chunks of 16 keys on the stack and calls qk_tile (generic/tile_kernels_kv.h).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "tile_kv_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/avx512/transpose_avx512.h"
#include "kernels/generic/tile_kernels_kv.h"
#include "kernels/kernels.h"

#define K512_KV_QK_ROWS 12 /* as qk_tile_avx512's keys-in-lanes threshold */

/* 16 consecutive elements of a row from element d0 (masked by m), widened to f32. DT: attn_dtype. */
static inline __attribute__((always_inline)) __m512 k512_kv_load(const void *row, int64_t d0, __mmask16 m,
                                                                 const int DT) {
    if (DT == ATTN_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + d0);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d0);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Unmasked 16 elements. */
static inline __attribute__((always_inline)) __m512 k512_kv_load16(const void *row, int64_t d0, const int DT) {
    if (DT == ATTN_DTYPE_F32)
        return _mm512_loadu_ps((const float *)row + d0);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d0));
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Even / odd element of each 32-bit pair of 16-bit values, widened to f32. */
static inline __attribute__((always_inline)) __m512 k512_pair_lo(__m512 x, const int DT) {
    const __m512i u = _mm512_castps_si512(x);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u));
}
static inline __attribute__((always_inline)) __m512 k512_pair_hi(__m512 x, const int DT) {
    const __m512i u = _mm512_castps_si512(x);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
}

/* ---------------------------------------------------------------------------------------------
 * Q·Kᵀ: s[k][r] for 16 keys (nk valid) × R rows, keys in lanes; lanes r ≥ R of written s rows are 0.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k512_qk_kv_keys16(const float *restrict q_t, int64_t head_size,
                                                                    const void *const *k_rows, int nk,
                                                                    float *restrict s, const int R, const int DT) {
    __m512 acc[K512_KV_QK_ROWS];
    __m512 x[16];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int64_t d0 = 0;
    if (DT != ATTN_DTYPE_F32) { /* 32 head dimensions per transpose: dword j of a row = (d0+2j, d0+2j+1) */
        for (; d0 + 32 <= head_size; d0 += 32) {
            _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
                b < nk ? _mm512_loadu_ps((const float *)(const void *)((const uint16_t *)k_rows[b] + d0))
                       : _mm512_setzero_ps();
            k512_transpose16(x);
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                const __m512 lo = k512_pair_lo(x[j], DT), hi = k512_pair_hi(x[j], DT);
                const float *q0 = q_t + (d0 + 2 * j) * ATTN_QB, *q1 = q0 + ATTN_QB;
                _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {
                    acc[r] = _mm512_fmadd_ps(lo, _mm512_set1_ps(q0[r]), acc[r]);
                    acc[r] = _mm512_fmadd_ps(hi, _mm512_set1_ps(q1[r]), acc[r]);
                }
            }
        }
    }
    for (; d0 + 16 <= head_size; d0 += 16) {
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
            b < nk ? k512_kv_load16(k_rows[b], d0, DT) : _mm512_setzero_ps();
        k512_transpose16(x); /* x[j] lane b = K[b][d0 + j] */
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] =
                _mm512_fmadd_ps(x[j], _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    if (d0 < head_size) {
        const int nd = (int)(head_size - d0);
        const __mmask16 dm = (__mmask16)((1u << nd) - 1u);
        float kt[16][16];
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
            b < nk ? k512_kv_load(k_rows[b], d0, dm, DT) : _mm512_setzero_ps();
        k512_transpose16(x);
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) _mm512_storeu_ps(kt[j], x[j]);
        for (int j = 0; j < nd; j++) {
            const __m512 kj = _mm512_loadu_ps(kt[j]);
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] =
                _mm512_fmadd_ps(kj, _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R ? acc[r] : _mm512_setzero_ps();
    k512_transpose16(x); /* x[b] lane r = s[b][r] */
    _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) if (b < nk) _mm512_storeu_ps(s + b * ATTN_QB, x[b]);
}

static inline __attribute__((always_inline)) void k512_qk_kv_few(const float *q_t, int64_t head_size,
                                                                 const void *const *k_rows, int64_t num_keys, float *s,
                                                                 const int R, const int DT) {
    int64_t k = 0;
    for (; k + 16 <= num_keys; k += 16)
        k512_qk_kv_keys16(q_t, head_size, k_rows + k, 16, s + k * ATTN_QB, R, DT);
    if (k < num_keys)
        k512_qk_kv_keys16(q_t, head_size, k_rows + k, (int)(num_keys - k), s + k * ATTN_QB, R, DT);
}

#define K512_QK_KV_CASE(n)                                                                                             \
    case n:                                                                                                            \
        if (kv_dtype == ATTN_DTYPE_F32)                                                                                \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F32);                                    \
        else if (kv_dtype == ATTN_DTYPE_BF16)                                                                          \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_BF16);                                   \
        else                                                                                                           \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F16);                                    \
        return;

void attn_k_qk_tile_kv_avx512(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                              attn_dtype kv_dtype, int64_t num_keys, float *s) {
    switch (num_rows) {
        K512_QK_KV_CASE(1)
        K512_QK_KV_CASE(2)
        K512_QK_KV_CASE(3)
        K512_QK_KV_CASE(4)
        K512_QK_KV_CASE(5)
        K512_QK_KV_CASE(6)
        K512_QK_KV_CASE(7)
        K512_QK_KV_CASE(8)
        K512_QK_KV_CASE(9)
        K512_QK_KV_CASE(10)
        K512_QK_KV_CASE(11)
        K512_QK_KV_CASE(12)
    default:
        break;
    }
    k_qk_tile_kv_chunked(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, attn_k_qk_tile_avx512,
                         attn_k_cvt_to_f32_avx512);
}

/* ---------------------------------------------------------------------------------------------
 * P·V into the row-major accumulator o_d[num_rows][head_size_v]: groups of RB rows × NC chunks of 16 head
 * dimensions held in registers over all keys (keys outer: each V row is read front to back, NC·64 B at a
 * time), so there is nothing to transpose. o_d[r][d] = fma(v[k][d], p[k][r], o_d[r][d]), k ascending.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k512_pv_rows_pass(const float *restrict p, int64_t num_keys,
                                                                    const void *const *v_rows, int64_t r0, int64_t d0,
                                                                    int64_t head_size_v, float *restrict o_d,
                                                                    const int RB, const int NC, const int DT) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
        acc[r][c] = _mm512_loadu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c);
    for (int64_t k = 0; k < num_keys; k++) {
        __m512 v[8];
        _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) v[c] = k512_kv_load16(v_rows[k], d0 + 16 * c, DT);
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512 pr = _mm512_set1_ps(pk[r]);
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(v[c], pr, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
        _mm512_storeu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c, acc[r][c]);
}

/* The last head_size_v % 16 columns of rows [r0, r0 + RB), masked. */
static inline __attribute__((always_inline)) void k512_pv_rows_tail(const float *restrict p, int64_t num_keys,
                                                                    const void *const *v_rows, int64_t r0, int64_t d0,
                                                                    int64_t head_size_v, float *restrict o_d,
                                                                    const int RB, const int DT) {
    const __mmask16 dm = (__mmask16)((1u << (head_size_v - d0)) - 1u);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] =
        _mm512_maskz_loadu_ps(dm, o_d + (r0 + r) * head_size_v + d0);
    for (int64_t k = 0; k < num_keys; k++) {
        const __m512 v = k512_kv_load(v_rows[k], d0, dm, DT);
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(pk[r]), acc[r]);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
        _mm512_mask_storeu_ps(o_d + (r0 + r) * head_size_v + d0, dm, acc[r]);
}

/* bf16 V, NB full 32-column blocks from d0 in the pair-split layout (attn_rows_kv_col): one 64-byte load per
 * block and key, even columns = low halves << 16, odd columns = high halves masked. */
static inline __attribute__((always_inline)) void
k512_pv_rows_pass_pairs(const float *restrict p, int64_t num_keys, const void *const *v_rows, int64_t r0, int64_t d0,
                        int64_t head_size_v, float *restrict o_d, const int RB, const int NB) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        acc[r][c] = _mm512_loadu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c);
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int64_t k = 0; k < num_keys; k++) {
        __m512 v[8];
        _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++) {
            const __m512i u = _mm512_loadu_si512((const void *)((const uint16_t *)v_rows[k] + d0 + 32 * b));
            v[2 * b] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
            v[2 * b + 1] = _mm512_castsi512_ps(_mm512_and_si512(u, hi_mask));
        }
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512 pr = _mm512_set1_ps(pk[r]);
            _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++) acc[r][c] = _mm512_fmadd_ps(v[c], pr, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        _mm512_storeu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c, acc[r][c]);
}

/* Rows [r0, r0 + RB): 8 chunks per pass for 1–2 rows, 4 for 3–4 (≤ 16 accumulators), then 1-chunk passes;
 * bf16 V in 32-column pair blocks over the full blocks first. */
static inline __attribute__((always_inline)) void k512_pv_rows_group(const float *p, int64_t num_keys,
                                                                     const void *const *v_rows, int64_t r0,
                                                                     int64_t head_size_v, float *o_d, const int RB,
                                                                     const int DT) {
    const int NC = RB <= 2 ? 8 : 4;
    int64_t d0 = 0;
    if (DT == ATTN_DTYPE_BF16) {
        const int64_t full = head_size_v & ~(int64_t)31;
        for (; d0 + 16 * NC <= full; d0 += 16 * NC)
            k512_pv_rows_pass_pairs(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, NC / 2);
        for (; d0 < full; d0 += 32)
            k512_pv_rows_pass_pairs(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, 1);
    }
    for (; d0 + 16 * NC <= head_size_v; d0 += 16 * NC)
        k512_pv_rows_pass(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, NC, DT);
    for (; d0 + 16 <= head_size_v; d0 += 16)
        k512_pv_rows_pass(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, 1, DT);
    if (d0 < head_size_v)
        k512_pv_rows_tail(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, DT);
}

static inline __attribute__((always_inline)) void k512_pv_rows_dt(const float *p, int64_t num_keys, int64_t num_rows,
                                                                  const void *const *v_rows, int64_t head_size_v,
                                                                  float *o_d, const int DT) {
    int64_t r0 = 0;
    for (; r0 + 4 <= num_rows; r0 += 4)
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 4, DT);
    switch (num_rows - r0) {
    case 3:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 3, DT);
        break;
    case 2:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 2, DT);
        break;
    case 1:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 1, DT);
        break;
    default:
        break;
    }
}

void attn_k_pv_rows_kv_avx512(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                              attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    if (kv_dtype == ATTN_DTYPE_F32)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F32);
    else if (kv_dtype == ATTN_DTYPE_BF16)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_BF16);
    else
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F16);
}
