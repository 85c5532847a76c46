/*
 * metadata.c — the metadata builder of one engine step (vllm-ascend's AscendAttentionMetadataBuilder.build and
 * NPUModelRunner._build_attn_state): request validation, decode-first classification and ordering
 * (docs/SERVING.md "Metadata builder"), query_start_loc / seq_lens / slot_mapping / block_table, the batch
 * attn_state and the token permutation. It computes no attention and touches no cache.
 */
#include <string.h>

#include "core/checked_math.h"
#include "core/error.h"
#include "plan/plan.h"

#define ATTN_MAX_DECODE_THRESHOLD 16 /* FIA TND decode limit kept by vllm-ascend's builder */

attn_status attn_meta_validate(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs) {
    ATTN_CHECK(cfg->block_size >= 1, ATTN_STATUS_INVALID_ARGUMENT, "config.block_size=%d, expected >= 1",
               (int)cfg->block_size);
    ATTN_CHECK(cfg->num_blocks >= 0, ATTN_STATUS_INVALID_ARGUMENT, "config.num_blocks=%d, expected >= 0",
               (int)cfg->num_blocks);
    ATTN_CHECK(cfg->num_heads >= 1, ATTN_STATUS_INVALID_ARGUMENT, "config.num_heads=%d, expected >= 1",
               (int)cfg->num_heads);
    ATTN_CHECK(cfg->num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
               "config.num_heads=%d exceeds ATTN_MAX_HEADS=%d", (int)cfg->num_heads, ATTN_MAX_HEADS);
    ATTN_CHECK(cfg->num_kv_heads >= 1 && cfg->num_heads % cfg->num_kv_heads == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "config.num_kv_heads=%d does not divide num_heads=%d", (int)cfg->num_kv_heads, (int)cfg->num_heads);
    ATTN_CHECK(cfg->head_size >= 1 && cfg->head_size <= 256, ATTN_STATUS_INVALID_ARGUMENT,
               "config.head_size=%d is outside 1..256", (int)cfg->head_size);
    ATTN_CHECK(cfg->max_blocks_per_req >= 0 && cfg->max_blocks_per_req <= ATTN_MAX_BLOCKS_PER_REQ,
               ATTN_STATUS_INVALID_ARGUMENT, "config.max_blocks_per_req=%d is outside 0..ATTN_MAX_BLOCKS_PER_REQ=%d",
               (int)cfg->max_blocks_per_req, ATTN_MAX_BLOCKS_PER_REQ);
    ATTN_CHECK(cfg->num_speculative_tokens >= 0 && cfg->num_speculative_tokens < ATTN_MAX_DECODE_THRESHOLD,
               ATTN_STATUS_INVALID_ARGUMENT,
               "config.num_speculative_tokens=%d: decode_threshold = 1 + num_speculative_tokens must be in 1..%d",
               (int)cfg->num_speculative_tokens, ATTN_MAX_DECODE_THRESHOLD);
    ATTN_CHECK(num_reqs >= 0 && num_reqs <= INT32_MAX - 1, ATTN_STATUS_INVALID_ARGUMENT,
               "num_requests=%lld is outside 0..%d", (long long)num_reqs, INT32_MAX - 1);
    ATTN_CHECK(num_reqs == 0 || reqs != NULL, ATTN_STATUS_INVALID_ARGUMENT, "requests: is NULL");
    /* first: it bounds the block ids checked below */
    int64_t table;
    ATTN_CHECK(!__builtin_mul_overflow(num_reqs, (int64_t)cfg->max_blocks_per_req, &table) && table <= INT32_MAX,
               ATTN_STATUS_OVERFLOW, "block_table: num_requests·max_blocks_per_req exceeds int32");
    int64_t total = 0, pairs = 0;
    for (int64_t i = 0; i < num_reqs; i++) {
        const attn_request *r = &reqs[i];
        ATTN_CHECK(r->kind >= ATTN_REQUEST_DECODER && r->kind <= ATTN_REQUEST_CROSS, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].kind=%d is not an attn_request_kind value", (long long)i, (int)r->kind);
        ATTN_CHECK(r->num_scheduled_tokens >= 1, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_scheduled_tokens=%lld, expected >= 1", (long long)i,
                   (long long)r->num_scheduled_tokens);
        ATTN_CHECK(r->num_computed_tokens >= 0, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_computed_tokens=%lld, expected >= 0", (long long)i,
                   (long long)r->num_computed_tokens);
        ATTN_CHECK(r->num_spec_tokens >= 0 && r->num_spec_tokens < r->num_scheduled_tokens,
                   ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_spec_tokens=%lld is outside 0..num_scheduled_tokens-1=%lld", (long long)i,
                   (long long)r->num_spec_tokens, (long long)(r->num_scheduled_tokens - 1));
        ATTN_CHECK(r->kind != ATTN_REQUEST_ENCODER_ONLY || r->num_computed_tokens == 0,
                   ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_computed_tokens=%lld, an ENCODER_ONLY request has no cached tokens",
                   (long long)i, (long long)r->num_computed_tokens);
        ATTN_CHECK(r->kind != ATTN_REQUEST_CROSS || r->encoder_len >= 0, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].encoder_len=%lld, expected >= 0", (long long)i, (long long)r->encoder_len);
        ATTN_CHECK(r->num_scheduled_tokens <= INT32_MAX && r->num_computed_tokens <= INT32_MAX - r->num_scheduled_tokens,
                   ATTN_STATUS_OVERFLOW, "requests[%lld]: num_computed_tokens + num_scheduled_tokens exceeds int32",
                   (long long)i);
        ATTN_CHECK(r->kind != ATTN_REQUEST_CROSS || r->encoder_len <= INT32_MAX, ATTN_STATUS_OVERFLOW,
                   "requests[%lld].encoder_len=%lld exceeds int32", (long long)i, (long long)r->encoder_len);
        total += r->num_scheduled_tokens;
        ATTN_CHECK(total <= ATTN_MAX_PLAN_TOKENS, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_scheduled_tokens=%lld: the plan's scheduled tokens (%lld so far) exceed "
                   "ATTN_MAX_PLAN_TOKENS=%d",
                   (long long)i, (long long)r->num_scheduled_tokens, (long long)total, ATTN_MAX_PLAN_TOKENS);
        /* score pairs: a request's scheduled tokens attend to at most its kv_len keys, every query head */
        int64_t w;
        ATTN_CHECK(attn_mul_i64(r->num_scheduled_tokens, attn_meta_kv_len(r), &w) &&
                       attn_mul_i64(w, cfg->num_heads, &w) && attn_add_i64(pairs, w, &pairs) && pairs <= ATTN_MAX_WORK,
                   ATTN_STATUS_OVERFLOW,
                   "requests[%lld]: scheduled tokens x keys x num_heads of the plan exceed ATTN_MAX_WORK=2^48",
                   (long long)i);
        /* blocks: the cache rows this request reads or writes */
        const int64_t kv_len = r->kind == ATTN_REQUEST_ENCODER_ONLY ? 0 : attn_meta_kv_len(r);
        const int64_t needed = (kv_len + cfg->block_size - 1) / cfg->block_size;
        ATTN_CHECK(r->num_block_ids >= needed, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_block_ids=%lld < ceil(%lld keys / block_size %d) = %lld", (long long)i,
                   (long long)r->num_block_ids, (long long)kv_len, (int)cfg->block_size, (long long)needed);
        ATTN_CHECK(r->num_block_ids <= cfg->max_blocks_per_req, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].num_block_ids=%lld > config.max_blocks_per_req=%d", (long long)i,
                   (long long)r->num_block_ids, (int)cfg->max_blocks_per_req);
        ATTN_CHECK(r->num_block_ids == 0 || r->block_ids != NULL, ATTN_STATUS_INVALID_ARGUMENT,
                   "requests[%lld].block_ids: is NULL with num_block_ids=%lld", (long long)i,
                   (long long)r->num_block_ids);
        for (int64_t b = 0; b < r->num_block_ids; b++)
            ATTN_CHECK(r->block_ids[b] >= 0 && r->block_ids[b] < cfg->num_blocks, ATTN_STATUS_INVALID_ARGUMENT,
                       "requests[%lld].block_ids[%lld] = %d is outside [0, num_blocks=%d)", (long long)i,
                       (long long)b, (int)r->block_ids[b], (int)cfg->num_blocks);
    }
    return ATTN_STATUS_OK;
}

