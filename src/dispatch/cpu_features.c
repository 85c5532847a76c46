/*
 * cpu_features.c — CPUID/XGETBV detection on x86-64, getauxval(AT_HWCAP/AT_HWCAP2) on aarch64 Linux; every
 * feature reads as absent elsewhere.
 * The OS-support check matters: a CPU may report AVX-512 while the OS does not save ZMM state
 * (docs/CONTRIBUTING.md §7, unlike ggml's scorer).
 */
#define _DEFAULT_SOURCE /* syscall() in <unistd.h> under -std=c11 */
#include "dispatch/cpu_features.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned long long attn_xgetbv0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void attn_cpu_fill(attn_cpu_feature_set *f) {
    unsigned int a, b, c, d;
    memset(f, 0, sizeof *f);
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    int avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    if (osxsave) {
        unsigned long long xcr0 = attn_xgetbv0();
        f->os_ymm = avx && (xcr0 & 0x6) == 0x6;
        f->os_zmm = f->os_ymm && (xcr0 & 0xe0) == 0xe0;
    }
    if (__get_cpuid_max(0, 0) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512fp16 = (d >> 23) & 1;
        f->avx512vbmi = (c >> 1) & 1;
        f->avx512vnni = (c >> 11) & 1;
        const int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
        /* XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state */
        f->amx = amx_bf16 && amx_tile && osxsave && (attn_xgetbv0() & 0x60000ull) == 0x60000ull;
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512bf16 = (a >> 5) & 1;
    }
    if (!f->os_ymm) f->avx2 = f->fma = f->f16c = 0;
    if (!f->os_zmm)
        f->avx512f = f->avx512bw = f->avx512vl = f->avx512dq = f->avx512bf16 = f->avx512fp16 = f->avx512vnni =
            f->avx512vbmi = f->amx = 0;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

/* Bit values of the Linux arm64 ABI (arch/arm64/include/uapi/asm/hwcap.h), spelled here so that old libc
 * headers without them still build. The kernel sets a bit only for a feature it supports and enables, so
 * HWCAP is the OS-support check on this architecture (no XGETBV equivalent is needed). */
#define ATTN_HWCAP_FP (1ul << 0)
#define ATTN_HWCAP_ASIMD (1ul << 1)
#define ATTN_HWCAP_FPHP (1ul << 9)
#define ATTN_HWCAP_ASIMDHP (1ul << 10)
#define ATTN_HWCAP_SVE (1ul << 22)
#define ATTN_HWCAP2_I8MM (1ul << 13)
#define ATTN_HWCAP2_BF16 (1ul << 14)

static void attn_cpu_fill(attn_cpu_feature_set *f) {
    memset(f, 0, sizeof *f);
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f->neon = (hw & ATTN_HWCAP_FP) && (hw & ATTN_HWCAP_ASIMD);
    f->fp16 = f->neon && (hw & ATTN_HWCAP_FPHP) && (hw & ATTN_HWCAP_ASIMDHP);
    f->sve = (hw & ATTN_HWCAP_SVE) != 0;
    f->bf16 = f->neon && (hw2 & ATTN_HWCAP2_BF16);
    f->i8mm = f->neon && (hw2 & ATTN_HWCAP2_I8MM);
}
#elif defined(__aarch64__)
/* aarch64 without getauxval (e.g. macOS): FP and Advanced SIMD are mandatory in AArch64 and always enabled
 * for user code; the optional extensions read as absent (nothing selects on them yet). */
static void attn_cpu_fill(attn_cpu_feature_set *f) {
    memset(f, 0, sizeof *f);
    f->neon = 1;
}
#else
static void attn_cpu_fill(attn_cpu_feature_set *f) { memset(f, 0, sizeof *f); }
#endif

static attn_cpu_feature_set attn_cpu_cached;
static int attn_cpu_done;

const attn_cpu_feature_set *attn_cpu_detect(void) {
    /* Idempotent: concurrent first calls write identical values. */
    if (!__atomic_load_n(&attn_cpu_done, __ATOMIC_ACQUIRE)) {
        attn_cpu_feature_set f;
        attn_cpu_fill(&f);
        attn_cpu_cached = f;
        __atomic_store_n(&attn_cpu_done, 1, __ATOMIC_RELEASE);
    }
    return &attn_cpu_cached;
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ATTN_ARCH_GET_XCOMP_PERM 0x1022 /* Linux uapi asm/prctl.h, spelled here for old headers */
#define ATTN_ARCH_REQ_XCOMP_PERM 0x1023
#define ATTN_XFEATURE_XTILEDATA 18

static int attn_amx_perm_state; /* 0: not asked yet, 1: granted, 2: refused (atomic) */

int attn_amx_permitted(void) {
    int st = __atomic_load_n(&attn_amx_perm_state, __ATOMIC_ACQUIRE);
    if (st == 0) {
        int ok = 0;
        if (attn_cpu_detect()->amx) {
            /* a repeated request is harmless: the kernel keeps the permission for the whole process */
            unsigned long long mask = 0;
            ok = syscall(SYS_arch_prctl, ATTN_ARCH_REQ_XCOMP_PERM, ATTN_XFEATURE_XTILEDATA) == 0 &&
                 syscall(SYS_arch_prctl, ATTN_ARCH_GET_XCOMP_PERM, &mask) == 0 &&
                 ((mask >> ATTN_XFEATURE_XTILEDATA) & 1);
        }
        st = ok ? 1 : 2;
        __atomic_store_n(&attn_amx_perm_state, st, __ATOMIC_RELEASE);
    }
    return st == 1;
}
#else
int attn_amx_permitted(void) { return 0; }
#endif
