/*
 * util.c — shared helpers of the `attn` CLI: timing and progress, RNG and f16/bf16 conversion, FLOP
 * counting, oracle comparison and the results report (text table or JSON via cJSON). No attention math
 * here; the CLI only calls the public API.
 */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tolerance.h"

/* ---------------------------------------------------------------------------------------------
 * Environment and timing
 * --------------------------------------------------------------------------------------------- */
int32_t attn_cli_default_repeats(const attn_cli_env *env) {
    if (env->repeats > 0)
        return env->repeats;
    switch (env->mode) {
    case ATTN_CLI_MODE_CHECK:
        return 1;
    case ATTN_CLI_MODE_BENCH:
        return 10;
    default:
        return 3;
    }
}

double attn_cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int attn_cli_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double attn_cli_median(const double *values, int32_t n) {
    if (n <= 0)
        return 0.0;
    double tmp[4096];
    if (n > 4096)
        n = 4096;
    memcpy(tmp, values, (size_t)n * sizeof(double));
    qsort(tmp, (size_t)n, sizeof(double), attn_cli_cmp_double);
    return (n % 2) ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* Draws "  label [k/n]" on the TTY err stream, overwriting the line. */
static void attn_cli_progress(const attn_cli_env *env, const char *label, int32_t k, int32_t n, double eta_s) {
    fprintf(env->err, "\r\033[K  %s [%d/%d] ~%.0f s left", label, (int)k, (int)n, eta_s);
    fflush(env->err);
}

void attn_cli_progress_draw(const attn_cli_env *env, const char *label, int64_t k, int64_t n, double eta_s) {
    if (!env->progress)
        return;
    if (eta_s >= 0)
        fprintf(env->err, "\r\033[K  %s [%lld/%lld] ~%.0f s left", label, (long long)k, (long long)n, eta_s);
    else
        fprintf(env->err, "\r\033[K  %s [%lld/%lld]", label, (long long)k, (long long)n);
    fflush(env->err);
}

void attn_cli_progress_clear(const attn_cli_env *env) {
    if (!env->progress)
        return;
    fprintf(env->err, "\r\033[K");
    fflush(env->err);
}

attn_status attn_cli_time(const attn_cli_env *env, const char *label, int32_t repeats, attn_cli_timed_fn fn, void *arg,
                          attn_cli_timing *t) {
    double times[4096];
    memset(t, 0, sizeof *t);
    if (repeats < 1)
        repeats = 1;
    if (repeats > 4096)
        repeats = 4096;
    const double start = attn_cli_now();
    int drawn = 0;
    attn_status st = ATTN_STATUS_OK;
    const int32_t warmup = env->warmup > 0 ? env->warmup : 0;
    for (int32_t w = 0; w < warmup && st == ATTN_STATUS_OK; w++)
        st = fn(arg);
    int32_t done = 0;
    for (; done < repeats && st == ATTN_STATUS_OK; done++) {
        const double t0 = attn_cli_now();
        st = fn(arg);
        times[done] = attn_cli_now() - t0;
        const double elapsed = attn_cli_now() - start;
        const double per_call = elapsed / (double)(warmup + done + 1);
        if (env->progress && done + 1 < repeats && (elapsed > 1.0 || per_call * (repeats + warmup) > 2.0)) {
            attn_cli_progress(env, label, done + 1, repeats, per_call * (double)(repeats - done - 1));
            drawn = 1;
        }
    }
    if (drawn) {
        fprintf(env->err, "\r\033[K");
        fflush(env->err);
    }
    if (st != ATTN_STATUS_OK || done == 0)
        return st;
    double sum = 0.0, mn = times[0];
    for (int32_t i = 0; i < done; i++) {
        sum += times[i];
        if (times[i] < mn)
            mn = times[i];
    }
    t->repeats = done;
    t->min_s = mn;
    t->mean_s = sum / (double)done;
    t->median_s = attn_cli_median(times, done);
    return ATTN_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * RNG and dtype conversion
 * --------------------------------------------------------------------------------------------- */
void attn_cli_rng_seed(attn_cli_rng *rng, uint64_t seed) {
    rng->state = seed * 0x9E3779B97F4A7C15ull + 1;
}

uint64_t attn_cli_rng_u64(attn_cli_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double attn_cli_rng_uniform(attn_cli_rng *rng, double lo, double hi) {
    return lo + (hi - lo) * ((double)(attn_cli_rng_u64(rng) >> 11) * 0x1.0p-53);
}

/* f16/bf16 through the library's codecs (attn.h attn_f16_from_float ...): the CLI's inputs and readings have
 * the bits every entry uses. */
uint16_t attn_cli_f32_to_f16(float x) { return attn_f16_from_float(x); }

float attn_cli_f16_to_f32(uint16_t h) { return attn_f16_to_float(h); }

uint16_t attn_cli_f32_to_bf16(float x) { return attn_bf16_from_float(x); }

float attn_cli_bf16_to_f32(uint16_t h) { return attn_bf16_to_float(h); }

float attn_cli_load(const void *buf, attn_dtype dtype, size_t i) {
    switch (dtype) {
    case ATTN_DTYPE_F32:
        return ((const float *)buf)[i];
    case ATTN_DTYPE_F16:
        return attn_cli_f16_to_f32(((const uint16_t *)buf)[i]);
    case ATTN_DTYPE_BF16:
        return attn_cli_bf16_to_f32(((const uint16_t *)buf)[i]);
    default:
        return 0.0f;
    }
}

void attn_cli_store(void *buf, attn_dtype dtype, size_t i, float x) {
    switch (dtype) {
    case ATTN_DTYPE_F32:
        ((float *)buf)[i] = x;
        break;
    case ATTN_DTYPE_F16:
        ((uint16_t *)buf)[i] = attn_cli_f32_to_f16(x);
        break;
    case ATTN_DTYPE_BF16:
        ((uint16_t *)buf)[i] = attn_cli_f32_to_bf16(x);
        break;
    default:
        break;
    }
}

void *attn_cli_alloc(size_t bytes) {
    size_t n = bytes ? bytes : 1;
    if (n > SIZE_MAX - 63)
        return NULL;
    n = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n);
    if (p)
        memset(p, 0, n);
    return p;
}

void attn_cli_free(void *p) {
    free(p);
}

void *attn_cli_alloc_fill(attn_cli_rng *rng, attn_dtype dtype, size_t n, double lo, double hi, double *max_abs) {
    const size_t es = attn_dtype_size(dtype);
    if (es == 0 || (n && n > SIZE_MAX / es))
        return NULL;
    void *p = attn_cli_alloc(n * es);
    if (!p)
        return NULL;
    attn_cli_fill(rng, dtype, p, n, lo, hi, max_abs);
    return p;
}

void attn_cli_fill(attn_cli_rng *rng, attn_dtype dtype, void *p, size_t n, double lo, double hi, double *max_abs) {
    double mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        attn_cli_store(p, dtype, i, (float)attn_cli_rng_uniform(rng, lo, hi));
        const double a = fabs((double)attn_cli_load(p, dtype, i));
        if (a > mx)
            mx = a;
    }
    if (max_abs)
        *max_abs = mx;
}

void attn_cli_alibi_slopes(int64_t num_heads, float *slopes) {
    int64_t base = 1;
    while (base * 2 <= num_heads)
        base *= 2;
    for (int64_t h = 0; h < base; h++)
        slopes[h] = (float)pow(2.0, -8.0 * (double)(h + 1) / (double)base);
    for (int64_t h = base, i = 0; h < num_heads; h++, i++) /* odd powers of the 2·base sequence */
        slopes[h] = (float)pow(2.0, -8.0 * (double)(2 * i + 1) / (double)(2 * base));
}

/* ---------------------------------------------------------------------------------------------
 * FLOP count
 * --------------------------------------------------------------------------------------------- */
int64_t attn_cli_visible_pairs(int64_t seq_q, int64_t seq_k, int32_t causal, int32_t window_left,
                               int32_t window_right) {
    int64_t pairs = 0;
    for (int64_t i = 0; i < seq_q; i++) {
        const int64_t pos = causal == ATTN_CAUSAL_TOP_LEFT ? i : seq_k - seq_q + i;
        int64_t lo = 0, hi = seq_k - 1;
        if (causal != ATTN_CAUSAL_NONE && pos < hi)
            hi = pos;
        if (window_left >= 0 && pos - window_left > lo)
            lo = pos - window_left;
        if (window_right >= 0 && pos + window_right < hi)
            hi = pos + window_right;
        if (hi >= lo)
            pairs += hi - lo + 1;
    }
    return pairs;
}

double attn_cli_gflop(int64_t pairs, int64_t num_heads, int64_t head_size, int64_t head_size_v) {
    return 2.0 * (double)pairs * (double)num_heads * (double)(head_size + head_size_v) * 1e-9;
}

/* ---------------------------------------------------------------------------------------------
 * Oracle comparison
 * --------------------------------------------------------------------------------------------- */
/* The opt-in table the run's context uses, or NULL for a default table (set by attn_cli_use_isa_tolerance). */
static const char *attn_cli_opt_in_isa;

void attn_cli_use_isa_tolerance(const char *isa) {
    attn_cli_opt_in_isa = NULL;
    for (int32_t i = 0; isa && attn_isa_opt_in_name(i) != NULL; i++)
        if (strcmp(attn_isa_opt_in_name(i), isa) == 0) attn_cli_opt_in_isa = attn_isa_opt_in_name(i);
}

const char *attn_cli_opt_in_table(void) { return attn_cli_opt_in_isa; }

attn_cli_tol attn_cli_tol_for(attn_dtype dtype) {
    attn_cli_tol t;
    if (attn_cli_opt_in_isa && dtype == ATTN_DTYPE_BF16) { /* bf16 operands of the opt-in tables (SEMANTICS §7) */
        t.atol = 2e-2, t.rtol = 2e-2, t.lse_atol = 2e-2;
        return t;
    }
    attn_tolerance_for(dtype, &t.atol, &t.rtol, &t.lse_atol);
    return t;
}

void attn_cli_cmp_init(attn_cli_cmp *cmp) {
    memset(cmp, 0, sizeof *cmp);
}

/* Advances a logical multi-index over t's shape; returns 0 when done. */
static int attn_cli_next(const attn_tensor *t, int64_t *idx) {
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        if (++idx[d] < t->shape[d])
            return 1;
        idx[d] = 0;
    }
    return 0;
}

