/*
 * util.h — what every `attn` subcommand and every workload shares: the run environment (attn_cli_env),
 * timing with min/median and a TTY-only progress indicator, a seeded RNG with f32/f16/bf16 fill, FLOP
 * counting of the visible (q, k) pairs, oracle comparison with the per-dtype tolerances, and the result
 * report (a text table or one JSON document). Client of <attn/attn.h> only (docs/CONTRIBUTING.md §1).
 */
#ifndef ATTN_CLI_UTIL_H
#define ATTN_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <attn/attn.h>

/* ================================================================================================
 * Exit codes and the run environment
 * ================================================================================================ */

enum {
    ATTN_CLI_EXIT_OK = 0,       /* success                                                       */
    ATTN_CLI_EXIT_MISMATCH = 1, /* a result differs from the oracle beyond tolerance, or failed  */
    ATTN_CLI_EXIT_USAGE = 2     /* bad flag, unknown/malformed workload, unimplemented workload  */
};

typedef enum attn_cli_mode {
    ATTN_CLI_MODE_RUN = 0,   /* `attn run`:   time each case (median), compare a row subset with the oracle */
    ATTN_CLI_MODE_CHECK = 1, /* `attn check`: compare with the oracle (all rows by default); exit 1 on mismatch */
    ATTN_CLI_MODE_BENCH = 2  /* `attn bench`: warm-up + repeated timing, min and median; no oracle */
} attn_cli_mode;

/* Everything a workload needs to run. Built by main.c from the flags; read-only for workloads. */
typedef struct attn_cli_env {
    attn_ctx *ctx;        /* configured context (threads, ISA); a workload must not destroy it     */
    attn_cli_mode mode;   /* which subcommand is running                                             */
    const char *command;  /* "run" | "check" | "bench"                                               */
    const char *workload; /* workload name (built-in name or file path) as given                     */
    int32_t num_threads;  /* attn_ctx_num_threads(ctx)                                               */
    int32_t repeats;      /* --repeats N; 0 = the workload's/mode's own default                      */
    int32_t warmup;       /* untimed calls before timing (bench: 1, run: 1, check: 0)                 */
    int64_t check_rows;   /* query rows per sequence compared with the oracle: -1 = all rows,
                             0 = no comparison, r > 0 = the last r rows (the first r for top-left)    */
    int json;             /* --json: results as one JSON document on `out`, no table                 */
    int force;            /* --force: run cases above the compute-size limits (ATTN_CLI_MAX_*_GFLOP)  */
    int progress;         /* 1 if a progress indicator may be drawn on `err` (err is a TTY)          */
    FILE *out;            /* results (stdout)                                                        */
    FILE *err;            /* diagnostics and progress (stderr)                                       */
} attn_cli_env;

/* Repeats a mode uses when env->repeats is 0 and the workload names none: run 3, check 1, bench 10. */
int32_t attn_cli_default_repeats(const attn_cli_env *env);

/* ================================================================================================
 * Timing
 * ================================================================================================ */

/* Monotonic wall-clock seconds. */
double attn_cli_now(void);

typedef struct attn_cli_timing {
    int32_t repeats; /* timed calls                 */
    double min_s;    /* fastest call, seconds       */
    double median_s; /* median call, seconds        */
    double mean_s;   /* mean call, seconds          */
} attn_cli_timing;

/* The call being timed: returns ATTN_STATUS_OK or an error (timing stops at the first error). */
typedef attn_status (*attn_cli_timed_fn)(void *arg);

/* Runs fn env->warmup times untimed, then `repeats` times timed (>= 1), filling *t. Draws a progress
 * indicator "label [k/repeats]" on env->err when env->progress and the expected total exceeds ~1 s;
 * the line is erased afterwards. Returns the first non-OK status (message in attn_last_error()). */
attn_status attn_cli_time(const attn_cli_env *env, const char *label, int32_t repeats, attn_cli_timed_fn fn, void *arg,
                          attn_cli_timing *t);

/* A progress line "  label [k/n] ~eta s left" (eta < 0: none) on env->err, overwriting the previous one, and
 * its erasure. Both do nothing unless env->progress (err is a TTY and no --json). */
