/*
 * test_mpi_collective.c — collective validation of libattn_mpi under mpirun -np 2 / 3 / 4: a bad config or
 * argument on SOME ranks makes EVERY rank return an error at once (no rank left waiting in a collective),
 * options that must agree across ranks (window, softmax scale, soft-cap, sinks, ALiBi, masks, dtypes, the
 * DCP cache geometry and request layout) are compared and a difference is refused everywhere naming the
 * option, and empty views (zero rows on a rank) are accepted whatever their strides. Nothing is written by
 * a failing call. The plan-creation cases used to hang (one rank returned, the others waited in
 * MPI_Comm_dup): ctest runs this suite under a timeout so such a regression fails instead of hanging.
 */
#include "mpi_test.h"

#define D 16

/* Every rank got `want`; ranks in `bad` (bit r) carry a message containing `mine`, the others one containing
 * `other` (NULL: not checked). */
static void expect_fail(const char *what, attn_status st, attn_status want, unsigned bad, const char *mine,
                        const char *other) {
    const int is_bad = (int)((bad >> mt_rank) & 1u);
    MT_CHECK(st == want, "%s: %s, expected %s ('%s')", what, attn_status_string(st), attn_status_string(want),
             attn_mpi_last_error());
    if (getenv("MT_VERBOSE")) /* MT_VERBOSE=1: print every rank's message */
        printf("[rank %d] %s: %s\n", mt_rank, what, attn_mpi_last_error());
    const char *sub = is_bad ? mine : other;
    if (sub)
        MT_CHECK(strstr(attn_mpi_last_error(), sub) != NULL, "%s: message '%s' lacks '%s'", what, attn_mpi_last_error(),
                 sub);
}

static int all_equal(const float *x, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] != v)
            return 0;
    return 1;
}

