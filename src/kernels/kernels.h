/*
 * kernels.h — the kernel table type, the tile constants every driver and kernel share, and the extern
 * tables of each compiled ISA. Drivers reach kernels only through `const struct attn_kernels *`.
 *
 * The tile constants are part of the numerical contract: the kv tile and partition boundaries sit at
 * absolute key positions that are multiples of ATTN_KV_TILE / ATTN_KV_PARTITION, for every entry (dense,
 * packed, paged, decode, prefill), so a row's bits never depend on the thread count or the batch
 * (docs/CONTRIBUTING.md §9, docs/KERNELS.md §7).
 */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include <stdint.h>

#include "attn/attn.h"
#include "kernels/kernel_list.h"

#define ATTN_QB 32            /* lanes (query rows) per block                        */
#define ATTN_KV_TILE 64       /* keys per kv tile                                     */
#define ATTN_KV_PARTITION 512 /* keys per split-KV partition (multiple of the tile)   */
#define ATTN_HEAD_SIZE_MAX 256
/* Scores, running maxima and the LSE are in natural units (scale·q·k); the softmax kernels take
 * P = exp2((s − m)·ATTN_LOG2E_F): the log2(e) factor applies to differences from the running max, never to
 * a score or a max itself, so the rounding of the fold is relative to |s − m| (small wherever P matters) and
 * the LSE (m + ln l) carries no error proportional to |m| (docs/SEMANTICS.md §4). */
#define ATTN_LOG2E_F 1.44269504088896341f
#define ATTN_RESCALE_THRESHOLD 5.54517744f /* lazy rescale: keep m unless the max grew by more (8·ln 2: P <= 2^8) */

/* Where head dimension d sits in a row of pv_rows_kv's accumulator o_d (part of that kernel's contract, the
 * same for every table): for bf16 V, inside each full 32-column block the even columns come first, then the
 * odd ones — the two 16-bit halves of 32-bit lanes, widened by a shift and a mask instead of a shuffle;
 * columns past the last full block, and every column of f32/f16 V, sit in place. */
static inline int64_t attn_rows_kv_col(int64_t d, int64_t head_size_v, attn_dtype kv_dtype) {
    if (kv_dtype != ATTN_DTYPE_BF16 || d >= (head_size_v & ~(int64_t)31)) return d;
    return (d & ~(int64_t)31) + (d & 1) * 16 + ((d & 31) >> 1);
}

/* Cache lines a few-row kernel is asked to prefetch while it works (no effect on results): l1_lines lines from l1
 * into L1 and l2_lines from l2 into L2, in address order; the kernel advances the pointers and lowers the counts by
 * what it issued, spread over its loop, and the caller issues what is left after the call. */
typedef struct attn_kv_prefetch {
    const char *l1, *l2;
    int64_t l1_lines, l2_lines;
} attn_kv_prefetch;

/* The lines per step for a kernel that will take `steps` steps to issue all of *pf (0 when there is nothing). */
static inline int64_t attn_kv_prefetch_rate(const attn_kv_prefetch *pf, int64_t steps) {
    const int64_t lines = pf->l1_lines > pf->l2_lines ? pf->l1_lines : pf->l2_lines, n = steps > 0 ? steps : 1;
    return lines > 0 ? (lines + n - 1) / n : 0;
}

/* One step of a kernel: issue up to n of the L1 and n of the L2 prefetches left in *pf (no effect on results). */
static inline __attribute__((always_inline)) void attn_kv_prefetch_step(attn_kv_prefetch *pf, int64_t n) {
    for (int64_t i = 0; i < n && pf->l1_lines > 0; i++, pf->l1 += 64, pf->l1_lines--)
        __builtin_prefetch(pf->l1, 0, 3);
    for (int64_t i = 0; i < n && pf->l2_lines > 0; i++, pf->l2 += 64, pf->l2_lines--)
        __builtin_prefetch(pf->l2, 0, 2);
}

