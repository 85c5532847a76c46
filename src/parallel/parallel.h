/*
 * parallel.h — the only threading interface of the library (docs/CONTRIBUTING.md §9): run items [0, n) on up to
 * `num_threads` threads with dynamic scheduling. Which thread runs an item never changes a result bit.
 */
#ifndef ATTN_PARALLEL_H
#define ATTN_PARALLEL_H

#include <stdint.h>

/* fn(arg, item, thread_id) for every item; thread_id in [0, num_threads). Runs inline when
 * num_threads == 1 or n <= 1. */
typedef void (*attn_item_fn)(void *arg, int64_t item, int32_t thread_id);
void attn_parallel_for(int32_t num_threads, int64_t n, attn_item_fn fn, void *arg);

/* Default thread count: omp_get_max_threads() with OpenMP, else 1. */
int32_t attn_parallel_default_threads(void);

#endif
