/*
 * cmd_bench.c — `attn bench`: repeated timing of a workload (default: the built-in Llama-3-8B mix): one
 * warm-up call, then N timed calls per case (default 10), reporting min and median time and GFLOP/s at
 * the min. A progress indicator is drawn on stderr only when stderr is a TTY. No oracle comparison.
 */
#include <stdio.h>

#include "cmd.h"

static const char attn_cmd_bench_help[] =
    "Usage: attn bench [--workload NAME|FILE] [--threads N] [--isa NAME] [--repeats N] [--json]\n"
    "                  [--force]\n\n"
    "Times each case of a workload: 1 warm-up call, then N timed calls (default 10, or the case's\n"
    "\"repeats\" when --repeats is not given); prints min and median time and GFLOP/s at the min.\n"
    "Progress is shown on stderr when it is a terminal. No oracle comparison (use `attn check`).\n\n"
    "Options:\n"
    "  --workload NAME|FILE  built-in workload or JSON file (default: default)\n"
    "  --threads N           threads (default: OMP_NUM_THREADS or all cores)\n"
    "  --isa NAME            kernel table: generic, avx2, avx512, neon; opt-in: avx512bf16, amx\n"
    "  --repeats N           timed calls per case (1..4096)\n"
    "  --json                print one JSON document instead of the table\n"
    "  --force               run cases above the size limits (2000 GFLOP per call)\n"
    "  --help                this text\n";

int attn_cmd_bench(int argc, char **argv) {
    attn_cli_opts opts;
    const int prc = attn_cli_parse("bench", argc, argv,
                                   ATTN_CLI_OPT_WORKLOAD | ATTN_CLI_OPT_THREADS | ATTN_CLI_OPT_ISA |
                                       ATTN_CLI_OPT_REPEATS | ATTN_CLI_OPT_JSON | ATTN_CLI_OPT_FORCE,
                                   attn_cmd_bench_help, &opts);
    if (prc)
        return prc < 0 ? ATTN_CLI_EXIT_OK : prc;
    if (!opts.workload)
        opts.workload = "default";
    attn_cli_env env;
    const int erc = attn_cli_env_open("bench", ATTN_CLI_MODE_BENCH, &opts, &env);
    if (erc)
        return erc;
    const int rc = attn_cli_run_workload(&env);
    attn_cli_env_close(&env);
    return rc;
}
