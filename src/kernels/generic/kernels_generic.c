/*
 * kernels_generic.c — the portable kernel table: the fallback on every CPU and the template for new ISAs.
 */
#include "kernels/generic/tile_kernels.h"

ATTN_DEFINE_KERNEL_TABLE(generic)
