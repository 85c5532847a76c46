/*
 * attn_experimental.h — the experimental entries of libattn: diffusion attention (padded, packed, piecewise,
 * paged piecewise, K/V prefix, pre-scaled) and quantized attention (MX / FP4 / E8M0 codecs, Hadamard rotation,
 * attn_forward_quant).
 *
 * Stability: EXPERIMENTAL. Everything declared here may change or go in any minor release (and, before 1.0, in
 * any release), signature, semantics and symbol alike; CHANGELOG.md marks each such change "Experimental". The
 * stable contract is include/attn/attn.h alone (its top comment, "Stability"). Their semantics follow upstream
 * projects that are still moving (vllm-omni, MindIE-SD); docs/DIFFUSION.md summarises them with measured
 * accuracy.
 *
 * Opt in explicitly: nothing includes this header for you.
 *     #include <attn/attn_experimental.h>   (it includes <attn/attn.h> itself)
 * It is installed next to attn.h and covered by the same find_package(attn) / pkg-config flags. The symbols are
 * exported by the same libattn and listed in abi/exported_symbols.txt like the stable ones; listing a symbol
 * there records that it exists, not that it is stable.
 *
 * The conventions of attn.h hold here too: every function returns attn_status and names the bad argument in
 * attn_last_error(); strides count elements, the last dimension is contiguous; nothing is written on failure.
 */
#ifndef ATTN_ATTN_EXPERIMENTAL_H
#define ATTN_ATTN_EXPERIMENTAL_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================================================
 * Serving: a key cache and a value cache apart (a key cache stored by dimension)
 * ================================================================================================ */

/* attn_paged_attention over a key cache and a value cache given apart, each a view
 * [num_blocks, block_size, num_kv_heads, head_size] of the same shape and dtype (f32/f16/bf16/fp8_e4m3/fp8_e5m2),
 * instead of one kv_cache [2, ...]. The value cache's head dimension is contiguous (strides[3] = 1); the key cache
 * may have any non-negative strides (strides[3] > 0 where head_size > 1), in particular a key cache stored by dimension
 * — per block and kv head the keys of one head dimension side by side, memory [num_blocks, num_kv_heads, head_size,
 * block_size], viewed with strides {num_kv_heads·head_size·block_size, 1, head_size·block_size, block_size} (vLLM's GPU
 * key cache with x = 1). There the decode Q·Kᵀ loads a column of keys instead of transposing key rows in registers (the
 * avx512 table; others gather the keys into rows first), with the same multiply-adds in the same order: on every exact
 * table outputs and LSE are bitwise those of attn_paged_attention on the same keys stored as rows (docs/KERNELS.md
 * §5). The opt-in tables (avx512bf16, amx) score gathered keys in float32 there, not with their bf16 dot products,
 * so they differ from their own one-cache results within their stated tolerance.
 *   q, query_start_loc, seq_lens, block_table, params, out, lse_opt: as attn_paged_attention (the block table
 *   indexes shape[0] of both caches; an fp8 cache uses params->k_scale / v_scale as there).
 * Returns INVALID_ARGUMENT (names key_cache / value_cache: a NULL cache, ndim != 4, a shape or dtype that differs
 * between them, value_cache's strides[3] != 1, key_cache's strides[3] = 0, and as attn_paged_attention), OVERFLOW,
 * UNSUPPORTED.
 * Source: vLLM's paged attention with separate key_cache / value_cache (csrc/attention/paged_attention_v1.cu). */
ATTN_API attn_status attn_paged_attention_kv(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *key_cache,
                                             const attn_tensor *value_cache, const attn_tensor *query_start_loc,
                                             const attn_tensor *seq_lens, const attn_tensor *block_table,
                                             const attn_params *params, attn_tensor *out, attn_tensor *lse_opt);
/* The oracle twin (double accumulation, docs/SEMANTICS.md §6), reading each key element at its own address. */
ATTN_API attn_status attn_ref_paged_attention_kv(const attn_tensor *q, const attn_tensor *key_cache,
                                                 const attn_tensor *value_cache, const attn_tensor *query_start_loc,
                                                 const attn_tensor *seq_lens, const attn_tensor *block_table,
                                                 const attn_params *params, attn_tensor *out, attn_tensor *lse_opt);

