/*
 * test_mpi_dcp.c — DCP decode (attn_mpi_dcp_*) under mpirun -np 2 / 3 / 4: each rank stores its interleaved
 * shard of every request in its own paged cache (attn_mpi_dcp_slot_mapping + attn_reshape_and_cache); the
 * merged result is compared with one process over the whole cache (attn_paged_attention) and with the oracle
 * (attn_ref_paged_attention), repeated calls must give the same bits, every rank must hold the same bits,
 * and bad arguments on ONE rank must make every rank fail with nothing written.
 */
#include "mpi_test.h"

#define H 4
#define HKV 2
#define D 32
#define NREQ 4

static const int32_t g_seq[NREQ] = {37, 130, 5, 1};
static const int32_t g_qlen[NREQ] = {1, 3, 1, 1};

static uint64_t kv_seed(int r, int which) {
    return 1000u + (uint64_t)r * 10u + (uint64_t)which;
}

typedef struct dcp_case {
    int32_t interleave, block_size, causal;
    attn_dtype cache_dtype, q_dtype;
    int sinks_softcap;
} dcp_case;

static void run_case(attn_ctx *ctx, const dcp_case *c) {
    const int bs = c->block_size;
    const size_t ces = attn_dtype_size(c->cache_dtype), qes = attn_dtype_size(c->q_dtype);
    int32_t qsl[NREQ + 1] = {0};
    for (int r = 0; r < NREQ; r++)
        qsl[r + 1] = qsl[r] + g_qlen[r];
    const int T = qsl[NREQ];
    /* global K/V per request in f32, converted to the cache dtype by attn_reshape_and_cache */
    float *kg[NREQ], *vg[NREQ];
    for (int r = 0; r < NREQ; r++) {
        kg[r] = malloc(sizeof(float) * g_seq[r] * HKV * D);
        vg[r] = malloc(sizeof(float) * g_seq[r] * HKV * D);
        mt_fill(kg[r], (int64_t)g_seq[r] * HKV * D, kv_seed(r, 0));
        mt_fill(vg[r], (int64_t)g_seq[r] * HKV * D, kv_seed(r, 1));
    }
    /* block tables: global (one process) and local (this rank's shard) */
    int mb_g = 0, mb_l = 0, nb_g = 0, nb_l = 0;
    for (int r = 0; r < NREQ; r++) {
        const int g = (g_seq[r] + bs - 1) / bs;
        const int l = (int)((attn_mpi_dcp_local_len(g_seq[r], mt_world, c->interleave, mt_rank) + bs - 1) / bs);
        mb_g = g > mb_g ? g : mb_g;
        mb_l = l > mb_l ? l : mb_l;
        nb_g += g;
        nb_l += l;
    }
    if (mb_l < 1)
        mb_l = 1;
    if (nb_l < 1)
        nb_l = 1;
    int32_t *bt_g = calloc((size_t)NREQ * mb_g, 4), *bt_l = calloc((size_t)NREQ * mb_l, 4);
    for (int r = 0, ng = 0, nl = 0; r < NREQ; r++) {
        const int g = (g_seq[r] + bs - 1) / bs;
        const int l = (int)((attn_mpi_dcp_local_len(g_seq[r], mt_world, c->interleave, mt_rank) + bs - 1) / bs);
        for (int j = 0; j < g; j++)
            bt_g[r * mb_g + j] = nb_g - 1 - (ng++); /* reversed ids: the table really maps */
        for (int j = 0; j < l; j++)
            bt_l[r * mb_l + j] = nl++;
    }
    void *cache_g = calloc((size_t)2 * nb_g * bs * HKV * D, ces), *cache_l = calloc((size_t)2 * nb_l * bs * HKV * D, ces);
    attn_tensor cg = mt_t(cache_g, c->cache_dtype, 5, 2, nb_g, bs, HKV, D);
    attn_tensor cl = mt_t(cache_l, c->cache_dtype, 5, 2, nb_l, bs, HKV, D);
    for (int r = 0; r < NREQ; r++) {
        const int L = g_seq[r];
        int64_t *slots_g = malloc(sizeof(int64_t) * L), *slots_l = malloc(sizeof(int64_t) * L);
        for (int p = 0; p < L; p++)
            slots_g[p] = (int64_t)bt_g[r * mb_g + p / bs] * bs + p % bs;
        MT_OK(attn_mpi_dcp_slot_mapping(mt_rank, mt_world, c->interleave, bs, 0, L, bt_l + r * mb_l, mb_l, slots_l));
        int local = 0;
        for (int p = 0; p < L; p++)
            local += slots_l[p] >= 0;
        MT_CHECK(local == attn_mpi_dcp_local_len(L, mt_world, c->interleave, mt_rank), "local %d", local);
        attn_tensor kk = mt_t(kg[r], ATTN_DTYPE_F32, 3, L, HKV, D, 0, 0), vv = mt_t(vg[r], ATTN_DTYPE_F32, 3, L, HKV, D, 0, 0);
        attn_tensor sg = mt_t(slots_g, ATTN_DTYPE_I64, 1, L, 0, 0, 0, 0), sl = mt_t(slots_l, ATTN_DTYPE_I64, 1, L, 0, 0, 0, 0);
        if (c->cache_dtype == ATTN_DTYPE_F32) {
            MT_OK(attn_reshape_and_cache(ctx, &kk, &vv, &cg, &sg));
            MT_OK(attn_reshape_and_cache(ctx, &kk, &vv, &cl, &sl));
        } else { /* key/value in the cache dtype */
            uint16_t *kb = malloc(2u * L * HKV * D), *vb = malloc(2u * L * HKV * D);
            for (int64_t i = 0; i < (int64_t)L * HKV * D; i++) {
                uint32_t u, w;
                memcpy(&u, &kg[r][i], 4);
                memcpy(&w, &vg[r][i], 4);
                kb[i] = (uint16_t)(u >> 16);
                vb[i] = (uint16_t)(w >> 16);
            }
            attn_tensor kb_t = mt_t(kb, c->cache_dtype, 3, L, HKV, D, 0, 0), vb_t = mt_t(vb, c->cache_dtype, 3, L, HKV, D, 0, 0);
            MT_OK(attn_reshape_and_cache(ctx, &kb_t, &vb_t, &cg, &sg));
            MT_OK(attn_reshape_and_cache(ctx, &kb_t, &vb_t, &cl, &sl));
            free(kb);
            free(vb);
        }
        free(slots_g);
        free(slots_l);
    }
    /* queries (the same on every rank) */
    float *qf = malloc(sizeof(float) * T * H * D);
    mt_fill(qf, (int64_t)T * H * D, 77);
    void *qd = malloc(qes * T * H * D);
    if (c->q_dtype == ATTN_DTYPE_F32)
        memcpy(qd, qf, sizeof(float) * T * H * D);
    else
        for (int64_t i = 0; i < (int64_t)T * H * D; i++) {
            uint32_t u;
            memcpy(&u, &qf[i], 4);
            ((uint16_t *)qd)[i] = (uint16_t)(u >> 16);
        }
    attn_tensor q = mt_t(qd, c->q_dtype, 3, T, H, D, 0, 0);
    int32_t seq[NREQ];
    memcpy(seq, g_seq, sizeof seq);
    attn_tensor tq = mt_t(qsl, ATTN_DTYPE_I32, 1, NREQ + 1, 0, 0, 0, 0), ts = mt_t(seq, ATTN_DTYPE_I32, 1, NREQ, 0, 0, 0, 0);
    attn_tensor tbg = mt_t(bt_g, ATTN_DTYPE_I32, 2, NREQ, mb_g, 0, 0, 0), tbl = mt_t(bt_l, ATTN_DTYPE_I32, 2, NREQ, mb_l, 0, 0, 0);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = c->causal;
    float sinks[H] = {0.5f, -1.0f, 2.0f, 0.0f};
    if (c->sinks_softcap) {
        prm.sinks = sinks;
        prm.softcap = 5.0f;
    }
    /* one process: fast path and oracle on the whole cache (output in q's dtype) */
    void *o1 = malloc(qes * T * H * D), *o2 = malloc(qes * T * H * D), *od = malloc(qes * T * H * D);
    void *od2 = malloc(qes * T * H * D);
    float l1[H * 6], l2[H * 6], ld[H * 6], ld2[H * 6];
    attn_tensor to1 = mt_t(o1, c->q_dtype, 3, T, H, D, 0, 0), to2 = mt_t(o2, c->q_dtype, 3, T, H, D, 0, 0);
    attn_tensor tod = mt_t(od, c->q_dtype, 3, T, H, D, 0, 0), tod2 = mt_t(od2, c->q_dtype, 3, T, H, D, 0, 0);
    attn_tensor tl1 = mt_t(l1, ATTN_DTYPE_F32, 2, H, T, 0, 0, 0), tl2 = mt_t(l2, ATTN_DTYPE_F32, 2, H, T, 0, 0, 0);
    attn_tensor tld = mt_t(ld, ATTN_DTYPE_F32, 2, H, T, 0, 0, 0), tld2 = mt_t(ld2, ATTN_DTYPE_F32, 2, H, T, 0, 0, 0);
    MT_OK(attn_paged_attention(ctx, &q, &cg, &tq, &ts, &tbg, &prm, &to1, &tl1));
    MT_OK(attn_ref_paged_attention(&q, &cg, &tq, &ts, &tbg, &prm, &to2, &tl2));
    /* DCP */
    attn_mpi_dcp_config cfg = {c->interleave, H, D, 16, 16}; /* the same on every rank */
    attn_mpi_dcp_plan *plan = NULL;
    MT_OK(attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &cfg, &plan));
    attn_mpi_stats stats;
    MT_OK(attn_mpi_dcp_forward(ctx, plan, &q, &cl, &tq, &ts, &tbl, &prm, &tod, &tld, &stats));
    MT_OK(attn_mpi_dcp_forward(ctx, plan, &q, &cl, &tq, &ts, &tbl, &prm, &tod2, &tld2, NULL));
    MT_CHECK(memcmp(od, od2, qes * T * H * D) == 0 && memcmp(ld, ld2, sizeof(float) * H * T) == 0,
             "repeated DCP calls differ (I=%d)", c->interleave);
    MT_CHECK(mt_same_on_all_ranks(od, qes * T * H * D) && mt_same_on_all_ranks(ld, sizeof(float) * H * T),
             "ranks hold different bits (I=%d)", c->interleave);
    MT_CHECK(stats.bytes_sent == (int64_t)T * H * (D + 1) * 4 * (mt_world - 1), "bytes_sent %lld",
             (long long)stats.bytes_sent);
    /* compare in float */
    float *f1 = malloc(sizeof(float) * T * H * D), *f2 = malloc(sizeof(float) * T * H * D), *fd = malloc(sizeof(float) * T * H * D);
    for (int64_t i = 0; i < (int64_t)T * H * D; i++) {
        if (c->q_dtype == ATTN_DTYPE_F32) {
            f1[i] = ((float *)o1)[i];
            f2[i] = ((float *)o2)[i];
            fd[i] = ((float *)od)[i];
        } else {
            uint32_t a = (uint32_t)((uint16_t *)o1)[i] << 16, b = (uint32_t)((uint16_t *)o2)[i] << 16,
                     d = (uint32_t)((uint16_t *)od)[i] << 16;
            memcpy(&f1[i], &a, 4);
            memcpy(&f2[i], &b, 4);
            memcpy(&fd[i], &d, 4);
        }
    }
    /* f32: partial states and merges in float32 (rounding ~1e-7 per op); bf16 output: one bf16 ulp at |out| < 1 */
    const double tol = c->q_dtype == ATTN_DTYPE_F32 ? 2e-5 : 8e-3;
    const double e1 = mt_max_abs_diff(fd, f1, (int64_t)T * H * D), e2 = mt_max_abs_diff(fd, f2, (int64_t)T * H * D);
    const double el1 = mt_lse_diff(ld, l1, H * T), el2 = mt_lse_diff(ld, l2, H * T);
    MT_CHECK(e1 <= tol && e2 <= tol, "I=%d bs=%d causal=%d cache=%s q=%s sinks=%d: out err vs one process %.3g, vs oracle %.3g (tol %.1g)",
             c->interleave, bs, c->causal, attn_dtype_name(c->cache_dtype), attn_dtype_name(c->q_dtype),
             c->sinks_softcap, e1, e2, tol);
    MT_CHECK(el1 <= 2e-5 && el2 <= 2e-5, "I=%d: lse err vs one process %.3g, vs oracle %.3g", c->interleave, el1, el2);
    if (mt_rank == 0)
        printf("dcp np=%d I=%d bs=%d causal=%d cache=%s q=%s sinks+softcap=%d: max|out-one process| %.2e, "
               "max|out-oracle| %.2e, lse %.2e / %.2e, bitwise repeat ok\n",
               mt_world, c->interleave, bs, c->causal, attn_dtype_name(c->cache_dtype), attn_dtype_name(c->q_dtype),
               c->sinks_softcap, e1, e2, el1, el2);
    attn_mpi_dcp_plan_free(plan);
    free(f1); free(f2); free(fd); free(o1); free(o2); free(od); free(od2); free(qf); free(qd);
    free(cache_g); free(cache_l); free(bt_g); free(bt_l);
    for (int r = 0; r < NREQ; r++) {
        free(kg[r]);
        free(vg[r]);
    }
}

