/*
 * test_mpi_ring.c — ring attention (attn_mpi_ring_forward / _paged) under mpirun -np 2 / 3 / 4: zig-zag shards
 * of a global sequence (also shorter than 2P, so some ranks hold zero rows, passed with zero strides),
 * compared with one process (attn_forward on the whole sequence) and the oracle (attn_ref_forward), bitwise
 * repeat, bitwise paged == dense, bad arguments on one rank fail everywhere.
 */
#include "mpi_test.h"

#define H 4
#define HKV 2

typedef struct ring_case {
    int64_t batch, seq;
    int32_t dk, dv, causal;
    attn_dtype kv_dtype;
    int sinks_softcap;
} ring_case;

static void to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        y[i] = (uint16_t)(u >> 16);
    }
}

static void run_case(attn_ctx *ctx, const ring_case *c) {
    const int64_t B = c->batch, S = c->seq, DK = c->dk, DV = c->dv;
    const size_t kes = attn_dtype_size(c->kv_dtype);
    float *q = malloc(4 * B * S * H * DK), *kf = malloc(4 * B * S * HKV * DK), *vf = malloc(4 * B * S * HKV * DV);
    mt_fill(q, B * S * H * DK, 11);
    mt_fill(kf, B * S * HKV * DK, 12);
    mt_fill(vf, B * S * HKV * DV, 13);
    void *k = kf, *v = vf;
    if (c->kv_dtype == ATTN_DTYPE_BF16) {
        k = malloc(2 * B * S * HKV * DK);
        v = malloc(2 * B * S * HKV * DV);
        to_bf16(kf, k, B * S * HKV * DK);
        to_bf16(vf, v, B * S * HKV * DV);
    }
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = c->causal;
    float sinks[H] = {1.0f, -0.5f, 0.25f, 3.0f};
    if (c->sinks_softcap) {
        prm.sinks = sinks;
        prm.softcap = 4.0f;
    }
    /* one process and the oracle over the global sequence */
    float *o1 = malloc(4 * B * S * H * DV), *o2 = malloc(4 * B * S * H * DV), *l1 = malloc(4 * B * H * S),
          *l2 = malloc(4 * B * H * S);
    attn_tensor tq = mt_t(q, ATTN_DTYPE_F32, 4, B, S, H, DK, 0), tk = mt_t(k, c->kv_dtype, 4, B, S, HKV, DK, 0),
                tv = mt_t(v, c->kv_dtype, 4, B, S, HKV, DV, 0);
    attn_tensor to1 = mt_t(o1, ATTN_DTYPE_F32, 4, B, S, H, DV, 0), to2 = mt_t(o2, ATTN_DTYPE_F32, 4, B, S, H, DV, 0);
    attn_tensor tl1 = mt_t(l1, ATTN_DTYPE_F32, 3, B, H, S, 0, 0), tl2 = mt_t(l2, ATTN_DTYPE_F32, 3, B, H, S, 0, 0);
    MT_OK(attn_forward(ctx, ATTN_LAYOUT_BSND, &tq, &tk, &tv, &prm, &to1, &tl1));
    MT_OK(attn_ref_forward(ATTN_LAYOUT_BSND, &tq, &tk, &tv, &prm, &to2, &tl2));
    /* this rank's zig-zag rows */
    int64_t cs[2], cl[2];
    MT_OK(attn_mpi_zigzag_chunks(S, mt_world, mt_rank, cs, cl));
    const int64_t SL = cl[0] + cl[1];
    float *lq = malloc(4 * B * SL * H * DK + 4), *lo = malloc(4 * B * SL * H * DV + 4), *lo2 = malloc(4 * B * SL * H * DV + 4);
    float *ll = malloc(4 * B * H * SL + 4), *ll2 = malloc(4 * B * H * SL + 4);
    char *lk = malloc(kes * B * SL * HKV * DK + 4), *lv = malloc(kes * B * SL * HKV * DV + 4);
    float *r1 = malloc(4 * B * SL * H * DV + 4), *r2 = malloc(4 * B * SL * H * DV + 4);
    float *rl1 = malloc(4 * B * H * SL + 4), *rl2 = malloc(4 * B * H * SL + 4);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < SL; t++) {
            const int64_t g = t < cl[0] ? cs[0] + t : cs[1] + (t - cl[0]);
            memcpy(lq + (b * SL + t) * H * DK, q + (b * S + g) * H * DK, 4 * H * DK);
            memcpy(lk + (b * SL + t) * HKV * DK * kes, (char *)k + (b * S + g) * HKV * DK * kes, kes * HKV * DK);
            memcpy(lv + (b * SL + t) * HKV * DV * kes, (char *)v + (b * S + g) * HKV * DV * kes, kes * HKV * DV);
            memcpy(r1 + (b * SL + t) * H * DV, o1 + (b * S + g) * H * DV, 4 * H * DV);
            memcpy(r2 + (b * SL + t) * H * DV, o2 + (b * S + g) * H * DV, 4 * H * DV);
            for (int64_t h = 0; h < H; h++) {
                rl1[(b * H + h) * SL + t] = l1[(b * H + h) * S + g];
                rl2[(b * H + h) * SL + t] = l2[(b * H + h) * S + g];
            }
        }
    attn_mpi_ring_config cfg = {B, S, H, HKV, (int32_t)DK, (int32_t)DV, c->kv_dtype};
    attn_mpi_ring_plan *plan = NULL;
    MT_OK(attn_mpi_ring_plan_create(MPI_COMM_WORLD, &cfg, &plan));
    attn_tensor xq = mt_t(lq, ATTN_DTYPE_F32, 4, B, SL, H, DK, 0), xk = mt_t(lk, c->kv_dtype, 4, B, SL, HKV, DK, 0),
                xv = mt_t(lv, c->kv_dtype, 4, B, SL, HKV, DV, 0);
    attn_tensor xo = mt_t(lo, ATTN_DTYPE_F32, 4, B, SL, H, DV, 0), xo2 = mt_t(lo2, ATTN_DTYPE_F32, 4, B, SL, H, DV, 0);
    attn_tensor xl = mt_t(ll, ATTN_DTYPE_F32, 3, B, H, SL, 0, 0), xl2 = mt_t(ll2, ATTN_DTYPE_F32, 3, B, H, SL, 0, 0);
    if (SL == 0) { /* an empty shard: NumPy gives such arrays zero strides; they must be accepted */
        attn_tensor *e[7] = {&xq, &xk, &xv, &xo, &xo2, &xl, &xl2};
        for (int i = 0; i < 7; i++)
            memset(e[i]->strides, 0, sizeof e[i]->strides);
    }
    attn_mpi_stats st;
    MT_OK(attn_mpi_ring_forward(ctx, plan, &xq, &xk, &xv, &prm, &xo, &xl, &st));
    MT_OK(attn_mpi_ring_forward(ctx, plan, &xq, &xk, &xv, &prm, &xo2, &xl2, NULL));
    MT_CHECK(memcmp(lo, lo2, 4 * B * SL * H * DV) == 0 && memcmp(ll, ll2, 4 * B * H * SL) == 0, "repeat differs");
    MT_CHECK(mt_world == 1 || st.num_messages == mt_world - 1, "messages %lld", (long long)st.num_messages);
    const double tol = 2e-5;
    const double e1 = mt_max_abs_diff(lo, r1, B * SL * H * DV), e2 = mt_max_abs_diff(lo, r2, B * SL * H * DV);
    const double f1 = mt_lse_diff(ll, rl1, B * H * SL), f2 = mt_lse_diff(ll, rl2, B * H * SL);
    MT_CHECK(e1 <= tol && e2 <= tol && f1 <= tol && f2 <= tol,
             "B=%lld S=%lld causal=%d kv=%s: out err %.3g / %.3g, lse %.3g / %.3g (tol %.1g)", (long long)B,
             (long long)S, c->causal, attn_dtype_name(c->kv_dtype), e1, e2, f1, f2, tol);
    double emax[4] = {e1, e2, f1, f2}, gmax[4];
    MPI_Allreduce(emax, gmax, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (mt_rank == 0)
        printf("ring np=%d B=%lld S=%lld dk=%d dv=%d causal=%d kv=%s sinks+softcap=%d: max|out-one process| %.2e, "
               "max|out-oracle| %.2e, lse %.2e / %.2e, bitwise repeat ok\n",
               mt_world, (long long)B, (long long)S, c->dk, c->dv, c->causal, attn_dtype_name(c->kv_dtype),
               c->sinks_softcap, gmax[0], gmax[1], gmax[2], gmax[3]);
    attn_mpi_ring_plan_free(plan);
    /* paged: batch 1, dk == dv, this rank's rows in its own cache at reversed block ids */
    if (B == 1 && DK == DV) {
        const int64_t bs = 8, nb = (SL + bs - 1) / bs + 1;
        char *cache = calloc((size_t)(2 * nb * bs * HKV * DK), kes);
        int32_t *bt = malloc(4 * (nb + 1));
        for (int64_t i = 0; i < nb; i++)
            bt[i] = (int32_t)(nb - 1 - i);
        for (int64_t t = 0; t < SL; t++) {
            const int64_t slot = bt[t / bs] * bs + t % bs;
            memcpy(cache + slot * HKV * DK * kes, lk + t * HKV * DK * kes, kes * HKV * DK);
            memcpy(cache + (nb * bs + slot) * HKV * DK * kes, lv + t * HKV * DK * kes, kes * HKV * DK);
        }
        MT_OK(attn_mpi_ring_plan_create(MPI_COMM_WORLD, &cfg, &plan));
        attn_tensor pc = mt_t(cache, c->kv_dtype, 5, 2, nb, bs, HKV, DK), pb = mt_t(bt, ATTN_DTYPE_I32, 1, nb, 0, 0, 0, 0);
        attn_tensor pq = mt_t(lq, ATTN_DTYPE_F32, 3, SL, H, DK, 0, 0), po = mt_t(lo2, ATTN_DTYPE_F32, 3, SL, H, DV, 0, 0);
        attn_tensor pl = mt_t(ll2, ATTN_DTYPE_F32, 2, H, SL, 0, 0, 0);
        if (SL == 0) {
            memset(pq.strides, 0, sizeof pq.strides);
            memset(po.strides, 0, sizeof po.strides);
            memset(pl.strides, 0, sizeof pl.strides);
        }
        MT_OK(attn_mpi_ring_forward_paged(ctx, plan, &pq, &pc, &pb, &prm, &po, &pl, NULL));
        MT_CHECK(memcmp(lo, lo2, 4 * SL * H * DV) == 0 && memcmp(ll, ll2, 4 * H * SL) == 0,
                 "paged ring differs from dense ring (S=%lld)", (long long)S);
        /* a bad block id on rank 0 (it always holds the last chunk, never empty): every rank fails, nothing
         * written */
        float sentinel = lo2[0];
        if (mt_rank == 0)
            bt[0] = (int32_t)nb;
        lo2[0] = 777.0f;
        attn_status s2 = attn_mpi_ring_forward_paged(ctx, plan, &pq, &pc, &pb, &prm, &po, &pl, NULL);
        MT_CHECK(s2 == ATTN_STATUS_INVALID_ARGUMENT && lo2[0] == 777.0f, "bad block id: %s", attn_status_string(s2));
        if (mt_rank == 0)
            MT_CHECK(strstr(attn_mpi_last_error(), "block_table: entry 0") != NULL, "message '%s'", attn_mpi_last_error());
        (void)sentinel;
        attn_mpi_ring_plan_free(plan);
        free(cache);
        free(bt);
        if (mt_rank == 0)
            printf("ring paged np=%d S=%lld: bitwise equal to the dense ring\n", mt_world, (long long)S);
    }
    free(q); free(kf); free(vf);
    if (k != kf) { free(k); free(v); }
    free(o1); free(o2); free(l1); free(l2); free(lq); free(lo); free(lo2); free(ll); free(ll2); free(lk); free(lv);
    free(r1); free(r2); free(rl1); free(rl2);
}

