/*
 * quant_amx.c — Q·Kᵀ and P·V of quantized attention's bf16 path (struct attn_quant_kernels: qk_bf16,
 * v_pairs_t + pv_pairs_t_bf16; contract in kernels.h) on AMX tiles, for the quant table of CPUs with AMX
 * (kernels_amx.c). The operands are the bf16 rows and pairs the avx512bf16 table's staging makes, so only the products
 * move: TDPBF16PS adds two bf16 products per step into f32 (SDM: even element first, each an FMA with round to nearest
 * even, denormals flushed), where VDPBF16PS adds them in its own order; both sit within the bf16 path's tolerance
 * against the oracle (docs/DIFFUSION.md §5), neither is bitwise the other.
 *
 * Layout (palette 1, every tile 16 rows × 64 bytes; kamx_config):
 *  qk: C[key][row] (16 keys × 16 query rows, stored into s with its row stride) += A[key][dims] · B[dim pair][row]:
 *      A = 16 bf16 K rows × 32 head dimensions loaded in place with the rows' stride, B = qp's pairs (the VNNI
 *      layout), then s *= row_scale[r] · key_scale[k] in that order. Per 32 keys: 2 key groups × up to 2 row
 *      halves of C, 2 A, 2 B.
 *  pv: C[dim][row] (16 head dimensions × 16 query rows: o_t itself, loaded and stored with its row stride) +=
 *      A[dim][key pairs] · B[key pair][row]: A = the V pairs by head dimension (v_pairs_t transposes a kv tile's
 *      pairs once, for every query block of the work item), B = pp as the softmax wrote it; four C tiles (64
 *      head dimensions) share each B. o_t accumulates in the tiles as it does in VDPBF16PS's registers.
 * A last group of fewer than 16 keys (or pairs) is copied into a zero-padded local tile, so nothing is read past
 * the caller's rows and no garbage meets a zero. Head sizes that are not a multiple of 32 (Q·Kᵀ) or 16 (P·V) go
 * to the avx512bf16 entries. Compiled twice: into the library with -mamx-tile -mamx-bf16, and with
 * ATTN_AMX_EMULATE (amx_ops.h's scalar model) into tests/kernels/test_amx_emulated.c under other names.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) ||             \
    !defined(__AVX512BF16__)
#error "quant_amx.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
/* GCC spells the feature macros __AMX_TILE__ / __AMX_BF16__, clang __AMXTILE__ / __AMXBF16__ */
#if !defined(ATTN_AMX_EMULATE) &&                                                                                      \
    (!(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__)))
#error "quant_amx.c must be compiled with -mamx-tile -mamx-bf16 (or ATTN_AMX_EMULATE for the test model)"
#endif
#include <immintrin.h>

#include "kernels/amx/amx_ops.h"
#include "kernels/avx512/transpose_avx512.h"
#include "kernels/kernels.h"

#if defined(ATTN_AMX_EMULATE)
#define KQA_NAME(k) attn_k_##k##_amx_emulated
#else
#define KQA_NAME(k) attn_k_##k##_amx
#endif

#define KQA_ALIGN __attribute__((aligned(64)))

/* Base and stride (bytes) of the A tile of keys [k0, k0 + 16): in place when all 16 are keys, else the valid rows
 * copied into kt (head_size elements each) and the rest zero. */
static inline const uint16_t *kqa_k_rows(const uint16_t *k16, int64_t k_stride, int64_t k0, int64_t num_keys,
                                         int64_t head_size, uint16_t (*kt)[ATTN_HEAD_SIZE_MAX], int64_t *ld) {
    if (k0 + 16 <= num_keys) {
        *ld = k_stride * 2;
        return k16 + k0 * k_stride;
    }
    for (int64_t i = 0; i < 16; i++) {
        if (k0 + i < num_keys)
            memcpy(kt[i], k16 + (k0 + i) * k_stride, (size_t)head_size * 2);
        else
            memset(kt[i], 0, (size_t)head_size * 2);
    }
    *ld = ATTN_HEAD_SIZE_MAX * 2;
    return kt[0];
}

