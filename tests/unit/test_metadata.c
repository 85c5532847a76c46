/*
 * test_metadata.c — the metadata builder and plan: attn_state and decode-first ordering against a
 * table of hand-made schedules (docs/SERVING.md "Metadata builder"), its worked examples, query_start_loc /
 * seq_lens / slot_mapping / block_table / token permutation values, the work partition and workspace size,
 * and validation messages of bad requests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static int32_t g_ids[64];

static attn_plan_config cfg_default(void) {
    attn_plan_config c;
    attn_plan_config_init(&c);
    c.num_blocks = 64, c.block_size = 16, c.num_heads = 8, c.num_kv_heads = 2, c.head_size = 64;
    c.max_blocks_per_req = 64;
    return c;
}

static attn_request mk(int64_t computed, int64_t scheduled, int64_t spec) {
    attn_request r;
    memset(&r, 0, sizeof r);
    r.num_computed_tokens = computed, r.num_scheduled_tokens = scheduled, r.num_spec_tokens = spec;
    r.kind = ATTN_REQUEST_DECODER;
    r.block_ids = g_ids;
    r.num_block_ids = (computed + scheduled + 15) / 16;
    return r;
}

typedef struct schedule_case {
    const char *name;
    int32_t spec_tokens, chunked, mtp;
    int n;
    int64_t computed[6], scheduled[6], spec[6];
    int32_t state;
    int64_t num_decodes, num_decode_tokens;
    int32_t order[6]; /* expected req_order */
} schedule_case;