static void test_errors(attn_ctx *ctx) {
    attn_mpi_ring_config cfg = {1, 32, H, HKV, 16, 16, ATTN_DTYPE_F32};
    attn_mpi_ring_plan *plan = NULL;
    MT_OK(attn_mpi_ring_plan_create(MPI_COMM_WORLD, &cfg, &plan));
    int64_t cs[2], cl[2];
    MT_OK(attn_mpi_zigzag_chunks(32, mt_world, mt_rank, cs, cl));
    const int64_t SL = cl[0] + cl[1];
    float *x = calloc((size_t)(SL * H * 16), 4), *o = malloc(4 * SL * H * 16);
    for (int64_t i = 0; i < SL * H * 16; i++)
        o[i] = 99.0f;
    attn_tensor q = mt_t(x, ATTN_DTYPE_F32, 4, 1, SL, H, 16, 0), kv = mt_t(x, ATTN_DTYPE_F32, 4, 1, SL, HKV, 16, 0);
    attn_tensor out = mt_t(o, ATTN_DTYPE_F32, 4, 1, SL, H, 16, 0);
    attn_tensor badk = kv;
    if (mt_rank == 0)
        badk.shape[1] = SL + 1;
    attn_status s = attn_mpi_ring_forward(ctx, plan, &q, &badk, &kv, NULL, &out, NULL, NULL);
    MT_CHECK(s == ATTN_STATUS_INVALID_ARGUMENT, "bad k: %s", attn_status_string(s));
    if (mt_rank == 0)
        MT_CHECK(strstr(attn_mpi_last_error(), "k: shape[1]") != NULL, "message '%s'", attn_mpi_last_error());
    attn_params prm;
    attn_params_init(&prm);
    const float slopes[H] = {1, 1, 1, 1};
    prm.alibi_slopes = slopes;
    s = attn_mpi_ring_forward(ctx, plan, &q, &kv, &kv, &prm, &out, NULL, NULL);
    MT_CHECK(s == ATTN_STATUS_UNSUPPORTED, "alibi: %s", attn_status_string(s));
    attn_params_init(&prm);
    prm.causal = mt_rank == 0 ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_BOTTOM_RIGHT;
    s = attn_mpi_ring_forward(ctx, plan, &q, &kv, &kv, &prm, &out, NULL, NULL);
    if (mt_world > 1)
        MT_CHECK(s == ATTN_STATUS_INVALID_ARGUMENT && strstr(attn_mpi_last_error(), "params.causal"), "causal differs: %s",
                 attn_status_string(s));
    int untouched = 1;
    for (int64_t i = 0; i < SL * H * 16; i++)
        untouched &= o[i] == 99.0f;
    MT_CHECK(untouched, "out written by a failing call");
    attn_mpi_ring_plan_free(plan);
    free(x);
    free(o);
    int64_t a[2], b[2];
    MT_CHECK(attn_mpi_zigzag_chunks(10, 2, 2, a, b) == ATTN_STATUS_INVALID_ARGUMENT, "rank out of range");
    MT_OK(attn_mpi_zigzag_chunks(10, 2, 0, a, b));
    MT_CHECK(a[0] == 0 && b[0] == 2 && a[1] == 7 && b[1] == 3, "zigzag of 10 over 2: (%lld,%lld) (%lld,%lld)",
             (long long)a[0], (long long)b[0], (long long)a[1], (long long)b[1]);
}

int main(int argc, char **argv) {
    mt_init(&argc, &argv);
    attn_ctx *ctx = NULL;
    MT_OK(attn_ctx_create(&ctx));
    MT_OK(attn_ctx_set_num_threads(ctx, 1));
    const ring_case cases[] = {
        {2, 50, 32, 16, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_F32, 0},
        {1, 61, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_F32, 1},
        {1, 64, 64, 64, ATTN_CAUSAL_NONE, ATTN_DTYPE_BF16, 0},
        {2, 37, 16, 16, ATTN_CAUSAL_TOP_LEFT, ATTN_DTYPE_BF16, 1},
        {1, 203, 64, 64, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_BF16, 0},
        /* shards of zero rows on some ranks (S < 2P), passed with zero strides */
        {1, 1, 32, 32, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_F32, 1},
        {2, 3, 16, 16, ATTN_CAUSAL_NONE, ATTN_DTYPE_BF16, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i]);
    test_errors(ctx);
    attn_ctx_destroy(ctx);
    return mt_finish("test_mpi_ring");
}
