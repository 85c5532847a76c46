/*
 * fwd_exec.c — the driver's schedules of multi-block work items (docs/KERNELS.md §5, §6):
 *   - prefill: a GQA super-block = (sequence, kv head, up to 16 query blocks); each kv tile is fetched
 *     (converted, or copied into a padded-stride tile when f32 rows are a multiple of 1 KiB apart) once
 *     and every block of the item runs on it;
 *   - decode-shaped problems: (sequence, group of kv heads) walking the keys tile by tile in memory order,
 *     all heads of a tile back to back, with the next tile of a head prefetched before its work.
 * Every block keeps its own (m, l, o) states and sees exactly the kernel calls it would make alone
 * (attn_fwd_tile on the same [a, b) ranges, partitions reset/folded in ascending order), so results are
 * bitwise those of the one-block-per-item schedule; only where the K/V floats come from changes, never
 * their values. It does not allocate: states live in the thread's scratch (ATTN_FWD_MULTI_BYTES).
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "attention/fwd.h"
#include "attention/mask.h"
#include "core/dtype.h"
#include "parallel/parallel.h"

/* ---------------------------------------------------------------------------------------------
 * Item scratch: ATTN_FWD_MULTI_MAX slot headers, then per slot q_t [D][QB], partition state
 * (m, l [QB], o [Dv][QB]) and folded state (m, l, o)
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_fx_slot {
    attn_fwd_block blk;
    int64_t first, last; /* partition range of the block                           */
    int64_t lo, hi;      /* keys of the current partition (lo >= hi: no tile)       */
    int active;          /* the current partition is in [first, last)               */
    int safe_pv;         /* token-major: this tile's P·V runs row by row (hidden keys, non-finite V) */
    int hidden;          /* the current tile hides every key from the block: skipped (attn_mask_tile_span) */
    int64_t ta, tb;      /* float blocks: the keys of the current tile the block computes (attn_mask_tile_span) */
    int acc_empty;       /* the folded state holds nothing yet (its o is not initialised)           */
    int acc_is_part;     /* the block's only partition: the folded state is the partition state     */
} attn_fx_slot;

#define ATTN_FX_HEADER_BYTES (((sizeof(attn_fx_slot) * ATTN_FWD_MULTI_MAX) + 63) & ~(size_t)63)

static int64_t attn_fx_slot_floats(const attn_problem *p) {
    const int64_t f = ATTN_QB * (p->head_size + 2 * p->head_size_v + 5) + ATTN_FWD_FEW_ROWS * p->head_size_v +
                      ATTN_KV_TILE * ATTN_QB;
    return (f + 15) & ~(int64_t)15;
}

int64_t attn_fwd_multi_capacity(const attn_problem *p) {
    const int64_t n = (int64_t)((ATTN_FWD_MULTI_BYTES - ATTN_FX_HEADER_BYTES) / sizeof(float)) /
                      attn_fx_slot_floats(p);
    return n < ATTN_FWD_MULTI_MAX ? n : ATTN_FWD_MULTI_MAX;
}

static attn_fx_slot *attn_fx_slots(attn_fwd_scratch *sc) { return (attn_fx_slot *)(void *)sc->multi; }

static float *attn_fx_floats(const attn_problem *p, attn_fwd_scratch *sc, int64_t i) {
    return (float *)(void *)(sc->multi + ATTN_FX_HEADER_BYTES) + i * attn_fx_slot_floats(p);
}

/* q_t, then partition m, l, o, then folded m, l, o; for few-row blocks the partition accumulator in
 * row-major layout o_d [num_rows][Dv] (pv_rows_kv), the α capture of softmax_tile [ATTN_QB] and the block's
 * own score tile s [ATTN_KV_TILE][ATTN_QB] (token-major schedule). */
typedef struct attn_fx_state {
    float *q_t, *m_part, *l_part, *o_part, *m_acc, *l_acc, *o_acc, *o_d, *alpha, *s;
} attn_fx_state;

static attn_fx_state attn_fx_state_of(const attn_problem *p, attn_fwd_scratch *sc, int64_t i) {
    attn_fx_state st;
    float *f = attn_fx_floats(p, sc, i);
    const int64_t ov = p->head_size_v * ATTN_QB;
    st.q_t = f, f += p->head_size * ATTN_QB;
    st.m_part = f, f += ATTN_QB;
    st.l_part = f, f += ATTN_QB;
    st.o_part = f, f += ov;
    st.m_acc = f, f += ATTN_QB;
    st.l_acc = f, f += ATTN_QB;
    st.o_acc = f, f += ov;
    st.alpha = f, f += ATTN_QB;
    st.s = f, f += ATTN_KV_TILE * ATTN_QB;
    st.o_d = f;
    return st;
}

attn_fwd_block *attn_fwd_multi_block(const attn_problem *p, attn_fwd_scratch *sc, int64_t i) {
    (void)p;
    return &attn_fx_slots(sc)[i].blk;
}

void attn_fwd_multi_part_state(const attn_problem *p, attn_fwd_scratch *sc, int64_t i, float **m, float **l,
                               float **o) {
    const attn_fx_state st = attn_fx_state_of(p, sc, i);
    *m = st.m_part, *l = st.l_part, *o = st.o_part;
}

/* ---------------------------------------------------------------------------------------------
 * K/V tiles
 * --------------------------------------------------------------------------------------------- */

/* Prefetch of keys [a, b) of kv heads [g0, g1] as whole token rows in memory order (K and V rows of
 * the heads of a token are contiguous: head stride = head size). No effect on results. */
