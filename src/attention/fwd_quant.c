/*
 * fwd_quant.c — the quantized-attention driver (fwd_quant.h): work items of (batch, kv head, head chunk, up to
 * sixteen query blocks); per kv tile the K and V codes are widened once (or, as wide FP8 operands made by the
 * quantization, read in place; bf16 tables: K as bf16 rows — MXFP4 K as
 * biased bytes for the VPDPBUSD Q·Kᵀ where the table has it — V as key-pair columns, or for MXFP4 on VPDPBUSD as
 * byte quads of four keys with P as bytes per 32-key block; f32-staging tables: float32 rows, as the
 * fake-quantization path holds them) and every block of the
 * item runs Q·Kᵀ, the logit step of fwd.c (softmax_scale, soft-cap, ALiBi), the online softmax and P·V on it.
 * Tiles and partitions sit at the absolute positions of fwd.c (ATTN_KV_TILE, ATTN_KV_PARTITION, fold in
 * ascending order), so on an f32-staging table the bits are those of the fake-quantization path on the same
 * float table. No mask, no causal rows: the API refuses them for quantized attention.
 */
#include "attention/fwd_quant.h"

#include <math.h>
#include <string.h>

#include "core/dtype.h"
#include "parallel/parallel.h"

/* Query blocks per work item: each K/V tile is widened once for them, so more blocks means less widening per
 * score; 8 where 16 would leave fewer than two items per thread. Which blocks share an item never changes a bit. */
#define ATTN_FQ_BLOCKS 16

/* Per-block state carved from the thread scratch's multi region. */
typedef struct attn_fq_block {
    attn_fwd_block blk;
    float q_t[ATTN_HEAD_SIZE_MAX * ATTN_QB]; /* f32: [D][QB] q_t; bf16: [ceil(D/2)][QB] pairs (uint32)  */
    float row_scale[ATTN_QB];                /* FP8 Q scale per lane (bf16 tables)                   */
    int32_t qcorr[ATTN_HEAD_SIZE_MAX / 32 * ATTN_QB]; /* MXFP4 on qk_e2m1_i8: [nb][QB] −12·Σ 2q per block */
    float qsc[ATTN_HEAD_SIZE_MAX / 32 * ATTN_QB];     /* and [nb][QB] E8M0 factor · softmax_scale / 4     */
    int32_t qe_lo, qe_hi; /* the exponent fields of those factors (rows < num_rows): smallest and largest */
    float m_acc[ATTN_QB], l_acc[ATTN_QB], m[ATTN_QB], l[ATTN_QB];
    float o_acc[ATTN_HEAD_SIZE_MAX * ATTN_QB], o[ATTN_HEAD_SIZE_MAX * ATTN_QB];
} attn_fq_block;

_Static_assert(ATTN_FQ_BLOCKS * sizeof(attn_fq_block) <= ATTN_FWD_MULTI_BYTES,
               "the blocks of a quant item must fit the thread scratch's multi region");

typedef struct attn_fq_job {
    const attn_problem *p;
    const attn_qattn *qa;
    const struct attn_quant_kernels *qk;
    const attn_exec *ex;
    attn_fwd_shape sh;
    int i8;  /* MXFP4 Q·Kᵀ on qk_e2m1_i8 (q_t holds byte quads, K is staged as biased bytes) */
    int pv8; /* and P·V on pv_e2m1_i8 (V staged as byte quads of four keys, P as bytes per 32-key block) */
    int64_t token_blocks, blocks_per_item, items_per_head, items_per_batch;
} attn_fq_job;

/* Float factors of a Q/K row's MX blocks (E8M0 bytes e[0..nb)). */
static void attn_fq_row_factors(const uint8_t *e, int64_t nb, float *f) {
    for (int64_t i = 0; i < nb; i++)
        f[i] = attn_e8m0_factor(e[i]);
}

