/*
 * fuzz_diff.h — shared part of the differential fuzz targets (tests/fuzz/fuzz_diff_*.c, docs/ROBUSTNESS.md
 * "Differential and hidden-value fuzzing"): the input bytes decode a small VALID problem, the fast entry runs on
 * every usable kernel table (the default list attn_isa_name and the opt-in list attn_isa_opt_in_name, each on
 * its own context), and each result is compared with the double-precision oracle (attn_ref_*) under the
 * tolerance of its dtype and table. A mismatch prints the case (fzd_say lines, then the finding) and aborts, so
 * libFuzzer keeps the input and the replay ctest fails.
 *
 * Tolerances (docs/SEMANTICS.md §4, §6, §7):
 *   out  |got − want| <= atol·max|V| + rtol·|want| with th_tol_for(out dtype), atol widened by 2·Δs for logits
 *        of magnitude M: Δs = (head_size + 6)·2^-24·M is the float32 error a correct implementation may put on a
 *        logit (a float32 dot product of head_size terms, the scale, soft-cap and ALiBi roundings).
 *        Opt-in tables: atol, rtol >= 2e-2 (§7), atol widened by 2·2^-9·M for their bf16 rounding of q.
 *   LSE  |got − want| <= 2·ulp(want) + E_sum + E_logit, with E_sum = (keys + 8)·2^-23 (float32 exp and sum of
 *        the softmax denominator) and E_logit = Δs, or 0 when every logit is exact in float32 by construction
 *        (integer-valued q, k times powers of two, a power-of-two scale, no soft-cap or ALiBi: the dot products
 *        are exact in any order): then a correct float32 implementation is within the final roundings of the
 *        oracle. −inf and NaN must match exactly. Opt-in tables: also <= 2e-2·max(1, |want|), plus 2^-9·M when q
 *        is not bf16 (the table rounds q to bf16: 2^-9 of each product, §7).
 *        ATTN_FUZZ_LSE_EXACT=0 gives exact logits the general bound too (to fuzz past a known LSE defect).
 * Environment: ATTN_FUZZ_VERBOSE=1 prints every finding even where the seed generator skips them.
 */
#ifndef ATTN_FUZZ_DIFF_H
#define ATTN_FUZZ_DIFF_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "harness.h"

/* ---- input reader: bytes in order, 0 past the end ---- */
typedef struct fzd_rd {
    const uint8_t *p;
    size_t n, i;
} fzd_rd;
static uint8_t fzd_u8(fzd_rd *r) {
    return r->i < r->n ? r->p[r->i++] : 0;
}
static uint64_t fzd_seed(fzd_rd *r) {
    uint64_t s = 0;
    for (int i = 0; i < 4; i++)
        s = s << 8 | fzd_u8(r);
    return s;
}

/* ---- the case description (printed with a finding) ---- */
static char fzd_desc[4096];
static size_t fzd_desc_len;
static const char *fzd_target = "diff";
/* Kind of the last input that ran a case (0 = none; the replay driver's seed generator keeps a few of each). */
static int fzd_kind;
static void fzd_begin(const char *target) {
    fzd_target = target, fzd_desc_len = 0, fzd_desc[0] = '\0', fzd_kind = 0;
}
static void fzd_say(const char *fmt, ...) {
    if (fzd_desc_len >= sizeof fzd_desc - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(fzd_desc + fzd_desc_len, sizeof fzd_desc - fzd_desc_len, fmt, ap);
    va_end(ap);
    if (n > 0)
        fzd_desc_len += (size_t)n < sizeof fzd_desc - fzd_desc_len ? (size_t)n : sizeof fzd_desc - fzd_desc_len - 1;
}
/* The replay driver's seed generator sets this: a finding then returns there (the input is not kept as a seed)
 * instead of aborting. */
static jmp_buf *fzd_on_finding;
static void fzd_fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!fzd_on_finding || getenv("ATTN_FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz_%s: FINDING\n  case: %s\n  %s\n", fzd_target, fzd_desc, msg), fflush(stderr);
    if (fzd_on_finding)
        longjmp(*fzd_on_finding, 1);
    abort();
}

