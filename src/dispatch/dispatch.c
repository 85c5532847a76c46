/*
 * dispatch.c — the registry of compiled kernel tables and their run-time predicates, plus the public
 * ISA/feature queries. Adding an ISA touches the table list below (docs/ADDING_AN_ISA.md).
 */
#include "dispatch/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/cpu_features.h"

typedef struct attn_isa_entry {
    const char *name;
    const struct attn_kernels *table;
    int (*usable)(const attn_cpu_feature_set *f);
} attn_isa_entry;

static int attn_usable_always(const attn_cpu_feature_set *f) {
    (void)f;
    return 1;
}
#if defined(ATTN_HAVE_AVX2)
static int attn_usable_avx2(const attn_cpu_feature_set *f) { return f->avx2 && f->fma && f->f16c; }
#endif
#if defined(ATTN_HAVE_AVX512)
static int attn_usable_avx512(const attn_cpu_feature_set *f) {
    return f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->f16c && f->fma;
}
#endif
#if defined(ATTN_HAVE_AVX512BF16)
static int attn_usable_avx512bf16(const attn_cpu_feature_set *f) { return attn_usable_avx512(f) && f->avx512bf16; }
#endif
#if defined(ATTN_HAVE_AMX)
/* AMX-TILE + AMX-BF16 with the OS tile state (cpu_features.c) and the Linux tile-data permission, on top of the
 * avx512bf16 table whose entries it uses. */
static int attn_usable_amx(const attn_cpu_feature_set *f) {
    return attn_usable_avx512bf16(f) && f->amx && attn_amx_permitted();
}
#endif
#if defined(ATTN_HAVE_NEON)
/* Advanced SIMD and FP as reported by HWCAP (the kernel enables them; always present on Linux arm64). */
static int attn_usable_neon(const attn_cpu_feature_set *f) { return f->neon; }
#endif

/* A CPU-feature variant of a table: the same name and bits, other instructions. neon's BF16 one (BFCVTN
 * conversions, src/kernels/neon/cvt_neon_bf16.c) where HWCAP2 reports BF16; the VBMI ones of avx512, avx512bf16 and
 * amx (byte-table fp8 widening in decode, src/kernels/avx512/tile_kv_avx512_vbmi.c) where CPUID reports
 * AVX512_VBMI. The NULL entry ends the list. */
typedef struct attn_variant_entry {
    const struct attn_kernels *table, *variant;
    const char *name;                             /* attn_dispatch_variant_name */
    int (*usable)(const attn_cpu_feature_set *f); /* the variant's feature       */
    const char *why_not;                          /* the tests' line where the CPU lacks it */
} attn_variant_entry;

#if defined(ATTN_HAVE_NEON_BF16)
static int attn_has_bf16(const attn_cpu_feature_set *f) {
    return f->bf16;
}
#define ATTN_NO_BF16 "bf16 variant not run: HWCAP2_BF16 is not reported by this CPU"
#endif
#if defined(ATTN_HAVE_AVX512_VBMI)
static int attn_has_vbmi(const attn_cpu_feature_set *f) {
    return f->avx512vbmi;
}
#define ATTN_NO_VBMI "vbmi variant not run: CPUID does not report AVX512_VBMI"
#endif

static const attn_variant_entry attn_variants[] = {
#if defined(ATTN_HAVE_NEON_BF16)
    {&attn_kernels_neon, &attn_kernels_neon_bf16, "bf16", attn_has_bf16, ATTN_NO_BF16},
#endif
#if defined(ATTN_HAVE_AVX512_VBMI)
    {&attn_kernels_avx512, &attn_kernels_avx512_vbmi, "vbmi", attn_has_vbmi, ATTN_NO_VBMI},
#endif
#if defined(ATTN_HAVE_AVX512_VBMI) && defined(ATTN_HAVE_AVX512BF16)
    {&attn_kernels_avx512bf16, &attn_kernels_avx512bf16_vbmi, "vbmi", attn_has_vbmi, ATTN_NO_VBMI},
#endif
#if defined(ATTN_HAVE_AVX512_VBMI) && defined(ATTN_HAVE_AMX)
    {&attn_kernels_amx, &attn_kernels_amx_vbmi, "vbmi", attn_has_vbmi, ATTN_NO_VBMI},
#endif
    {NULL, NULL, NULL, NULL, NULL},
};

