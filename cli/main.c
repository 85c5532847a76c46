/*
 * main.c — entry of the `attn` CLI: the subcommand table (run | check | bench | info), the option parser
 * shared by every subcommand, context set-up, and workload resolution (built-in name or JSON file).
 * Exit codes: 0 ok, 1 oracle mismatch, 2 usage error (bad flag/value, unknown or malformed workload).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "workload.h"

/* ---------------------------------------------------------------------------------------------
 * Option parsing
 * --------------------------------------------------------------------------------------------- */
static int attn_cli_usage_error(const char *command, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "attn %s: ", command);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\nTry 'attn %s --help'.\n", command);
    return ATTN_CLI_EXIT_USAGE;
}

/* Parses a decimal integer in [lo, hi]; returns 0 on success. */
static int attn_cli_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s)
        return -1;
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int attn_cli_parse(const char *command, int argc, char **argv, unsigned allowed, const char *help,
                   attn_cli_opts *opts) {
    static const struct {
        const char *name;
        unsigned bit;
        int takes_value;
    } flags[] = {{"--workload", ATTN_CLI_OPT_WORKLOAD, 1},
                 {"--threads", ATTN_CLI_OPT_THREADS, 1},
                 {"--isa", ATTN_CLI_OPT_ISA, 1},
                 {"--repeats", ATTN_CLI_OPT_REPEATS, 1},
                 {"--check-rows", ATTN_CLI_OPT_CHECK_ROWS, 1},
                 {"--json", ATTN_CLI_OPT_JSON, 0},
                 {"--force", ATTN_CLI_OPT_FORCE, 0}};
    memset(opts, 0, sizeof *opts);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            fputs(help, stdout);
            if (allowed & ATTN_CLI_OPT_WORKLOAD) {
                fputs("\nWorkloads:\n", stdout);
                attn_cli_print_workloads(stdout);
            }
            return -1;
        }
        const char *eq = strchr(arg, '=');
        const size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        int found = -1;
        for (int f = 0; f < (int)(sizeof flags / sizeof flags[0]); f++)
            if (strlen(flags[f].name) == name_len && strncmp(arg, flags[f].name, name_len) == 0)
                found = f;
        if (found < 0 || !(allowed & flags[found].bit)) {
            if (arg[0] != '-')
                return attn_cli_usage_error(command, "unexpected argument '%s'%s", arg, "");
            if (found >= 0 && flags[found].bit == ATTN_CLI_OPT_REPEATS && strcmp(command, "check") == 0)
                return attn_cli_usage_error(command, "unknown option '%s'%s", arg,
                                            " (check runs each case once; `attn run --repeats N` times it)");
            return attn_cli_usage_error(command, "unknown option '%s'%s", arg, "");
        }
        const char *value = NULL;
        if (flags[found].takes_value) {
            if (eq)
                value = eq + 1;
            else if (i + 1 < argc)
                value = argv[++i];
            else
                return attn_cli_usage_error(command, "option '%s' needs a value%s", flags[found].name, "");
        } else if (eq) {
            return attn_cli_usage_error(command, "option '%s' takes no value%s", flags[found].name, "");
        }
        int64_t x = 0;
        switch (flags[found].bit) {
        case ATTN_CLI_OPT_WORKLOAD:
            if (!*value)
                return attn_cli_usage_error(command, "--workload: empty name%s%s", "", "");
            opts->workload = value;
            break;
        case ATTN_CLI_OPT_THREADS:
            if (attn_cli_parse_int(value, 1, 1024, &x))
                return attn_cli_usage_error(command, "--threads: expected an integer in 1..1024, got '%s'%s", value,
                                            "");
            opts->threads = (int32_t)x;
            break;
        case ATTN_CLI_OPT_ISA:
            opts->isa = value;
            break;
        case ATTN_CLI_OPT_REPEATS:
            if (attn_cli_parse_int(value, 1, 4096, &x))
                return attn_cli_usage_error(command, "--repeats: expected an integer in 1..4096, got '%s'%s", value,
                                            "");
            opts->repeats = (int32_t)x;
            break;
        case ATTN_CLI_OPT_CHECK_ROWS:
            if (strcmp(value, "all") == 0)
                x = -1;
            else if (attn_cli_parse_int(value, 0, INT32_MAX, &x))
                return attn_cli_usage_error(command, "--check-rows: expected 'all' or an integer >= 0, got '%s'%s",
                                            value, "");
            opts->check_rows = x;
            opts->check_rows_set = 1;
            break;
        case ATTN_CLI_OPT_JSON:
            opts->json = 1;
            break;
        case ATTN_CLI_OPT_FORCE:
            opts->force = 1;
            break;
        default:
            break;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Environment
 * --------------------------------------------------------------------------------------------- */
/* Appends ", name<suffix>" for every table of the list that this CPU/OS can run; returns the new length. */
static size_t attn_cli_append_usable(char *buf, size_t size, size_t len, attn_isa_name_fn name_at, const char *suffix) {
    for (int32_t i = 0; name_at(i); i++)
        if (attn_isa_available(name_at(i)) && len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s%s", len ? ", " : "", name_at(i), suffix);
    return len;
}

size_t attn_cli_usable_isas(char *buf, size_t size) {
    buf[0] = '\0';
    const size_t len = attn_cli_append_usable(buf, size, 0, attn_isa_name, "");
    return attn_cli_append_usable(buf, size, len, attn_isa_opt_in_name, " (opt-in)"); /* docs/SEMANTICS.md §7 */
}

const char *attn_cli_bad_env_isa(void) {
    const char *v = getenv("ATTN_ISA");
    return v && *v && !attn_isa_available(v) ? v : NULL;
}

int attn_cli_env_open(const char *command, attn_cli_mode mode, const attn_cli_opts *opts, attn_cli_env *env) {
    memset(env, 0, sizeof *env);
    char usable[128];
    attn_cli_usable_isas(usable, sizeof usable);
    const char *bad_isa = attn_cli_bad_env_isa();
    if (bad_isa && !opts->isa) {
        fprintf(stderr,
                "attn %s: ATTN_ISA=%s is unknown or not runnable on this CPU; usable kernel tables: %s\n"
                "Set ATTN_ISA to one of them, unset it, or pass --isa NAME.\n",
                command, bad_isa, usable);
        return ATTN_CLI_EXIT_USAGE;
    }
    if (bad_isa) /* --isa NAME overrides the environment */
        unsetenv("ATTN_ISA");
    attn_ctx *ctx = NULL;
    attn_status st = attn_ctx_create(&ctx);
    if (st != ATTN_STATUS_OK) {
        fprintf(stderr, "attn %s: cannot create a context: %s: %s\n", command, attn_status_string(st),
                attn_last_error());
        return ATTN_CLI_EXIT_USAGE;
    }
    /* the API accepts 1..ATTN_CLI_MAX_THREADS threads; a larger OMP_NUM_THREADS default is clamped */
    if (!opts->threads && attn_ctx_num_threads(ctx) > ATTN_CLI_MAX_THREADS &&
        (st = attn_ctx_set_num_threads(ctx, ATTN_CLI_MAX_THREADS)) != ATTN_STATUS_OK) {
        fprintf(stderr, "attn %s: cannot use %d threads: %s\n", command, ATTN_CLI_MAX_THREADS, attn_last_error());
        attn_ctx_destroy(ctx);
        return ATTN_CLI_EXIT_USAGE;
    }
    if (opts->threads > 0 && (st = attn_ctx_set_num_threads(ctx, opts->threads)) != ATTN_STATUS_OK) {
        fprintf(stderr, "attn %s: --threads %d: %s\n", command, (int)opts->threads, attn_last_error());
        attn_ctx_destroy(ctx);
        return ATTN_CLI_EXIT_USAGE;
    }
    if (opts->isa && (st = attn_ctx_set_isa(ctx, opts->isa)) != ATTN_STATUS_OK) {
        fprintf(stderr, "attn %s: --isa %s: %s\n", command, opts->isa, attn_last_error());
        fprintf(stderr, "Kernel tables usable here: %s\n", usable);
        attn_ctx_destroy(ctx);
        return ATTN_CLI_EXIT_USAGE;
    }
    env->ctx = ctx;
    attn_cli_use_isa_tolerance(attn_ctx_isa(ctx)); /* an opt-in table is checked with its own tolerance */
    env->mode = mode;
    env->command = command;
    env->workload = opts->workload;
    env->num_threads = attn_ctx_num_threads(ctx);
    env->repeats = opts->repeats;
    env->warmup = mode == ATTN_CLI_MODE_CHECK ? 0 : 1;
    env->json = opts->json;
    env->force = opts->force;
    env->progress = isatty(fileno(stderr)) && !opts->json;
    env->out = stdout;
    env->err = stderr;
    if (mode == ATTN_CLI_MODE_BENCH)
        env->check_rows = 0;
    else if (opts->check_rows_set)
        env->check_rows = opts->check_rows;
    else
        env->check_rows = mode == ATTN_CLI_MODE_CHECK ? -1 : 64;
    return 0;
}

void attn_cli_env_close(attn_cli_env *env) {
    attn_ctx_destroy(env->ctx);
    env->ctx = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Workloads
 * --------------------------------------------------------------------------------------------- */
void attn_cli_print_workloads(FILE *f) {
    for (const attn_wl_entry *e = attn_wl_registry(); e->name; e++)
        fprintf(f, "  %-10s %s\n", e->name, e->summary);
    fprintf(f, "  FILE       a JSON workload file (schema: cli/README.md, example: cli/examples/small.json)\n");
}

static int attn_cli_looks_like_path(const char *s) {
    const size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n > 5 && strcmp(s + n - 5, ".json") == 0);
}

int attn_cli_run_workload(const attn_cli_env *env) {
    const char *name = env->workload;
    const attn_wl_entry *e = attn_wl_find(name);
    attn_workload wl;
    if (e && e->run)
        return e->run(env);
    if (e) {
        if (e->build(&wl)) {
            fprintf(stderr, "attn %s: out of memory building workload '%s'\n", env->command, name);
            return ATTN_CLI_EXIT_USAGE;
        }
    } else {
        char err[512];
        if (!attn_cli_looks_like_path(name) && access(name, F_OK) != 0) {
            fprintf(stderr, "attn %s: unknown workload '%s': not a built-in (", env->command, name);
            for (const attn_wl_entry *r = attn_wl_registry(); r->name; r++)
                fprintf(stderr, "%s%s", r == attn_wl_registry() ? "" : ", ", r->name);
            fprintf(stderr, ") and no such file\n");
            return ATTN_CLI_EXIT_USAGE;
        }
        if (attn_workload_load_file(name, &wl, err, sizeof err)) {
            fprintf(stderr, "attn %s: invalid workload: %s\n", env->command, err);
            return ATTN_CLI_EXIT_USAGE;
        }
    }
    const int rc = attn_wl_run_cases(env, &wl);
    attn_workload_free(&wl);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Subcommand table
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_cli_command {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv);
} attn_cli_command;

static const attn_cli_command attn_cli_commands[] = {
    {"run", "run a workload: time, GFLOP/s and max error vs the oracle per case", attn_cmd_run},
    {"check", "compare a workload with the oracle; exit 1 on any mismatch", attn_cmd_check},
    {"bench", "repeated timing of a workload: min and median per case", attn_cmd_bench},
    {"info", "version, CPU features, kernel tables, thread count", attn_cmd_info},
    {NULL, NULL, NULL}};

static void attn_cli_main_help(FILE *f) {
    fprintf(f,
            "Usage: attn <command> [options]\n"
            "       attn <command> --help | attn --help | attn --version\n\n"
            "attn %s: exact attention for LLM serving and diffusion on CPUs.\n\nCommands:\n",
            attn_version_string());
    for (const attn_cli_command *c = attn_cli_commands; c->name; c++)
        fprintf(f, "  %-6s %s\n", c->name, c->summary);
    fprintf(f, "\nWorkloads (--workload NAME|FILE):\n");
    attn_cli_print_workloads(f);
    fprintf(f, "\nExit codes: 0 ok, 1 oracle mismatch, 2 usage error.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        attn_cli_main_help(stderr);
        return ATTN_CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        if (strcmp(cmd, "help") == 0 && argc > 2) {
            for (const attn_cli_command *c = attn_cli_commands; c->name; c++)
                if (strcmp(c->name, argv[2]) == 0) {
                    char *sub[] = {argv[2], (char *)"--help", NULL};
                    return c->main(2, sub);
                }
            fprintf(stderr, "attn: unknown command '%s'\nTry 'attn --help'.\n", argv[2]);
            return ATTN_CLI_EXIT_USAGE;
        }
        if (strcmp(cmd, "help") != 0 && argc > 2) {
            fprintf(stderr, "attn: %s takes no arguments, got '%s' (use 'attn %s --help')\n", cmd, argv[2], argv[2]);
            return ATTN_CLI_EXIT_USAGE;
        }
        attn_cli_main_help(stdout);
        return ATTN_CLI_EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0) {
        if (argc > 2) {
            fprintf(stderr, "attn: %s takes no arguments, got '%s'\nTry 'attn --help'.\n", cmd, argv[2]);
            return ATTN_CLI_EXIT_USAGE;
        }
        printf("attn %s\n", attn_version_string());
        return ATTN_CLI_EXIT_OK;
    }
    for (const attn_cli_command *c = attn_cli_commands; c->name; c++)
        if (strcmp(c->name, cmd) == 0)
            return c->main(argc - 1, argv + 1);
    if (cmd[0] == '-')
        fprintf(stderr, "attn: unknown option '%s'\nTry 'attn --help'.\n", cmd);
    else
        fprintf(stderr, "attn: unknown command '%s'\nTry 'attn --help'.\n", cmd);
    return ATTN_CLI_EXIT_USAGE;
}