static int64_t attn_cli_numel(const attn_tensor *t) {
    int64_t n = 1;
    for (int32_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

static size_t attn_cli_offset(const attn_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        off += idx[d] * t->strides[d];
    return (size_t)off;
}

void attn_cli_compare(const attn_tensor *got, const attn_tensor *expected, attn_cli_tol tol, double vmax,
                      attn_cli_cmp *cmp) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (attn_cli_numel(got) == 0)
        return;
    do {
        const double g = attn_cli_load(got->data, got->dtype, attn_cli_offset(got, idx));
        const double e = attn_cli_load(expected->data, expected->dtype, attn_cli_offset(expected, idx));
        const double err = fabs(g - e);
        if (!(err <= tol.atol * vmax + tol.rtol * fabs(e)))
            cmp->num_bad++;
        if (!(err <= cmp->max_abs_err))
            cmp->max_abs_err = isnan(err) ? INFINITY : err;
        cmp->num_compared++;
    } while (attn_cli_next(got, idx));
}

void attn_cli_compare_lse(const attn_tensor *got, const attn_tensor *expected, attn_cli_tol tol, attn_cli_cmp *cmp) {
    int64_t idx[ATTN_MAX_DIMS] = {0};
    if (attn_cli_numel(got) == 0)
        return;
    do {
        const float g = ((const float *)got->data)[attn_cli_offset(got, idx)];
        const float e = ((const float *)expected->data)[attn_cli_offset(expected, idx)];
        int ok;
        if (isinf(e) || isinf(g))
            ok = g == e;
        else
            ok = fabs((double)g - (double)e) <= tol.lse_atol;
        if (!ok)
            cmp->num_bad++;
    } while (attn_cli_next(got, idx));
}

/* ---------------------------------------------------------------------------------------------
 * Report
 * --------------------------------------------------------------------------------------------- */
void attn_cli_result_init(attn_cli_result *r, const char *name) {
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "");
    r->ok = 1;
}

