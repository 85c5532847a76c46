/*
 * error.h — status plumbing shared by every layer: the thread-local last-error message and the two
 * check macros of docs/CONTRIBUTING.md §4. No allocation; messages are truncated to ATTN_ERROR_MAX bytes.
 */
#ifndef ATTN_CORE_ERROR_H
#define ATTN_CORE_ERROR_H

#include "attn/attn.h"

#define ATTN_ERROR_MAX 512

#if defined(__GNUC__)
#define ATTN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTN_PRINTF(a, b)
#endif

/* Formats the thread-local last-error message (printf-style). Always returns `status` for chaining. */
attn_status attn_err_set(attn_status status, const char *fmt, ...) ATTN_PRINTF(2, 3);

/* Return `status` with a message naming the argument unless `cond` holds. */
#define ATTN_CHECK(cond, status, ...)                                                                    \
    do {                                                                                                 \
        if (!(cond)) return attn_err_set((status), __VA_ARGS__);                                         \
    } while (0)

/* Forward a failing status (its message is already set). */
#define ATTN_TRY(expr)                                                                                   \
    do {                                                                                                 \
        attn_status attn_try_status_ = (expr);                                                           \
        if (attn_try_status_ != ATTN_STATUS_OK) return attn_try_status_;                                 \
    } while (0)

#endif