/* attn_reshape_and_cache_ex into a key cache and a value cache given apart (the views of attn_paged_attention_kv):
 * for every token t with slot_mapping[t] >= 0, key[t] goes to key_cache[slot / block_size][slot % block_size] (each
 * element at its own address: a key cache stored by dimension is written element by element) and value[t] to
 * value_cache[...]; the same conversions and fp8 codes (opts: k_scale / v_scale or per-head arrays). Every check
 * of attn_reshape_and_cache_ex is made before anything is written, and each cache's elements need their own memory
 * (attn_validate_distinct_elements' rule), the two caches apart from each other.
 * Returns INVALID_ARGUMENT, OVERFLOW, UNSUPPORTED (opts->notify: KV-stored events describe one kv_cache). */
ATTN_API attn_status attn_reshape_and_cache_kv(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                               attn_tensor *key_cache, attn_tensor *value_cache,
                                               const attn_tensor *slot_mapping, const attn_cache_write_options *opts);

/* ================================================================================================
 * Diffusion: piecewise spans, pre-scaling, quantized attention
 * ================================================================================================ */

/* Semantics: vllm-omni diffusion FlashAttentionImpl and MindIE-SD, summarised with
 * measured accuracy in docs/DIFFUSION.md. Masks (keep-mask and additive mask broadcast to [B, H, Sq, Sk], key
 * padding [B, Sk]) are the attn_params fields of attn.h and work with attn_forward / attn_ref_forward
 * (cross-attention semantics for a key padding mask: it removes keys only and every query row is computed). */

/* ---- Self-attention with a key-padding mask: unpad → packed → pad (docs/DIFFUSION.md §1) ------------
 * The valid tokens (key_padding_mask[b][s] != 0) of batch row b form ONE compacted sequence (holes anywhere,
 * not only suffix padding): Q, K and V are gathered with the same indices and attention runs in compacted
 * index space (causal and window apply there), then rows are scattered back. Padded query rows output
 * exactly 0 with LSE −inf. No Sq×Sk mask is built and Q/K/V are not copied: K/V rows are reached through a
 * block table of block_size 1 and query rows through an index list, both kept in the caller's workspace.
 *   q [batch, seq, num_heads, head_size] (BSND) or BNSD; k, v with seq_k == seq_q (self-attention; for
 *   cross-attention use attn_forward with params.key_padding_mask); out, lse_opt as attn_forward.
 *   key_padding_mask: bool/u8 [batch, seq] (true = valid token).
 *   params: as attn_forward. params.mask and params.additive_mask are allowed, broadcast to the UNPADDED
 *   [batch, num_heads, seq, seq] and indexed by token (compacted row i and key j read element
 *   (b, h, token_i, token_j)); they combine with the key padding (ANDed / added on the valid keys).
 *   params.key_padding_mask must be NULL (UNSUPPORTED: pass it as key_padding_mask).
 *   workspace: >= attn_forward_padded_workspace_size(batch, seq) bytes, 8-byte aligned (NULL if that is 0).
 * Returns INVALID_ARGUMENT (seq_k != seq_q, bad mask shape/dtype, ...), UNSUPPORTED, WORKSPACE_TOO_SMALL,
 * OVERFLOW. */
ATTN_API attn_status attn_forward_padded_workspace_size(int64_t batch, int64_t seq_len, size_t *bytes);
ATTN_API attn_status attn_forward_padded(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                         const attn_tensor *k, const attn_tensor *v,
                                         const attn_tensor *key_padding_mask, const attn_params *params,
                                         attn_tensor *out, attn_tensor *lse_opt, void *workspace,
                                         size_t workspace_size);
/* Oracle twin (the same arguments and workspace but the context). */
ATTN_API attn_status attn_ref_forward_padded(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                             const attn_tensor *v, const attn_tensor *key_padding_mask,
                                             const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                             void *workspace, size_t workspace_size);