/* ---- plan creation: a bad config on some ranks fails everywhere ------------------------------------- */
static void test_plan_create(void) {
    const int last = mt_world - 1;
    const unsigned last_bit = 1u << last;
    char rej[64];
    snprintf(rej, sizeof rej, "rank %d rejected", last);
    /* ring: head_size 0 on the last rank */
    attn_mpi_ring_config rc = {1, 16, 2, 1, D, D, ATTN_DTYPE_F32};
    attn_mpi_ring_config rbad = rc;
    if (mt_rank == last)
        rbad.head_size = 0;
    attn_mpi_ring_plan *rp = (attn_mpi_ring_plan *)&rc; /* garbage: must come back NULL */
    attn_status st = attn_mpi_ring_plan_create(MPI_COMM_WORLD, &rbad, &rp);
    expect_fail("ring head_size 0 on the last rank", st, ATTN_STATUS_INVALID_ARGUMENT, last_bit, "config.head_size",
                mt_world > 1 ? rej : NULL);
    MT_CHECK(rp == NULL, "ring plan not NULL after a failure");
    /* ring: NULL config on rank 0 */
    rp = NULL;
    st = attn_mpi_ring_plan_create(MPI_COMM_WORLD, mt_rank == 0 ? NULL : &rc, &rp);
    expect_fail("ring NULL config on rank 0", st, ATTN_STATUS_INVALID_ARGUMENT, 1u, "config: NULL",
                mt_world > 1 ? "rank 0 rejected" : NULL);
    MT_CHECK(rp == NULL, "ring plan not NULL after a NULL config");
    /* ring: NULL plan pointer (the output) on the last rank */
    st = attn_mpi_ring_plan_create(MPI_COMM_WORLD, &rc, mt_rank == last ? NULL : &rp);
    expect_fail("ring NULL plan pointer", st, ATTN_STATUS_INVALID_ARGUMENT, last_bit, "plan: NULL",
                mt_world > 1 ? rej : NULL);
    MT_CHECK(rp == NULL, "ring plan created although a rank failed");
    /* ring: configs differing between ranks (each valid) */
    attn_mpi_ring_config rdiff = rc;
    rdiff.seq_len = 16 + mt_rank;
    st = attn_mpi_ring_plan_create(MPI_COMM_WORLD, &rdiff, &rp);
    if (mt_world > 1)
        expect_fail("ring seq_len differing", st, ATTN_STATUS_INVALID_ARGUMENT, 0u, NULL, "config.seq_len differs");
    else
        attn_mpi_ring_plan_free(rp);
    rp = NULL;

    /* Ulysses: an integer dtype on rank 0, a NULL config on the last rank */
    attn_mpi_ulysses_config uc = {1, 3, 2 * mt_world, mt_world, D, D, ATTN_DTYPE_F32, ATTN_DTYPE_F32};
    attn_mpi_ulysses_config ubad = uc;
    if (mt_rank == 0)
        ubad.kv_dtype = ATTN_DTYPE_I32;
    attn_mpi_ulysses_plan *up = NULL;
    st = attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &ubad, &up);
    expect_fail("ulysses kv_dtype i32 on rank 0", st, ATTN_STATUS_INVALID_ARGUMENT, 1u, "kv_dtype",
                mt_world > 1 ? "rank 0 rejected" : NULL);
    MT_CHECK(up == NULL, "ulysses plan not NULL after a failure");
    st = attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, mt_rank == last ? NULL : &uc, &up);
    expect_fail("ulysses NULL config on the last rank", st, ATTN_STATUS_INVALID_ARGUMENT, last_bit, "config: NULL",
                mt_world > 1 ? rej : NULL);
    MT_CHECK(up == NULL, "ulysses plan not NULL after a NULL config");
    /* Ulysses: heads not divisible by the ranks on one rank only */
    attn_mpi_ulysses_config uheads = uc;
    if (mt_rank == last && mt_world > 1) {
        uheads.num_heads = 2 * mt_world + 1;
        uheads.num_kv_heads = 1;
    }
    st = attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &uheads, &up);
    if (mt_world > 1) {
        expect_fail("ulysses heads not divisible on the last rank", st, ATTN_STATUS_INVALID_ARGUMENT, last_bit,
                    "divisible", rej);
        MT_CHECK(up == NULL, "ulysses plan not NULL");
    } else {
        attn_mpi_ulysses_plan_free(up);
        up = NULL;
    }

    /* DCP: max_tokens 0 on the last rank, a NULL config on rank 0 */
    attn_mpi_dcp_config dc = {1, 4, D, 4, 4};
    attn_mpi_dcp_config dbad = dc;
    if (mt_rank == last)
        dbad.max_tokens = 0;
    attn_mpi_dcp_plan *dp = NULL;
    st = attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &dbad, &dp);
    expect_fail("dcp max_tokens 0 on the last rank", st, ATTN_STATUS_INVALID_ARGUMENT, last_bit, "config.max_tokens",
                mt_world > 1 ? rej : NULL);
    MT_CHECK(dp == NULL, "dcp plan not NULL after a failure");
    st = attn_mpi_dcp_plan_create(MPI_COMM_WORLD, mt_rank == 0 ? NULL : &dc, &dp);
    expect_fail("dcp NULL config on rank 0", st, ATTN_STATUS_INVALID_ARGUMENT, 1u, "config: NULL",
                mt_world > 1 ? "rank 0 rejected" : NULL);
    MT_CHECK(dp == NULL, "dcp plan not NULL after a NULL config");

    /* two failing ranks (0 and the last): the others name both ends */
    if (mt_world >= 3) {
        attn_mpi_dcp_config d2 = dc;
        if (mt_rank == 0 || mt_rank == last)
            d2.head_size = 999;
        char both[64];
        snprintf(both, sizeof both, "ranks 0..%d", last);
        st = attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &d2, &dp);
        expect_fail("dcp head_size 999 on ranks 0 and last", st, ATTN_STATUS_INVALID_ARGUMENT, 1u | last_bit,
                    "config.head_size", both);
        MT_CHECK(dp == NULL, "dcp plan not NULL");
    }

    /* the communicator is still usable: a good plan works on every rank */
    MT_OK(attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &dc, &dp));
    MT_CHECK(dp != NULL, "good dcp plan");
    attn_mpi_dcp_plan_free(dp);
    MT_OK(attn_mpi_ring_plan_create(MPI_COMM_WORLD, &rc, &rp));
    attn_mpi_ring_plan_free(rp);
    if (mt_rank == 0)
        printf("collective np=%d: plan creation with a bad config on some ranks fails on every rank\n", mt_world);
}

/* ---- Ulysses: options that must agree --------------------------------------------------------------- */
typedef struct uly_io {
    float *q, *kv, *o;
    attn_tensor tq, tkv, to;
} uly_io;

