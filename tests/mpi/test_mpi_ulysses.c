/*
 * test_mpi_ulysses.c — Ulysses (attn_mpi_ulysses_forward / _varlen) and USP (attn_mpi_usp_forward) under
 * mpirun -np 2 / 3 / 4. Ulysses computes each head on one rank exactly as one process does, so its result is
 * compared BITWISE with attn_forward / attn_forward_varlen on the whole sequence (masks, windows, ALiBi,
 * sinks, soft-cap, packed documents), and with the oracle within tolerance; USP (Ulysses inside ring, every
 * U x R grid of the ranks) within float tolerance of one process.
 */
#include "mpi_test.h"

/* heads: 8 / 4, or 12 / 6 when the ranks are a multiple of 3 (Ulysses needs both divisible by P) */
static int H = 8, HKV = 4;

static void to_bf16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        y[i] = (uint16_t)(u >> 16);
    }
}
static void to_f32(const void *x, attn_dtype dt, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == ATTN_DTYPE_F32) {
            y[i] = ((const float *)x)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
            memcpy(&y[i], &u, 4);
        }
    }
}

/* rows [r0, r0 + n) of every batch of a [B, S, X] tensor (X elements per row) into dst [B, n, X] */
static void take_rows(const void *src, void *dst, size_t es, int64_t B, int64_t S, int64_t X, int64_t r0, int64_t n) {
    for (int64_t b = 0; b < B; b++)
        memcpy((char *)dst + b * n * X * es, (const char *)src + (b * S + r0) * X * es, (size_t)(n * X) * es);
}
static void take_lse(const float *src, float *dst, int64_t B, int64_t S, int64_t r0, int64_t n) {
    for (int64_t bh = 0; bh < B * H; bh++)
        memcpy(dst + bh * n, src + bh * S + r0, (size_t)n * 4);
}

typedef struct uly_case {
    const char *name;
    int64_t batch, seq_local;
    int32_t dk, dv;
    attn_dtype dtype;
    int variant; /* 0 causal+window+alibi+softcap+sinks, 1 bool mask [B,H,S,S] + key padding, 2 additive [1,H,S,S] + mask [S,S], 3 varlen */
} uly_case;