void attn_cli_progress_draw(const attn_cli_env *env, const char *label, int64_t k, int64_t n, double eta_s);
void attn_cli_progress_clear(const attn_cli_env *env);

/* Median of n values (sorts a copy; n <= 4096). 0 for n == 0. */
double attn_cli_median(const double *values, int32_t n);

/* ================================================================================================
 * Random data
 * ================================================================================================ */

typedef struct attn_cli_rng {
    uint64_t state; /* splitmix64 */
} attn_cli_rng;

void attn_cli_rng_seed(attn_cli_rng *rng, uint64_t seed);
uint64_t attn_cli_rng_u64(attn_cli_rng *rng);
double attn_cli_rng_uniform(attn_cli_rng *rng, double lo, double hi); /* [lo, hi) */

/* Conversions used for filling and comparing (round to nearest even; NaN preserved). */
uint16_t attn_cli_f32_to_f16(float x);
float attn_cli_f16_to_f32(uint16_t h);
uint16_t attn_cli_f32_to_bf16(float x);
float attn_cli_bf16_to_f32(uint16_t h);
/* Element i of a buffer of dtype f32/f16/bf16 as float (0 for other dtypes), and its inverse. */
float attn_cli_load(const void *buf, attn_dtype dtype, size_t i);
void attn_cli_store(void *buf, attn_dtype dtype, size_t i, float x);

/* malloc'd (64-byte aligned, free with attn_cli_free) buffer of n elements of a float dtype, uniform in
 * [lo, hi) rounded to the dtype. Returns NULL (and prints nothing) on allocation failure. If max_abs is not
 * NULL it receives max|element| after rounding. */
void *attn_cli_alloc_fill(attn_cli_rng *rng, attn_dtype dtype, size_t n, double lo, double hi, double *max_abs);
/* attn_cli_alloc_fill's filling of n elements of dtype at p (the same values for the same rng state). */
void attn_cli_fill(attn_cli_rng *rng, attn_dtype dtype, void *p, size_t n, double lo, double hi, double *max_abs);
/* malloc'd (64-byte aligned) buffer of `bytes` bytes, zeroed. NULL on failure or bytes == 0 → 1 byte. */
void *attn_cli_alloc(size_t bytes);
void attn_cli_free(void *p);

/* Standard ALiBi slopes (Press et al. 2022, as in HF/vLLM `get_alibi_slopes`): for a power of two n,
 * slope_h = 2^(−8(h+1)/n); otherwise the n' = 2^floor(log2 n) slopes followed by every other slope of 2n'. */
void attn_cli_alibi_slopes(int64_t num_heads, float *slopes /* [num_heads] */);

/* ================================================================================================
 * FLOP count
 * ================================================================================================ */

/* Visible (query, key) pairs of one sequence under causal/window (docs/SEMANTICS.md §2: p_i = Sk − Sq + i, or i
 * for top-left; keys p_i − window_left <= j <= p_i + window_right, −1 = unbounded). Exact, O(seq_q). */
int64_t attn_cli_visible_pairs(int64_t seq_q, int64_t seq_k, int32_t causal, int32_t window_left, int32_t window_right);
/* GFLOP of attention on `pairs` visible pairs: 2·pairs·num_heads·(head_size + head_size_v)·1e−9
 * (= 4·pairs·D·Hq for D = Dv: one multiply-add each for q·k and p·v). */
double attn_cli_gflop(int64_t pairs, int64_t num_heads, int64_t head_size, int64_t head_size_v);

/* ================================================================================================
 * Oracle comparison
 * ================================================================================================ */

typedef struct attn_cli_tol {
    double atol;     /* absolute, in units of max|V|   */
    double rtol;     /* relative to |expected|         */
    double lse_atol; /* absolute, natural-log units    */
} attn_cli_tol;

/* Tolerance for outputs in `dtype` (the query dtype): f32 2e−5·max|V| + 1e−5·|ref|; f16 2e−3 (both);
 * bf16 1e−2 (both). LSE: 2e−5 (f32), 1e−3 otherwise. Mirrors th_tol_for() of the test harness. When the run's
 * context uses an opt-in table (attn_cli_use_isa_tolerance), bf16 takes that table's stated tolerance, 2e−2 for
 * out (both) and LSE (docs/SEMANTICS.md §7); f32/f16 operands run the default tables' arithmetic there. */