void KQA_NAME(qk_bf16)(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16, int64_t k_stride,
                       int64_t num_keys, const float *row_scale, const float *key_scale, float *s) {
    if (num_rows <= 0 || num_rows > ATTN_QB || num_keys <= 0 || num_keys > ATTN_KV_TILE || head_size <= 0 ||
        head_size % 32 != 0 || head_size > ATTN_HEAD_SIZE_MAX) {
        attn_k_qk_bf16_avx512bf16(qp, num_rows, head_size, k16, k_stride, num_keys, row_scale, key_scale, s);
        return;
    }
    const int halves = num_rows > 16 ? 2 : 1;
    uint16_t kt[2][16][ATTN_HEAD_SIZE_MAX] KQA_ALIGN;
    float tmp[16][16] KQA_ALIGN;
    kamx_config();
    for (int64_t k0 = 0; k0 < num_keys; k0 += 32) {
        const int two = k0 + 16 < num_keys;
        int64_t ld0 = 0, ld1 = 0;
        const uint16_t *a0 = kqa_k_rows(k16, k_stride, k0, num_keys, head_size, kt[0], &ld0);
        const uint16_t *a1 = two ? kqa_k_rows(k16, k_stride, k0 + 16, num_keys, head_size, kt[1], &ld1) : NULL;
        KAMX_ZERO(0);
        KAMX_ZERO(1);
        KAMX_ZERO(2);
        KAMX_ZERO(3);
        for (int64_t d0 = 0; d0 < head_size; d0 += 32) {
            KAMX_LOAD(4, a0 + d0, ld0);
            KAMX_LOAD(6, qp + (d0 / 2) * ATTN_QB, ATTN_QB * 4);
            KAMX_DP(0, 4, 6);
            if (halves == 2) {
                KAMX_LOAD(7, qp + (d0 / 2) * ATTN_QB + 16, ATTN_QB * 4);
                KAMX_DP(1, 4, 7);
            }
            if (two) {
                KAMX_LOAD(5, a1 + d0, ld1);
                KAMX_DP(2, 5, 6);
                if (halves == 2)
                    KAMX_DP(3, 5, 7);
            }
        }
        KAMX_STORE_S(0, k0, 0, num_keys - k0);
        if (halves == 2)
            KAMX_STORE_S(1, k0, 16, num_keys - k0);
        if (two) {
            KAMX_STORE_S(2, k0 + 16, 0, num_keys - k0 - 16);
            if (halves == 2)
                KAMX_STORE_S(3, k0 + 16, 16, num_keys - k0 - 16);
        }
    }
    if (!row_scale && !key_scale)
        return;
    for (int64_t k = 0; k < num_keys; k++)
        for (int h = 0; h < halves; h++) {
            __m512 x = _mm512_loadu_ps(s + k * ATTN_QB + 16 * h);
            if (row_scale)
                x = _mm512_mul_ps(x, _mm512_loadu_ps(row_scale + 16 * h));
            if (key_scale)
                x = _mm512_mul_ps(x, _mm512_set1_ps(key_scale[k]));
            _mm512_storeu_ps(s + k * ATTN_QB + 16 * h, x);
        }
}

/* OP (KAMX_LOAD or KAMX_STORE) on the nd C tiles 0..nd-1 of o_t's 16-dimension row groups from `o` (a macro: tile
 * numbers are immediates). */
#define KQA_O_TILES(OP)                                                                                                \
    do {                                                                                                               \
        OP(0, o, ATTN_QB * 4);                                                                                         \
        if (nd > 1)                                                                                                    \
            OP(1, o + 16 * ATTN_QB, ATTN_QB * 4);                                                                      \
        if (nd > 2)                                                                                                    \
            OP(2, o + 32 * ATTN_QB, ATTN_QB * 4);                                                                      \
        if (nd > 3)                                                                                                    \
            OP(3, o + 48 * ATTN_QB, ATTN_QB * 4);                                                                      \
    } while (0)