static void attn_fx_prefetch_rows(const attn_problem *p, const attn_seq_view *seq, int64_t g0, int64_t g1,
                                  int64_t a, int64_t b) {
    const int64_t es = (int64_t)attn_dtype_size(p->kv_dtype);
    const int64_t kbytes = seq->k_dim_stride ? 0 : (g1 - g0) * seq->k_head_stride + p->head_size * es; /* rows only */
    const int64_t vbytes = (g1 - g0) * seq->v_head_stride + p->head_size_v * es;
    for (int64_t j = a; j < b; j++) {
        const char *k = attn_seq_k_row(seq, j, g0), *v = attn_seq_v_row(seq, j, g0);
        for (int64_t off = 0; off < kbytes; off += 64) __builtin_prefetch(k + off, 0, 3);
        for (int64_t off = 0; off < vbytes; off += 64) __builtin_prefetch(v + off, 0, 3);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Few-row blocks (decode): K/V in place, row-major partition accumulator
 * --------------------------------------------------------------------------------------------- */
static int attn_fx_raw(const attn_problem *p, const attn_fwd_block *blk) {
    (void)p;
    return blk->num_rows <= ATTN_FWD_FEW_ROWS;
}

/* 1 when fp8 K/V rows must be widened before the few-row kernels read them: the table's qk_tile_kv /
 * pv_rows_kv do not read fp8 (kernels.h, fp8_kv). Those rows are then widened exactly by cvt_to_f32 into the
 * scratch tiles (the floats the converted path uses) and the kernels run on them as f32 rows; a table that
 * reads fp8 in place widens the same values in registers. Either way the bits are those of every other path. */
static int attn_fx_widens(const attn_problem *p, const struct attn_kernels *kern) {
    return attn_dtype_is_fp8(p->kv_dtype) && !kern->fp8_kv;
}

/* dtype of the rows the few-row kernels read: the storage dtype, or F32 where fp8 rows are widened first. */
static attn_dtype attn_fx_raw_dtype(const attn_problem *p, const struct attn_kernels *kern) {
    return attn_fx_widens(p, kern) ? ATTN_DTYPE_F32 : p->kv_dtype;
}

/* fp8: rows[0..n) (storage dtype) widened into `tile` (row stride ATTN_HEAD_SIZE_MAX + 16 floats, n <= ATTN_KV_TILE)
 * and rows[] pointed at the copies. */
static void attn_fx_widen_fp8(const attn_problem *p, const struct attn_kernels *kern, const void **rows, int64_t n,
                              int64_t width, float *tile) {
    for (int64_t k = 0; k < n; k++) {
        float *dst = tile + k * (ATTN_HEAD_SIZE_MAX + 16);
        kern->cvt_to_f32(rows[k], p->kv_dtype, dst, width);
        rows[k] = dst;
    }
}

/* The steps of attn_fwd_tile between Q·Kᵀ and P·V for a few-row block (scores of keys [a, b) in s). */
static void attn_fx_softmax_raw(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                                const attn_fx_state *st, float *s, int64_t a, int64_t b) {
    const int64_t nr = blk->num_rows, dv = p->head_size_v;
    attn_fwd_tile_logits_mask(p, kern, blk, a, b, s);
    for (int r = 0; r < ATTN_QB; r++) st->alpha[r] = 1.0f;
    kern->softmax_tile(s, b - a, nr, st->m_part, st->l_part, st->alpha, 1);
    for (int64_t r = 0; r < nr; r++) {
        const float al = st->alpha[r];
        if (al == 1.0f) continue;
        float *o = st->o_d + r * dv;
        for (int64_t d = 0; d < dv; d++) o[d] *= al;
    }
}

/* pv_rows_kv of the keys [a, a + nk) (absolute key positions; P rows p, V rows v_rows) in calls that start at even
 * key positions: an odd a gets its first key alone. A table that pairs consecutive keys (avx512bf16's VDPBF16PS)
 * then pairs keys (2i, 2i + 1) whatever the schedule or the chunk boundaries, so its bits do not depend on the
 * thread count; for every exact table a split changes no bit (the P·V chain carries o_d through memory). */
static void attn_fx_pv_rows(const struct attn_kernels *kern, int64_t a, const float *p, int64_t nk, int64_t num_rows,
                            const void *const *v_rows, attn_dtype dtype, int64_t dv, float *o_d, attn_kv_prefetch *pf) {
    if ((a & 1) && nk > 1) {
        kern->pv_rows_kv(p, 1, num_rows, v_rows, dtype, dv, o_d);
        p += ATTN_QB, v_rows += 1, nk -= 1;
    }
    if (pf)
        kern->pv_rows_kv_pf(p, nk, num_rows, v_rows, dtype, dv, o_d, pf);
    else
        kern->pv_rows_kv(p, nk, num_rows, v_rows, dtype, dv, o_d);
}

/* 1 if the few-row block's tile [a, b) needs the row-by-row P·V (attn_fwd_pv_safe's rule): the tile hides
 * some key from some row and a V row (v_raw[0] is key a) is not finite. */
static int attn_fx_needs_safe_pv(const attn_problem *p, const attn_fwd_block *blk, const void *const *v_raw,
                                 attn_dtype dtype, int64_t a, int64_t b) {
    return !attn_mask_tile_is_full(p, blk, a, b) && attn_fwd_rows_nonfinite(v_raw, dtype, b - a, p->head_size_v);
}

/* P·V of a few-row block's tile [a, b) (P in s) into o_d row by row, hidden keys (p = 0) reading a zero row. */
static void attn_fx_pv_raw_safe(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                                attn_fwd_scratch *sc, const attn_fx_state *st, const float *s, const void *const *v_raw,
                                attn_dtype dtype, int64_t a, int64_t b) {
    const int64_t nk = b - a, dv = p->head_size_v;
    memset(sc->zero_row, 0, (ATTN_HEAD_SIZE_MAX + 16) * sizeof(float));
    for (int32_t r = 0; r < blk->num_rows; r++) {
        for (int64_t k = 0; k < nk; k++) sc->v_safe[k] = s[k * ATTN_QB + r] == 0.0f ? sc->zero_row : v_raw[k];
        attn_fx_pv_rows(kern, a, s + r, nk, 1, sc->v_safe, dtype, dv, st->o_d + r * dv, NULL);
    }
}

/* One kv tile [a, b) of a few-row block: the operations of attn_fwd_tile, with P·V into the row-major
 * accumulator. softmax_tile rescales a one-column Oᵀ of ones, which leaves exactly α per lane there (1 where it
 * does not rescale); each o_d row is multiplied by its α ≠ 1 (a row with α = 1 is unchanged by the multiply
 * in attn_fwd_tile too), so every value is the one attn_fwd_tile computes, in another layout. */
static void attn_fx_tile_raw(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                             attn_fwd_scratch *sc, const attn_fx_state *st, float *s, const void *const *k_raw,
                             attn_dtype k_dtype, const void *const *v_raw, attn_dtype dtype, int64_t a, int64_t b) {
    kern->qk_tile_kv(st->q_t, blk->num_rows, p->head_size, k_raw, k_dtype, b - a, s);
    attn_fx_softmax_raw(p, kern, blk, st, s, a, b);
    if (attn_fx_needs_safe_pv(p, blk, v_raw, dtype, a, b))
        attn_fx_pv_raw_safe(p, kern, blk, sc, st, s, v_raw, dtype, a, b);
    else
        attn_fx_pv_rows(kern, a, s, b - a, blk->num_rows, v_raw, dtype, p->head_size_v, st->o_d, NULL);
}

/* Prefetch of `bytes` from `ptr` into L1 / into L2, one request per cache line (no effect on results). Two
 * functions on purpose: one helper branching on the level (and, separately, a switch on the hint) was tried;
 * GCC 12 left no prefetcht1 in the object code and decode ran about 2× slower on every K/V dtype. */
static void attn_fx_prefetch_span(const char *ptr, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(ptr + off, 0, 3);
}

static void attn_fx_prefetch_span_l2(const char *ptr, int64_t bytes) {
    for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(ptr + off, 0, 2);
}

/* The end of the run of tokens from t (< b) whose rows lie in one cache block (b for contiguous K/V), and the
 * first row of the run, K (phase 0) or V, of kv head g: runs step by one row stride, no division per token. */
static int64_t attn_fx_token_run(const attn_seq_view *seq, int phase, int64_t g, int64_t t, int64_t b,
                                 const char **first) {
    *first = phase == 0 ? attn_seq_k_row(seq, t, g) : attn_seq_v_row(seq, t, g);
    if (!seq->block_table)
        return b;
    const int64_t block_end = (t / seq->block_size + 1) * seq->block_size;
    return block_end < b ? block_end : b;
}

/* Q·Kᵀ of a few-row block over keys [a, b) (at most ATTN_KV_TILE) of kv head g stored by dimension
 * (seq->k_dim_stride): the table's qk_cols_kv on runs of at most 16 keys inside one cache block where it takes them
 * (keys one element apart), else the keys gathered into float rows (sc->k_tile, sc->k_rows) for qk_tile_kv. The same
 * chains either way (kernels.h). */
static void attn_fx_qk_cols(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                            const float *q_t, int64_t num_rows, const attn_seq_view *seq, int64_t g, int64_t a,
                            int64_t b, float *s) {
    if (kern->qk_cols_kv && seq->k_row_stride == (int64_t)attn_dtype_size(p->kv_dtype)) {
        const char *runs[ATTN_KV_TILE];
        int32_t keys[ATTN_KV_TILE];
        int64_t n = 0;
        for (int64_t t = a; t < b; n++) {
            const int64_t e = attn_fx_token_run(seq, 0, g, t, t + 16 < b ? t + 16 : b, &runs[n]);
            keys[n] = (int32_t)(e - t);
            t = e;
        }
        if (kern->qk_cols_kv(q_t, num_rows, p->head_size, (const void *const *)runs, keys, n, seq->k_dim_stride,
                             p->kv_dtype, s))
            return;
    }
    attn_fwd_k_gather(seq, p->kv_dtype, g, a, b, p->head_size, sc->k_tile, ATTN_HEAD_SIZE_MAX + 16, sc->k_rows);
    kern->qk_tile_kv(q_t, num_rows, p->head_size, (const void *const *)sc->k_rows, ATTN_DTYPE_F32, b - a, s);
}

/* Row pointers of tokens [a, b) of kv head g, K rows (phase 0) or V rows. */
static void attn_fx_token_rows(const attn_seq_view *seq, int phase, int64_t g, int64_t a, int64_t b,
                               const char **rows) {
    const int64_t rs = phase == 0 ? seq->k_row_stride : seq->v_row_stride;
    for (int64_t t = a; t < b;) {
        const char *r;
        const int64_t e = attn_fx_token_run(seq, phase, g, t, b, &r);
        for (int64_t i = 0; i < e - t; i++) /* (no pointer past the run's last row is formed) */
            rows[t - a + i] = r + i * rs;
        t = e;
    }
}

/* Prefetch into L1 (l1) or L2 of `span` bytes from kv head g0's row of every token in [a, b). With `ranges` (32-key
 * steps, whose chunks are small) each run of tokens inside one cache block is walked by row strides, and where rows
 * are back to back (span = the row stride: the item holds every kv head) it is one range of lines. Without it (16-key
 * steps) every token's row is looked up on its own: there the ranges (bursts of up to 32 KiB) made b1 × 16k bf16
 * decode on two threads 1.3× slower, and so did walking rows by strides (bench_decode, 32/8 heads × 128, Zen 5: the
 * pacing of the prefetches matters, not their addresses). No effect on results. */
static void attn_fx_prefetch_tokens(const attn_seq_view *seq, int phase, int64_t g0, int64_t span, int64_t a, int64_t b,
                                    int l1, int ranges) {
    if (!ranges) {
        for (int64_t t = a; t < b; t++) {
            const char *r = phase == 0 ? attn_seq_k_row(seq, t, g0) : attn_seq_v_row(seq, t, g0);
            if (l1)
                attn_fx_prefetch_span(r, span);
            else
                attn_fx_prefetch_span_l2(r, span);
        }
        return;
    }
    const int64_t rs = phase == 0 ? seq->k_row_stride : seq->v_row_stride;
    for (int64_t t = a; t < b;) {
        const char *r;
        const int64_t e = attn_fx_token_run(seq, phase, g0, t, b, &r);
        const int64_t rows = rs == span ? 1 : e - t, bytes = rs == span ? (e - t) * span : span;
        for (int64_t i = 0; i < rows; i++) {
            if (l1)
                attn_fx_prefetch_span(r + i * rs, bytes);
            else
                attn_fx_prefetch_span_l2(r + i * rs, bytes);
        }
        t = e;
    }
}

/* A step's share of one prefetch (as attn_fx_prefetch_tokens: `span` bytes from kv head g0's row of every token in
 * [a, b), into L1 or L2): handed to the step's kernels as one range of lines (*first, *lines) when they take it
 * (in_kernel) and those rows are back to back in one cache block; else issued here (*lines = 0). */
static void attn_fx_prefetch_share(const attn_seq_view *seq, int phase, int64_t g0, int64_t span, int64_t a, int64_t b,
                                   int l1, int ranges, int in_kernel, const char **first, int64_t *lines) {
    *lines = 0;
    if (a >= b)
        return;
    const int64_t rs = phase == 0 ? seq->k_row_stride : seq->v_row_stride;
    if (in_kernel && (b - a == 1 || rs == span) && attn_fx_token_run(seq, phase, g0, a, b, first) >= b) {
        *lines = ((b - a - 1) * rs + span + 63) / 64;
        return;
    }
    attn_fx_prefetch_tokens(seq, phase, g0, span, a, b, l1, ranges);
}

/* The prefetches a kernel left in *pf. */
static void attn_fx_prefetch_rest(const attn_kv_prefetch *pf) {
    attn_fx_prefetch_span(pf->l1, pf->l1_lines * 64);
    attn_fx_prefetch_span_l2(pf->l2, pf->l2_lines * 64);
}

/* 1 where the item's kv heads [g0, g0 + heads_after] (more than one) lie further apart than tokens in K or V (a
 * head-major page, [num_blocks, num_kv_heads, block_size, head_size]): one token's rows of the item are then no
 * span to prefetch, and the schedule prefetches the next step's rows head by head (attn_fx_prefetch_head). */
static int attn_fx_head_major(const attn_seq_view *seq, int64_t heads_after) {
    return heads_after > 0 && (seq->k_head_stride > seq->k_row_stride || seq->v_head_stride > seq->v_row_stride);
}

/* The bytes of one token's K and V rows of kv heads [g0, g0 + heads_after] where they lie together in one span no
 * longer than a token's row stride (a page whose rows hold a head's key then its value: vLLM's per-layer cache
 * [num_blocks, block_size, num_kv_heads, 2 * head_size], the layout the attn plugin asks vLLM for), with *phase the
 * phase whose row starts the span (0: K); 0 where they do not (K and V in separate pages, as attn's own cache). */
static int64_t attn_fx_kv_span(const attn_problem *p, const attn_seq_view *seq, int64_t heads_after, int *phase) {
    const int64_t rs = seq->k_row_stride, hst = seq->k_head_stride, es = (int64_t)attn_dtype_size(p->kv_dtype);
    if (rs <= 0 || hst < 0 || seq->v_row_stride != rs || seq->v_head_stride != hst ||
        (seq->block_table && seq->v_block_stride != seq->k_block_stride))
        return 0;
    const int64_t off = (int64_t)((intptr_t)seq->v - (intptr_t)seq->k); /* |off| >= rs makes span > rs below */
    const int64_t k_end = heads_after * hst + p->head_size * es, v_end = off + heads_after * hst + p->head_size_v * es;
    const int64_t span = (k_end > v_end ? k_end : v_end) - (off < 0 ? off : 0);
    *phase = off < 0;
    return span <= rs ? span : 0;
}

/* The rows of kv head g, tokens [a, b), K (phase 0) or V, into L1: where a cache block's rows of them are back to
 * back, its run is one range — the first run goes to the kernel's L1 range and the second to its L2 range (*pf,
 * issued between the kernel's steps); the rest, and rows apart, are issued here (attn_fx_prefetch_tokens). No
 * effect on results. */
static void attn_fx_prefetch_head(const attn_problem *p, const attn_seq_view *seq, int phase, int64_t g, int64_t a,
                                  int64_t b, attn_kv_prefetch *pf) {
    const int64_t rs = phase == 0 ? seq->k_row_stride : seq->v_row_stride;
    const int64_t bytes = (phase == 0 ? p->head_size : p->head_size_v) * (int64_t)attn_dtype_size(p->kv_dtype);
    for (int run = 0; run < 2 && a < b && rs == bytes; run++) {
        const char *r;
        const int64_t e = attn_fx_token_run(seq, phase, g, a, b, &r);
        /* r + 64·i for i < lines touches every line of the run (no pointer below r is formed) */
        const int64_t lines = ((int64_t)((uintptr_t)r & 63u) + (e - a) * bytes + 63) / 64;
        if (run == 0)
            pf->l1 = r, pf->l1_lines = lines;
        else
            pf->l2 = r, pf->l2_lines = lines;
        a = e;
    }
    attn_fx_prefetch_tokens(seq, phase, g, bytes, a, b, 1, 1);
}

/* Keys per step of the token-major schedule: ATTN_FX_CHUNK_MAX where that many tokens' rows of the item's kv heads
 * take at most ATTN_FX_CHUNK_BYTES, else ATTN_FX_CHUNK_MIN. Each block's Q·Kᵀ then gets up to 32 keys per call, which
 * lets a few-row kernel keep two groups of 16 keys in flight (at four rows or fewer one group leaves the FMA pipes
 * idle); on a Zen 5 core (bench_decode, 9/3 heads × 64, one thread) that took bf16 b1 × 8k keys from 0.31 to 0.26
 * ms. The bound was 24 KiB while the next chunk always went to L1 (eight kv heads × 128, 32 tokens of bf16 rows: 64
 * KiB, and decode ran 1.3× slower on that Zen 5); with chunks that large it now goes to L2 only (ATTN_FX_L1_BYTES),
 * and 32 tokens of them took a hot b1 × 256-key bf16 decode from 63.5 to 54.7 µs (Intel Xeon, one thread). */
#define ATTN_FX_CHUNK_MIN   16
#define ATTN_FX_CHUNK_MAX   32
#define ATTN_FX_CHUNK_BYTES (64 * 1024)
/* Partitions of at most this many keys are walked without software prefetch: at a 100-key decode (9/3 heads × 64)
 * the prefetch instructions cost ~0.45 µs of a ~5 µs call whether the cache was hot or cold, while from 512 keys up
 * (b8 × 4k keys, bf16) dropping them makes decode 1.6× slower. */
#define ATTN_FX_PREFETCH_MIN_KEYS 128
/* How far ahead the token-major schedule prefetches, in chunks of its consumption order: the next chunk into L1
 * (two chunks of f32 rows of eight heads, 128 KiB, overran L1 before use), and for 2- and 4-byte K/V also the
 * chunk ATTN_FX_PREFETCH_FAR steps ahead into L2. On a Zen 5 core, 2 MiB pages (bench_decode, 32/8 heads × 128,
 * alternated builds), the far prefetch took bf16 b8 × 4k keys (shuffled blocks) from 10.4–10.7 to 8.3 ms on one
 * thread, bf16 b1 × 32k from 8.0–8.5 to 7.1–7.2 ms, f32 b8 × 4k from 13.2–13.8 to 13.0 ms; fp8 K/V, compute-bound
 * at ~28 % of the read ceiling, was 3–5 % slower with its extra instructions and takes the near one only. */
#define ATTN_FX_PREFETCH_AHEAD 1
#define ATTN_FX_PREFETCH_FAR 3
/* Where a chunk and the next one do not fit together in this many bytes (an L1 data cache of 48 KiB, as on
 * recent x86-64 cores), the next chunk is not prefetched into L1: lines of it evicted lines of the chunk being
 * read before they were used, and the kernels then waited on L2. The schedule then prefetches into L2 only, the
 * next chunk (ATTN_FX_PREFETCH_FAR_L2; 2 and 4 were no better, 8 worse), for every K/V dtype. Intel Xeon (AMX),
 * one thread, 2 MiB pages, bench_decode b8 × 4k, decode ÷ the read ceiling of the same run, against the previous
 * schedule: 32/8 heads × 128 bf16 63–68 → 70–72 %, f32 70 → 80–83 %, 16/4 heads bf16 71–75 → 80–91 %. */
#define ATTN_FX_L1_BYTES        (48 * 1024)
#define ATTN_FX_PREFETCH_FAR_L2 1

/* Tokens [*pa, *pb) of the chunk `ahead` steps after chunk ci of `phase` in consumption order (K chunks of a
 * tile, then its V chunks, then the next tile's), *phase_out its phase; an empty range past hi_all. */
static void attn_fx_chunk_ahead(int64_t ch, int64_t ahead, int phase, int64_t ci, int64_t ta, int64_t tb,
                                int64_t hi_all, int *phase_out, int64_t *pa, int64_t *pb) {
    int64_t base = ta, end = tb, pf = ci + ahead;
    int ph = phase;
    for (;;) {
        if (base >= end) { *pa = *pb = 0; *phase_out = ph; return; }
        const int64_t nc = (end - 1) / ch - base / ch + 1;
        if (pf < nc) break;
        pf -= nc;
        if (ph == 0) ph = 1;
        else ph = 0, base = end, end = end + ATTN_KV_TILE < hi_all ? end + ATTN_KV_TILE : hi_all;
    }
    *phase_out = ph;
    *pa = pf == 0 ? base : (base / ch + pf) * ch;
    *pb = (base / ch + pf + 1) * ch;
    if (*pb > end) *pb = end;
}

/* Token-major schedule of one partition for items whose blocks all have few rows (decode): per kv tile, the
 * K rows of every kv head of the item are read in memory order a chunk (16 or 32 tokens) at a time (a token's rows of
 * all heads are one contiguous span in BSND and in a cache page), each block's scores going to its own tile s; then
 * every block's softmax; then the V rows in the same order into each block's row-major accumulator. Each block sees
 * exactly the per-key Q·Kᵀ chains, the softmax of the same [a, b) and the P·V chain in key order of attn_fwd_tile
 * (chunking keys changes neither: scores are independent, and P·V carries o_d through memory), so the bits are those of
 * every other schedule. The spans ATTN_FX_PREFETCH_AHEAD (into L1, where two chunks fit ATTN_FX_L1_BYTES) and
 * ATTN_FX_PREFETCH_FAR (or ATTN_FX_PREFETCH_FAR_L2) steps ahead in consumption order (K of this tile, then V, then K
 * of the next tile) are prefetched, spread over the blocks' steps, in partitions of more than
 * ATTN_FX_PREFETCH_MIN_KEYS keys. Where the phase's kernel has a _pf entry and a step's share is one range of
 * lines (attn_fx_prefetch_share), the kernel issues it between its own steps and the driver what is left after the
 * calls: issued in one burst before the call, the core stalled on the requests instead of computing (Intel Xeon,
 * bench_decode b8 × 4k, 32/8 heads × 128, one thread: bf16 16.9 → 14.2 ms, f32 30.7 → 26.4, fp8 e4m3 15.8 → 12.3).
 * On a head-major page (attn_fx_head_major) each step instead prefetches the rows the next step reads
 * (attn_fx_prefetch_head): the same shape, bf16 18.1–18.8 → 11.1–11.6 ms, f32 32.8 → 21.0, E4M3 12.1 → 8.2. Where a
 * row holds a kv head's K and V side by side (attn_fx_kv_span: vLLM's per-layer caches, token- or head-major) both
 * replace these: every step of a tile, K and V alike, prefetches into L2 its share of the next tile's K and V rows
 * together (of the item's kv heads, or of the step's own head on a head-major page), in 32-key steps: bf16 b8 × 4k
 * 15.7–16.4 → 11.2–13.0 ms token-major, 14.4–16.1 → 12.3–14.0 head-major. */
static void attn_fx_partition_tokens(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                                     int64_t n, int64_t lo_all, int64_t hi_all) {
    attn_fx_slot *sl = attn_fx_slots(sc);
    const attn_seq_view *seq = &sl[0].blk.seq;
    const int64_t es = (int64_t)attn_dtype_size(p->kv_dtype);
    const int64_t g0 = sl[0].blk.kv_head, g1 = sl[n - 1].blk.kv_head;
    const int64_t vspan = attn_fwd_token_span(g1 - g0, seq->v_head_stride, p->head_size_v * es, seq->v_row_stride);
    /* K stored by dimension has no token rows to prefetch; the hardware streams its columns (a cache block's keys of a
     * kv head lie back to back): prefetching them by columns, into L1 and L2 as rows are, made a bf16 b8 × 4k decode
     * 1.3–1.4× slower (bench_decode --layout kcols, blocks of 16 and 32, Zen 4), into L1 only ~1.0–1.05×. Its steps
     * are 32 keys (two 16-key runs per qk_cols_kv call: 2R chains in flight) */
    const int kcols = seq->k_dim_stride != 0;
    const int64_t kspan =
        kcols ? vspan : attn_fwd_token_span(g1 - g0, seq->k_head_stride, p->head_size * es, seq->k_row_stride);
    const int prefetch = hi_all - lo_all > ATTN_FX_PREFETCH_MIN_KEYS;
    const int by_rows =
        prefetch && !kcols && attn_fx_head_major(seq, g1 - g0) && kern->qk_tile_kv_pf && kern->pv_rows_kv_pf;
    int kv_phase = 0;
    const int64_t kvspan = prefetch ? attn_fx_kv_span(p, seq, by_rows ? 0 : g1 - g0, &kv_phase) : 0;
    const int64_t row_bytes = (p->head_size > p->head_size_v ? p->head_size : p->head_size_v) * es;
    const int64_t span = kvspan ? (g1 - g0 + 1) * row_bytes : kspan > vspan ? kspan : vspan;
    const int ranges =
        kvspan || kcols || ATTN_FX_CHUNK_MAX * span <= ATTN_FX_CHUNK_BYTES; /* 32-key steps (attn_fx_prefetch_tokens) */
    const int64_t ch = ranges ? ATTN_FX_CHUNK_MAX : ATTN_FX_CHUNK_MIN;
    const int near = prefetch && !by_rows && !kvspan && 2 * ch * span <= ATTN_FX_L1_BYTES,
              prefetch_far = prefetch && !by_rows && !kvspan && (es > 1 || !near);
    const int64_t far = near ? ATTN_FX_PREFETCH_FAR : ATTN_FX_PREFETCH_FAR_L2;
    for (int64_t t0 = (lo_all / ATTN_KV_TILE) * ATTN_KV_TILE; t0 < hi_all; t0 += ATTN_KV_TILE) {
        const int64_t ta = t0 > lo_all ? t0 : lo_all, tb = t0 + ATTN_KV_TILE < hi_all ? t0 + ATTN_KV_TILE : hi_all;
        /* the next tile, whose K and V rows the steps of this one prefetch together (kvspan) */
        const int64_t na = tb, nb = na + ATTN_KV_TILE < hi_all ? na + ATTN_KV_TILE : hi_all;
        const int64_t nchunks = (tb - 1) / ch - ta / ch + 1;
        for (int64_t k = 0; k < n; k++) { /* the block's tile [sa, sb) */
            attn_fx_slot *s = &sl[k];
            const int64_t sa = t0 > s->lo ? t0 : s->lo, sb = t0 + ATTN_KV_TILE < s->hi ? t0 + ATTN_KV_TILE : s->hi;
            int64_t va, vb;
            s->hidden = s->active && sa < sb && !attn_mask_tile_span(p, &s->blk, sa, sb, &va, &vb);
        }
        for (int phase = 0; phase < 2; phase++) { /* 0: K and Q·Kᵀ, then the softmax; 1: V and P·V */
            for (int64_t ci = 0; ci < nchunks; ci++) {
                const int64_t c0 = ci == 0 ? ta : (ta / ch + ci) * ch;
                const int64_t c1 = (ta / ch + ci + 1) * ch < tb ? (ta / ch + ci + 1) * ch : tb;
                /* the chunks ATTN_FX_PREFETCH_AHEAD (into L1) and `far` steps ahead of this one */
                int pf_phase, pf2_phase;
                int64_t pa, pb, pa2, pb2;
                attn_fx_chunk_ahead(ch, ATTN_FX_PREFETCH_AHEAD, phase, ci, ta, tb, hi_all, &pf_phase, &pa, &pb);
                attn_fx_chunk_ahead(ch, far, phase, ci, ta, tb, hi_all, &pf2_phase, &pa2, &pb2);
                /* rows of kv head g0 for the chunk's tokens; head g is (g − g0) head strides further */
                const char *base[ATTN_FX_CHUNK_MAX];
                attn_fx_token_rows(seq, phase, g0, c0, c1, base);
                const int64_t head_stride = phase == 0 ? seq->k_head_stride : seq->v_head_stride;
                /* the kernels of this phase issue the step's prefetches between their steps where they can */
                const int in_kernel = phase == 0 ? kern->qk_tile_kv_pf != NULL : kern->pv_rows_kv_pf != NULL;
                int64_t done = 0, done2 = 0, done3 = 0;
                /* K and V rows together (kvspan): the next tile's tokens, a share per step of this tile */
                const int64_t steps = 2 * nchunks, q = phase * nchunks + ci;
                const int64_t xa = kvspan && na < nb ? na + (nb - na) * q / steps : 0;
                const int64_t xn = kvspan && na < nb ? na + (nb - na) * (q + 1) / steps - xa : 0;
                for (int64_t i = 0, j; i < n; i = j) { /* blocks [i, j) share kv head g */
                    const int64_t g = sl[i].blk.kv_head;
                    int64_t ka_all = INT64_MAX, kb_all = 0;
                    for (j = i; j < n && sl[j].blk.kv_head == g; j++) {
                        const attn_fx_slot *s = &sl[j];
                        if (!s->active || s->hidden)
                            continue;
                        const int64_t a = c0 > s->lo ? c0 : s->lo, b = c1 < s->hi ? c1 : s->hi;
                        if (a < b && a < ka_all) ka_all = a;
                        if (a < b && b > kb_all) kb_all = b;
                    }
                    /* this step's share of the prefetches: tokens [pa + done, pa + upto), [pa2 + done2, ...) */
                    const int64_t upto = near ? (pb - pa) * j / n : 0;
                    attn_kv_prefetch pf = {0};
                    if (!(kcols && pf_phase == 0)) /* K by dimension: none (see kcols above) */
                        attn_fx_prefetch_share(seq, pf_phase, g0, pf_phase == 0 ? kspan : vspan, pa + done, pa + upto,
                                               1, ranges, in_kernel, &pf.l1, &pf.l1_lines);
                    done = upto;
                    const int64_t upto2 = prefetch_far ? (pb2 - pa2) * j / n : 0;
                    if (!(kcols && pf2_phase == 0))
                        attn_fx_prefetch_share(seq, pf2_phase, g0, pf2_phase == 0 ? kspan : vspan, pa2 + done2,
                                               pa2 + upto2, 0, ranges, in_kernel, &pf.l2, &pf.l2_lines);
                    done2 = upto2;
                    const int64_t upto3 = by_rows ? xn : xn * j / n;
                    if (kvspan)
                        attn_fx_prefetch_share(seq, kv_phase, by_rows ? g : g0, kvspan, xa + (by_rows ? 0 : done3),
                                               xa + upto3, 0, ranges, in_kernel, &pf.l2, &pf.l2_lines);
                    done3 = upto3;
                    if (by_rows && !kvspan && j < n) /* the next kv head's rows of this chunk */
                        attn_fx_prefetch_head(p, seq, phase, sl[j].blk.kv_head, c0, c1, &pf);
                    else if (by_rows && !kvspan && pa < pb) /* the first kv head's rows of the next chunk (K or V) */
                        attn_fx_prefetch_head(p, seq, pf_phase, sl[0].blk.kv_head, pa, pb, &pf);
                    if (ka_all >= kb_all) {
                        attn_fx_prefetch_rest(&pf);
                        continue;
                    }
                    const void **raw = phase == 0 ? sc->k_raw : sc->v_raw;
                    for (int64_t t = ka_all; t < kb_all; t++) raw[t - ka_all] = base[t - c0] + (g - g0) * head_stride;
                    if (attn_fx_widens(p, kern) && !(kcols && phase == 0)) /* <= ATTN_FX_CHUNK_MAX rows, widened */
                        attn_fx_widen_fp8(p, kern, raw, kb_all - ka_all, phase == 0 ? p->head_size : p->head_size_v,
                                          phase == 0 ? sc->k_tile : sc->v_tile);
                    for (int64_t k = i; k < j; k++) {
                        const attn_fx_slot *s = &sl[k];
                        if (!s->active || s->hidden)
                            continue;
                        const int64_t sa = t0 > s->lo ? t0 : s->lo; /* the block's tile starts at key sa */
                        const int64_t a = c0 > s->lo ? c0 : s->lo, b = c1 < s->hi ? c1 : s->hi;
                        if (a >= b) continue;
                        const attn_fx_state st = attn_fx_state_of(p, sc, k);
                        if (phase == 0 && kcols)
                            attn_fx_qk_cols(p, kern, sc, st.q_t, s->blk.num_rows, seq, g, a, b,
                                            st.s + (a - sa) * ATTN_QB);
                        else if (phase == 0 && in_kernel)
                            kern->qk_tile_kv_pf(st.q_t, s->blk.num_rows, p->head_size, sc->k_raw + (a - ka_all),
                                                attn_fx_raw_dtype(p, kern), b - a, st.s + (a - sa) * ATTN_QB, &pf);
                        else if (phase == 0)
                            kern->qk_tile_kv(st.q_t, s->blk.num_rows, p->head_size, sc->k_raw + (a - ka_all),
                                             attn_fx_raw_dtype(p, kern), b - a, st.s + (a - sa) * ATTN_QB);
                        else if (!s->safe_pv)
                            attn_fx_pv_rows(kern, a, st.s + (a - sa) * ATTN_QB, b - a, s->blk.num_rows,
                                            sc->v_raw + (a - ka_all), attn_fx_raw_dtype(p, kern), p->head_size_v,
                                            st.o_d, in_kernel ? &pf : NULL);
                    }
                    attn_fx_prefetch_rest(&pf);
                }
            }
            if (phase == 1) break;
            for (int64_t k = 0; k < n; k++) { /* the softmax of each block's tile [sa, sb) */
                attn_fx_slot *s = &sl[k];
                s->safe_pv = 0;
                if (!s->active || s->hidden)
                    continue;
                const int64_t sa = t0 > s->lo ? t0 : s->lo, sb = t0 + ATTN_KV_TILE < s->hi ? t0 + ATTN_KV_TILE : s->hi;
                if (sa >= sb) continue;
                const attn_fx_state st = attn_fx_state_of(p, sc, k);
                attn_fx_softmax_raw(p, kern, &s->blk, &st, st.s, sa, sb);
                if (attn_mask_tile_is_full(p, &s->blk, sa, sb)) continue; /* (skips the V row lookups) */
                /* a tile that hides keys from some row: P·V of the whole tile here if a V row is not finite */
                for (int64_t t = sa; t < sb; t++) sc->v_raw[t - sa] = attn_seq_v_row(seq, t, s->blk.kv_head);
                if (attn_fx_widens(p, kern)) attn_fx_widen_fp8(p, kern, sc->v_raw, sb - sa, p->head_size_v, sc->v_tile);
                if (!attn_fx_needs_safe_pv(p, &s->blk, sc->v_raw, attn_fx_raw_dtype(p, kern), sa, sb))
                    continue;
                s->safe_pv = 1;
                attn_fx_pv_raw_safe(p, kern, &s->blk, sc, &st, st.s, sc->v_raw, attn_fx_raw_dtype(p, kern), sa, sb);
            }
        }
    }
}

/* o_part[d][r] = o_d[r][c(d)]: the partition state in the layout every other step uses, by the table's
 * transpose (a copy): a bf16 block of 32 columns holds the even dimensions in its first 16 columns and the odd
 * ones in the next 16 (attn_rows_kv_col), which land on every second row of o_part. */
static void attn_fx_raw_store(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                              const attn_fx_state *st) {
    const int64_t dv = p->head_size_v, nr = blk->num_rows;
    int64_t d0 = 0;
    if (p->kv_dtype == ATTN_DTYPE_BF16)
        for (; d0 + 32 <= dv; d0 += 32) {
            kern->transpose(st->o_d + d0, dv, nr, 16, st->o_part + d0 * ATTN_QB, 2 * ATTN_QB);
            kern->transpose(st->o_d + d0 + 16, dv, nr, 16, st->o_part + (d0 + 1) * ATTN_QB, 2 * ATTN_QB);
        }
    if (d0 < dv)
        kern->transpose(st->o_d + d0, dv, nr, dv - d0, st->o_part + d0 * ATTN_QB, ATTN_QB);
}

/* ---------------------------------------------------------------------------------------------
 * Multi-block item steps
 * --------------------------------------------------------------------------------------------- */
void attn_fwd_multi_begin(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc, int64_t n) {
    attn_fx_slot *sl = attn_fx_slots(sc);
    for (int64_t i = 0; i < n; i++) {
        const attn_fx_state st = attn_fx_state_of(p, sc, i);
        attn_fwd_scratch tmp = *sc;
        tmp.q_t = st.q_t;
        attn_fwd_pack_q(p, kern, &sl[i].blk, &tmp);
        if (kern->qk_prep_kv && attn_fx_raw(p, &sl[i].blk)) /* an opt-in table's q form (kernels.h); K stored by
                                                            dimension reaches its Q·Kᵀ as float rows */
            kern->qk_prep_kv(st.q_t, sl[i].blk.num_rows, p->head_size,
                             sl[i].blk.seq.k_dim_stride ? ATTN_DTYPE_F32 : attn_fx_raw_dtype(p, kern));
        /* empty folded state; its o is written by the first fold (a copy: bitwise what folding into zeros
         * gives, 0·0 + 1·o = o) and never read while l = 0, so it is not cleared here */
        attn_fwd_ml_reset(st.m_acc, st.l_acc);
        sl[i].acc_empty = 1;
        sl[i].acc_is_part = 0;
        attn_fwd_partitions(&sl[i].blk, &sl[i].first, &sl[i].last);
    }
}

void attn_fwd_multi_partitions(const attn_problem *p, attn_fwd_scratch *sc, int64_t n, int64_t *first,
                               int64_t *last) {
    (void)p;
    const attn_fx_slot *sl = attn_fx_slots(sc);
    *first = INT64_MAX, *last = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sl[i].first >= sl[i].last) continue;
        if (sl[i].first < *first) *first = sl[i].first;
        if (sl[i].last > *last) *last = sl[i].last;
    }
    if (*first >= *last) *first = *last = 0;
}

