/*
 * mpi_test.h — the small harness of the MPI suites (tests/mpi): checks that count failures per rank and
 * keep going (an abort on one rank would leave the others blocked in a collective), a seeded RNG that
 * gives every rank the same global data, tolerance comparison, and the exit code agreed over all ranks.
 * The suites use only the public headers (attn.h, attn_mpi.h): the oracle is attn_ref_*.
 */
#ifndef ATTN_TESTS_MPI_TEST_H
#define ATTN_TESTS_MPI_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_mpi.h"

static int mt_failures = 0, mt_checks = 0, mt_rank = 0, mt_world = 1;

#define MT_CHECK(cond, ...)                                                                                    \
    do {                                                                                                       \
        mt_checks++;                                                                                           \
        if (!(cond)) {                                                                                         \
            mt_failures++;                                                                                     \
            fprintf(stderr, "[rank %d/%d] FAIL %s:%d: %s: ", mt_rank, mt_world, __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                                                      \
            fprintf(stderr, "\n");                                                                             \
        }                                                                                                      \
    } while (0)

#define MT_OK(expr)                                                                                            \
    do {                                                                                                       \
        attn_status mt_st_ = (expr);                                                                           \
        MT_CHECK(mt_st_ == ATTN_STATUS_OK, "%s -> %s: %s / %s", #expr, attn_status_string(mt_st_),             \
                 attn_mpi_last_error(), attn_last_error());                                                    \
    } while (0)

static inline void mt_init(int *argc, char ***argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mt_world);
}

/* Agreed exit code: 0 iff no rank failed. Prints one summary line on rank 0. */
static inline int mt_finish(const char *suite) {
    int all = 0, checks = 0;
    MPI_Allreduce(&mt_failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mt_checks, &checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (mt_rank == 0)
        printf("%s: %d ranks, %d checks, %d failures\n", suite, mt_world, checks, all);
    MPI_Finalize();
    return all ? 1 : 0;
}

/* splitmix64: the same sequence on every rank for the same seed. */
static inline uint64_t mt_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float mt_uniform(uint64_t *s) { /* [-1, 1) */
    return (float)((double)(mt_next(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
static inline void mt_fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        x[i] = mt_uniform(&s);
}

/* max |a - b| over n floats (NaN -> inf) */
static inline double mt_max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d != d)
            return INFINITY;
        if (d > m)
            m = d;
    }
    return m;
}

/* max |a - b| over finite pairs; counts pairs that are not both the same infinity */
static inline double mt_lse_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i])
                return INFINITY;
            continue;
        }
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d != d)
            return INFINITY;
        if (d > m)
            m = d;
    }
    return m;
}

/* 1 iff every rank holds the same bytes (FNV-1a hash, min == max over ranks). */
static inline int mt_same_on_all_ranks(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    int64_t v[2] = {(int64_t)(h >> 1), -(int64_t)(h >> 1)}, r[2];
    MPI_Allreduce(v, r, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    return r[0] == -r[1];
}

static inline attn_tensor mt_t(void *data, attn_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                        int64_t d4) {
    const int64_t shape[5] = {d0, d1, d2, d3, d4};
    return attn_tensor_make(data, dt, ndim, shape);
}

#endif /* ATTN_TESTS_MPI_TEST_H */