static void run_case(attn_ctx *ctx, const uly_case *c) {
    const int64_t B = c->batch, SL = c->seq_local, S = SL * mt_world, DK = c->dk, DV = c->dv;
    const size_t es = attn_dtype_size(c->dtype);
    float *qf = malloc(4 * B * S * H * DK), *kf = malloc(4 * B * S * HKV * DK), *vf = malloc(4 * B * S * HKV * DV);
    mt_fill(qf, B * S * H * DK, 21);
    mt_fill(kf, B * S * HKV * DK, 22);
    mt_fill(vf, B * S * HKV * DV, 23);
    void *q = qf, *k = kf, *v = vf;
    if (c->dtype == ATTN_DTYPE_BF16) {
        q = malloc(2 * B * S * H * DK);
        k = malloc(2 * B * S * HKV * DK);
        v = malloc(2 * B * S * HKV * DV);
        to_bf16(qf, q, B * S * H * DK);
        to_bf16(kf, k, B * S * HKV * DK);
        to_bf16(vf, v, B * S * HKV * DV);
    }
    attn_params prm;
    attn_params_init(&prm);
    float slopes[16], sinks[16];
    for (int h = 0; h < H; h++) {
        slopes[h] = 0.05f * (float)(h + 1);
        sinks[h] = 0.3f * (float)h - 1.0f;
    }
    unsigned char *mask = NULL, *kpm = NULL;
    float *add = NULL;
    attn_tensor tm, tkpm, tadd;
    uint64_t rs = 99;
    if (c->variant == 0) {
        prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        prm.window_left = 5;
        prm.alibi_slopes = slopes;
        prm.softcap = 6.0f;
        prm.sinks = sinks;
    } else if (c->variant == 1) {
        mask = malloc((size_t)(B * H * S * S));
        for (int64_t i = 0; i < B * H * S * S; i++)
            mask[i] = (mt_next(&rs) & 3) != 0;
        kpm = malloc((size_t)(B * S));
        for (int64_t i = 0; i < B * S; i++)
            kpm[i] = (mt_next(&rs) % 5) != 0;
        tm = mt_t(mask, ATTN_DTYPE_BOOL, 4, B, H, S, S, 0);
        tkpm = mt_t(kpm, ATTN_DTYPE_BOOL, 2, B, S, 0, 0, 0);
        prm.mask = &tm;
        prm.key_padding_mask = &tkpm;
    } else if (c->variant == 2) {
        add = malloc(4 * (size_t)(H * S * S));
        mt_fill(add, H * S * S, 31);
        for (int64_t i = 0; i < H * S * S; i++)
            if ((i % 7) == 3)
                add[i] = -INFINITY;
        mask = malloc((size_t)(S * S));
        for (int64_t i = 0; i < S * S; i++)
            mask[i] = (i % 5) != 1;
        tadd = mt_t(add, ATTN_DTYPE_F32, 4, 1, H, S, S, 0);
        tm = mt_t(mask, ATTN_DTYPE_BOOL, 2, S, S, 0, 0, 0);
        prm.additive_mask = &tadd;
        prm.mask = &tm;
    } else {
        prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        prm.softcap = 3.0f;
    }
    int32_t cu[5] = {0, 5, 5, (int32_t)S - 3, (int32_t)S};
    attn_tensor tcu = mt_t(cu, ATTN_DTYPE_I32, 1, 5, 0, 0, 0, 0);
    /* one process and the oracle */
    void *o1 = malloc(es * B * S * H * DV), *o2 = malloc(es * B * S * H * DV);
    float *l1 = malloc(4 * B * H * S), *l2 = malloc(4 * B * H * S);
    const int vl = c->variant == 3;
    attn_tensor gq = vl ? mt_t(q, c->dtype, 3, S, H, DK, 0, 0) : mt_t(q, c->dtype, 4, B, S, H, DK, 0);
    attn_tensor gk = vl ? mt_t(k, c->dtype, 3, S, HKV, DK, 0, 0) : mt_t(k, c->dtype, 4, B, S, HKV, DK, 0);
    attn_tensor gv = vl ? mt_t(v, c->dtype, 3, S, HKV, DV, 0, 0) : mt_t(v, c->dtype, 4, B, S, HKV, DV, 0);
    attn_tensor go1 = vl ? mt_t(o1, c->dtype, 3, S, H, DV, 0, 0) : mt_t(o1, c->dtype, 4, B, S, H, DV, 0);
    attn_tensor go2 = vl ? mt_t(o2, c->dtype, 3, S, H, DV, 0, 0) : mt_t(o2, c->dtype, 4, B, S, H, DV, 0);
    attn_tensor gl1 = vl ? mt_t(l1, ATTN_DTYPE_F32, 2, H, S, 0, 0, 0) : mt_t(l1, ATTN_DTYPE_F32, 3, B, H, S, 0, 0);
    attn_tensor gl2 = vl ? mt_t(l2, ATTN_DTYPE_F32, 2, H, S, 0, 0, 0) : mt_t(l2, ATTN_DTYPE_F32, 3, B, H, S, 0, 0);
    if (vl) {
        MT_OK(attn_forward_varlen(ctx, &gq, &gk, &gv, &tcu, &tcu, &prm, &go1, &gl1));
        MT_OK(attn_ref_forward_varlen(&gq, &gk, &gv, &tcu, &tcu, &prm, &go2, &gl2));
    } else {
        MT_OK(attn_forward(ctx, ATTN_LAYOUT_BSND, &gq, &gk, &gv, &prm, &go1, &gl1));
        MT_OK(attn_ref_forward(ATTN_LAYOUT_BSND, &gq, &gk, &gv, &prm, &go2, &gl2));
    }
    /* Ulysses on this rank's rows */
    const int64_t r0 = mt_rank * SL;
    void *lq = malloc(es * B * SL * H * DK), *lk = malloc(es * B * SL * HKV * DK), *lv = malloc(es * B * SL * HKV * DV);
    void *lo = malloc(es * B * SL * H * DV), *ro1 = malloc(es * B * SL * H * DV), *ro2 = malloc(es * B * SL * H * DV);
    float *ll = malloc(4 * B * H * SL), *rl1 = malloc(4 * B * H * SL), *rl2 = malloc(4 * B * H * SL);
    take_rows(q, lq, es, B, S, H * DK, r0, SL);
    take_rows(k, lk, es, B, S, HKV * DK, r0, SL);
    take_rows(v, lv, es, B, S, HKV * DV, r0, SL);
    take_rows(o1, ro1, es, B, S, H * DV, r0, SL);
    take_rows(o2, ro2, es, B, S, H * DV, r0, SL);
    take_lse(l1, rl1, B, S, r0, SL);
    take_lse(l2, rl2, B, S, r0, SL);
    attn_mpi_ulysses_config cfg = {B, SL, H, HKV, (int32_t)DK, (int32_t)DV, c->dtype, c->dtype};
    attn_mpi_ulysses_plan *plan = NULL;
    MT_OK(attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &cfg, &plan));
    attn_tensor xq = vl ? mt_t(lq, c->dtype, 3, SL, H, DK, 0, 0) : mt_t(lq, c->dtype, 4, B, SL, H, DK, 0);
    attn_tensor xk = vl ? mt_t(lk, c->dtype, 3, SL, HKV, DK, 0, 0) : mt_t(lk, c->dtype, 4, B, SL, HKV, DK, 0);
    attn_tensor xv = vl ? mt_t(lv, c->dtype, 3, SL, HKV, DV, 0, 0) : mt_t(lv, c->dtype, 4, B, SL, HKV, DV, 0);
    attn_tensor xo = vl ? mt_t(lo, c->dtype, 3, SL, H, DV, 0, 0) : mt_t(lo, c->dtype, 4, B, SL, H, DV, 0);
    attn_tensor xl = vl ? mt_t(ll, ATTN_DTYPE_F32, 2, H, SL, 0, 0, 0) : mt_t(ll, ATTN_DTYPE_F32, 3, B, H, SL, 0, 0);
    attn_mpi_stats st;
    if (vl)
        MT_OK(attn_mpi_ulysses_forward_varlen(ctx, plan, &xq, &xk, &xv, &tcu, &tcu, &prm, &xo, &xl, &st));
    else
        MT_OK(attn_mpi_ulysses_forward(ctx, plan, &xq, &xk, &xv, &prm, &xo, &xl, &st));
    MT_CHECK(memcmp(lo, ro1, es * B * SL * H * DV) == 0 && memcmp(ll, rl1, 4 * B * H * SL) == 0,
             "%s: Ulysses differs from one process", c->name);
    float *a = malloc(4 * B * SL * H * DV), *b2 = malloc(4 * B * SL * H * DV);
    to_f32(lo, c->dtype, a, B * SL * H * DV);
    to_f32(ro2, c->dtype, b2, B * SL * H * DV);
    const double tol = c->dtype == ATTN_DTYPE_F32 ? 2e-5 : 8e-3;
    const double e = mt_max_abs_diff(a, b2, B * SL * H * DV), el = mt_lse_diff(ll, rl2, B * H * SL);
    MT_CHECK(e <= tol && el <= 1e-4, "%s: vs oracle out %.3g lse %.3g", c->name, e, el);
    if (mt_rank == 0)
        printf("ulysses np=%d %s (%s): bitwise equal to one process; max|out-oracle| %.2e, lse %.2e\n", mt_world,
               c->name, attn_dtype_name(c->dtype), e, el);
    attn_mpi_ulysses_plan_free(plan);
    free(a); free(b2);
    free(qf); free(kf); free(vf);
    if (q != qf) { free(q); free(k); free(v); }
    free(o1); free(o2); free(l1); free(l2); free(lq); free(lk); free(lv); free(lo); free(ro1); free(ro2);
    free(ll); free(rl1); free(rl2); free(mask); free(kpm); free(add);
}