/* The table an entry hands out on this CPU: its variant where the CPU has the variant's feature, else the entry's
 * table. */
static const struct attn_kernels *attn_isa_table(const struct attn_kernels *table, const attn_cpu_feature_set *f) {
    for (const attn_variant_entry *v = attn_variants; v->table; v++)
        if (v->table == table && v->usable(f))
            return v->variant;
    return table;
}

static const attn_isa_entry attn_isas[] = {
    {"generic", &attn_kernels_generic, attn_usable_always},
#if defined(ATTN_HAVE_AVX2)
    {"avx2", &attn_kernels_avx2, attn_usable_avx2},
#endif
#if defined(ATTN_HAVE_AVX512)
    {"avx512", &attn_kernels_avx512, attn_usable_avx512},
#endif
#if defined(ATTN_HAVE_NEON)
    {"neon", &attn_kernels_neon, attn_usable_neon},
#endif
};
#define ATTN_NUM_ISAS ((int32_t)(sizeof attn_isas / sizeof attn_isas[0]))

/* Opt-in tables: reached by name only (never by attn_dispatch_default's scan), not on the pinned chains (their
 * tolerance is stated in docs/SEMANTICS.md). The NULL entry ends the list (C has no empty arrays). */
static const attn_isa_entry attn_opt_in_isas[] = {
#if defined(ATTN_HAVE_AVX512BF16)
    {"avx512bf16", &attn_kernels_avx512bf16, attn_usable_avx512bf16},
#endif
#if defined(ATTN_HAVE_AMX)
    {"amx", &attn_kernels_amx, attn_usable_amx},
#endif
    {NULL, NULL, NULL},
};
#define ATTN_NUM_OPT_IN_ISAS ((int32_t)(sizeof attn_opt_in_isas / sizeof attn_opt_in_isas[0]) - 1)

const char *attn_isa_opt_in_name(int32_t index) {
    if (index < 0 || index >= ATTN_NUM_OPT_IN_ISAS) return NULL;
    return attn_opt_in_isas[index].name;
}

int32_t attn_isa_count(void) { return ATTN_NUM_ISAS; }

const char *attn_isa_name(int32_t index) {
    if (index < 0 || index >= ATTN_NUM_ISAS) return NULL;
    return attn_isas[index].name;
}

int attn_isa_available(const char *isa) { return attn_dispatch_by_name(isa) != NULL; }

/* The entry named `name` in the default list, else in the opt-in list; NULL if neither has it. */
static const attn_isa_entry *attn_isa_entry_named(const char *name) {
    for (int32_t i = 0; i < ATTN_NUM_ISAS; i++)
        if (strcmp(attn_isas[i].name, name) == 0) return &attn_isas[i];
    for (int32_t i = 0; i < ATTN_NUM_OPT_IN_ISAS; i++)
        if (strcmp(attn_opt_in_isas[i].name, name) == 0) return &attn_opt_in_isas[i];
    return NULL;
}

const struct attn_kernels *attn_dispatch_by_name(const char *name) {
    const attn_isa_entry *e = name ? attn_isa_entry_named(name) : NULL;
    if (!e || !e->usable(attn_cpu_detect())) return NULL;
    return attn_isa_table(e->table, attn_cpu_detect());
}

const char *attn_dispatch_variant_name(const struct attn_kernels *table) {
    for (const attn_variant_entry *v = attn_variants; v->table; v++)
        if (v->variant == table)
            return v->name;
    return NULL;
}

