/*
 * cmd_check.c — `attn check`: runs each case of a workload once (default: the built-in `check` workload of
 * small cases covering every option) and compares every query row with the oracle; exit 1 on any mismatch
 * beyond the per-dtype tolerance. No timing.
 */
#include <stdio.h>

#include "cmd.h"

static const char attn_cmd_check_help[] =
    "Usage: attn check [--workload NAME|FILE] [--threads N] [--isa NAME] [--check-rows R|all] [--json]\n"
    "                  [--force]\n\n"
    "Runs each case once and compares the outputs (and LSE where requested) with the oracle (scalar, double\n"
    "accumulation). Tolerance per output dtype: f32 2e-5*max|V| + 1e-5*|ref|, f16 2e-3 (both terms), bf16\n"
    "1e-2 (both terms); LSE 2e-5 (f32) / 1e-3. Exit 0 if every case matches, 1 otherwise.\n\n"
    "Options:\n"
    "  --workload NAME|FILE  built-in workload or JSON file (default: check)\n"
    "  --threads N           threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --isa NAME            kernel table: generic, avx2, avx512, neon; opt-in: avx512bf16, amx\n"
    "  --check-rows R|all    compare only the last R query rows of each sequence (default: all)\n"
    "  --json                print one JSON document instead of the table\n"
    "  --force               run cases above the size limits (2000 GFLOP per call, 200 GFLOP of oracle work)\n"
    "  --help                this text\n";

int attn_cmd_check(int argc, char **argv) {
    attn_cli_opts opts;
    const int prc = attn_cli_parse("check", argc, argv,
                                   ATTN_CLI_OPT_WORKLOAD | ATTN_CLI_OPT_THREADS | ATTN_CLI_OPT_ISA |
                                       ATTN_CLI_OPT_CHECK_ROWS | ATTN_CLI_OPT_JSON | ATTN_CLI_OPT_FORCE,
                                   attn_cmd_check_help, &opts);
    if (prc)
        return prc < 0 ? ATTN_CLI_EXIT_OK : prc;
    if (!opts.workload)
        opts.workload = "check";
    if (opts.check_rows_set && opts.check_rows == 0) {
        fprintf(stderr, "attn check: --check-rows 0 would compare nothing\nTry 'attn check --help'.\n");
        return ATTN_CLI_EXIT_USAGE;
    }
    attn_cli_env env;
    const int erc = attn_cli_env_open("check", ATTN_CLI_MODE_CHECK, &opts, &env);
    if (erc)
        return erc;
    const int rc = attn_cli_run_workload(&env);
    attn_cli_env_close(&env);
    return rc;
}