/* ---- every usable kernel table, one context each (created once per process; one thread) ---- */
typedef struct fzd_table {
    const char *name;
    attn_ctx *ctx;
    int opt_in;
} fzd_table;
static fzd_table fzd_tables[16];
static int fzd_ntables = -1;
static void fzd_add_table(const char *name, int opt_in) {
    attn_ctx *c = NULL;
    if (fzd_ntables >= 16 || !attn_isa_available(name) || attn_ctx_create(&c) != ATTN_STATUS_OK)
        return;
    if (attn_ctx_set_isa(c, name) != ATTN_STATUS_OK || attn_ctx_set_num_threads(c, 1) != ATTN_STATUS_OK) {
        attn_ctx_destroy(c);
        return;
    }
    fzd_tables[fzd_ntables].name = name, fzd_tables[fzd_ntables].ctx = c, fzd_tables[fzd_ntables].opt_in = opt_in;
    fzd_ntables++;
}
static void fzd_init_tables(void) {
    if (fzd_ntables >= 0)
        return;
    fzd_ntables = 0;
    for (int32_t i = 0; i < attn_isa_count(); i++)
        fzd_add_table(attn_isa_name(i), 0);
    for (int32_t i = 0; attn_isa_opt_in_name(i) != NULL; i++)
        fzd_add_table(attn_isa_opt_in_name(i), 1);
    attn_clear_error();
    if (fzd_ntables == 0) {
        fprintf(stderr, "fuzz_diff: no usable kernel table\n");
        abort();
    }
}

/* ---- values ---- */
static const attn_dtype fzd_float_dtypes[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16};

/* How q and k are filled (one byte, fzd_value_mode): uniform [-1, 1)·amp (amp 1, 2, 4, 10^1..10^4: large
 * non-exact logits), or integers in [-A, A] times 2^e (A in 3..255, e in -2..5: exact logits up to ~1e6). */
typedef struct fzd_values {
    int integer;   /* 1: integer·2^e values                      */
    double amp;    /* uniform mode: amplitude                     */
    int32_t range; /* integer mode: |a| <= range                  */
    int32_t qexp, kexp;
} fzd_values;
static fzd_values fzd_value_mode(fzd_rd *r) {
    static const double amps[8] = {1, 1, 2, 4, 10, 100, 1000, 10000};
    static const int32_t ranges[4] = {3, 15, 63, 255};
    const uint8_t b = fzd_u8(r), e = fzd_u8(r);
    fzd_values m;
    memset(&m, 0, sizeof m);
    m.integer = b & 1;
    m.amp = amps[(b >> 1) & 7];
    m.range = ranges[(b >> 4) & 3];
    m.qexp = (int32_t)(e & 7) - 2, m.kexp = (int32_t)((e >> 3) & 7) - 2;
    return m;
}
/* n values into buf (dtype dt); `exp` is the integer mode's power of two. Returns max |stored value|. */
static double fzd_fill(th_rng *g, const fzd_values *m, int32_t exp, void *buf, attn_dtype dt, int64_t n) {
    double mx = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float x = m->integer ? (float)ldexp((double)th_rng_int(g, -m->range, m->range), exp)
                                   : (float)(th_rng_range(g, -1.0, 1.0) * m->amp);
        th_set(buf, dt, (size_t)i, x);
        const double s = fabs((double)th_get(buf, dt, (size_t)i));
        if (s > mx)
            mx = s;
    }
    return mx;
}
/* Uniform [-a, a) values (V rows, outputs of the merge). */
static double fzd_fill_uniform(th_rng *g, double a, void *buf, attn_dtype dt, int64_t n) {
    fzd_values m;
    memset(&m, 0, sizeof m);
    m.amp = a;
    return fzd_fill(g, &m, 0, buf, dt, n);
}
static void *fzd_alloc(attn_dtype dt, int64_t n) {
    const size_t es = attn_dtype_size(dt) ? attn_dtype_size(dt) : 1;
    void *p = calloc((size_t)(n > 0 ? n : 1), es);
    if (!p)
        abort();
    return p;
}
/* A buffer of n elements of dtype dt filled with the byte pattern `b` (0xFF: NaN for float dtypes). */
static void *fzd_alloc_pattern(attn_dtype dt, int64_t n, uint8_t b) {
    void *p = fzd_alloc(dt, n);
    memset(p, b, (size_t)(n > 0 ? n : 1) * (attn_dtype_size(dt) ? attn_dtype_size(dt) : 1));
    return p;
}
static int fzd_is_pow2(double x) {
    int e;
    return x > 0.0 && isfinite(x) && frexp(x, &e) == 0.5;
}
static double fzd_ulp(double x) {
    const float f = fabsf((float)x);
    return (double)nextafterf(f, INFINITY) - (double)f;
}