struct attn_kernels {
    const char *name;
#define ATTN_X_FIELD(ret, name, args) ret(*name) args;
    ATTN_KERNEL_LIST(ATTN_X_FIELD)
#undef ATTN_X_FIELD
    /* Optional, NULL in every exact table: rewrites in place the packed q_t of a block of num_rows rows into the
     * form this table's qk_tile_kv reads for kv_dtype K; the driver calls it once per few-row block, after
     * packing q_t and before the block's first qk_tile_kv. avx512bf16, bf16 K: q_t[j][r] becomes the 32-bit
     * bf16 pair (q_t[2j][r], q_t[2j+1][r]) (low half first), j < ceil(head_size / 2), r < 32 (16 lanes when
     * num_rows <= 16). Other dtypes: unchanged. */
    void (*qk_prep_kv)(float *q_t, int64_t num_rows, int64_t head_size, attn_dtype kv_dtype);
    /* 1 when this table's qk_tile_kv and pv_rows_kv also read FP8_E4M3 / FP8_E5M2 rows, widened exactly in
     * registers: bitwise equal to the kernels on the rows converted by cvt_to_f32 (the f32 path), so decode
     * over an fp8 cache reads one byte per element and makes no conversion pass. 0 (the default of a table
     * that omits it): the driver widens fp8 rows into a scratch tile first and passes F32. */
    int fp8_kv; /* avx2, avx512, neon, and the opt-in avx512bf16 / amx (through avx512 kernels) */
    /* Optional: qk_tile_kv / pv_rows_kv that also issue (part of) the prefetches in *pf between their steps (the
     * bits are those of qk_tile_kv / pv_rows_kv); NULL: the driver issues them before the call. */
    void (*qk_tile_kv_pf)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                          attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
    void (*pv_rows_kv_pf)(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                          attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf);
    /* Optional: qk_tile_kv on K stored by dimension (a key cache [head_size][block_size] per block and kv head), in
     * num_runs runs of 1..16 keys one element apart: dimension d of key k of run i at (const char *)runs[i] +
     * d·dim_stride + k·(element size), k < run_keys[i]; the runs' scores fill consecutive rows of s. F32 / BF16 /
     * F16 / FP8 (widened exactly, as cvt_to_f32). Bitwise qk_tile_kv on the same keys as rows (the same chains; a
     * column of keys is loaded, not transposed). Returns 0, writing nothing, for a dtype or row count it does not take;
     * the driver then gathers the keys into float rows for qk_tile_kv. NULL: always that. */
    int (*qk_cols_kv)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *runs,
                      const int32_t *run_keys, int64_t num_runs, int64_t dim_stride, attn_dtype kv_dtype, float *s);
    /* Optional, NULL in every exact table: a kv tile in this table's own form, made once for every block that reads
     * it. kv_tile_prep writes K rows k_rows[0..num_keys) and V rows v_rows[0..num_keys) of `dtype` (F32: the float
     * rows qk_tile / pv_tile take; BF16: the rows in place, their values the same once widened) into prep
     * (ATTN_KV_PREP_BYTES, 64-byte aligned) and returns 1, or returns 0 where this table's qk_tile / pv_tile would
     * not run on that form (e.g. values that are not bf16 values, another dtype), writing nothing the caller reads.
     * qk_tile_prep / pv_tile_prep are then qk_tile / pv_tile on the keys [key0, key0 + num_keys) of the prepared
     * tile (on the float rows of the same values), bitwise: the driver may use either for any block on the tile. */
    int (*kv_tile_prep)(const void *const *k_rows, const void *const *v_rows, attn_dtype dtype, int64_t num_keys,
                        int64_t head_size, int64_t head_size_v, void *prep);
    void (*qk_tile_prep)(const float *q_t, int64_t num_rows, int64_t head_size, const void *prep, int64_t key0,
                         int64_t num_keys, float *s);
    void (*pv_tile_prep)(const float *p, int64_t num_keys, int64_t num_rows, const void *prep, int64_t key0,
                         int64_t head_size_v, float *o_t);
};

