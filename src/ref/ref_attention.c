/*
 * ref_attention.c — the literal attention oracle for dense, packed and paged problems (via attn_problem).
 * It reads K/V through attn_seq_k_row/v_row (contiguous or block table) one element at a time, accumulates
 * in double, and writes out/LSE. It deliberately has no tiling, no online softmax and no threads.
 */
#include <math.h>
#include <stdlib.h>

#include "core/dtype.h"
#include "core/error.h"
#include "ref/ref.h"

/* Absolute position of query row i: bottom-right p_i = Sk − Sq + i, or i for top-left causal. */
static int64_t ref_query_pos(const attn_problem *p, const attn_seq_view *s, int64_t i) {
    if (p->opts.piecewise) { /* local row i of query range r is global position gs + (i − ls) (§B.1) */
        for (int64_t r = 0; r < p->opts.num_query_ranges; r++) {
            const attn_query_range *qr = &p->opts.query_ranges[r];
            if (i >= qr->local_start && i < qr->local_end) return qr->global_start + (i - qr->local_start);
        }
    }
    if (p->opts.causal == ATTN_CAUSAL_TOP_LEFT) return i;
    return s->seq_k - s->seq_q + i;
}

/* Element offset of (b, h, i, j) in a mask broadcast to [B, H, Sq, Sk]: its ndim (1..4) is right-aligned to
 * those dimensions and a size-1 dimension reads index 0 (NumPy / torch SDPA broadcasting). */
static int64_t ref_mask_offset(const attn_tensor *t, const int64_t idx[4]) {
    int64_t off = 0;
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->shape[d] != 1) off += idx[4 - t->ndim + d] * t->strides[d];
    return off;
}

/* The masks' coordinates of (sequence s, head h, compacted row i, compacted key j): the padded route's
 * compacted rows and keys are the tokens q_rows[i] and k_tokens[j] of the caller's [B, H, S, S] masks. */
static void ref_mask_index(const attn_seq_view *s, int64_t h, int64_t i, int64_t j, int64_t idx[4]) {
    idx[0] = s->batch_idx;
    idx[1] = h;
    idx[2] = s->q_rows ? (int64_t)s->q_rows[i] : i;
    idx[3] = s->k_tokens ? (int64_t)s->k_tokens[j] : j;
}

/* The additive mask value (natural units) at (s, h, i, j), or 0 without one. */
static double ref_additive(const attn_problem *p, const attn_seq_view *s, int64_t h, int64_t i, int64_t j) {
    const attn_tensor *t = p->opts.additive_mask;
    if (!t) return 0.0;
    int64_t idx[4];
    ref_mask_index(s, h, i, j, idx);
    return (double)attn_load_f(t->data, t->dtype, ref_mask_offset(t, idx));
}

int attn_ref_visible(const attn_problem *p, const attn_seq_view *s, int64_t h, int64_t i, int64_t j) {
    const attn_opts *o = &p->opts;
    int64_t pos = ref_query_pos(p, s, i);
    if (o->causal != ATTN_CAUSAL_NONE && j > pos) return 0;
    if (o->window_left >= 0 && j < pos - o->window_left) return 0;
    if (o->window_right >= 0 && j > pos + o->window_right) return 0;
    if (o->piecewise) { /* docs/DIFFUSION.md §2: inside a span [a, e) keep j < e, elsewhere keep j <= p */
        int in_span = 0;
        for (int64_t t = 0; t < o->num_spans; t++)
            if (pos >= o->spans[t].start && pos < o->spans[t].end) {
                in_span = 1;
                if (j >= o->spans[t].end) return 0;
            }
        if (!in_span && j > pos) return 0;
    }
    int64_t idx[4];
    ref_mask_index(s, h, i, j, idx);
    if (o->key_padding_mask) {
        const attn_tensor *t = o->key_padding_mask;
        const unsigned char *d = (const unsigned char *)t->data;
        if (!d[idx[0] * t->strides[0] + idx[3] * t->strides[1]]) return 0;
    }
    if (o->mask && !((const unsigned char *)o->mask->data)[ref_mask_offset(o->mask, idx)]) return 0;
    /* an additive −inf removes the key (exp(−inf) = 0 in SDPA); finite values are logits (below) */
    if (o->additive_mask && ref_additive(p, s, h, i, j) == -INFINITY) return 0;
    return 1;
}