/* Stages the block's queries: f32 q_t (values decode·scale) or bf16 pairs plus the FP8 per-lane scale. */
static void attn_fq_pack_q(const attn_fq_job *j, int64_t b, attn_fq_block *fb, attn_fwd_scratch *sc) {
    const attn_problem *p = j->p;
    const attn_qattn *qa = j->qa;
    const int64_t D = p->head_size, nb = (D + 31) / 32;
    const int bf16 = j->qk->qk_bf16 != NULL;
    float fac[ATTN_HEAD_SIZE_MAX / 32];
    const float one = 1.0f;
    const int64_t words = j->i8 ? (D + 3) / 4 : bf16 ? (D + 1) / 2 : D; /* q_t rows: byte quads, bf16 pairs, f32 */
    if (fb->blk.num_rows < ATTN_QB) { /* lanes without a row compute on zeros; a full block writes every element */
        memset(fb->q_t, 0, (size_t)(words * ATTN_QB) * sizeof(float));
        if (j->i8) {
            memset(fb->qcorr, 0, sizeof fb->qcorr);
            memset(fb->qsc, 0, sizeof fb->qsc);
        }
    }
    for (int r = 0; r < ATTN_QB; r++)
        fb->row_scale[r] = p->opts.softmax_scale; /* bf16: (dot·(scale_q·softmax_scale))·scale_k */
    fb->qe_lo = 255, fb->qe_hi = 0;
    for (int32_t r = 0; r < fb->blk.num_rows; r++) {
        const int64_t mat = b * p->num_heads + fb->blk.row_head[r], t = fb->blk.row_token[r];
        const uint8_t *codes = qa->q.codes + (mat * qa->seq_q + t) * qa->q.row_bytes;
        const float *s = &one;
        int shift = 63;
        if (qa->mx) {
            if (!qa->wide) { /* (wide rows carry their factors) */
                attn_fq_row_factors(qa->q.escale + (mat * qa->seq_q + t) * nb, nb, fac);
                s = fac, shift = 5;
            }
        } else if (!bf16) {
            s = qa->q.fscale + mat * ((qa->seq_q + qa->q.block_rows - 1) / qa->q.block_rows) + t / qa->q.block_rows;
        } else {
            fb->row_scale[r] =
                qa->q.fscale[mat * ((qa->seq_q + qa->q.block_rows - 1) / qa->q.block_rows) + t / qa->q.block_rows] *
                p->opts.softmax_scale;
        }
        /* row r of the block, as 32-bit words, into sc->rows; one transpose into q_t after the loop */
        uint32_t *row = (uint32_t *)(void *)(sc->rows + r * words);
        if (j->i8) {
            uint8_t *by = (uint8_t *)(void *)row;
            row[words - 1] = 0; /* the pad bytes of a partial last quad */
            j->qk->e2m1_bytes(codes, D, 0, by);
            for (int64_t c = 0; c < nb; c++) {
                int32_t sum = 0;
                const int8_t *sb = (const int8_t *)by + 32 * c;
                const int64_t len = D - 32 * c < 32 ? D - 32 * c : 32;
                for (int64_t i = 0; i < len; i++)
                    sum += sb[i];
                fb->qcorr[c * ATTN_QB + r] = -12 * sum;
                fb->qsc[c * ATTN_QB + r] = fac[c] * 0.25f * p->opts.softmax_scale;
                const int32_t e = (int32_t)(attn_f32_bits(fb->qsc[c * ATTN_QB + r]) >> 23) & 0xFF;
                fb->qe_lo = e < fb->qe_lo ? e : fb->qe_lo;
                fb->qe_hi = e > fb->qe_hi ? e : fb->qe_hi;
            }
        } else if (qa->wide) { /* the bf16 row made by the quantization */
            memcpy(row, attn_fq_wide_qk_at(&qa->q, mat, qa->seq_q, t, D), (size_t)words * sizeof(uint32_t));
        } else if (bf16) {
            uint16_t *h = (uint16_t *)(void *)row; /* dequant_row_bf16 pads an odd head_size with a zero */
            j->qk->dequant_row_bf16(codes, qa->elem, D, s, shift, h);
        } else {
            j->qk->dequant_row(codes, qa->elem, D, s, shift, (float *)(void *)row);
        }
    }
    /* 32-bit words moved as floats: the transpose copies bits, whatever they encode */
    j->ex->kern->transpose(sc->rows, words, fb->blk.num_rows, words, fb->q_t, ATTN_QB);
}