/* Bytes of a prepared kv tile (kv_tile_prep): the amx table's bf16 K rows (ATTN_KV_TILE + 16 of them: a 16-key
 * group read from any key0) and its transposed bf16 V. */
#define ATTN_KV_PREP_BYTES                                                                                             \
    ((size_t)((ATTN_KV_TILE + 16) * ATTN_HEAD_SIZE_MAX * 2 + ATTN_HEAD_SIZE_MAX * ATTN_KV_TILE * 2))

/* The quantized-attention kernels (attn_forward_quant, src/attention/fwd_quant.c, docs/DIFFUSION.md §5): Q, K and
 * V stay in their 8/4-bit codes in the workspace and are widened per tile. Codes: FP8_E4M3 / FP8_E5M2 one byte
 * per element; FP4_E2M1 two per byte, element 2i in the low nibble of byte i. `sc` is a float factor per
 * element group, element i using sc[i >> sc_shift] (63: one factor for the row; 5: one per 32 elements, the MX
 * blocks of a Q/K row; 0: one per element, the per-channel MX factors of a V row); decode(code)·factor is one
 * float32 product rounded to nearest even, the same value the fake-quantization path stores.
 * Two kinds of table:
 *   f32 staging (avx2): only dequant_row; the driver widens rows into float32 tiles and runs the float
 *     kernels of the context's table on them, so the bits equal the fake-quantization path on that table.
 *   bf16 (avx512bf16): the four bf16 entries and softmax_tile; VDPBF16PS with P rounded to bf16. */
