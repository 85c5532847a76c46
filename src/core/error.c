/*
 * error.c — status names and the thread-local last-error buffer (stb failure-reason / SQLite errmsg idea).
 * It does not log or abort: library code reports, callers decide.
 */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

#if defined(_MSC_VER)
#define ATTN_THREAD_LOCAL __declspec(thread)
#else
#define ATTN_THREAD_LOCAL _Thread_local
#endif

static ATTN_THREAD_LOCAL char attn_last_error_buf[ATTN_ERROR_MAX];

attn_status attn_err_set(attn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(attn_last_error_buf, sizeof attn_last_error_buf, fmt, ap);
    va_end(ap);
    return status;
}

const char *attn_last_error(void) { return attn_last_error_buf; }

void attn_clear_error(void) { attn_last_error_buf[0] = '\0'; }

const char *attn_status_string(attn_status status) {
    switch (status) {
    case ATTN_STATUS_OK: return "ATTN_STATUS_OK";
    case ATTN_STATUS_INVALID_ARGUMENT: return "ATTN_STATUS_INVALID_ARGUMENT";
    case ATTN_STATUS_UNSUPPORTED: return "ATTN_STATUS_UNSUPPORTED";
    case ATTN_STATUS_OUT_OF_MEMORY: return "ATTN_STATUS_OUT_OF_MEMORY";
    case ATTN_STATUS_OVERFLOW: return "ATTN_STATUS_OVERFLOW";
    case ATTN_STATUS_WORKSPACE_TOO_SMALL: return "ATTN_STATUS_WORKSPACE_TOO_SMALL";
    case ATTN_STATUS_INTERNAL: return "ATTN_STATUS_INTERNAL";
    }
    return "ATTN_STATUS_UNKNOWN";
}
