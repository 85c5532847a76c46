/*
 * dispatch.h — choosing a kernel table: by name, by CPU, or by the ATTN_ISA environment variable.
 */
#ifndef ATTN_DISPATCH_H
#define ATTN_DISPATCH_H

#include "kernels/kernels.h"

/* The table with this name if compiled in and runnable here, else NULL. */
const struct attn_kernels *attn_dispatch_by_name(const char *name);
/* The default table: ATTN_ISA if set (NULL if it names an unusable ISA), else the fastest runnable. */
const struct attn_kernels *attn_dispatch_default(void);
/* Every variant of the table `name` runnable here, the one attn_dispatch_by_name gives last: writes 0, 1 or 2
 * tables to out[0..2) and returns the count (0: not usable). Two for neon (plain, and "bf16" where HWCAP2 reports
 * BF16), avx512, avx512bf16 and amx (plain, and "vbmi" where CPUID reports AVX512_VBMI). *why_not: NULL, or a static
 * sentence saying why a compiled-in variant is not among them (tests print it). For the tests, which compare each
 * variant with generic and each other. */
int attn_dispatch_variants(const char *name, const struct attn_kernels **out, const char **why_not);
/* NULL for a table as its ISA entry names it, or the name of the CPU-feature variant it is (same name, same
 * bits, other instructions): "bf16" for neon's FEAT_BF16 variant (src/kernels/neon/cvt_neon_bf16.c), "vbmi" for
 * the AVX512_VBMI variants of avx512, avx512bf16 and amx (src/kernels/avx512/tile_kv_avx512_vbmi.c). */
const char *attn_dispatch_variant_name(const struct attn_kernels *table);

/* The quantized-attention kernels (kernels.h, struct attn_quant_kernels) for a context on `float_table`, chosen by
 * CPU features: "avx512bf16" where the CPU runs AVX512-BF16 (its VPDPBUSD MXFP4 Q·Kᵀ only where it also runs
 * AVX512-VNNI), unless the context runs the avx2 or generic table
 * (then the avx2 quant table, so that a test can pick it on any AVX2 machine); else "avx2" (f32 staging with the
 * context's float kernels) where the CPU runs AVX2+FMA+F16C; else NULL (attn_forward_quant then quantizes by
 * fake quantization into float32 copies; also when the environment sets ATTN_QUANT_KERNELS=fake, which the tests
 * and bench use to run that path on any machine). NULL float_table: the choice of a default context. */
const struct attn_quant_kernels *attn_dispatch_quant(const struct attn_kernels *float_table);

#endif