int attn_dispatch_variants(const char *name, const struct attn_kernels **out, const char **why_not) {
    *why_not = NULL;
    const struct attn_kernels *t = attn_dispatch_by_name(name);
    if (!t) return 0;
    for (const attn_variant_entry *v = attn_variants; v->table; v++) {
        if (t == v->variant) {
            out[0] = v->table, out[1] = t;
            return 2;
        }
        if (t == v->table)
            *why_not = v->why_not; /* handed out plain: the CPU lacks the feature */
    }
#if defined(ATTN_HAVE_NEON) && !defined(ATTN_HAVE_NEON_BF16)
    if (t == &attn_kernels_neon) *why_not = "bf16 variant not compiled: the compiler does not take +bf16";
#endif
#if defined(ATTN_HAVE_AVX512) && !defined(ATTN_HAVE_AVX512_VBMI)
    if (t == &attn_kernels_avx512)
        *why_not = "vbmi variant not compiled: the compiler does not take -mavx512vbmi";
#endif
    out[0] = t;
    return 1;
}

const struct attn_kernels *attn_dispatch_default(void) {
    const char *env = getenv("ATTN_ISA");
    if (env && *env) return attn_dispatch_by_name(env);
    for (int32_t i = ATTN_NUM_ISAS - 1; i >= 0; i--)
        if (attn_isas[i].usable(attn_cpu_detect())) return attn_isa_table(attn_isas[i].table, attn_cpu_detect());
    return &attn_kernels_generic;
}

const char *attn_cpu_features(void) {
    static char buf[256];
    static int done;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        const attn_cpu_feature_set *f = attn_cpu_detect();
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
                 f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "", f->avx512bw ? "avx512bw " : "",
                 f->avx512vl ? "avx512vl " : "", f->avx512dq ? "avx512dq " : "", f->avx512bf16 ? "avx512bf16 " : "",
                 f->avx512vnni ? "avx512vnni " : "", f->avx512vbmi ? "avx512vbmi " : "",
                 f->avx512fp16 ? "avx512fp16 " : "", f->amx ? "amx " : "", f->neon ? "neon " : "",
                 f->fp16 ? "fp16 " : "", f->bf16 ? "bf16 " : "", f->i8mm ? "i8mm " : "", f->sve ? "sve " : "");
        size_t n = strlen(tmp);
        if (n > 0) tmp[n - 1] = '\0';
        memcpy(buf, tmp, sizeof buf);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    return buf;
}

const struct attn_quant_kernels *attn_dispatch_quant(const struct attn_kernels *float_table) {
    const attn_cpu_feature_set *f = attn_cpu_detect();
    const int float_is_avx2 = float_table && (strcmp(float_table->name, "avx2") == 0 ||
                                              strcmp(float_table->name, "generic") == 0);
    /* "fake": the fake-quantization path; "avx512bf16": that table where amx's would be chosen (tests, bench) */
    const char *env = getenv("ATTN_QUANT_KERNELS");
    if (env && strcmp(env, "fake") == 0) return NULL;
#if defined(ATTN_HAVE_AMX)
    /* attn_usable_amx asks Linux for the tile data once per process (signal frames grow by the tile state): last */
    if (!(env && strcmp(env, "avx512bf16") == 0) && !float_is_avx2 && attn_usable_amx(f))
        return &attn_quant_kernels_amx;
#endif
#if defined(ATTN_HAVE_AVX512BF16)
    if (!float_is_avx2 && attn_usable_avx512bf16(f))
        return f->avx512vnni ? &attn_quant_kernels_avx512bf16 : &attn_quant_kernels_avx512bf16_novnni;
#endif
#if defined(ATTN_HAVE_AVX2)
    if (attn_usable_avx2(f)) return &attn_quant_kernels_avx2;
#endif
    (void)f;
    (void)float_is_avx2;
    return NULL;
}
