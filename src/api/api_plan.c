/*
 * api_plan.c — public entry points of the metadata builder and plan: config defaults, create/free,
 * workspace size and the caller-visible arrays. The building itself is in src/plan.
 */
#include <string.h>

#include "api/validate.h"
#include "core/error.h"
#include "plan/plan.h"

/* attn_plan_config_init(_sized): src/api/api_info.c, with the other defaults. */

attn_status attn_plan_create(const attn_plan_config *config, const attn_request *requests, int64_t num_requests,
                             attn_plan **plan) {
    ATTN_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: is NULL");
    *plan = NULL;
    ATTN_CHECK(config != NULL, ATTN_STATUS_INVALID_ARGUMENT, "config: is NULL");
    attn_plan_config cfg; /* read by the struct_size rule; the plan keeps this copy */
    attn_plan_config_init(&cfg);
    size_t size;
    ATTN_TRY(attn_sized_read(config, sizeof cfg, ATTN_PLAN_CONFIG_SIZE_MIN, "config", &cfg, &size));
    return attn_plan_build(&cfg, requests, num_requests, plan);
}

void attn_plan_free(attn_plan *plan) { attn_plan_destroy(plan); }

size_t attn_plan_workspace_size(const attn_plan *plan) { return plan ? plan->workspace_size : 0; }

attn_status attn_plan_get_info(const attn_plan *plan, attn_plan_info *info) {
    ATTN_CHECK(plan != NULL, ATTN_STATUS_INVALID_ARGUMENT, "plan: is NULL");
    ATTN_CHECK(info != NULL, ATTN_STATUS_INVALID_ARGUMENT, "info: is NULL");
    info->num_reqs = plan->num_reqs;
    info->num_tokens = plan->num_tokens;
    info->num_decodes = plan->num_decodes;
    info->num_decode_tokens = plan->num_decode_tokens;
    info->num_prefills = plan->num_prefills;
    info->num_prefill_tokens = plan->num_prefill_tokens;
    info->attn_state = plan->state;
    info->decode_threshold = plan->decode_threshold;
    info->max_query_len = plan->max_query_len;
    info->max_seq_len = plan->max_seq_len;
    info->query_start_loc = plan->query_start_loc;
    info->seq_lens = plan->seq_lens;
    info->slot_mapping = plan->slot_mapping;
    info->max_blocks_per_req = plan->cfg.max_blocks_per_req;
    info->block_table = plan->block_table;
    info->kinds = plan->kinds;
    info->req_order = plan->req_order;
    info->token_src = plan->token_src;
    info->num_work_blocks = plan->num_work_blocks;
    info->num_split_items = plan->num_split_items;
    info->workspace_size = plan->workspace_size;
    return ATTN_STATUS_OK;
}
