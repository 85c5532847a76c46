/*
 * dispatch.h — choosing a kernel table: by name, by CPU, or by the ATTN_ISA environment variable.
 */
#ifndef ATTN_DISPATCH_H
#define ATTN_DISPATCH_H

#include "kernels/kernels.h"

/* The table with this name if compiled in and runnable here, else NULL. */
const struct attn_kernels *attn_dispatch_by_name(const char *name);
/* The default table: ATTN_ISA if set (NULL if it names an unusable ISA), else the fastest runnable. */
const struct attn_kernels *attn_dispatch_default(void);

#endif
