/*
 * test_kernel_bits.c — the bits of every kernel table, pinned across machines. Every kernel of
 * every usable table runs on fixed inputs (xorshift, no harness RNG so the inputs cannot drift) — qk_tile,
 * softmax_tile (fresh and running states), pv_tile, qk_tile_kv and pv_rows_kv on bf16 rows, 6 row counts ×
 * 3 head sizes — and an FNV-1a hash of the meaningful output lanes is compared with a pinned value:
 *   generic                 → ATTN_BITS_GENERIC (separate multiply and add: the same on x86-64 and aarch64);
 *   avx2, avx512, neon, …   → ATTN_BITS_FMA (one fused multiply-add per term, the exp2 Horner with FMAs).
 * So the NEON table, run under qemu on the aarch64 cross build, is checked bit for bit against the AVX2 and
 * AVX-512 tables measured on x86 (tests/kernels/test_kernels.c checks each table against generic within a
 * tolerance, and lane invariance within a table; this test checks the tables against each other).
 * Variants (attn_dispatch_variants: neon's bf16 variant where HWCAP2 reports BF16) are pinned to the same hash,
 * their float32 → bf16 conversion is checked bit for bit on edge values, and "neon" must be the bf16 variant
 * exactly on a CPU reporting BF16 (qemu -cpu max: it runs; -cpu cortex-a57: it does not, and says why).
 * A deliberate change of a table's operation sequence changes its hash: update the pinned value in the same
 * commit and say so (SEMANTICS.md §7 allows tables to differ; today they agree, and this keeps it visible).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "kernels/kernels.h"

#define ATTN_BITS_GENERIC 0xd3a86c4787f75c0bull
#define ATTN_BITS_FMA 0x71d4e46a6a5fbeecull
#define QB ATTN_QB
#define NK 64

typedef struct bits_ctx {
    uint64_t rng, hash;
} bits_ctx;

static float bits_rnd(bits_ctx *c) {
    c->rng ^= c->rng << 13, c->rng ^= c->rng >> 7, c->rng ^= c->rng << 17;
    return (float)((double)(c->rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void bits_mix(bits_ctx *c, const void *p, size_t n) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) c->hash = (c->hash ^ b[i]) * 1099511628211ull;
}

static float q_t[ATTN_HEAD_SIZE_MAX * QB], s[NK * QB], o[ATTN_HEAD_SIZE_MAX * QB], m[QB], l[QB];
static float rows[NK][ATTN_HEAD_SIZE_MAX], od[QB * ATTN_HEAD_SIZE_MAX];
static uint16_t rows16[NK][ATTN_HEAD_SIZE_MAX];

/* The hash of one table's outputs over the fixed cases. */
static uint64_t bits_of(const struct attn_kernels *kt) {
    static const int nrs[] = {1, 3, 4, 7, 16, 32}, Ds[] = {64, 100, 128};
    bits_ctx c = {0, 1469598103934665603ull};
    for (int di = 0; di < 3; di++)
        for (int ri = 0; ri < 6; ri++) {
            c.rng = 88172645463325252ull + (uint64_t)(di * 10 + ri);
            const int D = Ds[di], nr = nrs[ri];
            for (int i = 0; i < ATTN_HEAD_SIZE_MAX * QB; i++) q_t[i] = bits_rnd(&c), o[i] = bits_rnd(&c);
            const float *rp[NK];
            const void *rv[NK];
            for (int k = 0; k < NK; k++) {
                for (int d = 0; d < ATTN_HEAD_SIZE_MAX; d++) {
                    rows[k][d] = bits_rnd(&c);
                    rows16[k][d] = attn_f32_to_bf16(rows[k][d]);
                }
                rp[k] = rows[k], rv[k] = rows16[k];
            }
            /* a third of the lanes carry a running state (m = 2, l = 1.5), the rest are fresh */
            for (int r = 0; r < QB; r++) m[r] = r % 3 ? -INFINITY : 2.0f, l[r] = r % 3 ? 0.0f : 1.5f;
            memset(s, 0, sizeof s);
            kt->qk_tile(q_t, nr, D, rp, NK, s);
            for (int i = 0; i < NK * QB; i++) s[i] *= 4.0f; /* wider logits: the rescale and exp2 tails */
            for (int k = 0; k < NK; k++) bits_mix(&c, &s[k * QB], 4 * (size_t)nr);
            kt->softmax_tile(s, NK, nr, m, l, o, D);
            for (int k = 0; k < NK; k++) bits_mix(&c, &s[k * QB], 4 * (size_t)nr);
            bits_mix(&c, m, 4 * (size_t)nr), bits_mix(&c, l, 4 * (size_t)nr);
            kt->pv_tile(s, NK, nr, rp, D, o);
            for (int d = 0; d < D; d++) bits_mix(&c, &o[d * QB], 4 * (size_t)nr);
            memset(s, 0, sizeof s);
            kt->qk_tile_kv(q_t, nr, D, rv, ATTN_DTYPE_BF16, NK, s);
            for (int k = 0; k < NK; k++) bits_mix(&c, &s[k * QB], 4 * (size_t)nr);
            for (int i = 0; i < NK * QB; i++) s[i] = fabsf(s[i]) * 0.01f;
            memset(od, 0, sizeof od);
            kt->pv_rows_kv(s, NK, nr, rv, ATTN_DTYPE_BF16, D, od);
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < D; d++) bits_mix(&c, &od[r * D + attn_rows_kv_col(d, D, ATTN_DTYPE_BF16)], 4);
        }
    return c.hash;
}

