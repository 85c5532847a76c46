/*
 * api_kvcache.c — attn_forward_kvcache, flash-attn's flash_attn_with_kvcache on the serving entries: new keys and
 * values are appended at each sequence's cache length (attn_reshape_and_cache_ex through slots computed here), then
 * the queries attend over the sequence's keys (attn_paged_attention). A cache without a block table is read as a
 * paged cache whose blocks are its rows; cache_leftpad through a table of single rows; per-sequence ALiBi slopes
 * one attention call per sequence. Every argument is checked, by calls without query rows, before the first write.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/tensor.h"

/* An int32 view of `data`: [n0] (ndim 1) or [n0, n1] row-major (ndim 2). */
static attn_tensor attn_kvc_i32(void *data, int32_t ndim, int64_t n0, int64_t n1) {
    const int64_t shape[2] = {n0, n1};
    return attn_tensor_make(data, ATTN_DTYPE_I32, ndim, shape);
}

/* INVALID_ARGUMENT "name: shape [2, 3], expected [2, *]" unless `t` has `ndim` dims of sizes want[] (-1: any). */
static attn_status attn_kvc_expect(const attn_tensor *t, const char *name, int32_t ndim, const int64_t *want) {
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = want[i] < 0 || t->shape[i] == want[i];
    if (ok)
        return ATTN_STATUS_OK;
    char have[160], exp[160];
    const attn_tensor w = {.ndim = ndim};
    for (int k = 0; k < 2; k++) {
        const attn_tensor *x = k ? &w : t;
        char *buf = k ? exp : have;
        size_t n = 0;
        for (int i = 0; i < x->ndim && n < 136; i++) {
            const int64_t v = k ? want[i] : t->shape[i];
            n += (size_t)snprintf(buf + n, 160 - n, v < 0 ? "%s*" : "%s%lld", i ? ", " : "", (long long)v);
        }
        buf[n] = '\0';
    }
    return attn_err_set(ATTN_STATUS_INVALID_ARGUMENT, "%s: shape [%s], expected [%s]", name, have, exp);
}

/* NULL, or an aligned `dtype` view of shape want[ndim] (-1: any). */
static attn_status attn_kvc_check(const attn_tensor *t, const char *name, int32_t ndim, attn_dtype dtype,
                                  const int64_t *want) {
    if (t == NULL)
        return ATTN_STATUS_OK;
    ATTN_TRY(attn_tensor_check(t, name, -1, 0));
    ATTN_TRY(attn_tensor_check_dtype(t, name, dtype));
    ATTN_TRY(attn_validate_aligned(t, name));
    return attn_kvc_expect(t, name, ndim, want);
}

/* `t` [d0, d1, d2, d3] viewed as [d0·d1, d2, d3] without a copy (the first two dims merge), or INVALID_ARGUMENT. */
static attn_status attn_kvc_view3(const attn_tensor *t, const char *name, attn_tensor *o) {
    int64_t s0 = -1;
    if (t->shape[1] == 1)
        s0 = t->strides[0];
    else if (t->shape[0] <= 1 || t->strides[0] == t->shape[1] * t->strides[1])
        s0 = t->strides[1];
    ATTN_CHECK(s0 >= 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: strides [%lld, %lld] do not merge the first two dimensions without a copy", name,
               (long long)t->strides[0], (long long)t->strides[1]);
    *o = *t;
    o->ndim = 3;
    o->shape[0] = t->shape[0] * t->shape[1];
    o->strides[0] = s0;
    for (int i = 1; i < 3; i++) {
        o->shape[i] = t->shape[i + 1];
        o->strides[i] = t->strides[i + 1];
    }
    return ATTN_STATUS_OK;
}

/* The attention over the whole batch, or with per-sequence slopes [batch, num_heads] one call per sequence b: q /
 * out rows [b·seqlen_q, (b+1)·seqlen_q), lse columns likewise, query_start_loc's first two entries, seq_lens[b] and
 * block table row b. */