const char *attn_cli_check_note(const attn_cli_env *env, char *buf, size_t size) {
    int n;
    if (env->check_rows == 0)
        n = snprintf(buf, size, "no oracle comparison");
    else if (env->check_rows < 0)
        n = snprintf(buf, size, "oracle comparison on all query rows");
    else
        n = snprintf(buf, size,
                     "oracle comparison on the last %lld query rows of each sequence (first rows for top-left "
                     "causal)",
                     (long long)env->check_rows);
    if (env->check_rows != 0 && attn_cli_opt_in_isa && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "; bf16 cases with the tolerance of the opt-in table %s (2e-2)",
                 attn_cli_opt_in_isa);
    return buf;
}

static void attn_cli_rule(FILE *f, int width) {
    for (int i = 0; i < width; i++)
        fputc('-', f);
    fputc('\n', f);
}

/* Column widths of the name/shape/options columns (display width, UTF-8 code points). */
#define ATTN_CLI_COL_NAME 26
#define ATTN_CLI_COL_SHAPE 34
#define ATTN_CLI_COL_OPTIONS 36
#define ATTN_CLI_COL_LEAD (ATTN_CLI_COL_NAME + 1 + ATTN_CLI_COL_SHAPE + 1 + ATTN_CLI_COL_OPTIONS)