/* ---- Packed documents, batch 1 (flash-attn varlen, one row) ---------------------------------------------
 * q [1, total_q, num_heads, head_size], k [1, total_k, num_kv_heads, head_size], v [1, total_k, num_kv_heads,
 * head_size_v], out [1, total_q, num_heads, head_size_v]; lse_opt float32 [num_heads, total_q] or NULL.
 * cu_seqlens_q/k int32 [num_docs+1] as attn_forward_varlen (any number of documents, zero-length legal, no
 * attention crosses a boundary; causal is bottom-right per document). For the TND layout call
 * attn_forward_varlen directly. Returns INVALID_ARGUMENT (e.g. "q: shape[0]=2, expected batch 1"),
 * UNSUPPORTED (masks), OVERFLOW. */
ATTN_API attn_status attn_forward_packed(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                         const attn_tensor *cu_seqlens_k, const attn_params *params,
                                         attn_tensor *out, attn_tensor *lse_opt);

/* ---- Piecewise mixed causal/full attention (full_attn_spans + query_ranges, docs/DIFFUSION.md §2) --- */
typedef struct attn_span {
    int64_t start; /* first global position of the span              */
    int64_t end;   /* one past the last (half-open [start, end))      */
} attn_span;

typedef struct attn_query_range {
    int64_t local_start;  /* local query rows [local_start, local_end) ...      */
    int64_t local_end;
    int64_t global_start; /* ... sit at global positions global_start + (i − local_start) */
} attn_query_range;

/* A query at global position p sees key j iff j < e when p lies in a span [a, e) (the whole prefix and
 * the whole span), else iff j <= p (causal). Keys are global positions [0, seq_k). The same spans apply to
 * every batch row (vllm-omni's homogeneous batch). Equals the oracle with the equivalent explicit mask
 * (tril + mask[a:e, :e] = true, rows of the query ranges) but never builds it: each row is a key range.
 *   q/k/v/out/lse_opt: as attn_forward (BSND or BNSD).
 *   spans: [num_spans] sorted by start, non-overlapping, 0 <= start < end <= seq_k; num_spans 0 = causal.
 *   query_ranges: [num_query_ranges] or NULL = one range (0, seq_q, seq_k − seq_q) (needs seq_q <= seq_k);
 *     contiguous from local row 0 to seq_q, each global range inside [0, seq_k).
 *   params: causal must be NONE (the spans define causality); mask/key_padding_mask/additive_mask must be
 *     NULL; window, soft-cap, ALiBi (distance |p − j| in global positions) and sinks apply.
 * Returns INVALID_ARGUMENT naming the span/range (e.g. "spans[1]=(2,4) starts before spans[0] ends at 8:
 * spans must be sorted and non-overlapping"), UNSUPPORTED (causal or masks combined with spans), OVERFLOW. */
ATTN_API attn_status attn_forward_piecewise(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                            const attn_tensor *k, const attn_tensor *v, const attn_span *spans,
                                            int64_t num_spans, const attn_query_range *query_ranges,
                                            int64_t num_query_ranges, const attn_params *params,
                                            attn_tensor *out, attn_tensor *lse_opt);
/* Oracle twin (literal span predicate). */
ATTN_API attn_status attn_ref_forward_piecewise(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                                const attn_tensor *v, const attn_span *spans, int64_t num_spans,
                                                const attn_query_range *query_ranges,
                                                int64_t num_query_ranges, const attn_params *params,
                                                attn_tensor *out, attn_tensor *lse_opt);

