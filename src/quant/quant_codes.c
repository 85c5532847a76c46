/*
 * quant_codes.c — quantization of whole Q/K/V operands into codes and scales for the quantized-attention fast
 * path (src/attention/fwd_quant.c, docs/DIFFUSION.md §5): the same rotation, scales and encodings as the fake
 * quantization of quant_tensor.c — so decode(code)·scale is bitwise the value that path keeps in float32 — but
 * written as one byte per FP8 element / two E2M1 per byte plus float (FP8) or E8M0 (MX) scales. Rows are read
 * in place in the caller's layout and dtype and converted by the float table's cvt_to_f32; FP8 codes come from
 * its cvt_to_fp8 (bitwise attn_qfmt_encode of the float32 quotient, tests/kernels/test_fp8_encode.c), E2M1 from
 * a branch-free comparison encoder equal to attn_qfmt_encode. Matrices run in parallel; scratch comes from the
 * context's per-thread slices. Not reproduced here: nothing beyond what quant_tensor.c does.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/dtype.h"
#include "parallel/parallel.h"
#include "quant/quant.h"

#include "kernels/kernels.h"

typedef struct attn_qc_job {
    const attn_qsrc *src;
    int64_t heads, seq, width;
    attn_qrole role;
    const attn_quant_params *qp;
    const struct attn_kernels *kern;
    const struct attn_quant_kernels *qk;
    double norm;
    char *scratch;
    size_t slice;
    attn_dtype elem;
    const attn_qfmt *f;
    attn_qoperand *out;
    int wide; /* FP8 / MXFP8: write the bf16 operands of fwd_quant.h (attn_fq_wide_table) instead of codes */
    int8_t signs[256];
} attn_qc_job;

/* Encodes n scaled floats y into row `dst` of the element format: FP8 codes of y / scale (the float table's
 * cvt_to_fp8), E2M1 (MX only, scale 1) by the quant table. */
static void attn_qc_encode(const attn_qc_job *j, const float *y, int64_t n, float scale, uint8_t *dst) {
    if (j->elem != ATTN_DTYPE_FP4_E2M1)
        j->kern->cvt_to_fp8(y, ATTN_DTYPE_F32, scale, j->elem, dst, n);
    else
        j->qk->encode_e2m1(y, n, dst);
}

/* Row r of matrix (b, h) in the caller's layout, with the row two ahead prefetched (rows sit a head stride
 * apart; no effect on results). */
static const char *attn_qc_src(const attn_qc_job *j, int64_t b, int64_t h, int64_t r) {
    const char *row = j->src->data + b * j->src->batch_stride + h * j->src->head_stride + r * j->src->seq_stride;
    const int64_t bytes = j->width * (int64_t)attn_dtype_size(j->src->dtype);
    if (r + 2 < j->seq)
        for (int64_t off = 0; off < bytes; off += 64)
            __builtin_prefetch(row + 2 * j->src->seq_stride + off, 0, 3);
    return row;
}

/* Row r of matrix (b, h) as float32 in x, rotated if the job rotates. */
static void attn_qc_row(const attn_qc_job *j, int64_t b, int64_t h, int64_t r, double *tmp, float *x) {
    j->kern->cvt_to_f32(attn_qc_src(j, b, h, r), j->src->dtype, x, j->width);
    if (j->qp->rotate && j->role != ATTN_QROLE_V)
        j->qk->hadamard_row(x, j->signs, j->width, tmp, x, j->norm);
}