struct attn_quant_kernels {
    const char *name;
    /* dst[i] = decode(codes element i)·sc[i >> sc_shift], i < n (float32) */
    void (*dequant_row)(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift, float *dst);
    /* the same value truncated to bf16 (exact for every product of a code and a power of two that is a normal
     * float; magnitudes below 2^-126 become a bf16 subnormal, which VDPBF16PS reads as 0); dst[n] = 0 if n odd */
    void (*dequant_row_bf16)(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                             uint16_t *dst);
    /* vtp[d] = bf16(row0[d]·sc[d>>sh]) | bf16(row1[d]·sc[d>>sh]) << 16 for d < n, the pair operand of P·V over two
     * consecutive keys; row1 NULL reads as zeros */
    void (*v_pairs_bf16)(const uint8_t *row0, const uint8_t *row1, attn_dtype elem, int64_t n, const float *sc,
                         int sc_shift, uint32_t *vtp);
    /* s[k][r] = (Σ_j dot(qp[j][r], k16[k][2j..2j+1]))·row_scale[r]·key_scale[k] (a NULL scale is 1), j <
     * ceil(head_size / 2), k < num_keys; qp [ceil(head_size/2)][ATTN_QB] bf16 pairs, k16 rows k_stride apart
     * (even head_size or a zero pad element) */
    void (*qk_bf16)(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16, int64_t k_stride,
                    int64_t num_keys, const float *row_scale, const float *key_scale, float *s);
    /* the online-softmax update of the float table's softmax_tile on the logits s [num_keys][ATTN_QB] (the same
     * m; P, l and Oᵀ within 1.9e-7 relative, from an exponential of lower degree; s is only read), writing P·V's
     * operand instead of P: pp[j][r] = bf16(P[2j][r]·vs[2j]) |
     * bf16(P[2j+1][r]·vs[2j+1]) << 16 (round to nearest even; vs NULL = 1; a key past num_keys is 0), pp
     * [ATTN_KV_TILE / 2][ATTN_QB] */
    void (*softmax_pairs_bf16)(const float *s, int64_t num_keys, int64_t num_rows, const float *vs, float *m, float *l,
                               float *o_t, int64_t head_size_v, uint32_t *pp);
    /* o_t[d][r] += Σ_j dot(pp[j][r], vtp[j][d]) (VDPBF16PS), j < ceil(num_keys / 2) */
    void (*pv_pairs_bf16)(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtp,
                          int64_t vt_stride, int64_t head_size_v, float *o_t);
    /* optional (NULL: not offered; both or neither): P·V on the pairs by head dimension. v_pairs_t transposes a kv
     * tile's pairs once, vtt[d][j] = vtp[j][d] for d < head_size_v, j < ceil(num_keys / 2) and 0 up to the next
     * multiple of 16 (rows ATTN_KV_TILE / 2 words apart; vtt holds ATTN_HEAD_SIZE_MAX rows), and returns 1, or
     * returns 0 without writing for a shape it does not take (then pv_pairs_bf16 runs); pv_pairs_t_bf16 is
     * pv_pairs_bf16 on them: o_t[d][r] += Σ_j dot(pp[j][r], vtt[d][j]), j < ceil(num_keys / 2) */
    int (*v_pairs_t)(const uint32_t *vtp, int64_t vt_stride, int64_t num_keys, int64_t head_size_v, uint32_t *vtt);
    void (*pv_pairs_t_bf16)(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtt,
                            int64_t head_size_v, float *o_t);
    /* quantization helpers (generic/quant_prep.h, bitwise the scalar reference): the Hadamard rotation of a row
     * (attn_hadamard_row, norm = 1/sqrt(n)), max |x| as float bits over non-NaN values with a NaN/inf flag, the same
     * per column of rows, and E2M1 encoding into nibbles (attn_qfmt_encode) */
    void (*hadamard_row)(const float *src, const int8_t *signs, int64_t n, double *tmp, float *dst, double norm);
    uint32_t (*absmax_bits)(const float *x, int64_t n, uint32_t *nonfinite);
    void (*absmax_cols)(const float *x, int64_t rows, int64_t width, uint32_t *amax, uint32_t *nonfinite);
    void (*encode_e2m1)(const float *y, int64_t n, uint8_t *dst);
    /* the MX scaling of a row in place (generic/quant_prep.h kqp_mx_scale_row): per 32 elements the E8M0 byte of
     * the shared exponent (emax of the element format) into e8, x·2^-shared_exp into x */
    void (*mx_scale_row)(float *x, int64_t n, int32_t emax, uint8_t *e8);
    /* optional (NULL: not offered): one Q/K row of src_dtype (F32/F16/BF16) widened, rotated (hadamard_row with
     * signs and norm), MX-scaled (mx_scale_row) and encoded into codes of elem (E2M1: encode_e2m1; FP8: the float
     * table's cvt_to_fp8 with scale 1), E8M0 bytes into e8 — bitwise those steps in sequence; returns 0 without
     * touching anything for a row it does not take — which depends on n, src_dtype and elem only — and the caller
     * then runs the steps */
    int (*mx_rot_row)(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n, double norm, int32_t emax,
                      attn_dtype elem, uint8_t *codes, uint8_t *e8);
    /* optional (NULL: not offered; with fp8_bf16_row): mx_rot_row for FP8 elems writing, instead of the codes,
     * dst[i] = what dequant_row_bf16 (factors of e8, shift 5) makes of them — the same rows taken and refused */
    int (*mx_rot_row_bf16)(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n, double norm,
                           int32_t emax, attn_dtype elem, uint16_t *dst, uint8_t *e8);
    /* optional (NULL: not offered; with the bf16 entries): the bf16 operand of FP8 (elem E4M3 / E5M2) codes without
     * the codes — element i is what dequant_row_bf16 with factors fac, fac_shift (NULL: 1) makes of the float
     * table's cvt_to_fp8 code of x[i] / scale, i < n. half −1: uint16 dst[i] (dst[n] = 0 for odd n); 0: uint32
     * dst[i] = that value (the high half 0); 1: only the high halves of uint32 dst[i] — the rows of key pairs
     * that v_pairs_bf16 makes */
    void (*fp8_bf16_row)(const float *x, int64_t n, float scale, attn_dtype elem, const float *fac, int fac_shift,
                         int half, void *dst);
    /* MXFP4 Q·Kᵀ on VPDPBUSD (NULL where the CPU lacks AVX512-VNNI; then qk_bf16 runs): s[k][r] = Σ_b
     * fma-chained float(qcorr[b][r] + Σ_{j in block b} dot4(k8[k][4j..4j+3] as u8, qi[j][r] as s8))
     * ·fl(qsc[b][r]·ksc[k][b]), blocks b < ceil(head_size / 32) ascending from 0; qi [ceil(head_size/4)][ATTN_QB]
     * byte quads (2·E2M1, zero past head_size), qcorr / qsc [nb][ATTN_QB], k8 rows k_stride bytes apart (2·E2M1 +
     * 12), ksc [num_keys][nb] powers of two. exp_add = 1 promises that every product qsc[b][r]·ksc[k][b] (r <
     * num_rows) is a normal float (both factors normal, exponents summing in range): the kernel then forms it by
     * adding exponent fields, the same value as the float multiply it does otherwise; lanes r >= num_rows are 0
     * either way */
    void (*qk_e2m1_i8)(const uint32_t *qi, const int32_t *qcorr, const float *qsc, int64_t num_rows,
                       int64_t head_size, const uint8_t *k8, int64_t k_stride, const float *ksc, int64_t num_keys,
                       int exp_add, float *s);
    /* dst[i] = 2·e2m1(code i) + bias as a byte, i < n (with qk_e2m1_i8) */
    void (*e2m1_bytes)(const uint8_t *codes, int64_t n, int bias, uint8_t *dst);
    /* MXFP4 P·V on VPDPBUSD (NULL without AVX512-VNNI; then the three bf16 entries above run), three entries:
     * softmax_quads_u8 is softmax_pairs_bf16's update (the same m, l and Oᵀ bits) writing P per 32-key block b of
     * the tile as bytes c = min(rne(P·2^(7−e_b)), 255) in quads pq[j][r] (keys 4j..4j+3, byte i = key 4j + i;
     * pq [ATTN_KV_TILE / 4][ATTN_QB]) with pfac[b][r] = 2^(e_b − 7) ([ATTN_KV_TILE / 32][ATTN_QB]; 0 where the
     * block's largest P is below 2^-119), 2^e_b the power of two at or below that P; v_quads_e2m1 stages four
     * keys' E2M1 rows (NULL: zeros) as vq[d] = bytes 2·v0[d] .. 2·v3[d], d < n; pv_e2m1_i8 adds, per block b
     * ascending, o_t[d][r] = fma(float(Σ_{j in b} dot4(pq[j][r] as u8, vq[j][d] as s8)), fl(pfac[b][r]·vfac[b][d]),
     * o_t[d][r]) (vq rows vq_stride words apart, vfac rows vfac_stride floats apart: the V block's E8M0 factor / 2) */
    void (*softmax_quads_u8)(const float *s, int64_t num_keys, int64_t num_rows, float *m, float *l, float *o_t,
                             int64_t head_size_v, uint32_t *pq, float *pfac);
    void (*v_quads_e2m1)(const uint8_t *const rows[4], int64_t n, uint32_t *vq);
    void (*pv_e2m1_i8)(const uint32_t *pq, const float *pfac, int64_t num_keys, int64_t num_rows, const uint32_t *vq,
                       int64_t vq_stride, const float *vfac, int64_t vfac_stride, int64_t head_size_v, float *o_t);
};
#if defined(ATTN_HAVE_AVX2)
void attn_k_dequant_row_avx2(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                             float *dst);
void attn_k_hadamard_row_avx2(const float *src, const int8_t *signs, int64_t n, double *tmp, float *dst, double norm);
uint32_t attn_k_absmax_bits_avx2(const float *x, int64_t n, uint32_t *nonfinite);
void attn_k_absmax_cols_avx2(const float *x, int64_t rows, int64_t width, uint32_t *amax, uint32_t *nonfinite);
void attn_k_encode_e2m1_avx2(const float *y, int64_t n, uint8_t *dst);
void attn_k_mx_scale_row_avx2(float *x, int64_t n, int32_t emax, uint8_t *e8);
extern const struct attn_quant_kernels attn_quant_kernels_avx2;
#endif
#if defined(ATTN_HAVE_AVX512BF16)
void attn_k_dequant_row_avx512bf16(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc, int sc_shift,
                                   float *dst);