/* Bad input on one rank only: every rank fails with the same status, nothing written anywhere. */
static void test_errors(attn_ctx *ctx) {
    const int bs = 16, T = 2;
    attn_mpi_dcp_config cfg = {2, H, D, 4, 4};
    attn_mpi_dcp_plan *plan = NULL;
    MT_OK(attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &cfg, &plan));
    float cache[2 * 4 * 16 * HKV * D];
    mt_fill(cache, 2 * 4 * bs * HKV * D, 5);
    float q[T * H * D], out[T * H * D], lse[H * T];
    mt_fill(q, T * H * D, 6);
    for (int i = 0; i < T * H * D; i++)
        out[i] = 12345.0f;
    for (int i = 0; i < H * T; i++)
        lse[i] = 12345.0f;
    int32_t qsl[3] = {0, 1, 2}, seq[2] = {20, 7}, bt[2 * 2] = {0, 1, 2, 3};
    attn_tensor tc = mt_t(cache, ATTN_DTYPE_F32, 5, 2, 4, bs, HKV, D);
    attn_tensor tq = mt_t(q, ATTN_DTYPE_F32, 3, T, H, D, 0, 0), to = mt_t(out, ATTN_DTYPE_F32, 3, T, H, D, 0, 0);
    attn_tensor tl = mt_t(lse, ATTN_DTYPE_F32, 2, H, T, 0, 0, 0);
    attn_tensor tqs = mt_t(qsl, ATTN_DTYPE_I32, 1, 3, 0, 0, 0, 0), ts = mt_t(seq, ATTN_DTYPE_I32, 1, 2, 0, 0, 0, 0);
    attn_tensor tb = mt_t(bt, ATTN_DTYPE_I32, 2, 2, 2, 0, 0, 0);
    /* the last rank passes a q with the wrong head count */
    attn_tensor bad = tq;
    if (mt_rank == mt_world - 1)
        bad.shape[1] = H - 1;
    attn_status st = attn_mpi_dcp_forward(ctx, plan, &bad, &tc, &tqs, &ts, &tb, NULL, &to, &tl, NULL);
    MT_CHECK(st == ATTN_STATUS_INVALID_ARGUMENT, "status %s", attn_status_string(st));
    if (mt_rank == mt_world - 1)
        MT_CHECK(strstr(attn_mpi_last_error(), "q: shape[1]=3") != NULL, "message '%s'", attn_mpi_last_error());
    else if (mt_world > 1)
        MT_CHECK(strstr(attn_mpi_last_error(), "rank") != NULL, "message '%s'", attn_mpi_last_error());
    /* a bad block id on one rank (found by libattn inside the local compute) */
    int32_t bt_bad[4] = {0, 1, 2, 99};
    attn_tensor tbb = mt_t(mt_rank == 0 ? bt_bad : bt, ATTN_DTYPE_I32, 2, 2, 2, 0, 0, 0);
    int32_t seq_long[2] = {20, 2 * mt_world * 16}; /* request 1 needs its second local block */
    attn_tensor tsl = mt_t(seq_long, ATTN_DTYPE_I32, 1, 2, 0, 0, 0, 0);
    st = attn_mpi_dcp_forward(ctx, plan, &tq, &tc, &tqs, &tsl, &tbb, NULL, &to, &tl, NULL);
    MT_CHECK(st == ATTN_STATUS_INVALID_ARGUMENT, "bad block id: status %s", attn_status_string(st));
    if (mt_rank == 0)
        MT_CHECK(strstr(attn_mpi_last_error(), "block_table") != NULL, "message '%s'", attn_mpi_last_error());
    /* windows are unsupported (on every rank) */
    attn_params prm;
    attn_params_init(&prm);
    prm.window_left = 8;
    st = attn_mpi_dcp_forward(ctx, plan, &tq, &tc, &tqs, &ts, &tb, &prm, &to, &tl, NULL);
    MT_CHECK(st == ATTN_STATUS_UNSUPPORTED, "window: status %s", attn_status_string(st));
    /* seq_lens differing between ranks */
    int32_t seq_d[2] = {20, 7 + mt_rank};
    attn_tensor tsd = mt_t(seq_d, ATTN_DTYPE_I32, 1, 2, 0, 0, 0, 0);
    st = attn_mpi_dcp_forward(ctx, plan, &tq, &tc, &tqs, &tsd, &tb, NULL, &to, &tl, NULL);
    if (mt_world > 1)
        MT_CHECK(st == ATTN_STATUS_INVALID_ARGUMENT && strstr(attn_mpi_last_error(), "seq_lens"),
                 "differing seq_lens: %s '%s'", attn_status_string(st), attn_mpi_last_error());
    int untouched = 1;
    for (int i = 0; i < T * H * D; i++)
        untouched &= out[i] == 12345.0f;
    for (int i = 0; i < H * T; i++)
        untouched &= lse[i] == 12345.0f;
    MT_CHECK(untouched, "out/lse written by a failing call");
    /* plan config differing between ranks */
    attn_mpi_dcp_config c2 = cfg;
    c2.interleave_size = 1 + mt_rank;
    attn_mpi_dcp_plan *p2 = (attn_mpi_dcp_plan *)&cfg;
    st = attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &c2, &p2);
    if (mt_world > 1)
        MT_CHECK(st == ATTN_STATUS_INVALID_ARGUMENT && p2 == NULL, "differing config: %s", attn_status_string(st));
    else
        attn_mpi_dcp_plan_free(p2);
    attn_mpi_dcp_plan_free(plan);
    /* pure helpers */
    MT_CHECK(attn_mpi_dcp_local_len(5, 2, 1, 0) == 3 && attn_mpi_dcp_local_len(5, 2, 1, 1) == 2, "worked example");
    for (int L = 0; L < 300; L += 7)
        for (int I = 1; I <= 16; I *= 4) {
            int64_t sum = 0;
            for (int r = 0; r < 3; r++)
                sum += attn_mpi_dcp_local_len(L, 3, I, r);
            MT_CHECK(sum == L, "local lens of L=%d I=%d sum to %lld", L, I, (long long)sum);
        }
    int64_t slots[4] = {7, 7, 7, 7};
    int32_t ids[1] = {0};
    st = attn_mpi_dcp_slot_mapping(0, 1, 1, 2, 0, 4, ids, 1, slots);
    MT_CHECK(st == ATTN_STATUS_INVALID_ARGUMENT && slots[0] == 7, "slot mapping past the block table: %s",
             attn_status_string(st));
}

int main(int argc, char **argv) {
    mt_init(&argc, &argv);
    attn_ctx *ctx = NULL;
    MT_OK(attn_ctx_create(&ctx));
    MT_OK(attn_ctx_set_num_threads(ctx, 1));
    const dcp_case cases[] = {
        {1, 16, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 0},
        {4, 16, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 1},
        {16, 16, ATTN_CAUSAL_NONE, ATTN_DTYPE_F32, ATTN_DTYPE_F32, 0},
        {3, 8, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_BF16, ATTN_DTYPE_F32, 1},
        {2, 16, ATTN_CAUSAL_BOTTOM_RIGHT, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i]);
    test_errors(ctx);
    attn_ctx_destroy(ctx);
    return mt_finish("test_mpi_dcp");
}
