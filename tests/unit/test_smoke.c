/*
 * test_smoke.c — the first end-to-end check: dense causal GQA attention equals the oracle, and status
 * plumbing names the bad argument. Detailed suites live in tests/conformance and tests/unit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

static void test_dense_matches_oracle(void **state) {
    (void)state;
    th_rng rng;
    th_rng_seed(&rng, 1);
    const int64_t B = 2, Sq = 37, Sk = 100, H = 8, Hk = 2, D = 64;
    int64_t qs[4] = {B, Sq, H, D}, ks[4] = {B, Sk, Hk, D}, ls[3] = {B, H, Sq};
    float *q = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * Sq * H * D), -2, 2);
    float *k = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * Sk * Hk * D), -2, 2);
    float *v = th_alloc_fill(&rng, ATTN_DTYPE_F32, (size_t)(B * Sk * Hk * D), -1, 1);
    float *o = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * Sq * H * D));
    float *o_ref = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * Sq * H * D));
    float *l = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * Sq));
    float *l_ref = th_alloc_nan(ATTN_DTYPE_F32, (size_t)(B * H * Sq));
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_F32, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_F32, 4, ks);
    attn_tensor tv = attn_tensor_make(v, ATTN_DTYPE_F32, 4, ks), to = attn_tensor_make(o, ATTN_DTYPE_F32, 4, qs);
    attn_tensor tor = attn_tensor_make(o_ref, ATTN_DTYPE_F32, 4, qs);
    attn_tensor tl = attn_tensor_make(l, ATTN_DTYPE_F32, 3, ls), tlr = attn_tensor_make(l_ref, ATTN_DTYPE_F32, 3, ls);
    attn_params p;
    attn_params_init(&p);
    p.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &to, &tl), ATTN_STATUS_OK);
    assert_int_equal(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &p, &tor, &tlr), ATTN_STATUS_OK);
    size_t bad = 0;
    th_compare(&to, &tor, th_tol_for(ATTN_DTYPE_F32), 1.0, &bad);
    assert_int_equal(bad, 0);
    th_compare_lse(&tl, &tlr, th_tol_for(ATTN_DTYPE_F32), &bad);
    assert_int_equal(bad, 0);

    /* a bad kv-head count is named in the message and nothing is written */
    int64_t bad_ks[4] = {B, Sk, 3, D};
    attn_tensor tk3 = attn_tensor_make(k, ATTN_DTYPE_F32, 4, bad_ks), tv3 = attn_tensor_make(v, ATTN_DTYPE_F32, 4, bad_ks);
    memset(o, 0x7f, sizeof(float) * (size_t)(B * Sq * H * D));
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk3, &tv3, &p, &to, NULL), ATTN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "k: shape[2]=3 does not divide num_heads=8"));
    for (size_t i = 0; i < (size_t)(B * Sq * H * D); i++) {
        uint32_t u;
        memcpy(&u, &o[i], 4);
        assert_int_equal(u, 0x7f7f7f7fu);
    }
    attn_ctx_destroy(ctx);
    free(q), free(k), free(v), free(o), free(o_ref), free(l), free(l_ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_dense_matches_oracle)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
