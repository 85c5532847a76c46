/*
 * tile_amx.c — qk_tile / pv_tile / qk_tile_kv of the opt-in "amx" table (AMX tiles for bf16 K/V): the many-row
 * (prefill) kernels on TDPBF16PS where the tile's K (or V) rows are all bf16 values — a bf16 cache or bf16 K/V,
 * which the driver widens exactly to f32 — and the avx512 kernels otherwise (f32/f16 values keep their bits).
 * q and P are rounded to bf16 (round to nearest even); TDPBF16PS adds two bf16 products per step into f32
 * (SDM: even element first, each an FMA with round to nearest even, denormals flushed). The hardware's sums are not
 * that model's bit for bit: on an Intel Xeon (2026-12-06) 32 products added by one instruction and the same products
 * added by two (C stored and reloaded between) differed in every random case, so the bits depend on how the
 * products are grouped into instructions; the groups here are fixed by the data (32 head dimensions, or 32 keys from a
 * multiple of 32 in the kv tile: docs/KERNELS.md §7), never by the schedule or the thread count. Not the pinned chains:
 * tolerance and contract in docs/SEMANTICS.md §7.
 *
 * Layout (palette 1; qk / pv: every tile 16 rows × 64 bytes):
 *  qk: C[key][row] (s rows, 16 keys × 16 query rows, stored with the s row stride) += A[key][dims] · B[dim
 *      pair][row]: A = 16 K rows × 32 head dimensions in bf16 (the rows narrowed, exact), B = the bf16 pairs
 *      (q_t[2j][r], q_t[2j+1][r]) — the VNNI layout TDPBF16PS wants, 16 pairs × 16 rows. Per 32 keys: 4 C
 *      tiles (2 key groups × 2 row groups), 2 A, 2 B.
 *  pv: C[dim][row] (16 head dimensions × 16 query rows, o_t's layout) += A[dim][keys] · B[key pair][row]: A = V
 *      transposed in bf16, B = the pairs (p[2i][r], p[2i+1][r]). C starts at zero per call and is added into o_t.
 *  qk_tile_kv (decode): K read in place from the cache page (below).
 *  kv_tile_prep + qk_tile_prep / pv_tile_prep (prefill through the driver's multi-block items): the narrowed K rows
 *      and the transposed V made once per kv tile for every query block on it (below); bitwise qk_tile / pv_tile.
 * The tile configuration is loaded only when the thread's differs (kamx_use) and is left loaded after a call:
 * TILERELEASE and LDTILECFG on every call cost 3–9 % of a 512–1024-token prefill and ~100 ns per decode call (twice
 * the tile work of 16 keys × 4 rows × 128; bench_kernels --kv: 64-key calls from 218 to 335 GFLOP/s).
 * Compiled twice: into the library with -mamx-tile -mamx-bf16, and with ATTN_AMX_EMULATE (amx_ops.h's scalar
 * model of the tile instructions) into tests/kernels/test_amx_emulated.c, under other names.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512BF16__)
#error "tile_amx.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
/* GCC spells the feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__ */
#if !defined(ATTN_AMX_EMULATE) && \
    (!(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__)))
#error "tile_amx.c must be compiled with -mamx-tile -mamx-bf16 (or ATTN_AMX_EMULATE for the test model)"
#endif
#include <immintrin.h>

#include "kernels/amx/amx_ops.h"
#include "kernels/avx512/transpose_avx512.h"
#include "kernels/avx512bf16/bf16_pairs_avx512.h"
#include "kernels/kernels.h"

#if defined(ATTN_AMX_EMULATE)
#define KAMX_NAME(k) attn_k_##k##_amx_emulated
#else
#define KAMX_NAME(k) attn_k_##k##_amx
#endif

#define KAMX_ALIGN __attribute__((aligned(64)))

/* 1 if the first row's w values are bf16 values (low 16 bits zero): a cheap early exit for f32 K/V, whose rows
 * would otherwise be narrowed in full before the kernel finds out. */
static inline int kamx_row_bf16(const float *row, int64_t w) {
    __m512i acc = _mm512_setzero_si512();
    int64_t d = 0;
    for (; d + 16 <= w; d += 16)
        acc = _mm512_or_si512(acc, _mm512_loadu_si512((const void *)(row + d)));
    if (d < w)
        acc = _mm512_or_si512(acc, _mm512_maskz_loadu_epi32((__mmask16)((1u << (w - d)) - 1u), row + d));
    return _mm512_test_epi32_mask(acc, _mm512_set1_epi32(0xFFFF)) == 0;
}

