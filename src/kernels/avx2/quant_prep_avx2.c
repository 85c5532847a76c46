/*
 * quant_prep_avx2.c — the quantization helpers of the avx2 quant table (kernels.h, struct attn_quant_kernels):
 * the portable bodies of generic/quant_prep.h compiled with this folder's flags, where the compiler vectorizes
 * them; bitwise the scalar reference (see that header).
 */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "quant_prep_avx2.c must be compiled with -mavx2 -mfma"
#endif
#include "kernels/generic/quant_prep.h"
#include "kernels/kernels.h"

void attn_k_hadamard_row_avx2(const float *src, const int8_t *signs, int64_t n, double *tmp, float *dst, double norm) {
    kqp_hadamard_row(src, signs, n, tmp, dst, norm);
}

uint32_t attn_k_absmax_bits_avx2(const float *x, int64_t n, uint32_t *nonfinite) {
    return kqp_absmax_bits(x, n, nonfinite);
}

void attn_k_absmax_cols_avx2(const float *x, int64_t rows, int64_t width, uint32_t *amax, uint32_t *nonfinite) {
    kqp_absmax_cols(x, rows, width, amax, nonfinite);
}

void attn_k_encode_e2m1_avx2(const float *y, int64_t n, uint8_t *dst) {
    kqp_encode_e2m1(y, n, dst);
}

void attn_k_mx_scale_row_avx2(float *x, int64_t n, int32_t emax, uint8_t *e8) {
    kqp_mx_scale_row(x, n, emax, e8);
}
