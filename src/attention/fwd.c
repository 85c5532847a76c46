/*
 * fwd.c — the attention driver: FlashAttention-2 tiling with query rows in lanes, fixed kv tiles and
 * fixed split-KV partitions folded in order (see fwd.h for the invariance argument). It owns structure
 * only; all arithmetic on tiles runs in the kernel table. It does not allocate.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (the small-call rule's timer) */
#include "attention/fwd.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "attention/mask.h"
#include "core/dtype.h"


/* ---------------------------------------------------------------------------------------------
 * Scratch
 * --------------------------------------------------------------------------------------------- */
#define ATTN_QT_FLOATS (ATTN_HEAD_SIZE_MAX * ATTN_QB)
#define ATTN_S_FLOATS (ATTN_KV_TILE * ATTN_QB)
/* Converted or repacked K/V rows sit round16(width) + 16 floats apart (attn_fwd_rows): never a multiple of 1 KiB,
 * so the 64 rows of a tile do not all map to the same L1 sets (bench/results/2026-11-30-kernels-and-prefill.md).
 * ATTN_TILE_ROW bounds it. */
#define ATTN_TILE_ROW (ATTN_HEAD_SIZE_MAX + 16)
#define ATTN_TILE_FLOATS (ATTN_KV_TILE * ATTN_TILE_ROW)

size_t attn_fwd_scratch_bytes(void) {
    size_t floats = ATTN_QT_FLOATS + ATTN_S_FLOATS + 2 * (ATTN_QT_FLOATS + 2 * ATTN_QB) + 2 * ATTN_TILE_FLOATS +
                    ATTN_S_FLOATS + ATTN_QT_FLOATS + ATTN_TILE_ROW + ATTN_QT_FLOATS;
    size_t bytes = floats * sizeof(float) + 2 * ATTN_KV_TILE * sizeof(float *) + 3 * ATTN_KV_TILE * sizeof(void *);
    return ((bytes + 63) & ~(size_t)63) + ((ATTN_KV_PREP_BYTES + 63) & ~(size_t)63) + ATTN_FWD_MULTI_BYTES;
}

void attn_fwd_scratch_carve(void *base, attn_fwd_scratch *sc) {
    float *f = (float *)base;
    sc->q_t = f, f += ATTN_QT_FLOATS;
    sc->s = f, f += ATTN_S_FLOATS;
    sc->o_part = f, f += ATTN_QT_FLOATS;
    sc->m_part = f, f += ATTN_QB;
    sc->l_part = f, f += ATTN_QB;
    sc->o_acc = f, f += ATTN_QT_FLOATS;
    sc->m_acc = f, f += ATTN_QB;
    sc->l_acc = f, f += ATTN_QB;
    sc->k_tile = f, f += ATTN_TILE_FLOATS;
    sc->v_tile = f, f += ATTN_TILE_FLOATS;
    sc->p_tmp = f, f += ATTN_S_FLOATS;
    sc->o_tmp = f, f += ATTN_QT_FLOATS;
    sc->zero_row = f, f += ATTN_TILE_ROW;
    sc->rows = f, f += ATTN_QT_FLOATS;
    sc->k_rows = (const float **)(void *)f;
    sc->v_rows = sc->k_rows + ATTN_KV_TILE;
    sc->k_raw = (const void **)(void *)(sc->v_rows + ATTN_KV_TILE);
    sc->v_raw = sc->k_raw + ATTN_KV_TILE;
    sc->v_safe = sc->v_raw + ATTN_KV_TILE;
    sc->multi = (char *)base + (attn_fwd_scratch_bytes() - ATTN_FWD_MULTI_BYTES);
    sc->kv_prep = sc->multi - ((ATTN_KV_PREP_BYTES + 63) & ~(size_t)63);
    sc->v_rows_finite = 0;
    sc->kv_prepped = 0;
    sc->kv_prep_key0 = 0;
}

/* ---------------------------------------------------------------------------------------------
 * Blocks
 * --------------------------------------------------------------------------------------------- */
void attn_fwd_shape_of(const attn_problem *p, attn_fwd_shape *sh) {
    sh->group = p->num_heads / p->num_kv_heads;
    sh->heads_per_block = sh->group < ATTN_QB ? sh->group : ATTN_QB;
    sh->head_chunks = (sh->group + sh->heads_per_block - 1) / sh->heads_per_block;
    sh->tokens_per_block = ATTN_QB / sh->heads_per_block;
    if (sh->tokens_per_block < 1) sh->tokens_per_block = 1;
}

