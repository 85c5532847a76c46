/*
 * api_info.c — version queries and parameter defaults.
 */
#include <stddef.h>

#include "attn/attn.h"

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
}
