/*
 * amx_ops.h — the AMX tile operations the amx table uses, as macros: the intrinsics (-mamx-tile -mamx-bf16) in
 * the library, or, with ATTN_AMX_EMULATE defined (tests/kernels/test_amx_emulated.c), a scalar model of them
 * written from the Intel SDM pseudo-code (LDTILECFG palette 1, STTILECFG, TILELOADD/TILESTORED, TILEZERO, TDPBF16PS
 * with its tile-shape rules checked), so the kernels' data layout is tested on machines without AMX. Only static inline
 * functions (docs/CONTRIBUTING.md §7).
 */
#ifndef ATTN_KERNELS_AMX_OPS_H
#define ATTN_KERNELS_AMX_OPS_H

#include <stdint.h>
#include <string.h>

/* LDTILECFG's 64-byte operand, palette 1: 8 tiles of up to 16 rows × 64 bytes. */
typedef struct kamx_cfg {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} kamx_cfg;

#if defined(ATTN_AMX_EMULATE)
#include <math.h>
#include <stdlib.h>

static _Thread_local kamx_cfg kamx_emu_cfg;
static _Thread_local uint8_t kamx_emu_tile[8][16][64];

static inline void kamx_emu_check(int ok) {
    if (!ok) abort(); /* the hardware would fault (#UD / #GP): a layout bug in the kernel */
}
static inline void kamx_emu_loadcfg(const kamx_cfg *c) {
    kamx_emu_check(c->palette_id == 1);
    for (int t = 0; t < 8; t++) kamx_emu_check(c->rows[t] <= 16 && c->colsb[t] <= 64 && c->colsb[t] % 4 == 0);
    kamx_emu_cfg = *c;
    memset(kamx_emu_tile, 0, sizeof kamx_emu_tile);
}
static inline void kamx_emu_load(int t, const void *base, int64_t stride) {
    const int rows = kamx_emu_cfg.rows[t], cb = kamx_emu_cfg.colsb[t];
    kamx_emu_check(rows > 0);
    memset(kamx_emu_tile[t], 0, sizeof kamx_emu_tile[t]);
    for (int r = 0; r < rows; r++) memcpy(kamx_emu_tile[t][r], (const char *)base + r * stride, (size_t)cb);
}
static inline void kamx_emu_store(int t, void *base, int64_t stride) {
    const int rows = kamx_emu_cfg.rows[t], cb = kamx_emu_cfg.colsb[t];
    kamx_emu_check(rows > 0);
    for (int r = 0; r < rows; r++) memcpy((char *)base + r * stride, kamx_emu_tile[t][r], (size_t)cb);
}
static inline void kamx_emu_zero(int t) { memset(kamx_emu_tile[t], 0, sizeof kamx_emu_tile[t]); }
static inline float kamx_emu_bf16(const uint8_t *p) { /* bf16 → f32, a denormal read as a signed zero */
    uint16_t h;
    memcpy(&h, p, 2);
    if ((h & 0x7F80u) == 0) h &= 0x8000u;
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static inline float kamx_emu_ftz(float x) { return fabsf(x) < 1.17549435e-38f ? copysignf(0.0f, x) : x; }
/* TDPBF16PS c, a, b (SDM): c[m][n] += a[m][2k]·b[k][2n], then += a[m][2k+1]·b[k][2n+1], k ascending. */
static inline void kamx_emu_dp(int c, int a, int b) {
    const kamx_cfg *g = &kamx_emu_cfg;
    const int M = g->rows[c], N = g->colsb[c] / 4, K = g->colsb[a] / 4;
    kamx_emu_check(g->rows[a] == M && g->rows[b] == K && g->colsb[b] == g->colsb[c] && c != a && c != b && a != b);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc;
            memcpy(&acc, &kamx_emu_tile[c][m][4 * n], 4);
            for (int k = 0; k < K; k++) {
                acc = kamx_emu_ftz(fmaf(kamx_emu_bf16(&kamx_emu_tile[a][m][4 * k]),
                                        kamx_emu_bf16(&kamx_emu_tile[b][k][4 * n]), acc));
                acc = kamx_emu_ftz(fmaf(kamx_emu_bf16(&kamx_emu_tile[a][m][4 * k + 2]),
                                        kamx_emu_bf16(&kamx_emu_tile[b][k][4 * n + 2]), acc));
            }
            memcpy(&kamx_emu_tile[c][m][4 * n], &acc, 4);
        }
}
#define KAMX_LOADCFG(cfg)           kamx_emu_loadcfg(cfg)
#define KAMX_STORECFG(cfg)          (*(cfg) = kamx_emu_cfg)
#define KAMX_LOAD(t, base, stride)  kamx_emu_load(t, base, stride)
#define KAMX_STORE(t, base, stride) kamx_emu_store(t, base, stride)
#define KAMX_ZERO(t)                kamx_emu_zero(t)
#define KAMX_DP(c, a, b)            kamx_emu_dp(c, a, b)
#else
#include <immintrin.h>
#define KAMX_LOADCFG(cfg)           _tile_loadconfig(cfg)
#define KAMX_STORECFG(cfg)          _tile_storeconfig(cfg)
#define KAMX_LOAD(t, base, stride)  _tile_loadd(t, base, stride)
#define KAMX_STORE(t, base, stride) _tile_stored(t, base, stride)
#define KAMX_ZERO(t)                _tile_zero(t)
#define KAMX_DP(c, a, b)            _tile_dpbf16ps(c, a, b)
#endif

/* Loads cfg unless the thread's tiles already have it (STTILECFG reads the current one; LDTILECFG, which also
 * clears every tile, costs more than a few tile products). No kernel keeps data in tiles across calls, so a
 * configuration left by an earlier call, or changed by other code in between, only decides whether to load. */
static inline void kamx_use(const kamx_cfg *cfg) {
    kamx_cfg cur;
    KAMX_STORECFG(&cur);
    if (memcmp(&cur, cfg, sizeof cur))
        KAMX_LOADCFG(cfg);
}

/* One configuration for the tile kernels of whole tiles: 8 tiles of 16 rows × 64 bytes. */
static inline void kamx_config(void) {
    kamx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    kamx_use(&cfg);
}

/* Score rows [k0, k0 + valid) of C tile t (16 keys × 16 rows) into `s` (rows ATTN_QB floats apart) from lane l0:
 * straight when all 16 keys are valid, else through the caller's `float tmp[16][16]` (rows past the keys are never
 * written). A macro: the tile number is an immediate; the caller names its scores `s` and its scratch `tmp`. */
#define KAMX_STORE_S(t, k0, l0, valid)                                                                                 \
    do {                                                                                                               \
        if ((valid) >= 16) {                                                                                           \
            KAMX_STORE(t, s + (k0)*ATTN_QB + (l0), ATTN_QB * 4);                                                       \
        } else {                                                                                                       \
            KAMX_STORE(t, tmp, 64);                                                                                    \
            for (int64_t i_ = 0; i_ < (valid); i_++)                                                                   \
                memcpy(s + ((k0) + i_) * ATTN_QB + (l0), tmp[i_], 64);                                                 \
        }                                                                                                              \
    } while (0)

#endif
