/*
 * workload.h — the workload model of the `attn` CLI: a named list of attention cases (dense BSND/BNSD or
 * packed varlen), loaded from JSON files (cJSON) with error messages that name the key path, or taken from
 * the built-in registry. The registry also holds workloads that run themselves (serving, diffusion): each
 * such file exports one `int attn_wl_<name>_run(const attn_cli_env *env)`. See cli/README.md.
 */
#ifndef ATTN_CLI_WORKLOAD_H
#define ATTN_CLI_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ================================================================================================
 * The case model
 * ================================================================================================ */

typedef enum attn_wl_layout {
    ATTN_WL_LAYOUT_BSND = 0,  /* attn_forward, [batch, seq, heads, head_size]        */
    ATTN_WL_LAYOUT_BNSD = 1,  /* attn_forward, [batch, heads, seq, head_size]        */
    ATTN_WL_LAYOUT_VARLEN = 2 /* attn_forward_varlen, [total, heads, head_size]      */
} attn_wl_layout;

#define ATTN_WL_MAX_SEQS  256 /* varlen sequences per case */
#define ATTN_WL_MAX_CASES 256

typedef struct attn_wl_case {
    char name[64];
    attn_wl_layout layout;
    int64_t batch;                     /* number of sequences (varlen: length of the seq lists)          */
    int64_t seq_q[ATTN_WL_MAX_SEQS];   /* dense: seq_q[0] for every sequence; varlen: per sequence         */
    int64_t seq_k[ATTN_WL_MAX_SEQS];   /* idem                                                            */
    int64_t num_heads;                 /* query heads                                                     */
    int64_t num_kv_heads;              /* key/value heads (divides num_heads)                             */
    int64_t head_size;                 /* q/k head size                                                   */
    int64_t head_size_v;               /* v/out head size                                                 */
    attn_dtype dtype;                  /* q and out                                                       */
    attn_dtype kv_dtype;               /* k and v                                                         */
    int32_t causal;                    /* attn_causal                                                     */
    int32_t window_left, window_right; /* −1 = unbounded                                                  */
    float softcap;                     /* 0 = off                                                         */
    float softmax_scale;               /* 0 = 1/sqrt(head_size)                                           */
    int alibi;                         /* standard ALiBi slopes                                           */
    int sinks;                         /* random per-head sink logits in [−1, 1)                          */
    int lse;                           /* also produce (and check) the LSE                                */
    uint64_t seed;                     /* data seed                                                       */
    int32_t repeats;                   /* timed calls; 0 = the mode's default                             */
} attn_wl_case;

/* Defaults: BSND, batch 1, seq 1/1, heads 1/1, head size 64/64, f32/f32, no causal, window (−1, −1), no
 * softcap/alibi/sinks/lse, seed 1, repeats 0. */
void attn_wl_case_init(attn_wl_case *c, const char *name);

typedef struct attn_workload {
    char name[64];
    char description[160];
    int32_t num_cases;
    attn_wl_case *cases; /* [num_cases], owned (attn_workload_free) */
} attn_workload;

/* Appends a copy of *c (grows the array). Returns 0, or −1 when full/out of memory. */
int attn_workload_add(attn_workload *wl, const attn_wl_case *c);
void attn_workload_free(attn_workload *wl);

/* Total query rows / key rows of a case (sum over sequences). */
int64_t attn_wl_case_total_q(const attn_wl_case *c);
int64_t attn_wl_case_total_k(const attn_wl_case *c);

/* ================================================================================================
 * JSON
 * ================================================================================================ */

/* Parses a workload from JSON text. On failure returns −1 and writes a message to err (size errsize) of
 * the form "<where>: <key path>: <problem>", e.g. "cases[2].window: expected [left, right] integers",
 * or "line 4, column 9: JSON syntax error near '}'". `where` prefixes the message (a file name). */
int attn_workload_parse(const char *text, const char *where, attn_workload *wl, char *err, size_t errsize);
/* Reads and parses a file. Same error contract ("cannot read 'x': No such file or directory"). */
int attn_workload_load_file(const char *path, attn_workload *wl, char *err, size_t errsize);

/* ================================================================================================
 * The built-in registry
 * ================================================================================================ */

/* A built-in workload: either data (build fills a list of cases run by attn_wl_run_cases) or code (run
 * executes everything itself and returns an ATTN_CLI_EXIT_* code). Exactly one of build/run is set. */
typedef struct attn_wl_entry {
    const char *name;                    /* --workload NAME                                  */
    const char *summary;                 /* one line for --help                              */
    int (*build)(attn_workload *wl);     /* returns 0, or −1 (out of memory) */
    int (*run)(const attn_cli_env *env); /* returns ATTN_CLI_EXIT_*          */
} attn_wl_entry;

/* The registry (NULL-name terminated) and lookup by name (NULL if none). */
const attn_wl_entry *attn_wl_registry(void);
const attn_wl_entry *attn_wl_find(const char *name);

/* Builders and runners of the built-ins (one per file: wl_default.c, wl_serving.c, wl_diffusion.c). */
int attn_wl_default_build(attn_workload *wl); /* Llama-3-8B mix: prefill 512–2048, chunked, decode  */
int attn_wl_check_build(attn_workload *wl);   /* small cases over every option (attn check default) */
int attn_wl_serving_run(const attn_cli_env *env);
int attn_wl_diffusion_run(const attn_cli_env *env);
#ifdef ATTN_CLI_MPI
int attn_wl_cp_run(const attn_cli_env *env); /* wl_cp.c: context parallelism over MPI */
#endif

/* ================================================================================================
 * Running cases
 * ================================================================================================ */

/* Runs one case in env's mode: allocates and fills q/k/v, times attn_forward/attn_forward_varlen, compares
 * env->check_rows rows per sequence with the oracle, and fills *r. Returns 0, or −1 if the case could not be
 * set up (allocation failure; r->error says so). */
int attn_wl_run_case(const attn_cli_env *env, const attn_wl_case *c, attn_cli_result *r);
/* Compute-size guard (`--force` lifts it): a case may need at most ATTN_CLI_MAX_FAST_GFLOP per attention call
 * and ATTN_CLI_MAX_ORACLE_GFLOP of oracle work for the rows it compares (the oracle runs ~1 GFLOP/s). */
#define ATTN_CLI_MAX_FAST_GFLOP 2000.0
#define ATTN_CLI_MAX_ORACLE_GFLOP 200.0

/* Estimated GFLOP of one fast call and of the oracle on `check_rows` rows per sequence (−1 all, 0 none),
 * counting visible (q, k) pairs only (attn_cli_gflop). */
void attn_wl_case_cost(const attn_wl_case *c, int64_t check_rows, double *fast_gflop, double *oracle_gflop);
/* ATTN_CLI_EXIT_OK if every case is within the limits (or env->force), else prints a message naming the case,
 * its estimates and the limits to env->err and returns ATTN_CLI_EXIT_USAGE. */
int attn_wl_check_cost(const attn_cli_env *env, const attn_workload *wl);
/* Runs every case of a workload with one report (after attn_wl_check_cost). Returns the ATTN_CLI_EXIT_* code. */
int attn_wl_run_cases(const attn_cli_env *env, const attn_workload *wl);

#endif /* ATTN_CLI_WORKLOAD_H */
