/*
 * validate.c — shared option/mask/overlap validation for the entry points.
 */
#include "api/validate.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

attn_status attn_sized_read(const void *in, size_t known, size_t min, const char *name, void *out, size_t *in_size) {
    size_t size;
    memcpy(&size, in, sizeof size);
    ATTN_CHECK(size >= min, ATTN_STATUS_INVALID_ARGUMENT,
               "%s.struct_size=%zu: expected >= %zu (set it with the struct's _init function)", name, size, min);
    ATTN_CHECK(size <= ATTN_STRUCT_SIZE_MAX, ATTN_STATUS_INVALID_ARGUMENT,
               "%s.struct_size=%zu exceeds ATTN_STRUCT_SIZE_MAX=%zu (set it with the struct's _init function)", name,
               size, ATTN_STRUCT_SIZE_MAX);
    const unsigned char *bytes = (const unsigned char *)in;
    for (size_t i = known; i < size; i++)
        ATTN_CHECK(bytes[i] == 0, ATTN_STATUS_UNSUPPORTED,
                   "%s.struct_size=%zu: byte %zu, past this library's %zu-byte struct, is nonzero (a field this "
                   "library does not know is set)",
                   name, size, i, known);
    memcpy(out, in, size < known ? size : known);
    memcpy(out, &known, sizeof known);
    *in_size = size;
    return ATTN_STATUS_OK;
}

/* 1 if the field [offset, offset + size) lies wholly inside a caller's struct_size. */
static int attn_field_fits(size_t struct_size, size_t offset, size_t size) { return offset + size <= struct_size; }

attn_status attn_params_copy(attn_params *dst, const attn_params *src) {
    ATTN_CHECK(dst != NULL, ATTN_STATUS_INVALID_ARGUMENT, "dst: is NULL");
    attn_params p;
    attn_params_init(&p);
    if (src) {
        size_t size;
        ATTN_TRY(attn_sized_read(src, sizeof p, ATTN_PARAMS_SIZE_MIN, "params", &p, &size));
        /* fields appended after the first version: defaults unless they lie wholly inside struct_size */
        if (!attn_field_fits(size, offsetof(attn_params, k_scales), sizeof p.k_scales)) p.k_scales = NULL;
        if (!attn_field_fits(size, offsetof(attn_params, v_scales), sizeof p.v_scales)) p.v_scales = NULL;
    }
    *dst = p;
    return ATTN_STATUS_OK;
}

attn_status attn_quant_params_read(const attn_quant_params *in, attn_quant_params *out) {
    attn_quant_params q;
    attn_quant_params_init(&q, ATTN_QUANT_FP8_E4M3);
    if (in) {
        size_t size;
        ATTN_TRY(attn_sized_read(in, sizeof q, ATTN_QUANT_PARAMS_SIZE_MIN, "qp", &q, &size));
    }
    *out = q;
    return ATTN_STATUS_OK;
}

attn_status attn_cache_write_options_read(const attn_cache_write_options *in, attn_cache_write_options *out) {
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    if (in) {
        size_t size;
        ATTN_TRY(attn_sized_read(in, sizeof o, ATTN_CACHE_WRITE_OPTIONS_SIZE_MIN, "opts", &o, &size));
    }
    *out = o;
    return ATTN_STATUS_OK;
}

