/*
 * plan.c — builds an attn_plan by running the metadata and partition passes twice (docs/CONTRIBUTING.md §8,
 * FlashInfer DecodePlanImpl<MATERIALIZE>): a count pass that sizes every array through a bump arena,
 * one allocation, then a fill pass through the same code (the carver: src/core/arena.c). Nothing here runs
 * attention.
 */
#include "plan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void attn_plan_pass(attn_plan *plan, const attn_request *reqs, int64_t num_reqs, attn_arena *a,
                           int materialize) {
    attn_meta_pass(plan, reqs, num_reqs, a, materialize);
    attn_partition_pass(plan, reqs, num_reqs, a, materialize);
}

attn_status attn_plan_build(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs,
                            attn_plan **out) {
    *out = NULL;
    ATTN_TRY(attn_meta_validate(cfg, reqs, num_reqs));
    attn_plan *plan = (attn_plan *)calloc(1, sizeof *plan);
    ATTN_CHECK(plan != NULL, ATTN_STATUS_OUT_OF_MEMORY, "attn_plan_create: cannot allocate the plan");
    plan->cfg = *cfg;
    plan->decode_threshold = 1 + cfg->num_speculative_tokens;

    attn_arena count = {NULL, 0, 0, NULL};
    attn_plan_pass(plan, reqs, num_reqs, &count, 0);
    if (!count.overflow && (count.used > ATTN_MAX_PLAN_BYTES || (uint64_t)plan->workspace_size > ATTN_MAX_WORKSPACE_BYTES)) {
        const size_t used = count.used, ws = plan->workspace_size;
        free(plan);
        return attn_err_set(ATTN_STATUS_OVERFLOW,
                            "attn_plan_create: the plan needs %zu bytes (limit ATTN_MAX_PLAN_BYTES=%zu) and a workspace of "
                            "%zu bytes (limit ATTN_MAX_WORKSPACE_BYTES=%llu)",
                            used, (size_t)ATTN_MAX_PLAN_BYTES, ws, (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    }
    if (count.overflow || plan->num_work_blocks > INT32_MAX || plan->num_split_items > INT32_MAX) {
        free(plan);
        return attn_err_set(ATTN_STATUS_OVERFLOW, "attn_plan_create: the size of %s overflows",
                            count.overflow ? count.overflow_at : "the work partition");
    }
    plan->mem = malloc(count.used > 0 ? count.used + 64 : 64);
    if (!plan->mem) {
        free(plan);
        return attn_err_set(ATTN_STATUS_OUT_OF_MEMORY, "attn_plan_create: cannot allocate %zu bytes", count.used);
    }
    attn_arena fill = {(char *)(((uintptr_t)plan->mem + 63) & ~(uintptr_t)63), 0, 0, NULL};
    const size_t counted_ws = plan->workspace_size;
    attn_plan_pass(plan, reqs, num_reqs, &fill, 1);
    if (fill.used != count.used || plan->workspace_size != counted_ws) { /* the passes must agree */
        attn_plan_destroy(plan);
        return attn_err_set(ATTN_STATUS_INTERNAL, "attn_plan_create: count and fill passes disagree");
    }
    *out = plan;
    return ATTN_STATUS_OK;
}

void attn_plan_destroy(attn_plan *plan) {
    if (!plan) return;
    free(plan->mem);
    free(plan);
}