/* 16 floats of a row from d (masked to w), or zeros past the row. */
static inline __m512 kamx_load16(const float *row, int64_t d, int64_t w) {
    if (d >= w) return _mm512_setzero_ps();
    if (d + 16 <= w) return _mm512_loadu_ps(row + d);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (w - d)) - 1u), row + d);
}

/* 16 values of a float (F32) or bf16 (BF16) row from d, masked to w, as floats (bf16 widened exactly: the bits
 * moved up), zeros past the row. */
static inline __m512 kamx_load16_dt(const void *row, attn_dtype dtype, int64_t d, int64_t w) {
    if (dtype == ATTN_DTYPE_F32)
        return kamx_load16((const float *)row, d, w);
    if (d >= w)
        return _mm512_setzero_ps();
    const __mmask16 m = d + 16 <= w ? (__mmask16)0xFFFF : (__mmask16)((1u << (w - d)) - 1u);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* kb[k] = the K row k_rows[k] narrowed to bf16 for k < num_keys, zero rows for num_keys <= k < rows, each zero past
 * head_size up to a multiple of 32; returns the OR of every value's bits (low 16 bits zero: all were bf16 values,
 * narrowed exactly). */
static __m512i kamx_kb(const void *const *k_rows, attn_dtype dtype, int64_t num_keys, int64_t head_size, int64_t rows,
                       uint16_t (*kb)[ATTN_HEAD_SIZE_MAX]) {
    const int64_t dpad = (head_size + 31) & ~(int64_t)31;
    __m512i low = _mm512_setzero_si512();
    for (int64_t k = 0; k < rows; k++)
        for (int64_t d0 = 0; d0 < dpad; d0 += 32) {
            const __m512 lo = k < num_keys ? kamx_load16_dt(k_rows[k], dtype, d0, head_size) : _mm512_setzero_ps();
            const __m512 hi = k < num_keys ? kamx_load16_dt(k_rows[k], dtype, d0 + 16, head_size) : _mm512_setzero_ps();
            low = _mm512_ternarylogic_epi32(low, _mm512_castps_si512(lo), _mm512_castps_si512(hi), 0xFE); /* | */
            _mm512_store_si512((void *)(kb[k] + d0), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    return low;
}

static void kamx_qk_tiles(const float *q_t, int64_t num_rows, int64_t head_size,
                          const uint16_t (*kb)[ATTN_HEAD_SIZE_MAX], int64_t num_keys, float *s);

void KAMX_NAME(qk_tile)(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                        int64_t num_keys, float *s) {
    if (num_rows <= 0 || num_keys <= 0 || head_size <= 0 || num_keys > ATTN_KV_TILE ||
        !kamx_row_bf16(k_rows[0], head_size)) {
        attn_k_qk_tile_avx512(q_t, num_rows, head_size, k_rows, num_keys, s);
        return;
    }
    /* K narrowed to bf16, zero rows and columns as padding; in the same pass, whether every value was a bf16 value
     * (then the narrowing is exact), else the avx512 kernel (nothing is written before) */
    uint16_t kb[ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX] KAMX_ALIGN;
    const __m512i low =
        kamx_kb((const void *const *)k_rows, ATTN_DTYPE_F32, num_keys, head_size, (num_keys + 15) & ~(int64_t)15, kb);
    if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xFFFF))) {
        attn_k_qk_tile_avx512(q_t, num_rows, head_size, k_rows, num_keys, s);
        return;
    }
    kamx_qk_tiles(q_t, num_rows, head_size, (const uint16_t(*)[ATTN_HEAD_SIZE_MAX])kb, num_keys, s);
}

/* The tile part of qk_tile: s[k][r] for k < num_keys from the bf16 K rows kb[0..round16(num_keys)) (zero past
 * head_size up to a multiple of 32; rows past num_keys are read, their scores not stored). */
