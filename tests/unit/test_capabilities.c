/*
 * test_capabilities.c — attn_capabilities_get: the values, the size-prefix contract (older callers
 * get a prefix, newer callers a zeroed tail), NULL / size 0, and every value checked against the entry whose
 * rule it restates: head sizes and block sizes through attn_plan_create and attn_reshape_and_cache, cache
 * dtypes through attn_reshape_and_cache, request kinds through attn_plan_create, the decode threshold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define BIT(x) (1u << (unsigned)(x))

static attn_capabilities caps_get(void) {
    attn_capabilities c;
    memset(&c, 0xab, sizeof c);
    assert_int_equal(attn_capabilities_get(&c, sizeof c), ATTN_STATUS_OK);
    return c;
}

static void test_values(void **state) {
    (void)state;
    const attn_capabilities c = caps_get();
    assert_int_equal(c.head_size_min, 1);
    assert_int_equal(c.head_size_max, 256);
    const uint32_t floats = BIT(ATTN_DTYPE_F32) | BIT(ATTN_DTYPE_F16) | BIT(ATTN_DTYPE_BF16);
    assert_int_equal(c.dtypes, floats);
    assert_int_equal(c.kv_cache_dtypes, floats | BIT(ATTN_DTYPE_FP8_E4M3) | BIT(ATTN_DTYPE_FP8_E5M2)); /* fp8 caches */
    assert_int_equal(c.block_size_min, 1);
    assert_int_equal(c.block_size_max, INT32_MAX);
    assert_int_equal(c.request_kinds,
                     BIT(ATTN_REQUEST_DECODER) | BIT(ATTN_REQUEST_ENCODER_ONLY) | BIT(ATTN_REQUEST_CROSS));
    assert_int_equal(c.sliding_window, 1);
    assert_int_equal(c.softcap, 1);
    assert_int_equal(c.alibi, 1);
    assert_int_equal(c.sinks, 1);
    assert_int_equal(c.lse, 1);
    assert_int_equal(c.max_decode_threshold, 16);
}

static void test_size_contract(void **state) {
    (void)state;
    const attn_capabilities full = caps_get();
    /* an older caller knowing only the first two fields: exactly 8 bytes written */
    unsigned char small[16];
    memset(small, 0xcd, sizeof small);
    assert_int_equal(attn_capabilities_get((attn_capabilities *)(void *)small, 8), ATTN_STATUS_OK);
    assert_memory_equal(small, &full, 8);
    for (size_t i = 8; i < sizeof small; i++) assert_int_equal(small[i], 0xcd);
    /* a newer caller with 32 more bytes: the tail it knows and this library does not reads 0 */
    unsigned char big[sizeof(attn_capabilities) + 32];
    memset(big, 0xcd, sizeof big);
    assert_int_equal(attn_capabilities_get((attn_capabilities *)(void *)big, sizeof big), ATTN_STATUS_OK);
    assert_memory_equal(big, &full, sizeof full);
    for (size_t i = sizeof full; i < sizeof big; i++) assert_int_equal(big[i], 0);
    /* bad arguments */
    assert_int_equal(attn_capabilities_get(NULL, sizeof full), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "caps: is NULL"));
    attn_capabilities c;
    assert_int_equal(attn_capabilities_get(&c, 0), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "caps_size"));
}

static attn_plan_config cfg_of(int32_t block_size, int32_t head_size) {
    attn_plan_config c;
    attn_plan_config_init(&c);
    c.num_blocks = 4, c.block_size = block_size, c.num_heads = 2, c.num_kv_heads = 1, c.head_size = head_size;
    c.max_blocks_per_req = 4;
    return c;
}

static attn_status plan_status(attn_plan_config cfg, int32_t kind) {
    static const int32_t ids[4] = {0, 1, 2, 3};
    attn_request r;
    memset(&r, 0, sizeof r);
    r.num_scheduled_tokens = 1;
    r.kind = kind;
    r.num_computed_tokens = kind == ATTN_REQUEST_DECODER ? 2 : 0;
    r.encoder_len = kind == ATTN_REQUEST_CROSS ? 3 : 0;
    r.block_ids = ids;
    const int64_t kv_len = kind == ATTN_REQUEST_CROSS ? r.encoder_len : r.num_computed_tokens + 1;
    const int64_t bs = cfg.block_size >= 1 ? cfg.block_size : 1; /* a bad block_size is the plan's to reject */
    r.num_block_ids = kind == ATTN_REQUEST_ENCODER_ONLY ? 0 : (kv_len + bs - 1) / bs;
    attn_plan *plan = NULL;
    const attn_status st = attn_plan_create(&cfg, &r, 1, &plan);
    attn_plan_free(plan);
    return st;
}

