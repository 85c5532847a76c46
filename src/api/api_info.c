/*
 * api_info.c — version queries, the defaults of every size-prefixed options struct (*_init_sized) and the
 * serving capability query. The capability values
 * restate the validation rules of the entries they describe (the source is named next to each one), so a
 * change to a rule must change its value here; tests/unit/test_capabilities.c checks them against the
 * entries themselves.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"
#include "core/error.h"
#include "kernels/kernels.h"

unsigned attn_version_number(void) { return ATTN_VERSION_NUMBER; }

const char *attn_version_string(void) { return ATTN_VERSION_STRING; }

/* Writes the first struct_size bytes of `defaults` (known bytes) to `dst`, zeroing bytes past `known`, and
 * stores struct_size in dst's leading size_t when it fits (the *_init_sized contract in attn.h). */
static void attn_sized_init(void *dst, size_t struct_size, void *defaults, size_t known) {
    if (!dst || struct_size == 0) return;
    memcpy(defaults, &struct_size, sizeof struct_size);
    if (struct_size <= known) {
        memcpy(dst, defaults, struct_size);
    } else {
        memcpy(dst, defaults, known);
        memset((char *)dst + known, 0, struct_size - known);
    }
}

void attn_params_init_sized(attn_params *params, size_t struct_size) {
    attn_params d;
    memset(&d, 0, sizeof d);
    d.softmax_scale = 0.0f;
    d.causal = ATTN_CAUSAL_NONE;
    d.window_left = -1;
    d.window_right = -1;
    d.softcap = 0.0f;
    d.alibi_slopes = NULL;
    d.sinks = NULL;
    d.mask = NULL;
    d.key_padding_mask = NULL;
    d.additive_mask = NULL;
    d.k_scale = 1.0f;
    d.v_scale = 1.0f;
    d.k_scales = NULL;
    d.v_scales = NULL;
    attn_sized_init(params, struct_size, &d, sizeof d);
}

void(attn_params_init)(attn_params *params) { attn_params_init_sized(params, sizeof *params); }

void attn_plan_config_init_sized(attn_plan_config *config, size_t struct_size) {
    attn_plan_config d;
    memset(&d, 0, sizeof d);
    d.block_size = 128;
    d.chunked_prefill_enabled = 1;
    attn_sized_init(config, struct_size, &d, sizeof d);
}

void(attn_plan_config_init)(attn_plan_config *config) { attn_plan_config_init_sized(config, sizeof *config); }

void attn_quant_params_init_sized(attn_quant_params *qp, size_t struct_size, attn_quant_format format) {
    attn_quant_params d;
    memset(&d, 0, sizeof d);
    d.format = (int32_t)format;
    d.rotate = 1;
    d.rotation_seed = ATTN_HADAMARD_SEED;
    d.q_block_rows = 128;
    d.kv_block_rows = 256;
    attn_sized_init(qp, struct_size, &d, sizeof d);
}

void(attn_quant_params_init)(attn_quant_params *qp, attn_quant_format format) {
    attn_quant_params_init_sized(qp, sizeof *qp, format);
}

void attn_cache_write_options_init_sized(attn_cache_write_options *opts, size_t struct_size) {
    attn_cache_write_options d;
    memset(&d, 0, sizeof d);
    d.k_scale = 1.0f;
    d.v_scale = 1.0f;
    d.k_scales = NULL;
    d.v_scales = NULL;
    d.notify = NULL;
    attn_sized_init(opts, struct_size, &d, sizeof d);
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
