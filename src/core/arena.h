/*
 * arena.h — bump carving for count-then-fill construction (docs/CONTRIBUTING.md §8): one function sizes an
 * object's arrays with base == NULL (count pass), the caller allocates once, and the same function carves them
 * from the allocation (fill pass). It does not allocate or free anything itself.
 */
#ifndef ATTN_CORE_ARENA_H
#define ATTN_CORE_ARENA_H

#include <stddef.h>

/* With base == NULL only `used` advances (count pass). Every carve is 64-byte aligned and named, so a failure
 * can say which array overflowed. */
typedef struct attn_arena {
    char *base;
    size_t used;
    int overflow;            /* set when a size computation overflowed                 */
    const char *overflow_at; /* name of the array that overflowed                      */
} attn_arena;

/* Carves count·elem_size bytes (rounded up to 64) named `name`: the address in the fill pass, NULL in the count
 * pass or on overflow (then overflow is set and overflow_at names the first array that overflowed). */
void *attn_arena_carve(attn_arena *a, const char *name, size_t count, size_t elem_size);

#endif