void attn_k_dequant_row_bf16_avx512bf16(const uint8_t *codes, attn_dtype elem, int64_t n, const float *sc,
                                        int sc_shift, uint16_t *dst);
int attn_k_mx_rot_row_bf16_avx512bf16(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n,
                                      double norm, int32_t emax, attn_dtype elem, uint16_t *dst, uint8_t *e8);
void attn_k_fp8_bf16_row_avx512bf16(const float *x, int64_t n, float scale, attn_dtype elem, const float *fac,
                                    int fac_shift, int half, void *dst);
void attn_k_v_pairs_bf16_avx512bf16(const uint8_t *row0, const uint8_t *row1, attn_dtype elem, int64_t n,
                                    const float *sc, int sc_shift, uint32_t *vtp);
void attn_k_qk_bf16_avx512bf16(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16,
                               int64_t k_stride, int64_t num_keys, const float *row_scale, const float *key_scale,
                               float *s);
void attn_k_softmax_pairs_bf16_avx512bf16(const float *s, int64_t num_keys, int64_t num_rows, const float *vs,
                                          float *m, float *l, float *o_t, int64_t head_size_v, uint32_t *pp);
void attn_k_pv_pairs_bf16_avx512bf16(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtp,
                                     int64_t vt_stride, int64_t head_size_v, float *o_t);