/* Width of the table of a mode: the lead columns, then the mode's columns, then status. */
static int attn_cli_table_width(attn_cli_mode mode) {
    switch (mode) {
    case ATTN_CLI_MODE_BENCH:
        return ATTN_CLI_COL_LEAD + 11 + 11 + 9 + 9 + 7;
    case ATTN_CLI_MODE_CHECK:
        return ATTN_CLI_COL_LEAD + 9 + 7;
    default:
        return ATTN_CLI_COL_LEAD + 11 + 9 + 9 + 9 + 7;
    }
}

/* 1 if code point cp is East Asian Wide/Fullwidth (two terminal columns): the main CJK/Hangul/fullwidth
 * blocks of Unicode's EastAsianWidth.txt (W and F), enough for table padding. */
static int attn_cli_is_wide(uint32_t cp) {
    return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0x303E) || (cp >= 0x3041 && cp <= 0xA4CF) ||
           (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0xFE30 && cp <= 0xFE4F) ||
           (cp >= 0xFF00 && cp <= 0xFF60) || (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
           (cp >= 0x20000 && cp <= 0x3FFFD);
}

size_t attn_cli_display_width(const char *s) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t cp = *p++;
        if ((cp & 0xC0) == 0x80)
            continue; /* a stray continuation byte takes no column */
        int more = cp >= 0xF0 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        if (more)
            cp &= 0x3Fu >> more;
        for (; more > 0 && (*p & 0xC0) == 0x80; more--) /* a truncated sequence counts as what it has */
            cp = (cp << 6) | (*p++ & 0x3Fu);
        n += attn_cli_is_wide(cp) ? 2 : 1;
    }
    return n;
}

/* Prints s left-aligned in `width` display columns (a longer s is printed whole). */
static void attn_cli_pad(FILE *f, const char *s, int width) {
    fputs(s, f);
    for (size_t n = attn_cli_display_width(s); n < (size_t)width; n++)
        fputc(' ', f);
}