void attn_fwd_multi_partition(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                              int64_t n, int64_t part, int fold) {
    attn_fx_slot *sl = attn_fx_slots(sc);
    int64_t lo_all = INT64_MAX, hi_all = 0;
    for (int64_t i = 0; i < n; i++) { /* as attn_fwd_partition: fresh state, keys clipped to the block */
        attn_fx_slot *s = &sl[i];
        s->active = part >= s->first && part < s->last;
        if (!s->active) continue;
        const attn_fx_state st = attn_fx_state_of(p, sc, i);
        if (attn_fx_raw(p, &s->blk)) { /* o_part is written whole (rows < num_rows) by attn_fx_raw_store */
            attn_fwd_ml_reset(st.m_part, st.l_part);
            memset(st.o_d, 0, (size_t)(s->blk.num_rows * p->head_size_v) * sizeof(float));
        } else {
            attn_fwd_state_reset(p->head_size_v, st.m_part, st.l_part, st.o_part);
        }
        s->lo = part * ATTN_KV_PARTITION, s->hi = s->lo + ATTN_KV_PARTITION;
        if (s->lo < s->blk.key_lo) s->lo = s->blk.key_lo;
        if (s->hi > s->blk.key_hi) s->hi = s->blk.key_hi;
        if (s->lo >= s->hi) continue;
        if (s->lo < lo_all) lo_all = s->lo;
        if (s->hi > hi_all) hi_all = s->hi;
    }
    int all_raw = 1;
    for (int64_t i = 0; i < n; i++)
        if (sl[i].active && !attn_fx_raw(p, &sl[i].blk)) all_raw = 0;
    if (all_raw && lo_all < hi_all) {
        attn_fx_partition_tokens(p, kern, sc, n, lo_all, hi_all);
        goto store;
    }
    /* kv heads of the item: with several heads whose rows are contiguous per token, the next tile of all
     * of them is prefetched in memory order, one slice of its tokens per head step (spread) */
    int64_t num_groups = 0, item_key_hi = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || sl[i].blk.kv_head != sl[i - 1].blk.kv_head) num_groups++;
        if (sl[i].blk.key_hi > item_key_hi) item_key_hi = sl[i].blk.key_hi;
    }
    const int64_t es = (int64_t)attn_dtype_size(p->kv_dtype);
    const int spread = num_groups > 1 && sl[0].blk.seq.k_head_stride == p->head_size * es &&
                       sl[0].blk.seq.v_head_stride == p->head_size_v * es;
    for (int64_t t0 = lo_all < hi_all ? (lo_all / ATTN_KV_TILE) * ATTN_KV_TILE : hi_all; t0 < hi_all;
         t0 += ATTN_KV_TILE) {
        int64_t group_idx = 0;
        for (int64_t i = 0, j; i < n; i = j, group_idx++) { /* the blocks [i, j) of one kv head share the tile */
            const int64_t g = sl[i].blk.kv_head;
            int64_t ta = INT64_MAX, tb = 0, key_hi = 0;
            for (j = i; j < n && sl[j].blk.kv_head == g; j++) {
                const attn_fx_slot *s = &sl[j];
                if (s->blk.key_hi > key_hi) key_hi = s->blk.key_hi;
                sl[j].hidden = 1;
                if (!s->active || s->lo >= s->hi) continue;
                int64_t a = t0 > s->lo ? t0 : s->lo;
                int64_t b = t0 + ATTN_KV_TILE < s->hi ? t0 + ATTN_KV_TILE : s->hi;
                if (a >= b || !attn_mask_tile_span(p, &s->blk, a, b, &a, &b))
                    continue;
                sl[j].hidden = 0, sl[j].ta = a, sl[j].tb = b;
                if (a < ta) ta = a;
                if (b > tb) tb = b;
            }
            /* prefetch what is consumed next: this tile of the next kv head, or after the last head the
             * next tile of the first (one head-tile ahead, spread over the item's work; measured better
             * than one tile of every head ahead, which bursts Hkv times more lines at once) */
            const attn_seq_view *seq = &sl[i].blk.seq;
            if (spread) {
                const int64_t slice = (ATTN_KV_TILE + num_groups - 1) / num_groups;
                int64_t a = t0 + ATTN_KV_TILE + group_idx * slice, b = a + slice;
                if (b > t0 + 2 * ATTN_KV_TILE) b = t0 + 2 * ATTN_KV_TILE;
                if (b > item_key_hi) b = item_key_hi;
                attn_fx_prefetch_rows(p, seq, sl[0].blk.kv_head, sl[n - 1].blk.kv_head, a, b);
            } else if (j < n) {
                const int64_t e = t0 + ATTN_KV_TILE < sl[j].blk.key_hi ? t0 + ATTN_KV_TILE : sl[j].blk.key_hi;
                attn_fwd_prefetch(p, seq, sl[j].blk.kv_head, t0, e);
            } else {
                const int64_t hi0 = i == 0 ? key_hi : sl[0].blk.key_hi;
                const int64_t e = t0 + 2 * ATTN_KV_TILE < hi0 ? t0 + 2 * ATTN_KV_TILE : hi0;
                attn_fwd_prefetch(p, seq, sl[0].blk.kv_head, t0 + ATTN_KV_TILE, e);
            }
            if (ta >= tb) continue;
            /* few-row blocks (decode) read K/V rows in place in their storage dtype (no conversion pass);
             * the others get float rows (in place or converted once for all of them) */
            int any_raw = 0, any_float = 0;
            for (int64_t k = i; k < j; k++) {
                if (sl[k].hidden)
                    continue;
                if (attn_fx_raw(p, &sl[k].blk)) any_raw = 1;
                else any_float = 1;
            }
            const int widen = attn_fx_widens(p, kern); /* few-row blocks read the widened float rows */
            /* K stored by dimension: few-row blocks read the float K rows gathered for the tile (and V in place) */
            const int kcols = seq->k_dim_stride != 0;
            sc->v_rows_finite = 0; /* checked once for the float blocks whose tile hides keys (attn_fwd_tile) */
            int v_checked = 0;
            /* an opt-in table's own form of the tile, made once for the float blocks on it (kernels.h): straight from
             * bf16 rows, which then are not widened at all when every V row is finite (only the safe P·V, for a
             * non-finite V, reads the float rows); else from the float rows below */
            sc->kv_prepped = 0, sc->kv_prep_key0 = ta;
            int rows_needed = any_float || (any_raw && (widen || kcols));
            const int prep_raw =
                any_float && !any_raw && kern->kv_tile_prep && p->kv_dtype == ATTN_DTYPE_BF16 && !kcols;
            if ((any_raw && !widen) || prep_raw)
                for (int64_t t = ta; t < tb; t++) {
                    sc->k_raw[t - ta] = attn_seq_k_row(seq, t, g);
                    sc->v_raw[t - ta] = attn_seq_v_row(seq, t, g);
                }
            if (prep_raw) {
                sc->kv_prepped = kern->kv_tile_prep(sc->k_raw, sc->v_raw, ATTN_DTYPE_BF16, tb - ta, p->head_size,
                                                    p->head_size_v, sc->kv_prep);
                if (sc->kv_prepped && !attn_fwd_rows_nonfinite(sc->v_raw, ATTN_DTYPE_BF16, tb - ta, p->head_size_v))
                    sc->v_rows_finite = 1, v_checked = 1, rows_needed = 0;
            }
            if (rows_needed) {
                attn_fwd_rows(kern, seq, p->kv_dtype, 0, g, ta, tb, p->head_size, sc->k_tile, sc->k_rows);
                attn_fwd_rows(kern, seq, p->kv_dtype, 1, g, ta, tb, p->head_size_v, sc->v_tile, sc->v_rows);
            }
            if (any_raw && (widen || kcols))
                for (int64_t t = ta; t < tb; t++) {
                    sc->k_raw[t - ta] = sc->k_rows[t - ta];
                    if (widen)
                        sc->v_raw[t - ta] = sc->v_rows[t - ta];
                }
            if (any_float && !sc->kv_prepped && kern->kv_tile_prep)
                sc->kv_prepped = kern->kv_tile_prep((const void *const *)sc->k_rows, (const void *const *)sc->v_rows,
                                                    ATTN_DTYPE_F32, tb - ta, p->head_size, p->head_size_v, sc->kv_prep);
            for (int64_t k = i; k < j; k++) {
                const attn_fx_slot *s = &sl[k];
                if (s->hidden)
                    continue;
                const int64_t a = s->ta, b = s->tb;
                const attn_fx_state st = attn_fx_state_of(p, sc, k);
                if (!v_checked && !attn_fx_raw(p, &s->blk) && !attn_mask_tile_is_full(p, &s->blk, a, b)) {
                    sc->v_rows_finite = !attn_fwd_rows_nonfinite((const void *const *)sc->v_rows, ATTN_DTYPE_F32,
                                                                 tb - ta, p->head_size_v);
                    v_checked = 1;
                }
                if (attn_fx_raw(p, &s->blk))
                    attn_fx_tile_raw(p, kern, &s->blk, sc, &st, sc->s, sc->k_raw + (a - ta),
                                     widen || kcols ? ATTN_DTYPE_F32 : p->kv_dtype, sc->v_raw + (a - ta),
                                     widen ? ATTN_DTYPE_F32 : p->kv_dtype, a, b);
                else
                    attn_fwd_tile(p, kern, &s->blk, sc, st.q_t, sc->s, sc->k_rows + (a - ta), sc->v_rows + (a - ta),
                                  a, b, st.m_part, st.l_part, st.o_part);
            }
            sc->v_rows_finite = 0, sc->kv_prepped = 0;
        }
    }
