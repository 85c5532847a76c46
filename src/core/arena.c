/*
 * arena.c — the bump carver of count-then-fill construction (arena.h). Only size arithmetic: no allocation.
 */
#include "core/arena.h"

#include <stdint.h>

void *attn_arena_carve(attn_arena *a, const char *name, size_t count, size_t elem_size) {
    size_t bytes;
    if (__builtin_mul_overflow(count, elem_size, &bytes) || bytes > SIZE_MAX - 64 - a->used) {
        if (!a->overflow)
            a->overflow_at = name;
        a->overflow = 1;
        return NULL;
    }
    void *p = a->base ? a->base + a->used : NULL;
    a->used += (bytes + 63) & ~(size_t)63;
    return p;
}
