/*
 * ctx.h — the internal layout of attn_ctx, shared by the entry points in src/api.
 */
#ifndef ATTN_API_CTX_H
#define ATTN_API_CTX_H

#include <stdatomic.h>

#include "attention/fwd.h"
#include "core/error.h"

struct attn_ctx {
    const struct attn_kernels *kern; /* chosen kernel table                          */
    int32_t num_threads;             /* >= 1                                          */
    void *scratch_raw;               /* malloc'd block                                */
    char *scratch;                   /* 64-byte aligned: num_threads per-thread slices */
    atomic_int busy;                 /* 1 while a call uses the scratch (attn_ctx_claim) */
    double parallel_min_flops;       /* smaller calls are small (attn_exec)             */
    attn_fwd_small_rule small;       /* how small calls run; learned (attn_fwd_small_rule) */
};

/* Claims ctx for one call that uses its scratch, or its settings (thread count, table) for a change: one
 * compare-and-swap, no lock and no wait. A ctx serves one call at a time (attn.h); a second thread's call on
 * the same ctx would share the scratch and corrupt both results, so it fails instead, before anything is
 * written: INVALID_ARGUMENT naming ctx. Pair with attn_ctx_release on every path after a successful claim. */
static inline attn_status attn_ctx_claim(attn_ctx *ctx) {
    int expected = 0;
    if (atomic_compare_exchange_strong_explicit(&ctx->busy, &expected, 1, memory_order_acquire, memory_order_relaxed))
        return ATTN_STATUS_OK;
    return attn_err_set(ATTN_STATUS_INVALID_ARGUMENT,
                        "ctx: is in use by a call on another thread (an attn_ctx runs one call at a time: create one "
                        "context per thread)");
}

static inline void attn_ctx_release(attn_ctx *ctx) { atomic_store_explicit(&ctx->busy, 0, memory_order_release); }

/* The driver's view of the context. */
static inline attn_exec attn_ctx_exec(attn_ctx *ctx) {
    attn_exec ex;
    ex.kern = ctx->kern;
    ex.num_threads = ctx->num_threads;
    ex.scratch = ctx->scratch;
    ex.parallel_min_flops = ctx->parallel_min_flops;
    ex.small = &ctx->small;
    return ex;
}

/* Runs a validated problem on ctx's kernels, threads and scratch between a claim and its release. */
static inline attn_status attn_ctx_run(attn_ctx *ctx, const attn_problem *p) {
    ATTN_TRY(attn_ctx_claim(ctx));
    const attn_exec ex = attn_ctx_exec(ctx);
    attn_fwd_run(p, &ex);
    attn_ctx_release(ctx);
    return ATTN_STATUS_OK;
}

#endif
