/*
 * api_info.c — version queries, parameter defaults and the serving capability query. The capability values
 * restate the validation rules of the entries they describe (the source is named next to each one), so a
 * change to a rule must change its value here; tests/unit/test_capabilities.c checks them against the
 * entries themselves.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn/attn.h"
#include "core/error.h"
#include "kernels/kernels.h"

unsigned attn_version_number(void) { return ATTN_VERSION_NUMBER; }

const char *attn_version_string(void) { return ATTN_VERSION_STRING; }

void attn_params_init(attn_params *params) {
    if (!params) return;
    params->softmax_scale = 0.0f;
    params->causal = ATTN_CAUSAL_NONE;
    params->window_left = -1;
    params->window_right = -1;
    params->softcap = 0.0f;
    params->alibi_slopes = NULL;
    params->sinks = NULL;
    params->mask = NULL;
    params->key_padding_mask = NULL;
    params->additive_mask = NULL;
    params->k_scale = 1.0f;
    params->v_scale = 1.0f;
}

#define ATTN_BIT(x) (1u << (unsigned)(x))

attn_status attn_capabilities_get(attn_capabilities *caps, size_t caps_size) {
    ATTN_CHECK(caps != NULL, ATTN_STATUS_INVALID_ARGUMENT, "caps: is NULL");
    ATTN_CHECK(caps_size > 0, ATTN_STATUS_INVALID_ARGUMENT, "caps_size: is 0, expected sizeof(attn_capabilities)");
    attn_capabilities c;
    memset(&c, 0, sizeof c);
    c.head_size_min = 1;                  /* attn_kv_layout_of: head_size 1..256           */
    c.head_size_max = ATTN_HEAD_SIZE_MAX; /* kernels.h scratch rows                        */
    c.dtypes = ATTN_BIT(ATTN_DTYPE_F32) | ATTN_BIT(ATTN_DTYPE_F16) | ATTN_BIT(ATTN_DTYPE_BF16); /* check_float */
    c.kv_cache_dtypes = c.dtypes | ATTN_BIT(ATTN_DTYPE_FP8_E4M3) |
                        ATTN_BIT(ATTN_DTYPE_FP8_E5M2); /* attn_kv_layout_of: float or fp8 dtype */
    c.block_size_min = 1;                 /* attn_kv_layout_of, plan config: block_size >= 1 */
    c.block_size_max = INT32_MAX;         /* attn_plan_config.block_size is int32           */
    c.request_kinds = ATTN_BIT(ATTN_REQUEST_DECODER) | ATTN_BIT(ATTN_REQUEST_ENCODER_ONLY) |
                      ATTN_BIT(ATTN_REQUEST_CROSS); /* metadata.c kind check                */
    c.sliding_window = 1;                 /* attn_opts_resolve: window on every entry       */
    c.softcap = 1;
    c.alibi = 1;
    c.sinks = 1;
    c.lse = 1;
    c.max_decode_threshold = 16;          /* metadata.c ATTN_MAX_DECODE_THRESHOLD           */
    if (caps_size <= sizeof c) {
        memcpy(caps, &c, caps_size);
    } else { /* a newer caller: fields this library does not know read 0 */
        memcpy(caps, &c, sizeof c);
        memset((char *)caps + sizeof c, 0, caps_size - sizeof c);
    }
    return ATTN_STATUS_OK;
}
