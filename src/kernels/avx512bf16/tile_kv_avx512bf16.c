/*
 * tile_kv_avx512bf16.c — qk_tile_kv / pv_rows_kv of the opt-in "avx512bf16" table: bf16 K/V rows are
 * multiplied by VDPBF16PS, two bf16 products per instruction and lane, instead of being widened to f32 and fed
 * to one FMA per term. The other operand must be bf16 too, so the query block (qk) and the probabilities P (pv)
 * are rounded to bf16 (round to nearest even, VCVTNEPS2BF16) — that is the arithmetic change that keeps this
 * table out of the default ones: its results are NOT the pinned bits of the exact tables; they are within the
 * tolerance stated in docs/SEMANTICS.md ("Opt-in kernel tables") of the oracle, and bitwise deterministic for
 * any thread count and batch composition (every chain depends only on the row and the absolute key range of a
 * tile, as in the exact tables). f32 and f16 K/V, and every other entry, are the avx512 table's (exact).
 *
 * VDPBF16PS (Intel SDM): per f32 lane, acc += a.hi·b.hi, then acc += a.lo·b.lo, each an FMA with round to
 * nearest even (a bf16 × bf16 product is exact in f32), bf16 denormal inputs read as zero and f32 denormal
 * results flushed to zero. So a score is the chain over head dimensions in the order d+1, d, d+3, d+2, …
 * (pairs (d, d+1) are the 32-bit lanes of a bf16 row), and a P·V element the chain over keys k+1, k, k+3, k+2, …
 *
 * qk: 16 keys in the lanes; 32 head dimensions of 16 K rows (64 bytes each) transposed as 32-bit pairs, one
 * VDPBF16PS per pair and query row (the exact kernel needs two widenings and two FMAs). pv: V rows k and k+1
 * interleaved into (v[k][d], v[k+1][d]) pairs by a shift and a 16-bit blend, in the pair-split column layout of
 * attn_rows_kv_col (even columns of a 32-column block first), one VDPBF16PS per 16 columns, key pair and row.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512BF16__)
#error "tile_kv_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include <immintrin.h>

#include "kernels/avx512/transpose_avx512.h"
#include "kernels/avx512bf16/bf16_pairs_avx512.h"
#include "kernels/kernels.h"

#define KBF_QK_ROWS 12 /* query rows per pass of the qk kernel (accumulators held in registers) */

static inline __attribute__((always_inline)) __m512 kbf_dot(__m512 acc, __m512i a, uint32_t b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)_mm512_set1_epi32((int)b));
}


/* ---------------------------------------------------------------------------------------------
 * Q·Kᵀ: s[k][r0 + r] for 16 keys (nk valid) × R rows from r0; qp[j][r] = the bf16 pair (q_t[2j][r], q_t[2j+1][r]).
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void kbf_qk_keys16(uint32_t (*qp)[ATTN_QB], int64_t r0,
                                                                int64_t head_size, const void *const *k_rows, int nk,
                                                                float *restrict s, const int R) {
    __m512 acc[KBF_QK_ROWS];
    __m512 x[16];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < head_size; d0 += 32) {
        const int64_t nd = head_size - d0 < 32 ? head_size - d0 : 32;
        const __mmask32 dm = nd == 32 ? (__mmask32)~0u : (__mmask32)((1u << nd) - 1u);
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
            b < nk ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(dm, (const uint16_t *)k_rows[b] + d0))
                   : _mm512_setzero_ps();
        k512_transpose16(x); /* x[j] lane b = (K[b][d0 + 2j], K[b][d0 + 2j + 1]) */
        const int np = (int)((nd + 1) / 2);
        uint32_t(*q)[ATTN_QB] = qp + d0 / 2;
        if (np == 16) {
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)
                acc[r] = kbf_dot(acc[r], _mm512_castps_si512(x[j]), q[j][r0 + r]);
        } else {
            for (int j = 0; j < np; j++) _Pragma("GCC unroll 12") for (int r = 0; r < R; r++)
                acc[r] = kbf_dot(acc[r], _mm512_castps_si512(x[j]), q[j][r0 + r]);
        }
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R ? acc[r] : _mm512_setzero_ps();
    k512_transpose16(x); /* x[b] lane r = s[b][r0 + r] */
    const __mmask16 rm = (__mmask16)((1u << R) - 1u);
    _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) if (b < nk)
        _mm512_mask_storeu_ps(s + b * ATTN_QB + r0, rm, x[b]);
}