/* USP on a U x R grid: world rank w = rr·U + u. */
static void run_usp(attn_ctx *ctx, int U, int causal) {
    const int R = mt_world / U, u = mt_rank % U, rr = mt_rank / U;
    const int64_t B = 1, DK = 32, S = 2 * R * U * 6;
    float *q = malloc(4 * B * S * H * DK), *k = malloc(4 * B * S * HKV * DK), *v = malloc(4 * B * S * HKV * DK);
    mt_fill(q, B * S * H * DK, 41);
    mt_fill(k, B * S * HKV * DK, 42);
    mt_fill(v, B * S * HKV * DK, 43);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = causal;
    float *o = malloc(4 * B * S * H * DK), *l = malloc(4 * B * H * S);
    attn_tensor gq = mt_t(q, ATTN_DTYPE_F32, 4, B, S, H, DK, 0), gk = mt_t(k, ATTN_DTYPE_F32, 4, B, S, HKV, DK, 0),
                gv = mt_t(v, ATTN_DTYPE_F32, 4, B, S, HKV, DK, 0), go = mt_t(o, ATTN_DTYPE_F32, 4, B, S, H, DK, 0),
                gl = mt_t(l, ATTN_DTYPE_F32, 3, B, H, S, 0, 0);
    MT_OK(attn_forward(ctx, ATTN_LAYOUT_BSND, &gq, &gk, &gv, &prm, &go, &gl));
    MPI_Comm uc, rc;
    MPI_Comm_split(MPI_COMM_WORLD, rr, u, &uc);
    MPI_Comm_split(MPI_COMM_WORLD, u, rr, &rc);
    int64_t cs[2], cl[2];
    MT_OK(attn_mpi_zigzag_chunks(S, R, rr, cs, cl));
    const int64_t SR = cl[0] + cl[1], SL = SR / U;
    /* global row of ring-shard row t */
    float *lq = malloc(4 * SL * H * DK), *lk = malloc(4 * SL * HKV * DK), *lv = malloc(4 * SL * HKV * DK);
    float *lo = malloc(4 * SL * H * DK), *ro = malloc(4 * SL * H * DK), *ll = malloc(4 * H * SL), *rl = malloc(4 * H * SL);
    for (int64_t i = 0; i < SL; i++) {
        const int64_t t = u * SL + i, g = t < cl[0] ? cs[0] + t : cs[1] + (t - cl[0]);
        memcpy(lq + i * H * DK, q + g * H * DK, 4 * H * DK);
        memcpy(lk + i * HKV * DK, k + g * HKV * DK, 4 * HKV * DK);
        memcpy(lv + i * HKV * DK, v + g * HKV * DK, 4 * HKV * DK);
        memcpy(ro + i * H * DK, o + g * H * DK, 4 * H * DK);
        for (int h = 0; h < H; h++)
            rl[h * SL + i] = l[h * S + g];
    }
    attn_mpi_ulysses_config ucfg = {B, SL, H, HKV, (int32_t)DK, (int32_t)DK, ATTN_DTYPE_F32, ATTN_DTYPE_F32};
    attn_mpi_ring_config rcfg = {B, S, H / U, HKV / U, (int32_t)DK, (int32_t)DK, ATTN_DTYPE_F32};
    attn_mpi_ulysses_plan *up = NULL;
    attn_mpi_ring_plan *rp = NULL;
    MT_OK(attn_mpi_ulysses_plan_create(uc, &ucfg, &up));
    MT_OK(attn_mpi_ring_plan_create(rc, &rcfg, &rp));
    attn_tensor xq = mt_t(lq, ATTN_DTYPE_F32, 4, B, SL, H, DK, 0), xk = mt_t(lk, ATTN_DTYPE_F32, 4, B, SL, HKV, DK, 0),
                xv = mt_t(lv, ATTN_DTYPE_F32, 4, B, SL, HKV, DK, 0), xo = mt_t(lo, ATTN_DTYPE_F32, 4, B, SL, H, DK, 0),
                xl = mt_t(ll, ATTN_DTYPE_F32, 3, B, H, SL, 0, 0);
    attn_mpi_stats st;
    MT_OK(attn_mpi_usp_forward(ctx, up, rp, &xq, &xk, &xv, &prm, &xo, &xl, &st));
    const double e = mt_max_abs_diff(lo, ro, SL * H * DK), el = mt_lse_diff(ll, rl, H * SL);
    MT_CHECK(e <= 2e-5 && el <= 2e-5, "USP U=%d R=%d causal=%d: out %.3g lse %.3g", U, R, causal, e, el);
    double em[2] = {e, el}, gm[2];
    MPI_Allreduce(em, gm, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (mt_rank == 0)
        printf("usp np=%d ulysses=%d x ring=%d causal=%d S=%lld: max|out-one process| %.2e, lse %.2e\n", mt_world, U, R,
               causal, (long long)S, gm[0], gm[1]);
    attn_mpi_ulysses_plan_free(up);
    attn_mpi_ring_plan_free(rp);
    MPI_Comm_free(&uc);
    MPI_Comm_free(&rc);
    free(q); free(k); free(v); free(o); free(l); free(lq); free(lk); free(lv); free(lo); free(ro); free(ll); free(rl);
}

static void test_errors(attn_ctx *ctx) {
    attn_mpi_ulysses_config cfg = {1, 4, 6, 3, 16, 16, ATTN_DTYPE_F32, ATTN_DTYPE_F32};
    attn_mpi_ulysses_plan *p = NULL;
    attn_status s = attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &cfg, &p);
    if (mt_world == 4)
        MT_CHECK(s == ATTN_STATUS_INVALID_ARGUMENT && p == NULL && strstr(attn_mpi_last_error(), "divisible"),
                 "6 heads over 4 ranks: %s '%s'", attn_status_string(s), attn_mpi_last_error());
    attn_mpi_ulysses_plan_free(p);
    cfg.num_heads = H;
    cfg.num_kv_heads = HKV;
    MT_OK(attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &cfg, &p));
    float x[4 * 16 * 16] = {0}, o[4 * 16 * 16];
    for (int i = 0; i < 4 * H * 16; i++)
        o[i] = 5.0f;
    attn_tensor q = mt_t(x, ATTN_DTYPE_F32, 4, 1, 4, H, 16, 0), kv = mt_t(x, ATTN_DTYPE_F32, 4, 1, 4, HKV, 16, 0),
                out = mt_t(o, ATTN_DTYPE_F32, 4, 1, 4, H, 16, 0);
    /* a mask with the wrong key length on one rank */
    unsigned char m[64 * 64] = {0};
    attn_tensor tm = mt_t(m, ATTN_DTYPE_BOOL, 2, 4 * mt_world, 4 * mt_world + (mt_rank == 0), 0, 0, 0);
    attn_params prm;
    attn_params_init(&prm);
    prm.mask = &tm;
    s = attn_mpi_ulysses_forward(ctx, p, &q, &kv, &kv, &prm, &out, NULL, NULL);
    MT_CHECK(s == ATTN_STATUS_INVALID_ARGUMENT, "bad mask: %s", attn_status_string(s));
    if (mt_rank == 0)
        MT_CHECK(strstr(attn_mpi_last_error(), "params.mask") != NULL, "message '%s'", attn_mpi_last_error());
    int untouched = 1;
    for (int i = 0; i < 4 * H * 16; i++)
        untouched &= o[i] == 5.0f;
    MT_CHECK(untouched, "out written by a failing call");
    attn_mpi_ulysses_plan_free(p);
}

