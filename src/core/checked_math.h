/*
 * checked_math.h — overflow-checked int64 arithmetic for sizes and offsets (validation only, not hot paths).
 * Each returns 1 on success and stores the result, 0 on overflow (result unspecified).
 */
#ifndef ATTN_CORE_CHECKED_MATH_H
#define ATTN_CORE_CHECKED_MATH_H

#include <stdint.h>

static inline int attn_mul_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int attn_add_i64(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
/* a*b + c */
static inline int attn_muladd_i64(int64_t a, int64_t b, int64_t c, int64_t *out) {
    int64_t t;
    return attn_mul_i64(a, b, &t) && attn_add_i64(t, c, out);
}

/* base + off bytes as a pointer. A legal empty view may have data == NULL, and NULL + 0 is undefined in C:
 * a NULL base stays NULL (nothing is read through it), so address computations of empty views are defined. */
static inline const char *attn_byte_ptr(const void *base, int64_t off) {
    return base ? (const char *)base + off : (const char *)base;
}

#endif
