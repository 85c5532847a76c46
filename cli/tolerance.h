/*
 * tolerance.h — the per-dtype tolerances of a fast-path result against the oracle (docs/SEMANTICS.md §6), the
 * one definition that the test harness (th_tol_for, tests/harness/harness.c) and `attn check` / `attn run`
 * (attn_cli_tol_for, cli/util.c) both read. Header-only over the public dtype enum, so the CLI stays a client of
 * include/ alone. The widened tolerances (opt-in tables, logit magnitude, quantized attention) are derived
 * from these by their users.
 */
#ifndef ATTN_CLI_TOLERANCE_H
#define ATTN_CLI_TOLERANCE_H

#include "attn/attn.h"

/* |got − expected| <= atol·max|V| + rtol·|expected| on outputs, |Δlse| <= lse_atol (natural log) on the LSE. */
static inline void attn_tolerance_for(attn_dtype dtype, double *atol, double *rtol, double *lse_atol) {
    switch (dtype) {
    case ATTN_DTYPE_F16: /* output rounding 2^-11 relative plus f32 accumulation */
        *atol = 2e-3, *rtol = 2e-3, *lse_atol = 1e-3;
        break;
    case ATTN_DTYPE_BF16: /* output rounding 2^-8 relative */
        *atol = 1e-2, *rtol = 1e-2, *lse_atol = 1e-3;
        break;
    default: /* f32: accumulation error of fp32 FMAs over <= 64k keys */
        *atol = 2e-5, *rtol = 1e-5, *lse_atol = 2e-5;
        break;
    }
}

#endif