static inline __attribute__((always_inline)) void kbf_qk_rows(uint32_t (*qp)[ATTN_QB], int64_t r0,
                                                              int64_t head_size, const void *const *k_rows,
                                                              int64_t num_keys, float *s, const int R) {
    int64_t k = 0;
    for (; k + 16 <= num_keys; k += 16) kbf_qk_keys16(qp, r0, head_size, k_rows + k, 16, s + k * ATTN_QB, R);
    if (k < num_keys) kbf_qk_keys16(qp, r0, head_size, k_rows + k, (int)(num_keys - k), s + k * ATTN_QB, R);
}

#define KBF_QK_CASE(n)                                                                                                 \
    case n:                                                                                                            \
        kbf_qk_rows(qp, r0, head_size, k_rows, num_keys, s, n);                                                        \
        break;

void attn_k_qk_prep_kv_avx512bf16(float *q_t, int64_t num_rows, int64_t head_size, attn_dtype kv_dtype) {
    if (kv_dtype != ATTN_DTYPE_BF16) return;
    /* in place, j ascending: pair j (rows 2j, 2j + 1) is written over row j, which pair j / 2 < j has read */
    const int64_t npairs = (head_size + 1) / 2;
    const int halves = num_rows > 16 ? 2 : 1;
    for (int64_t j = 0; j < npairs; j++)
        for (int h = 0; h < halves; h++)
            _mm512_storeu_si512((void *)(q_t + j * ATTN_QB + 16 * h), kbf_row_pair(q_t, j, h, head_size));
}

/* bf16 K: q_t holds the bf16 pairs written by attn_k_qk_prep_kv_avx512bf16 (kernels.h). */
void attn_k_qk_tile_kv_avx512bf16(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                  attn_dtype kv_dtype, int64_t num_keys, float *s) {
    if (kv_dtype != ATTN_DTYPE_BF16 || num_rows <= 0 || num_keys <= 0 || head_size <= 0) {
        attn_k_qk_tile_kv_avx512(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s);
        return;
    }
    uint32_t(*qp)[ATTN_QB] = (uint32_t(*)[ATTN_QB])(uintptr_t)q_t;
    for (int64_t r0 = 0; r0 < num_rows; r0 += KBF_QK_ROWS) {
        const int64_t nr = num_rows - r0 < KBF_QK_ROWS ? num_rows - r0 : KBF_QK_ROWS;
        switch (nr) {
            KBF_QK_CASE(1)
            KBF_QK_CASE(2)
            KBF_QK_CASE(3)
            KBF_QK_CASE(4)
            KBF_QK_CASE(5)
            KBF_QK_CASE(6)
            KBF_QK_CASE(7)
            KBF_QK_CASE(8)
            KBF_QK_CASE(9)
            KBF_QK_CASE(10)
            KBF_QK_CASE(11)
            KBF_QK_CASE(12)
        default:
            break;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * P·V into the row-major accumulator o_d[num_rows][head_size_v] (column layout attn_rows_kv_col for bf16):
 * RB rows × NB blocks of 32 columns (2·NB accumulators per row) over all key pairs, pp[kp][r] the bf16 pair
 * (p[2kp][r], p[2kp+1][r]); a missing odd last key reads a zero row with p = 0.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void kbf_v_pairs(const void *row0, const void *row1, int64_t d0,
                                                              __mmask32 dm, __m512i *even, __m512i *odd) {
    const __m512i u0 = _mm512_maskz_loadu_epi16(dm, (const uint16_t *)row0 + d0);
    const __m512i u1 = row1 ? _mm512_maskz_loadu_epi16(dm, (const uint16_t *)row1 + d0) : _mm512_setzero_si512();
    /* even lane i = (v0[2i], v1[2i]), odd lane i = (v0[2i+1], v1[2i+1]) */
    *even = _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, u0, _mm512_slli_epi32(u1, 16));
    *odd = _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, _mm512_srli_epi32(u0, 16), u1);
}

static inline __attribute__((always_inline)) void kbf_pv_pass(uint32_t (*pp)[ATTN_QB], int64_t num_keys,
                                                              const void *const *v_rows, int64_t r0, int64_t d0,
                                                              int64_t head_size_v, float *restrict o_d, const int RB,
                                                              const int NB) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        acc[r][c] = _mm512_loadu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c);
    for (int64_t k = 0; k < num_keys; k += 2) {
        __m512i v[8];
        const void *row1 = k + 1 < num_keys ? v_rows[k + 1] : NULL;
        _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++)
            kbf_v_pairs(v_rows[k], row1, d0 + 32 * b, (__mmask32)~0u, &v[2 * b], &v[2 * b + 1]);
        const uint32_t *pk = pp[k / 2] + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512i pr = _mm512_set1_epi32((int)pk[r]);
            _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
                acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)v[c], (__m512bh)pr);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        _mm512_storeu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c, acc[r][c]);
}