attn_cli_tol attn_cli_tol_for(attn_dtype dtype);
/* Selects the tolerances of the kernel table `isa` (a context's attn_ctx_isa) for attn_cli_tol_for. */
void attn_cli_use_isa_tolerance(const char *isa);
/* The opt-in table selected by attn_cli_use_isa_tolerance, or NULL. */
const char *attn_cli_opt_in_table(void);

typedef struct attn_cli_cmp {
    double max_abs_err;  /* max |got − expected| over compared elements (inf if any NaN)          */
    size_t num_compared; /* elements compared                                                    */
    size_t num_bad;      /* elements outside atol·vmax + rtol·|expected| (NaN counts as bad)      */
} attn_cli_cmp;

/* Accumulates the element-wise comparison of two views with equal shapes (any ndim <= ATTN_MAX_DIMS,
 * strides in elements, dtypes f32/f16/bf16) into *cmp (call attn_cli_cmp_init first). */
void attn_cli_cmp_init(attn_cli_cmp *cmp);
void attn_cli_compare(const attn_tensor *got, const attn_tensor *expected, attn_cli_tol tol, double vmax,
                      attn_cli_cmp *cmp);
/* Same for float32 LSE views: −inf must match −inf exactly; finite values within tol.lse_atol. The LSE error
 * is not folded into max_abs_err (outputs only); a mismatch increments num_bad. */
void attn_cli_compare_lse(const attn_tensor *got, const attn_tensor *expected, attn_cli_tol tol, attn_cli_cmp *cmp);

/* ================================================================================================
 * Results: one table (or one JSON document) per workload
 * ================================================================================================ */

/* One row of the results table. Fill with attn_cli_result_init(), then set what applies. */
typedef struct attn_cli_result {
    char name[64];          /* case name                                                     */
    char shape[96];         /* e.g. "1x2048/2048 h32/8 d128" (batch x seq_q/seq_k, heads, head size) */
    char options[96];       /* e.g. "bf16 causal lse"                                        */
    attn_cli_timing timing; /* repeats == 0: not timed                                     */
    double gflop;           /* per call; 0 = unknown                                          */
    int64_t rows_checked;   /* rows per sequence compared: -1 all, 0 none, r the last/first r */
    double max_abs_err;     /* valid if rows_checked != 0                                     */
    int ok;                 /* 1 ok, 0 failed (mismatch or an error status)                   */
    char error[160];        /* non-empty: the call failed, this is attn_last_error() or a note */
} attn_cli_result;

void attn_cli_result_init(attn_cli_result *r, const char *name);

typedef struct attn_cli_report {
    const attn_cli_env *env;
    const char *workload; /* printed in the title                           */
    void *json_cases;     /* cJSON array while --json (opaque here)          */
    int32_t num_rows;
    int32_t num_failed;
    double total_s; /* wall time since begin                          */
    double t0;
} attn_cli_report;

/* Display width of a UTF-8 string in terminal columns: one per code point, two for East Asian wide ones (CJK,
 * Hangul, fullwidth forms, emoji). Table cells are padded by it. */
size_t attn_cli_display_width(const char *s);

/* Starts a report: prints the title and the column header (text mode) with `note` under the title, e.g.
 * "oracle check on the last 64 query rows of each sequence". */
void attn_cli_report_begin(attn_cli_report *rep, const attn_cli_env *env, const char *workload, const char *note);
/* Prints one row (text) or appends it (JSON). Counts failures. In run mode also writes a progress line per case to
 * env->err ("attn run: case 3 done: NAME (ok, 12.5 s elapsed)"). */
void attn_cli_report_add(attn_cli_report *rep, const attn_cli_result *r);
/* Prints the summary (text) or the whole JSON document. Returns the exit code: ATTN_CLI_EXIT_MISMATCH if any
 * row failed, else ATTN_CLI_EXIT_OK. */
int attn_cli_report_end(attn_cli_report *rep);

/* Human-readable note about which rows are compared, for report_begin ("" if check_rows == 0). */
const char *attn_cli_check_note(const attn_cli_env *env, char *buf, size_t size);

#endif /* ATTN_CLI_UTIL_H */
