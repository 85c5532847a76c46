/*
 * attn.h — the public C API of libattn: exact, fast attention for LLM serving and diffusion on CPUs.
 *
 * This header is the contract (docs/CONTRIBUTING.md §2). Every entry point documents tensor shapes, layouts, dtypes,
 * units, the statuses it returns and the source of its semantics. Semantics follow
 * docs/SEMANTICS.md (conventions and their sources):
 *   logits  s = softmax_scale·(q·k) → soft-cap → + ALiBi → + additive mask → keep-masks → softmax (+ sink
 *           in the denominator)
 *   causal  bottom-right: query row i of a sequence with Sq queries and Sk keys sits at absolute position
 *           p_i = Sk − Sq + i and sees key j iff j <= p_i (flash-attn >= 2.1, vLLM, FlashInfer).
 *   LSE     natural log, float32; a row with no visible key gives out = 0 and LSE = −inf.
 *
 * Conventions of the API:
 *   - Every function returns attn_status; on failure attn_last_error() names the bad argument and its value,
 *     and nothing has been written to any output.
 *   - Tensor views carry strides in ELEMENTS; the last dimension must be contiguous (stride 1).
 *   - Inputs are const; pointer parameters named *_opt may be NULL.
 *   - Thread safety: different attn_ctx objects may be used concurrently; one attn_ctx serves one call at a time
 *     (it owns per-thread scratch). A compute call (or attn_ctx_set_num_threads / set_isa) made on a ctx while a
 *     call on another thread uses it fails with INVALID_ARGUMENT ("ctx: is in use by a call on another
 *     thread"), before anything is written, instead of sharing the scratch; the check is one atomic
 *     compare-and-swap (no lock, no wait). The cache entries (reshape_and_cache, copy/swap_blocks, merge) use
 *     no scratch and may share a ctx. The last-error message is thread-local.
 */
#ifndef ATTN_ATTN_H
#define ATTN_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================================================
 * Versioning and symbol visibility
 * ================================================================================================ */

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0
#define ATTN_VERSION_NUMBER (ATTN_VERSION_MAJOR * 10000 + ATTN_VERSION_MINOR * 100 + ATTN_VERSION_PATCH)
#define ATTN_VERSION_STRING "0.1.0"

#if defined(ATTN_STATIC_DEFINE)
#define ATTN_API
#elif defined(_WIN32)
#if defined(ATTN_BUILDING_LIBRARY)
#define ATTN_API __declspec(dllexport)
#else
#define ATTN_API __declspec(dllimport)
#endif
#elif defined(__GNUC__)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* Run-time version: ATTN_VERSION_NUMBER of the loaded library (compare with the compile-time macro). */
ATTN_API unsigned attn_version_number(void);
/* Run-time version string, e.g. "0.1.0". Static storage. */
ATTN_API const char *attn_version_string(void);

/* ================================================================================================
 * Status codes (values pinned forever; never renumber) and errors
 * ================================================================================================ */

typedef enum attn_status {
    ATTN_STATUS_OK = 0,
    ATTN_STATUS_INVALID_ARGUMENT = 1, /* NULL pointer, bad shape/stride/dtype, index out of range      */
    ATTN_STATUS_UNSUPPORTED = 2,      /* a valid combination this build/entry does not implement       */
    ATTN_STATUS_OUT_OF_MEMORY = 3,    /* an allocation outside the hot path failed                     */
    ATTN_STATUS_OVERFLOW = 4,         /* a size or offset computation overflowed int64/size_t          */
    ATTN_STATUS_WORKSPACE_TOO_SMALL = 5, /* caller workspace smaller than the plan's workspace size   */
    ATTN_STATUS_INTERNAL = 6          /* a broken internal invariant (a bug: please report)            */
} attn_status;

/* Static name of a status, e.g. "ATTN_STATUS_INVALID_ARGUMENT"; "ATTN_STATUS_UNKNOWN" otherwise. */
ATTN_API const char *attn_status_string(attn_status status);

/* Thread-local message of the last failing call on this thread, e.g.
 * "k: shape[2]=3 does not divide num_heads=8". Empty string if none. Valid until the next attn call on this
 * thread. Successful calls do not clear it; use attn_clear_error() for that. */
ATTN_API const char *attn_last_error(void);
ATTN_API void attn_clear_error(void);

/* ================================================================================================
 * Data types and tensor views
 * ================================================================================================ */

typedef enum attn_dtype {
    ATTN_DTYPE_F32 = 0,
    ATTN_DTYPE_F16 = 1,      /* IEEE binary16                                               */
    ATTN_DTYPE_BF16 = 2,     /* bfloat16                                                    */
    ATTN_DTYPE_I32 = 3,
    ATTN_DTYPE_I64 = 4,
    ATTN_DTYPE_BOOL = 5,     /* one byte per element, 0 = false, non-zero = true            */
    ATTN_DTYPE_FP8_E4M3 = 6, /* OCP OFP8 E4M3FN (max 448, no inf, NaN = S.1111.111)         */
    ATTN_DTYPE_FP8_E5M2 = 7, /* OCP OFP8 E5M2 (max 57344, IEEE-like inf/NaN)                */
    ATTN_DTYPE_FP4_E2M1 = 8, /* OCP MX FP4 E2M1, two per byte, element 2i in the low nibble */
    ATTN_DTYPE_E8M0 = 9,     /* OCP MX shared scale 2^(e−127), 0xFF = NaN                   */
    ATTN_DTYPE_U8 = 10
} attn_dtype;

/* Size in bytes of one element (FP4_E2M1 returns 0: it is packed two per byte). 0 for an unknown dtype. */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);
/* Static lower-case name ("f32", "bf16", ...) or "unknown". */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);

#define ATTN_MAX_DIMS 6

/* Documented limits (docs/ROBUSTNESS.md). Every entry checks them before it measures, allocates or computes,
 * and a call beyond one fails at once with a message naming the argument and the limit:
 *   ATTN_MAX_HEADS        num_heads and num_kv_heads of every entry and of attn_plan_config (INVALID_ARGUMENT).
 *                         The largest public models use <= 128 query heads; 4096 leaves 32x headroom.
 *   ATTN_MAX_SEQ_LEN      seq_q, seq_k, packed rows (total_q/total_k, num_tokens), a request's keys
 *                         (max_seq_len), slot_mapping entries and block_mapping pairs: 2^31 - 1, the range of
 *                         the int32 metadata (cu_seqlens, query_start_loc, seq_lens) vLLM and flash-attn use
 *                         (INVALID_ARGUMENT).
 *   ATTN_MAX_WORK         query-key score pairs of one call, summed over batch rows and query heads before
 *                         masking: 2^48 (a full 1M x 1M prefill with 128 heads is 2^47). Bounds the compute of
 *                         views whose stride-0 dimensions make them far larger than their memory (OVERFLOW).
 *   ATTN_MAX_BLOCKS_PER_REQ  attn_plan_config.max_blocks_per_req: 2^24 blocks (16M-token contexts at block
 *                         size 1, 2G tokens at 128) (INVALID_ARGUMENT).
 *   ATTN_MAX_PLAN_TOKENS  scheduled tokens of one plan (sum of num_scheduled_tokens): 2^24; engines schedule
 *                         <= 64K per step (INVALID_ARGUMENT).
 *   ATTN_MAX_PLAN_BYTES   the plan's own allocation: 1 GiB, checked before allocating (OVERFLOW).
 *   ATTN_MAX_WORKSPACE_BYTES  any workspace size an entry asks for (plan, prescaled, quantized, padded): 2^40
 *                         bytes (OVERFLOW). */
