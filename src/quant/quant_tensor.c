/*
 * quant_tensor.c — fake quantization (quantize → dequantize in float32) of whole Q/K/V operands for the
 * quantized attention entry: optional Hadamard rotation, block FP8 with float scales, MX blocks with E8M0
 * scales along head_size (Q, K) or sequence (V), following MindIE-SD quant_attention (docs/DIFFUSION.md §5).
 * It does not reproduce MindIE's zero-padding of keys to a multiple of 512 (see docs/DIFFUSION.md).
 */
#include <math.h>
#include <stddef.h>

#include "attn/attn_experimental.h"
#include "parallel/parallel.h"
#include "quant/quant.h"

attn_dtype attn_quant_elem_dtype(int32_t format) {
    switch (format) {
    case ATTN_QUANT_FP8_E5M2:
        return ATTN_DTYPE_FP8_E5M2;
    case ATTN_QUANT_MXFP4:
        return ATTN_DTYPE_FP4_E2M1;
    default:
        return ATTN_DTYPE_FP8_E4M3; /* FP8_E4M3 and MXFP8 */
    }
}

/* One MX block: n values at x[0], x[stride], ... */
static void attn_mx_fake_block(const attn_qfmt *f, float *x, int64_t n, int64_t stride) {
    float amax = 0.0f;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const float a = fabsf(x[i * stride]);
        if (!isfinite(a))
            bad = 1;
        else if (a > amax)
            amax = a;
    }
    if (bad) {
        for (int64_t i = 0; i < n; i++)
            x[i * stride] = NAN;
        return;
    }
    const int32_t se = attn_mx_shared_exp(f, amax);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t code = attn_qfmt_encode(f, (float)ldexp((double)x[i * stride], -se));
        x[i * stride] = (float)ldexp((double)attn_qfmt_decode(f, code), se);
    }
}

/* One FP8 scale block: n values at x[0..n). */
static void attn_fp8_fake_block(const attn_qfmt *f, float *x, int64_t n) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    const float scale = amax > 0.0f ? amax / (float)f->max : 1.0f;
    for (int64_t i = 0; i < n; i++)
        x[i] = attn_qfmt_decode(f, attn_qfmt_encode(f, x[i] / scale)) * scale;
}

typedef struct attn_qjob {
    float *x;
    int64_t seq, width;
    attn_qrole role;
    const attn_quant_params *qp;
    int8_t signs[256];
} attn_qjob;

static void attn_quant_mat(void *arg, int64_t mat, int32_t tid) {
    (void)tid;
    const attn_qjob *j = (const attn_qjob *)arg;
    float *x = j->x + mat * j->seq * j->width;
    const attn_qfmt *f = attn_qfmt_of(attn_quant_elem_dtype(j->qp->format));
    if (j->qp->rotate && j->role != ATTN_QROLE_V) {
        double tmp[256];
        for (int64_t r = 0; r < j->seq; r++)
            attn_hadamard_row(x + r * j->width, j->signs, j->width, tmp, x + r * j->width);
    }
    if (j->qp->format == ATTN_QUANT_FP8_E4M3 || j->qp->format == ATTN_QUANT_FP8_E5M2) {
        const int64_t rows = j->role == ATTN_QROLE_Q ? j->qp->q_block_rows : j->qp->kv_block_rows;
        for (int64_t r0 = 0; r0 < j->seq; r0 += rows) {
            const int64_t n = (r0 + rows < j->seq ? rows : j->seq - r0) * j->width;
            attn_fp8_fake_block(f, x + r0 * j->width, n);
        }
    } else if (j->role != ATTN_QROLE_V) { /* MX along head_size */
        for (int64_t r = 0; r < j->seq; r++)
            for (int64_t c0 = 0; c0 < j->width; c0 += ATTN_MX_BLOCK)
                attn_mx_fake_block(f, x + r * j->width + c0,
                                   c0 + ATTN_MX_BLOCK < j->width ? ATTN_MX_BLOCK : j->width - c0, 1);
    } else { /* MX along the sequence: the contraction axis of P·V */
        for (int64_t d = 0; d < j->width; d++)
            for (int64_t r0 = 0; r0 < j->seq; r0 += ATTN_MX_BLOCK)
                attn_mx_fake_block(f, x + r0 * j->width + d, r0 + ATTN_MX_BLOCK < j->seq ? ATTN_MX_BLOCK : j->seq - r0,
                                   j->width);
    }
}

void attn_quant_fake_tensor(float *x, int64_t num_mats, int64_t seq, int64_t width, attn_qrole role,
                            const attn_quant_params *qp, int32_t num_threads) {
    /* Empty matrices (seq or width 0; e.g. seq_q = seq_k = 0 with a NULL workspace of size 0): nothing to
     * quantize, and no offset may be formed from x, which can be NULL then (F11). */
    if (num_mats <= 0 || seq <= 0 || width <= 0)
        return;
    attn_qjob job;
    job.x = x, job.seq = seq, job.width = width, job.role = role, job.qp = qp;
    if (qp->rotate && role != ATTN_QROLE_V)
        attn_hadamard_sign_vector(width, qp->rotation_seed, job.signs);
    attn_parallel_for(num_threads, num_mats, attn_quant_mat, &job);
}