static void test_state_and_order_table(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) g_ids[i] = 63 - i;
    const schedule_case cases[] = {
        {"all fresh prompts", 0, 1, 0, 3, {0, 0, 0}, {5, 1, 30}, {0}, ATTN_STATE_PREFILL_NO_CACHE, 0, 0, {0, 1, 2}},
        {"pure decode", 0, 1, 0, 3, {10, 20, 30}, {1, 1, 1}, {0}, ATTN_STATE_DECODE_ONLY, 3, 3, {0, 1, 2}},
        {"pure decode, mtp", 1, 1, 1, 2, {10, 20}, {1, 1}, {0}, ATTN_STATE_SPEC_DECODING, 2, 2, {0, 1}},
        {"spec decode mtp", 2, 1, 1, 2, {10, 20}, {3, 2}, {2, 1}, ATTN_STATE_SPEC_DECODING, 2, 5, {0, 1}},
        {"spec decode non-mtp", 2, 1, 0, 2, {10, 20}, {3, 2}, {2, 1}, ATTN_STATE_CHUNKED_PREFILL, 2, 5, {0, 1}},
        {"chunked prefill mix", 0, 1, 0, 4, {0, 50, 10, 7}, {40, 1, 20, 1}, {0}, ATTN_STATE_CHUNKED_PREFILL, 2, 2,
         {1, 3, 2, 0}},
        {"cache hit, no chunking", 0, 0, 0, 3, {0, 32, 16}, {10, 8, 1}, {0}, ATTN_STATE_PREFILL_CACHE_HIT, 1, 1,
         {2, 1, 0}},
        {"C11 worked example", 3, 1, 0, 5, {8, 8, 8, 8, 8}, {1, 1, 3, 20, 7}, {0}, ATTN_STATE_CHUNKED_PREFILL, 3, 5,
         {0, 1, 2, 3, 4}},
        {"C11 unordered input", 3, 1, 0, 3, {8, 8, 8}, {1, 20, 1}, {0}, ATTN_STATE_CHUNKED_PREFILL, 2, 2, {0, 2, 1}},
        {"short fresh prompt is a prefill", 3, 1, 0, 2, {0, 9}, {2, 2}, {0}, ATTN_STATE_CHUNKED_PREFILL, 1, 2, {1, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const schedule_case *k = &cases[c];
        attn_plan_config cfg = cfg_default();
        cfg.num_speculative_tokens = k->spec_tokens, cfg.chunked_prefill_enabled = k->chunked, cfg.spec_method_mtp = k->mtp;
        attn_request reqs[6];
        int64_t total = 0;
        for (int i = 0; i < k->n; i++) reqs[i] = mk(k->computed[i], k->scheduled[i], k->spec[i]), total += k->scheduled[i];
        attn_plan *plan = NULL;
        assert_int_equal(attn_plan_create(&cfg, reqs, k->n, &plan), ATTN_STATUS_OK);
        attn_plan_info info;
        assert_int_equal(attn_plan_get_info(plan, &info), ATTN_STATUS_OK);
        print_message("  %s\n", k->name);
        assert_int_equal(info.attn_state, k->state);
        assert_int_equal(info.num_decodes, k->num_decodes);
        assert_int_equal(info.num_decode_tokens, k->num_decode_tokens);
        assert_int_equal(info.num_prefills, k->n - k->num_decodes);
        assert_int_equal(info.num_prefill_tokens, total - k->num_decode_tokens);
        assert_int_equal(info.num_tokens, total);
        for (int i = 0; i < k->n; i++) assert_int_equal(info.req_order[i], k->order[i]);
        /* query_start_loc is the prefix sum of q_len in plan order; token_src points at the input rows */
        int64_t in_start[6], acc = 0;
        for (int i = 0; i < k->n; i++) in_start[i] = acc, acc += k->scheduled[i];
        assert_int_equal(info.query_start_loc[0], 0);
        for (int i = 0; i < k->n; i++) {
            const int r = info.req_order[i];
            assert_int_equal(info.query_start_loc[i + 1] - info.query_start_loc[i], k->scheduled[r]);
            assert_int_equal(info.seq_lens[i], k->computed[r] + k->scheduled[r]);
            for (int64_t t = 0; t < k->scheduled[r]; t++) {
                assert_int_equal(info.token_src[info.query_start_loc[i] + t], in_start[r] + t);
                const int64_t pos = k->computed[r] + t;
                assert_int_equal(info.slot_mapping[info.query_start_loc[i] + t], (int64_t)g_ids[pos / 16] * 16 + pos % 16);
            }
        }
        attn_plan_free(plan);
    }
}

/* Worked example: B = 16, block row [7, 3], position 17 → slot 3·16 + 1 = 49; and vllm-ascend's comment:
 * slots [35, 2, 17] with B = 16. */
static void test_slot_mapping_examples(void **state) {
    (void)state;
    attn_plan_config cfg = cfg_default();
    int32_t row[2] = {7, 3};
    attn_request r = mk(17, 1, 0);
    r.block_ids = row, r.num_block_ids = 2;
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OK);
    attn_plan_info info;
    attn_plan_get_info(plan, &info);
    assert_int_equal(info.slot_mapping[0], 49);
    assert_int_equal(info.block_table[0], 7);
    assert_int_equal(info.block_table[1], 3);
    assert_int_equal(info.block_table[2], 0); /* unused entries are 0 */
    assert_int_equal(info.max_blocks_per_req, 64);
    attn_plan_free(plan);
    int32_t b2[1] = {2}, b0[1] = {0}, b1[2] = {5, 1};
    attn_request rs[3] = {mk(3, 1, 0), mk(2, 1, 0), mk(16, 2, 0)};
    rs[0].block_ids = b2, rs[0].num_block_ids = 1;
    rs[1].block_ids = b0, rs[1].num_block_ids = 1;
    rs[2].block_ids = b1, rs[2].num_block_ids = 2;
    rs[2].num_scheduled_tokens = 1, rs[2].num_computed_tokens = 17;
    assert_int_equal(attn_plan_create(&cfg, rs, 3, &plan), ATTN_STATUS_OK);
    attn_plan_get_info(plan, &info);
    assert_int_equal(info.slot_mapping[0], 35);
    assert_int_equal(info.slot_mapping[1], 2);
    assert_int_equal(info.slot_mapping[2], 17);
    attn_plan_free(plan);
}

/* Work partition: a decode over 1500 keys (3 partitions of 512) is split; a prefill is not. */
static void test_partition_and_workspace(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) g_ids[i] = i;
    attn_plan_config cfg = cfg_default(); /* 8 q heads, 2 kv heads: group 4, 8 tokens per block */
    cfg.max_blocks_per_req = 100, cfg.num_blocks = 100;
    int32_t ids[100];
    for (int i = 0; i < 100; i++) ids[i] = i;
    attn_request reqs[2] = {mk(1499, 1, 0), mk(0, 20, 0)};
    reqs[0].block_ids = ids, reqs[0].num_block_ids = 94;
    reqs[1].block_ids = ids, reqs[1].num_block_ids = 2;
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, reqs, 2, &plan), ATTN_STATUS_OK);
    attn_plan_info info;
    attn_plan_get_info(plan, &info);
    /* decode: 2 kv heads × 1 token block; prefill: 2 kv heads × ceil(20/8) = 3 token blocks */
    assert_int_equal(info.num_work_blocks, 2 + 6);
    assert_int_equal(info.num_split_items, 2 * 3);
    /* partial states: 2 blocks × 3 partitions × 4 rows × (2 + 64) floats */
    const size_t bytes = (size_t)(2 * 3 * 4 * 66) * sizeof(float);
    assert_int_equal(info.workspace_size, (bytes + 63) & ~(size_t)63);
    assert_int_equal(attn_plan_workspace_size(plan), info.workspace_size);
    attn_plan_free(plan);
    attn_plan_free(NULL);
    /* an empty step is legal */
    assert_int_equal(attn_plan_create(&cfg, NULL, 0, &plan), ATTN_STATUS_OK);
    attn_plan_get_info(plan, &info);
    assert_int_equal(info.num_tokens, 0);
    assert_int_equal(info.workspace_size, 0);
    attn_plan_free(plan);
}

