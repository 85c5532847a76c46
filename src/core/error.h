/*
 * error.h — status plumbing shared by every layer: the thread-local last-error message and the two
 * check macros of docs/CONTRIBUTING.md §4. No allocation; messages are truncated to ATTN_ERROR_MAX bytes.
 */
#ifndef ATTN_CORE_ERROR_H
#define ATTN_CORE_ERROR_H

#include "core/error_channel.h"

/* Formats the thread-local last-error message (printf-style). Always returns `status` for chaining. */
attn_status attn_err_set(attn_status status, const char *fmt, ...) ATTN_PRINTF(2, 3);

/* Return `status` with a message naming the argument unless `cond` holds. */
#define ATTN_CHECK(cond, status, ...) ATTN_CHECK_WITH(attn_err_set, cond, status, __VA_ARGS__)

/* ATTN_TRY(expr), forward a failing status: core/error_channel.h. */

#endif