static void test_ulysses_agree(attn_ctx *ctx) {
    const int H = 2 * mt_world, HKV = mt_world, SL = 3, S = SL * mt_world;
    attn_mpi_ulysses_config uc = {1, SL, H, HKV, D, D, ATTN_DTYPE_F32, ATTN_DTYPE_F32};
    attn_mpi_ulysses_plan *up = NULL;
    MT_OK(attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &uc, &up));
    float *q = malloc(4 * (size_t)(SL * H * D)), *kv = malloc(4 * (size_t)(SL * HKV * D));
    float *o = malloc(4 * (size_t)(SL * H * D)), *o1 = malloc(4 * (size_t)(SL * H * D));
    mt_fill(q, SL * H * D, 100 + (uint64_t)mt_rank);
    mt_fill(kv, SL * HKV * D, 200 + (uint64_t)mt_rank);
    attn_tensor tq = mt_t(q, ATTN_DTYPE_F32, 4, 1, SL, H, D, 0), tkv = mt_t(kv, ATTN_DTYPE_F32, 4, 1, SL, HKV, D, 0);
    attn_tensor to = mt_t(o, ATTN_DTYPE_F32, 4, 1, SL, H, D, 0), to1 = mt_t(o1, ATTN_DTYPE_F32, 4, 1, SL, H, D, 0);
    const int last = mt_world - 1, one = mt_world > 1;
    float sinks[16], sinks2[16], slopes[16];
    for (int h = 0; h < 16; h++) {
        sinks[h] = 0.25f * (float)h;
        sinks2[h] = sinks[h];
        slopes[h] = 0.1f * (float)(h + 1);
    }
    sinks2[H - 1] += 0.5f; /* a head of the last rank's shard */
    unsigned char *mask = malloc((size_t)(S * S));
    for (int i = 0; i < S * S; i++)
        mask[i] = (unsigned char)((i % 3) != 1);
    attn_tensor tm = mt_t(mask, ATTN_DTYPE_BOOL, 2, S, S, 0, 0, 0);
    struct {
        const char *name, *expect;
        int field;
    } cases[] = {
        {"window_left on the last rank", "params.window_left", 0},
        {"window_right on rank 0", "params.window_right", 1},
        {"softmax_scale on rank 0", "params.softmax_scale", 2},
        {"softcap on the last rank", "params.softcap", 3},
        {"sinks NULL on rank 0 only", "params.sinks", 4},
        {"sinks values differ on the last rank", "params.sinks", 5},
        {"alibi_slopes on the last rank only", "params.alibi_slopes", 6},
        {"mask on rank 0 only", "params.mask", 7},
        {"causal on the last rank", "params.causal", 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && one; i++) {
        attn_params prm;
        attn_params_init(&prm);
        prm.sinks = cases[i].field == 4 || cases[i].field == 5 ? sinks : NULL;
        switch (cases[i].field) {
        case 0:
            prm.window_left = mt_rank == last ? 2 : -1;
            break;
        case 1:
            prm.window_right = mt_rank == 0 ? 1 : -1;
            break;
        case 2:
            prm.softmax_scale = mt_rank == 0 ? 0.5f : 0.0f;
            break;
        case 3:
            prm.softcap = mt_rank == last ? 5.0f : 0.0f;
            break;
        case 4:
            prm.sinks = mt_rank == 0 ? NULL : sinks;
            break;
        case 5:
            prm.sinks = mt_rank == last ? sinks2 : sinks;
            break;
        case 6:
            prm.alibi_slopes = mt_rank == last ? slopes : NULL;
            break;
        case 7:
            prm.mask = mt_rank == 0 ? &tm : NULL;
            break;
        default:
            prm.causal = mt_rank == last ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
        }
        for (int j = 0; j < SL * H * D; j++)
            o[j] = 3.0f;
        const attn_status st = attn_mpi_ulysses_forward(ctx, up, &tq, &tkv, &tkv, &prm, &to, NULL, NULL);
        char what[96];
        snprintf(what, sizeof what, "ulysses %s", cases[i].name);
        expect_fail(what, st, ATTN_STATUS_INVALID_ARGUMENT, 0u, cases[i].expect, cases[i].expect);
        MT_CHECK(all_equal(o, SL * H * D, 3.0f), "%s: out written by a failing call", what);
    }
    /* the same options on every rank are fine; NULL params equal the defaults */
    attn_params prm;
    attn_params_init(&prm);
    prm.window_left = 2;
    prm.window_right = 1;
    prm.softcap = 5.0f;
    prm.softmax_scale = 0.3f;
    prm.sinks = sinks;
    prm.alibi_slopes = slopes;
    prm.mask = &tm;
    MT_OK(attn_mpi_ulysses_forward(ctx, up, &tq, &tkv, &tkv, &prm, &to, NULL, NULL));
    attn_params dflt;
    attn_params_init(&dflt);
    MT_OK(attn_mpi_ulysses_forward(ctx, up, &tq, &tkv, &tkv, mt_rank == 0 ? NULL : &dflt, &to, NULL, NULL));
    MT_OK(attn_mpi_ulysses_forward(ctx, up, &tq, &tkv, &tkv, NULL, &to1, NULL, NULL));
    MT_CHECK(memcmp(o, o1, 4 * (size_t)(SL * H * D)) == 0, "NULL params differ from attn_params_init defaults");
    /* a mask of the wrong key length on one rank: refused before any data moves */
    attn_tensor tbad = mt_t(mask, ATTN_DTYPE_BOOL, 2, S, S - 1, 0, 0, 0);
    prm.mask = mt_rank == last ? &tbad : &tm;
    attn_status st = attn_mpi_ulysses_forward(ctx, up, &tq, &tkv, &tkv, &prm, &to, NULL, NULL);
    char rej[64];
    snprintf(rej, sizeof rej, "rank %d rejected", last);
    expect_fail("ulysses mask [S, S-1] on the last rank", st, ATTN_STATUS_INVALID_ARGUMENT, 1u << last,
                "params.mask: shape[1]", one ? rej : NULL);
    attn_mpi_ulysses_plan_free(up);
    free(q);
    free(kv);
    free(o);
    free(o1);
    free(mask);
    if (mt_rank == 0)
        printf("collective np=%d: ulysses refuses window/scale/soft-cap/sinks/ALiBi/mask/causal differing between "
               "ranks\n",
               mt_world);
}