/* Stages keys [a, b) of kv matrix `mat`: K (and V) codes widened into the scratch tiles, whose addresses go to
 * *kt and *vt — or, for wide operands, those addresses point into them and only the FP8 scales are gathered. */
static void attn_fq_stage(const attn_fq_job *j, int64_t mat, int64_t a, int64_t b, attn_fwd_scratch *sc, float *k_scale,
                          float *v_scale, int64_t *vt_stride, float *k_fac, int32_t ke[2], float *v_fac,
                          const void **kt, int64_t *kt_stride, const void **vt) {
    const attn_problem *p = j->p;
    const attn_qattn *qa = j->qa;
    const int64_t D = p->head_size, Dv = p->head_size_v, nb = (D + 31) / 32;
    const int bf16 = j->qk->qk_bf16 != NULL;
    const int64_t kblk = qa->mx ? 0 : (qa->seq_k + qa->k.block_rows - 1) / qa->k.block_rows;
    const int64_t vblk = qa->mx ? 0 : (qa->seq_k + qa->v.block_rows - 1) / qa->v.block_rows;
    const float one = 1.0f;
    float fac[ATTN_HEAD_SIZE_MAX / 32];
    float vfac[ATTN_HEAD_SIZE_MAX];
    int64_t vfac_blk = -1;
    const int64_t tk = attn_fq_tile_row(D), tv = attn_fq_tile_row(Dv);
    *vt_stride = tv;
    ke[0] = 255, ke[1] = 0;
    *kt = sc->k_tile, *vt = sc->v_tile, *kt_stride = tk;
    if (qa->wide) {
        *kt_stride = attn_fq_wide_row(D), *vt_stride = Dv;
        *kt = attn_fq_wide_qk_at(&qa->k, mat, qa->seq_k, a, D);
        *vt = attn_fq_wide_pair_at(&qa->v, mat, qa->seq_k, a, Dv);
        for (int64_t key = a; key < b && !qa->mx; key++) {
            k_scale[key - a] = qa->k.fscale[mat * kblk + key / qa->k.block_rows];
            v_scale[key - a] = qa->v.fscale[mat * vblk + key / qa->v.block_rows];
        }
        return;
    }
    for (int64_t key = a; key < b && j->i8; key++) { /* MXFP4 on qk_e2m1_i8: bytes 2k + 12 (pad: 12) and factors */
        const uint8_t *kc = qa->k.codes + (mat * qa->seq_k + key) * qa->k.row_bytes;
        uint8_t *dst = (uint8_t *)(void *)sc->k_tile + (key - a) * tk;
        const uint8_t *e8 = qa->k.escale + (mat * qa->seq_k + key) * nb;
        memset(dst + D, 12, (size_t)(((D + 3) & ~(int64_t)3) - D));
        j->qk->e2m1_bytes(kc, D, 12, dst);
        attn_fq_row_factors(e8, nb, k_fac + (key - a) * nb);
        for (int64_t c = 0; c < nb; c++) { /* factor 2^(E − 127): exponent field E (0: subnormal, 255: NaN) */
            ke[0] = e8[c] < ke[0] ? e8[c] : ke[0];
            ke[1] = e8[c] > ke[1] ? e8[c] : ke[1];
        }
    }
    for (int64_t key = a; key < b && !j->i8; key++) {
        const uint8_t *kc = qa->k.codes + (mat * qa->seq_k + key) * qa->k.row_bytes;
        const float *s = &one;
        int shift = 63;
        if (qa->mx) {
            attn_fq_row_factors(qa->k.escale + (mat * qa->seq_k + key) * nb, nb, fac);
            s = fac, shift = 5;
        } else {
            const float ks = qa->k.fscale[mat * kblk + key / qa->k.block_rows];
            if (bf16)
                k_scale[key - a] = ks;
            else
                s = &qa->k.fscale[mat * kblk + key / qa->k.block_rows];
        }
        if (bf16)
            j->qk->dequant_row_bf16(kc, qa->elem, D, s, shift, (uint16_t *)(void *)sc->k_tile + (key - a) * tk);
        else {
            float *dst = sc->k_tile + (key - a) * tk;
            j->qk->dequant_row(kc, qa->elem, D, s, shift, dst);
            sc->k_rows[key - a] = dst;
        }
    }
    for (int64_t key = a; key < b && j->pv8; key += 4) { /* MXFP4 on pv_e2m1_i8: quads of keys, factors / 2 */
        const uint8_t *rows[4];
        for (int i = 0; i < 4; i++)
            rows[i] = key + i < b ? qa->v.codes + (mat * qa->seq_k + key + i) * qa->v.row_bytes : NULL;
        j->qk->v_quads_e2m1(rows, Dv, (uint32_t *)(void *)sc->v_tile + ((key - a) / 4) * tv);
        if ((key - a) % 32 == 0) {
            const uint8_t *e = qa->v.escale + (mat * ((qa->seq_k + 31) / 32) + key / 32) * Dv;
            for (int64_t d = 0; d < Dv; d++)
                v_fac[((key - a) / 32) * Dv + d] = attn_e8m0_factor(e[d]) * 0.5f;
        }
    }
    for (int64_t key = a; key < b && !j->pv8; key += bf16 ? 2 : 1) {
        const float *s = &one;
        int shift = 63;
        if (qa->mx) {
            if (key / 32 != vfac_blk) {
                vfac_blk = key / 32;
                const uint8_t *e = qa->v.escale + (mat * ((qa->seq_k + 31) / 32) + vfac_blk) * Dv;
                for (int64_t d = 0; d < Dv; d++)
                    vfac[d] = attn_e8m0_factor(e[d]);
            }
            s = vfac, shift = 0;
        } else if (!bf16) {
            s = &qa->v.fscale[mat * vblk + key / qa->v.block_rows];
        }
        const uint8_t *vc = qa->v.codes + (mat * qa->seq_k + key) * qa->v.row_bytes;
        if (bf16) {
            if (!qa->mx) {
                v_scale[key - a] = qa->v.fscale[mat * vblk + key / qa->v.block_rows];
                if (key + 1 < b)
                    v_scale[key + 1 - a] = qa->v.fscale[mat * vblk + (key + 1) / qa->v.block_rows];
            }
            j->qk->v_pairs_bf16(vc, key + 1 < b ? vc + qa->v.row_bytes : NULL, qa->elem, Dv, s, shift,
                                (uint32_t *)(void *)sc->v_tile + ((key - a) / 2) * tv);
        } else {
            float *dst = sc->v_tile + (key - a) * tv;
            j->qk->dequant_row(vc, qa->elem, Dv, s, shift, dst);
            sc->v_rows[key - a] = dst;
        }
    }
}