#define ATTN_MAX_HEADS 4096
#define ATTN_MAX_SEQ_LEN 2147483647LL
#define ATTN_MAX_WORK (1LL << 48)
#define ATTN_MAX_BLOCKS_PER_REQ (1 << 24)
#define ATTN_MAX_PLAN_TOKENS (1 << 24)
#define ATTN_MAX_PLAN_BYTES ((size_t)1 << 30)
#define ATTN_MAX_WORKSPACE_BYTES ((uint64_t)1 << 40)

/* A strided view of caller-owned memory. shape and strides are in ELEMENTS; strides may be any non-negative
 * values (views into fused qkv buffers, transposed layouts) except that the last dimension must be
 * contiguous (strides[ndim−1] == 1) wherever a function reads rows. The view never owns `data`. */
typedef struct attn_tensor {
    void *data;                      /* first element                                  */
    attn_dtype dtype;
    int32_t ndim;                    /* 0..ATTN_MAX_DIMS                               */
    int64_t shape[ATTN_MAX_DIMS];    /* elements per dimension (>= 0)                  */
    int64_t strides[ATTN_MAX_DIMS];  /* elements between neighbours in each dimension  */
} attn_tensor;

/* A row-major contiguous view of `data` with the given shape (strides computed). ndim is clamped to
 * 0..ATTN_MAX_DIMS. Pure helper: never fails, never allocates. */
ATTN_API attn_tensor attn_tensor_make(void *data, attn_dtype dtype, int32_t ndim, const int64_t *shape);

/* ================================================================================================
 * Context: thread count and instruction-set choice
 * ================================================================================================ */

typedef struct attn_ctx attn_ctx;

/* Creates a context with the default thread count (OMP_NUM_THREADS / all cores, capped at 1024; 1 without
 * OpenMP) and the best kernel table for this CPU (or the one named by the environment variable ATTN_ISA).
 * Allocates the per-thread scratch once here (and in attn_ctx_set_num_threads), never during compute.
 * Returns INVALID_ARGUMENT if ctx is NULL or ATTN_ISA names an unknown/unusable ISA, OUT_OF_MEMORY. */
ATTN_API attn_status attn_ctx_create(attn_ctx **ctx);
/* Frees the context. NULL is a no-op. */
ATTN_API void attn_ctx_destroy(attn_ctx *ctx);
/* Sets the number of threads (>= 1, <= 1024) used by every later call on this context. Results are bitwise
 * identical for every thread count. Returns INVALID_ARGUMENT, OUT_OF_MEMORY (context unchanged then). */
ATTN_API attn_status attn_ctx_set_num_threads(attn_ctx *ctx, int32_t num_threads);
ATTN_API int32_t attn_ctx_num_threads(const attn_ctx *ctx);
/* Selects the kernel table by name: "generic", "avx2", "avx512" (x86-64) or "neon" (aarch64; see
 * attn_isa_available), or an opt-in table (attn_isa_opt_in_name: "avx512bf16", "amx"; their results differ by
 * more: see there). Results may differ between ISAs in the last bits (FMA contraction, vector width) but
 * are bitwise stable for one ISA (today avx2, avx512 and neon agree bit for bit, generic differs from them:
 * tests/kernels/test_kernel_bits.c).
 * Returns INVALID_ARGUMENT for an unknown name or one this CPU/OS cannot run. */
ATTN_API attn_status attn_ctx_set_isa(attn_ctx *ctx, const char *isa);
/* Name of the kernel table the context uses. */
ATTN_API const char *attn_ctx_isa(const attn_ctx *ctx);

/* Number of ISAs compiled into the library, and the name of the i-th (static storage; NULL if out of range).
 * The order is from most portable to fastest: "generic" first. */
ATTN_API int32_t attn_isa_count(void);
ATTN_API const char *attn_isa_name(int32_t index);
/* Name of the i-th opt-in kernel table compiled in (static storage; NULL if out of range): tables that are never
 * chosen by default (neither by attn_ctx_create nor listed by attn_isa_name) and are selected by name only
 * (attn_ctx_set_isa, ATTN_ISA), because their arithmetic is not the pinned chains of the default tables. Today
 * "avx512bf16" (x86-64 with AVX512-BF16): the avx512 table except that blocks of <= 16 query rows
 * (decode, speculative decode, a prefill's last short block) over bf16 K/V use VDPBF16PS, which rounds the
 * scaled query and the probabilities P to bf16 (round to nearest even) and adds two products per step;
 * f32/f16/fp8 K/V and bigger blocks give the avx512 bits. Results are within the tolerance stated in
 * docs/SEMANTICS.md §7 of the oracle (2e-2 of max|V| + 2e-2 relative; LSE 2e-2), bitwise identical for every
 * thread count and batch composition, not the default tables' bits, and a chunked prefill may differ from the
 * whole call in the last bits. And "amx" (AMX-TILE + AMX-BF16, tile state in XCR0 and the Linux tile-data
 * permission, requested once): avx512bf16 plus the prefill (> 16 rows) Q·Kᵀ and P·V on AMX tiles for kv tiles
 * whose K / V rows are bf16 values, same contract. attn_isa_available reports whether this CPU runs a table. */
ATTN_API const char *attn_isa_opt_in_name(int32_t index);
/* 1 if this CPU and OS can run the named kernel table (CPUID plus XGETBV for AVX state on x86-64,
 * getauxval(AT_HWCAP) on aarch64 Linux), else 0. */
ATTN_API int attn_isa_available(const char *isa);
/* Space-separated CPU features detected at run time, e.g. "avx2 fma f16c avx512f avx512bw ..." or, on aarch64,
 * "neon fp16 bf16 i8mm sve". Static. */
ATTN_API const char *attn_cpu_features(void);

/* ================================================================================================
 * Attention options
 * ================================================================================================ */

typedef enum attn_causal {
    ATTN_CAUSAL_NONE = 0,
    ATTN_CAUSAL_BOTTOM_RIGHT = 1, /* p_i = Sk − Sq + i, key j visible iff j <= p_i (flash-attn, vLLM)      */
    ATTN_CAUSAL_TOP_LEFT = 2      /* p_i = i (PyTorch SDPA is_causal, Ascend sparse_mode 2): j <= i        */
} attn_causal;

