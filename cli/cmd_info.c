/*
 * cmd_info.c — `attn info`: library version (header and loaded library), CPU features detected at run time,
 * the kernel tables compiled in and which this CPU/OS can run, the table a context chooses (ATTN_ISA or
 * --isa overrides), and the thread count. Text or --json.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmd.h"

static const char attn_cmd_info_help[] =
    "Usage: attn info [--threads N] [--isa NAME] [--json]\n\n"
    "Prints the attn version, the CPU features detected at run time, the kernel tables compiled in and\n"
    "whether this CPU/OS can run them, the table chosen for a context (override: --isa or ATTN_ISA), and\n"
    "the thread count (override: --threads or OMP_NUM_THREADS, at most 1024). An ATTN_ISA value that names\n"
    "no usable table is reported as a warning (and ignored here); other commands refuse to run with it.\n\n"
    "Options:\n"
    "  --threads N   threads of the context shown\n"
    "  --isa NAME    kernel table of the context shown\n"
    "  --json        print one JSON object\n"
    "  --help        this text\n";

/* One JSON array of {name, usable} and one text list "name (usable), ..." per table list (attn_isa_name_fn). */

static void attn_info_isa_array(cJSON *o, const char *key, attn_isa_name_fn name_at) {
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int32_t i = 0; name_at(i); i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", name_at(i));
        cJSON_AddBoolToObject(e, "usable", attn_isa_available(name_at(i)) != 0);
        cJSON_AddItemToArray(arr, e);
    }
}

static void attn_info_isa_list(attn_isa_name_fn name_at) {
    for (int32_t i = 0; name_at(i); i++)
        printf(" %s (%s)%s", name_at(i), attn_isa_available(name_at(i)) ? "usable" : "not usable",
               name_at(i + 1) ? "," : "");
}

int attn_cmd_info(int argc, char **argv) {
    attn_cli_opts opts;
    const int prc = attn_cli_parse("info", argc, argv, ATTN_CLI_OPT_THREADS | ATTN_CLI_OPT_ISA | ATTN_CLI_OPT_JSON,
                                   attn_cmd_info_help, &opts);
    if (prc)
        return prc < 0 ? ATTN_CLI_EXIT_OK : prc;
    /* `attn info` must work whatever ATTN_ISA says: it is where a user looks up the usable tables */
    char bad_isa[64] = "", usable[128], warning[384] = "";
    attn_cli_usable_isas(usable, sizeof usable);
    if (attn_cli_bad_env_isa()) {
        snprintf(bad_isa, sizeof bad_isa, "%s", attn_cli_bad_env_isa());
        snprintf(warning, sizeof warning,
                 "ATTN_ISA=%s is unknown or not runnable on this CPU (ignored here; other commands refuse it); "
                 "usable kernel tables: %s",
                 bad_isa, usable);
        unsetenv("ATTN_ISA");
    }
    char omp_note[128] = "";
    const char *omp = getenv("OMP_NUM_THREADS");
    if (!opts.threads && omp && atol(omp) > ATTN_CLI_MAX_THREADS)
        snprintf(omp_note, sizeof omp_note, "OMP_NUM_THREADS=%.20s clamped to %d", omp, ATTN_CLI_MAX_THREADS);
    attn_cli_env env;
    const int erc = attn_cli_env_open("info", ATTN_CLI_MODE_RUN, &opts, &env);
    if (erc)
        return erc;
    const unsigned v = attn_version_number();
    const char *env_isa = getenv("ATTN_ISA");
    if (warning[0])
        fprintf(stderr, "attn info: warning: %s\n", warning);
    if (opts.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "version", attn_version_string());
        cJSON_AddStringToObject(o, "header_version", ATTN_VERSION_STRING);
        cJSON_AddNumberToObject(o, "version_number", v);
        cJSON_AddStringToObject(o, "cpu_features", attn_cpu_features());
        attn_info_isa_array(o, "isas", attn_isa_name);
        attn_info_isa_array(o, "opt_in_isas", attn_isa_opt_in_name); /* by name only: docs/SEMANTICS.md §7 */
        cJSON_AddStringToObject(o, "isa", attn_ctx_isa(env.ctx));
        cJSON_AddNumberToObject(o, "threads", env.num_threads);
        cJSON_AddNumberToObject(o, "max_threads", ATTN_CLI_MAX_THREADS);
        cJSON *warnings = cJSON_AddArrayToObject(o, "warnings");
        if (warning[0])
            cJSON_AddItemToArray(warnings, cJSON_CreateString(warning));
        if (omp_note[0])
            cJSON_AddItemToArray(warnings, cJSON_CreateString(omp_note));
        char *s = cJSON_Print(o);
        if (s)
            printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        printf("attn %s (library %u.%u.%u, header %s)\n", attn_version_string(), v / 10000, v / 100 % 100, v % 100,
               ATTN_VERSION_STRING);
        printf("cpu features:  %s\n", attn_cpu_features());
        printf("kernel tables:");
        attn_info_isa_list(attn_isa_name);
        if (attn_isa_opt_in_name(0)) { /* never chosen by default; selected by name (docs/SEMANTICS.md §7) */
            printf("\nopt-in tables:");
            attn_info_isa_list(attn_isa_opt_in_name);
        }
        if (opts.isa)
            printf("\nchosen kernels: %s (--isa)\n", attn_ctx_isa(env.ctx));
        else if (env_isa && *env_isa)
            printf("\nchosen kernels: %s (ATTN_ISA=%s)\n", attn_ctx_isa(env.ctx), env_isa);
        else if (bad_isa[0])
            printf("\nchosen kernels: %s (best for this CPU; ATTN_ISA=%s ignored: not usable)\n",
                   attn_ctx_isa(env.ctx), bad_isa);
        else
            printf("\nchosen kernels: %s (best for this CPU)\n", attn_ctx_isa(env.ctx));
        printf("threads:       %d%s%s%s\n", (int)env.num_threads, omp_note[0] ? " (" : "", omp_note,
               omp_note[0] ? ")" : "");
        if (warning[0])
            printf("warning:       %s\n", warning);
    }
    attn_cli_env_close(&env);
    return ATTN_CLI_EXIT_OK;
}
