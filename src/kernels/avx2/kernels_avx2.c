/*
 * kernels_avx2.c — the AVX2+FMA+F16C table: the generic bodies compiled with -mavx2 -mfma -mf16c
 * (256-bit vectors). Hand-written kernels replace entries here as they land (issue 6).
 */
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif
#include "kernels/generic/tile_kernels.h"

ATTN_DEFINE_KERNEL_TABLE(avx2)