static void kamx_qk_tiles(const float *q_t, int64_t num_rows, int64_t head_size,
                          const uint16_t (*kb)[ATTN_HEAD_SIZE_MAX], int64_t num_keys, float *s) {
    const int64_t dpad = (head_size + 31) & ~(int64_t)31, kpad = (num_keys + 15) & ~(int64_t)15;
    const int halves = num_rows > 16 ? 2 : 1;
    uint32_t qp[ATTN_HEAD_SIZE_MAX / 2][ATTN_QB] KAMX_ALIGN;
    float tmp[16][16] KAMX_ALIGN;
    for (int64_t j = 0; j < dpad / 2; j++) /* q as bf16 pairs; zero past head_size */
        for (int h = 0; h < halves; h++)
            _mm512_store_si512((void *)(qp[j] + 16 * h), kbf_row_pair(q_t, j, h, head_size));
    kamx_config();
    for (int64_t k0 = 0; k0 < kpad; k0 += 32) {
        const int two = k0 + 16 < kpad;
        KAMX_ZERO(0);
        KAMX_ZERO(1);
        KAMX_ZERO(2);
        KAMX_ZERO(3);
        for (int64_t d0 = 0; d0 < dpad; d0 += 32) {
            KAMX_LOAD(4, kb[k0] + d0, ATTN_HEAD_SIZE_MAX * 2);
            KAMX_LOAD(6, qp[d0 / 2], ATTN_QB * 4);
            KAMX_DP(0, 4, 6);
            if (halves == 2) {
                KAMX_LOAD(7, qp[d0 / 2] + 16, ATTN_QB * 4);
                KAMX_DP(1, 4, 7);
            }
            if (two) {
                KAMX_LOAD(5, kb[k0 + 16] + d0, ATTN_HEAD_SIZE_MAX * 2);
                KAMX_DP(2, 5, 6);
                if (halves == 2) KAMX_DP(3, 5, 7);
            }
        }
        const int64_t v0 = num_keys - k0, v1 = num_keys - k0 - 16;
        KAMX_STORE_S(0, k0, 0, v0);
        if (halves == 2) KAMX_STORE_S(1, k0, 16, v0);
        if (two) {
            KAMX_STORE_S(2, k0 + 16, 0, v1);
            if (halves == 2) KAMX_STORE_S(3, k0 + 16, 16, v1);
        }
    }
}

/* ---- Prefill on a prepared kv tile (kv_tile_prep, kernels.h): the K rows narrowed and the V rows transposed once
 * for every block of the work item that reads the tile, instead of once per block and call.
 *  qk_tile_prep: qk_tile's tiles on the prepared K rows from key0.
 *  pv_tile_prep: the same products as pv_tile in the same order, with the roles of A and B swapped so that C comes
 *      out in o_t's layout: C[dim][row] (16 head dimensions × 16 query rows) += A[dim][keys] · B[key pair][row],
 *      A = the transposed V (16 dimensions × 32 keys from key0 + k0), B = the bf16 pairs (p[2i][r], p[2i + 1][r]).
 *      TDPBF16PS adds A[m][2i]·B[i][n].lo then A[m][2i + 1]·B[i][n].hi: per element p[2i][r]·v[2i][d] then
 *      p[2i + 1][r]·v[2i + 1][d], pv_tile's order; C starts at zero and is added to o_t, as in pv_tile. A last group
 *      of fewer than 32 keys is copied with zeros past num_keys, as pv_tile pads its pairs. So the bits are
 *      pv_tile's, without its transposes of P and of C. */
typedef struct kamx_prep {
    uint16_t k[ATTN_KV_TILE + 16]
              [ATTN_HEAD_SIZE_MAX];                /* bf16 K rows, zero past head_size (to 32), rows past the keys */
    uint16_t vt[ATTN_HEAD_SIZE_MAX][ATTN_KV_TILE]; /* vt[d][k] = bf16(v[k][d]), rows past head_size_v zero (to 16) */
} kamx_prep;
_Static_assert(sizeof(kamx_prep) <= ATTN_KV_PREP_BYTES, "ATTN_KV_PREP_BYTES holds the amx table's prepared tile");

/* C tile c += A · B for head dimensions d0 + 16c: A (tile a) the transposed V of the group's 32 keys (in place, or the
 * zero-padded copy of a last group), B in tile 6. A macro: tile numbers are immediates. */
#define KAMX_PV_PREP_GROUP(c, a)                                                                                       \
    do {                                                                                                               \
        if (k0 < tail)                                                                                                 \
            KAMX_LOAD(a, vt[d0 + 16 * (c)] + key0 + k0, ATTN_KV_TILE * 2);                                             \
        else                                                                                                           \
            KAMX_LOAD(a, at[c][0], 64);                                                                                \
        KAMX_DP(c, a, 6);                                                                                              \
    } while (0)

/* vt[d][k] = bf16(v_rows[k][d]) for k < round16(num_keys) (zero past num_keys), d < round16(head_size_v) (zero past
 * head_size_v); returns the OR of every value's bits (low 16 bits zero: all were bf16 values, narrowed exactly). */