/* ---- attention options ---- */
/* Options of the dense-style entries (piecewise: no causal; quant: no causal/window): softmax_scale (default,
 * powers of two, 0.3), causal (allow_causal), window, soft-cap, ALiBi, sinks. */
typedef struct fzd_opts {
    attn_params p;
    float alibi[8], sinks[8];
    float scale; /* the effective softmax_scale */
} fzd_opts;
static void fzd_decode_opts(fzd_rd *r, fzd_opts *o, int64_t H, int64_t D, int allow_causal, int allow_window) {
    static const float scales[8] = {0.0f, 0.0f, 1.0f, 0.5f, 0.25f, 0.125f, 0.3f, 2.0f};
    static const int32_t win[8] = {-1, -1, 0, 1, 2, 3, 5, 8};
    static const float caps[4] = {0.0f, 0.0f, 5.0f, 30.0f};
    static const float slopes[4] = {0.0f, 0.5f, 0.0625f, 0.25f};
    static const float sinkv[8] = {0.0f, 1.0f, -2.0f, 3.5f, -30.0f, 20.0f, 0.5f, -1.0f};
    attn_params_init(&o->p);
    const uint8_t b = fzd_u8(r), w = fzd_u8(r), x = fzd_u8(r);
    o->p.softmax_scale = scales[b & 7];
    if (allow_causal)
        o->p.causal = (int32_t)((b >> 3) % 3);
    if (allow_window && (w & 0x80))
        o->p.window_left = win[w & 7], o->p.window_right = win[(w >> 3) & 7];
    o->p.softcap = caps[x & 3];
    if (x & 4) {
        for (int64_t h = 0; h < H && h < 8; h++)
            o->alibi[h] = slopes[(x >> 4) & 3] * (float)(h + 1);
        o->p.alibi_slopes = o->alibi;
    }
    if (x & 8) {
        for (int64_t h = 0; h < H && h < 8; h++)
            o->sinks[h] = sinkv[((x >> 5) + h) & 7];
        o->p.sinks = o->sinks;
    }
    o->scale = o->p.softmax_scale != 0.0f ? o->p.softmax_scale : (float)(1.0 / sqrt((double)D));
    fzd_say("scale=%g causal=%d window=(%d,%d) softcap=%g alibi=%s sinks=%s ", (double)o->p.softmax_scale,
            (int)o->p.causal, (int)o->p.window_left, (int)o->p.window_right, (double)o->p.softcap,
            o->p.alibi_slopes ? "on" : "off", o->p.sinks ? "on" : "off");
}
/* Lowest set bit (as a power of two) over n values: every value is an integer multiple of 2^result
 * (INT32_MAX when all are zero). */
static int32_t fzd_lowbit(const void *buf, attn_dtype dt, int64_t n) {
    int32_t lo = INT32_MAX;
    for (int64_t i = 0; i < n; i++) {
        const double x = fabs((double)th_get(buf, dt, (size_t)i));
        if (x == 0.0 || !isfinite(x))
            continue;
        int e;
        const double m = frexp(x, &e); /* x = m·2^e, m in [0.5, 1) with <= 24 significant bits */
        uint64_t mi = (uint64_t)ldexp(m, 53);
        int tz = 0;
        while (!(mi & 1))
            mi >>= 1, tz++;
        if (e - 53 + tz < lo)
            lo = e - 53 + tz;
    }
    return lo;
}
/* 1 when every logit scale·(q·k) is exact in float32, in any summation order: q and k hold integer multiples of
 * 2^lq and 2^lk, the scale is a power of two, D·max|q|·max|k| <= 2^24·2^(lq+lk) (every partial sum is an
 * integer multiple of the unit below 2^24 units), and no soft-cap or ALiBi. */
