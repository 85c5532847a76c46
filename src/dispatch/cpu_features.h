/*
 * cpu_features.h — run-time CPU feature detection (CPUID plus XGETBV for OS-enabled vector state on x86-64;
 * getauxval(AT_HWCAP / AT_HWCAP2) on aarch64 Linux, where the kernel reports only what it enables).
 */
#ifndef ATTN_DISPATCH_CPU_FEATURES_H
#define ATTN_DISPATCH_CPU_FEATURES_H

typedef struct attn_cpu_feature_set {
    int avx2, fma, f16c;                       /* usable AVX2 table: all three and OS YMM state     */
    int avx512f, avx512bw, avx512vl, avx512dq; /* usable AVX-512 table: all four and OS ZMM state   */
    int avx512bf16, avx512fp16;                /* avx512bf16: the opt-in avx512bf16 table (with avx512) */
    int avx512vnni;                            /* VPDPBUSD: MXFP4 Q·Kᵀ of the avx512bf16 quant table   */
    int avx512vbmi;                            /* VPERMB / VPERMI2B: the avx512 table's vbmi variant   */
    int amx;                                   /* AMX-TILE and AMX-BF16 with XCR0 tile state (17, 18)  */
    int os_ymm, os_zmm;                        /* XGETBV: XCR0 enables YMM / ZMM+opmask state        */
    int neon, fp16, bf16, i8mm, sve;           /* aarch64 HWCAP: ASIMD (+FP), FPHP+ASIMDHP, HWCAP2 BF16,
                                                * HWCAP2 I8MM, SVE (usable neon table: neon)         */
} attn_cpu_feature_set;

/* Detected once (thread-safe, idempotent). */
const attn_cpu_feature_set *attn_cpu_detect(void);

/* 1 if this process may use the AMX tile data: Linux grants it on request (arch_prctl ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA), asked once; 0 where the CPU lacks AMX, the kernel refuses or this is not x86-64 Linux. */
int attn_amx_permitted(void);

#endif