/* Every usable table and each of its variants (neon + its bf16 variant where HWCAP2 reports BF16). */
static int all_tables(const struct attn_kernels **out) {
    int n = 0;
    for (int32_t i = 0; i < attn_isa_count(); i++) {
        const char *why_not = NULL;
        n += attn_dispatch_variants(attn_isa_name(i), out + n, &why_not);
        if (why_not) fprintf(stderr, "kernel bits: table %s: %s\n", attn_isa_name(i), why_not);
    }
    return n;
}
#define VARIANT(kt) (attn_dispatch_variant_name(kt) ? "+" : ""), \
                    (attn_dispatch_variant_name(kt) ? attn_dispatch_variant_name(kt) : "")

static void test_pinned_bits(void **state) {
    (void)state;
    int fails = 0;
    const struct attn_kernels *tables[8];
    const int nt = all_tables(tables);
    for (int ti = 0; ti < nt; ti++) {
        const struct attn_kernels *kt = tables[ti];
        const uint64_t want = strcmp(kt->name, "generic") == 0 ? ATTN_BITS_GENERIC : ATTN_BITS_FMA;
        const uint64_t got = bits_of(kt);
        fprintf(stderr, "kernel bits: table %s%s%s hash %016llx (pinned %016llx)\n", kt->name, VARIANT(kt),
                (unsigned long long)got, (unsigned long long)want);
        if (got != want) {
            fprintf(stderr, "REPRO test_kernel_bits: table %s%s%s gives different bits from the pinned %s chain\n",
                    kt->name, VARIANT(kt), want == ATTN_BITS_GENERIC ? "generic" : "FMA");
            fails++;
        }
    }
    assert_true(nt >= 1);
    assert_int_equal(fails, 0);
}

/* float32 → bf16 of every table (variants included) bit for bit the scalar attn_f32_to_bf16, NaN payloads
 * included: every 16-bit top half (all signs, exponents, mantissas: ±0, denormals, ±max, ±inf, signalling and
 * quiet NaNs) × low halves at and around the rounding tie (0x8000 ± 1), 0, 1, 0x7fff, 0xffff, 0x4000, 0xc000;
 * converted in one call (vector steps) and in runs of 1..15 elements at every offset (tails). The neon bf16
 * variant does it with BFCVTN/BFCVTN2/BFCVT, whose rounding, denormal and NaN handling come from FPCR. */
enum { CVT_LOWS = 8, CVT_N = 65536 * CVT_LOWS };
static const uint16_t cvt_lows[CVT_LOWS] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
static float cvt_src[CVT_N];
static uint16_t cvt_got[CVT_N];