static int fzd_exact_logits(const fzd_opts *o, double scale, const void *q, attn_dtype qdt, int64_t nq, double qmax,
                            const void *k, attn_dtype kdt, int64_t nk, double kmax, int64_t D) {
    if (!fzd_is_pow2(scale) || o->p.softcap > 0.0f || o->p.alibi_slopes)
        return 0;
    if (qmax == 0.0 || kmax == 0.0)
        return 1;
    const int32_t lq = fzd_lowbit(q, qdt, nq), lk = fzd_lowbit(k, kdt, nk);
    if (lq == INT32_MAX || lk == INT32_MAX) /* no nonzero finite q or k in the buffers: every product is 0 */
        return 1;
    return (double)D * qmax * kmax <= ldexp(1.0, 24 + lq + lk);
}

/* The float32 error bound of one logit of magnitude bound `mag` (see the top of this file). */
static double fzd_logit_err(double mag, int64_t D, const fzd_opts *o, int64_t max_dist) {
    double e = (double)(D + 6) * 5.9604644775390625e-8 * mag;
    if (o->p.softcap > 0.0f)
        e += 8.0 * 5.9604644775390625e-8 * (double)o->p.softcap;
    if (o->p.alibi_slopes)
        e += 4.0 * 5.9604644775390625e-8 * 8.0 * (double)max_dist; /* slopes <= 8·0.5 */
    return e;
}
/* Largest logit magnitude of any row before the soft-cap (whose tanh has slope <= 1, so it never grows an error):
 * |scale|·D·max|q|·max|k| plus ALiBi (a bound, cheap). */
static double fzd_logit_mag(const fzd_opts *o, int64_t D, double qmax, double kmax, int64_t max_dist) {
    double m = fabs((double)o->scale) * (double)D * qmax * kmax;
    if (o->p.alibi_slopes)
        m += 4.0 * (double)max_dist;
    return m;
}

