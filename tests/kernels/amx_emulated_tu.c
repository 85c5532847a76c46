/*
 * amx_emulated_tu.c — the amx table's kernel source compiled a second time with ATTN_AMX_EMULATE (the scalar
 * model of the tile instructions, src/kernels/amx/amx_ops.h) for tests/kernels/test_amx_emulated.c. Only this
 * file carries the AVX-512 + AVX512-BF16 flags the kernels need, so the test's own code (main, the checks) stays
 * plain x86-64 and runs, and reports why it skips, on a CPU without AVX-512.
 */
#define ATTN_AMX_EMULATE 1
#define ATTN_HAVE_AVX512     1 /* the avx512 and avx512bf16 tables are compiled in (tests.cmake): their */
#define ATTN_HAVE_AVX512BF16 1 /* entries are declared                                                    */
#include "kernels/amx/quant_amx.c"
#include "kernels/amx/tile_amx.c"
