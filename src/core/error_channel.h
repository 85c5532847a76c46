/*
 * error_channel.h — the error plumbing of a library over attn.h: a thread-local last-error message, its printf-style
 * setter and its getter (stb failure-reason / SQLite errmsg idea), and the check/forward macros built on a setter.
 * libattn instantiates it once (src/core/error.c: attn_err_set, attn_last_error) and libattn_mpi once
 * (src/mpi/mpi_common.c: am_fail, attn_mpi_last_error). Header-only over the C library and attn.h, so libattn_mpi
 * reuses it without linking any libattn internal. It does not log or abort: library code reports, callers decide.
 */
#ifndef ATTN_CORE_ERROR_CHANNEL_H
#define ATTN_CORE_ERROR_CHANNEL_H

#include <stdarg.h>
#include <stdio.h>

#include "attn/attn.h"

#define ATTN_ERROR_MAX 512

#if defined(_MSC_VER)
#define ATTN_THREAD_LOCAL __declspec(thread)
#else
#define ATTN_THREAD_LOCAL _Thread_local
#endif

#if defined(__GNUC__)
#define ATTN_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define ATTN_PRINTF(a, b)
#endif

/* Defines, at file scope, the thread-local buffer `buf` of ATTN_ERROR_MAX bytes, `attn_status set(attn_status status,
 * const char *fmt, ...)` (formats the message, returns `status` for chaining) and `const char *get(void)` (the
 * calling thread's last message). The functions' linkage and visibility come from their prior declarations. */
#define ATTN_ERROR_CHANNEL(buf, set, get)                                                                              \
    static ATTN_THREAD_LOCAL char buf[ATTN_ERROR_MAX];                                                                 \
    attn_status set(attn_status status, const char *fmt, ...) {                                                        \
        va_list ap;                                                                                                    \
        va_start(ap, fmt);                                                                                             \
        vsnprintf(buf, sizeof buf, fmt, ap);                                                                           \
        va_end(ap);                                                                                                    \
        return status;                                                                                                 \
    }                                                                                                                  \
    const char *get(void) {                                                                                            \
        return buf;                                                                                                    \
    }

/* Return set(status, ...) unless `cond` holds: the message names the argument and its value. */
#define ATTN_CHECK_WITH(set, cond, status, ...)                                                                        \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            return set((status), __VA_ARGS__);                                                                         \
    } while (0)

/* Forward a failing status (its message is already set). */
#define ATTN_TRY(expr)                                                                                                 \
    do {                                                                                                               \
        attn_status attn_try_status_ = (expr);                                                                         \
        if (attn_try_status_ != ATTN_STATUS_OK)                                                                        \
            return attn_try_status_;                                                                                   \
    } while (0)

#endif