static void attn_qc_mat(void *arg, int64_t mat, int32_t tid) {
    const attn_qc_job *j = (const attn_qc_job *)arg;
    const int64_t b = mat / j->heads, h = mat % j->heads, S = j->seq, W = j->width;
    char *base = j->scratch + (size_t)tid * j->slice;
    double *tmp = (double *)(void *)base;                        /* [256] */
    float *row = (float *)(void *)(base + 256 * sizeof(double)); /* [256] */
    float *cache = row + 256;                                    /* the rest of the slice */
    const size_t cache_floats = (j->slice - 256 * sizeof(double) - 256 * sizeof(float)) / sizeof(float);
    attn_qoperand *o = j->out;
    uint8_t *codes = o->codes + mat * S * o->row_bytes;
    const float fmax = (float)j->f->max;
    if (!j->out->escale) { /* FP8 block scales */
        const int64_t rows = o->block_rows, nblk = (S + rows - 1) / rows;
        for (int64_t blk = 0; blk < nblk; blk++) {
            const int64_t r0 = blk * rows, r1 = r0 + rows < S ? r0 + rows : S;
            const int cached = (size_t)((r1 - r0) * W) <= cache_floats;
            uint32_t amax_bits = 0, nf = 0; /* max |x| over non-NaN values, as fabsf(x) > amax */
            for (int64_t r = r0; r < r1; r++) {
                float *x = cached ? cache + (r - r0) * W : row;
                attn_qc_row(j, b, h, r, tmp, x);
                const uint32_t m = j->qk->absmax_bits(x, W, &nf);
                amax_bits = m > amax_bits ? m : amax_bits;
            }
            const float amax = attn_bits_f32(amax_bits);
            const float scale = amax > 0.0f ? amax / fmax : 1.0f;
            o->fscale[mat * nblk + blk] = scale;
            for (int64_t r = r0; r < r1; r++) {
                float *x = cached ? cache + (r - r0) * W : row;
                if (!cached)
                    attn_qc_row(j, b, h, r, tmp, x);
                if (!j->wide)
                    attn_qc_encode(j, x, W, scale, codes + r * o->row_bytes);
                else if (j->role != ATTN_QROLE_V) /* a bf16 row */
                    j->qk->fp8_bf16_row(x, W, scale, j->elem, NULL, 0, -1, attn_fq_wide_qk_at(o, mat, S, r, W));
                else /* the low (even key) or high (odd key) halves of a row of key pairs */
                    j->qk->fp8_bf16_row(x, W, scale, j->elem, NULL, 0, (int)(r % 2),
                                        attn_fq_wide_pair_at(o, mat, S, r, W));
            }
        }
    } else if (j->role != ATTN_QROLE_V) { /* MX along head_size */
        const int64_t nb = (W + 31) / 32;
        /* the steps below in one kernel where the table takes them: it takes every row of a job or none (same
         * width, element format and dtype), so a first refusal ends the attempts */
        int fused = j->qp->rotate && (j->wide ? j->qk->mx_rot_row_bf16 != NULL : j->qk->mx_rot_row != NULL);
        for (int64_t r = 0; r < S; r++) {
            uint8_t *e8 = o->escale + (mat * S + r) * nb;
            uint16_t *wd = j->wide ? attn_fq_wide_qk_at(o, mat, S, r, W) : NULL;
            if (fused &&
                (fused = j->wide ? j->qk->mx_rot_row_bf16(attn_qc_src(j, b, h, r), j->src->dtype, j->signs, W, j->norm,
                                                          j->f->emax, j->elem, wd, e8)
                                 : j->qk->mx_rot_row(attn_qc_src(j, b, h, r), j->src->dtype, j->signs, W, j->norm,
                                                     j->f->emax, j->elem, codes + r * o->row_bytes, e8)))
                continue;
            attn_qc_row(j, b, h, r, tmp, row);
            j->qk->mx_scale_row(row, W, j->f->emax, e8);
            if (j->wide) { /* the bf16 row: grid values times their block's factor */
                float fac[256 / 32];
                for (int64_t c = 0; c < nb; c++)
                    fac[c] = attn_e8m0_factor(e8[c]);
                j->qk->fp8_bf16_row(row, W, 1.0f, j->elem, fac, 5, -1, wd);
            } else {
                attn_qc_encode(j, row, W, 1.0f, codes + r * o->row_bytes);
            }
        }
    } else { /* MX V: blocks of 32 tokens per channel */
        const int64_t nvb = (S + 31) / 32;
        float *blkx = cache; /* [32][W] */
        float inv[256];
        for (int64_t vb = 0; vb < nvb; vb++) {
            const int64_t r0 = vb * 32, r1 = r0 + 32 < S ? r0 + 32 : S;
            for (int64_t r = r0; r < r1; r++)
                attn_qc_row(j, b, h, r, tmp, blkx + (r - r0) * W);
            uint8_t *e8 = o->escale + (mat * nvb + vb) * W;
            uint32_t amax_bits[256], nf[256];
            memset(amax_bits, 0, (size_t)W * sizeof(uint32_t));
            memset(nf, 0, (size_t)W * sizeof(uint32_t));
            j->qk->absmax_cols(blkx, r1 - r0, W, amax_bits, nf);
            for (int64_t d = 0; d < W; d++) {
                const int bad = nf[d] != 0;
                const int32_t se = bad ? 0 : attn_mx_shared_exp_bits(j->f->emax, amax_bits[d]);
                e8[d] = bad ? 0xFF : (uint8_t)(se + 127);
                inv[d] = bad ? 0.0f : attn_pow2_f32(-se);
            }
            float vfac[256]; /* wide: the channels' factors, as the driver widens V with them */
            for (int64_t d = 0; d < W && j->wide; d++)
                vfac[d] = attn_e8m0_factor(e8[d]);
            for (int64_t r = r0; r < r1; r++) {
                float *x = blkx + (r - r0) * W;
                for (int64_t d = 0; d < W; d++)
                    x[d] *= inv[d];
                if (j->wide) /* the low (even key) or high (odd key) halves of a row of key pairs */
                    j->qk->fp8_bf16_row(x, W, 1.0f, j->elem, vfac, 0, (int)(r % 2),
                                        attn_fq_wide_pair_at(o, mat, S, r, W));
                else
                    attn_qc_encode(j, x, W, 1.0f, codes + r * o->row_bytes);
            }
        }
    }
}

