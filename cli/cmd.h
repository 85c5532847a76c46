/*
 * cmd.h — the subcommands of the `attn` CLI and the option parsing/environment set-up they share
 * (implemented in main.c). Workloads never include this; they see only util.h and workload.h.
 */
#ifndef ATTN_CLI_CMD_H
#define ATTN_CLI_CMD_H

#include <stdint.h>

#include "util.h"

/* Flags a subcommand accepts (bit set). --help is always accepted. */
enum {
    ATTN_CLI_OPT_WORKLOAD = 1 << 0,   /* --workload NAME|FILE                 */
    ATTN_CLI_OPT_THREADS = 1 << 1,    /* --threads N (1..1024)                */
    ATTN_CLI_OPT_ISA = 1 << 2,        /* --isa NAME                           */
    ATTN_CLI_OPT_REPEATS = 1 << 3,    /* --repeats N (1..4096)                */
    ATTN_CLI_OPT_CHECK_ROWS = 1 << 4, /* --check-rows R|all                   */
    ATTN_CLI_OPT_JSON = 1 << 5,       /* --json                               */
    ATTN_CLI_OPT_FORCE = 1 << 6       /* --force: run cases over the size limits */
};

#define ATTN_CLI_MAX_THREADS 1024 /* attn_ctx_set_num_threads accepts 1..1024 */

typedef struct attn_cli_opts {
    const char *workload; /* NULL = the command's default            */
    int32_t threads;      /* 0 = library default                     */
    const char *isa;      /* NULL = library default (or ATTN_ISA)    */
    int32_t repeats;      /* 0 = default                             */
    int64_t check_rows;   /* valid if check_rows_set; −1 = all       */
    int check_rows_set;
    int json;
    int force;            /* --force                                 */
} attn_cli_opts;

/* Parses argv[1..argc) (argv[0] is the command name). Accepts "--flag value" and "--flag=value".
 * Returns 0 to go on; −1 after printing `help` (plus the workload list if --workload is allowed) to stdout
 * (--help; the command exits 0); 2 after printing a message naming the bad flag or value to stderr (the
 * command exits 2). */
int attn_cli_parse(const char *command, int argc, char **argv, unsigned allowed, const char *help, attn_cli_opts *opts);
/* Creates the context (threads, ISA) and fills env. Returns 0 or 2 (message printed). */
int attn_cli_env_open(const char *command, attn_cli_mode mode, const attn_cli_opts *opts, attn_cli_env *env);
void attn_cli_env_close(attn_cli_env *env);
/* Resolves env->workload (a built-in name or a JSON file) and runs it. Returns the exit code. */
int attn_cli_run_workload(const attn_cli_env *env);
/* A kernel-table list: attn_isa_name (the default tables) or attn_isa_opt_in_name, each NULL past its end. */
typedef const char *(*attn_isa_name_fn)(int32_t index);
/* Writes the usable kernel tables, comma-separated, the opt-in ones marked ("generic, avx2, avx512,
 * avx512bf16 (opt-in)"), to buf; returns the length. */
size_t attn_cli_usable_isas(char *buf, size_t size);
/* The value of ATTN_ISA if it is set, non-empty and names no usable table; else NULL. */
const char *attn_cli_bad_env_isa(void);
/* Lists the built-in workloads, one per line with its summary, for --help texts. */
void attn_cli_print_workloads(FILE *f);

int attn_cmd_run(int argc, char **argv);
int attn_cmd_check(int argc, char **argv);
int attn_cmd_bench(int argc, char **argv);
int attn_cmd_info(int argc, char **argv);

#endif /* ATTN_CLI_CMD_H */