attn_status attn_check_fp8_scale(float scale, const char *name, attn_dtype cache_dtype) {
    ATTN_CHECK(isfinite(scale) && scale > 0.0f, ATTN_STATUS_INVALID_ARGUMENT,
               "%s=%g: expected a finite value > 0 for the %s kv_cache", name, (double)scale,
               attn_dtype_name(cache_dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_check_fp8_scales(const float *scales, int64_t num_kv_heads, const char *name, attn_dtype cache_dtype) {
    if (!scales) return ATTN_STATUS_OK;
    for (int64_t g = 0; g < num_kv_heads; g++)
        ATTN_CHECK(isfinite(scales[g]) && scales[g] > 0.0f, ATTN_STATUS_INVALID_ARGUMENT,
                   "%s[%lld]=%g: expected a finite value > 0 for the %s kv_cache", name, (long long)g,
                   (double)scales[g], attn_dtype_name(cache_dtype));
    return ATTN_STATUS_OK;
}

attn_status attn_opts_resolve(const attn_params *params, int64_t num_heads, int64_t head_size, int allow_masks,
                              attn_opts *opts) {
    attn_params def;
    ATTN_TRY(attn_params_copy(&def, params));
    params = &def;
    ATTN_CHECK(isfinite(params->softmax_scale), ATTN_STATUS_INVALID_ARGUMENT,
               "params.softmax_scale=%g is not finite", (double)params->softmax_scale);
    ATTN_CHECK(params->causal >= ATTN_CAUSAL_NONE && params->causal <= ATTN_CAUSAL_TOP_LEFT,
               ATTN_STATUS_INVALID_ARGUMENT, "params.causal=%d is not an attn_causal value", (int)params->causal);
    ATTN_CHECK(params->window_left >= -1, ATTN_STATUS_INVALID_ARGUMENT,
               "params.window_left=%d, expected >= -1 (-1 = unbounded)", (int)params->window_left);
    ATTN_CHECK(params->window_right >= -1, ATTN_STATUS_INVALID_ARGUMENT,
               "params.window_right=%d, expected >= -1 (-1 = unbounded)", (int)params->window_right);
    ATTN_CHECK(isfinite(params->softcap) && params->softcap >= 0.0f, ATTN_STATUS_INVALID_ARGUMENT,
               "params.softcap=%g, expected a finite value >= 0 (0 = off)", (double)params->softcap);
    if (params->alibi_slopes)
        for (int64_t h = 0; h < num_heads; h++)
            ATTN_CHECK(isfinite(params->alibi_slopes[h]), ATTN_STATUS_INVALID_ARGUMENT,
                       "params.alibi_slopes[%lld]=%g is not finite", (long long)h, (double)params->alibi_slopes[h]);
    if (params->sinks)
        for (int64_t h = 0; h < num_heads; h++)
            ATTN_CHECK(isfinite(params->sinks[h]), ATTN_STATUS_INVALID_ARGUMENT,
                       "params.sinks[%lld]=%g is not finite", (long long)h, (double)params->sinks[h]);
    ATTN_CHECK(allow_masks || (!params->mask && !params->key_padding_mask && !params->additive_mask),
               ATTN_STATUS_UNSUPPORTED, "params.%s: not supported by this entry point (dense masks: attn_forward)",
               params->mask ? "mask" : params->key_padding_mask ? "key_padding_mask" : "additive_mask");
    opts->softmax_scale =
        params->softmax_scale != 0.0f ? params->softmax_scale : (float)(1.0 / sqrt((double)head_size));
    opts->causal = params->causal;
    opts->window_left = params->window_left;
    opts->window_right = params->window_right;
    opts->softcap = params->softcap;
    opts->alibi_slopes = params->alibi_slopes;
    opts->sinks = params->sinks;
    opts->mask = params->mask;
    opts->key_padding_mask = params->key_padding_mask;
    opts->additive_mask = params->additive_mask;
    opts->k_scale = opts->v_scale = 1.0f; /* the paged entries set an fp8 cache's scales */
    opts->k_scales = opts->v_scales = NULL;
    return ATTN_STATUS_OK;
}

attn_status attn_opts_resolve_kv_scales(const attn_params *params, attn_dtype cache_dtype, int64_t num_kv_heads,
                                        attn_opts *opts) {
    if (!attn_dtype_is_fp8(cache_dtype)) return ATTN_STATUS_OK;
    attn_params pp;
    ATTN_TRY(attn_params_copy(&pp, params));
    /* a per-head array replaces its scalar, which is then not read (nor checked) */
    if (pp.k_scales) ATTN_TRY(attn_check_fp8_scales(pp.k_scales, num_kv_heads, "params.k_scales", cache_dtype));
    else ATTN_TRY(attn_check_fp8_scale(pp.k_scale, "params.k_scale", cache_dtype));
    if (pp.v_scales) ATTN_TRY(attn_check_fp8_scales(pp.v_scales, num_kv_heads, "params.v_scales", cache_dtype));
    else ATTN_TRY(attn_check_fp8_scale(pp.v_scale, "params.v_scale", cache_dtype));
    opts->k_scale = pp.k_scale, opts->v_scale = pp.v_scale;
    opts->k_scales = pp.k_scales, opts->v_scales = pp.v_scales;
    return ATTN_STATUS_OK;
}

static attn_status attn_check_bool(const attn_tensor *t, const char *name) {
    ATTN_CHECK(t->dtype == ATTN_DTYPE_BOOL || t->dtype == ATTN_DTYPE_U8, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: dtype %s, expected bool or u8", name, attn_dtype_name(t->dtype));
    return ATTN_STATUS_OK;
}

/* A mask view broadcast to [batch, num_heads, seq_q, seq_k]: ndim 1..4, right-aligned, each dimension 1 or
 * the full size (torch SDPA / NumPy broadcasting); data aligned to its element size. */
static attn_status attn_check_broadcast(const attn_tensor *m, const char *name, int64_t batch, int64_t num_heads,
                                        int64_t seq_q, int64_t seq_k) {
    static const char *const dim_names[4] = {"batch", "num_heads", "seq_q", "seq_k"};
    const int64_t full[4] = {batch, num_heads, seq_q, seq_k};
    ATTN_TRY(attn_tensor_check(m, name, -1, 0));
    ATTN_CHECK(m->ndim >= 1 && m->ndim <= 4, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: ndim=%d, expected 1..4 (broadcast to [batch, num_heads, seq_q, seq_k], right-aligned)", name,
               (int)m->ndim);
    for (int32_t d = 0; d < m->ndim; d++) {
        const int32_t a = 4 - m->ndim + d;
        ATTN_CHECK(m->shape[d] == 1 || m->shape[d] == full[a], ATTN_STATUS_INVALID_ARGUMENT,
                   "%s: shape[%d]=%lld, expected %s=%lld (or 1 to broadcast)", name, (int)d, (long long)m->shape[d],
                   dim_names[a], (long long)full[a]);
    }
    ATTN_TRY(attn_validate_aligned(m, name));
    return ATTN_STATUS_OK;
}

attn_status attn_validate_masks(const attn_opts *opts, int64_t batch, int64_t num_heads, int64_t seq_q,
                                int64_t seq_k) {
    if (opts->mask) {
        const attn_tensor *m = opts->mask;
        ATTN_TRY(attn_tensor_check(m, "params.mask", -1, 0));
        ATTN_CHECK(m->dtype == ATTN_DTYPE_BOOL || m->dtype == ATTN_DTYPE_U8, ATTN_STATUS_INVALID_ARGUMENT,
                   "params.mask: dtype %s, expected bool or u8 (a float mask is params.additive_mask)",
                   attn_dtype_name(m->dtype));
        ATTN_TRY(attn_check_broadcast(m, "params.mask", batch, num_heads, seq_q, seq_k));
    }
    if (opts->additive_mask) {
        const attn_tensor *m = opts->additive_mask;
        ATTN_TRY(attn_tensor_check(m, "params.additive_mask", -1, 0));
        ATTN_CHECK(m->dtype == ATTN_DTYPE_F32 || m->dtype == ATTN_DTYPE_F16 || m->dtype == ATTN_DTYPE_BF16,
                   ATTN_STATUS_INVALID_ARGUMENT,
                   "params.additive_mask: dtype %s, expected f32, f16 or bf16 (a boolean mask is params.mask)",
                   attn_dtype_name(m->dtype));
        ATTN_TRY(attn_check_broadcast(m, "params.additive_mask", batch, num_heads, seq_q, seq_k));
    }
    if (opts->key_padding_mask) {
        const attn_tensor *m = opts->key_padding_mask;
        ATTN_TRY(attn_tensor_check(m, "params.key_padding_mask", 2, 0));
        ATTN_TRY(attn_check_bool(m, "params.key_padding_mask"));
        ATTN_TRY(attn_tensor_check_dim(m, "params.key_padding_mask", 0, batch, "batch"));
        ATTN_TRY(attn_tensor_check_dim(m, "params.key_padding_mask", 1, seq_k, "seq_k"));
    }
    return ATTN_STATUS_OK;
}

attn_status attn_validate_distinct_elements(const attn_tensor *out, const char *name) {
    ATTN_CHECK(!attn_tensor_self_overlaps(out), ATTN_STATUS_INVALID_ARGUMENT,
               "%s: its elements overlap in memory (a broadcast / stride-0 or interleaved view); an output needs "
               "one memory location per element", name);
    return ATTN_STATUS_OK;
}

attn_status attn_validate_cache_elements(const attn_tensor *cache, const char *name) {
    attn_tensor half = *cache; /* strides[0] = 0: the halves are one cache, checked once */
    if (cache->ndim >= 1 && cache->strides[0] == 0)
        half.shape[0] = 1;
    ATTN_CHECK(
        !attn_tensor_self_overlaps(&half), ATTN_STATUS_INVALID_ARGUMENT,
        "%s: its elements overlap in memory (a stride-0 or interleaved view, or key and value halves that meet); "
        "a cache that is written needs one memory location per element",
        name);
    return ATTN_STATUS_OK;
}

attn_status attn_validate_no_overlap(const attn_tensor *out, const char *out_name, const attn_tensor *const *ins,
                                     const char *const *in_names, int n) {
    ATTN_TRY(attn_validate_distinct_elements(out, out_name));
    for (int i = 0; i < n; i++)
        if (ins[i])
            ATTN_CHECK(!attn_tensor_overlap(out, ins[i]), ATTN_STATUS_INVALID_ARGUMENT,
                       "%s: overlaps %s in memory", out_name, in_names[i]);
    return ATTN_STATUS_OK;
}

attn_status attn_validate_aligned(const attn_tensor *t, const char *name) {
    size_t es = attn_dtype_size(t->dtype);
    ATTN_CHECK(es <= 1 || ((uintptr_t)t->data % es) == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "%s: data pointer %p is not aligned to its element size %zu", name, t->data, es);
    return ATTN_STATUS_OK;
}

attn_status attn_validate_workspace(const void *workspace, size_t need, size_t align, const attn_tensor *const *views,
                                    const char *const *names, int n) {
    if (need == 0) return ATTN_STATUS_OK;
    ATTN_CHECK((uint64_t)need <= ATTN_MAX_WORKSPACE_BYTES, ATTN_STATUS_OVERFLOW,
               "workspace: %zu bytes exceed ATTN_MAX_WORKSPACE_BYTES=%llu", need,
               (unsigned long long)ATTN_MAX_WORKSPACE_BYTES);
    ATTN_CHECK(workspace != NULL && (uintptr_t)workspace % align == 0, ATTN_STATUS_INVALID_ARGUMENT,
               "workspace: %p is NULL or not %zu-byte aligned", workspace, align);
    const uintptr_t w = (uintptr_t)workspace;
    ATTN_CHECK(w <= UINTPTR_MAX - need, ATTN_STATUS_INVALID_ARGUMENT,
               "workspace: %p + %zu bytes wraps around the address space", workspace, need);
    for (int i = 0; i < n; i++) {
        if (!views[i]) continue;
        /* validate before measuring: a view is only spanned once its ndim/shape/strides are known good (a kv_cache
         * over two allocations through its mirror image); then compared as attn_tensor_overlap does, slice by
         * slice for such a cache, so a workspace in the gap between its halves is not an overlap */
        attn_tensor m;
        ATTN_TRY(attn_tensor_mirror0(views[i], names[i], &m));
        ATTN_TRY(attn_tensor_check(&m, names[i], -1, 0));
        const int64_t ws_shape[1] = {(int64_t)need};
        const attn_tensor ws = attn_tensor_make((void *)(uintptr_t)workspace, ATTN_DTYPE_U8, 1, ws_shape);
        ATTN_CHECK(!attn_tensor_overlap(views[i], &ws), ATTN_STATUS_INVALID_ARGUMENT,
                   "workspace: overlaps %s in memory", names[i]);
    }
    return ATTN_STATUS_OK;
}

attn_status attn_validate_dims(int64_t num_heads, int64_t num_kv_heads, int64_t seq_q, int64_t seq_k) {
    ATTN_CHECK(num_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
               "q: num_heads=%lld exceeds ATTN_MAX_HEADS=%d", (long long)num_heads, ATTN_MAX_HEADS);
    ATTN_CHECK(num_kv_heads <= ATTN_MAX_HEADS, ATTN_STATUS_INVALID_ARGUMENT,
               "k: num_kv_heads=%lld exceeds ATTN_MAX_HEADS=%d", (long long)num_kv_heads, ATTN_MAX_HEADS);
    ATTN_CHECK(seq_q <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT, "q: seq_q=%lld exceeds ATTN_MAX_SEQ_LEN=%lld",
               (long long)seq_q, (long long)ATTN_MAX_SEQ_LEN);
    ATTN_CHECK(seq_k <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT, "k: seq_k=%lld exceeds ATTN_MAX_SEQ_LEN=%lld",
               (long long)seq_k, (long long)ATTN_MAX_SEQ_LEN);
    return ATTN_STATUS_OK;
}

attn_status attn_work_add(int64_t *work, int64_t rows, int64_t num_heads, int64_t seq_q, int64_t seq_k) {
    int64_t w;
    ATTN_CHECK(attn_mul_i64(rows, num_heads, &w) && attn_mul_i64(w, seq_q, &w) && attn_mul_i64(w, seq_k, &w) &&
                   attn_add_i64(*work, w, &w) && w <= ATTN_MAX_WORK,
               ATTN_STATUS_OVERFLOW,
               "q: %lld x num_heads=%lld x seq_q=%lld x seq_k=%lld score pairs (with earlier sequences) exceed "
               "ATTN_MAX_WORK=2^48",
               (long long)rows, (long long)num_heads, (long long)seq_q, (long long)seq_k);
    *work = w;
    return ATTN_STATUS_OK;
}

attn_status attn_validate_block_table(const attn_tensor *bt, const int32_t *seq_lens, int64_t seq_lens_stride,
                                      int64_t num_rows, int64_t block_size, int64_t num_blocks, const char *rows_name) {
    ATTN_CHECK(bt != NULL, ATTN_STATUS_INVALID_ARGUMENT, "block_table: is NULL");
    ATTN_TRY(attn_tensor_check(bt, "block_table", 2, 0));
    ATTN_TRY(attn_tensor_check_dtype(bt, "block_table", ATTN_DTYPE_I32));
    ATTN_TRY(attn_validate_aligned(bt, "block_table"));
    ATTN_TRY(attn_tensor_check_dim(bt, "block_table", 0, num_rows, rows_name));
    ATTN_CHECK(bt->shape[1] <= 1 || bt->strides[1] == 1, ATTN_STATUS_INVALID_ARGUMENT,
               "block_table: strides[1]=%lld, the last dimension must be contiguous (stride 1)",
               (long long)bt->strides[1]);
    const int32_t *ids = (const int32_t *)bt->data;
    const int64_t max_blocks = bt->shape[1];
    int64_t blocks_used = 0;
    for (int64_t r = 0; r < num_rows; r++) {
        const int64_t seq_len = seq_lens[r * seq_lens_stride]; /* >= 0: the caller's check */
        const int64_t used = (seq_len + block_size - 1) / block_size;
        ATTN_CHECK(used <= max_blocks, ATTN_STATUS_INVALID_ARGUMENT,
                   "seq_lens: entry %lld = %lld needs %lld blocks of %lld > block_table width %lld", (long long)r,
                   (long long)seq_len, (long long)used, (long long)block_size, (long long)max_blocks);
        blocks_used += used;
        ATTN_CHECK(blocks_used <= ATTN_MAX_SEQ_LEN, ATTN_STATUS_INVALID_ARGUMENT,
                   "block_table: rows 0..%lld use %lld blocks, more than ATTN_MAX_SEQ_LEN=%lld", (long long)r,
                   (long long)blocks_used, (long long)ATTN_MAX_SEQ_LEN);
        for (int64_t k = 0; k < used; k++) {
            const int64_t id = ids[r * bt->strides[0] + k];
            ATTN_CHECK(id >= 0 && id < num_blocks, ATTN_STATUS_INVALID_ARGUMENT,
                       "block_table: entry [%lld][%lld] = %lld %s num_blocks=%lld%s", (long long)r, (long long)k,
                       (long long)id, id < 0 ? "< 0, expected in [0," : ">=", (long long)num_blocks, id < 0 ? ")" : "");
        }
    }
    return ATTN_STATUS_OK;
}