void attn_k_hadamard_row_avx512bf16(const float *src, const int8_t *signs, int64_t n, double *tmp, float *dst, double norm);
uint32_t attn_k_absmax_bits_avx512bf16(const float *x, int64_t n, uint32_t *nonfinite);
void attn_k_absmax_cols_avx512bf16(const float *x, int64_t rows, int64_t width, uint32_t *amax, uint32_t *nonfinite);
void attn_k_encode_e2m1_avx512bf16(const float *y, int64_t n, uint8_t *dst);
void attn_k_mx_scale_row_avx512bf16(float *x, int64_t n, int32_t emax, uint8_t *e8);
int attn_k_mx_rot_row_avx512bf16(const void *src, attn_dtype src_dtype, const int8_t *signs, int64_t n, double norm,
                                 int32_t emax, attn_dtype elem, uint8_t *codes, uint8_t *e8);
void attn_k_qk_e2m1_i8_avx512bf16(const uint32_t *qi, const int32_t *qcorr, const float *qsc, int64_t num_rows,
                                  int64_t head_size, const uint8_t *k8, int64_t k_stride, const float *ksc,
                                  int64_t num_keys, int exp_add, float *s);
void attn_k_e2m1_bytes_avx512bf16(const uint8_t *codes, int64_t n, int bias, uint8_t *dst);
void attn_k_softmax_quads_u8_avx512bf16(const float *s, int64_t num_keys, int64_t num_rows, float *m, float *l,
                                        float *o_t, int64_t head_size_v, uint32_t *pq, float *pfac);
void attn_k_v_quads_e2m1_avx512bf16(const uint8_t *const rows[4], int64_t n, uint32_t *vq);
void attn_k_pv_e2m1_i8_avx512bf16(const uint32_t *pq, const float *pfac, int64_t num_keys, int64_t num_rows,
                                  const uint32_t *vq, int64_t vq_stride, const float *vfac, int64_t vfac_stride,
                                  int64_t head_size_v, float *o_t);
/* The avx512bf16 quant table's entries but its name, qk_bf16 and pv_pairs_bf16, which the amx quant table shares
 * (kernels_avx512bf16.c, kernels_amx.c); the VPDPBUSD MXFP4 entries are listed by each table that has them. */