store:
    for (int64_t i = 0; i < n; i++)
        if (sl[i].active && attn_fx_raw(p, &sl[i].blk)) {
            const attn_fx_state st = attn_fx_state_of(p, sc, i);
            attn_fx_raw_store(p, kern, &sl[i].blk, &st);
        }
    if (!fold) return;
    for (int64_t i = 0; i < n; i++) {
        if (!sl[i].active) continue;
        const attn_fx_state st = attn_fx_state_of(p, sc, i);
        if (sl[i].acc_empty && part == sl[i].last - 1) { /* one partition: finalize reads it where it is */
            sl[i].acc_is_part = 1;
            sl[i].acc_empty = 0;
            continue;
        }
        if (sl[i].acc_empty) {
            const int64_t nr = sl[i].blk.num_rows;
            memcpy(st.m_acc, st.m_part, (size_t)nr * sizeof(float));
            memcpy(st.l_acc, st.l_part, (size_t)nr * sizeof(float));
            for (int64_t d = 0; d < p->head_size_v; d++)
                memcpy(st.o_acc + d * ATTN_QB, st.o_part + d * ATTN_QB, (size_t)nr * sizeof(float));
            sl[i].acc_empty = 0;
            continue;
        }
        attn_fwd_fold(sl[i].blk.num_rows, p->head_size_v, st.m_acc, st.l_acc, st.o_acc, st.m_part, st.l_part,
                      st.o_part);
    }
}