static __m512i kamx_vt(const void *const *v_rows, attn_dtype dtype, int64_t num_keys, int64_t head_size_v,
                       uint16_t (*vt)[ATTN_KV_TILE]) {
    const int64_t dvpad = (head_size_v + 15) & ~(int64_t)15;
    __m512i low = _mm512_setzero_si512();
    __m512 x[16];
    for (int64_t k0 = 0; k0 < num_keys; k0 += 16)
        for (int64_t d0 = 0; d0 < dvpad; d0 += 16) {
            for (int b = 0; b < 16; b++) {
                x[b] = k0 + b < num_keys ? kamx_load16_dt(v_rows[k0 + b], dtype, d0, head_size_v) : _mm512_setzero_ps();
                low = _mm512_or_si512(low, _mm512_castps_si512(x[b]));
            }
            k512_transpose16(x); /* x[d] lane b = v[k0 + b][d0 + d] */
            for (int d = 0; d < 16; d++)
                _mm256_storeu_si256((__m256i *)(void *)(vt[d0 + d] + k0), (__m256i)_mm512_cvtneps_pbh(x[d]));
        }
    return low;
}

int KAMX_NAME(kv_tile_prep)(const void *const *k_rows, const void *const *v_rows, attn_dtype dtype, int64_t num_keys,
                            int64_t head_size, int64_t head_size_v, void *prep) {
    if (num_keys <= 0 || num_keys > ATTN_KV_TILE || head_size <= 0 || head_size > ATTN_HEAD_SIZE_MAX ||
        head_size_v <= 0 || head_size_v > ATTN_HEAD_SIZE_MAX || (dtype != ATTN_DTYPE_F32 && dtype != ATTN_DTYPE_BF16))
        return 0;
    kamx_prep *t = (kamx_prep *)prep;
    /* every value a bf16 value, else 0 (qk_tile's and pv_tile's fallback); 16 zero rows past the keys, which a last
     * group of 16 keys from any key0 reads */
    const __m512i low = _mm512_or_si512(kamx_kb(k_rows, dtype, num_keys, head_size, num_keys + 16, t->k),
                                        kamx_vt(v_rows, dtype, num_keys, head_size_v, t->vt));
    return _mm512_test_epi32_mask(low, _mm512_set1_epi32(0xFFFF)) == 0;
}

void KAMX_NAME(qk_tile_prep)(const float *q_t, int64_t num_rows, int64_t head_size, const void *prep, int64_t key0,
                             int64_t num_keys, float *s) {
    if (num_rows <= 0 || num_keys <= 0)
        return;
    kamx_qk_tiles(q_t, num_rows, head_size, (const uint16_t(*)[ATTN_HEAD_SIZE_MAX])((const kamx_prep *)prep)->k[key0],
                  num_keys, s);
}

/* P·V on the transposed V rows vt[d][key0 + k] (vt rows ATTN_KV_TILE keys long): pv_tile_prep's and pv_tile's
 * tiles (one orientation, so one set of bits, NaNs included, for either entry). */
