/*
 * ref_quant.c — literal reference of the quantized-attention operand pipeline (dequantize-then-oracle):
 * R = diag(s)·H/sqrt(d) built entry by entry (H_ij = (−1)^popcount(i & j)) and applied as a d×d product
 * in double; element encoding by the nearest value of the format's table (ties to the even code) after
 * saturation; MX shared exponent from floor(log2(amax)). Deliberately slow and independent of src/quant
 * except for the MT19937 sign vector, which is data (checked against the spec's strings in tests).
 */
#include <math.h>
#include <stdlib.h>

#include "ref/ref_quant.h"

/* A format described by its bit counts; values[c] for magnitude codes c = 0..num_finite−1 (increasing). */
typedef struct ref_fmt {
    int exp_bits, man_bits, bias, emax;
    int num_finite; /* magnitude codes with finite values */
    double values[128];
} ref_fmt;

static void ref_fmt_build(ref_fmt *f, int format) {
    if (format == ATTN_QUANT_FP8_E5M2)
        f->exp_bits = 5, f->man_bits = 2, f->bias = 15, f->emax = 15;
    else if (format == ATTN_QUANT_MXFP4)
        f->exp_bits = 2, f->man_bits = 1, f->bias = 1, f->emax = 2;
    else
        f->exp_bits = 4, f->man_bits = 3, f->bias = 7, f->emax = 8;
    const int ncodes = 1 << (f->exp_bits + f->man_bits);
    f->num_finite = 0;
    for (int c = 0; c < ncodes; c++) {
        const int e = c >> f->man_bits, m = c & ((1 << f->man_bits) - 1);
        if (format == ATTN_QUANT_FP8_E5M2 && e == 31)
            break; /* inf, NaN */
        if ((format == ATTN_QUANT_FP8_E4M3 || format == ATTN_QUANT_MXFP8) && c == 0x7F)
            break; /* NaN */
        double v = e == 0 ? (double)m / (1 << f->man_bits) * pow(2.0, 1 - f->bias)
                          : (1.0 + (double)m / (1 << f->man_bits)) * pow(2.0, e - f->bias);
        f->values[f->num_finite++] = v;
    }
}

/* Nearest representable value of x (saturated; ties to the even code). */
static double ref_round(const ref_fmt *f, double x) {
    if (isnan(x))
        return NAN;
    double a = fabs(x);
    const double max = f->values[f->num_finite - 1];
    if (a > max)
        a = max;
    int lo = 0, hi = f->num_finite - 1; /* values[lo] <= a <= values[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (f->values[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double pick;
    const double dl = a - f->values[lo], dh = f->values[hi] - a;
    if (dl < dh)
        pick = f->values[lo];
    else if (dh < dl)
        pick = f->values[hi];
    else
        pick = (lo % 2 == 0) ? f->values[lo] : f->values[hi];
    return x < 0 ? -pick : pick;
}

static void ref_rotate_row(float *x, const int8_t *signs, int64_t d) {
    double out[256];
    for (int64_t j = 0; j < d; j++) {
        double acc = 0.0;
        for (int64_t i = 0; i < d; i++) {
            const int h = (__builtin_popcountll((unsigned long long)(i & j)) % 2) ? -1 : 1;
            acc += (double)x[i] * (double)signs[i] * (double)h;
        }
        out[j] = acc * (1.0 / sqrt((double)d));
    }
    for (int64_t j = 0; j < d; j++)
        x[j] = (float)out[j];
}

static void ref_mx_block(const ref_fmt *f, float *x, int64_t n, int64_t stride) {
    double amax = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i * stride])) {
            for (int64_t t = 0; t < n; t++)
                x[t * stride] = NAN;
            return;
        }
        if (fabs((double)x[i * stride]) > amax)
            amax = fabs((double)x[i * stride]);
    }
    int shared = amax > 0.0 ? (int)floor(log2(amax)) - f->emax : -127;
    if (shared < -127)
        shared = -127;
    if (shared > 127)
        shared = 127;
    const double X = pow(2.0, shared);
    for (int64_t i = 0; i < n; i++)
        x[i * stride] = (float)(ref_round(f, (double)x[i * stride] / X) * X);
}

void attn_ref_quant_fake_tensor(float *x, int64_t num_mats, int64_t seq, int64_t width, int32_t role,
                                const attn_quant_params *qp) {
    if (num_mats <= 0 || seq <= 0 || width <= 0)
        return; /* empty: x may be NULL, form no offset from it (F11) */
    ref_fmt f;
    ref_fmt_build(&f, qp->format);
    int8_t signs[256];
    if (qp->rotate && role != 2)
        attn_hadamard_signs(width, qp->rotation_seed, signs);
    for (int64_t mat = 0; mat < num_mats; mat++) {
        float *m = x + mat * seq * width; /* [seq][width] */
        if (qp->rotate && role != 2)
            for (int64_t r = 0; r < seq; r++)
                ref_rotate_row(m + r * width, signs, width);
        if (qp->format == ATTN_QUANT_FP8_E4M3 || qp->format == ATTN_QUANT_FP8_E5M2) {
            const int64_t rows = role == 0 ? qp->q_block_rows : qp->kv_block_rows;
            for (int64_t r0 = 0; r0 < seq; r0 += rows) {
                const int64_t r1 = r0 + rows < seq ? r0 + rows : seq;
                float amax = 0.0f;
                for (int64_t i = r0 * width; i < r1 * width; i++)
                    if (fabsf(m[i]) > amax)
                        amax = fabsf(m[i]);
                const float scale = amax > 0.0f ? amax / (float)f.values[f.num_finite - 1] : 1.0f;
                for (int64_t i = r0 * width; i < r1 * width; i++) {
                    const float scaled = m[i] / scale; /* float division, as the format's definition */
                    m[i] = (float)ref_round(&f, (double)scaled) * scale;
                }
            }
        } else if (role != 2) {
            for (int64_t r = 0; r < seq; r++)
                for (int64_t c0 = 0; c0 < width; c0 += 32)
                    ref_mx_block(&f, m + r * width + c0, c0 + 32 < width ? 32 : width - c0, 1);
        } else {
            for (int64_t d = 0; d < width; d++)
                for (int64_t r0 = 0; r0 < seq; r0 += 32)
                    ref_mx_block(&f, m + r0 * width + d, r0 + 32 < seq ? 32 : seq - r0, width);
        }
    }
}
