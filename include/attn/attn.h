/*
 * attn.h — the public C API of libattn: exact, fast attention for LLM serving and diffusion on CPUs.
 *
 * This header is the contract (STYLE.md R1). Every entry point documents tensor shapes, layouts, dtypes,
 * units, the statuses it returns and the source of its semantics. Semantics follow
 * shared/spec/CONVENTIONS.md (summarised in docs/SEMANTICS.md):
 *   logits  s = softmax_scale·(q·k) → soft-cap → + ALiBi → mask → softmax (+ sink in the denominator)
 *   causal  bottom-right: query row i of a sequence with Sq queries and Sk keys sits at absolute position
 *           p_i = Sk − Sq + i and sees key j iff j <= p_i (flash-attn >= 2.1, vLLM, FlashInfer).
 *   LSE     natural log, float32; a row with no visible key gives out = 0 and LSE = −inf.
 *
 * Conventions of the API:
 *   - Every function returns attn_status; on failure attn_last_error() names the bad argument and its value,
 *     and nothing has been written to any output.
 *   - Tensor views carry strides in ELEMENTS; the last dimension must be contiguous (stride 1).
 *   - Inputs are const; pointer parameters named *_opt may be NULL.
 *   - Thread safety: different attn_ctx objects may be used concurrently; one attn_ctx must not be used by two
 *     threads at once (it owns per-thread scratch). The last-error message is thread-local.
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

/* Creates a context with the default thread count (OMP_NUM_THREADS / all cores, or 1 without OpenMP) and
 * the best kernel table for this CPU (or the one named by the environment variable ATTN_ISA).
 * Allocates the per-thread scratch once here (and in attn_ctx_set_num_threads), never during compute.
 * Returns INVALID_ARGUMENT if ctx is NULL or ATTN_ISA names an unknown/unusable ISA, OUT_OF_MEMORY. */
ATTN_API attn_status attn_ctx_create(attn_ctx **ctx);
/* Frees the context. NULL is a no-op. */
ATTN_API void attn_ctx_destroy(attn_ctx *ctx);
/* Sets the number of threads (>= 1, <= 1024) used by every later call on this context. Results are bitwise
 * identical for every thread count. Returns INVALID_ARGUMENT, OUT_OF_MEMORY (context unchanged then). */
ATTN_API attn_status attn_ctx_set_num_threads(attn_ctx *ctx, int32_t num_threads);
ATTN_API int32_t attn_ctx_num_threads(const attn_ctx *ctx);
/* Selects the kernel table by name: "generic", "avx2", "avx512" (see attn_isa_available). Results may differ
 * between ISAs in the last bits (FMA contraction, vector width) but are bitwise stable for one ISA.
 * Returns INVALID_ARGUMENT for an unknown name or one this CPU/OS cannot run. */
ATTN_API attn_status attn_ctx_set_isa(attn_ctx *ctx, const char *isa);
/* Name of the kernel table the context uses. */
ATTN_API const char *attn_ctx_isa(const attn_ctx *ctx);

/* Number of ISAs compiled into the library, and the name of the i-th (static storage; NULL if out of range).
 * The order is from most portable to fastest: "generic" first. */
ATTN_API int32_t attn_isa_count(void);
ATTN_API const char *attn_isa_name(int32_t index);
/* 1 if this CPU and OS can run the named kernel table (CPUID plus XGETBV for AVX state), else 0. */
ATTN_API int attn_isa_available(const char *isa);
/* Space-separated CPU features detected at run time, e.g. "avx2 fma f16c avx512f avx512bw ...". Static. */
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
 * Order of application (CONVENTIONS.md "Logits, in order"): scale → soft-cap → ALiBi → mask → softmax. */
typedef struct attn_params {
    float softmax_scale;         /* multiplier of q·k; 0 = default 1/sqrt(head_size)                       */
    int32_t causal;              /* attn_causal                                                            */
    int32_t window_left;         /* keys visible iff p_i − window_left <= j; −1 = unbounded (HF/vLLM W → W−1)*/
    int32_t window_right;        /* keys visible iff j <= p_i + window_right; −1 = unbounded               */
    float softcap;               /* > 0: s = softcap·tanh(s/softcap); 0 = off                              */
    const float *alibi_slopes;   /* [num_heads] float32 or NULL: s += −slope[h]·|p_i − j|                  */
    const float *sinks;          /* [num_heads] float32 or NULL: per-head logit added to the denominator    */
    /* Diffusion masks (issue 4), boolean keep-masks (true = attend), combined with causal/window by AND.
     * mask:     bool/u8 view broadcastable as [batch, num_heads, seq_q, seq_k]: ndim 4 with shape[0] in
     *           {1, batch}, shape[1] in {1, num_heads}, or ndim 2 [seq_q, seq_k]. NULL = none.
     * key_padding_mask: bool/u8 [batch, seq_k] (true = valid key). NULL = none. */
    const attn_tensor *mask;
    const attn_tensor *key_padding_mask;
} attn_params;

/* Defaults: scale 0 (= 1/sqrt(head_size)), no causal, window (−1, −1), softcap 0, no ALiBi, sinks, masks. */
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
 * Semantics: FlashAttention-2 (Dao, 2023) forward; CONVENTIONS.md; diffusion seed dense path. */
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
 * params->mask must be NULL; params->key_padding_mask must be NULL (UNSUPPORTED otherwise).
 * Returns INVALID_ARGUMENT (e.g. "cu_seqlens_q: entry 3 = 7 < entry 2 = 9"), OVERFLOW, UNSUPPORTED. */
ATTN_API attn_status attn_forward_varlen(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *k,
                                         const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                         const attn_tensor *cu_seqlens_k, const attn_params *params,
                                         attn_tensor *out, attn_tensor *lse_opt);

/* Merge two attention states over disjoint key sets (vLLM merge_attn_states, FlashInfer merge_state):
 *   lse = logaddexp(lse_a, lse_b); out = e^(lse_a−lse)·out_a + e^(lse_b−lse)·out_b;
 *   both −inf → out = 0, lse = −inf. A +inf or NaN LSE is an error-free pass-through of IEEE rules.
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
 * LLM serving: paged KV cache, cache ops, metadata builder and plan, paged attention (issue 3)
 * ================================================================================================ */

/* (section owned by the serving backend; see docs/SEMANTICS.md) */

/* ================================================================================================
 * Diffusion: piecewise spans, pre-scaling, quantized attention (issue 4)
 * ================================================================================================ */

/* (section owned by the diffusion modes) */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTN_H */