/* Dense layouts. The tensor views are given in the layout's logical dimension order. */
typedef enum attn_layout {
    ATTN_LAYOUT_BSND = 0, /* [batch, seq, heads, head_size] (default) */
    ATTN_LAYOUT_BNSD = 1  /* [batch, heads, seq, head_size]           */
} attn_layout;

/* Options shared by every attention entry. Initialise with attn_params_init(), then set fields.
 * Order of application (docs/SEMANTICS.md §1): scale → soft-cap → ALiBi →
 * additive mask → keep-masks (causal, window, key padding, mask) → softmax. */
typedef struct attn_params {
    float softmax_scale;         /* multiplier of q·k; 0 = default 1/sqrt(head_size)                       */
    int32_t causal;              /* attn_causal                                                            */
    int32_t window_left;         /* keys visible iff p_i − window_left <= j; −1 = unbounded (HF/vLLM W → W−1)*/
    int32_t window_right;        /* keys visible iff j <= p_i + window_right; −1 = unbounded               */
    float softcap;               /* > 0: s = softcap·tanh(s/softcap); 0 = off                              */
    const float *alibi_slopes;   /* [num_heads] float32 or NULL: s += −slope[h]·|p_i − j|                  */
    const float *sinks;          /* [num_heads] float32 or NULL: per-head logit added to the denominator    */
    /* Diffusion masks, boolean keep-masks (true = attend), combined with causal/window by AND.
     * mask:     bool/u8 view broadcast to [batch, num_heads, seq_q, seq_k] as torch SDPA / NumPy do: ndim 1..4,
     *           right-aligned to those dimensions ([seq_q, seq_k] is ndim 2, [batch, 1, 1, seq_k] the usual
     *           padding mask), each dimension 1 (broadcast) or the full size. NULL = none.
     * key_padding_mask: bool/u8 [batch, seq_k] (true = valid key). NULL = none.
     * Dense entries only (attn_forward, attn_forward_padded, attn_forward_prescaled and their oracle twins);
     * INVALID_ARGUMENT names the bad dimension ("params.mask: shape[2]=5, expected seq_q=7 (or 1 to
     * broadcast)"), UNSUPPORTED on every other entry. */
    const attn_tensor *mask;
    const attn_tensor *key_padding_mask;
    /* Additive float mask (torch SDPA's float attn_mask, diffusers' attention_mask): f32/f16/bf16
     * view broadcast like `mask`, added to the logits in natural units after ALiBi (SDPA adds it to the scaled
     * q·k; soft-cap, which SDPA lacks, comes first, as in Gemma-2's eager attention). A value of −inf hides
     * the key exactly like a false keep-mask entry (a row with only hidden keys gives out = 0, LSE = −inf; a
     * hidden key's K/V never reach the row). Finite values, however large and negative (−1e30,
     * torch.finfo(float32).min), stay finite logits and never give NaN: a row whose keys all carry the same
     * huge negative value averages them, as SDPA does. A logit plus the value that overflows float32 saturates
     * at −FLT_MAX (out unchanged: the same average; such a row's LSE reads ≈ −3.4e38). NaN and
     * +inf entries make their row NaN, as in SDPA. Same entries and statuses as `mask`; dtype errors say
     * "params.additive_mask: dtype u8, expected f32, f16 or bf16". NULL = none. Semantics: PyTorch
     * scaled_dot_product_attention (attn_mask of a floating dtype). */
    const attn_tensor *additive_mask;
    /* fp8 KV cache dequantization scales (vLLM's per-tensor layer._k_scale_float / _v_scale_float):
     * an element of an FP8_E4M3 / FP8_E5M2 kv_cache (and of key_opt / value_opt of attn_forward_paged) means
     * decode(bits)·k_scale for keys and decode(bits)·v_scale for values, as vLLM dequantizes ("Dequant(FP8) ·
     * scale => HP"). Read only by the paged entries on an fp8 cache, where each must be finite and > 0
     * (INVALID_ARGUMENT "params.k_scale=0 ..."); ignored for f32/f16/bf16 caches, as vLLM ignores the scales
     * for kv_cache_dtype "auto". Default 1. */
    float k_scale;
    float v_scale;
} attn_params;

/* Defaults: scale 0 (= 1/sqrt(head_size)), no causal, window (−1, −1), softcap 0, no ALiBi, sinks, masks
 * (mask, key_padding_mask and additive_mask NULL), k_scale = v_scale = 1. */
ATTN_API void attn_params_init(attn_params *params);

/* ================================================================================================
 * Dense and packed variable-length attention forward (FlashAttention-2 algorithm, exact softmax)
 * ================================================================================================ */

/* Dense attention.
 *   layout BSND: q [batch, seq_q, num_heads, head_size], k [batch, seq_k, num_kv_heads, head_size],
 *                v [batch, seq_k, num_kv_heads, head_size_v], out [batch, seq_q, num_heads, head_size_v]
 *   layout BNSD: the same with dimensions 1 and 2 swapped.
 *   lse_opt:     float32 [batch, num_heads, seq_q] (natural log), or NULL.
 * dtypes: q, k, v, out f32/f16/bf16; k and v share a dtype; out has q's dtype. Accumulation in float32.
 * head_size and head_size_v in 1..256; num_heads % num_kv_heads == 0 (query head h reads kv head
 * h / (num_heads/num_kv_heads)). seq_q, seq_k, batch may be 0. Any strides (in elements) with the last
 * dimension contiguous; out must not overlap q/k/v.
 * Returns INVALID_ARGUMENT (message names the argument), OVERFLOW, UNSUPPORTED (e.g. an option this entry
 * does not implement). Nothing is written unless OK.
 * Semantics: FlashAttention-2 (Dao, 2023) forward; docs/SEMANTICS.md §1-§3; vllm-omni dense path. */
ATTN_API attn_status attn_forward(attn_ctx *ctx, attn_layout layout, const attn_tensor *q,
                                  const attn_tensor *k, const attn_tensor *v, const attn_params *params,
                                  attn_tensor *out, attn_tensor *lse_opt);

/* Packed variable-length attention (flash_attn_varlen_func).
 *   q [total_q, num_heads, head_size], k [total_k, num_kv_heads, head_size], v [total_k, num_kv_heads,
 *   head_size_v], out [total_q, num_heads, head_size_v], lse_opt float32 [num_heads, total_q] or NULL.
 *   cu_seqlens_q, cu_seqlens_k: int32 [batch+1], non-decreasing, starting at 0; the last entry must be
 *   <= total_q / total_k (rows past it are left untouched). Sequence b uses q rows [cu_q[b], cu_q[b+1]) and
 *   k/v rows [cu_k[b], cu_k[b+1]); zero-length sequences are legal; no attention crosses sequences.
 * Per-sequence semantics as attn_forward (causal bottom-right within each sequence).
 * params->mask, key_padding_mask and additive_mask must be NULL (UNSUPPORTED otherwise).
 * Returns INVALID_ARGUMENT (e.g. "cu_seqlens_q: entry 3 = 7 < entry 2 = 9"), OVERFLOW, UNSUPPORTED. */