int main(int argc, char **argv) {
    mt_init(&argc, &argv);
    if (mt_world % 3 == 0) {
        H = 12;
        HKV = 6;
    }
    attn_ctx *ctx = NULL;
    MT_OK(attn_ctx_create(&ctx));
    MT_OK(attn_ctx_set_num_threads(ctx, 1));
    const uly_case cases[] = {
        {"causal+window+alibi+softcap+sinks", 2, 9, 32, 16, ATTN_DTYPE_F32, 0},
        {"bool mask [B,H,S,S] + key padding", 2, 7, 32, 32, ATTN_DTYPE_F32, 1},
        {"additive [1,H,S,S] + mask [S,S]", 1, 8, 64, 64, ATTN_DTYPE_BF16, 2},
        {"packed documents (varlen)", 1, 10, 32, 32, ATTN_DTYPE_F32, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, &cases[i]);
    for (int U = 1; U <= mt_world; U++) /* every U x R grid of the ranks */
        if (mt_world % U == 0) {
            run_usp(ctx, U, ATTN_CAUSAL_BOTTOM_RIGHT);
            run_usp(ctx, U, ATTN_CAUSAL_NONE);
        }
    test_errors(ctx);
    attn_ctx_destroy(ctx);
    return mt_finish("test_mpi_ulysses");
}