static attn_status attn_kvc_attend(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv, const attn_tensor *qsl,
                                   const attn_tensor *sl, const attn_tensor *bt, attn_params *p, attn_tensor *out,
                                   attn_tensor *lse, const attn_tensor *slopes, int64_t seqlen_q) {
    if (slopes == NULL)
        return attn_paged_attention(ctx, q, kv, qsl, sl, bt, p, out, lse);
    for (int64_t b = 0; b < slopes->shape[0]; b++) {
        attn_tensor qb = *q, ob = *out, lb, sb = *sl, btb = *bt, qslb = *qsl;
        const int64_t r0 = q->shape[0] ? b * seqlen_q : 0;
        p->alibi_slopes = (const float *)slopes->data + b * slopes->strides[0];
        qb.data = (char *)q->data + (size_t)(r0 * q->strides[0]) * attn_dtype_size(q->dtype);
        ob.data = (char *)out->data + (size_t)(r0 * out->strides[0]) * attn_dtype_size(out->dtype);
        qb.shape[0] = ob.shape[0] = q->shape[0] ? seqlen_q : 0;
        if (lse != NULL) {
            lb = *lse;
            lb.data = (float *)lse->data + r0 * lse->strides[1];
            lb.shape[1] = qb.shape[0];
        }
        sb.data = (int32_t *)sl->data + b * sl->strides[0], sb.shape[0] = 1, qslb.shape[0] = 2;
        btb.data = (int32_t *)bt->data + b * bt->strides[0], btb.shape[0] = 1;
        ATTN_TRY(attn_paged_attention(ctx, &qb, kv, &qslb, &sb, &btb, p, &ob, lse ? &lb : NULL));
    }
    return ATTN_STATUS_OK;
}

/* Scratch bytes attn_forward_kvcache keeps on the stack (beyond them it allocates per call). */
#define KVC_STACK_SCRATCH 8192
/* Element [i] of a 1-D int32 view. */
#define KVC_I32_1(t, i) ((int64_t)((const int32_t *)(t)->data)[(i) * (t)->strides[0]])

/* The cache slot of position pos of sequence b: through row b of the block table, or in the sequence's cache row. */
static inline int64_t attn_kvc_slot(const attn_tensor *bt, const int32_t *rows, int64_t b, int64_t pos,
                                    int64_t block_size) {
    const int64_t blk =
        bt ? ((const int32_t *)bt->data)[b * bt->strides[0] + (pos / block_size) * bt->strides[1]] : rows[b];
    return blk * block_size + pos % block_size;
}