ATTN_API attn_status attn_forward_varlen(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                         const attn_tensor *cu_seqlens_k, const attn_params *params,
                                         attn_tensor *out, attn_tensor *lse_opt);

/* Merge two attention states over disjoint key sets (vLLM merge_attn_states, FlashInfer merge_state):
 *   lse = logaddexp(lse_a, lse_b); out = e^(lse_a−lse)·out_a + e^(lse_b−lse)·out_b;
 *   both −inf → out = 0, lse = −inf. A +inf LSE means an empty state (FA2 writes +inf for a row with
 *   no keys; vLLM's merge converts it) and is treated as −inf; a NaN LSE passes through IEEE rules.
 *   out_a, out_b, out: [num_tokens, num_heads, head_size] f32/f16/bf16 (same dtype);
 *   lse_a, lse_b: float32 [num_heads, num_tokens]; lse_out_opt: float32 [num_heads, num_tokens] or NULL.
 * out may alias out_a or out_b exactly (same view). Returns INVALID_ARGUMENT. */
ATTN_API attn_status attn_merge_attn_states(attn_ctx *ctx, const attn_tensor *out_a,
                                            const attn_tensor *lse_a, const attn_tensor *out_b,
                                            const attn_tensor *lse_b, attn_tensor *out,
                                            attn_tensor *lse_out_opt);

/* ================================================================================================
 * Reference (oracle) attention — slow, double accumulation, one thread. For tests, `attn check` and
 * bindings that want an independent answer. Same arguments and validation as the fast entries.
 * ================================================================================================ */

ATTN_API attn_status attn_ref_forward(attn_layout layout, const attn_tensor *q, const attn_tensor *k,
                                      const attn_tensor *v, const attn_params *params, attn_tensor *out,
                                      attn_tensor *lse_opt);
ATTN_API attn_status attn_ref_forward_varlen(const attn_tensor *q, const attn_tensor *k,
                                             const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                             const attn_tensor *cu_seqlens_k, const attn_params *params,
                                             attn_tensor *out, attn_tensor *lse_opt);

/* ================================================================================================
 * LLM serving: paged KV cache, cache ops, metadata builder and plan, paged attention
 * ================================================================================================ */

/* Source of semantics for this section: vllm-ascend attention_v1.py (AscendAttentionBackend,
 * AscendAttentionMetadataBuilder, AscendAttentionBackendImpl), docs/SERVING.md,
 * vLLM paged_attention_v2 (flash-decoding) and FlashInfer plan/run. Walk-through: docs/SERVING.md.
 *
 * KV cache tensor (all entries): kv_cache [2, num_blocks, block_size, num_kv_heads, head_size], index 0 =
 * key, 1 = value, dtype f32/f16/bf16 or fp8 (FP8_E4M3 / FP8_E5M2: vLLM kv_cache_dtype "fp8" / "fp8_e4m3" =
 * E4M3, "fp8_e5m2"; per-tensor scales, see attn_reshape_and_cache_scaled and attn_params.k_scale), any
 * strides with the last dimension contiguous, any block_size >= 1. copy_blocks / swap_blocks move fp8 pages
 * as bytes.
 * Token slot s lives in block s / block_size at row s % block_size;
 * slot = block_table[r][pos / block_size]·block_size + pos % block_size. */

/* Writes new keys/values into the cache: for every token t with slot_mapping[t] >= 0,
 * kv_cache[0][slot / block_size][slot % block_size] = key[t] and kv_cache[1][...] = value[t].
 *   key, value:   [num_tokens, num_kv_heads, head_size] f32/f16/bf16 (same dtype; converted to the cache
 *                 dtype with round-to-nearest-even when they differ)
 *   kv_cache:     [2, num_blocks, block_size, num_kv_heads, head_size]
 *   slot_mapping: int64 or int32 [n], n <= num_tokens (trailing padded key/value rows are ignored, as in
 *                 vLLM); a negative slot (PAD_SLOT_ID = −1) writes nothing.
 * Every slot is checked before anything is written: a slot >= num_blocks·block_size is INVALID_ARGUMENT
 * ("slot_mapping: entry 5 = 9001 >= num_blocks·block_size = 4096") and the cache is untouched. Duplicate
 * slots: the later token wins. The cache must not overlap key/value/slot_mapping.
 * Returns INVALID_ARGUMENT, OVERFLOW. Source: vLLM reshape_and_cache(_flash), vllm-ascend reshape_and_cache. */
ATTN_API attn_status attn_reshape_and_cache(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                            attn_tensor *kv_cache, const attn_tensor *slot_mapping);

/* attn_reshape_and_cache with per-tensor scales for an fp8 cache (vLLM reshape_and_cache(_flash) with
 * kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2" and k_scale / v_scale): each element is stored as
 * encode(x / k_scale) (keys) or encode(x / v_scale) (values), x / scale computed in float32 and encoded
 * round-to-nearest-even with saturation to ±max (448 E4M3, 57344 E5M2; ±inf saturates too, NaN stays NaN),
 * as vLLM's CUDA kernels (scaled_convert, __NV_SATFINITE) do. attn_reshape_and_cache is this call with scales
 * 1. For an f32/f16/bf16 cache the scales are ignored (not read), as vLLM ignores them for "auto".
 *   key, value: f32/f16/bf16 (an fp8 key/value is INVALID_ARGUMENT); other arguments as attn_reshape_and_cache.
 *   k_scale, v_scale: fp8 cache: finite and > 0, else INVALID_ARGUMENT ("k_scale=0: expected a finite value
 *   > 0 for the fp8_e4m3 kv_cache"), checked before anything is written.
 * Returns INVALID_ARGUMENT, OVERFLOW. Source: vLLM csrc/cache_kernels.cu reshape_and_cache_flash_kernel and
 * quantization/fp8/nvidia/quant_utils.cuh (stored code = fp8(value / scale)). */
ATTN_API attn_status attn_reshape_and_cache_scaled(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                                   attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                                   float k_scale, float v_scale);

/* Copies whole blocks inside one cache (copy-on-write): for each row i in order,
 * kv_cache[:, dst] = kv_cache[:, src] with (src, dst) = block_mapping[i] (keys and values).
 *   block_mapping: int64 or int32 [num_pairs, 2]; every id must be in [0, num_blocks) (checked first).
 * Pairs are applied in order (a later pair sees earlier copies). Returns INVALID_ARGUMENT, OVERFLOW.
 * Source: vllm-ascend's AscendAttentionBackend.copy_blocks. */
