/*
 * wl_cp.c — the built-in 'cp' workload of the `attn` CLI: context parallelism over MPI through
 * libattn_mpi, run under `mpirun -np N attn run --workload cp`. Measures, per mode (ring prefill with
 * zig-zag shards, DCP decode on the paged cache, Ulysses): the per-step time (slowest rank), compute and
 * exposed-communication time, bytes sent per rank, the same traffic alone (no compute) and the overlap
 * achieved = 1 − exposed / alone; plus the raw MPI bandwidth between ranks 0 and 1 and each mode's
 * attention FLOP/s per rank (the inputs of the cost model in docs/CONTEXT_PARALLEL.md). Only compiled when
 * the CLI is built with libattn_mpi (ATTN_CLI_MPI); otherwise the workload is absent.
 * Shapes: ATTN_CP_SEQ (ring/Ulysses tokens, default 8192), ATTN_CP_CTX (DCP context per request, 8192).
 */
#ifdef ATTN_CLI_MPI

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_mpi.h"
#include "util.h"
#include "workload.h"

static int cp_rank, cp_world;

static double cp_max(double x) {
    double r;
    MPI_Allreduce(&x, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return r;
}

static void cp_fill_bf16(uint16_t *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const float f = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
        uint32_t u;
        memcpy(&u, &f, 4);
        x[i] = (uint16_t)(u >> 16);
    }
}

static void cp_fill_f32(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
    }
}

/* The ring's traffic alone: P−1 steps of Isend(right)/Irecv(left) of `bytes`, no compute. Seconds. */
static double cp_ring_alone(int64_t bytes, int reps) {
    char *a = calloc((size_t)bytes + 1, 1), *b = calloc((size_t)bytes + 1, 1);
    const int left = (cp_rank - 1 + cp_world) % cp_world, right = (cp_rank + 1) % cp_world;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int s = 0; s < cp_world - 1; s++) {
            MPI_Request q[2];
            MPI_Irecv((s & 1) ? a : b, (int)bytes, MPI_BYTE, left, s, MPI_COMM_WORLD, &q[0]);
            MPI_Isend((s & 1) ? b : a, (int)bytes, MPI_BYTE, right, s, MPI_COMM_WORLD, &q[1]);
            MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
        }
        const double t = cp_max(MPI_Wtime() - t0);
        best = t < best ? t : best;
    }
    free(a);
    free(b);
    return best;
}