static void attn_fq_item(void *arg, int64_t item, int32_t tid) {
    const attn_fq_job *j = (const attn_fq_job *)arg;
    const attn_problem *p = j->p;
    const attn_qattn *qa = j->qa;
    const struct attn_kernels *kern = j->ex->kern;
    const int bf16 = j->qk->qk_bf16 != NULL;
    attn_fwd_scratch sc;
    attn_fwd_scratch_carve(j->ex->scratch + (size_t)tid * attn_fwd_scratch_bytes(), &sc);
    attn_fq_block *fbs = (attn_fq_block *)(void *)sc.multi;

    const int64_t b = item / j->items_per_batch, rem = item % j->items_per_batch;
    const int64_t head_item = rem / j->items_per_head, tb0 = (rem % j->items_per_head) * j->blocks_per_item;
    const int64_t g = head_item / j->sh.head_chunks, chunk = head_item % j->sh.head_chunks;
    attn_seq_view seq;
    p->get_seq(p, b, &seq);
    int64_t nblocks = j->token_blocks - tb0 < j->blocks_per_item ? j->token_blocks - tb0 : j->blocks_per_item;
    for (int64_t i = 0; i < nblocks; i++) {
        attn_fq_block *fb = &fbs[i];
        attn_fwd_block_init(p, &j->sh, &seq, g, chunk, tb0 + i, &fb->blk);
        attn_fq_pack_q(j, b, fb, &sc);
        attn_fwd_state_reset(p->head_size_v, fb->m_acc, fb->l_acc, fb->o_acc);
    }
    const int64_t mat = b * p->num_kv_heads + g;
    attn_problem p1 = *p; /* bf16 tables: softmax_scale is already in row_scale; soft-cap and ALiBi remain */
    p1.opts.softmax_scale = 1.0f;
    float k_scale[ATTN_KV_TILE], v_scale[ATTN_KV_TILE], k_fac[ATTN_KV_TILE * (ATTN_HEAD_SIZE_MAX / 32)];
    float v_fac[ATTN_KV_TILE / 32 * ATTN_HEAD_SIZE_MAX], p_fac[ATTN_KV_TILE / 32 * ATTN_QB];
    int32_t ke[2];
    const int64_t Sk = qa->seq_k;
    for (int64_t part = 0; part * ATTN_KV_PARTITION < Sk; part++) {
        const int64_t lo = part * ATTN_KV_PARTITION;
        const int64_t hi = lo + ATTN_KV_PARTITION < Sk ? lo + ATTN_KV_PARTITION : Sk;
        if (!bf16) /* f32 staging: fresh partition states, folded after the partition as fwd.c does */
            for (int64_t i = 0; i < nblocks; i++)
                attn_fwd_state_reset(p->head_size_v, fbs[i].m, fbs[i].l, fbs[i].o);
        for (int64_t a = lo; a < hi; a += ATTN_KV_TILE) {
            const int64_t e = a + ATTN_KV_TILE < hi ? a + ATTN_KV_TILE : hi, nk = e - a;
            int64_t vts = 0, kts = 0;
            const void *kt, *vt;
            attn_fq_stage(j, mat, a, e, &sc, k_scale, v_scale, &vts, k_fac, ke, v_fac, &kt, &kts, &vt);
            /* the V pairs by head dimension, once per tile for every block, where the table's P·V reads them so
             * (v_pairs_t; o_tmp, the float path's one-row scratch, is free on the bf16 path) */
            const uint32_t *vtt = NULL;
            if (bf16 && !j->pv8 && j->qk->v_pairs_t &&
                j->qk->v_pairs_t((const uint32_t *)vt, vts, nk, p->head_size_v, (uint32_t *)(void *)sc.o_tmp))
                vtt = (const uint32_t *)(const void *)sc.o_tmp;
            for (int64_t i = 0; i < nblocks; i++) {
                attn_fq_block *fb = &fbs[i];
                const int64_t nr = fb->blk.num_rows;
                if (j->i8) { /* every factor product a normal float: formed by adding exponents */
                    const int exp_add = fb->qe_lo >= 1 && fb->qe_hi <= 254 && ke[0] >= 1 && ke[1] <= 254 &&
                                        fb->qe_lo + ke[0] - 127 >= 1 && fb->qe_hi + ke[1] - 127 <= 254;
                    j->qk->qk_e2m1_i8((const uint32_t *)(const void *)fb->q_t, fb->qcorr, fb->qsc, nr, p->head_size,
                                      (const uint8_t *)(const void *)sc.k_tile, attn_fq_tile_row(p->head_size), k_fac,
                                      nk, exp_add, sc.s);
                }
                if (bf16) {
                    if (!j->i8)
                        j->qk->qk_bf16((const uint32_t *)(const void *)fb->q_t, nr, p->head_size, (const uint16_t *)kt,
                                       kts, nk, fb->row_scale, qa->mx ? NULL : k_scale, sc.s);
                    if (p->opts.softcap > 0.0f || p->opts.alibi_slopes)
                        attn_fwd_tile_logits_mask(&p1, kern, &fb->blk, a, e, sc.s);
                    /* one online softmax over all keys, straight into the folded state: no partitions to merge;
                     * it hands P·V its operand — bytes per 32-key block for pv_e2m1_i8, else bf16(P·v_scale)
                     * pairs — instead of P */
                    if (j->pv8) {
                        j->qk->softmax_quads_u8(sc.s, nk, nr, fb->m_acc, fb->l_acc, fb->o_acc, p->head_size_v,
                                                (uint32_t *)(void *)sc.p_tmp, p_fac);
                        j->qk->pv_e2m1_i8((const uint32_t *)(const void *)sc.p_tmp, p_fac, nk, nr,
                                          (const uint32_t *)(const void *)sc.v_tile, vts, v_fac, p->head_size_v,
                                          p->head_size_v, fb->o_acc);
                        continue;
                    }
                    j->qk->softmax_pairs_bf16(sc.s, nk, nr, qa->mx ? NULL : v_scale, fb->m_acc, fb->l_acc,
                                              fb->o_acc, p->head_size_v, (uint32_t *)(void *)sc.p_tmp);
                    if (vtt)
                        j->qk->pv_pairs_t_bf16((const uint32_t *)(const void *)sc.p_tmp, nk, nr, vtt, p->head_size_v,
                                               fb->o_acc);
                    else
                        j->qk->pv_pairs_bf16((const uint32_t *)(const void *)sc.p_tmp, nk, nr, (const uint32_t *)vt,
                                             vts, p->head_size_v, fb->o_acc);
                } else {
                    attn_fwd_tile(p, kern, &fb->blk, &sc, fb->q_t, sc.s, sc.k_rows, sc.v_rows, a, e, fb->m, fb->l,
                                  fb->o);
                }
            }
        }
        for (int64_t i = 0; i < nblocks && !bf16; i++) {
            attn_fq_block *fb = &fbs[i];
            attn_fwd_fold(fb->blk.num_rows, p->head_size_v, fb->m_acc, fb->l_acc, fb->o_acc, fb->m, fb->l, fb->o);
        }
    }
    for (int64_t i = 0; i < nblocks; i++)
        attn_fwd_finalize(p, kern, &fbs[i].blk, &sc, fbs[i].m_acc, fbs[i].l_acc, fbs[i].o_acc);
}