ATTN_API attn_status attn_copy_blocks(attn_ctx *ctx, attn_tensor *kv_cache, const attn_tensor *block_mapping);

/* Copies whole blocks between two caches (e.g. to/from a host offload pool): dst_cache[:, dst] =
 * src_cache[:, src] for each (src, dst) = block_mapping[i]. The caches must share dtype, block_size,
 * num_kv_heads and head_size (num_blocks may differ) and must not overlap; src ids are checked against
 * src_cache and dst ids against dst_cache before anything is written.
 *   block_mapping: int64 or int32 [num_pairs, 2]. Returns INVALID_ARGUMENT, OVERFLOW.
 * Source: vllm-ascend's AscendAttentionBackend.swap_blocks. */
ATTN_API attn_status attn_swap_blocks(attn_ctx *ctx, const attn_tensor *src_cache, attn_tensor *dst_cache,
                                      const attn_tensor *block_mapping);

/* Allocates a zero-filled contiguous KV cache [2, num_blocks, block_size, num_kv_heads, head_size] of `dtype`
 * (f32/f16/bf16, FP8_E4M3/FP8_E5M2) and sets *cache to its row-major view (attn_tensor_make strides): the cache
 * every entry above takes. Huge pages: a cache of >= 2 MiB is 2 MiB-aligned, its allocation rounded up to a
 * multiple of 2 MiB, and on Linux advised madvise(MADV_HUGEPAGE) before it is zeroed, so the zeroing faults it
 * in as transparent huge pages where /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always"
 * (paged reads jump from block to block across the whole cache; 2 MiB pages cut the TLB misses of those jumps).
 * A failing madvise (THP "never", an old kernel) is ignored: the cache is then on base pages. Elsewhere than
 * Linux no advice is given. A cache under 2 MiB is 64-byte aligned. The zeroing touches every page once, here
 * (as torch.zeros does), not on the first write. Engines that allocate the cache themselves should align and
 * advise it the same way (docs/SERVING.md, "KV cache").
 *   num_blocks, block_size >= 1; num_kv_heads 1..ATTN_MAX_HEADS; head_size 1..256 (the limits of the cache
 *   entries).
 * Returns INVALID_ARGUMENT (cache NULL, another dtype, a dimension out of range), OVERFLOW (the byte size does
 * not fit in int64 / size_t), OUT_OF_MEMORY; *cache is left untouched on failure. Release with
 * attn_kv_cache_free. Source: attn's own helper (vLLM allocates its caches with torch.zeros). */
ATTN_API attn_status attn_kv_cache_alloc(attn_dtype dtype, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                                         int64_t head_size, attn_tensor *cache);
/* Frees a cache allocated by attn_kv_cache_alloc (its data pointer, as that call set it) and sets cache->data to
 * NULL. NULL, or data NULL: nothing happens. */
ATTN_API void attn_kv_cache_free(attn_tensor *cache);

/* ---- Disaggregated prefill: per-layer "KV stored" notification ------------------------------
 * A KV producer (prefill instance of a disaggregated deployment) starts sending a layer's KV as soon as that
 * layer's cache write is done instead of after the whole forward (vllm-ascend: AscendAttentionBackendImpl
 * reshape_and_cache records `reshape_cache_event` when is_kv_producer, for the KV connector to wait on before
 * sending the layer). attn_reshape_and_cache_notify is attn_reshape_and_cache followed by one synchronous call of
 * notify->on_stored describing what was written. Walk-through: docs/SERVING.md "Disaggregated prefill". */

/* One run of the write: rows [row_start, row_end) of physical block block_idx hold key/value rows (tokens)
 * token_start .. token_start + (row_end − row_start) − 1, i.e. consecutive tokens whose slots are
 * consecutive inside one block. */
typedef struct attn_kv_block_rows {
    int64_t block_idx;   /* physical block id, [0, num_blocks)                                  */
    int64_t row_start;   /* first row of the block written (slot % block_size)                  */
    int64_t row_end;     /* one past the last row written, <= block_size                        */
    int64_t token_start; /* slot_mapping index (key/value row) stored at row_start              */
} attn_kv_block_rows;

/* What one cache write stored (valid only during the callback; the pointers are the caller's views). */
typedef struct attn_kv_stored {
    int32_t layer_idx;               /* notify->layer_idx                                         */
    const attn_tensor *kv_cache;     /* the cache just written [2, num_blocks, block_size, Hkv, D] */
    const attn_tensor *slot_mapping; /* the write's slot_mapping [num_tokens], int64 or int32      */
    int64_t num_tokens;              /* slot_mapping entries read (its shape[0])                  */
    int64_t num_written;             /* entries >= 0, i.e. tokens stored                          */
    int64_t num_runs;                /* runs attn_kv_stored_next yields (0 if nothing was stored) */
    int64_t block_size;              /* kv_cache shape[2]                                         */
} attn_kv_stored;

/* Callback: `user` is notify->user. May read the cache (e.g. copy the runs' blocks out, attn_swap_blocks into
 * a host pool, hand them to a transfer engine) and may call any attn entry, on any context. */
typedef void (*attn_kv_stored_fn)(void *user, const attn_kv_stored *event);

typedef struct attn_kv_notify {
    attn_kv_stored_fn on_stored; /* required (INVALID_ARGUMENT if NULL)                             */
    void *user;                  /* passed through untouched                                      */
    int32_t layer_idx;           /* the caller's layer id, >= 0, passed through                   */
} attn_kv_notify;

/* attn_reshape_and_cache (same arguments, checks, statuses and writes), then, only if that returned OK,
 * exactly one call notify->on_stored(notify->user, &event) — also when no slot was >= 0 (num_written 0).
 * Threading: the call happens on the calling thread after every store of the write is complete (worker
 * threads included), before this function returns; the caller's other threads see the data once they
 * synchronise with the callback (e.g. through the producer's queue). It is never made on a validation
 * failure (bad key/value/cache/slot_mapping, or a bad notify: NULL, NULL on_stored, layer_idx < 0), and then
 * nothing is written either. No allocation, no lock. Returns INVALID_ARGUMENT, OVERFLOW. */
ATTN_API attn_status attn_reshape_and_cache_notify(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                                   attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                                   const attn_kv_notify *notify);
/* attn_reshape_and_cache_scaled (fp8 caches with per-tensor k_scale / v_scale: same arguments, checks, statuses
 * and writes), then the one notify->on_stored call of attn_reshape_and_cache_notify, under the same rules: only
 * after a successful write, never on a validation failure (bad scales included: then nothing is written and no
 * call is made). The event's kv_cache is the fp8 cache: a consumer moves the codes as bytes and uses the same
 * scales. Returns INVALID_ARGUMENT, OVERFLOW. Source: vllm-ascend's is_kv_producer reshape_cache_event, with vLLM's
 * fp8 cache write (attn_reshape_and_cache_scaled). */