/* ---- Piecewise spans over a paged KV cache (vllm-omni run_paged_piecewise_plan, docs/DIFFUSION.md §3) -------
 * attn_forward_piecewise where batch row r's keys/values are the first seq_lens[r] tokens of its pages
 * (kv_cache[·][block_table[r][j / block_size]][j % block_size], written beforehand, e.g. by
 * attn_reshape_and_cache) instead of a dense K/V: the same span predicate, options and statuses. The rows
 * are vllm-omni's homogeneous batch (e.g. the CFG rows of one prompt): one query length for all rows, q a
 * [rows, query_len, ...] view with any strides, so each piece of a piecewise plan can also be run as its
 * own call on the strided slice q[:, s:e] / out[:, s:e] (query_ranges = {(0, e − s, offset + s)}); the
 * rows' bits are the same as those of the one whole call.
 *   q:           [rows, query_len, num_heads, head_size] f32/f16/bf16 (BSND; last dim contiguous)
 *   kv_cache:    [2, num_blocks, block_size, num_kv_heads, head_size] as attn_reshape_and_cache;
 *                head_size equals q's (no separate head_size_v, as in vllm-omni's paged adapter)
 *   seq_lens:    int32 [rows], keys of each row (cached prefix + this step's tokens), 0 .. ATTN_MAX_SEQ_LEN
 *   block_table: int32 [rows, max_blocks] (last dim contiguous); entries [r][0, ceil(seq_lens[r] /
 *                block_size)) are read and must lie in [0, num_blocks); the rest are ignored
 *   spans:       [num_spans] global positions, sorted, non-overlapping, 0 <= start < end <= seq_lens[r]
 *                for every row (the same spans for every row, as the dense entry; rows whose span lists
 *                differ are separate calls)
 *   query_ranges: NULL with num_query_ranges 0 = per row the last query_len positions, (0, query_len,
 *                seq_lens[r] − query_len) (vllm-omni's row model: kv_start_pos = seq_len − query_len; needs
 *                query_len <= seq_lens[r]); or ranges as attn_forward_piecewise, the same for every row and
 *                inside [0, seq_lens[r]) of each
 *   params:      causal NONE, masks NULL; window, soft-cap, ALiBi (global positions) and sinks apply;
 *                k_scale / v_scale dequantize an fp8 cache (finite and > 0, INVALID_ARGUMENT otherwise), as in
 *                attn_paged_attention; float caches ignore them
 *   out:         [rows, query_len, num_heads, head_size], q's dtype, any strides, no overlap with inputs
 *   lse_opt:     float32 [rows, num_heads, query_len] (natural log) or NULL
 * Exactness: bitwise equal to attn_forward_piecewise on the same keys gathered into a dense
 * [rows, seq_len, num_kv_heads, head_size] tensor of the cache dtype (same driver, tiles at absolute key
 * positions), for any thread count. Returns INVALID_ARGUMENT (naming the row/entry, e.g. "block_table: entry
 * [1][3] = 9001 >= num_blocks=64", "spans[0]=(5,30): expected 0 <= start < end <= seq_lens[1]=19"),
 * UNSUPPORTED (causal or masks), OVERFLOW. Nothing is written unless OK. */
ATTN_API attn_status attn_forward_paged_piecewise(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                                  const attn_tensor *seq_lens, const attn_tensor *block_table,
                                                  const attn_span *spans, int64_t num_spans,
                                                  const attn_query_range *query_ranges, int64_t num_query_ranges,
                                                  const attn_params *params, attn_tensor *out, attn_tensor *lse_opt);
/* Oracle twin (double accumulation, literal span predicate; the same arguments but the context, and the same
 * checks). */
ATTN_API attn_status attn_ref_forward_paged_piecewise(const attn_tensor *q, const attn_tensor *kv_cache,
                                                      const attn_tensor *seq_lens, const attn_tensor *block_table,
                                                      const attn_span *spans, int64_t num_spans,
                                                      const attn_query_range *query_ranges,
                                                      int64_t num_query_ranges, const attn_params *params,
                                                      attn_tensor *out, attn_tensor *lse_opt);

/* ---- Prefix K/V slicing (docs/DIFFUSION.md §4) ---------------------------------------------------------
 * When the padding of K/V is a strict suffix, attention over K[:, :valid_kv_length], V[:, :valid_kv_length]
 * (zero-copy views) equals masking the suffix; Q keeps its full length. 0 <= valid_kv_length <= seq_k.
 * Arguments as attn_forward. causal must be NONE (slicing moves the bottom-right diagonal: UNSUPPORTED) and
 * params.mask / key_padding_mask / additive_mask must be NULL (UNSUPPORTED: they are sized for the unsliced keys). */
ATTN_API attn_status attn_forward_kv_prefix(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                            const attn_tensor *k, const attn_tensor *v,
                                            int64_t valid_kv_length, const attn_params *params,
                                            attn_tensor *out, attn_tensor *lse_opt);