void attn_fwd_quant_run(const attn_problem *p, const attn_qattn *qa, const struct attn_quant_kernels *qk,
                        const attn_exec *ex) {
    attn_fq_job j;
    j.p = p, j.qa = qa, j.qk = qk, j.ex = ex;
    j.i8 = qa->elem == ATTN_DTYPE_FP4_E2M1 && qa->mx && qk->qk_e2m1_i8 != NULL && qk->qk_bf16 != NULL;
    j.pv8 = j.i8 && qk->pv_e2m1_i8 != NULL;
    attn_fwd_shape_of(p, &j.sh);
    j.token_blocks = (qa->seq_q + j.sh.tokens_per_block - 1) / j.sh.tokens_per_block;
    for (j.blocks_per_item = ATTN_FQ_BLOCKS;; j.blocks_per_item /= 2) {
        j.items_per_head = (j.token_blocks + j.blocks_per_item - 1) / j.blocks_per_item;
        j.items_per_batch = p->num_kv_heads * j.sh.head_chunks * j.items_per_head;
        if (j.blocks_per_item <= 8 || p->num_seqs * j.items_per_batch >= 2 * (int64_t)ex->num_threads)
            break;
    }
    if (j.items_per_batch == 0 || p->num_seqs == 0)
        return;
    attn_parallel_for(ex->num_threads, p->num_seqs * j.items_per_batch, attn_fq_item, &j);
}