void attn_fwd_multi_finalize(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                             int64_t n) {
    attn_fx_slot *sl = attn_fx_slots(sc);
    for (int64_t i = 0; i < n; i++) {
        const attn_fx_state st = attn_fx_state_of(p, sc, i);
        if (sl[i].acc_is_part) attn_fwd_finalize(p, kern, &sl[i].blk, sc, st.m_part, st.l_part, st.o_part);
        else attn_fwd_finalize(p, kern, &sl[i].blk, sc, st.m_acc, st.l_acc, st.o_acc);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Whole-problem execution
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_fx_job {
    const attn_problem *p;
    const attn_exec *ex;
    attn_fwd_shape sh;
    int64_t max_blocks;     /* token blocks of the longest sequence                      */
    int decode;             /* 1: items = (sequence, kv-head group); 0: super-blocks       */
    int64_t heads_per_item; /* decode: kv heads per item                                  */
    int64_t items_per_seq;  /* decode: kv-head groups; prefill: kv heads × super-blocks   */
    int64_t supers;         /* prefill: super-blocks per kv head                          */
    int64_t super_size;     /* prefill: query blocks per super-block                      */
} attn_fx_job;

/* The blocks of decode unit `unit` (sequence, kv-head group) into sc; returns their count. */
static int64_t attn_fx_unit_blocks(const attn_fx_job *job, int64_t unit, attn_fwd_scratch *sc) {
    const attn_problem *p = job->p;
    const attn_fwd_shape *sh = &job->sh;
    attn_seq_view seq;
    p->get_seq(p, unit / job->items_per_seq, &seq);
    const int64_t num_tb = (seq.seq_q + sh->tokens_per_block - 1) / sh->tokens_per_block;
    const int64_t g0 = unit % job->items_per_seq * job->heads_per_item;
    const int64_t g1 = g0 + job->heads_per_item < p->num_kv_heads ? g0 + job->heads_per_item : p->num_kv_heads;
    int64_t n = 0;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t c = 0; c < sh->head_chunks; c++)
            for (int64_t tb = 0; tb < num_tb; tb++)
                attn_fwd_block_init(p, sh, &seq, g, c, tb, attn_fwd_multi_block(p, sc, n++));
    return n;
}

static void attn_fx_item(void *arg, int64_t item, int32_t tid) {
    const attn_fx_job *job = (const attn_fx_job *)arg;
    const attn_problem *p = job->p;
    const attn_fwd_shape *sh = &job->sh;
    attn_fwd_scratch sc;
    attn_fwd_scratch_carve(job->ex->scratch + (size_t)tid * attn_fwd_scratch_bytes(), &sc);
    int64_t n = 0;
    if (job->decode) { /* all token blocks of heads [g0, g1), kv head outer */
        n = attn_fx_unit_blocks(job, item, &sc);
    } else { /* entries e = tb·head_chunks + c of kv head g, super-block sb = e / super_size */
        const int64_t rem = item % job->items_per_seq;
        attn_seq_view seq;
        p->get_seq(p, item / job->items_per_seq, &seq);
        const int64_t num_tb = (seq.seq_q + sh->tokens_per_block - 1) / sh->tokens_per_block;
        const int64_t g = rem / job->supers;
        const int64_t sb = job->supers - 1 - rem % job->supers; /* long causal blocks first */
        for (int64_t e = sb * job->super_size; e < (sb + 1) * job->super_size; e++) {
            const int64_t tb = e / sh->head_chunks, c = e % sh->head_chunks;
            if (tb >= num_tb) break;
            attn_fwd_block_init(p, sh, &seq, g, c, tb, attn_fwd_multi_block(p, &sc, n++));
        }
    }
    if (n == 0) return;
    const struct attn_kernels *kern = job->ex->kern;
    attn_fwd_multi_begin(p, kern, &sc, n);
    int64_t first, last;
    attn_fwd_multi_partitions(p, &sc, n, &first, &last);
    for (int64_t part = first; part < last; part++) attn_fwd_multi_partition(p, kern, &sc, n, part, 1);
    attn_fwd_multi_finalize(p, kern, &sc, n);
}

/* Split-KV lanes of a decode-shaped call with fewer items than threads (a lone request, MQA, few kv heads): each
 * of the U items (units: a sequence's kv-head group) gets C = threads / U lanes, and one parallel pass (a round)
 * hands lane (u, c) a contiguous run of S partitions of unit u. A lane works in the multi area of its own scratch
 * slice (lane index = slice index, whichever thread runs it) and keeps each partition's state in the slots past
 * its blocks (S: as many as fit). After the round the calling thread folds the states into the unit's folded
 * state (lane 0's slots) in ascending partition order, the fold of attn_fwd_multi_partition; more rounds follow
 * only for keys beyond what the lanes' slots hold. Every partition is computed fresh by the same calls as in the
 * one-item schedule, so the bits do not change; a round is one fork of the threads. */
typedef struct attn_fx_lanes {
    const attn_fx_job *job;
    int64_t lanes;    /* C: lanes per unit                                            */
    int64_t per_lane; /* S: partitions per lane and round                             */
    int64_t round;    /* partitions [first + round·C·S, ...) of every unit; 0 also sets up */
} attn_fx_lanes;

/* Lane `lane`'s scratch: the running thread's slice, with the multi area of slice `lane`. */
static void attn_fx_lane_scratch(const attn_exec *ex, int64_t lane, int32_t tid, attn_fwd_scratch *sc) {
    attn_fwd_scratch own;
    attn_fwd_scratch_carve(ex->scratch + (size_t)lane * attn_fwd_scratch_bytes(), &own);
    attn_fwd_scratch_carve(ex->scratch + (size_t)tid * attn_fwd_scratch_bytes(), sc);
    sc->multi = own.multi;
}

/* Floats of one block's stored partition state: m, l [ATTN_QB], o [Dv][ATTN_QB]. */
static int64_t attn_fx_kept_floats(const attn_problem *p) {
    return ATTN_QB * (2 + p->head_size_v);
}

/* Stored state j of block i in a lane of n blocks: past the lane's n slots. */
static float *attn_fx_kept(const attn_problem *p, attn_fwd_scratch *sc, int64_t n, int64_t j, int64_t i) {
    return attn_fx_floats(p, sc, n) + (j * n + i) * attn_fx_kept_floats(p);
}

/* Partitions per lane and round for units of up to n blocks (0: none fit). */
static int64_t attn_fx_lane_capacity(const attn_problem *p, int64_t n) {
    const int64_t spare = (attn_fwd_multi_capacity(p) - n) * attn_fx_slot_floats(p);
    return n > 0 && spare > 0 ? spare / (n * attn_fx_kept_floats(p)) : 0;
}

/* Partitions [*a, *b) of lane c of a unit with partition range [first, last) in round r. */
static void attn_fx_lane_range(const attn_fx_lanes *w, int64_t first, int64_t last, int64_t c, int64_t *a, int64_t *b) {
    *a = first + (w->round * w->lanes + c) * w->per_lane;
    *b = *a + w->per_lane < last ? *a + w->per_lane : last;
}

static void attn_fx_lane_item(void *arg, int64_t lane, int32_t tid) {
    const attn_fx_lanes *w = (const attn_fx_lanes *)arg;
    const attn_fx_job *job = w->job;
    const attn_problem *p = job->p;
    attn_fwd_scratch sc;
    attn_fx_lane_scratch(job->ex, lane, tid, &sc);
    const int64_t n = attn_fx_unit_blocks(job, lane / w->lanes, &sc);
    if (n == 0)
        return;
    if (w->round == 0)
        attn_fwd_multi_begin(p, job->ex->kern, &sc, n);
    int64_t first, last, a, b;
    attn_fwd_multi_partitions(p, &sc, n, &first, &last);
    attn_fx_lane_range(w, first, last, lane % w->lanes, &a, &b);
    const attn_fx_slot *sl = attn_fx_slots(&sc);
    for (int64_t part = a; part < b; part++) {
        attn_fwd_multi_partition(p, job->ex->kern, &sc, n, part, 0);
        for (int64_t i = 0; i < n; i++) {
            if (!sl[i].active)
                continue;
            const attn_fx_state st = attn_fx_state_of(p, &sc, i);
            float *k = attn_fx_kept(p, &sc, n, part - a, i);
            const int64_t nr = sl[i].blk.num_rows;
            memcpy(k, st.m_part, (size_t)nr * sizeof(float));
            memcpy(k + ATTN_QB, st.l_part, (size_t)nr * sizeof(float));
            for (int64_t d = 0; d < p->head_size_v; d++)
                memcpy(k + (2 + d) * ATTN_QB, st.o_part + d * ATTN_QB, (size_t)nr * sizeof(float));
        }
    }
}

/* Folds stored state j of lane `src` (partition `part`) into the folded states of lane `home`. */
static void attn_fx_fold_kept(const attn_problem *p, attn_fwd_scratch *home, attn_fwd_scratch *src, int64_t n,
                              int64_t j, int64_t part) {
    attn_fx_slot *hs = attn_fx_slots(home);
    for (int64_t i = 0; i < n; i++) {
        if (part < hs[i].first || part >= hs[i].last)
            continue; /* as attn_fwd_multi_partition's `active` */
        const attn_fx_state h = attn_fx_state_of(p, home, i);
        const float *k = attn_fx_kept(p, src, n, j, i);
        const int64_t nr = hs[i].blk.num_rows;
        if (hs[i].acc_empty) { /* as attn_fwd_multi_partition's first fold: a copy */
            memcpy(h.m_acc, k, (size_t)nr * sizeof(float));
            memcpy(h.l_acc, k + ATTN_QB, (size_t)nr * sizeof(float));
            for (int64_t d = 0; d < p->head_size_v; d++)
                memcpy(h.o_acc + d * ATTN_QB, k + (2 + d) * ATTN_QB, (size_t)nr * sizeof(float));
            hs[i].acc_empty = 0;
            continue;
        }
        attn_fwd_fold(nr, p->head_size_v, h.m_acc, h.l_acc, h.o_acc, k, k + ATTN_QB, k + 2 * ATTN_QB);
    }
}

/* Unit u's home (lane 0 of its C lanes, whose slots hold the unit's folded states) as seen from the calling
 * thread: its blocks (returned count, with their partition ranges, as attn_fwd_multi_begin sets them) and the
 * unit's range [*first, *last). */
static int64_t attn_fx_home(const attn_fx_job *job, int64_t u, int64_t lanes, attn_fwd_scratch *home, int64_t *first,
                            int64_t *last) {
    attn_fx_lane_scratch(job->ex, u * lanes, 0, home);
    const int64_t n = attn_fx_unit_blocks(job, u, home);
    attn_fx_slot *sl = attn_fx_slots(home);
    for (int64_t i = 0; i < n; i++)
        attn_fwd_partitions(&sl[i].blk, &sl[i].first, &sl[i].last);
    attn_fwd_multi_partitions(job->p, home, n, first, last);
    return n;
}

/* Runs the decode units with C lanes each (0 when the lanes' slots hold no partition, or no unit has one: the
 * caller runs the one-item schedule). */
static int attn_fx_run_lanes(const attn_fx_job *job, int64_t units, int64_t lanes) {
    const attn_exec *ex = job->ex;
    const attn_problem *p = job->p;
    int64_t max_n = 0, max_parts = 0;
    for (int64_t u = 0; u < units; u++) { /* block counts and partition ranges */
        attn_fwd_scratch home;
        int64_t first, last;
        const int64_t n = attn_fx_home(job, u, lanes, &home, &first, &last);
        if (n > max_n)
            max_n = n;
        if (last - first > max_parts)
            max_parts = last - first;
    }
    const int64_t cap = attn_fx_lane_capacity(p, max_n);
    if (cap < 1 || max_parts < 1) /* (no partition anywhere: no round would set the states up) */
        return 0;
    /* as few rounds as the slots allow, their partitions spread evenly over the lanes (filling the first rounds
     * left the last one to a few lanes: b1 × 16k keys on two threads ran 1.5× one thread, not 2×) */
    const int64_t rounds = (max_parts + lanes * cap - 1) / (lanes * cap);
    attn_fx_lanes w = {job, lanes, (max_parts + lanes * rounds - 1) / (lanes * rounds), 0};
    for (; w.round * lanes * w.per_lane < max_parts; w.round++) {
        attn_parallel_for(ex->num_threads, units * lanes, attn_fx_lane_item, &w);
        for (int64_t u = 0; u < units; u++) {
            attn_fwd_scratch home;
            int64_t first, last;
            const int64_t n = attn_fx_home(job, u, lanes, &home, &first, &last);
            for (int64_t c = 0; c < lanes; c++) {
                attn_fwd_scratch src;
                attn_fx_lane_scratch(ex, u * lanes + c, 0, &src);
                int64_t a, b;
                attn_fx_lane_range(&w, first, last, c, &a, &b);
                for (int64_t part = a; part < b; part++)
                    attn_fx_fold_kept(p, &home, &src, n, part - a, part);
            }
        }
    }
    for (int64_t u = 0; u < units; u++) {
        attn_fwd_scratch home;
        int64_t first, last;
        const int64_t n = attn_fx_home(job, u, lanes, &home, &first, &last);
        if (n > 0)
            attn_fwd_multi_finalize(p, ex->kern, &home, n);
    }
    return 1;
}

/* The flop of problem p's sequences, or +inf when it has more than ATTN_FWD_SMALL_MAX_BLOCKS (not counted). */
static double attn_fx_flops(const attn_problem *p) {
    if (p->num_seqs > ATTN_FWD_SMALL_MAX_BLOCKS)
        return INFINITY;
    double flops = 0.0;
    for (int64_t i = 0; i < p->num_seqs; i++) {
        attn_seq_view seq;
        p->get_seq(p, i, &seq);
        flops += attn_fwd_flops(p, seq.seq_q * p->num_heads, seq.seq_k);
    }
    return flops;
}

/* The longest key range of the problem's sequences. */
static int64_t attn_fx_max_seq_k(const attn_problem *p) {
    int64_t k = 0;
    for (int64_t i = 0; i < p->num_seqs; i++) {
        attn_seq_view seq;
        p->get_seq(p, i, &seq);
        if (seq.seq_k > k)
            k = seq.seq_k;
    }
    return k;
}

int64_t attn_fwd_units_per_item(int64_t units, int64_t num_seqs, int64_t cap, int32_t num_threads) {
    int64_t u = cap < units ? cap : units;
    if (u < 1)
        u = 1;
    const int64_t items = (units + u - 1) / u;
    if (num_seqs * items < num_threads) {
        int64_t want = (num_threads + num_seqs - 1) / num_seqs; /* items per sequence */
        if (want > units)
            want = units;
        if (want > items)
            u = (units + want - 1) / want;
    }
    return u;
}

int64_t attn_fwd_super_size(int64_t cap, int32_t num_threads, int64_t (*items)(const void *arg, int64_t size),
                            const void *arg) {
    int64_t ss = cap < ATTN_FWD_SUPER ? cap : ATTN_FWD_SUPER;
    while (ss > ATTN_FWD_SUPER_MIN && items(arg, ss) < (int64_t)ATTN_FWD_ITEMS_PER_THREAD * num_threads)
        ss /= 2;
    return ss < ATTN_FWD_SUPER_MIN ? ATTN_FWD_SUPER_MIN : ss;
}

/* Super-block items of a dense/packed prefill for super-block size `ss`. */
static int64_t attn_fx_dense_items(const void *arg, int64_t ss) {
    const attn_fx_job *job = (const attn_fx_job *)arg;
    const int64_t blocks_per_head = job->sh.head_chunks * job->max_blocks;
    return job->p->num_seqs * job->p->num_kv_heads * ((blocks_per_head + ss - 1) / ss);
}

static void attn_fx_run(const attn_problem *p, const attn_exec *ex) {
    attn_fx_job job;
    memset(&job, 0, sizeof job);
    job.p = p;
    job.ex = ex;
    attn_fwd_shape_of(p, &job.sh);
    job.max_blocks = (p->max_seq_q + job.sh.tokens_per_block - 1) / job.sh.tokens_per_block;
    if (job.max_blocks == 0 || p->num_seqs == 0) return;
    const int64_t cap = attn_fwd_multi_capacity(p);
    const int64_t blocks_per_head = job.sh.head_chunks * job.max_blocks;
    if (p->max_seq_q <= ATTN_FWD_DECODE_Q && blocks_per_head <= cap) {
        /* as many kv heads per item as fit, but at least one item per thread (heads are independent:
         * the grouping never changes a bit) */
        int64_t hpi = attn_fwd_units_per_item(p->num_kv_heads, p->num_seqs, cap / blocks_per_head, ex->num_threads);
        /* unless items of as many kv heads as fit (evenly split) leave at least two split-KV lanes per item, the
         * lanes' slots hold a partition and the longest sequence has a partition per lane: such an item reads each
         * token's rows of all its kv heads as one span of the page (the prefetches of a span go through the kernels,
         * attn_fx_prefetch_share), where items of half the heads read every other part of it and burst their
         * prefetches. Intel Xeon, bench_decode b1 × 16k, 32/8 heads × 128 bf16, two threads: 1.49× → 1.9× one
         * thread. (Without room for a partition in the lanes' slots, attn_fx_run_lanes declines and the items would
         * run alone, fewer than the threads.) */
        const int64_t fit = cap / blocks_per_head < p->num_kv_heads ? cap / blocks_per_head : p->num_kv_heads;
        const int64_t groups = (p->num_kv_heads + fit - 1) / fit, whole = (p->num_kv_heads + groups - 1) / groups;
        if (hpi < whole) {
            const int64_t lanes_w = ex->num_threads / (p->num_seqs * groups);
            if (lanes_w >= 2 && attn_fx_lane_capacity(p, whole * blocks_per_head) >= 1 &&
                (attn_fx_max_seq_k(p) + ATTN_KV_PARTITION - 1) / ATTN_KV_PARTITION >= lanes_w)
                hpi = whole;
        }
        job.decode = 1;
        job.heads_per_item = hpi;
        job.items_per_seq = (p->num_kv_heads + hpi - 1) / hpi;
        const int64_t units = p->num_seqs * job.items_per_seq, lanes = ex->num_threads / units;
        if (lanes >= 2 && attn_fx_max_seq_k(p) > ATTN_KV_PARTITION && attn_fx_run_lanes(&job, units, lanes))
            return; /* too few items for the threads: split-KV lanes */
    } else {
        /* Every K/V tile an item reads is fetched (converted, or copied into a padded-stride tile) once for
         * all of its blocks, so larger super-blocks fetch each tile fewer times per call. */
        job.super_size = attn_fwd_super_size(cap, ex->num_threads, attn_fx_dense_items, &job);
        job.supers = (blocks_per_head + job.super_size - 1) / job.super_size;
        job.items_per_seq = p->num_kv_heads * job.supers;
    }
    attn_parallel_for(ex->num_threads, p->num_seqs * job.items_per_seq, attn_fx_item, &job);
}

void attn_fwd_run(const attn_problem *p, const attn_exec *ex) {
    attn_exec one = *ex; /* a small call: alone or on every thread (attn_fwd_small_rule) */
    int way = -1;
    double flops = 0.0, t0 = 0.0;
    if (attn_fwd_may_run_alone(ex) && (flops = attn_fx_flops(p)) < ex->parallel_min_flops)
        one.num_threads = attn_fwd_small_threads(ex, &way, &t0);
    attn_fx_run(p, &one);
    if (way >= 0)
        attn_fwd_small_done(ex, way, flops, t0);
}
