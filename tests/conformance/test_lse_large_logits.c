/*
 * test_lse_large_logits.c — the LSE at large logit magnitudes, on every usable kernel table (opt-in ones
 * included). The inputs make every logit exact in float32 (small integers times powers of two in q and k, a
 * power-of-two softmax_scale), so the only error left in the LSE is the log-sum itself: the bound is 2 ulps of
 * the exact LSE plus (num_keys + 4)·2^-23 for the float32 sum of the exp2 terms (docs/SEMANTICS.md §4). Folding
 * log2(e) into the query or the running max (the old driver) misses this by 2–14 ulps at |logit| 1e3..1e6.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "attn/attn.h"
#include "harness.h"

/* The exact LSE in double of logits x[0..n): max + log Σ e^(x − max). */
static double lse_exact(const double *x, int64_t n) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; j++)
        mx = x[j] > mx ? x[j] : mx;
    double s = 0.0;
    for (int64_t j = 0; j < n; j++)
        s += exp(x[j] - mx);
    return mx + log(s);
}

static double ulp_f32(double x) {
    return (double)nextafterf((float)fabs(x), INFINITY) - fabs((double)(float)x);
}

/* One table × dtype × shape: q rows [seq_q, num_heads, head_size] of the integer pattern times 2^e_q, keys of
 * random integers in [-4, 4] times 2^e_k, V random. Returns the number of LSE values outside the bound. */
static int check_case(const char *isa, attn_dtype dtype, int64_t seq_q, int64_t num_heads, int64_t num_keys,
                      int64_t head_size, int e_q, int e_k, float scale, th_rng *r, double *worst_ulps) {
    const int64_t num_kv_heads = 1;
    const size_t nq = (size_t)(seq_q * num_heads * head_size), nk = (size_t)(num_keys * num_kv_heads * head_size);
    void *q = th_alloc_fill(r, dtype, nq, 0, 0), *k = th_alloc_fill(r, dtype, nk, 0, 0);
    void *v = th_alloc_fill(r, dtype, nk, -1, 1), *out = th_alloc_fill(r, dtype, nq, 0, 0);
    float *lse = (float *)calloc((size_t)(num_heads * seq_q), sizeof(float));
    double *qd = (double *)malloc(nq * sizeof(double)), *kd = (double *)malloc(nk * sizeof(double));
    for (size_t i = 0; i < nq; i++) {
        qd[i] = ldexp((double)th_rng_int(r, 1, 4), e_q); /* one sign: every logit of a key has one magnitude */
        th_set(q, dtype, i, (float)qd[i]);
    }
    for (size_t i = 0; i < nk; i++) {
        kd[i] = ldexp((double)th_rng_int(r, -1, 4), e_k);
        th_set(k, dtype, i, (float)kd[i]);
    }
    const int64_t qs[4] = {1, seq_q, num_heads, head_size}, ks[4] = {1, num_keys, num_kv_heads, head_size};
    const int64_t ls[3] = {1, num_heads, seq_q};
    attn_tensor tq = attn_tensor_make(q, dtype, 4, qs), tk = attn_tensor_make(k, dtype, 4, ks);
    attn_tensor tv = attn_tensor_make(v, dtype, 4, ks), to = attn_tensor_make(out, dtype, 4, qs);
    attn_tensor tl = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, ls);
    attn_params params;
    attn_params_init(&params);
    params.softmax_scale = scale;
    attn_ctx *ctx = NULL;
    assert_int_equal(attn_ctx_create(&ctx), ATTN_STATUS_OK);
    assert_int_equal(attn_ctx_set_isa(ctx, isa), ATTN_STATUS_OK);
    assert_int_equal(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &params, &to, &tl), ATTN_STATUS_OK);
    attn_ctx_destroy(ctx);
    int bad = 0;
    double *x = (double *)malloc((size_t)num_keys * sizeof(double));
    for (int64_t i = 0; i < seq_q; i++)
        for (int64_t h = 0; h < num_heads; h++) {
            for (int64_t j = 0; j < num_keys; j++) {
                double dot = 0.0;
                for (int64_t d = 0; d < head_size; d++)
                    dot += qd[(i * num_heads + h) * head_size + d] * kd[j * head_size + d];
                x[j] = (double)scale * dot;
            }
            const double want = lse_exact(x, num_keys), got = lse[h * seq_q + i];
            const double bound = 2.0 * ulp_f32(want) + (double)(num_keys + 4) * ldexp(1.0, -23);
            const double ulps = fabs(got - want) / ulp_f32(want);
            if (ulps > *worst_ulps)
                *worst_ulps = ulps;
            if (!(fabs(got - want) <= bound)) {
                if (bad < 3)
                    printf("REPRO lse_large_logits: isa=%s dtype=%s seq_q=%lld heads=%lld keys=%lld head_size=%lld "
                           "e_q=%d e_k=%d scale=%g row (%lld,%lld): lse %.9g, exact %.9g (%.1f ulps, bound %.3g)\n",
                           isa, attn_dtype_name(dtype), (long long)seq_q, (long long)num_heads, (long long)num_keys,
                           (long long)head_size, e_q, e_k, (double)scale, (long long)i, (long long)h, got, want, ulps,
                           bound);
                bad++;
            }
        }
    free(x), free(q), free(k), free(v), free(out), free(lse), free(qd), free(kd);
    return bad;
}

static int usable_tables(const char **names, int cap) {
    int n = 0;
    for (int32_t i = 0; i < attn_isa_count() && n < cap; i++)
        if (attn_isa_available(attn_isa_name(i)))
            names[n++] = attn_isa_name(i);
    for (int32_t i = 0; attn_isa_opt_in_name(i) != NULL && n < cap; i++)
        if (attn_isa_available(attn_isa_opt_in_name(i)))
            names[n++] = attn_isa_opt_in_name(i);
    return n;
}

static void test_lse_large_logits(void **state) {
    (void)state;
    const char *names[16];
    const int nt = usable_tables(names, 16);
    const attn_dtype dtypes[2] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16};
    /* (e_q, e_k, scale): logit magnitudes from ~1e2 up to ~4e6 (head size 128: Σ q·k ≤ 4·4·128 = 2048 units) */
    const struct {
        int e_q, e_k;
        float scale;
    } mags[4] = {{0, 0, 0.125f}, {0, 0, 1.0f}, {3, 0, 1.0f}, {5, 6, 0.25f}};
    const int64_t shapes[3][2] = {{1, 4}, {3, 4}, {40, 1}}; /* (seq_q, num_heads): few-row and full blocks */
    const int64_t key_counts[3] = {1, 77, 600};
    th_rng r;
    th_rng_seed(&r, 41);
    int bad = 0;
    for (int t = 0; t < nt; t++) {
        double worst = 0.0;
        for (int di = 0; di < 2; di++)
            for (int mi = 0; mi < 4; mi++)
                for (int si = 0; si < 3; si++)
                    for (int ki = 0; ki < 3; ki++) {
                        const int64_t head_size = (si + ki) % 2 ? 128 : 64;
                        bad += check_case(names[t], dtypes[di], shapes[si][0], shapes[si][1], key_counts[ki], head_size,
                                          mags[mi].e_q, mags[mi].e_k, mags[mi].scale, &r, &worst);
                    }
        printf("lse_large_logits: table %s: worst %.2f ulps of the exact LSE\n", names[t], worst);
    }
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lse_large_logits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
