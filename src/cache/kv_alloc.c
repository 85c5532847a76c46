/*
 * kv_alloc.c — the memory behind attn_kv_cache_alloc: 2 MiB-aligned and advised MADV_HUGEPAGE on Linux for
 * caches of >= 2 MiB (transparent huge pages), 64-byte aligned below; zero-filled. The advice is best effort:
 * its failure is ignored.
 */
#define _DEFAULT_SOURCE /* madvise / MADV_HUGEPAGE in <sys/mman.h> under -std=c11 */
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
