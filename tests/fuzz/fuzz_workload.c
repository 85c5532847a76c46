/*
 * fuzz_workload.c — libFuzzer target of the `attn` CLI's workload parser: the input is JSON text
 * given to attn_workload_parse (cli/workload.c, the function `attn run/check/bench --workload FILE` calls; it
 * returns −1 with a message and never exits the process). A failure must leave a message naming where it is
 * ("fuzz: cases[2].window: ..."), a success a workload whose every case holds the parser's documented bounds,
 * and the case-cost estimate (attn_wl_case_cost, what `--force` guards) must be computable for every parsed case.
 * Nothing here runs attention. Built as the libFuzzer binary fuzz_workload with -DATTN_FUZZ=ON and, always, into
 * the corpus replay ctest (tests/fuzz/test_fuzz_replay.c, tests/fuzz/corpus/workload/).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

/* Inputs above this are cut (the parser's cost is linear in the text; libFuzzer's -max_len keeps them small). */
#define FZ_WORKLOAD_MAX_TEXT (64 << 10)

int fz_workload_last_rc;
char fz_workload_last_msg[512];

static int fz_workload_run(const uint8_t *data, size_t size) {
    if (size > FZ_WORKLOAD_MAX_TEXT) size = FZ_WORKLOAD_MAX_TEXT;
    char *text = (char *)malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* the parser takes C text: an embedded NUL ends it */
    attn_workload wl;
    char err[512];
    memset(err, 0, sizeof err);
    const int rc = attn_workload_parse(text, "fuzz", &wl, err, sizeof err);
    fz_workload_last_rc = rc;
    snprintf(fz_workload_last_msg, sizeof fz_workload_last_msg, "%s", err);
    if (rc != 0) {
        /* Every failure says where: "fuzz: <key path or line/column>: <problem>". */
        if (rc != -1 || strncmp(err, "fuzz", 4) != 0 || wl.cases != NULL) abort();
    } else {
        if (wl.num_cases < 0 || wl.num_cases > ATTN_WL_MAX_CASES || (wl.num_cases > 0 && !wl.cases)) abort();
        if (memchr(wl.name, '\0', sizeof wl.name) == NULL || memchr(wl.description, '\0', sizeof wl.description) == NULL)
            abort();
        for (int32_t i = 0; i < wl.num_cases; i++) {
            const attn_wl_case *c = &wl.cases[i];
            if (memchr(c->name, '\0', sizeof c->name) == NULL) abort();
            if (c->batch < 0 || (c->layout == ATTN_WL_LAYOUT_VARLEN && c->batch > ATTN_WL_MAX_SEQS)) abort();
            if ((unsigned)c->layout > ATTN_WL_LAYOUT_VARLEN) abort();
            /* The estimate walks every query row (attn_cli_visible_pairs): only on cases of <= 2^16 rows, so
             * one input stays cheap (the parser itself bounds the rows; see cli/README.md). */
            double fast = 0.0, oracle = 0.0;
            if (attn_wl_case_total_q(c) <= (1 << 16)) {
                attn_wl_case_cost(c, -1, &fast, &oracle);
                if (isnan(fast) || isnan(oracle) || fast < 0.0 || oracle < 0.0) abort();
                attn_wl_case_cost(c, 1, &fast, &oracle);
                if (isnan(fast) || isnan(oracle) || fast < 0.0 || oracle < 0.0) abort();
            }
            (void)attn_wl_case_total_q(c);
            (void)attn_wl_case_total_k(c);
        }
    }
    attn_workload_free(&wl);
    free(text);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fz_workload_run(data, size); }
#endif