ATTN_API attn_status attn_reshape_and_cache_scaled_notify(attn_ctx *ctx, const attn_tensor *key,
                                                          const attn_tensor *value, attn_tensor *kv_cache,
                                                          const attn_tensor *slot_mapping, float k_scale,
                                                          float v_scale, const attn_kv_notify *notify);

/* Iterates the runs of an event in token order: start with *cursor = 0; each call fills *run and returns 1,
 * or returns 0 when none is left (and for NULL arguments). A run ends at a skipped slot (< 0), at a block
 * boundary and where the next token's slot is not the next row. Duplicate slots (the later token wins) give
 * runs that name the same rows again; the cache holds the final values when the callback runs. O(num_tokens)
 * over the whole iteration. */
ATTN_API int attn_kv_stored_next(const attn_kv_stored *event, int64_t *cursor, attn_kv_block_rows *run);

/* Batch attention state, one per engine step (values pinned to vllm-ascend's AscendAttentionState). */
typedef enum attn_state {
    ATTN_STATE_PREFILL_NO_CACHE = 0,  /* every request has num_computed_tokens == 0                    */
    ATTN_STATE_PREFILL_CACHE_HIT = 1, /* prefill over cached prefixes, chunked prefill disabled        */
    ATTN_STATE_DECODE_ONLY = 2,       /* every request schedules exactly one token                     */
    ATTN_STATE_CHUNKED_PREFILL = 3,   /* mixed batch with chunked prefill enabled                      */
    ATTN_STATE_SPEC_DECODING = 4      /* every request: 1 verified token + its drafts (mtp method)     */
} attn_state;

/* What a request attends to. */
typedef enum attn_request_kind {
    ATTN_REQUEST_DECODER = 0,      /* self-attention over its paged cache; params->causal applies         */
    ATTN_REQUEST_ENCODER_ONLY = 1, /* pooling/encoder: non-causal over its own new tokens only, no cache  */
    ATTN_REQUEST_CROSS = 2         /* encoder-decoder cross: non-causal over encoder_len cached keys      */
} attn_request_kind;

/* One scheduled request of an engine step (input order = the engine's order). */
typedef struct attn_request {
    int64_t num_computed_tokens;  /* tokens already in the cache (cached prefix); 0 for ENCODER_ONLY     */
    int64_t num_scheduled_tokens; /* new tokens this step (>= 1), including num_spec_tokens drafts        */
    int64_t num_spec_tokens;      /* speculative draft tokens among them (0..num_scheduled_tokens−1)      */
    int32_t kind;                 /* attn_request_kind                                                   */
    const int32_t *block_ids;     /* [num_block_ids] physical block ids in logical order (may be NULL
                                     when num_block_ids == 0, e.g. ENCODER_ONLY)                          */
    int64_t num_block_ids;        /* >= ceil(kv_len / block_size); kv_len = computed + scheduled, or
                                     encoder_len for CROSS; <= config max_blocks_per_req                   */
    int64_t encoder_len;          /* CROSS only: cached encoder keys (>= 0); ignored otherwise            */
} attn_request;

/* Model/engine constants of a plan. Initialise with attn_plan_config_init(). */
typedef struct attn_plan_config {
    int32_t num_blocks;              /* blocks in the cache (block ids are checked against it)      */
    int32_t block_size;              /* >= 1 (fast: 16, 32, 64, 128)                               */
    int32_t num_heads;               /* query heads                                                 */
    int32_t num_kv_heads;            /* divides num_heads                                           */
    int32_t head_size;               /* 1..256, key and value                                       */
    int32_t max_blocks_per_req;      /* width of the plan's block_table                             */
    int32_t num_speculative_tokens;  /* decode_threshold = 1 + this, at most 16                     */
    int32_t chunked_prefill_enabled; /* scheduler_config.enable_chunked_prefill (C12 rule 4)        */
    int32_t spec_method_mtp;         /* 1 if the speculative method is "mtp" (C12 rules 2-3)        */
} attn_plan_config;

/* Defaults: all zero except block_size 128, num_speculative_tokens 0, chunked_prefill_enabled 1. */
ATTN_API void attn_plan_config_init(attn_plan_config *config);

/* The step's metadata and work plan, built once per engine step and reused by every layer. Opaque. */
typedef struct attn_plan attn_plan;

/* Builds the plan of one engine step (FlashInfer plan(); vllm-ascend's AscendAttentionMetadataBuilder.build):
 *   - orders requests decode-first (stable; docs/SERVING.md "Metadata builder"): decodes (1 <= q_len <=
 *     decode_threshold with cached context, or a CROSS request with q_len <= threshold), then prefills over a
 *     cached prefix (partial prefills), then fresh prefills (num_computed_tokens == 0);
 *   - fills query_start_loc, seq_lens, slot_mapping, block_table in that order, the counts, and the batch
 *     attn_state (C12: no cached token anywhere → PREFILL_NO_CACHE; all q_len 1 → DECODE_ONLY or
 *     SPEC_DECODING for mtp; all q_len − num_spec_tokens == 1 → SPEC_DECODING (mtp) else CHUNKED_PREFILL;
 *     chunked prefill enabled → CHUNKED_PREFILL; else PREFILL_CACHE_HIT);
 *   - partitions the work: (request, kv head, head chunk, token block) blocks over fixed 512-key
 *     partitions; decode blocks with several partitions are split across threads (flash-decoding) and
 *     merged in ascending order, so results never depend on thread count or batch (docs/SERVING.md).
 * Sizing and filling run one function twice (count, then fill) into one allocation.
 *   requests: [num_requests]; num_requests >= 0. Token rows of the input are the requests' new tokens
 *   concatenated in input order; the plan's rows are in plan order (see attn_plan_info.token_src).
 * Returns INVALID_ARGUMENT (message names the request and field, e.g.
 * "requests[3].block_ids[7] = 9001 >= num_blocks=4096"), OVERFLOW (a count exceeds int32),
 * OUT_OF_MEMORY. *plan is NULL on failure. */
ATTN_API attn_status attn_plan_create(const attn_plan_config *config, const attn_request *requests,
                                      int64_t num_requests, attn_plan **plan);
/* Frees a plan. NULL is a no-op. */
ATTN_API void attn_plan_free(attn_plan *plan);
/* Bytes of caller workspace attn_forward_paged needs for this plan (may be 0). */
ATTN_API size_t attn_plan_workspace_size(const attn_plan *plan);

