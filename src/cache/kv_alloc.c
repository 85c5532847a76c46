/*
 * kv_alloc.c — the memory behind attn_kv_cache_alloc: 2 MiB-aligned and advised MADV_HUGEPAGE on Linux for
 * caches of >= 2 MiB (transparent huge pages), 64-byte aligned below; zero-filled. The advice is best effort:
 * its failure is ignored. attn_kv_pages_to_huge moves memory an engine allocated (and zeroed) itself onto huge
 * pages.
 */
#define _DEFAULT_SOURCE /* madvise / MADV_HUGEPAGE in <sys/mman.h> under -std=c11 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cache/kv_layout.h"

#define ATTN_HUGE_PAGE ((size_t)2 << 20)

void *attn_kv_pages_alloc(size_t bytes) {
    const int huge = bytes >= ATTN_HUGE_PAGE;
    const size_t align = huge ? ATTN_HUGE_PAGE : 64;
    if (bytes > SIZE_MAX - align)
        return NULL;
    const size_t size = (bytes + align - 1) / align * align; /* aligned_alloc: a multiple of the alignment */
    void *p = aligned_alloc(align, size ? size : align);
    if (!p)
        return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge)
        (void)madvise(p, size, MADV_HUGEPAGE); /* before the first touch: the zeroing faults huge pages */
#endif
    memset(p, 0, size ? size : align);
    return p;
}

void attn_kv_pages_free(void *p) {
    free(p);
}

#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_DONTNEED)
/* 1 when [lo, hi) lies in one writable private anonymous mapping of this process (/proc/self/maps: 'w' and 'p'
 * permissions, inode 0 and no file; the heap and torch's / NumPy's large allocations are such mappings). There a
 * released page refaults as zeros; a file mapping would refault the file's bytes. */
static int attn_kv_anonymous(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    int ok = 0;
    while (!ok && fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) { /* a line longer than the buffer (a long path): its rest is no line of its own */
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {
            }
        }
        unsigned long long a = 0, b = 0, inode = 1;
        char perms[8] = "", path[256] = "";
        if (sscanf(line, "%llx-%llx %7s %*s %*s %llu %255s", &a, &b, perms, &inode, path) < 4)
            continue;
        ok = a <= lo && hi <= b && perms[1] == 'w' && perms[3] == 'p' && inode == 0 &&
             (path[0] == '\0' || path[0] == '[');
    }
    fclose(f);
    return ok;
}

/* 1 when the n bytes at p (a multiple of 64) are all zero. */
static int attn_kv_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 64) {
        uint64_t w[8], any = 0;
        memcpy(w, p + i, sizeof w);
        for (int j = 0; j < 8; j++)
            any |= w[j];
        if (any)
            return 0;
    }
    return 1;
}
#endif

int64_t attn_kv_pages_to_huge(void *data, size_t bytes) {
    int64_t released = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MADV_DONTNEED)
    const uintptr_t lo = ((uintptr_t)data + ATTN_HUGE_PAGE - 1) & ~(uintptr_t)(ATTN_HUGE_PAGE - 1);
    const uintptr_t hi = ((uintptr_t)data + bytes) & ~(uintptr_t)(ATTN_HUGE_PAGE - 1);
    if (lo >= hi || madvise((void *)lo, hi - lo, MADV_HUGEPAGE) != 0 || !attn_kv_anonymous(lo, hi))
        return 0;
    /* runs of all-zero 2 MiB pages released together: they refault as zero-filled huge pages */
    uintptr_t run = 0;
    for (uintptr_t p = lo; p <= hi; p += ATTN_HUGE_PAGE) {
        const int zero = p < hi && attn_kv_zero((const unsigned char *)p, ATTN_HUGE_PAGE);
        if (zero && !run)
            run = p;
        if (!zero && run) {
            if (madvise((void *)run, p - run, MADV_DONTNEED) == 0)
                released += (int64_t)(p - run);
            run = 0;
        }
    }
#else
    (void)data, (void)bytes;
#endif
    return released;
}
