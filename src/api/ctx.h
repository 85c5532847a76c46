/*
 * ctx.h — the internal layout of attn_ctx, shared by the entry points in src/api.
 */
#ifndef ATTN_API_CTX_H
#define ATTN_API_CTX_H

#include "attention/fwd.h"

struct attn_ctx {
    const struct attn_kernels *kern; /* chosen kernel table                          */
    int32_t num_threads;             /* >= 1                                          */
    void *scratch_raw;               /* malloc'd block                                */
    char *scratch;                   /* 64-byte aligned: num_threads per-thread slices */
};

/* The driver's view of the context. */
static inline attn_exec attn_ctx_exec(const attn_ctx *ctx) {
    attn_exec ex;
    ex.kern = ctx->kern;
    ex.num_threads = ctx->num_threads;
    ex.scratch = ctx->scratch;
    return ex;
}

#endif