typedef struct attn_qc_all {
    attn_qc_job jobs[3];
    int64_t first[4]; /* item ranges of the operands */
} attn_qc_all;

static void attn_qc_item(void *arg, int64_t item, int32_t tid) {
    const attn_qc_all *a = (const attn_qc_all *)arg;
    int t = 0;
    while (item >= a->first[t + 1])
        t++;
    attn_qc_mat((void *)(uintptr_t)&a->jobs[t], item - a->first[t], tid);
}

void attn_quant_codes(const attn_qsrc src[3], int64_t batch, const int64_t heads[3], const int64_t seq[3],
                      const int64_t width[3], const attn_quant_params *qp, const struct attn_kernels *kern,
                      const struct attn_quant_kernels *qk, const attn_exec *ex, int wide, attn_qoperand *out[3]) {
    attn_qc_all a;
    a.first[0] = 0;
    for (int t = 0; t < 3; t++) {
        attn_qc_job *j = &a.jobs[t];
        j->src = &src[t], j->heads = heads[t], j->seq = seq[t], j->width = width[t], j->role = (attn_qrole)t;
        j->qp = qp, j->kern = kern, j->qk = qk;
        j->norm = 1.0 / sqrt((double)width[t]);
        j->scratch = ex->scratch, j->slice = attn_fwd_scratch_bytes();
        j->elem = attn_quant_elem_dtype(qp->format);
        j->f = attn_qfmt_of(j->elem);
        j->out = out[t];
        j->wide = wide;
        if (qp->rotate && t != ATTN_QROLE_V)
            attn_hadamard_sign_vector(width[t], qp->rotation_seed, j->signs);
        const int64_t n = batch > 0 && seq[t] > 0 && width[t] > 0 ? batch * heads[t] : 0;
        a.first[t + 1] = a.first[t] + n;
    }
    attn_parallel_for(ex->num_threads, a.first[3], attn_qc_item, &a);
}