/* ---- Power-of-two input pre-scaling (docs/DIFFUSION.md §4, LaserAttention laser_input_scale) ---
 * With c = 2^input_scale_log2: q, k, v are divided by c (copied, in their own dtype, into the workspace), the
 * softmax scale is multiplied by c² and the output by c:
 *     softmax((c²·scale)·(q/c)(k/c)ᵀ)·(v/c)·c = softmax(scale·q·kᵀ)·v.
 * Exact (bitwise equal to attn_forward for f32 data) as long as no q/c, k/c, v/c or out/c leaves the normal
 * range of its dtype; f16/bf16 values pushed into subnormals lose bits (see docs/DIFFUSION.md).
 *   input_scale_log2: 0..30. Other arguments as attn_forward (all params options apply).
 *   workspace: >= attn_forward_prescaled_workspace_size(q, k, v) bytes (contiguous copies of q, k, v),
 *   64-byte aligned recommended. Returns INVALID_ARGUMENT, WORKSPACE_TOO_SMALL, OVERFLOW, UNSUPPORTED. */
ATTN_API attn_status attn_forward_prescaled_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                                           const attn_tensor *v, size_t *bytes);
ATTN_API attn_status attn_forward_prescaled(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                            const attn_tensor *k, const attn_tensor *v, int32_t input_scale_log2,
                                            const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                            void *workspace, size_t workspace_size);

/* ---- Low-precision MX formats: encode/decode (OCP Microscaling v1.0) -------------------------------------
 * The FP8 codecs (attn_fp8_from_float, attn_quantize_fp8, ...) are stable and declared in attn.h. E2M1 encoding
 * is round-to-nearest-even with saturation (finite values beyond 6 and ±inf map to ±6); E2M1 has no NaN and
 * encodes NaN as +0 — an MX block holding a NaN or inf gets the NaN scale 0xFF instead. Values below half the
 * smallest subnormal flush to ±0. Decoding is exact. */
ATTN_API uint8_t attn_fp4_e2m1_from_float(float x);              /* low nibble: s.ee.m                */
ATTN_API float attn_fp4_e2m1_to_float(uint8_t nibble);           /* uses the low 4 bits                */
/* E8M0 shared scale 2^(bits − 127); 0xFF = NaN; 0x00 = 2^-127 (OCP; CANN's "0x00 = zero" is not followed). */
ATTN_API float attn_e8m0_to_float(uint8_t bits);

/* MX quantization of n contiguous values in blocks of 32 (the last block zero-padded), OCP MX v1.0 / MXR
 * _quantize_mx: shared_exp = floor(log2(max|V|)) − emax (emax 8 for E4M3, 15 for E5M2, 2 for E2M1), clamped
 * to [−127, 127] (an all-zero block gets −127); scales[b] = shared_exp + 127 (E8M0); element = encode(V / 2^
 * shared_exp) (saturating, so a block maximum with a mantissa above 1.75 (E4M3) / 1.5 (E2M1) is clipped).
 * A block with a NaN or inf gets scale 0xFF and decodes to NaN.
 *   element_format: FP8_E4M3, FP8_E5M2 (one byte per value) or FP4_E2M1 (packed, value 2i in the low nibble,
 *   (n+1)/2 bytes; an odd tail's high nibble is 0). scales: ceil(n/32) bytes.
 * Returns INVALID_ARGUMENT. */
ATTN_API attn_status attn_quantize_mx(attn_dtype element_format, const float *src, int64_t n,
                                      uint8_t *elements, uint8_t *scales);
ATTN_API attn_status attn_dequantize_mx(attn_dtype element_format, const uint8_t *elements,
                                        const uint8_t *scales, int64_t n, float *dst);

