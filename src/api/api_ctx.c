/*
 * api_ctx.c — attn_ctx lifecycle: thread count, kernel table, and the per-thread scratch allocated once
 * here so that compute calls never allocate.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/ctx.h"
#include "core/error.h"
#include "dispatch/dispatch.h"
#include "parallel/parallel.h"

static attn_status attn_ctx_alloc_scratch(attn_ctx *ctx, int32_t num_threads) {
    size_t per = attn_fwd_scratch_bytes();
    size_t total = per * (size_t)num_threads + 64;
    void *raw = malloc(total);
    if (!raw)
        return attn_err_set(ATTN_STATUS_OUT_OF_MEMORY, "attn_ctx: cannot allocate %zu bytes of scratch for %d threads",
                            total, (int)num_threads);
    free(ctx->scratch_raw);
    ctx->scratch_raw = raw;
    ctx->scratch = (char *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    if (ctx->num_threads != num_threads && !ctx->small.fixed) /* learned for another thread count */
        memset(&ctx->small, 0, sizeof ctx->small);
    ctx->num_threads = num_threads;
    return ATTN_STATUS_OK;
}

attn_status attn_ctx_create(attn_ctx **out) {
    ATTN_CHECK(out != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    *out = NULL;
    const struct attn_kernels *kern = attn_dispatch_default();
    ATTN_CHECK(kern != NULL, ATTN_STATUS_INVALID_ARGUMENT,
               "ATTN_ISA=%s: unknown or not runnable on this CPU (see `attn info`)", getenv("ATTN_ISA"));
    attn_ctx *ctx = (attn_ctx *)calloc(1, sizeof *ctx);
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_OUT_OF_MEMORY, "attn_ctx_create: out of memory");
    ctx->kern = kern;
    atomic_init(&ctx->busy, 0);
    ctx->parallel_min_flops = ATTN_FWD_PARALLEL_MIN_FLOPS;
    const char *pmf = getenv("ATTN_PARALLEL_MIN_FLOPS"); /* 0: every call on all threads (the C test suites) */
    if (pmf && *pmf) {
        char *end = NULL;
        const double v = strtod(pmf, &end);
        if (end && *end == '\0' && v >= 0.0) {
            ctx->parallel_min_flops = v;
            ctx->small.fixed = 1; /* a bound given: smaller calls alone, nothing learned */
        }
    }
    int32_t nt = attn_parallel_default_threads(); /* OMP_NUM_THREADS may exceed the documented 1..1024 */
    attn_status st = attn_ctx_alloc_scratch(ctx, nt < 1 ? 1 : (nt > 1024 ? 1024 : nt));
    if (st != ATTN_STATUS_OK) {
        free(ctx);
        return st;
    }
    *out = ctx;
    return ATTN_STATUS_OK;
}

void attn_ctx_destroy(attn_ctx *ctx) {
    if (!ctx) return;
    free(ctx->scratch_raw);
    free(ctx);
}

attn_status attn_ctx_set_num_threads(attn_ctx *ctx, int32_t num_threads) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_CHECK(num_threads >= 1 && num_threads <= 1024, ATTN_STATUS_INVALID_ARGUMENT,
               "num_threads=%d is outside 1..1024", (int)num_threads);
    if (num_threads == ctx->num_threads) return ATTN_STATUS_OK;
    ATTN_TRY(attn_ctx_claim(ctx)); /* not while a call on another thread uses the scratch */
    const attn_status st = attn_ctx_alloc_scratch(ctx, num_threads);
    attn_ctx_release(ctx);
    return st;
}

int32_t attn_ctx_num_threads(const attn_ctx *ctx) { return ctx ? ctx->num_threads : 0; }

attn_status attn_ctx_set_isa(attn_ctx *ctx, const char *isa) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_CHECK(isa != NULL, ATTN_STATUS_INVALID_ARGUMENT, "isa: is NULL");
    const struct attn_kernels *kern = attn_dispatch_by_name(isa);
    ATTN_CHECK(kern != NULL, ATTN_STATUS_INVALID_ARGUMENT, "isa=\"%s\": unknown or not runnable on this CPU",
               isa);
    ATTN_TRY(attn_ctx_claim(ctx));
    if (kern != ctx->kern && !ctx->small.fixed) /* small calls learned for other kernels */
        memset(&ctx->small, 0, sizeof ctx->small);
    ctx->kern = kern;
    attn_ctx_release(ctx);
    return ATTN_STATUS_OK;
}

const char *attn_ctx_isa(const attn_ctx *ctx) { return ctx ? ctx->kern->name : ""; }