/* Ping-pong bandwidth between ranks 0 and 1 (bytes/s, best of reps) and the small-message latency (s). */
static void cp_bandwidth(double *bw, double *lat) {
    const int64_t n = 16 << 20;
    char *buf = calloc((size_t)n, 1);
    double best = 1e30, best_lat = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        for (int small = 0; small < 2; small++) {
            const int cnt = small ? 8 : (int)n;
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            const int iters = small ? 100 : 2;
            for (int it = 0; it < iters; it++) {
                if (cp_rank == 0) {
                    MPI_Send(buf, cnt, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf, cnt, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else if (cp_rank == 1) {
                    MPI_Recv(buf, cnt, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, cnt, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
                }
            }
            const double t = (MPI_Wtime() - t0) / (2.0 * iters);
            if (small)
                best_lat = t < best_lat ? t : best_lat;
            else
                best = t < best ? t : best;
        }
    }
    MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Bcast(&best_lat, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *bw = (double)n / best;
    *lat = best_lat;
    free(buf);
}

typedef struct cp_row {
    const char *mode;
    char shape[96];
    double step, compute, wait, alone, flops;
    int64_t bytes;
} cp_row;

static void cp_print(FILE *out, const cp_row *r) {
    if (cp_rank != 0)
        return;
    const double overlap = r->alone > 0 ? fmax(0.0, fmin(1.0, 1.0 - r->wait / r->alone)) : 1.0;
    fprintf(out, "%-8s %-40s %10.2f %10.2f %9.2f %9.2f %11.2f %8.0f%% %9.1f\n", r->mode, r->shape, r->step * 1e3,
            r->compute * 1e3, r->wait * 1e3, r->alone * 1e3, (double)r->bytes / 1e6, overlap * 100.0,
            r->flops / r->compute / 1e9);
}

static int cp_fail(const attn_cli_env *env, const char *what, attn_status st) {
    fprintf(env->err, "[rank %d] %s: %s: %s\n", cp_rank, what, attn_status_string(st), attn_mpi_last_error());
    return ATTN_CLI_EXIT_MISMATCH;
}

static int64_t cp_env(const char *name, int64_t def) {
    const char *s = getenv(name);
    return s && atoll(s) > 0 ? atoll(s) : def;
}

/* ---- ring prefill: causal, zig-zag, bf16 K/V, H 8/2, d 128 ------------------------------------------- */
static int cp_ring(const attn_cli_env *env, int reps, cp_row *row) {
    const int64_t S = cp_env("ATTN_CP_SEQ", 8192), H = 8, HK = 2, D = 128;
    attn_mpi_ring_config cfg = {1, S, (int32_t)H, (int32_t)HK, (int32_t)D, (int32_t)D, ATTN_DTYPE_BF16};
    attn_mpi_ring_plan *plan = NULL;
    attn_status st = attn_mpi_ring_plan_create(MPI_COMM_WORLD, &cfg, &plan);
    if (st)
        return cp_fail(env, "attn_mpi_ring_plan_create", st);
    int64_t cs[2], cl[2];
    attn_mpi_zigzag_chunks(S, cp_world, cp_rank, cs, cl);
    const int64_t SL = cl[0] + cl[1];
    uint16_t *q = malloc(2 * (size_t)(SL * H * D)), *k = malloc(2 * (size_t)(SL * HK * D)), *v = malloc(2 * (size_t)(SL * HK * D));
    uint16_t *o = malloc(2 * (size_t)(SL * H * D));
    cp_fill_bf16(q, SL * H * D, 1 + cp_rank);
    cp_fill_bf16(k, SL * HK * D, 11 + cp_rank);
    cp_fill_bf16(v, SL * HK * D, 21 + cp_rank);
    const int64_t qs[4] = {1, SL, H, D}, ks[4] = {1, SL, HK, D};
    attn_tensor tq = attn_tensor_make(q, ATTN_DTYPE_BF16, 4, qs), tk = attn_tensor_make(k, ATTN_DTYPE_BF16, 4, ks),
                tv = attn_tensor_make(v, ATTN_DTYPE_BF16, 4, ks), to = attn_tensor_make(o, ATTN_DTYPE_BF16, 4, qs);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    row->step = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        attn_mpi_stats s;
        MPI_Barrier(MPI_COMM_WORLD);
        st = attn_mpi_ring_forward(env->ctx, plan, &tq, &tk, &tv, &prm, &to, NULL, &s);
        if (st)
            return cp_fail(env, "attn_mpi_ring_forward", st);
        const double step = cp_max(s.total_seconds);
        if (r > 0 && step < row->step) { /* best step after one warm-up */
            row->step = step;
            row->compute = cp_max(s.compute_seconds);
            row->wait = cp_max(s.wait_seconds);
            row->bytes = s.bytes_sent;
        }
    }
    /* the largest shard's bytes travel each step */
    const int64_t shard = ((S + 2 * cp_world - 1) / (2 * cp_world)) * 2 * HK * D * 2 * 2;
    row->alone = cp_world > 1 ? cp_ring_alone(shard, reps) : 0.0;
    row->flops = 2.0 * (double)S * (double)S * H * D / cp_world; /* causal: half of the full 4·S²·H·D, per rank */
    row->mode = "ring";
    snprintf(row->shape, sizeof row->shape, "prefill causal S=%lld H=%lld/%lld d=%lld bf16", (long long)S, (long long)H,
             (long long)HK, (long long)D);
    attn_mpi_ring_plan_free(plan);
    free(q); free(k); free(v); free(o);
    return ATTN_CLI_EXIT_OK;
}

/* ---- DCP decode: 8 requests, paged bf16 cache, H 32/8, d 128, block 128, interleave 1 ------------------ */
static int cp_dcp(const attn_cli_env *env, int reps, cp_row *row) {
    const int64_t R = 8, L = cp_env("ATTN_CP_CTX", 8192), H = 32, HK = 8, D = 128, BS = 128;
    const int64_t local = attn_mpi_dcp_local_len(L, cp_world, 1, cp_rank), nbr = (local + BS - 1) / BS;
    const int64_t NB = R * nbr + 1;
    const int64_t cshape[5] = {2, NB, BS, HK, D};
    uint16_t *cache = malloc(2 * (size_t)(2 * NB * BS * HK * D));
    cp_fill_bf16(cache, 2 * NB * BS * HK * D, 31 + cp_rank);
    int32_t *bt = malloc(4 * (size_t)(R * nbr)), qsl[9], seq[8];
    for (int64_t i = 0; i < R * nbr; i++)
        bt[i] = (int32_t)i;
    for (int r = 0; r <= R; r++)
        qsl[r] = r;
    for (int r = 0; r < R; r++)
        seq[r] = (int32_t)L;
    float *q = malloc(4 * (size_t)(R * H * D)), *o = malloc(4 * (size_t)(R * H * D));
    cp_fill_f32(q, R * H * D, 5);
    const int64_t qsh[3] = {R, H, D}, one[1] = {R + 1}, rr[1] = {R}, bsh[2] = {R, nbr};
    attn_tensor tc = attn_tensor_make(cache, ATTN_DTYPE_BF16, 5, cshape), tq = attn_tensor_make(q, ATTN_DTYPE_F32, 3, qsh),
                to = attn_tensor_make(o, ATTN_DTYPE_F32, 3, qsh), tqs = attn_tensor_make(qsl, ATTN_DTYPE_I32, 1, one),
                ts = attn_tensor_make(seq, ATTN_DTYPE_I32, 1, rr), tb = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, bsh);
    attn_mpi_dcp_config cfg = {1, (int32_t)H, (int32_t)D, (int32_t)R, (int32_t)((L + BS - 1) / BS)};
    attn_mpi_dcp_plan *plan = NULL;
    attn_status st = attn_mpi_dcp_plan_create(MPI_COMM_WORLD, &cfg, &plan);
    if (st)
        return cp_fail(env, "attn_mpi_dcp_plan_create", st);
    attn_params prm;
    attn_params_init(&prm);
    prm.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    row->step = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        attn_mpi_stats s;
        MPI_Barrier(MPI_COMM_WORLD);
        st = attn_mpi_dcp_forward(env->ctx, plan, &tq, &tc, &tqs, &ts, &tb, &prm, &to, NULL, &s);
        if (st)
            return cp_fail(env, "attn_mpi_dcp_forward", st);
        const double step = cp_max(s.total_seconds);
        if (r > 0 && step < row->step) {
            row->step = step;
            row->compute = cp_max(s.compute_seconds);
            row->wait = cp_max(s.wait_seconds);
            row->bytes = s.bytes_sent;
        }
    }
    row->alone = row->wait; /* the all-gather follows the compute: nothing to hide it behind */
    row->flops = 4.0 * (double)R * H * (double)L * D / cp_world;
    row->mode = "dcp";
    snprintf(row->shape, sizeof row->shape, "decode %lld reqs x %lld ctx H=%lld/%lld d=%lld bf16", (long long)R,
             (long long)L, (long long)H, (long long)HK, (long long)D);
    attn_mpi_dcp_plan_free(plan);
    free(cache); free(bt); free(q); free(o);
    return ATTN_CLI_EXIT_OK;
}