/* ---- Deterministic Hadamard rotation of Q and K (docs/DIFFUSION.md §5, vllm-omni get_quant_attention_rotation)
 * R = diag(s)·H_d/sqrt(d), H Sylvester, s_i = 2·(w_i mod 2) − 1 with w_i the i-th 32-bit output of MT19937
 * seeded with `seed` (vllm-omni's torch.Generator().manual_seed(425500); ATTN_HADAMARD_SEED). Rows are
 * rotated as row vectors x' = x·R; R is orthogonal so q'·k' = q·k. Computed as sign flip, fast
 * Walsh-Hadamard transform and 1/sqrt(d) in double, rounded once to float.
 *   signs: int8 [head_size] of ±1. src, dst: float32 [num_rows, head_size] contiguous; dst may equal src.
 *   head_size a power of two in 1..256. Returns INVALID_ARGUMENT (NULL, bad sizes), UNSUPPORTED
 *   ("head_size=96 is not a power of two"). */
#define ATTN_HADAMARD_SEED 425500u
ATTN_API attn_status attn_hadamard_signs(int64_t head_size, uint32_t seed, int8_t *signs);
ATTN_API attn_status attn_hadamard_rotate(const float *src, int64_t num_rows, int64_t head_size, uint32_t seed,
                                          float *dst);

/* ---- Quantized attention (docs/DIFFUSION.md §5; MindIE-SD quant_attention emulated on the CPU) -- */
typedef enum attn_quant_format {
    ATTN_QUANT_FP8_E4M3 = 0, /* block FP8: scale amax/448 per (batch, head, block of rows)            */
    ATTN_QUANT_FP8_E5M2 = 1, /* block FP8: scale amax/57344 per (batch, head, block of rows)          */
    ATTN_QUANT_MXFP8 = 2,    /* MX E4M3: Q, K blocks of 32 along head_size; V blocks of 32 tokens     */
    ATTN_QUANT_MXFP4 = 3     /* MX E2M1: Q, K blocks of 32 along head_size; V blocks of 32 tokens     */
} attn_quant_format;

typedef struct attn_quant_params {
    size_t struct_size;    /* sizeof(attn_quant_params), set by attn_quant_params_init             */
    int32_t format;        /* attn_quant_format                                                    */
    int32_t rotate;        /* 1 (default) = Hadamard rotation of Q and K before quantization        */
    uint32_t rotation_seed; /* default ATTN_HADAMARD_SEED                                          */
    int32_t q_block_rows;  /* FP8 formats: query rows per scale block (default 128)                */
    int32_t kv_block_rows; /* FP8 formats: key/value rows per scale block (default 256)            */
} attn_quant_params;

#define ATTN_QUANT_PARAMS_SIZE_MIN (offsetof(attn_quant_params, kv_block_rows) + sizeof(int32_t))

/* Defaults for `format` (struct_size = sizeof *qp, rotation on, seed 425500, FP8 row blocks 128/256 as
 * MindIE-SD). A macro over attn_quant_params_init_sized(qp, sizeof *qp, format) (writes the first struct_size
 * bytes only, as attn_params_init_sized); the exported attn_quant_params_init writes this library's sizeof.
 * The quantized entries read qp by the struct_size rule of attn_params (INVALID_ARGUMENT / UNSUPPORTED). */
ATTN_API void attn_quant_params_init_sized(attn_quant_params *qp, size_t struct_size, attn_quant_format format);
ATTN_API void(attn_quant_params_init)(attn_quant_params *qp, attn_quant_format format);
#define attn_quant_params_init(qp, format) attn_quant_params_init_sized((qp), sizeof *(qp), (format))