void attn_fwd_block_init(const attn_problem *p, const attn_fwd_shape *sh, const attn_seq_view *seq,
                         int64_t kv_head, int64_t head_chunk, int64_t token_block, attn_fwd_block *blk) {
    blk->seq = *seq;
    blk->kv_head = kv_head;
    blk->num_rows = 0;
    blk->key_lo = seq->seq_k;
    blk->key_hi = 0;
    const int64_t h0 = kv_head * sh->group + head_chunk * sh->heads_per_block;
    int64_t h1 = h0 + sh->heads_per_block;
    if (h1 > (kv_head + 1) * sh->group) h1 = (kv_head + 1) * sh->group;
    const int64_t t0 = token_block * sh->tokens_per_block;
    int64_t t1 = t0 + sh->tokens_per_block;
    if (t1 > seq->seq_q) t1 = seq->seq_q;
    for (int64_t i = t0; i < t1; i++) {
        const int64_t pos = attn_mask_query_pos(p, seq, i);
        int64_t lo, hi;
        attn_mask_row_range(p, pos, seq->seq_k, &lo, &hi);
        for (int64_t h = h0; h < h1; h++) {
            const int32_t r = blk->num_rows++;
            blk->row_token[r] = i;
            blk->row_head[r] = h;
            blk->row_pos[r] = pos;
            blk->row_lo[r] = lo;
            blk->row_hi[r] = hi;
            if (lo < hi) {
                if (lo < blk->key_lo) blk->key_lo = lo;
                if (hi > blk->key_hi) blk->key_hi = hi;
            }
        }
    }
}

/* The factor of q·k in a logit: softmax_scale, times k_scale for fp8 keys (decode(k)·k_scale:
 * scale·q·(k·k_scale) = (scale·k_scale)·q·k); with per-head scales the k scale of the block's kv head (a block
 * never mixes kv heads), rounded the same way, so equal per-head entries give the scalar's bits. It is
 * applied to the finished dot product
 * (attn_fwd_tile_logits_mask), not folded into q: q_t holds q's own values, exact in a table's operand
 * format (bf16 q stays exact when a table rounds q_t to bf16), and a logit carries one rounding of the
 * scale instead of one per term (docs/SEMANTICS.md §4). */
static float attn_fwd_logit_scale(const attn_problem *p, const attn_fwd_block *blk) {
    if (attn_dtype_is_fp8(p->kv_dtype))
        return (float)((double)p->opts.softmax_scale * (double)attn_opts_k_scale(&p->opts, blk->kv_head));
    return p->opts.softmax_scale;
}

void attn_fwd_pack_q(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                     attn_fwd_scratch *sc) {
    const int64_t D = p->head_size;
    /* lanes the kernels read: 16 for blocks of ≤ 16 rows (one zmm / two ymm / generic W = 16), else 32 */
    const int64_t lanes = blk->num_rows <= 16 ? 16 : ATTN_QB;
    if (lanes == ATTN_QB) memset(sc->q_t, 0, (size_t)D * ATTN_QB * sizeof(float));
    else
        for (int64_t d = 0; d < D; d++) memset(sc->q_t + d * ATTN_QB, 0, (size_t)lanes * sizeof(float));
    for (int32_t r = 0; r < blk->num_rows; r++) {
        const int64_t row = attn_seq_q_row(&blk->seq, blk->row_token[r]);
        const char *src = blk->seq.q + row * blk->seq.q_row_stride +
                          blk->row_head[r] * blk->seq.q_head_stride;
        kern->cvt_to_f32(src, p->q_dtype, sc->rows + r * D, D);
    }
    kern->transpose(sc->rows, D, blk->num_rows, D, sc->q_t, ATTN_QB);
}

void attn_fwd_partitions(const attn_fwd_block *blk, int64_t *first, int64_t *last) {
    if (blk->key_lo >= blk->key_hi) {
        *first = *last = 0;
        return;
    }
    *first = blk->key_lo / ATTN_KV_PARTITION;
    *last = (blk->key_hi + ATTN_KV_PARTITION - 1) / ATTN_KV_PARTITION;
}