#define ATTN_QUANT_AVX512BF16_SHARED                                                                                   \
    .dequant_row = attn_k_dequant_row_avx512bf16, .hadamard_row = attn_k_hadamard_row_avx512bf16,                      \
    .absmax_bits = attn_k_absmax_bits_avx512bf16, .absmax_cols = attn_k_absmax_cols_avx512bf16,                        \
    .encode_e2m1 = attn_k_encode_e2m1_avx512bf16, .mx_scale_row = attn_k_mx_scale_row_avx512bf16,                      \
    .mx_rot_row = attn_k_mx_rot_row_avx512bf16, .dequant_row_bf16 = attn_k_dequant_row_bf16_avx512bf16,                \
    .v_pairs_bf16 = attn_k_v_pairs_bf16_avx512bf16, .fp8_bf16_row = attn_k_fp8_bf16_row_avx512bf16,                    \
    .mx_rot_row_bf16 = attn_k_mx_rot_row_bf16_avx512bf16, .softmax_pairs_bf16 = attn_k_softmax_pairs_bf16_avx512bf16
/* with the AVX512-VNNI entries (qk_e2m1_i8) and without them, for a CPU that has AVX512-BF16 but not VNNI */
extern const struct attn_quant_kernels attn_quant_kernels_avx512bf16;
extern const struct attn_quant_kernels attn_quant_kernels_avx512bf16_novnni;
#endif

#define ATTN_X_PROTO(isa)
#define ATTN_X_PROTO_GENERIC(ret, name, args) ret attn_k_##name##_generic args;
#define ATTN_X_PROTO_AVX2(ret, name, args) ret attn_k_##name##_avx2 args;
#define ATTN_X_PROTO_AVX512(ret, name, args) ret attn_k_##name##_avx512 args;
ATTN_KERNEL_LIST(ATTN_X_PROTO_GENERIC)
ATTN_KERNEL_LIST(ATTN_X_PROTO_AVX2)
ATTN_KERNEL_LIST(ATTN_X_PROTO_AVX512)
#define ATTN_X_PROTO_NEON(ret, name, args) ret attn_k_##name##_neon args;
ATTN_KERNEL_LIST(ATTN_X_PROTO_NEON)