/* ---- Ulysses: non-causal (diffusion), H 8, d 64, bf16 ------------------------------------------------- */
static int cp_ulysses(const attn_cli_env *env, int reps, cp_row *row) {
    const int64_t S = cp_env("ATTN_CP_SEQ", 8192) / 2, H = 8, D = 64;
    if (H % cp_world) {
        row->mode = NULL;
        return ATTN_CLI_EXIT_OK;
    }
    const int64_t SL = S / cp_world;
    attn_mpi_ulysses_config cfg = {1, SL, (int32_t)H, (int32_t)H, (int32_t)D, (int32_t)D, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16};
    attn_mpi_ulysses_plan *plan = NULL;
    attn_status st = attn_mpi_ulysses_plan_create(MPI_COMM_WORLD, &cfg, &plan);
    if (st)
        return cp_fail(env, "attn_mpi_ulysses_plan_create", st);
    uint16_t *x = malloc(2 * (size_t)(SL * H * D) * 4);
    cp_fill_bf16(x, SL * H * D * 4, 41 + cp_rank);
    const int64_t sh[4] = {1, SL, H, D};
    attn_tensor tq = attn_tensor_make(x, ATTN_DTYPE_BF16, 4, sh), tk = attn_tensor_make(x + SL * H * D, ATTN_DTYPE_BF16, 4, sh),
                tv = attn_tensor_make(x + 2 * SL * H * D, ATTN_DTYPE_BF16, 4, sh),
                to = attn_tensor_make(x + 3 * SL * H * D, ATTN_DTYPE_BF16, 4, sh);
    row->step = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        attn_mpi_stats s;
        MPI_Barrier(MPI_COMM_WORLD);
        st = attn_mpi_ulysses_forward(env->ctx, plan, &tq, &tk, &tv, NULL, &to, NULL, &s);
        if (st)
            return cp_fail(env, "attn_mpi_ulysses_forward", st);
        const double step = cp_max(s.total_seconds);
        if (r > 0 && step < row->step) {
            row->step = step;
            row->compute = cp_max(s.compute_seconds);
            row->wait = cp_max(s.wait_seconds);
            row->bytes = s.bytes_sent;
        }
    }
    row->alone = row->wait; /* all-to-alls bracket the compute: not overlapped */
    row->flops = 4.0 * (double)S * (double)S * H * D / cp_world;
    row->mode = "ulysses";
    snprintf(row->shape, sizeof row->shape, "full S=%lld H=%lld d=%lld bf16", (long long)S, (long long)H, (long long)D);
    attn_mpi_ulysses_plan_free(plan);
    free(x);
    return ATTN_CLI_EXIT_OK;
}