/* Quantized dense attention: Q and K are rotated (if qp->rotate), Q, K and V are quantized to qp->format, then
 * attention runs on the quantized values (softmax, LSE and the final normalisation in float32). V is not
 * rotated. The output is in q's dtype. Which kernels run (attn_forward_quant_kernels, docs/DIFFUSION.md §5):
 *   "avx512bf16" (CPU with AVX512-BF16; contexts on any table but avx2/generic): Q, K, V stay codes + scales in
 *     the workspace (FP8, MXFP8: the codes' exact bf16 values instead), K and V widened exactly to bf16 per kv
 *     tile where they are codes (MX power-of-two scales applied exactly, magnitudes below 2^-126 read as 0),
 *     Q·Kᵀ and P·V on VDPBF16PS with P·(FP8 V scale) rounded to bf16 (round
 *     to nearest even), FP8 Q/K scales multiplying the finished dot. Not bitwise the fake-quantization result:
 *     |out − oracle| <= 4e-3·max|v| + 4e-3·|out| beyond the output dtype's rounding, |LSE − oracle| <= 2e-4
 *     (tests/conformance/test_quant_codes.c over random shapes).
 *   "amx" (CPU with AMX-TILE + AMX-BF16 and AVX512-BF16, the OS granting the tile state; contexts on any
 *     table but avx2/generic): the "avx512bf16" path with Q·Kᵀ and P·V on TDPBF16PS tiles, MXFP4 included (no
 *     int8 dots); the same tolerance. The first quantized call on such a CPU asks Linux for the tile data
 *     (arch_prctl ARCH_REQ_XCOMP_PERM, once per process; it enlarges the process's signal frames by the tile
 *     state, as any AMX user's request does); where it is refused, "avx512bf16" runs.
 *   "avx2" (CPU with AVX2+FMA, or a context on the avx2/generic table): codes + scales in the workspace,
 *     widened to float32 per tile and run on the context's float kernels: bitwise the fake-quantization path
 *     on the same table, which matches attn_ref_forward_quant within float32 tolerance.
 *   "fake" (other CPUs): fake quantization into float32 copies in the workspace, then float32 attention.
 * Bitwise the same for any thread count on each.
 *   q, k, v, out, lse_opt: as attn_forward (f32/f16/bf16; BSND or BNSD).
 *   qp: NULL = attn_quant_params_init(ATTN_QUANT_FP8_E4M3).
 *   workspace: 4-byte aligned (64 recommended); attn_forward_quant_workspace_size(...) bytes run the fastest path
 *   of this CPU's quant kernels for every format, and fewer may do: "avx512bf16" keeps FP8 and MXFP8 operands
 *   as bf16 (two bytes per element plus the scales: the size the function returns there), and with less than
 *   that but at least one byte per element plus the scales it keeps codes and widens them per tile, with the
 *   same result; "avx2" needs one byte per element plus the scales; "fake" float32 copies of Q, K, V (four
 *   bytes). The size function has no context, so it answers for the CPU's own quant kernels (a context on the
 *   avx2 table runs in less). Below what the call's kernels need: WORKSPACE_TOO_SMALL, the need in the message.
 * Unsupported combinations return ATTN_STATUS_UNSUPPORTED naming the reason, never a silent fallback:
 * causal, window, params.mask, params.key_padding_mask, params.additive_mask, and rotation with a head_size
 * that is not a power of two (96, 192). Packed and piecewise inputs have no quantized entry (vllm-omni refuses them
 * too).
 * MindIE's zero-padding of keys to a multiple of 512 inside the MXFP4 softmax is NOT reproduced.
 * Returns INVALID_ARGUMENT, UNSUPPORTED, WORKSPACE_TOO_SMALL, OVERFLOW. */
ATTN_API attn_status attn_forward_quant_workspace_size(attn_layout layout, const attn_tensor *q,
                                                       const attn_tensor *k, const attn_tensor *v,
                                                       size_t *bytes);
ATTN_API attn_status attn_forward_quant(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v,
                                        const attn_quant_params *qp, const attn_params *params,
                                        attn_tensor *out, attn_tensor *lse_opt, void *workspace,
                                        size_t workspace_size);
/* The name of the kernels attn_forward_quant runs on ctx (NULL: a default context): "amx", "avx512bf16", "avx2"
 * or "fake" (see attn_forward_quant; ATTN_QUANT_KERNELS=avx512bf16 in the environment picks that table where amx's
 * would run, =fake the fake-quantization path). A static string; never NULL. */
ATTN_API const char *attn_forward_quant_kernels(const attn_ctx *ctx);
/* Oracle: rotation as a literal d×d product in double, quantization by nearest-code search over the
 * format's code table, then the float oracle on the dequantized values. Allocates its own buffers
 * (OUT_OF_MEMORY possible). */
ATTN_API attn_status attn_ref_forward_quant(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                            const attn_tensor *v, const attn_quant_params *qp,
                                            const attn_params *params, attn_tensor *out, attn_tensor *lse_opt);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTN_EXPERIMENTAL_H */