extern const struct attn_kernels attn_kernels_generic;
#if defined(ATTN_HAVE_AVX2)
extern const struct attn_kernels attn_kernels_avx2;
void attn_k_qk_tile_kv_pf_avx2(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                               attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
void attn_k_pv_rows_kv_pf_avx2(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                               attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf);
#endif
#if defined(ATTN_HAVE_AVX512)
extern const struct attn_kernels attn_kernels_avx512;
int attn_k_qk_cols_kv_avx512(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *runs,
                             const int32_t *run_keys, int64_t num_runs, int64_t dim_stride, attn_dtype kv_dtype,
                             float *s);
void attn_k_qk_tile_kv_pf_avx512(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                 attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
void attn_k_pv_rows_kv_pf_avx512(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                 attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf);
#endif
#if defined(ATTN_HAVE_AVX512BF16)
/* the opt-in avx512bf16 table: avx512 with the bf16 decode entries on VDPBF16PS, not on the pinned
   chains (kernels_avx512bf16.c); reached by name only */
void attn_k_qk_tile_kv_avx512bf16(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                  attn_dtype kv_dtype, int64_t num_keys, float *s);
void attn_k_pv_rows_kv_avx512bf16(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                  attn_dtype kv_dtype, int64_t head_size_v, float *o_d);
void attn_k_qk_prep_kv_avx512bf16(float *q_t, int64_t num_rows, int64_t head_size, attn_dtype kv_dtype);
extern const struct attn_kernels attn_kernels_avx512bf16;
#if defined(ATTN_HAVE_AVX512_VBMI)
/* its vbmi variant: f32 / f16 / fp8 K/V through the avx512 vbmi entries, the same bits (kernels_avx512bf16.c) */
extern const struct attn_kernels attn_kernels_avx512bf16_vbmi;
#endif
#endif
#if defined(ATTN_HAVE_AMX)
/* the opt-in amx table: AMX prefill kernels and few-row Q·Kᵀ for bf16 K/V (tile_amx.c) */
void attn_k_qk_tile_amx(const float *q_t, int64_t num_rows, int64_t head_size, const float *const *k_rows,
                        int64_t num_keys, float *s);
void attn_k_pv_tile_amx(const float *p, int64_t num_keys, int64_t num_rows, const float *const *v_rows,
                        int64_t head_size_v, float *o_t);
void attn_k_qk_tile_kv_amx(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                           attn_dtype kv_dtype, int64_t num_keys, float *s);
void attn_k_qk_tile_kv_pf_amx(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                              attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
int attn_k_kv_tile_prep_amx(const void *const *k_rows, const void *const *v_rows, attn_dtype dtype, int64_t num_keys,
                            int64_t head_size, int64_t head_size_v, void *prep);
void attn_k_qk_tile_prep_amx(const float *q_t, int64_t num_rows, int64_t head_size, const void *prep, int64_t key0,
                             int64_t num_keys, float *s);
void attn_k_pv_tile_prep_amx(const float *p, int64_t num_keys, int64_t num_rows, const void *prep, int64_t key0,
                             int64_t head_size_v, float *o_t);
extern const struct attn_kernels attn_kernels_amx;
#if defined(ATTN_HAVE_AVX512_VBMI)
/* its vbmi variant: f32 / f16 / fp8 K/V through the avx512 vbmi entries, the same bits (kernels_amx.c) */
extern const struct attn_kernels attn_kernels_amx_vbmi;
#endif
/* the quant table on AMX CPUs: avx512bf16's with Q·Kᵀ and P·V of the bf16 path on TDPBF16PS (quant_amx.c) */
void attn_k_qk_bf16_amx(const uint32_t *qp, int64_t num_rows, int64_t head_size, const uint16_t *k16, int64_t k_stride,
                        int64_t num_keys, const float *row_scale, const float *key_scale, float *s);
int attn_k_v_pairs_t_amx(const uint32_t *vtp, int64_t vt_stride, int64_t num_keys, int64_t head_size_v, uint32_t *vtt);
void attn_k_pv_pairs_t_bf16_amx(const uint32_t *pp, int64_t num_keys, int64_t num_rows, const uint32_t *vtt,
                                int64_t head_size_v, float *o_t);
extern const struct attn_quant_kernels attn_quant_kernels_amx;
#endif
#if defined(ATTN_HAVE_NEON)
extern const struct attn_kernels attn_kernels_neon;
#endif
#if defined(ATTN_HAVE_NEON_BF16)
/* the neon table with its FEAT_BF16 entries (cvt_neon_bf16.c); dispatch hands it out for "neon" when
   HWCAP2_BF16 is set */
void attn_k_cvt_from_f32_neon_bf16(const float *src, attn_dtype dtype, void *dst, int64_t n);
extern const struct attn_kernels attn_kernels_neon_bf16;
#endif

#if defined(ATTN_HAVE_AVX512_VBMI)
/* The avx512 table with its decode entries (qk_tile_kv / pv_rows_kv) compiled with AVX512_VBMI: fp8 codes
 * widened through byte tables (VPERMI2B), the same bits (src/kernels/avx512/tile_kv_avx512_vbmi.c). */
extern const struct attn_kernels attn_kernels_avx512_vbmi;
void attn_k_qk_tile_kv_avx512_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                   attn_dtype kv_dtype, int64_t num_keys, float *s);
void attn_k_pv_rows_kv_avx512_vbmi(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                   attn_dtype kv_dtype, int64_t head_size_v, float *o_d);
void attn_k_qk_tile_kv_pf_avx512_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                      attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf);
void attn_k_pv_rows_kv_pf_avx512_vbmi(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                      attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf);
#endif

#endif