int attn_wl_cp_run(const attn_cli_env *env) {
    int init = 0, we_init = 0;
    MPI_Initialized(&init);
    if (!init) {
        MPI_Init(NULL, NULL);
        we_init = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &cp_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cp_world);
    const int reps = env->repeats > 0 ? env->repeats : 3;
    double bw = 0, lat = 0;
    if (cp_world > 1)
        cp_bandwidth(&bw, &lat);
    if (cp_rank == 0) {
        fprintf(env->out, "attn run --workload cp: %d MPI ranks, %d thread(s) per rank, ISA %s, best of %d steps after 1 warm-up\n",
                cp_world, env->num_threads, attn_ctx_isa(env->ctx), reps);
        if (cp_world > 1)
            fprintf(env->out, "MPI rank 0 <-> 1: %.2f GB/s (16 MiB ping-pong), latency %.1f us (8 B)\n", bw / 1e9, lat * 1e6);
        fprintf(env->out, "%-8s %-40s %10s %10s %9s %9s %11s %9s %9s\n", "mode", "shape", "step ms", "compute ms",
                "wait ms", "alone ms", "MB sent/rk", "overlap", "GFLOP/s/rk");
    }
    cp_row row;
    int rc = ATTN_CLI_EXIT_OK;
    memset(&row, 0, sizeof row);
    if ((rc = cp_ring(env, reps, &row)) == ATTN_CLI_EXIT_OK)
        cp_print(env->out, &row);
    memset(&row, 0, sizeof row);
    if (rc == ATTN_CLI_EXIT_OK && (rc = cp_dcp(env, reps, &row)) == ATTN_CLI_EXIT_OK)
        cp_print(env->out, &row);
    memset(&row, 0, sizeof row);
    if (rc == ATTN_CLI_EXIT_OK && (rc = cp_ulysses(env, reps, &row)) == ATTN_CLI_EXIT_OK && row.mode)
        cp_print(env->out, &row);
    if (cp_rank == 0)
        fprintf(env->out, "step = slowest rank; wait = communication not hidden by compute; alone = the same traffic with no "
                          "compute; overlap = 1 - wait/alone (ring only: DCP and Ulysses communicate between computes)\n");
    if (we_init)
        MPI_Finalize();
    return rc;
}

#else
typedef int attn_wl_cp_absent; /* ISO C: a translation unit is never empty */
#endif /* ATTN_CLI_MPI */
