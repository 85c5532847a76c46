/*
 * cmd_run.c — `attn run`: runs a workload (default: the built-in Llama-3-8B mix) and prints one table row
 * per case: shape, options, median time, GFLOP, GFLOP/s and the max abs error vs the oracle on the last
 * --check-rows query rows of each sequence (64 by default; the oracle is scalar double and slow).
 */
#include <stdio.h>

#include "cmd.h"

static const char attn_cmd_run_help[] =
    "Usage: attn run [--workload NAME|FILE] [--threads N] [--isa NAME] [--repeats N] [--check-rows R|all]\n"
    "                [--json] [--force]\n\n"
    "Runs each case of a workload: 1 warm-up call, then N timed calls (default 3, or the case's \"repeats\");\n"
    "prints shape, options, median time, GFLOP (visible (q,k) pairs only), GFLOP/s and the max abs error\n"
    "against the oracle on the last R query rows of each sequence (default 64; first rows for top-left\n"
    "causal). Exit 1 if any case fails or exceeds the tolerance.\n\n"
    "Options:\n"
    "  --workload NAME|FILE  built-in workload or JSON file (default: default)\n"
    "  --threads N           threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --isa NAME            kernel table: generic, avx2, avx512, neon; opt-in: avx512bf16, amx\n"
    "  --repeats N           timed calls per case (1..4096)\n"
    "  --check-rows R|all    query rows per sequence compared with the oracle (0 = none)\n"
    "  --json                print one JSON document instead of the table\n"
    "  --force               run cases above the size limits (2000 GFLOP per call, 200 GFLOP of oracle work)\n"
    "  --help                this text\n";

int attn_cmd_run(int argc, char **argv) {
    attn_cli_opts opts;
    const int prc = attn_cli_parse("run", argc, argv,
                                   ATTN_CLI_OPT_WORKLOAD | ATTN_CLI_OPT_THREADS | ATTN_CLI_OPT_ISA |
                                       ATTN_CLI_OPT_REPEATS | ATTN_CLI_OPT_CHECK_ROWS | ATTN_CLI_OPT_JSON |
                                       ATTN_CLI_OPT_FORCE,
                                   attn_cmd_run_help, &opts);
    if (prc)
        return prc < 0 ? ATTN_CLI_EXIT_OK : prc;
    if (!opts.workload)
        opts.workload = "default";
    attn_cli_env env;
    const int erc = attn_cli_env_open("run", ATTN_CLI_MODE_RUN, &opts, &env);
    if (erc)
        return erc;
    const int rc = attn_cli_run_workload(&env);
    attn_cli_env_close(&env);
    return rc;
}
