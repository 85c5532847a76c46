/* tile_insns.c — drives one kernel of one table on one kv tile (64 keys, D = Dv = 128) `reps` times, for
 * scripts/arm64_insn_count.sh: executed instructions per tile = (count(2·reps) − count(reps)) / reps under a
 * qemu TCG instruction-counting plugin (start-up and set-up cancel out). Usage: tile_insns ISA KERNEL ROWS REPS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "dispatch/dispatch.h"
#include "kernels/kernels.h"

#define NK ATTN_KV_TILE
#define D 128

static float q_t[D * ATTN_QB], s[NK * ATTN_QB], o[D * ATTN_QB], m[ATTN_QB], l[ATTN_QB], od[ATTN_QB * D];
static float rows[NK][D];
static uint16_t rows16[NK][D];

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const struct attn_kernels *kt = attn_dispatch_by_name(argv[1]);
    if (!kt) return 3;
    const char *k = argv[2];
    const int nr = atoi(argv[3]);
    const long reps = atol(argv[4]);
    const float *rp[NK];
    const void *rv[NK];
    for (int i = 0; i < D * ATTN_QB; i++) q_t[i] = (float)((i * 37) % 101) / 101.0f - 0.5f, o[i] = 0.0f;
    for (int j = 0; j < NK; j++) {
        for (int d = 0; d < D; d++) rows[j][d] = (float)((j * 13 + d * 7) % 97) / 97.0f - 0.5f;
        for (int d = 0; d < D; d++) rows16[j][d] = attn_f32_to_bf16(rows[j][d]);
        rp[j] = rows[j], rv[j] = rows16[j];
    }
    for (int i = 0; i < NK * ATTN_QB; i++) s[i] = (float)((i * 29) % 89) / 89.0f;
    for (long r = 0; r < reps; r++) {
        if (!strcmp(k, "qk_tile")) kt->qk_tile(q_t, nr, D, rp, NK, s);
        else if (!strcmp(k, "qk_tile_kv")) kt->qk_tile_kv(q_t, nr, D, rv, ATTN_DTYPE_BF16, NK, s);
        else if (!strcmp(k, "softmax_tile")) {
            for (int i = 0; i < ATTN_QB; i++) m[i] = -INFINITY, l[i] = 0.0f; /* fresh state: no rescale of o */
            kt->softmax_tile(s, NK, nr, m, l, o, D);
        } else if (!strcmp(k, "pv_tile")) kt->pv_tile(s, NK, nr, rp, D, o);
        else if (!strcmp(k, "pv_rows_kv")) kt->pv_rows_kv(s, NK, nr, rv, ATTN_DTYPE_BF16, D, od);
        else return 4;
        __asm__ volatile("" ::: "memory");
    }
    printf("%g\n", (double)s[5] + o[7] + od[3]);
    return 0;
}