/* ---- comparison ---- */
typedef struct fzd_tol {
    double atol, rtol, vmax; /* out: |Δ| <= atol·vmax + rtol·|want| */
    double lse_logit;        /* E_logit of the LSE bound (0 for exact logits) */
    double lse_q_round;      /* opt-in tables, queries not exact in bf16: 2^-9·M for the rounding of q (§7) */
    double lse_sum;          /* E_sum */
    int opt_in;
} fzd_tol;
/* The tolerance of a table for outputs of dtype `dt`, logits up to `mag`, `keys` keys per row at most. */
static fzd_tol fzd_tol_of(const fzd_table *t, attn_dtype dt, double vmax, double mag, int64_t D, const fzd_opts *o,
                          int64_t keys, int64_t max_dist, int exact) {
    const th_tol h = th_tol_for(dt);
    fzd_tol r;
    const double ds = fzd_logit_err(mag, D, o, max_dist);
    r.atol = h.atol + 2.0 * ds, r.rtol = h.rtol, r.vmax = vmax > 0.0 ? vmax : 1.0;
    /* ATTN_FUZZ_LSE_EXACT=0: exact logits get the general bound too (to look past a known LSE defect) */
    static int exact_env = -1;
    if (exact_env < 0)
        exact_env = !getenv("ATTN_FUZZ_LSE_EXACT") || strcmp(getenv("ATTN_FUZZ_LSE_EXACT"), "0") != 0;
    r.lse_logit = exact && exact_env ? 0.0 : ds;
    r.lse_sum = (double)(keys + 8) * 1.1920928955078125e-7;
    r.opt_in = t ? t->opt_in : 0;
    if (r.opt_in) { /* §7; outputs also widened for the bf16 rounding of the scaled q (2^-9 of each product) */
        if (r.atol < 2e-2)
            r.atol = 2e-2;
        if (r.rtol < 2e-2)
            r.rtol = 2e-2;
        r.atol += 2.0 * 0.001953125 * mag;
    }
    r.lse_q_round = r.opt_in && dt != ATTN_DTYPE_BF16 ? 0.001953125 * mag : 0.0;
    return r;
}
static int fzd_same_special(double g, double w) {
    if (isnan(w))
        return isnan(g);
    if (isinf(w))
        return g == w;
    return -1; /* w finite: compare numerically */
}
/* got vs want, n contiguous elements of dtype dt. */
static void fzd_check_out(const char *what, const char *isa, const void *got, const void *want, attn_dtype dt,
                          int64_t n, const fzd_tol *tol) {
    for (int64_t i = 0; i < n; i++) {
        const double g = th_get(got, dt, (size_t)i), w = th_get(want, dt, (size_t)i);
        const int s = fzd_same_special(g, w);
        const double lim = tol->atol * tol->vmax + tol->rtol * fabs(w);
        if (s == 0 || (s < 0 && !(fabs(g - w) <= lim)))
            fzd_fail("%s on table %s: element %lld = %.9g, oracle %.9g (|diff| %.3g > tolerance %.3g)", what, isa,
                     (long long)i, g, w, fabs(g - w), lim);
    }
}
/* LSE got vs want (float32, n contiguous). */
static void fzd_check_lse(const char *what, const char *isa, const float *got, const float *want, int64_t n,
                          const fzd_tol *tol) {
    for (int64_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        const int s = fzd_same_special(g, w);
        double lim = 2.0 * fzd_ulp(w) + tol->lse_sum + tol->lse_logit;
        if (tol->opt_in && lim < 2e-2 * fmax(1.0, fabs(w)))
            lim = 2e-2 * fmax(1.0, fabs(w));
        lim += tol->lse_q_round;
        if (s == 0 || (s < 0 && !(fabs(g - w) <= lim)))
            fzd_fail("%s LSE on table %s: element %lld = %.9g, oracle %.9g (|diff| %.3g = %.2f ulp > tolerance %.3g = "
                     "2 ulp + %.3g log-sum + %.3g logit)",
                     what, isa, (long long)i, g, w, fabs(g - w), fabs(g - w) / fzd_ulp(w), lim, tol->lse_sum,
                     tol->lse_logit);
    }
}
static void fzd_check_status(const char *what, const char *isa, attn_status st) {
    if (st != ATTN_STATUS_OK)
        fzd_fail("%s on table %s: a valid call returned %s (%s)", what, isa, attn_status_string(st), attn_last_error());
}
/* Bytes of a buffer unchanged (nothing written on failure, untouched rows). */
static void fzd_check_unchanged(const char *what, const char *isa, const void *buf, const void *before, size_t bytes) {
    if (memcmp(buf, before, bytes) != 0) {
        size_t i = 0;
        while (((const uint8_t *)buf)[i] == ((const uint8_t *)before)[i])
            i++;
        fzd_fail("%s on table %s: byte %zu changed (0x%02x -> 0x%02x)", what, isa, i, ((const uint8_t *)before)[i],
                 ((const uint8_t *)buf)[i]);
    }
}
/* A buffer of fzd_alloc_pattern(.., 0xFF) still all 0xFF. */
static void fzd_check_untouched(const char *what, const char *isa, const void *buf, size_t bytes) {
    for (size_t i = 0; i < bytes; i++)
        if (((const uint8_t *)buf)[i] != 0xFF)
            fzd_fail("%s on table %s: byte %zu written", what, isa, i);
}
static size_t fzd_bytes(attn_dtype dt, int64_t n) {
    return (size_t)(n > 0 ? n : 0) * attn_dtype_size(dt);
}