attn_status attn_ref_run(const attn_problem *p) {
    int64_t max_k = 0;
    for (int64_t b = 0; b < p->num_seqs; b++) {
        attn_seq_view s;
        p->get_seq(p, b, &s);
        if (s.seq_k > max_k) max_k = s.seq_k;
    }
    double *logit = (double *)malloc((size_t)(max_k > 0 ? max_k : 1) * sizeof(double)); /* [seq_k] */
    double *acc = (double *)malloc((size_t)p->head_size_v * sizeof(double));           /* [head_size_v] */
    unsigned char *vis = (unsigned char *)malloc((size_t)(max_k > 0 ? max_k : 1));       /* [seq_k] */
    if (!logit || !acc || !vis) {
        free(logit);
        free(acc);
        free(vis);
        return attn_err_set(ATTN_STATUS_OUT_OF_MEMORY, "attn_ref: cannot allocate %lld logits",
                            (long long)max_k);
    }
    const int64_t group = p->num_heads / p->num_kv_heads;
    const attn_opts *o = &p->opts;
    /* fp8 K/V: element = decode(bits)·scale, the dequantized value, in double; the scale of kv head g is
     * k_scales[g] / v_scales[g] when the call has per-head arrays, else the scalar */
    const int fp8 = attn_dtype_is_fp8(p->kv_dtype);
    for (int64_t b = 0; b < p->num_seqs; b++) {
        attn_seq_view s;
        p->get_seq(p, b, &s);
        const int64_t kds = s.k_dim_stride ? s.k_dim_stride : (int64_t)attn_dtype_size(p->kv_dtype);
        for (int64_t h = 0; h < p->num_heads; h++) {
            const int64_t g = h / group;
            const double k_scale = !fp8 ? 1.0 : o->k_scales ? (double)o->k_scales[g] : (double)o->k_scale;
            const double v_scale = !fp8 ? 1.0 : o->v_scales ? (double)o->v_scales[g] : (double)o->v_scale;
            for (int64_t i = 0; i < s.seq_q; i++) {
                const char *qrow = s.q + attn_seq_q_row(&s, i) * s.q_row_stride + h * s.q_head_stride;
                const int64_t pos = ref_query_pos(p, &s, i);
                /* 1. logits of visible keys: scale·q·k → soft-cap → ALiBi → + additive mask */
                double m = -INFINITY;
                for (int64_t j = 0; j < s.seq_k; j++) {
                    vis[j] = (unsigned char)attn_ref_visible(p, &s, h, i, j);
                    if (!vis[j]) continue;
                    const char *krow = attn_seq_k_row(&s, j, g);
                    double dot = 0.0;
                    for (int64_t d = 0; d < p->head_size; d++) /* K element d: its own address (k_dim_stride) */
                        dot += (double)attn_load_f(qrow, p->q_dtype, d) *
                               ((double)attn_load_f(krow + d * kds, p->kv_dtype, 0) * k_scale);
                    double x = (double)o->softmax_scale * dot;
                    if (o->softcap > 0.0f) x = (double)o->softcap * tanh(x / (double)o->softcap);
                    if (o->alibi_slopes) x += -(double)o->alibi_slopes[h] * (double)llabs(pos - j);
                    if (o->additive_mask) x += ref_additive(p, &s, h, i, j);
                    logit[j] = x;
                    if (x > m) m = x;
                }
                /* 2. softmax denominator, with the sink as an extra logit without a value row. A visible logit of
                 * −inf adds exactly 0 (also when every logit is −inf, m = −inf: then an empty row); a NaN or +inf
                 * one makes the denominator NaN (+inf − +inf) and with it the row's output and LSE */
                if (o->sinks && (double)o->sinks[h] > m) m = (double)o->sinks[h];
                double denom = 0.0;
                for (int64_t j = 0; j < s.seq_k; j++)
                    if (vis[j] && logit[j] != -INFINITY)
                        denom += exp(logit[j] - m);
                if (o->sinks) denom += exp((double)o->sinks[h] - m);
                /* 3. out = Σ softmax_j · v_j ; lse = log Σ exp(s_j) */
                for (int64_t d = 0; d < p->head_size_v; d++)
                    acc[d] = isnan(denom) ? (double)NAN : 0.0;
                if (denom > 0.0) {
                    for (int64_t j = 0; j < s.seq_k; j++) {
                        if (!vis[j]) continue;
                        const double w = exp(logit[j] - m) / denom;
                        const char *vrow = attn_seq_v_row(&s, j, g);
                        for (int64_t d = 0; d < p->head_size_v; d++)
                            acc[d] += w * ((double)attn_load_f(vrow, p->kv_dtype, d) * v_scale);
                    }
                }
                char *orow = s.out + attn_seq_q_row(&s, i) * s.out_row_stride + h * s.out_head_stride;
                for (int64_t d = 0; d < p->head_size_v; d++) attn_store_f(orow, p->out_dtype, d, (float)acc[d]);
                if (s.lse) {
                    double lse = isnan(denom) ? (double)NAN : denom > 0.0 ? m + log(denom) : -INFINITY;
                    s.lse[attn_seq_q_row(&s, i) * s.lse_row_stride + h * s.lse_head_stride] = (float)lse;
                }
            }
        }
    }
    free(logit);
    free(acc);
    free(vis);
    return ATTN_STATUS_OK;
}
