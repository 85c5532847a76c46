/*
 * plan.h — the internal layout of attn_plan (once-per-step host logic, docs/CONTRIBUTING.md §8) and the functions of
 * src/plan: request classification and metadata (metadata.c), the work partition (partition.c) and the
 * count-then-fill construction (plan.c). The API layer (api_plan.c, api_paged.c) reads these fields.
 */
#ifndef ATTN_PLAN_PLAN_H
#define ATTN_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "attention/fwd.h"
#include "attn/attn.h"
#include "core/arena.h"

/* Request classes in plan order (docs/SERVING.md "Metadata builder"): decodes, partial prefills, fresh prefills. */
enum { ATTN_CLASS_DECODE = 0, ATTN_CLASS_PARTIAL_PREFILL = 1, ATTN_CLASS_FRESH_PREFILL = 2 };

struct attn_plan {
    attn_plan_config cfg;
    int32_t decode_threshold;      /* 1 + num_speculative_tokens                      */
    int32_t state;                 /* attn_state                                       */
    int64_t num_reqs, num_tokens;
    int64_t num_decodes, num_decode_tokens, num_prefills, num_prefill_tokens;
    int64_t max_query_len, max_seq_len;
    int64_t num_encoder_only;      /* ENCODER_ONLY requests (need key/value rows)      */
    /* metadata, plan order */
    int32_t *query_start_loc;      /* [num_reqs + 1]                                   */
    int32_t *seq_lens;             /* [num_reqs]                                       */
    int32_t *block_table;          /* [num_reqs, cfg.max_blocks_per_req]               */
    int32_t *kinds;                /* [num_reqs]                                       */
    int32_t *classes;              /* [num_reqs] ATTN_CLASS_*                           */
    int32_t *req_order;            /* [num_reqs] input index of plan request i         */
    int32_t *token_src;            /* [num_tokens] input row of plan row t             */
    int64_t *slot_mapping;         /* [num_tokens]                                     */
    /* work partition */
    int64_t num_work_blocks;
    attn_fwd_work_block *blocks; /* [num_work_blocks] (the executor's work list)      */
    int64_t num_direct;
    int32_t *direct;               /* [num_direct] blocks run whole by one thread      */
    int64_t num_split_items;
    attn_fwd_split_item *splits; /* [num_split_items]                                */
    int64_t num_split_blocks;
    int32_t *split_blocks;         /* [num_split_blocks] blocks folded after the split */
    size_t workspace_size;         /* bytes of caller workspace                        */
    void *mem;                     /* the single allocation holding every array        */
};


/* ---- metadata.c ---- */
/* Checks config and requests; the message names the field ("requests[3].block_ids[7] = ..."). */
attn_status attn_meta_validate(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs);
/* Class of a request (ATTN_CLASS_*) for a decode threshold. */
int32_t attn_meta_class(const attn_request *r, int32_t decode_threshold);
/* Keys the request attends to: computed + scheduled (DECODER), encoder_len (CROSS), scheduled (ENCODER). */
int64_t attn_meta_kv_len(const attn_request *r);
/* Batch attention state (vllm-ascend's AscendAttentionState; docs/SERVING.md "Metadata builder"). */
int32_t attn_meta_state(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs);
/* Count-then-fill pass of the metadata: counts always, arrays only when `materialize`. */
void attn_meta_pass(attn_plan *plan, const attn_request *reqs, int64_t num_reqs, attn_arena *arena,
                    int materialize);

/* ---- partition.c ---- */
/* Count-then-fill pass of the work partition over the plan's metadata (already filled when
 * `materialize`; in the count pass it reads the requests through plan->req_order == NULL semantics,
 * i.e. it recomputes q_len / kv_len / class from the requests in plan order). */
void attn_partition_pass(attn_plan *plan, const attn_request *reqs, int64_t num_reqs, attn_arena *arena,
                         int materialize);

/* ---- plan.c ---- */
/* Validates, runs the count pass, allocates once, runs the fill pass. *out = NULL on failure. */
attn_status attn_plan_build(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs,
                            attn_plan **out);
void attn_plan_destroy(attn_plan *plan);

#endif
