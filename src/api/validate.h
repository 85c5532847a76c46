/*
 * validate.h — validation shared by the entry points: options, masks, output overlap. Each function sets
 * the last-error message naming the argument and returns a status; none writes caller data.
 */
#ifndef ATTN_API_VALIDATE_H
#define ATTN_API_VALIDATE_H

#include "core/problem.h"

/* Reads a caller's size-prefixed struct (attn.h "Size-prefixed option structs"): `in` holds struct_size in its
 * first size_t; `known` is this library's sizeof, `min` the struct's ATTN_*_SIZE_MIN. Checks min <= struct_size
 * <= ATTN_STRUCT_SIZE_MAX (INVALID_ARGUMENT) and that every byte in [known, struct_size) is 0 (UNSUPPORTED),
 * naming `name` ("params.struct_size=8: ..."), then copies min(struct_size, known) bytes over `out` (which holds
 * the defaults) and sets out's struct_size to `known`. *in_size gets struct_size, so the caller can restore the
 * defaults of fields that do not lie wholly inside it. Nothing is written to `out` on failure. */
attn_status attn_sized_read(const void *in, size_t known, size_t min, const char *name, void *out, size_t *in_size);

/* An internal copy of a public entry's params, read by the struct_size rule (attn_params_copy): one line at
 * the top of each entry that takes `const attn_params *params`, after which `params` points at the copy
 * (never NULL). No allocation: the copy lives on the entry's stack. */
#define ATTN_PARAMS_LOAD(params)                                                                                       \
    attn_params params##_loaded_;                                                                                      \
    ATTN_TRY(attn_params_copy(&params##_loaded_, (params)));                                                           \
    (params) = &params##_loaded_

/* The same for attn_quant_params (NULL = attn_quant_params_init(ATTN_QUANT_FP8_E4M3)). */
attn_status attn_quant_params_read(const attn_quant_params *in, attn_quant_params *out);

/* The same for attn_cache_write_options (NULL = the defaults). */
attn_status attn_cache_write_options_read(const attn_cache_write_options *in, attn_cache_write_options *out);

/* Resolves params (NULL = defaults) into opts: softmax_scale finite (0 → 1/sqrt(head_size)), causal in the
 * enum, windows >= −1, softcap finite and >= 0, alibi/sink values finite. Masks are copied but validated
 * separately (attn_validate_masks); with allow_masks == 0 a mask is UNSUPPORTED. */
attn_status attn_opts_resolve(const attn_params *params, int64_t num_heads, int64_t head_size, int allow_masks,
                              attn_opts *opts);

/* The dequantization scales of a KV cache read (every paged entry): for an fp8 cache, params->k_scale and
 * params->v_scale (NULL params: the defaults, 1) must be finite and > 0 (INVALID_ARGUMENT naming the field) and
 * are copied into opts; so are the per-head arrays params->k_scales / v_scales when set, whose num_kv_heads
 * entries must each be finite and > 0 ("params.k_scales[2]=0: ..."). Float caches ignore all of them, as vLLM
 * does (opts keeps 1 and NULL). */
attn_status attn_opts_resolve_kv_scales(const attn_params *params, attn_dtype cache_dtype, int64_t num_kv_heads,
                                        attn_opts *opts);

/* One fp8 scale (a cache write's or read's k_scale / v_scale): finite and > 0, else INVALID_ARGUMENT
 * "<name>=<value>: expected a finite value > 0 for the <dtype> kv_cache". */
attn_status attn_check_fp8_scale(float scale, const char *name, attn_dtype cache_dtype);
/* A per-head scale array [num_kv_heads] (NULL: nothing to check): each entry as attn_check_fp8_scale, the
 * message naming "<name>[g]". */
attn_status attn_check_fp8_scales(const float *scales, int64_t num_kv_heads, const char *name, attn_dtype cache_dtype);

/* params->mask: bool/u8, 4-D [B|1, H|1, Sq, Sk] or 2-D [Sq, Sk]; key_padding_mask: bool/u8 [B, Sk]. */
attn_status attn_validate_masks(const attn_opts *opts, int64_t batch, int64_t num_heads, int64_t seq_q,
                                int64_t seq_k);

/* An output view must give each element its own memory (attn_tensor_self_overlaps): INVALID_ARGUMENT naming it. */
attn_status attn_validate_distinct_elements(const attn_tensor *out, const char *name);

/* A kv_cache [2, num_blocks, block_size, num_kv_heads, head_size] that a call writes: every element of a half its own
 * memory, and the halves apart element by element, unless strides[0] is 0 (both halves one cache: a caller's single
 * key or value cache viewed twice; key rows are written before value rows, so the value stays). INVALID_ARGUMENT
 * naming it. */
attn_status attn_validate_cache_elements(const attn_tensor *cache, const char *name);

/* `out` (named) must give each element its own memory and overlap none of the inputs (NULL entries ignored). */
attn_status attn_validate_no_overlap(const attn_tensor *out, const char *out_name, const attn_tensor *const *ins,
                                     const char *const *in_names, int n);

/* A caller workspace of `need` bytes (every entry that takes one): when need > 0 it is at most
 * ATTN_MAX_WORKSPACE_BYTES, non-NULL, `align`-aligned, and overlaps none of the n views (every input and output
 * of the call; NULL entries ignored). Each view is validated (attn_tensor_check) before it is measured. */
attn_status attn_validate_workspace(const void *workspace, size_t need, size_t align, const attn_tensor *const *views,
                                    const char *const *names, int n);

/* Documented limits of a call's dimensions: heads <= ATTN_MAX_HEADS, seq_q/seq_k <= ATTN_MAX_SEQ_LEN. */
attn_status attn_validate_dims(int64_t num_heads, int64_t num_kv_heads, int64_t seq_q, int64_t seq_k);

/* *work += rows·num_heads·seq_q·seq_k score pairs, checked against ATTN_MAX_WORK (OVERFLOW beyond). */
attn_status attn_work_add(int64_t *work, int64_t rows, int64_t num_heads, int64_t seq_q, int64_t seq_k);

/* The block table of a paged read against the sequence lengths it serves, checked in one place for every paged
 * entry: block_table int32 [num_rows, max_blocks] with its last dimension contiguous; each row's seq_len (num_rows
 * int32 entries `seq_lens_stride` apart, a validated view whose entries the caller has checked to be >= 0, with its
 * own bounds and message) needing ceil(seq_len / block_size) <= max_blocks ids, at most ATTN_MAX_SEQ_LEN ids in
 * all; and every id a row uses in [0, num_blocks). Ids past a row's used prefix are never read, so they are not checked
 * (vLLM pads with any value). INVALID_ARGUMENT naming the entry ("block_table: entry [1][3] = 9 >= num_blocks=8");
 * `rows_name` is what the first dimension counts in the message ("num_reqs", "rows"). */
attn_status attn_validate_block_table(const attn_tensor *block_table, const int32_t *seq_lens, int64_t seq_lens_stride,
                                      int64_t num_rows, int64_t block_size, int64_t num_blocks, const char *rows_name);

/* Data pointer aligned to the element size. */
attn_status attn_validate_aligned(const attn_tensor *t, const char *name);

#endif
