/*
 * error.c — status names and libattn's thread-local last-error channel (core/error_channel.h). It does not log or
 * abort: library code reports, callers decide.
 */
#include "core/error.h"

/* attn_err_set and attn_last_error over the thread-local buffer (core/error_channel.h, shared with libattn_mpi) */
ATTN_ERROR_CHANNEL(attn_last_error_buf, attn_err_set, attn_last_error)

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