int64_t attn_meta_kv_len(const attn_request *r) {
    switch (r->kind) {
    case ATTN_REQUEST_ENCODER_ONLY: return r->num_scheduled_tokens;
    case ATTN_REQUEST_CROSS: return r->encoder_len;
    default: return r->num_computed_tokens + r->num_scheduled_tokens;
    }
}

/* docs/SERVING.md "Metadata builder": a decode has 1 <= q_len <= threshold and cached context; a request with
 * no cached token is a fresh prefill whatever its length (vLLM's is_prefilling rule). */
int32_t attn_meta_class(const attn_request *r, int32_t decode_threshold) {
    if (r->kind == ATTN_REQUEST_ENCODER_ONLY || r->num_computed_tokens == 0) return ATTN_CLASS_FRESH_PREFILL;
    if (r->num_scheduled_tokens <= decode_threshold) return ATTN_CLASS_DECODE;
    return ATTN_CLASS_PARTIAL_PREFILL;
}

int32_t attn_meta_state(const attn_plan_config *cfg, const attn_request *reqs, int64_t num_reqs) {
    int all_fresh = 1, all_one = 1, all_one_verified = 1;
    for (int64_t i = 0; i < num_reqs; i++) {
        all_fresh &= reqs[i].num_computed_tokens == 0;
        all_one &= reqs[i].num_scheduled_tokens == 1;
        all_one_verified &= reqs[i].num_scheduled_tokens - reqs[i].num_spec_tokens == 1;
    }
    int32_t state;
    if (all_fresh) {
        state = ATTN_STATE_PREFILL_NO_CACHE;
    } else if (all_one) {
        state = cfg->spec_method_mtp ? ATTN_STATE_SPEC_DECODING : ATTN_STATE_DECODE_ONLY;
    } else if (all_one_verified) {
        state = cfg->num_speculative_tokens > 0 ? ATTN_STATE_SPEC_DECODING : ATTN_STATE_CHUNKED_PREFILL;
    } else if (cfg->chunked_prefill_enabled) {
        state = ATTN_STATE_CHUNKED_PREFILL;
    } else {
        state = ATTN_STATE_PREFILL_CACHE_HIT;
    }
    /* model runner v1 stores ChunkedPrefill for SpecDecoding unless the method is mtp */
    if (state == ATTN_STATE_SPEC_DECODING && !cfg->spec_method_mtp) state = ATTN_STATE_CHUNKED_PREFILL;
    return state;
}