/* The number of elements whose bf16 differs from the scalar conversion (the first few printed). */
static int cvt_mismatches(const struct attn_kernels *kt, int quiet) {
    int bad = 0;
    for (int pass = 0; pass < 2; pass++) {
        memset(cvt_got, 0xa5, sizeof cvt_got);
        if (pass == 0)
            kt->cvt_from_f32(cvt_src, ATTN_DTYPE_BF16, cvt_got, CVT_N);
        else
            for (int64_t i = 0, len; i < CVT_N; i += len) {
                len = 1 + (i / 7) % 15;
                if (i + len > CVT_N) len = CVT_N - i;
                kt->cvt_from_f32(cvt_src + i, ATTN_DTYPE_BF16, cvt_got + i, len);
            }
        for (int i = 0; i < CVT_N; i++) {
            const uint16_t want = attn_f32_to_bf16(cvt_src[i]);
            if (cvt_got[i] != want) {
                if (bad < 5 && !quiet) {
                    uint32_t u;
                    memcpy(&u, &cvt_src[i], 4);
                    fprintf(stderr, "REPRO test_kernel_bits cvt_from_f32 bf16: table %s%s%s pass %d f32 0x%08x -> 0x%04x, "
                            "scalar 0x%04x\n", kt->name, VARIANT(kt), pass, (unsigned)u, (unsigned)cvt_got[i],
                            (unsigned)want);
                }
                bad++;
            }
        }
    }
    return bad;
}

#if defined(__aarch64__)
static uint64_t fpcr_get(void) {
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return v;
}
static void fpcr_set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v)); }
#endif

static void test_bf16_conversion_bits(void **state) {
    (void)state;
    for (int i = 0; i < CVT_N; i++) {
        const uint32_t u = (uint32_t)(i / CVT_LOWS) << 16 | cvt_lows[i % CVT_LOWS];
        memcpy(&cvt_src[i], &u, 4);
    }
    const struct attn_kernels *tables[8];
    const int nt = all_tables(tables);
    int fails = 0;
    for (int ti = 0; ti < nt; ti++) {
        const int bad = cvt_mismatches(tables[ti], 0);
        fprintf(stderr, "kernel bits: table %s%s%s cvt_from_f32 bf16: %d of %d edge values differ from the scalar "
                "conversion\n", tables[ti]->name, VARIANT(tables[ti]), bad, 2 * CVT_N);
        fails += bad;
#if defined(__aarch64__)
        /* The check sees FPCR-dependent conversions: with FZ (flush-to-zero) set, BFCVTN flushes the denormal
         * inputs and the count must go up (a control that the variant's instructions really ran here). */
        if (attn_dispatch_variant_name(tables[ti])) {
            const uint64_t saved = fpcr_get();
            fpcr_set(saved | (1ull << 24));
            const int bad_fz = cvt_mismatches(tables[ti], 1);
            fpcr_set(saved);
            fprintf(stderr, "kernel bits: table %s+bf16 with FPCR.FZ = 1 (control): %d values differ\n",
                    tables[ti]->name, bad_fz);
            assert_true(bad_fz > 0);
        }
#endif
    }
    assert_int_equal(fails, 0);
}

/* "neon" is the bf16 variant exactly where the CPU reports BF16 (HWCAP2), and says why not elsewhere. */
static int has_feature(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

static void test_variant_dispatch(void **state) {
    (void)state;
    const struct attn_kernels *v[2];
    const char *why_not = NULL;
    const int nv = attn_dispatch_variants("neon", v, &why_not);
    if (nv == 0) {
        fprintf(stderr, "kernel bits: no neon table here (not an aarch64 build): nothing to select\n");
        return;
    }
    const int bf16 = has_feature(attn_cpu_features(), "bf16");
    const struct attn_kernels *chosen = attn_dispatch_by_name("neon");
    fprintf(stderr, "kernel bits: cpu features \"%s\"; ATTN_ISA=neon gives neon%s%s%s%s\n", attn_cpu_features(),
            VARIANT(chosen), why_not ? ": " : "", why_not ? why_not : "");
    assert_ptr_equal(chosen, v[nv - 1]);
    if (bf16 && nv == 2) {
        assert_non_null(attn_dispatch_variant_name(chosen));
        assert_string_equal(attn_dispatch_variant_name(chosen), "bf16");
        assert_null(attn_dispatch_variant_name(v[0]));
    } else {
        assert_int_equal(nv, 1);
        assert_null(attn_dispatch_variant_name(chosen));
        assert_non_null(why_not);
        if (bf16) assert_non_null(strstr(why_not, "not compiled")); /* BF16 CPU: only a compiler without +bf16 */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pinned_bits), cmocka_unit_test(test_bf16_conversion_bits),
                                       cmocka_unit_test(test_variant_dispatch)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