static void kamx_pv_tiles(const float *p, int64_t num_keys, int64_t num_rows, const uint16_t (*vt)[ATTN_KV_TILE],
                          int64_t key0, int64_t head_size_v, float *o_t) {
    const int64_t kpad = (num_keys + 31) & ~(int64_t)31, dvpad = (head_size_v + 15) & ~(int64_t)15;
    const int halves = num_rows > 16 ? 2 : 1;
    uint32_t pp[2][ATTN_KV_TILE / 2][16] KAMX_ALIGN; /* pp[h][i][r] = (bf16 p[2i][16h + r], bf16 p[2i + 1][16h + r]) */
    uint16_t at[4][16][32] KAMX_ALIGN; /* a last group of fewer than 32 keys, zero past num_keys, per C tile */
    float tmp[4][16][16] KAMX_ALIGN;
    for (int64_t i = 0; i < kpad / 2; i++)
        for (int h = 0; h < halves; h++) {
            const __m512 a = 2 * i < num_keys ? _mm512_loadu_ps(p + 2 * i * ATTN_QB + 16 * h) : _mm512_setzero_ps();
            const __m512 b =
                2 * i + 1 < num_keys ? _mm512_loadu_ps(p + (2 * i + 1) * ATTN_QB + 16 * h) : _mm512_setzero_ps();
            const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
            const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(b));
            _mm512_store_si512((void *)pp[h][i], _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    kamx_config();
    const int64_t tail = num_keys & ~(int64_t)31; /* the first key of a last group of fewer than 32 */
    for (int64_t d0 = 0; d0 < dvpad; d0 += 64) {  /* four C tiles (64 head dimensions) share each B */
        const int nd = dvpad - d0 >= 64 ? 4 : (int)((dvpad - d0) / 16);
        if (tail < num_keys)
            for (int g = 0; g < nd; g++)
                for (int i = 0; i < 16; i++) {
                    memset(at[g][i], 0, sizeof at[g][i]);
                    memcpy(at[g][i], vt[d0 + 16 * g + i] + key0 + tail, (size_t)(num_keys - tail) * 2);
                }
        for (int h = 0; h < halves; h++) {
            KAMX_ZERO(0);
            KAMX_ZERO(1);
            KAMX_ZERO(2);
            KAMX_ZERO(3);
            for (int64_t k0 = 0; k0 < kpad; k0 += 32) {
                KAMX_LOAD(6, pp[h][k0 / 2], 64);
                KAMX_PV_PREP_GROUP(0, 4);
                if (nd > 1)
                    KAMX_PV_PREP_GROUP(1, 5);
                if (nd > 2)
                    KAMX_PV_PREP_GROUP(2, 4);
                if (nd > 3)
                    KAMX_PV_PREP_GROUP(3, 5);
            }
            KAMX_STORE(0, tmp[0], 64); /* tmp[g][d][r]: head dimension d0 + 16g + d */
            if (nd > 1)
                KAMX_STORE(1, tmp[1], 64);
            if (nd > 2)
                KAMX_STORE(2, tmp[2], 64);
            if (nd > 3)
                KAMX_STORE(3, tmp[3], 64);
            for (int64_t d = 0; d < 16 * nd && d0 + d < head_size_v; d++) {
                float *o = o_t + (d0 + d) * ATTN_QB + 16 * h;
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_loadu_ps(o), _mm512_load_ps(tmp[d / 16][d % 16])));
            }
        }
    }
}

void KAMX_NAME(pv_tile_prep)(const float *p, int64_t num_keys, int64_t num_rows, const void *prep, int64_t key0,
                             int64_t head_size_v, float *o_t) {
    if (num_rows <= 0 || num_keys <= 0)
        return;
    kamx_pv_tiles(p, num_keys, num_rows, (const uint16_t(*)[ATTN_KV_TILE])((const kamx_prep *)prep)->vt, key0,
                  head_size_v, o_t);
}

void KAMX_NAME(pv_tile)(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                        int64_t head_size_v, float *o_t) {
    if (num_rows <= 0 || num_keys <= 0 || head_size_v <= 0 || num_keys > ATTN_KV_TILE ||
        head_size_v > ATTN_HEAD_SIZE_MAX || !kamx_row_bf16(v_rows[0], head_size_v)) {
        attn_k_pv_tile_avx512(p, num_keys, num_rows, v_rows, head_size_v, o_t);
        return;
    }
    /* V transposed here, then the prepared tile's P·V (in place of pairing V, transposing P and transposing C) */
    uint16_t vt[ATTN_HEAD_SIZE_MAX][ATTN_KV_TILE] KAMX_ALIGN;
    const __m512i low = kamx_vt((const void *const *)v_rows, ATTN_DTYPE_F32, num_keys, head_size_v, vt);
    if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xFFFF))) { /* not all bf16 values: nothing written yet */
        attn_k_pv_tile_avx512(p, num_keys, num_rows, v_rows, head_size_v, o_t);
        return;
    }
    kamx_pv_tiles(p, num_keys, num_rows, (const uint16_t(*)[ATTN_KV_TILE])vt, 0, head_size_v, o_t);
}

/* Few-row Q·Kᵀ (decode) on tiles, bf16 K read in place: C[key][row] (16 keys × num_rows, stored straight into s with
 * its row stride) += A[key][dims] · B[dim pair][row], A = 16 K rows × 32 head dimensions loaded from the cache with
 * the rows' own stride (or from a copy when the group's rows are not evenly spaced), B = the q pairs qk_prep_kv wrote
 * (q_t[j][r] = (q[2j][r], q[2j+1][r]), the VNNI layout). Tiles are shaped to the call: C and B num_rows columns wide,
 * a last group of fewer than 16 keys in tiles of that many rows, so nothing is read past a row or written past
 * num_keys or num_rows. f32 / f16 / fp8 K: the avx512 kernel. More than 16 rows, head sizes that are not a multiple of
 * 32: avx512bf16. */