static void test_kinds(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) g_ids[i] = i;
    attn_plan_config cfg = cfg_default();
    attn_request reqs[3] = {mk(0, 12, 0), mk(4, 2, 0), mk(0, 5, 0)};
    reqs[0].kind = ATTN_REQUEST_ENCODER_ONLY, reqs[0].num_block_ids = 0, reqs[0].block_ids = NULL;
    reqs[1].kind = ATTN_REQUEST_CROSS, reqs[1].encoder_len = 40, reqs[1].num_block_ids = 3;
    attn_plan *plan = NULL;
    assert_int_equal(attn_plan_create(&cfg, reqs, 3, &plan), ATTN_STATUS_OK);
    attn_plan_info info;
    attn_plan_get_info(plan, &info);
    assert_int_equal(info.req_order[0], 1); /* the cross request with context decodes first */
    assert_int_equal(info.kinds[0], ATTN_REQUEST_CROSS);
    assert_int_equal(info.seq_lens[0], 40);
    assert_int_equal(info.slot_mapping[0], -1); /* cross tokens write no self-attention cache */
    assert_int_equal(info.kinds[1], ATTN_REQUEST_ENCODER_ONLY);
    assert_int_equal(info.seq_lens[1], 12);
    assert_int_equal(info.slot_mapping[2], -1);
    assert_int_equal(info.slot_mapping[2 + 12], 0); /* the decoder prompt, block 0 slot 0 */
    attn_plan_free(plan);
    reqs[1].num_block_ids = 2; /* 40 encoder keys need 3 blocks */
    assert_int_equal(attn_plan_create(&cfg, reqs, 3, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "requests[1].num_block_ids=2 < ceil(40 keys / block_size 16) = 3"));
    assert_null(plan);
}

static void test_validation(void **state) {
    (void)state;
    for (int i = 0; i < 64; i++) g_ids[i] = i;
    attn_plan_config cfg = cfg_default();
    attn_plan *plan = NULL;
    int32_t bad[2] = {3, 9001};
    attn_request r = mk(20, 1, 0);
    r.block_ids = bad, r.num_block_ids = 2;
    attn_request two[2] = {mk(1, 1, 0), r};
    assert_int_equal(attn_plan_create(&cfg, two, 2, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "requests[1].block_ids[1] = 9001 is outside [0, num_blocks=64)"));
    assert_null(plan);
    r = mk(40, 1, 0);
    r.num_block_ids = 2; /* 41 keys need 3 blocks */
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "requests[0].num_block_ids=2 < ceil(41 keys"));
    r = mk(40, 0, 0);
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "requests[0].num_scheduled_tokens=0"));
    r = mk(40, 2, 2);
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "requests[0].num_spec_tokens=2"));
    r = mk(3, 1, 0);
    r.kind = ATTN_REQUEST_ENCODER_ONLY;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    r = mk(INT32_MAX, 1, 0);
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_OVERFLOW);
    r = mk(3, 1, 0);
    cfg.num_speculative_tokens = 16; /* threshold 17 > 16 */
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "decode_threshold"));
    cfg = cfg_default();
    cfg.num_kv_heads = 3;
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    cfg = cfg_default();
    cfg.max_blocks_per_req = 1;
    r = mk(30, 1, 0);
    assert_int_equal(attn_plan_create(&cfg, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "> config.max_blocks_per_req=1"));
    assert_int_equal(attn_plan_create(NULL, &r, 1, &plan), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(attn_plan_get_info(NULL, NULL), ATTN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_and_order_table), cmocka_unit_test(test_slot_mapping_examples),
        cmocka_unit_test(test_partition_and_workspace), cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