/* Caller-visible arrays of a plan (owned by the plan, valid until attn_plan_free). Plan order. */
typedef struct attn_plan_info {
    int64_t num_reqs, num_tokens;
    int64_t num_decodes, num_decode_tokens;     /* the first num_decodes requests / tokens       */
    int64_t num_prefills, num_prefill_tokens;   /* the rest                                      */
    int32_t attn_state;                         /* attn_state                                    */
    int32_t decode_threshold;                   /* 1 + num_speculative_tokens                    */
    int64_t max_query_len, max_seq_len;
    const int32_t *query_start_loc;             /* [num_reqs + 1] exclusive prefix sum of q_len  */
    const int32_t *seq_lens;                    /* [num_reqs] keys: computed + scheduled (CROSS:
                                                   encoder_len; ENCODER_ONLY: q_len)             */
    const int64_t *slot_mapping;                /* [num_tokens] cache slot of each new token, −1
                                                   for ENCODER_ONLY and CROSS tokens              */
    int64_t max_blocks_per_req;                 /* block_table row length (config value)         */
    const int32_t *block_table;                 /* [num_reqs, max_blocks_per_req], unused = 0    */
    const int32_t *kinds;                       /* [num_reqs] attn_request_kind                  */
    const int32_t *req_order;                   /* [num_reqs] plan request i = input request
                                                   req_order[i]                                  */
    const int32_t *token_src;                   /* [num_tokens] plan row t = input row token_src[t]*/
    int64_t num_work_blocks;                    /* work items of the (request, head, token) grid */
    int64_t num_split_items;                    /* split-KV (block, partition) items             */
    size_t workspace_size;                      /* = attn_plan_workspace_size(plan)              */
} attn_plan_info;

/* Fills *info. Returns INVALID_ARGUMENT if plan or info is NULL. */
ATTN_API attn_status attn_plan_get_info(const attn_plan *plan, attn_plan_info *info);

/* Attention for a whole mixed batch (decodes, spec decodes, chunked/cached/fresh prefills, encoder-only,
 * cross) over the paged cache in plan order, one call per layer:
 *   q:        [num_tokens, num_heads, head_size] f32/f16/bf16 (plan rows)
 *   key_opt, value_opt: [num_tokens, num_kv_heads, head_size], kv_cache dtype; required iff the plan has
 *             ENCODER_ONLY requests (their keys are their own new rows), else ignored (may be NULL)
 *   kv_cache: [2, num_blocks, block_size, num_kv_heads, head_size] matching the plan config; this step's
 *             keys/values must already be written (attn_reshape_and_cache with the plan's slot_mapping)
 *   out:      [num_tokens, num_heads, head_size], q's dtype; lse_opt float32 [num_heads, num_tokens]
 *   workspace: >= attn_plan_workspace_size bytes, 4-byte aligned (64 recommended), not overlapping any
 *             tensor (NULL allowed when the size is 0); its contents are scratch, overwritten each call
 * fp8 cache (FP8_E4M3 / FP8_E5M2): keys and values are dequantized inside the call with params->k_scale /
 * v_scale (finite, > 0): k_scale is folded into the query pre-scale (softmax_scale·k_scale) and v_scale into
 * the final normalisation, K/V rows are widened exactly to float32 on the converted-row path; key_opt /
 * value_opt then hold fp8 codes with the same scales (docs/SERVING.md "fp8 KV cache").
 * Per request: DECODER rows use params->causal (bottom-right expected) over seq_len keys; ENCODER_ONLY and
 * CROSS rows are non-causal. Window, ALiBi, soft-cap, sinks apply to every request. params->mask,
 * key_padding_mask and additive_mask must be NULL (UNSUPPORTED). No allocation, no lock. Bits are identical to
 * attn_paged_attention and to attn_forward_varlen on the same keys, for any thread count and batch.
 * Returns INVALID_ARGUMENT, WORKSPACE_TOO_SMALL, UNSUPPORTED, OVERFLOW. */
ATTN_API attn_status attn_forward_paged(attn_ctx *ctx, const attn_plan *plan, const attn_tensor *q,
                                        const attn_tensor *key_opt, const attn_tensor *value_opt,
                                        const attn_tensor *kv_cache, const attn_params *params,
                                        attn_tensor *out, attn_tensor *lse_opt, void *workspace,
                                        size_t workspace_size);

/* Plan-less paged attention for engines that pass vLLM / flash-attn metadata directly
 * (flash_attn_varlen_func(block_table=...), flash_attn_with_kvcache):
 *   q [num_tokens, num_heads, head_size]; kv_cache as above; out like q; lse_opt float32 [num_heads,
 *   num_tokens] or NULL; query_start_loc int32 [num_reqs + 1] (0, non-decreasing, last <= num_tokens);
 *   seq_lens int32 [num_reqs] (>= 0; q_len > seq_len leaves the first rows without keys); block_table int32 [num_reqs, max_blocks] (row stride
 *   any, entries past ceil(seq_len / block_size) ignored).
 * Validated every call: used block ids in [0, num_blocks) ("block_table: entry [3][7] = 9001 >=
 * num_blocks=4096"), ceil(seq_len / block_size) <= max_blocks. Causal bottom-right per request if
 * params->causal says so. An fp8 kv_cache is dequantized with params->k_scale / v_scale as in
 * attn_forward_paged. Runs the sequential partition fold (no workspace). Returns INVALID_ARGUMENT,
 * UNSUPPORTED (masks), OVERFLOW. */
ATTN_API attn_status attn_paged_attention(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                          const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                          const attn_tensor *block_table, const attn_params *params,
                                          attn_tensor *out, attn_tensor *lse_opt);

/* Oracle twin of attn_paged_attention (double accumulation, one thread; same arguments and checks; an fp8
 * cache element is decode(bits)·scale in double). */
ATTN_API attn_status attn_ref_paged_attention(const attn_tensor *q, const attn_tensor *kv_cache,
                                              const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                              const attn_tensor *block_table, const attn_params *params,
                                              attn_tensor *out, attn_tensor *lse_opt);

/* What the serving entries of this library build support (attn_reshape_and_cache, attn_plan_create,
 * attn_forward_paged, attn_paged_attention), so an engine backend declares its features from the library
 * instead of a hand-kept list (vLLM AttentionBackend.supported_dtypes / get_supported_head_sizes /
 * supports_attn_type / supports_sink ...; python/attn/vllm_backend.py). Fields are only ever appended;
 * a field this library does not know reads 0, which means "not supported". Bit masks use the enum value as
 * the bit index: bit (1u << ATTN_DTYPE_BF16), bit (1u << ATTN_REQUEST_CROSS). */