#define KAMX_KV_C      0 /* C, 16 keys                */
#define KAMX_KV_A      1 /* A, 16 keys                */
#define KAMX_KV_B      2 /* B, 16 dimension pairs     */
#define KAMX_KV_C_TAIL 3 /* C, the last group's keys  */
#define KAMX_KV_A_TAIL 4 /* A, the last group's keys  */
/* one group of keys: C = 0, then C += A · B over the head dimensions 32 at a time, C into s */
#define KAMX_KV_GROUP(c, a)                                                                                            \
    do {                                                                                                               \
        KAMX_ZERO(c);                                                                                                  \
        for (int64_t d0 = 0; d0 < head_size; d0 += 32) {                                                               \
            attn_kv_prefetch_step(pf, pfn);                                                                            \
            KAMX_LOAD(a, base + d0 * 2, ld);                                                                           \
            KAMX_LOAD(KAMX_KV_B, q_t + (d0 / 2) * ATTN_QB, ATTN_QB * 4);                                               \
            KAMX_DP(c, a, KAMX_KV_B);                                                                                  \
        }                                                                                                              \
        KAMX_STORE(c, s + k0 * ATTN_QB, ATTN_QB * 4);                                                                  \
    } while (0)

void KAMX_NAME(qk_tile_kv_pf)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                              attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf) {
    if (kv_dtype != ATTN_DTYPE_BF16) { /* f32, f16, fp8 K: the avx512 kernel (its bits), with the prefetch steps */
        attn_k_qk_tile_kv_pf_avx512(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf);
        return;
    }
    if (num_rows <= 0 || num_rows > 16 || num_keys <= 0 || head_size <= 0 || head_size % 32 != 0 ||
        head_size > ATTN_HEAD_SIZE_MAX) {
        attn_k_qk_tile_kv_avx512bf16(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s); /* (pf left) */
        return;
    }
    /* one prefetch step per 32 head dimensions of each group of 16 keys */
    const int64_t pfn = attn_kv_prefetch_rate(pf, (num_keys + 15) / 16 * (head_size / 32));
    const int64_t tail = num_keys % 16;
    uint16_t kb[16][ATTN_HEAD_SIZE_MAX] KAMX_ALIGN;
    kamx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[KAMX_KV_C] = cfg.rows[KAMX_KV_A] = cfg.rows[KAMX_KV_B] = 16;
    cfg.colsb[KAMX_KV_C] = cfg.colsb[KAMX_KV_B] = cfg.colsb[KAMX_KV_C_TAIL] = (uint16_t)(4 * num_rows);
    cfg.colsb[KAMX_KV_A] = cfg.colsb[KAMX_KV_A_TAIL] = 64;
    cfg.rows[KAMX_KV_C_TAIL] = cfg.rows[KAMX_KV_A_TAIL] = (uint8_t)(tail ? tail : 16);
    kamx_use(&cfg);
    for (int64_t k0 = 0; k0 < num_keys; k0 += 16) {
        const int64_t nk = num_keys - k0 < 16 ? num_keys - k0 : 16;
        /* the rows evenly spaced, at least a row apart: A straight from them, else from a copy */
        const char *base = (const char *)k_rows[k0];
        const int64_t stride = nk > 1 ? (const char *)k_rows[k0 + 1] - base : 2 * head_size;
        int even = stride >= 2 * head_size;
        for (int64_t i = 2; i < nk && even; i++)
            even = (const char *)k_rows[k0 + i] - base == i * stride;
        int64_t ld = stride;
        if (!even) {
            for (int64_t i = 0; i < nk; i++)
                memcpy(kb[i], k_rows[k0 + i], (size_t)head_size * 2);
            base = (const char *)kb, ld = ATTN_HEAD_SIZE_MAX * 2;
        }
        /* (tile numbers are immediates: one branch per tile shape) */
        if (nk == 16)
            KAMX_KV_GROUP(KAMX_KV_C, KAMX_KV_A);
        else
            KAMX_KV_GROUP(KAMX_KV_C_TAIL, KAMX_KV_A_TAIL);
    }
}

void KAMX_NAME(qk_tile_kv)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                           attn_dtype kv_dtype, int64_t num_keys, float *s) {
    attn_kv_prefetch none = {0};
    KAMX_NAME(qk_tile_kv_pf)(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, &none);
}