/* ---- a dense problem (dense, piecewise, quantized and hidden-value targets) ---- */
typedef struct fzd_dense {
    int layout; /* attn_layout: BSND [B, S, H, D] or BNSD [B, H, S, D] */
    int64_t B, Sq, Sk, H, Hkv, D, Dv;
    attn_dtype qdt, kdt;
    fzd_values vm;
    fzd_opts o;
    void *q, *k, *v;
    double qmax, kmax, vmax;
    attn_tensor tq, tk, tv;
    int64_t nq, nk, nv, nout, nlse;
    th_rng g;
} fzd_dense;
static attn_tensor fzd_view4(void *data, attn_dtype dt, int layout, int64_t b, int64_t s, int64_t h, int64_t d) {
    const int64_t bsnd[4] = {b, s, h, d}, bnsd[4] = {b, h, s, d};
    return attn_tensor_make(data, dt, 4, layout == ATTN_LAYOUT_BNSD ? bnsd : bsnd);
}
static int64_t fzd_pick64(fzd_rd *r, const int64_t *tab, int n) {
    return tab[fzd_u8(r) % n];
}
/* Decodes shapes (work B·Sq·Sk·H·(D + Dv) <= max_work: Sk, Sq, then D shrink), dtypes, values and options, and
 * fills q, k, v. */
static void fzd_dense_decode(fzd_rd *r, fzd_dense *c, int allow_causal, int allow_window, int64_t max_work) {
    static const int64_t sq[16] = {1, 1, 2, 3, 4, 5, 7, 8, 1, 2, 16, 17, 33, 0, 6, 9};
    static const int64_t sk[16] = {1, 2, 3, 5, 8, 13, 16, 17, 31, 64, 65, 100, 0, 7, 130, 513};
    static const int64_t ds[16] = {1, 2, 3, 4, 8, 16, 32, 64, 5, 17, 31, 33, 128, 256, 7, 12};
    memset(c, 0, sizeof *c);
    const uint8_t sh = fzd_u8(r);
    c->layout = sh & 1;
    c->B = 1 + ((sh >> 1) & 1);
    c->H = 1 + ((sh >> 2) & 3);
    const int g = (sh >> 4) & 3;
    c->Hkv = g == 1 ? 1 : (g == 2 && c->H % 2 == 0 ? c->H / 2 : c->H);
    c->Sq = fzd_pick64(r, sq, 16), c->Sk = fzd_pick64(r, sk, 16), c->D = fzd_pick64(r, ds, 16);
    c->Dv = (sh & 0x40) ? fzd_pick64(r, ds, 16) : c->D;
    for (;;) {
        const int64_t work = c->B * c->Sq * c->Sk * c->H * (c->D + c->Dv);
        if (work <= max_work)
            break;
        if (c->Sk > 16)
            c->Sk = (c->Sk + 1) / 2;
        else if (c->Sq > 8)
            c->Sq = (c->Sq + 1) / 2;
        else if (c->D > 16 || c->Dv > 16)
            c->D = c->D > 16 ? c->D / 2 : c->D, c->Dv = c->Dv > 16 ? c->Dv / 2 : c->Dv;
        else if (c->H > 1)
            c->H = c->Hkv = 1;
        else
            break;
    }
    const uint8_t dt = fzd_u8(r);
    c->qdt = fzd_float_dtypes[dt & 3], c->kdt = fzd_float_dtypes[(dt >> 2) & 3];
    c->vm = fzd_value_mode(r);
    fzd_say("layout=%s B=%lld Sq=%lld Sk=%lld H=%lld Hkv=%lld D=%lld Dv=%lld q=%s kv=%s values=%s(amp %g range %d "
            "exp %d/%d) ",
            c->layout ? "BNSD" : "BSND", (long long)c->B, (long long)c->Sq, (long long)c->Sk, (long long)c->H,
            (long long)c->Hkv, (long long)c->D, (long long)c->Dv, attn_dtype_name(c->qdt), attn_dtype_name(c->kdt),
            c->vm.integer ? "integer" : "uniform", c->vm.amp, (int)c->vm.range, (int)c->vm.qexp, (int)c->vm.kexp);
    fzd_decode_opts(r, &c->o, c->H, c->D, allow_causal, allow_window);
    th_rng_seed(&c->g, fzd_seed(r));
    c->nq = c->B * c->Sq * c->H * c->D, c->nk = c->B * c->Sk * c->Hkv * c->D, c->nv = c->B * c->Sk * c->Hkv * c->Dv;
    c->nout = c->B * c->Sq * c->H * c->Dv, c->nlse = c->B * c->H * c->Sq;
    c->q = fzd_alloc(c->qdt, c->nq), c->k = fzd_alloc(c->kdt, c->nk), c->v = fzd_alloc(c->kdt, c->nv);
    c->qmax = fzd_fill(&c->g, &c->vm, c->vm.qexp, c->q, c->qdt, c->nq);
    c->kmax = fzd_fill(&c->g, &c->vm, c->vm.kexp, c->k, c->kdt, c->nk);
    c->vmax = fzd_fill_uniform(&c->g, 1.0, c->v, c->kdt, c->nv);
    c->tq = fzd_view4(c->q, c->qdt, c->layout, c->B, c->Sq, c->H, c->D);
    c->tk = fzd_view4(c->k, c->kdt, c->layout, c->B, c->Sk, c->Hkv, c->D);
    c->tv = fzd_view4(c->v, c->kdt, c->layout, c->B, c->Sk, c->Hkv, c->Dv);
}
/* Output and LSE views of a dense problem over buffers pre-filled with NaN (every element must be written). */
static void fzd_dense_outputs(const fzd_dense *c, void **out, float **lse, attn_tensor *to, attn_tensor *tl) {
    *out = fzd_alloc_pattern(c->qdt, c->nout, 0xFF);
    *lse = (float *)fzd_alloc_pattern(ATTN_DTYPE_F32, c->nlse, 0xFF);
    *to = fzd_view4(*out, c->qdt, c->layout, c->B, c->Sq, c->H, c->Dv);
    const int64_t ls[3] = {c->B, c->H, c->Sq};
    *tl = attn_tensor_make(*lse, ATTN_DTYPE_F32, 3, ls);
}
static int fzd_dense_exact(const fzd_dense *c) {
    return fzd_exact_logits(&c->o, c->o.scale, c->q, c->qdt, c->nq, c->qmax, c->k, c->kdt, c->nk, c->kmax, c->D);
}
static fzd_tol fzd_dense_tol(const fzd_dense *c, const fzd_table *t, double extra_mag, int exact) {
    const int64_t dist = c->Sq + c->Sk;
    return fzd_tol_of(t, c->qdt, c->vmax, fzd_logit_mag(&c->o, c->D, c->qmax, c->kmax, dist) + extra_mag, c->D, &c->o,
                      c->Sk + 1, dist, exact);
}
static void fzd_dense_free(fzd_dense *c) {
    free(c->q), free(c->k), free(c->v);
}