void attn_fwd_ml_reset(float *m, float *l) {
    for (int r = 0; r < ATTN_QB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
}

void attn_fwd_state_reset(int64_t head_size_v, float *m, float *l, float *o) {
    attn_fwd_ml_reset(m, l);
    memset(o, 0, (size_t)head_size_v * ATTN_QB * sizeof(float));
}

/* Soft-cap and ALiBi on a score tile of keys [a, b) of logits scale·q·k (natural units). */
static void attn_fwd_logits(const attn_problem *p, const attn_fwd_block *blk, int64_t a, int64_t b, float *s) {
    const float cap = p->opts.softcap;
    const float *slopes = p->opts.alibi_slopes;
    if (cap > 0.0f) {
        const float inv_cap = 1.0f / cap;
        for (int64_t k = 0; k < b - a; k++)
            for (int32_t r = 0; r < blk->num_rows; r++) s[k * ATTN_QB + r] = cap * tanhf(s[k * ATTN_QB + r] * inv_cap);
    }
    if (slopes) {
        for (int32_t r = 0; r < blk->num_rows; r++) {
            const float slope = slopes[blk->row_head[r]];
            for (int64_t j = a; j < b; j++) {
                const int64_t dist = blk->row_pos[r] > j ? blk->row_pos[r] - j : j - blk->row_pos[r];
                s[(j - a) * ATTN_QB + r] -= slope * (float)dist;
            }
        }
    }
}

/* Row pointers of keys [a, b) of kv head g as float32: in place for f32 rows whose stride is not a
 * multiple of 1 KiB; otherwise converted or copied into `tile` with a padded stride (width rounded to
 * 16 floats + 16: never a multiple of 1 KiB, so the rows of a tile spread over the L1 sets). The values
 * are the same floats either way (cvt_to_f32 per row, or a copy). */
void attn_fwd_rows(const struct attn_kernels *kern, const attn_seq_view *seq, attn_dtype dtype, int is_v,
                   int64_t g, int64_t a, int64_t b, int64_t width, float *tile, const float **rows) {
    const int64_t row_stride = is_v ? seq->v_row_stride : seq->k_row_stride;
    int64_t tile_row = ((width + 15) & ~(int64_t)15) + 16;
    if (tile_row % 256 == 0) tile_row += 16; /* 1 KiB apart would alias again (width 225..240) */
    if (!is_v && seq->k_dim_stride) {        /* K stored by dimension: gathered element by element (exact widening) */
        attn_fwd_k_gather(seq, dtype, g, a, b, width, tile, tile_row, rows);
        return;
    }
    const int in_place = dtype == ATTN_DTYPE_F32 && row_stride % 1024 != 0;
    for (int64_t j = a; j < b; j++) {
        const char *src = is_v ? attn_seq_v_row(seq, j, g) : attn_seq_k_row(seq, j, g);
        if (in_place) {
            rows[j - a] = (const float *)(const void *)src;
        } else {
            float *dst = tile + (j - a) * tile_row;
            if (dtype == ATTN_DTYPE_F32) memcpy(dst, src, (size_t)width * sizeof(float));
            else kern->cvt_to_f32(src, dtype, dst, width);
            rows[j - a] = dst;
        }
    }
}

void attn_fwd_k_gather(const attn_seq_view *seq, attn_dtype dtype, int64_t g, int64_t a, int64_t b, int64_t width,
                       float *tile, int64_t tile_row, const float **rows) {
    for (int64_t j = a; j < b; j++) {
        const char *src = attn_seq_k_row(seq, j, g);
        float *dst = tile + (j - a) * tile_row;
        for (int64_t d = 0; d < width; d++)
            dst[d] = attn_load_f(src + d * seq->k_dim_stride, dtype, 0);
        rows[j - a] = dst;
    }
}

/* Prefetch of every cache line of the K and V rows of keys [a, b), kv head g (no effect on results); K stored
 * by dimension (seq->k_dim_stride) is left to the hardware. */
void attn_fwd_prefetch(const attn_problem *p, const attn_seq_view *seq, int64_t g, int64_t a, int64_t b) {
    const int64_t es = (int64_t)attn_dtype_size(p->kv_dtype);
    const int64_t kbytes = seq->k_dim_stride ? 0 : p->head_size * es, vbytes = p->head_size_v * es;
    for (int64_t j = a; j < b; j++) {
        const char *k = attn_seq_k_row(seq, j, g), *v = attn_seq_v_row(seq, j, g);
        for (int64_t off = 0; off < kbytes; off += 64) __builtin_prefetch(k + off, 0, 3);
        for (int64_t off = 0; off < vbytes; off += 64) __builtin_prefetch(v + off, 0, 3);
    }
}

void attn_fwd_partition(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                        attn_fwd_scratch *sc, int64_t part, float *m, float *l, float *o) {
    attn_fwd_state_reset(p->head_size_v, m, l, o);
    int64_t lo = part * ATTN_KV_PARTITION, hi = lo + ATTN_KV_PARTITION;
    if (lo < blk->key_lo) lo = blk->key_lo;
    if (hi > blk->key_hi) hi = blk->key_hi;
    if (lo >= hi) return;
    for (int64_t t0 = (lo / ATTN_KV_TILE) * ATTN_KV_TILE; t0 < hi; t0 += ATTN_KV_TILE) {
        int64_t a = t0 > lo ? t0 : lo;
        int64_t b = t0 + ATTN_KV_TILE < hi ? t0 + ATTN_KV_TILE : hi;
        const int64_t next_b = t0 + 2 * ATTN_KV_TILE < blk->key_hi ? t0 + 2 * ATTN_KV_TILE : blk->key_hi;
        attn_fwd_prefetch(p, &blk->seq, blk->kv_head, t0 + ATTN_KV_TILE, next_b);
        if (!attn_mask_tile_span(p, blk, a, b, &a, &b))
            continue; /* keys no row sees: skipped */
        attn_fwd_rows(kern, &blk->seq, p->kv_dtype, 0, blk->kv_head, a, b, p->head_size, sc->k_tile, sc->k_rows);
        attn_fwd_rows(kern, &blk->seq, p->kv_dtype, 1, blk->kv_head, a, b, p->head_size_v, sc->v_tile,
                      sc->v_rows);
        attn_fwd_tile(p, kern, blk, sc, sc->q_t, sc->s, sc->k_rows, sc->v_rows, a, b, m, l, o);
    }
}

/* The logit scale, soft-cap, ALiBi and the mask on a score tile of keys [a, b) (the steps between Q·Kᵀ and the
 * softmax): s = scale·(q·k) on the block's lanes, then the options. */
void attn_fwd_tile_logits_mask(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                               int64_t a, int64_t b, float *s) {
    kern->scale_tile(s, b - a, blk->num_rows, attn_fwd_logit_scale(p, blk));
    if (p->opts.softcap > 0.0f || p->opts.alibi_slopes != NULL) attn_fwd_logits(p, blk, a, b, s);
    if (!attn_mask_tile_is_full(p, blk, a, b)) attn_mask_apply(p, blk, a, b, s);
}

int attn_fwd_rows_nonfinite(const void *const *rows, attn_dtype dtype, int64_t n, int64_t width) {
    unsigned bad = 0;
    for (int64_t k = 0; k < n; k++) {
        if (dtype == ATTN_DTYPE_F32) {
            const uint32_t *u = (const uint32_t *)rows[k];
            for (int64_t d = 0; d < width; d++) bad |= (u[d] & 0x7F800000u) == 0x7F800000u;
        } else if (attn_dtype_is_fp8(dtype)) { /* E4M3: NaN S.1111.111 only; E5M2: exponent 11111 */
            const uint8_t *u = (const uint8_t *)rows[k];
            const uint8_t e = dtype == ATTN_DTYPE_FP8_E4M3 ? 0x7Fu : 0x7Cu;
            for (int64_t d = 0; d < width; d++) bad |= (u[d] & e) == e;
        } else {
            const uint16_t *u = (const uint16_t *)rows[k];
            const uint16_t e = dtype == ATTN_DTYPE_BF16 ? 0x7F80u : 0x7C00u;
            for (int64_t d = 0; d < width; d++) bad |= (u[d] & e) == e;
        }
        if (bad) return 1;
    }
    return 0;
}

void attn_fwd_pv_safe(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                      attn_fwd_scratch *sc, const float *s, const float *const *v_rows, int64_t nk, float *o) {
    const int64_t dv = p->head_size_v;
    const float **vr = (const float **)sc->v_safe;
    memset(sc->zero_row, 0, ATTN_TILE_ROW * sizeof(float));
    memset(sc->p_tmp, 0, (size_t)nk * ATTN_QB * sizeof(float));
    for (int32_t r = 0; r < blk->num_rows; r++) {
        for (int64_t k = 0; k < nk; k++) {
            sc->p_tmp[k * ATTN_QB] = s[k * ATTN_QB + r];
            vr[k] = s[k * ATTN_QB + r] == 0.0f ? sc->zero_row : v_rows[k];
        }
        for (int64_t d = 0; d < dv; d++) sc->o_tmp[d * ATTN_QB] = o[d * ATTN_QB + r];
        kern->pv_tile(sc->p_tmp, nk, 1, vr, dv, sc->o_tmp);
        for (int64_t d = 0; d < dv; d++) o[d * ATTN_QB + r] = sc->o_tmp[d * ATTN_QB];
    }
}

void attn_fwd_tile(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                   attn_fwd_scratch *sc, const float *q_t, float *s, const float *const *k_rows,
                   const float *const *v_rows, int64_t a, int64_t b, float *m, float *l, float *o) {
    const int64_t nr = blk->num_rows;
    if (sc->kv_prepped)
        kern->qk_tile_prep(q_t, nr, p->head_size, sc->kv_prep, a - sc->kv_prep_key0, b - a, s);
    else
        kern->qk_tile(q_t, nr, p->head_size, k_rows, b - a, s);
    attn_fwd_tile_logits_mask(p, kern, blk, a, b, s);
    kern->softmax_tile(s, b - a, nr, m, l, o, p->head_size_v);
    if (!attn_mask_tile_is_full(p, blk, a, b) && !sc->v_rows_finite &&
        attn_fwd_rows_nonfinite((const void *const *)v_rows, ATTN_DTYPE_F32, b - a, p->head_size_v))
        attn_fwd_pv_safe(p, kern, blk, sc, s, v_rows, b - a, o);
    else if (sc->kv_prepped)
        kern->pv_tile_prep(s, b - a, nr, sc->kv_prep, a - sc->kv_prep_key0, p->head_size_v, o);
    else
        kern->pv_tile(s, b - a, nr, v_rows, p->head_size_v, o);
}

void attn_fwd_fold(int64_t num_rows, int64_t head_size_v, float *m_acc, float *l_acc, float *o_acc,
                   const float *m, const float *l, const float *o) {
    float wa[ATTN_QB], wb[ATTN_QB];
    for (int64_t r = 0; r < num_rows; r++) {
        const float mm = m_acc[r] > m[r] ? m_acc[r] : m[r];
        if (mm == -INFINITY) { /* both empty: stays empty, but a NaN sum (a visible NaN logit, which never moves m,
                                  in a partition with no other visible key) still makes the row NaN: + 0·NaN */
            wa[r] = 1.0f;
            wb[r] = 0.0f;
            l_acc[r] = l_acc[r] + 0.0f * l[r];
            continue;
        }
        wa[r] = m_acc[r] == -INFINITY ? 0.0f : expf(m_acc[r] - mm);
        wb[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mm);
        m_acc[r] = mm;
        l_acc[r] = wa[r] * l_acc[r] + wb[r] * l[r];
    }
    for (int64_t d = 0; d < head_size_v; d++)
        for (int64_t r = 0; r < num_rows; r++)
            o_acc[d * ATTN_QB + r] = wa[r] * o_acc[d * ATTN_QB + r] + wb[r] * o[d * ATTN_QB + r];
}

void attn_fwd_finalize(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                       attn_fwd_scratch *sc, const float *m, const float *l, const float *o) {
    const int64_t Dv = p->head_size_v;
    kern->transpose(o, ATTN_QB, Dv, blk->num_rows, sc->rows, Dv); /* rows[r][d] = o[d][r] */
    for (int32_t r = 0; r < blk->num_rows; r++) {
        const int64_t h = blk->row_head[r];
        double mm = m[r], ll = l[r];
        /* the sink is one more logit in the denominator, without a value row; a NaN denominator (a visible NaN or
         * +inf logit) stays NaN, out and LSE alike, as in the oracle */
        if (p->opts.sinks && !isnan(ll)) {
            const double sink = (double)p->opts.sinks[h];
            const double top = mm > sink ? mm : sink;
            ll = (ll > 0.0 ? ll * exp(mm - top) : 0.0) + exp(sink - top);
            mm = top;
        }
        /* empty row (nothing visible, no sink): l = 0 exactly; a NaN l (a visible NaN logit) propagates */
        /* fp8 values mean decode(v)·v_scale: Σ p·(v·v_scale) / l = (Σ p·v)·(v_scale / l); per-head: the
         * block's kv head's v scale */
        const double vs = attn_dtype_is_fp8(p->kv_dtype) ? (double)attn_opts_v_scale(&p->opts, blk->kv_head) : 1.0;
        const float inv = ll != 0.0 ? (float)(exp((double)m[r] - mm) / ll * vs) : 0.0f;
        float *x = sc->rows + r * Dv;
        if (l[r] != 0.0f)
            for (int64_t d = 0; d < Dv; d++) x[d] *= inv;
        else
            memset(x, 0, (size_t)Dv * sizeof(float));
        const int64_t row = attn_seq_q_row(&blk->seq, blk->row_token[r]);
        char *dst = blk->seq.out + row * blk->seq.out_row_stride + h * blk->seq.out_head_stride;
        kern->cvt_from_f32(x, p->out_dtype, dst, Dv);
        if (blk->seq.lse) {
            const float lse = ll != 0.0 ? (float)(mm + log(ll)) : -INFINITY; /* natural log, no fold of mm */
            blk->seq.lse[row * blk->seq.lse_row_stride + h * blk->seq.lse_head_stride] = lse;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * The small-call rule (attn_fwd_small_rule)
 * --------------------------------------------------------------------------------------------- */
/* A monotonic clock in ns (0 where there is none: then no call is a sample and small calls keep alternating). */
static double attn_fwd_now_ns(void) {
    struct timespec ts;
#if defined(CLOCK_MONOTONIC)
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0.0;
#else
    if (timespec_get(&ts, TIME_UTC) != TIME_UTC)
        return 0.0;
#endif
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int32_t attn_fwd_small_threads(const attn_exec *ex, int *way, double *t0) {
    attn_fwd_small_rule *r = ex->small;
    *way = -1;
    if (r == NULL || r->fixed)
        return 1;
    const int64_t n = r->calls++, e = n % ATTN_FWD_SMALL_EXPLORE;
    int w, timed;
    if (r->taken[0] < ATTN_FWD_SMALL_SAMPLES || r->taken[1] < ATTN_FWD_SMALL_SAMPLES) {
        w = r->taken[1] < r->taken[0], timed = 1; /* learning: alternate, alone first */
    } else if (e < ATTN_FWD_SMALL_BURST) {        /* a burst the other way; its first call wakes what that way needs */
        if (e == 0)
            r->burst_way = !r->way;
        w = r->burst_way, timed = e > 0;
    } else {
        w = r->way, timed = e % 4 == 0;
    }
    if (timed) {
        *way = w;
        *t0 = attn_fwd_now_ns();
    }
    return w ? ex->num_threads : 1;
}

/* The median of a full ring of samples. */
static double attn_fwd_small_median(const double *ring) {
    double v[ATTN_FWD_SMALL_SAMPLES];
    memcpy(v, ring, sizeof v);
    for (int i = 1; i < ATTN_FWD_SMALL_SAMPLES; i++) /* insertion sort: 16 values */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            const double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return v[ATTN_FWD_SMALL_SAMPLES / 2];
}

void attn_fwd_small_record(attn_fwd_small_rule *r, int way, double ns_per_flop) {
    r->ns_per_flop[way][r->taken[way]++ % ATTN_FWD_SMALL_SAMPLES] = ns_per_flop;
    if (r->taken[0] >= ATTN_FWD_SMALL_SAMPLES && r->taken[1] >= ATTN_FWD_SMALL_SAMPLES)
        r->way = attn_fwd_small_median(r->ns_per_flop[1]) < 0.9 * attn_fwd_small_median(r->ns_per_flop[0]);
}

void attn_fwd_small_done(const attn_exec *ex, int way, double flops, double t0) {
    const double t1 = attn_fwd_now_ns(); /* (way >= 0: attn_fwd_small_threads timed the call on ex->small) */
    if (t0 <= 0.0 || t1 < t0)
        return; /* no clock: not a sample */
    attn_fwd_small_record(ex->small, way, (t1 - t0) / (flops > 1.0 ? flops : 1.0));
}
