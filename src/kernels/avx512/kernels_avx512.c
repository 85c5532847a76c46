/*
 * kernels_avx512.c — the AVX-512 (F/BW/VL/DQ) table: the generic bodies compiled for 512-bit vectors.
 * Hand-written kernels (cpu-kernel-design.md §2–3) replace entries here as they land (issue 6).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "kernels_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include "kernels/generic/tile_kernels.h"

ATTN_DEFINE_KERNEL_TABLE(avx512)