void attn_meta_pass(attn_plan *plan, const attn_request *reqs, int64_t num_reqs, attn_arena *a, int materialize) {
    const attn_plan_config *cfg = &plan->cfg;
    const int32_t thr = plan->decode_threshold;
    int64_t num_tokens = 0;
    for (int64_t i = 0; i < num_reqs; i++) num_tokens += reqs[i].num_scheduled_tokens;
    plan->num_reqs = num_reqs;
    plan->num_tokens = num_tokens;
    plan->query_start_loc = attn_arena_carve(a, "query_start_loc", (size_t)num_reqs + 1, sizeof(int32_t));
    plan->seq_lens = attn_arena_carve(a, "seq_lens", (size_t)num_reqs, sizeof(int32_t));
    plan->block_table =
        attn_arena_carve(a, "block_table", (size_t)num_reqs * (size_t)cfg->max_blocks_per_req, sizeof(int32_t));
    plan->kinds = attn_arena_carve(a, "kinds", (size_t)num_reqs, sizeof(int32_t));
    plan->classes = attn_arena_carve(a, "classes", (size_t)num_reqs, sizeof(int32_t));
    plan->req_order = attn_arena_carve(a, "req_order", (size_t)num_reqs, sizeof(int32_t));
    plan->token_src = attn_arena_carve(a, "token_src", (size_t)num_tokens, sizeof(int32_t));
    plan->slot_mapping = attn_arena_carve(a, "slot_mapping", (size_t)num_tokens, sizeof(int64_t));
    plan->state = attn_meta_state(cfg, reqs, num_reqs);

    /* counts and the stable decode → partial prefill → fresh prefill order (C11) */
    int64_t pos = 0, tok = 0;
    plan->num_decodes = plan->num_decode_tokens = 0;
    plan->max_query_len = plan->max_seq_len = 0;
    plan->num_encoder_only = 0;
    if (materialize) plan->query_start_loc[0] = 0;
    for (int32_t cls = ATTN_CLASS_DECODE; cls <= ATTN_CLASS_FRESH_PREFILL; cls++) {
        int64_t in_row = 0; /* first input row of request i (input rows = requests concatenated) */
        for (int64_t i = 0; i < num_reqs; i++) {
            const attn_request *r = &reqs[i];
            const int64_t q_len = r->num_scheduled_tokens;
            if (attn_meta_class(r, thr) != cls) {
                in_row += q_len;
                continue;
            }
            const int64_t kv_len = attn_meta_kv_len(r);
            if (cls == ATTN_CLASS_DECODE) {
                plan->num_decodes++;
                plan->num_decode_tokens += q_len;
            }
            if (r->kind == ATTN_REQUEST_ENCODER_ONLY) plan->num_encoder_only++;
            if (q_len > plan->max_query_len) plan->max_query_len = q_len;
            if (kv_len > plan->max_seq_len) plan->max_seq_len = kv_len;
            if (materialize) {
                plan->req_order[pos] = (int32_t)i;
                plan->kinds[pos] = r->kind;
                plan->classes[pos] = cls;
                plan->seq_lens[pos] = (int32_t)kv_len;
                plan->query_start_loc[pos + 1] = (int32_t)(tok + q_len);
                int32_t *row = plan->block_table + pos * cfg->max_blocks_per_req;
                for (int64_t b = 0; b < cfg->max_blocks_per_req; b++) row[b] = b < r->num_block_ids ? r->block_ids[b] : 0;
                for (int64_t t = 0; t < q_len; t++) {
                    plan->token_src[tok + t] = (int32_t)(in_row + t);
                    int64_t slot = -1; /* encoder-only and cross tokens write no self-attention cache */
                    if (r->kind == ATTN_REQUEST_DECODER) {
                        const int64_t p = r->num_computed_tokens + t; /* C8: absolute position of the token */
                        slot = (int64_t)r->block_ids[p / cfg->block_size] * cfg->block_size + p % cfg->block_size;
                    }
                    plan->slot_mapping[tok + t] = slot;
                }
            }
            pos++;
            tok += q_len;
            in_row += q_len;
        }
    }
    plan->num_prefills = num_reqs - plan->num_decodes;
    plan->num_prefill_tokens = num_tokens - plan->num_decode_tokens;
}