typedef struct attn_capabilities {
    int32_t head_size_min;        /* 1: smallest head_size (key = value head size in the paged cache)      */
    int32_t head_size_max;        /* 256: largest head_size                                                */
    uint32_t dtypes;              /* attn_dtype bits of q / key / value / out: f32, f16, bf16              */
    uint32_t kv_cache_dtypes;     /* attn_dtype bits of the paged kv_cache: f32, f16, bf16, fp8_e4m3,       *
                                   * fp8_e5m2 (per-tensor k_scale / v_scale, attn_reshape_and_cache_scaled) */
    int32_t block_size_min;       /* 1: any block_size in [min, max] works                                  */
    int32_t block_size_max;       /* INT32_MAX                                                             */
    uint32_t request_kinds;       /* attn_request_kind bits: DECODER, ENCODER_ONLY, CROSS                   */
    int32_t sliding_window;       /* 1: params window_left / window_right honoured by the paged entries    */
    int32_t softcap;              /* 1: params softcap                                                     */
    int32_t alibi;                /* 1: params alibi_slopes                                                */
    int32_t sinks;                /* 1: params sinks                                                       */
    int32_t lse;                  /* 1: lse_opt output                                                     */
    int32_t max_decode_threshold; /* 16: largest 1 + num_speculative_tokens of attn_plan_config            */
} attn_capabilities;

/* Fills the first caps_size bytes of *caps with this library's capabilities (pass sizeof *caps). A caller
 * compiled against an older header passes a smaller size and gets only the fields it knows; one compiled
 * against a newer header gets its unknown trailing fields zeroed (= not supported). Never allocates.
 * Returns INVALID_ARGUMENT if caps is NULL or caps_size is 0. Source: this library's validation rules
 * (kv_cache / plan config / params checks) — each field states the rule it mirrors. */
ATTN_API attn_status attn_capabilities_get(attn_capabilities *caps, size_t caps_size);

/* ================================================================================================
 * Diffusion: piecewise spans, pre-scaling, quantized attention
 * ================================================================================================ */

/* Semantics: vllm-omni diffusion FlashAttentionImpl and MindIE-SD, summarised with
 * measured accuracy in docs/DIFFUSION.md. Masks (keep-mask and additive mask broadcast to [B, H, Sq, Sk], key
 * padding [B, Sk]) are the attn_params fields above and work with attn_forward / attn_ref_forward
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
/* Oracle twin (same arguments and workspace). */
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
/* Oracle twin (double accumulation, literal span predicate; same arguments and checks). */
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

/* ---- Low-precision formats: encode/decode (OCP OFP8 rev 1.0, OCP Microscaling v1.0) --------------------
 * Encoding is round-to-nearest-even with saturation: finite values beyond the format's max and ±inf map to
 * ±max (448 for E4M3, 57344 for E5M2, 6 for E2M1); NaN maps to NaN (0x7F|sign for both FP8 formats; E2M1 has
 * no NaN and encodes NaN as +0 — an MX block holding a NaN or inf gets the NaN scale 0xFF instead).
 * Values below half the smallest subnormal flush to ±0. Decoding is exact. */
ATTN_API uint8_t attn_fp8_from_float(attn_dtype format, float x); /* format FP8_E4M3 or FP8_E5M2; else 0 */
ATTN_API float attn_fp8_to_float(attn_dtype format, uint8_t bits); /* NaN for an unknown format        */
ATTN_API uint8_t attn_fp4_e2m1_from_float(float x);              /* low nibble: s.ee.m                */
ATTN_API float attn_fp4_e2m1_to_float(uint8_t nibble);           /* uses the low 4 bits                */
/* E8M0 shared scale 2^(bits − 127); 0xFF = NaN; 0x00 = 2^-127 (OCP; CANN's "0x00 = zero" is not followed). */
ATTN_API float attn_e8m0_to_float(uint8_t bits);

/* Scaled FP8 of n values: dst[i] = encode(src[i] / scale); dequantize: dst[i] = decode(src[i]) · scale.
 * format FP8_E4M3 or FP8_E5M2; scale finite and > 0. Returns INVALID_ARGUMENT (NULL, n < 0, bad format or
 * scale). */
ATTN_API attn_status attn_quantize_fp8(attn_dtype format, const float *src, int64_t n, float scale,
                                       uint8_t *dst);
ATTN_API attn_status attn_dequantize_fp8(attn_dtype format, const uint8_t *src, int64_t n, float scale,
                                         float *dst);

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
    int32_t format;        /* attn_quant_format                                                    */
    int32_t rotate;        /* 1 (default) = Hadamard rotation of Q and K before quantization        */
    uint32_t rotation_seed; /* default ATTN_HADAMARD_SEED                                          */
    int32_t q_block_rows;  /* FP8 formats: query rows per scale block (default 128)                */
    int32_t kv_block_rows; /* FP8 formats: key/value rows per scale block (default 256)            */
} attn_quant_params;

/* Defaults for `format` (rotation on, seed 425500, FP8 row blocks 128/256 as MindIE-SD). */
ATTN_API void attn_quant_params_init(attn_quant_params *qp, attn_quant_format format);

/* Quantized dense attention: Q and K are rotated (if qp->rotate), Q, K and V are quantized to qp->format, then
 * attention runs on the quantized values (softmax, LSE and the final normalisation in float32). V is not
 * rotated. The output is in q's dtype. Which kernels run (attn_forward_quant_kernels, docs/DIFFUSION.md §5):
 *   "avx512bf16" (CPU with AVX512-BF16; contexts on any table but avx2/generic): Q, K, V stay codes + scales in
 *     the workspace; per kv tile K and V are widened exactly to bf16 (MX power-of-two scales applied exactly,
 *     magnitudes below 2^-126 read as 0), Q·Kᵀ and P·V on VDPBF16PS with P·(FP8 V scale) rounded to bf16 (round
 *     to nearest even), FP8 Q/K scales multiplying the finished dot. Not bitwise the fake-quantization result:
 *     |out − oracle| <= 4e-3·max|v| + 4e-3·|out| beyond the output dtype's rounding, |LSE − oracle| <= 2e-4
 *     (tests/conformance/test_quant_codes.c over random shapes).
 *   "avx2" (CPU with AVX2+FMA, or a context on the avx2/generic table): codes + scales in the workspace,
 *     widened to float32 per tile and run on the context's float kernels: bitwise the fake-quantization path
 *     on the same table, which matches attn_ref_forward_quant within float32 tolerance.
 *   "fake" (other CPUs): fake quantization into float32 copies in the workspace, then float32 attention.
 * Bitwise the same for any thread count on each.
 *   q, k, v, out, lse_opt: as attn_forward (f32/f16/bf16; BSND or BNSD).
 *   qp: NULL = attn_quant_params_init(ATTN_QUANT_FP8_E4M3).
 *   workspace: >= attn_forward_quant_workspace_size(...) bytes, 4-byte aligned (64 recommended): codes (one
 *   byte per element) and scales where this CPU runs "avx512bf16" or "avx2", else float32 copies of Q, K, V.
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
/* The name of the kernels attn_forward_quant runs on ctx (NULL: a default context): "avx512bf16", "avx2" or
 * "fake" (see attn_forward_quant). A static string; never NULL. */
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

#endif /* ATTN_ATTN_H */