int KQA_NAME(v_pairs_t)(const uint32_t *vtp, int64_t vt_stride, int64_t num_keys, int64_t head_size_v, uint32_t *vtt) {
    if (num_keys <= 0 || num_keys > ATTN_KV_TILE || head_size_v <= 0 || head_size_v % 16 != 0 ||
        head_size_v > ATTN_HEAD_SIZE_MAX)
        return 0;
    const int64_t npairs = (num_keys + 1) / 2, jpad = (npairs + 15) & ~(int64_t)15;
    __m512 x[16];
    for (int64_t j0 = 0; j0 < jpad; j0 += 16)
        for (int64_t d0 = 0; d0 < head_size_v; d0 += 16) {
            for (int b = 0; b < 16; b++)
                x[b] = j0 + b < npairs ? _mm512_loadu_ps((const float *)(const void *)(vtp + (j0 + b) * vt_stride + d0))
                                       : _mm512_setzero_ps();
            k512_transpose16(x); /* x[d] lane b = vtp[j0 + b][d0 + d] */
            for (int d = 0; d < 16; d++)
                _mm512_storeu_ps((float *)(void *)(vtt + (d0 + d) * (ATTN_KV_TILE / 2) + j0), x[d]);
        }
    return 1;
}

void KQA_NAME(pv_pairs_t_bf16)(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtt,
                               int64_t head_size_v, float *o_t) {
    const int halves = num_rows > 16 ? 2 : 1;
    const int64_t npairs = (num_keys + 1) / 2, full = npairs & ~(int64_t)15, jpad = (npairs + 15) & ~(int64_t)15;
    uint32_t ptail[16][ATTN_QB] KQA_ALIGN; /* the last pairs' P rows, zero-padded to 16 */
    if (full < npairs)
        for (int64_t i = 0; i < 16; i++) {
            if (full + i < npairs)
                memcpy(ptail[i], pp + (full + i) * ATTN_QB, sizeof ptail[i]);
            else
                memset(ptail[i], 0, sizeof ptail[i]);
        }
    kamx_config();
    for (int h = 0; h < halves; h++)
        for (int64_t d0 = 0; d0 < head_size_v; d0 += 64) {
            const int nd = head_size_v - d0 >= 64 ? 4 : (int)((head_size_v - d0) / 16);
            float *o = o_t + d0 * ATTN_QB + 16 * h;
            const uint32_t *a = vtt + d0 * (ATTN_KV_TILE / 2);
            KQA_O_TILES(KAMX_LOAD);
            for (int64_t j0 = 0; j0 < jpad; j0 += 16) {
                if (j0 < full)
                    KAMX_LOAD(6, pp + j0 * ATTN_QB + 16 * h, ATTN_QB * 4);
                else
                    KAMX_LOAD(6, ptail[0] + 16 * h, ATTN_QB * 4);
                KAMX_LOAD(4, a + j0, ATTN_KV_TILE / 2 * 4);
                KAMX_DP(0, 4, 6);
                if (nd > 1) {
                    KAMX_LOAD(5, a + 16 * (ATTN_KV_TILE / 2) + j0, ATTN_KV_TILE / 2 * 4);
                    KAMX_DP(1, 5, 6);
                }
                if (nd > 2) {
                    KAMX_LOAD(4, a + 32 * (ATTN_KV_TILE / 2) + j0, ATTN_KV_TILE / 2 * 4);
                    KAMX_DP(2, 4, 6);
                }
                if (nd > 3) {
                    KAMX_LOAD(5, a + 48 * (ATTN_KV_TILE / 2) + j0, ATTN_KV_TILE / 2 * 4);
                    KAMX_DP(3, 5, 6);
                }
            }
            KQA_O_TILES(KAMX_STORE);
        }
}