/* The columns past the last full 32-column block (in place, c = d), 16 at a time, masked: lane i =
 * (v[k][d0+i], v[k+1][d0+i]). */
static inline __attribute__((always_inline)) void kbf_pv_tail(uint32_t (*pp)[ATTN_QB], int64_t num_keys,
                                                              const void *const *v_rows, int64_t r0, int64_t d0,
                                                              int64_t head_size_v, float *restrict o_d, const int RB) {
    const int64_t nd = head_size_v - d0 < 16 ? head_size_v - d0 : 16;
    const __mmask16 dm = (__mmask16)((1u << nd) - 1u);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] =
        _mm512_maskz_loadu_ps(dm, o_d + (r0 + r) * head_size_v + d0);
    for (int64_t k = 0; k < num_keys; k += 2) {
        const __m512i a = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(dm, (const uint16_t *)v_rows[k] + d0));
        const __m512i b = k + 1 < num_keys ? _mm512_cvtepu16_epi32(
                                                 _mm256_maskz_loadu_epi16(dm, (const uint16_t *)v_rows[k + 1] + d0))
                                           : _mm512_setzero_si512();
        const __m512i v = _mm512_or_si512(a, _mm512_slli_epi32(b, 16));
        const uint32_t *pk = pp[k / 2] + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] =
            _mm512_dpbf16_ps(acc[r], (__m512bh)v, (__m512bh)_mm512_set1_epi32((int)pk[r]));
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
        _mm512_mask_storeu_ps(o_d + (r0 + r) * head_size_v + d0, dm, acc[r]);
}

/* Rows [r0, r0 + RB): 4 blocks (128 columns) per pass for 1–2 rows, 2 for 3–4 (≤ 16 accumulators), then
 * 1-block passes, then the tail columns. */
static inline __attribute__((always_inline)) void kbf_pv_group(uint32_t (*pp)[ATTN_QB], int64_t num_keys,
                                                               const void *const *v_rows, int64_t r0,
                                                               int64_t head_size_v, float *o_d, const int RB) {
    const int NB = RB <= 2 ? 4 : 2;
    const int64_t full = head_size_v & ~(int64_t)31;
    int64_t d0 = 0;
    for (; d0 + 32 * NB <= full; d0 += 32 * NB) kbf_pv_pass(pp, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, NB);
    for (; d0 < full; d0 += 32) kbf_pv_pass(pp, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, 1);
    for (; d0 < head_size_v; d0 += 16) kbf_pv_tail(pp, num_keys, v_rows, r0, d0, head_size_v, o_d, RB);
}

void attn_k_pv_rows_kv_avx512bf16(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                  attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    if (kv_dtype != ATTN_DTYPE_BF16 || num_rows <= 0 || num_keys <= 0 || head_size_v <= 0) {
        attn_k_pv_rows_kv_avx512(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d);
        return;
    }
    /* keys in chunks of ATTN_KV_TILE (even, so the pairs stay those of the whole call; o_d carries the chain) */
    for (int64_t k0 = 0; k0 < num_keys; k0 += ATTN_KV_TILE) {
        const int64_t nk = num_keys - k0 < ATTN_KV_TILE ? num_keys - k0 : ATTN_KV_TILE;
        const float *pc = p + k0 * ATTN_QB;
        const void *const *vc = v_rows + k0;
        /* P as bf16 pairs of consecutive keys, all 32 lanes (rows); an odd last key pairs with p = 0 */
        uint32_t pp[ATTN_KV_TILE / 2][ATTN_QB];
        const int halves = num_rows > 16 ? 2 : 1;
        for (int64_t k = 0; k < nk; k += 2)
            for (int h = 0; h < halves; h++)
                _mm512_storeu_si512((void *)(pp[k / 2] + 16 * h), kbf_row_pair(pc, k / 2, h, nk));
        int64_t r0 = 0;
        for (; r0 + 4 <= num_rows; r0 += 4) kbf_pv_group(pp, nk, vc, r0, head_size_v, o_d, 4);
        switch (num_rows - r0) {
        case 3:
            kbf_pv_group(pp, nk, vc, r0, head_size_v, o_d, 3);
            break;
        case 2:
            kbf_pv_group(pp, nk, vc, r0, head_size_v, o_d, 2);
            break;
        case 1:
            kbf_pv_group(pp, nk, vc, r0, head_size_v, o_d, 1);
            break;
        default:
            break;
        }
    }
}