/* ---- a paged KV cache (paged, piecewise and hidden-value targets) ---- */
typedef struct fzd_cache {
    attn_dtype cdt;
    int64_t NB, BS, Hkv, D, n;
    float k_scale, v_scale; /* params.k_scale / v_scale as decoded (possibly invalid) */
    int scales_ok;          /* both finite and > 0 */
    void *data;             /* [2, NB, BS, Hkv, D] */
    attn_tensor t;
} fzd_cache;
/* fp8 scales: 12 valid values (powers of two and not), then 0, -1, NaN, inf (a quarter of the choices). */
static float fzd_scale_value(uint8_t b) {
    static const float v[16] = {1.0f, 1.0f, 2.0f,    0.5f, 4.0f, 0.25f, 0.037f, 3.5f,
                                1.0f, 8.0f, 0.0625f, 1.5f, 0.0f, -1.0f, NAN,    INFINITY};
    return v[b & 15];
}
static int fzd_is_fp8(attn_dtype dt) {
    return dt == ATTN_DTYPE_FP8_E4M3 || dt == ATTN_DTYPE_FP8_E5M2;
}
/* The dequantized value (float32) of element i of the cache: decode(bits)·scale for fp8, the value otherwise. */
static float fzd_cache_value(const fzd_cache *c, int64_t i) {
    if (!fzd_is_fp8(c->cdt))
        return th_get(c->data, c->cdt, (size_t)i);
    const int is_v = i >= c->n / 2;
    const double sc = c->scales_ok ? (double)(is_v ? c->v_scale : c->k_scale) : 1.0;
    return (float)((double)attn_fp8_to_float(c->cdt, ((const uint8_t *)c->data)[i]) * sc);
}
static int64_t fzd_cache_index(const fzd_cache *c, int kv, int64_t slot, int64_t g, int64_t d) {
    return (((kv * c->NB + slot / c->BS) * c->BS + slot % c->BS) * c->Hkv + g) * c->D + d;
}
/* Decodes dtype, block size, block count (>= min_blocks), scales; fills keys with `vm` values (exponent kexp)
 * and values uniform, encoded as x / scale for fp8 (scale 1 when the decoded one is invalid). */