attn_status attn_forward_kvcache(attn_ctx *ctx, const attn_tensor *q, attn_tensor *kv_cache, const attn_tensor *k_opt,
                                 const attn_tensor *v_opt, const attn_tensor *cache_seqlens_opt,
                                 const attn_tensor *cache_batch_idx_opt, const attn_tensor *cache_leftpad_opt,
                                 const attn_tensor *block_table_opt, const attn_tensor *alibi_slopes_opt,
                                 const attn_params *params, attn_tensor *out, attn_tensor *lse_opt) {
    ATTN_CHECK(ctx != NULL, ATTN_STATUS_INVALID_ARGUMENT, "ctx: is NULL");
    ATTN_PARAMS_LOAD(params);
    attn_params p = *params;
    const attn_tensor *cs = cache_seqlens_opt, *bi = cache_batch_idx_opt, *lp = cache_leftpad_opt;
    const attn_tensor *bt_in = block_table_opt, *slopes = alibi_slopes_opt;
    const int append = k_opt != NULL || v_opt != NULL;
    ATTN_CHECK(k_opt != NULL || !append, ATTN_STATUS_INVALID_ARGUMENT,
               "k: is NULL but v is given (k and v go together)");
    ATTN_CHECK(v_opt != NULL || !append, ATTN_STATUS_INVALID_ARGUMENT,
               "v: is NULL but k is given (k and v go together)");
    ATTN_TRY(attn_tensor_check(q, "q", 4, 1));
    const int64_t batch = q->shape[0], seqlen_q = q->shape[1], nheads = q->shape[2];
    const int64_t per_batch[2] = {batch, -1}, per_head[2] = {batch, nheads};
    ATTN_CHECK(kv_cache != NULL && kv_cache->ndim == 5, ATTN_STATUS_INVALID_ARGUMENT,
               "kv_cache: expected [2, num_blocks, block_size, num_kv_heads, head_size]");
    const int64_t num_blocks = kv_cache->shape[1], block_size = kv_cache->shape[2];
    ATTN_CHECK(block_size >= 1, ATTN_STATUS_INVALID_ARGUMENT,
               "k_cache: shape[1]=%lld (the block size, or the cache's sequence length without a block_table), "
               "expected >= 1",
               (long long)block_size);
    /* the block table: the caller's, or one block (= cache row) per sequence */
    int64_t capacity = block_size;
    if (bt_in != NULL) {
        ATTN_CHECK(bi == NULL, ATTN_STATUS_INVALID_ARGUMENT, "cache_batch_idx: cannot be used with block_table");
        ATTN_TRY(attn_kvc_check(bt_in, "block_table", 2, ATTN_DTYPE_I32, per_batch));
        ATTN_CHECK(attn_mul_i64(bt_in->shape[1], block_size, &capacity), ATTN_STATUS_OVERFLOW,
                   "block_table: shape[1]·block_size overflows");
    } else {
        ATTN_CHECK(bi != NULL || num_blocks >= batch, ATTN_STATUS_INVALID_ARGUMENT,
                   "k_cache: batch_cache=%lld < batch=%lld; pass cache_batch_idx to map batch rows to cache rows",
                   (long long)num_blocks, (long long)batch);
    }
    int64_t cs_all = capacity;
    if (cs != NULL && cs->ndim == 0) { /* one length for every sequence */
        ATTN_TRY(attn_kvc_check(cs, "cache_seqlens", 0, ATTN_DTYPE_I32, per_batch));
        cs_all = *(const int32_t *)cs->data;
        cs = NULL;
    }
    ATTN_TRY(attn_kvc_check(cs, "cache_seqlens", 1, ATTN_DTYPE_I32, per_batch));
    ATTN_TRY(attn_kvc_check(bi, "cache_batch_idx", 1, ATTN_DTYPE_I32, per_batch));
    ATTN_TRY(attn_kvc_check(lp, "cache_leftpad", 1, ATTN_DTYPE_I32, per_batch));
    if (slopes != NULL) {
        ATTN_CHECK(p.alibi_slopes == NULL, ATTN_STATUS_INVALID_ARGUMENT,
                   "alibi_slopes: per-sequence slopes and params.alibi_slopes given together");
        ATTN_TRY(attn_kvc_check(slopes, "alibi_slopes", 2, ATTN_DTYPE_F32, per_head));
        ATTN_CHECK(nheads <= 1 || slopes->strides[1] == 1, ATTN_STATUS_INVALID_ARGUMENT,
                   "alibi_slopes: strides[1]=%lld, expected 1", (long long)slopes->strides[1]);
    }
    attn_tensor q3, o3, k3, v3;
    int64_t seqlen_new = 0;
    if (append) {
        ATTN_TRY(attn_tensor_check(k_opt, "k", -1, 1));
        ATTN_TRY(attn_tensor_check(v_opt, "v", -1, 1));
        seqlen_new = k_opt->ndim == 4 ? k_opt->shape[1] : -1;
        const int64_t want_k[4] = {batch, seqlen_new, kv_cache->shape[3], kv_cache->shape[4]};
        ATTN_TRY(attn_kvc_expect(k_opt, "k", 4, want_k));
        ATTN_TRY(attn_kvc_expect(v_opt, "v", 4, want_k));
        ATTN_TRY(attn_kvc_view3(k_opt, "k", &k3));
        ATTN_TRY(attn_kvc_view3(v_opt, "v", &v3));
    }
    ATTN_TRY(attn_tensor_check(out, "out", -1, 1));
    const int64_t want_out[4] = {batch, seqlen_q, nheads, kv_cache->shape[4]};
    ATTN_TRY(attn_kvc_expect(out, "out", 4, want_out));
    ATTN_TRY(attn_kvc_view3(q, "q", &q3));
    ATTN_TRY(attn_kvc_view3(out, "out", &o3));
    if (lse_opt != NULL) {
        const int64_t want_lse[3] = {batch, nheads, seqlen_q};
        ATTN_TRY(attn_kvc_check(lse_opt, "lse", 3, ATTN_DTYPE_F32, want_lse));
    }
    /* out and lse must not meet an input (nor each other): the attention step would refuse them only after the
     * write, or not at all for the arrays only this entry reads */
    const attn_tensor *ins[10] = {q, kv_cache, k_opt, v_opt, cs, bi, lp, bt_in, slopes, lse_opt};
    const char *in_names[10] = {
        "q",           "kv_cache",     "k",  "v", "cache_seqlens", "cache_batch_idx", "cache_leftpad",
        "block_table", "alibi_slopes", "lse"};
    ATTN_TRY(attn_validate_no_overlap(out, "out", ins, in_names, 10));
    if (lse_opt != NULL)
        ATTN_TRY(attn_validate_no_overlap(lse_opt, "lse", ins, in_names, 9));
    /* cache_leftpad reads the keys through one row stride across blocks */
    const int64_t *ks = kv_cache->strides;
    const int64_t row_stride = block_size == 1 ? ks[1] : num_blocks <= 1 || ks[1] == block_size * ks[2] ? ks[2] : -1;
    ATTN_CHECK(lp == NULL || row_stride >= 0, ATTN_STATUS_INVALID_ARGUMENT,
               "cache_leftpad: the cache's rows do not run evenly across blocks (strides[1]=%lld, expected "
               "block_size·strides[2]=%lld)",
               (long long)ks[1], (long long)(block_size * ks[2]));

    /* the lengths, cache rows and left padding of every sequence */
    int64_t nrows = 0, nslots = 0;
    ATTN_CHECK(batch <= INT32_MAX && attn_mul_i64(batch, seqlen_q, &nrows) && nrows <= INT32_MAX &&
                   attn_mul_i64(batch, seqlen_new, &nslots),
               ATTN_STATUS_OVERFLOW, "q: batch=%lld × seqlen_q=%lld rows exceed int32 indices", (long long)batch,
               (long long)seqlen_q);
    int64_t maxlen = 1;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t have = cs ? KVC_I32_1(cs, b) : cs_all, pad = lp ? KVC_I32_1(lp, b) : 0;
        const int64_t row = bi ? KVC_I32_1(bi, b) : b;
        ATTN_CHECK(have >= 0, ATTN_STATUS_INVALID_ARGUMENT, "cache_seqlens: entry %lld = %lld is negative",
                   (long long)b, (long long)have);
        ATTN_CHECK(have + seqlen_new <= capacity, ATTN_STATUS_INVALID_ARGUMENT,
                   "cache_seqlens: entry %lld = %lld + seqlen_new=%lld exceeds the cache capacity %lld", (long long)b,
                   (long long)have, (long long)seqlen_new, (long long)capacity);
        ATTN_CHECK(pad >= 0 && pad <= have, ATTN_STATUS_INVALID_ARGUMENT,
                   "cache_leftpad: entry %lld = %lld is outside [0, cache_seqlens[%lld] = %lld]", (long long)b,
                   (long long)pad, (long long)b, (long long)have);
        ATTN_CHECK(bi == NULL || (row >= 0 && row < num_blocks), ATTN_STATUS_INVALID_ARGUMENT,
                   "cache_batch_idx: entry %lld = %lld is not a row of k_cache (batch_cache=%lld)", (long long)b,
                   (long long)row, (long long)num_blocks);
        if (have + seqlen_new - pad > maxlen)
            maxlen = have + seqlen_new - pad;
    }
    ATTN_CHECK(lp == NULL || num_blocks * block_size <= INT32_MAX, ATTN_STATUS_OVERFLOW,
               "k_cache: more rows than int32 indices address (cache_leftpad reads it row by row)");
    /* LSE [batch, nheads, seqlen_q] is the [nheads, batch·seqlen_q] of the attention step when batch or seqlen_q is
     * 1 (a view); else it is written through scratch */
    attn_tensor tlse;
    const int lse_view = lse_opt != NULL && (batch == 1 || seqlen_q == 1);
    if (lse_view) {
        tlse = *lse_opt;
        tlse.ndim = 2;
        tlse.shape[0] = nheads, tlse.shape[1] = nrows;
        tlse.strides[0] = lse_opt->strides[1];
        tlse.strides[1] = batch == 1 ? lse_opt->strides[2] : lse_opt->strides[0];
    }
    /* scratch: slots (int64), LSE, then int32: lengths, query_start_loc, zeros, cache rows, leftpad lengths, table */
    int64_t n32 = 0, bytes = 0;
    const int64_t lse_n = lse_opt != NULL && !lse_view ? nheads * nrows : 0;
    ATTN_CHECK(attn_muladd_i64(batch, lp ? maxlen + 5 : 5, 2, &n32) &&
                   attn_muladd_i64(nslots, 2, lse_n + n32, &bytes) && attn_mul_i64(bytes, 4, &bytes) &&
                   (uint64_t)bytes < SIZE_MAX / 2,
               ATTN_STATUS_OVERFLOW, "attn_forward_kvcache: scratch size overflows");
    /* a decode step's scratch (28 bytes a sequence with one new token) fits on the stack: no allocation there */
    _Alignas(16) char small[KVC_STACK_SCRATCH];
    char *const owned = bytes <= (int64_t)sizeof small ? NULL : malloc((size_t)bytes + 16);
    char *const scratch = owned ? owned : small;
    ATTN_CHECK(owned != NULL || bytes <= (int64_t)sizeof small, ATTN_STATUS_OUT_OF_MEMORY,
               "attn_forward_kvcache: %lld bytes of scratch not allocated", (long long)bytes);
    int64_t *slots = (int64_t *)(void *)scratch;
    float *lse3 = (float *)(slots + nslots);
    int32_t *sl = (int32_t *)(lse3 + lse_n), *qsl = sl + batch, *zq = qsl + batch + 1, *rows = zq + batch + 1;
    int32_t *rsl = rows + batch, *tab = rsl + batch;
    if (!lse_view)
        tlse = attn_kvc_i32(lse3, 2, nheads, nrows), tlse.dtype = ATTN_DTYPE_F32;
    for (int64_t b = 0; b <= batch; b++) {
        zq[b] = 0;
        qsl[b] = (int32_t)(b * seqlen_q);
        if (b < batch) {
            sl[b] = (int32_t)((cs ? KVC_I32_1(cs, b) : cs_all) + seqlen_new);
            rows[b] = bi ? (int32_t)KVC_I32_1(bi, b) : (int32_t)b;
        }
    }
    attn_tensor tsl = attn_kvc_i32(sl, 1, batch, 0), tqsl = attn_kvc_i32(qsl, 1, batch + 1, 0);
    attn_tensor tzq = attn_kvc_i32(zq, 1, batch + 1, 0), bt = bt_in ? *bt_in : attn_kvc_i32(rows, 2, batch, 1);
    attn_status st = ATTN_STATUS_OK;
    /* the attention step's checks, with no query row, before anything is written */
    if (append || lp || slopes) {
        attn_tensor q0 = q3, o0 = o3;
        q0.shape[0] = o0.shape[0] = 0;
        st = attn_kvc_attend(ctx, &q0, kv_cache, &tzq, &tsl, &bt, &p, &o0, NULL, slopes, seqlen_q);
    }
    if (st == ATTN_STATUS_OK && append) {
        for (int64_t b = 0; b < batch; b++)
            for (int64_t s = 0; s < seqlen_new; s++)
                slots[b * seqlen_new + s] = attn_kvc_slot(bt_in, rows, b, sl[b] - seqlen_new + s, block_size);
        const int64_t ns = nslots;
        attn_tensor sm = attn_tensor_make(slots, ATTN_DTYPE_I64, 1, &ns);
        attn_cache_write_options w;
        attn_cache_write_options_init(&w);
        w.k_scale = p.k_scale, w.v_scale = p.v_scale, w.k_scales = p.k_scales, w.v_scales = p.v_scales;
        st = attn_reshape_and_cache_ex(ctx, &k3, &v3, kv_cache, &sm, &w);
    }
    attn_tensor rkv = *kv_cache;
    if (st == ATTN_STATUS_OK && lp) { /* keys from cache_leftpad[b] through a table of single rows */
        rkv.shape[1] = num_blocks * block_size;
        rkv.strides[1] = rkv.strides[2] = row_stride;
        rkv.shape[2] = 1;
        for (int64_t b = 0; st == ATTN_STATUS_OK && b < batch; b++) {
            const int64_t pad = KVC_I32_1(lp, b);
            rsl[b] = (int32_t)(sl[b] - pad);
            for (int64_t j = 0; j < rsl[b]; j++)
                tab[b * maxlen + j] = (int32_t)attn_kvc_slot(bt_in, rows, b, pad + j, block_size);
        }
        tsl.data = rsl;
        bt = attn_kvc_i32(tab, 2, batch, maxlen);
    }
    if (st == ATTN_STATUS_OK)
        st = attn_kvc_attend(ctx, &q3, &rkv, &tqsl, &tsl, &bt, &p, &o3, lse_opt ? &tlse : NULL, slopes, seqlen_q);
    if (st == ATTN_STATUS_OK && lse_n > 0) { /* [nheads, batch·seqlen_q] -> [batch, nheads, seqlen_q] */
        const int64_t *ls = lse_opt->strides;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t h = 0; h < nheads; h++)
                for (int64_t s = 0; s < seqlen_q; s++)
                    ((float *)lse_opt->data)[b * ls[0] + h * ls[1] + s * ls[2]] = lse3[h * nrows + b * seqlen_q + s];
    }
    free(owned);
    return st;
}