/* attn_reshape_and_cache of one token into a [2, 1, block_size, 1, head_size] cache of `cache_dtype`. */
static attn_status cache_status(attn_ctx *ctx, attn_dtype cache_dtype, int64_t block_size, int64_t head_size) {
    float key[260] = {0}, value[260] = {0};
    float cache[2 * 4 * 260]; /* f32-aligned for every dtype tried */
    int64_t slot = 0;
    const int64_t ks[3] = {1, 1, head_size}, cs[5] = {2, 1, block_size, 1, head_size}, ss[1] = {1};
    attn_tensor tk = attn_tensor_make(key, ATTN_DTYPE_F32, 3, ks), tv = attn_tensor_make(value, ATTN_DTYPE_F32, 3, ks);
    attn_tensor tc = attn_tensor_make(cache, cache_dtype, 5, cs), ts = attn_tensor_make(&slot, ATTN_DTYPE_I64, 1, ss);
    return attn_reshape_and_cache(ctx, &tk, &tv, &tc, &ts);
}

static void test_values_match_entries(void **state) {
    (void)state;
    const attn_capabilities c = caps_get();
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    /* head sizes: both ends accepted, one past either end rejected */
    assert_int_equal(plan_status(cfg_of(16, c.head_size_min), ATTN_REQUEST_DECODER), ATTN_STATUS_OK);
    assert_int_equal(plan_status(cfg_of(16, c.head_size_max), ATTN_REQUEST_DECODER), ATTN_STATUS_OK);
    assert_int_equal(plan_status(cfg_of(16, c.head_size_max + 1), ATTN_REQUEST_DECODER), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(plan_status(cfg_of(16, c.head_size_min - 1), ATTN_REQUEST_DECODER), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cache_status(ctx, ATTN_DTYPE_F32, 1, c.head_size_max), ATTN_STATUS_OK);
    assert_int_equal(cache_status(ctx, ATTN_DTYPE_F32, 1, c.head_size_max + 1), ATTN_STATUS_INVALID_ARGUMENT);
    /* block sizes: the minimum works in the plan and in the cache; one below it does not */
    assert_int_equal(plan_status(cfg_of(c.block_size_min, 8), ATTN_REQUEST_DECODER), ATTN_STATUS_OK);
    assert_int_equal(plan_status(cfg_of(c.block_size_min - 1, 8), ATTN_REQUEST_DECODER), ATTN_STATUS_INVALID_ARGUMENT);
    assert_int_equal(cache_status(ctx, ATTN_DTYPE_F32, c.block_size_min, 8), ATTN_STATUS_OK);
    /* cache dtypes: a dtype is accepted by the cache op iff its bit is set */
    for (int d = ATTN_DTYPE_F32; d <= ATTN_DTYPE_U8; d++) {
        if (attn_dtype_size((attn_dtype)d) == 0 || attn_dtype_size((attn_dtype)d) > 4) continue;
        const attn_status st = cache_status(ctx, (attn_dtype)d, 4, 8);
        print_message("  cache dtype %s: %s\n", attn_dtype_name((attn_dtype)d), attn_status_string(st));
        assert_int_equal(st == ATTN_STATUS_OK, (c.kv_cache_dtypes & BIT(d)) != 0);
    }
    /* request kinds: every advertised kind plans */
    for (int k = ATTN_REQUEST_DECODER; k <= ATTN_REQUEST_CROSS; k++) {
        assert_true((c.request_kinds & BIT(k)) != 0);
        assert_int_equal(plan_status(cfg_of(16, 8), k), ATTN_STATUS_OK);
    }
    /* decode threshold: 1 + num_speculative_tokens up to the advertised maximum */
    attn_plan_config cfg = cfg_of(16, 8);
    cfg.num_speculative_tokens = c.max_decode_threshold - 1;
    assert_int_equal(plan_status(cfg, ATTN_REQUEST_DECODER), ATTN_STATUS_OK);
    cfg.num_speculative_tokens = c.max_decode_threshold;
    assert_int_equal(plan_status(cfg, ATTN_REQUEST_DECODER), ATTN_STATUS_INVALID_ARGUMENT);
    attn_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_size_contract),
        cmocka_unit_test(test_values_match_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