/* One table row; NULL columns are left out (the column set depends on the mode). */
static void attn_cli_row(FILE *f, const char *name, const char *shape, const char *options, const char *t1,
                         const char *t2, const char *gflop, const char *gflops, const char *err, const char *status) {
    attn_cli_pad(f, name, ATTN_CLI_COL_NAME);
    fputc(' ', f);
    attn_cli_pad(f, shape, ATTN_CLI_COL_SHAPE);
    fputc(' ', f);
    attn_cli_pad(f, options, ATTN_CLI_COL_OPTIONS);
    if (t1)
        fprintf(f, " %10s", t1);
    if (t2)
        fprintf(f, " %10s", t2);
    if (gflop)
        fprintf(f, " %8s", gflop);
    if (gflops)
        fprintf(f, " %8s", gflops);
    if (err)
        fprintf(f, " %8s", err);
    fprintf(f, " %6s\n", status);
}

void attn_cli_report_begin(attn_cli_report *rep, const attn_cli_env *env, const char *workload, const char *note) {
    memset(rep, 0, sizeof *rep);
    rep->env = env;
    rep->workload = workload;
    rep->t0 = attn_cli_now();
    if (env->json) {
        rep->json_cases = cJSON_CreateArray();
        return;
    }
    FILE *f = env->out;
    fprintf(f, "attn %s: workload '%s', isa %s, %d thread%s\n", env->command, workload, attn_ctx_isa(env->ctx),
            (int)env->num_threads, env->num_threads == 1 ? "" : "s");
    if (note && note[0])
        fprintf(f, "%s\n", note);
    switch (env->mode) {
    case ATTN_CLI_MODE_BENCH:
        attn_cli_row(f, "case", "shape (b x sq/sk heads d)", "options", "min ms", "median ms", "GFLOP", "GFLOP/s", NULL,
                     "status");
        break;
    case ATTN_CLI_MODE_CHECK:
        attn_cli_row(f, "case", "shape (b x sq/sk heads d)", "options", NULL, NULL, NULL, NULL, "max err", "status");
        break;
    default:
        attn_cli_row(f, "case", "shape (b x sq/sk heads d)", "options", "median ms", NULL, "GFLOP", "GFLOP/s",
                     "max err", "status");
        break;
    }
    attn_cli_rule(f, attn_cli_table_width(env->mode));
    fflush(f);
}

static void attn_cli_fmt_num(char *buf, size_t size, double x, const char *fmt, int valid) {
    if (valid)
        snprintf(buf, size, fmt, x);
    else
        snprintf(buf, size, "-");
}

