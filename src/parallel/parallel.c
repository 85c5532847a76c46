/*
 * parallel.c — the one file that names OpenMP. One parallel region per call, items taken dynamically
 * (the VM's vCPUs are uneven; a static split waits for the slow one, docs/KERNELS.md §6).
 */
#include "parallel/parallel.h"

#if defined(ATTN_USE_OPENMP)
#include <omp.h>
#endif

int32_t attn_parallel_default_threads(void) {
#if defined(ATTN_USE_OPENMP)
    int n = omp_get_max_threads();
    return n > 0 ? (int32_t)n : 1;
#else
    return 1;
#endif
}

void attn_parallel_for(int32_t num_threads, int64_t n, attn_item_fn fn, void *arg) {
    if (n <= 0) return;
#if defined(ATTN_USE_OPENMP)
    if (num_threads > 1 && n > 1) {
        int32_t nt = (int64_t)num_threads < n ? num_threads : (int32_t)n;
#pragma omp parallel num_threads(nt)
        {
            const int32_t tid = (int32_t)omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
            for (int64_t i = 0; i < n; i++) fn(arg, i, tid);
        }
        return;
    }
#else
    (void)num_threads;
#endif
    for (int64_t i = 0; i < n; i++) fn(arg, i, 0);
}