/* ---- ring: options that must agree ------------------------------------------------------------------ */
static void test_ring_agree(attn_ctx *ctx) {
    const int H = 2, HKV = 1, S = 24;
    attn_mpi_ring_config rc = {1, S, H, HKV, D, D, ATTN_DTYPE_F32};
    attn_mpi_ring_plan *rp = NULL;
    MT_OK(attn_mpi_ring_plan_create(MPI_COMM_WORLD, &rc, &rp));
    int64_t cs[2], cl[2];
    MT_OK(attn_mpi_zigzag_chunks(S, mt_world, mt_rank, cs, cl));
    const int64_t SL = cl[0] + cl[1];
    float *q = malloc(4 * (size_t)(SL * H * D) + 4), *kv = malloc(4 * (size_t)(SL * HKV * D) + 4);
    float *o = malloc(4 * (size_t)(SL * H * D) + 4);
    uint16_t *qb = calloc((size_t)(SL * H * D) + 2, 2), *ob = calloc((size_t)(SL * H * D) + 2, 2);
    mt_fill(q, SL * H * D, 300 + (uint64_t)mt_rank);
    mt_fill(kv, SL * HKV * D, 400 + (uint64_t)mt_rank);
    attn_tensor tq = mt_t(q, ATTN_DTYPE_F32, 4, 1, SL, H, D, 0), tkv = mt_t(kv, ATTN_DTYPE_F32, 4, 1, SL, HKV, D, 0);
    attn_tensor to = mt_t(o, ATTN_DTYPE_F32, 4, 1, SL, H, D, 0);
    attn_tensor tqb = mt_t(qb, ATTN_DTYPE_BF16, 4, 1, SL, H, D, 0), tob = mt_t(ob, ATTN_DTYPE_BF16, 4, 1, SL, H, D, 0);
    const int last = mt_world - 1;
    float sinks[2] = {0.5f, 1.0f}, sinks2[2] = {0.5f, 1.5f};
    if (mt_world > 1) {
        for (int c = 0; c < 4; c++) {
            attn_params prm;
            attn_params_init(&prm);
            prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            const char *expect = NULL;
            int bf16 = 0;
            if (c == 0) { /* a soft-cap 1e-4 apart: must not round to the same value */
                prm.softcap = mt_rank == last ? 4.0001f : 4.0f;
                expect = "params.softcap";
            } else if (c == 1) {
                prm.softmax_scale = mt_rank == 0 ? 0.2f : 0.25f;
                expect = "params.softmax_scale";
            } else if (c == 2) {
                prm.sinks = mt_rank == last ? sinks2 : sinks;
                expect = "params.sinks";
            } else {
                bf16 = mt_rank == 0;
                expect = "q.dtype";
            }
            for (int64_t j = 0; j < SL * H * D; j++)
                o[j] = 7.0f;
            const attn_status st =
                attn_mpi_ring_forward(ctx, rp, bf16 ? &tqb : &tq, &tkv, &tkv, &prm, bf16 ? &tob : &to, NULL, NULL);
            expect_fail(expect, st, ATTN_STATUS_INVALID_ARGUMENT, 0u, expect, expect);
            MT_CHECK(all_equal(o, SL * H * D, 7.0f), "ring %s: out written by a failing call", expect);
        }
    }
    attn_params prm;
    attn_params_init(&prm);
    prm.softcap = 4.0f;
    prm.sinks = sinks;
    MT_OK(attn_mpi_ring_forward(ctx, rp, &tq, &tkv, &tkv, &prm, &to, NULL, NULL));
    attn_mpi_ring_plan_free(rp);
    free(q);
    free(kv);
    free(o);
    free(qb);
    free(ob);
    if (mt_rank == 0)
        printf("collective np=%d: ring refuses soft-cap/scale/sinks/q dtype differing between ranks\n", mt_world);
}