void attn_cli_report_add(attn_cli_report *rep, const attn_cli_result *r) {
    const attn_cli_env *env = rep->env;
    rep->num_rows++;
    if (!r->ok)
        rep->num_failed++;
    const int timed = r->timing.repeats > 0;
    const int checked = r->rows_checked != 0;
    if (env->mode == ATTN_CLI_MODE_RUN) {
        /* a line per finished case on stderr, so a long run (the oracle check of the default workload takes about
         * a minute) shows where it is even with --json or stdout in a file; stdout keeps only the report */
        attn_cli_progress_clear(env);
        fprintf(env->err, "attn %s: case %d done: %s (%s, %.1f s elapsed)\n", env->command, (int)rep->num_rows, r->name,
                r->ok ? "ok" : "FAIL", attn_cli_now() - rep->t0);
        fflush(env->err);
    }
    if (env->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", r->name);
        cJSON_AddStringToObject(o, "shape", r->shape);
        cJSON_AddStringToObject(o, "options", r->options);
        cJSON_AddNumberToObject(o, "repeats", r->timing.repeats);
        if (timed) {
            cJSON_AddNumberToObject(o, "time_min_s", r->timing.min_s);
            cJSON_AddNumberToObject(o, "time_median_s", r->timing.median_s);
        }
        cJSON_AddNumberToObject(o, "gflop", r->gflop);
        if (timed && r->timing.median_s > 0) {
            cJSON_AddNumberToObject(o, "gflops_median", r->gflop / r->timing.median_s);
            cJSON_AddNumberToObject(o, "gflops_best", r->gflop / r->timing.min_s);
        }
        cJSON_AddNumberToObject(o, "rows_checked", (double)r->rows_checked);
        if (checked && isfinite(r->max_abs_err))
            cJSON_AddNumberToObject(o, "max_abs_err", r->max_abs_err);
        else
            cJSON_AddNullToObject(o, "max_abs_err");
        cJSON_AddBoolToObject(o, "ok", r->ok != 0);
        if (r->error[0])
            cJSON_AddStringToObject(o, "error", r->error);
        cJSON_AddItemToArray((cJSON *)rep->json_cases, o);
        return;
    }
    char tmin[32], tmed[32], gf[32], gfs[32], err[32];
    const double t = env->mode == ATTN_CLI_MODE_BENCH ? r->timing.min_s : r->timing.median_s;
    attn_cli_fmt_num(tmin, sizeof tmin, 1e3 * r->timing.min_s, "%.3f", timed);
    attn_cli_fmt_num(tmed, sizeof tmed, 1e3 * r->timing.median_s, "%.3f", timed);
    attn_cli_fmt_num(gf, sizeof gf, r->gflop, "%.3g", r->gflop > 0);
    attn_cli_fmt_num(gfs, sizeof gfs, r->gflop / t, "%.1f", timed && r->gflop > 0 && t > 0);
    attn_cli_fmt_num(err, sizeof err, r->max_abs_err, "%.1e", checked);
    FILE *f = env->out;
    const char *status = r->ok ? "ok" : "FAIL";
    switch (env->mode) {
    case ATTN_CLI_MODE_BENCH:
        attn_cli_row(f, r->name, r->shape, r->options, tmin, tmed, gf, gfs, NULL, status);
        break;
    case ATTN_CLI_MODE_CHECK:
        attn_cli_row(f, r->name, r->shape, r->options, NULL, NULL, NULL, NULL, err, status);
        break;
    default:
        attn_cli_row(f, r->name, r->shape, r->options, tmed, NULL, gf, gfs, err, status);
        break;
    }
    if (r->error[0])
        fprintf(f, "  %s: %s\n", r->name, r->error);
    fflush(f);
}

int attn_cli_report_end(attn_cli_report *rep) {
    const attn_cli_env *env = rep->env;
    const double total = attn_cli_now() - rep->t0;
    if (env->json) {
        cJSON *doc = cJSON_CreateObject();
        cJSON_AddStringToObject(doc, "command", env->command);
        cJSON_AddStringToObject(doc, "workload", rep->workload);
        cJSON_AddStringToObject(doc, "version", attn_version_string());
        cJSON_AddStringToObject(doc, "isa", attn_ctx_isa(env->ctx));
        cJSON_AddNumberToObject(doc, "threads", env->num_threads);
        cJSON_AddNumberToObject(doc, "check_rows", (double)env->check_rows);
        cJSON_AddItemToObject(doc, "cases", (cJSON *)rep->json_cases);
        cJSON_AddNumberToObject(doc, "failed", rep->num_failed);
        cJSON_AddNumberToObject(doc, "total_s", total);
        char *s = cJSON_Print(doc);
        if (s) {
            fprintf(env->out, "%s\n", s);
            cJSON_free(s);
        }
        cJSON_Delete(doc);
        rep->json_cases = NULL;
    } else {
        attn_cli_rule(env->out, attn_cli_table_width(env->mode));
        fprintf(env->out, "%d case%s, %d failed, %.1f s\n", (int)rep->num_rows, rep->num_rows == 1 ? "" : "s",
                (int)rep->num_failed, total);
    }
    fflush(env->out);
    return rep->num_failed ? ATTN_CLI_EXIT_MISMATCH : ATTN_CLI_EXIT_OK;
}
