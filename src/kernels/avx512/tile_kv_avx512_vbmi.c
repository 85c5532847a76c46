/*
 * tile_kv_avx512_vbmi.c — the decode entries of tile_kv_avx512.c compiled again with AVX512_VBMI (the avx512
 * table's vbmi variant, attn_kernels_avx512_vbmi; dispatch hands it out where CPUID reports AVX512_VBMI): fp8
 * K/V codes (E4M3 and E5M2) are widened through VPERMI2B byte tables to bfloat16 (one permute per 64 codes for each
 * byte of the result), about half the vector micro-ops of the word tables and vcvtph2ps. Every value, and so every
 * output bit, is the avx512 entries' (tests/kernels run both; a NaN output's sign aside, docs/KERNELS.md §8).
 */
#if !defined(__AVX512VBMI__)
#error "tile_kv_avx512_vbmi.c must be compiled with -mavx512vbmi (and the avx512 flags)"
#endif
#define K512_VBMI 1
#include "tile_kv_avx512.c"