static void fzd_cache_decode(fzd_rd *r, th_rng *g, fzd_cache *c, const fzd_values *vm, int64_t Hkv, int64_t D,
                             int64_t min_blocks) {
    static const attn_dtype cdts[8] = {ATTN_DTYPE_F32,      ATTN_DTYPE_F16,      ATTN_DTYPE_BF16, ATTN_DTYPE_FP8_E4M3,
                                       ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_F32,  ATTN_DTYPE_FP8_E5M2};
    static const int64_t bss[8] = {1, 2, 3, 4, 8, 16, 5, 16};
    memset(c, 0, sizeof *c);
    const uint8_t b = fzd_u8(r), sb = fzd_u8(r);
    c->cdt = cdts[b & 7], c->BS = bss[(b >> 3) & 7], c->Hkv = Hkv, c->D = D;
    c->NB = min_blocks + ((b >> 6) & 3);
    if (c->NB < 1)
        c->NB = 1;
    c->k_scale = fzd_scale_value(sb), c->v_scale = fzd_scale_value(sb >> 4);
    c->scales_ok = isfinite(c->k_scale) && c->k_scale > 0.0f && isfinite(c->v_scale) && c->v_scale > 0.0f;
    c->n = 2 * c->NB * c->BS * Hkv * D;
    c->data = fzd_alloc(c->cdt, c->n);
    const int64_t half = c->n / 2;
    float *tmp = (float *)fzd_alloc(ATTN_DTYPE_F32, c->n);
    fzd_fill(g, vm, vm->kexp, tmp, ATTN_DTYPE_F32, half);
    fzd_fill_uniform(g, 1.0, tmp + half, ATTN_DTYPE_F32, half);
    for (int64_t i = 0; i < c->n; i++) {
        if (fzd_is_fp8(c->cdt)) {
            const float sc = c->scales_ok ? (i < half ? c->k_scale : c->v_scale) : 1.0f;
            ((uint8_t *)c->data)[i] = attn_fp8_from_float(c->cdt, tmp[i] / sc);
        } else {
            th_set(c->data, c->cdt, (size_t)i, tmp[i]);
        }
    }
    free(tmp);
    const int64_t cs[5] = {2, c->NB, c->BS, Hkv, D};
    c->t = attn_tensor_make(c->data, c->cdt, 5, cs);
    fzd_say("cache=%s NB=%lld BS=%lld k_scale=%g v_scale=%g ", attn_dtype_name(c->cdt), (long long)c->NB,
            (long long)c->BS, (double)c->k_scale, (double)c->v_scale);
}
/* Keys and values [L, Hkv, D] (float32, dequantized) of a sequence with block ids `ids`, appended at k/v. */
static void fzd_cache_gather(const fzd_cache *c, const int32_t *ids, int64_t L, float *k, float *v) {
    for (int64_t j = 0; j < L; j++) {
        const int64_t slot = (int64_t)ids[j / c->BS] * c->BS + j % c->BS;
        for (int64_t g = 0; g < c->Hkv; g++)
            for (int64_t d = 0; d < c->D; d++) {
                k[(j * c->Hkv + g) * c->D + d] = fzd_cache_value(c, fzd_cache_index(c, 0, slot, g, d));
                v[(j * c->Hkv + g) * c->D + d] = fzd_cache_value(c, fzd_cache_index(c, 1, slot, g, d));
            }
    }
}
/* 1 when an entry must refuse these scales: an fp8 cache with a scale that is not finite and > 0. */
static int fzd_cache_bad_scales(const fzd_cache *c) {
    return fzd_is_fp8(c->cdt) && !c->scales_ok;
}
static double fzd_max_abs(const float *x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)x[i]));
    return m;
}

#endif