/* ---- DCP: options, cache geometry and request layout that must agree -------------------------------- */
static void test_dcp_agree(attn_ctx *ctx) {
    const int H = 4, BS = 16, NB = 4, T = 2;
    attn_mpi_dcp_config dc = {1, H, D, 4, 2};
    attn_mpi_dcp_plan *dp = NULL;
    MT_OK(attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &dc, &dp));
    float *cache = malloc(4 * (size_t)(2 * NB * BS * 4 * D));
    uint16_t *cache_b = calloc((size_t)(2 * NB * BS * 2 * D), 2);
    mt_fill(cache, 2 * NB * BS * 4 * D, 500 + (uint64_t)mt_rank);
    float q[T * H * D], out[T * H * D];
    mt_fill(q, T * H * D, 600);
    int32_t qsl[3] = {0, 1, 2}, qsl2[3] = {0, 2, 2}, seq[2] = {20, 7}, bt[4] = {0, 1, 2, 3};
    attn_tensor tc2 = mt_t(cache, ATTN_DTYPE_F32, 5, 2, NB, BS, 2, D); /* 2 KV heads */
    attn_tensor tc4 = mt_t(cache, ATTN_DTYPE_F32, 5, 2, NB, BS, 4, D); /* 4 KV heads */
    attn_tensor tcb = mt_t(cache_b, ATTN_DTYPE_BF16, 5, 2, NB, BS, 2, D);
    attn_tensor tq = mt_t(q, ATTN_DTYPE_F32, 3, T, H, D, 0, 0), to = mt_t(out, ATTN_DTYPE_F32, 3, T, H, D, 0, 0);
    attn_tensor tqs = mt_t(qsl, ATTN_DTYPE_I32, 1, 3, 0, 0, 0, 0), tqs2 = mt_t(qsl2, ATTN_DTYPE_I32, 1, 3, 0, 0, 0, 0);
    attn_tensor ts = mt_t(seq, ATTN_DTYPE_I32, 1, 2, 0, 0, 0, 0), tb = mt_t(bt, ATTN_DTYPE_I32, 2, 2, 2, 0, 0, 0);
    const int last = mt_world - 1;
    if (mt_world > 1) {
        for (int c = 0; c < 5; c++) {
            attn_params prm;
            attn_params_init(&prm);
            prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            const attn_tensor *cache_t = &tc2, *qs_t = &tqs;
            const char *expect = NULL;
            if (c == 0) {
                prm.softmax_scale = mt_rank == last ? 0.125f : 0.0f;
                expect = "params.softmax_scale";
            } else if (c == 1) {
                prm.softcap = mt_rank == 0 ? 30.0f : 0.0f;
                expect = "params.softcap";
            } else if (c == 2) {
                cache_t = mt_rank == last ? &tcb : &tc2;
                expect = "kv_cache.dtype";
            } else if (c == 3) {
                cache_t = mt_rank == 0 ? &tc4 : &tc2;
                expect = "kv_cache num_kv_heads";
            } else {
                qs_t = mt_rank == last ? &tqs2 : &tqs;
                expect = "query_start_loc";
            }
            for (int j = 0; j < T * H * D; j++)
                out[j] = 9.0f;
            const attn_status st = attn_mpi_dcp_forward(ctx, dp, &tq, cache_t, qs_t, &ts, &tb, &prm, &to, NULL, NULL);
            expect_fail(expect, st, ATTN_STATUS_INVALID_ARGUMENT, 0u, expect, expect);
            MT_CHECK(all_equal(out, T * H * D, 9.0f), "dcp %s: out written by a failing call", expect);
        }
    }
    MT_OK(attn_mpi_dcp_forward(ctx, dp, &tq, &tc2, &tqs, &ts, &tb, NULL, &to, NULL, NULL));
    /* no decode rows at all (T = 0, no requests), views with zero strides as NumPy makes them */
    int32_t qsl0[1] = {0};
    attn_tensor eq = mt_t(q, ATTN_DTYPE_F32, 3, 0, H, D, 0, 0), eo = mt_t(out, ATTN_DTYPE_F32, 3, 0, H, D, 0, 0);
    attn_tensor eqs = mt_t(qsl0, ATTN_DTYPE_I32, 1, 1, 0, 0, 0, 0), es = mt_t(seq, ATTN_DTYPE_I32, 1, 0, 0, 0, 0, 0);
    attn_tensor eb = mt_t(bt, ATTN_DTYPE_I32, 2, 0, 2, 0, 0, 0);
    float lse[4];
    attn_tensor el = mt_t(lse, ATTN_DTYPE_F32, 2, H, 0, 0, 0, 0);
    attn_tensor *zs[5] = {&eq, &eo, &es, &eb, &el};
    for (int i = 0; i < 5; i++)
        for (int d = 0; d < zs[i]->ndim; d++)
            zs[i]->strides[d] = 0;
    MT_OK(attn_mpi_dcp_forward(ctx, dp, &eq, &tc2, &eqs, &es, &eb, NULL, &eo, &el, NULL));
    attn_mpi_dcp_plan_free(dp);
    free(cache);
    free(cache_b);
    if (mt_rank == 0)
        printf("collective np=%d: dcp refuses scale/soft-cap/cache dtype/kv heads/query_start_loc differing; "
               "T=0 with zero strides ok\n",
               mt_world);
}

