/*
 * pv_tile_avx512.c — Oᵀ += P·V for one (query block × kv tile), query rows in zmm lanes
 * (docs/KERNELS.md §2). V rows are read in place as scalar broadcasts; register tiles of
 * 12 or 8 output columns × 2 zmm (32 rows) or 16 columns × 1 zmm (≤ 16 rows), with 4/1-column tails.
 *
 * Lane invariance: every lane computes o[d] = fma(v[k][d], p[k], o[d]) for k = 0, 1, … in ascending
 * order starting from the o_t it was given, whatever the panel shape or num_rows.
 *
 * Few rows (≤ K512_PV_FEW_ROWS, decode) leave lanes idle and are broadcast-bound, so there the lanes hold
 * 16 output columns d instead: a 16 d × 16 lane block of Oᵀ is transposed in registers, V rows are loaded
 * in place (16 consecutive d) and each row's p[k] is broadcast. Every o[d][r] is the same fma chain over
 * k ascending from the incoming value, so the bits equal the row-lane path's.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "pv_tile_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/avx512/transpose_avx512.h"
#include "kernels/kernels.h"

/* o_t[d0 + b][16·v + lane] += Σ_k v_rows[k][d0 + b]·p[k][16·v + lane] for b < NB columns, v < NV. */
static inline __attribute__((always_inline)) void k512_pv_panel(const float *restrict p, int64_t num_keys,
                                                                const float *const *v_rows, int64_t d0,
                                                                float *restrict o_t, const int NB,
                                                                const int NV) {
    __m512 acc[16][2];
    float *o = o_t + d0 * ATTN_QB;
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_loadu_ps(o + b * ATTN_QB + 16 * v);
    /* two keys per iteration, and vr in one base register (an empty asm makes GCC keep it) so the NB broadcasts
     * address vr + 4·b: GCC otherwise keeps NB index registers and spills them through xmm moves (Intel Xeon, L1, 32
     * rows × 64 keys: 73 → 77–78 % of the FMA peak) */
    _Pragma("GCC unroll 2") for (int64_t k = 0; k < num_keys; k++) {
        const float *vr = v_rows[k] + d0;
        __asm__("" : "+r"(vr));
        __m512 pk[2];
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) pk[v] = _mm512_loadu_ps(p + k * ATTN_QB + 16 * v);
        _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++) {
            const __m512 x = _mm512_set1_ps(vr[b]);
            _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) acc[b][v] = _mm512_fmadd_ps(x, pk[v], acc[b][v]);
        }
    }
    _Pragma("GCC unroll 16") for (int b = 0; b < NB; b++)
        _Pragma("GCC unroll 2") for (int v = 0; v < NV; v++) _mm512_storeu_ps(o + b * ATTN_QB + 16 * v, acc[b][v]);
}

/* Measured (bench, D = 64…256): columns-in-lanes wins at every row count up to 16 (4 rows: ~3×, 16: ~1.2×). */
#define K512_PV_FEW_ROWS 16

/* o_t[d0 + j][r] for nd ≤ 16 columns × R rows, columns in lanes. Lanes r ≥ R of o_t are not written. */
static inline __attribute__((always_inline)) void k512_pv_cols16(const float *restrict p, int64_t num_keys,
                                                                 const float *const *v_rows, int64_t d0,
                                                                 int nd, float *restrict o_t, const int R) {
    __m512 acc[K512_PV_FEW_ROWS];
    __m512 x[16];
    float *o = o_t + d0 * ATTN_QB;
    const __mmask16 dm = (__mmask16)((1u << nd) - 1u);
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
        x[j] = j < nd ? _mm512_loadu_ps(o + j * ATTN_QB) : _mm512_setzero_ps();
    k512_transpose16(x); /* x[r] lane j = o_t[d0 + j][r] */
    _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) acc[r] = x[r];
    for (int64_t k = 0; k < num_keys; k++) {
        const __m512 v = _mm512_maskz_loadu_ps(dm, v_rows[k] + d0);
        const float *pk = p + k * ATTN_QB;
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(pk[r]), acc[r]);
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R ? acc[r] : _mm512_setzero_ps();
    k512_transpose16(x); /* x[j] lane r = o_t[d0 + j][r] */
    const __mmask16 rm = (__mmask16)((1u << R) - 1u);
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
        if (j < nd) _mm512_mask_storeu_ps(o + j * ATTN_QB, rm, x[j]);
}

static inline __attribute__((always_inline)) void k512_pv_few(const float *p, int64_t num_keys,
                                                              const float *const *v_rows, int64_t head_size_v,
                                                              float *o_t, const int R) {
    int64_t d = 0;
    for (; d + 16 <= head_size_v; d += 16) k512_pv_cols16(p, num_keys, v_rows, d, 16, o_t, R);
    if (d < head_size_v) k512_pv_cols16(p, num_keys, v_rows, d, (int)(head_size_v - d), o_t, R);
}

void attn_k_pv_tile_avx512(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                           int64_t head_size_v, float *o_t) {
    switch (num_rows) {
    case 1: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 1); return;
    case 2: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 2); return;
    case 3: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 3); return;
    case 4: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 4); return;
    case 5: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 5); return;
    case 6: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 6); return;
    case 7: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 7); return;
    case 8: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 8); return;
    case 9: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 9); return;
    case 10: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 10); return;
    case 11: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 11); return;
    case 12: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 12); return;
    case 13: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 13); return;
    case 14: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 14); return;
    case 15: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 15); return;
    case 16: k512_pv_few(p, num_keys, v_rows, head_size_v, o_t, 16); return;
    default: break;
    }
    int64_t d = 0;
    if (num_rows > 16) {
        for (; d + 12 <= head_size_v; d += 12) k512_pv_panel(p, num_keys, v_rows, d, o_t, 12, 2);
        for (; d + 8 <= head_size_v; d += 8) k512_pv_panel(p, num_keys, v_rows, d, o_t, 8, 2);
        for (; d + 4 <= head_size_v; d += 4) k512_pv_panel(p, num_keys, v_rows, d, o_t, 4, 2);
        for (; d < head_size_v; d++) k512_pv_panel(p, num_keys, v_rows, d, o_t, 1, 2);
    } else {
        for (; d + 16 <= head_size_v; d += 16) k512_pv_panel(p, num_keys, v_rows, d, o_t, 16, 1);
        for (; d + 4 <= head_size_v; d += 4) k512_pv_panel(p, num_keys, v_rows, d, o_t, 4, 1);
        for (; d < head_size_v; d++) k512_pv_panel(p, num_keys, v_rows, d, o_t, 1, 1);
    }
}