/* ---- Ulysses with no rows on any rank, zero strides -------------------------------------------------- */
static void test_ulysses_empty(attn_ctx *ctx) {
    const int H = 2 * mt_world, HKV = mt_world;
    attn_mpi_ulysses_config uc = {2, 0, H, HKV, D, D, ATTN_DTYPE_F32, ATTN_DTYPE_F32};
    attn_mpi_ulysses_plan *up = NULL;
    MT_OK(attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &uc, &up));
    float dummy[4];
    attn_tensor q = mt_t(dummy, ATTN_DTYPE_F32, 4, 2, 0, H, D, 0), kv = mt_t(dummy, ATTN_DTYPE_F32, 4, 2, 0, HKV, D, 0);
    attn_tensor o = mt_t(dummy, ATTN_DTYPE_F32, 4, 2, 0, H, D, 0), l = mt_t(dummy, ATTN_DTYPE_F32, 3, 2, H, 0, 0, 0);
    attn_tensor *zs[4] = {&q, &kv, &o, &l};
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < zs[i]->ndim; d++)
            zs[i]->strides[d] = 0;
    MT_OK(attn_mpi_ulysses_forward(ctx, up, &q, &kv, &kv, NULL, &o, &l, NULL));
    attn_mpi_ulysses_plan_free(up);
}

int main(int argc, char **argv) {
    mt_init(&argc, &argv);
    attn_ctx *ctx = NULL;
    MT_OK(attn_ctx_create(&ctx));
    MT_OK(attn_ctx_set_num_threads(ctx, 1));
    /* the cases that fail without hanging first, then plan creation (which used to hang) */
    test_ulysses_agree(ctx);
    test_ring_agree(ctx);
    test_dcp_agree(ctx);
    test_ulysses_empty(ctx);
    test_plan_create();
    attn_ctx_destroy(ctx);
    return mt_finish("test_mpi_collective");
}
