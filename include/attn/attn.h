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
 *
 * Stability (CHANGELOG.md records every change). The header a declaration is in says which promise it has:
 *   - Stable = this header, attn.h: status values (never renumbered), the dtype/layout/causal/state/request-kind
 *     enum values, the exported symbols it declares (abi/exported_symbols.txt), and the contract of the core and
 *     serving entries: context, dense / varlen / merge, the oracle twins of those, paged cache ops
 *     (attn_reshape_and_cache_ex and its wrappers, copy/swap_blocks, kv_cache_alloc, the KV-stored
 *     notification), plan and paged attention, capabilities, the fp8 / f16 / bf16 codecs. Option structs are
 *     size-prefixed (below): fields are only appended, so a caller built against an older header keeps working
 *     with a newer library. Before 1.0 a minor version may still break the ABI (it says so in CHANGELOG.md, as
 *     0.2 does by adding struct_size).
 *   - Experimental = include/attn/attn_experimental.h, which no header includes for you (a caller opts in with
 *     #include <attn/attn_experimental.h>; it includes this header): the diffusion entries — attn_forward_padded,
 *     attn_forward_packed, attn_forward_piecewise, attn_forward_paged_piecewise, attn_forward_kv_prefix,
 *     attn_forward_prescaled (and their workspace sizes and oracle twins) — and the quantized-attention entries:
 *     attn_quantize_mx / attn_dequantize_mx, attn_fp4_e2m1_*, attn_e8m0_to_float, attn_hadamard_*,
 *     attn_quant_params and attn_forward_quant(_ref). Any of them may change or go in any minor release
 *     (CHANGELOG.md marks each such change "Experimental"). Their semantics follow upstream projects that are
 *     still moving (vllm-omni, MindIE-SD).
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

/* IEEE binary16 and bfloat16 codecs, the ones every entry uses to read and write f16/bf16 tensors (bindings and
 * tools use them to build inputs and read outputs with the library's bits). Encoding rounds to nearest, ties
 * to even; finite values that round beyond the largest finite value (65504 for f16, about 3.39e38 for bf16)
 * give ±inf, as IEEE 754 rounding does; values below half the smallest subnormal give ±0 (f16 keeps
 * subnormals; bf16 has float32's range). NaN stays NaN with its sign, quieted (f16: the top 10 payload bits
 * kept, the quiet bit set; bf16: the top 7 payload bits kept, the quiet bit set). Decoding is exact (every f16
 * and bf16 value is a float32). Never fail, never allocate. Semantics: IEEE 754-2019 binary16 and
 * roundTiesToEven; bfloat16 as the upper 16 bits of binary32 (PyTorch, ml_dtypes). */
ATTN_API uint16_t attn_f16_from_float(float x);
ATTN_API float attn_f16_to_float(uint16_t bits);
ATTN_API uint16_t attn_bf16_from_float(float x);
ATTN_API float attn_bf16_to_float(uint16_t bits);

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
 * A call of the attention driver whose work is below about 2^18 flop (e.g. one decode token of 9 heads × 64
 * over 100 keys) is small: whether the other threads save more than waking them costs depends on the machine,
 * so the context times its small calls (the first 32 alternate between one thread and all; then it runs them
 * the way whose recent calls were faster, 4 in 64 the other way to keep checking), learning again when its
 * thread count or kernel table changes. The variable
 * ATTN_PARALLEL_MIN_FLOPS, read here, fixes the rule instead: calls below that many flop on one thread, nothing
 * learned (0: every call on all threads). Bits never depend on it.
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
 * unscaled query and the probabilities P to bf16 (round to nearest even) and adds two products per step;
 * f32/f16/fp8 K/V and bigger blocks give the avx512 bits. Results are within the tolerance stated in
 * docs/SEMANTICS.md §7 of the oracle (2e-2 of max|V| + 2e-2 relative; LSE 2e-2), bitwise identical for every
 * thread count and batch composition, not the default tables' bits, and a chunked prefill may differ from the
 * whole call in the last bits. And "amx" (AMX-TILE + AMX-BF16, tile state in XCR0 and the Linux tile-data
 * permission, requested once): the prefill (> 16 rows) Q·Kᵀ and P·V on AMX tiles (TDPBF16PS; q and P rounded to
 * bf16) for each kv tile whose K / V values are all bf16 values (a bf16 or fp8 cache, or f32/f16 K/V that happen to
 * hold bf16 values), the Q·Kᵀ of blocks of <= 16 rows over bf16 K with a head size that is a multiple of 32 on AMX
 * tiles too (other such blocks: avx512bf16's Q·Kᵀ), and the P·V of every block of <= 16 rows the avx512 table's
 * exact kernel; same tolerance and determinism contract. Its tile configuration stays loaded in the calling thread
 * after a call. attn_isa_available reports whether this CPU runs a table. */
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

/* ---- Size-prefixed option structs -------------------------------------------------------------------
 * attn_params, attn_plan_config, attn_quant_params and attn_cache_write_options start with
 * `size_t struct_size`, which their *_init function sets to the caller's sizeof (the init names are macros
 * over *_init_sized(p, sizeof *p), so a program compiled against an older header never has more bytes
 * written than its struct holds). The library reads a struct through struct_size by one rule:
 *   - struct_size < the struct's ATTN_*_SIZE_MIN (the fields of its first version): INVALID_ARGUMENT
 *     ("params.struct_size=0: expected >= 80 (set by attn_params_init)"); this is also what an
 *     uninitialised struct usually gets;
 *   - ATTN_*_SIZE_MIN <= struct_size <= sizeof (this library's struct): the fields that lie wholly inside
 *     struct_size are read, the fields past it take their defaults (what *_init writes);
 *   - sizeof < struct_size <= ATTN_STRUCT_SIZE_MAX (a caller compiled against a newer header): accepted when
 *     every byte past this library's sizeof is 0 (a field appended later has the all-zero bytes as its
 *     default, so the caller left it at its default); UNSUPPORTED naming the first nonzero byte otherwise
 *     (an option this library does not know); struct_size > ATTN_STRUCT_SIZE_MAX is INVALID_ARGUMENT.
 * A NULL pointer, where an entry accepts one, means all defaults. Fields are only ever appended, and an
 * appended field's default is all-zero bytes (NULL, 0). attn_capabilities_get follows the same idea with an
 * explicit caps_size. */
#define ATTN_STRUCT_SIZE_MAX ((size_t)4096)

/* Options shared by every attention entry. Initialise with attn_params_init(), then set fields.
 * Order of application (docs/SEMANTICS.md §1): scale → soft-cap → ALiBi →
 * additive mask → keep-masks (causal, window, key padding, mask) → softmax. */
typedef struct attn_params {
    size_t struct_size;          /* sizeof(attn_params) of the caller, set by attn_params_init (see above)  */
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
     * for kv_cache_dtype "auto". Default 1. The same fields and rules apply to the scales of a cache write
     * (attn_cache_write_options.k_scale / v_scale): a cache written with scales s is read with the same s. */
    float k_scale;
    float v_scale;
    /* Per-head fp8 scales (vLLM kv_scale_type "attn_head": one key and one value scale per KV head):
     * float32 [num_kv_heads] or NULL. When set, an element of kv head g of an fp8 cache means
     * decode(bits)·k_scales[g] (keys) / decode(bits)·v_scales[g] (values), and the scalar k_scale / v_scale
     * is not read; NULL = the scalar for every head. Each of the num_kv_heads entries (the cache's shape[3])
     * must be finite and > 0 (INVALID_ARGUMENT "params.k_scales[3]=0: expected a finite value > 0 for the
     * fp8_e4m3 kv_cache"); the array must hold num_kv_heads floats (the C API cannot check its length; the
     * Python layer does). Read by the same entries, under the same conditions, as k_scale / v_scale (ignored
     * for float caches). Applied exactly as the scalar: k_scales[g] multiplies the finished dot product
     * (softmax_scale·k_scales[g] rounded once to float32) and v_scales[g] the final normalisation, so a
     * per-head array whose entries all equal k_scale gives the scalar call's bits. Past
     * ATTN_PARAMS_SIZE_MIN: a struct_size that ends before them reads NULL. Default NULL. */
    const float *k_scales;
    const float *v_scales;
} attn_params;

/* Smallest struct_size the entries accept: the fields through v_scale. */
#define ATTN_PARAMS_SIZE_MIN (offsetof(attn_params, v_scale) + sizeof(float))

/* Defaults: struct_size = sizeof *params, scale 0 (= 1/sqrt(head_size)), no causal, window (−1, −1), softcap 0,
 * no ALiBi, sinks, masks (mask, key_padding_mask and additive_mask NULL), k_scale = v_scale = 1,
 * k_scales = v_scales = NULL. attn_params_init(p) is a macro for attn_params_init_sized(p, sizeof *p);
 * attn_params_init_sized writes the first struct_size bytes only (zeroing those past this library's fields)
 * and sets params->struct_size = struct_size when that field fits. NULL params or struct_size 0: no effect.
 * The function attn_params_init (the exported symbol, reached as (attn_params_init)(p) or through dlsym)
 * writes sizeof(attn_params) of the loaded library. */
ATTN_API void attn_params_init_sized(attn_params *params, size_t struct_size);
ATTN_API void(attn_params_init)(attn_params *params);
#define attn_params_init(params) attn_params_init_sized((params), sizeof *(params))

/* *dst = src read by the struct_size rule above: this library's attn_params with src's fields that fit in
 * src->struct_size and the defaults for the rest (dst->struct_size = sizeof(attn_params)); NULL src gives the
 * defaults. For libraries layered on attn (libattn_mpi) that copy or edit a caller's params before passing
 * them on. Returns INVALID_ARGUMENT (dst NULL, struct_size out of range), UNSUPPORTED (a nonzero byte past
 * this library's struct); *dst is untouched on failure. */
ATTN_API attn_status attn_params_copy(attn_params *dst, const attn_params *src);

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
 * out may alias out_a or out_b exactly (same view). Elements are computed one by one in float32 (the weights once
 * per row), so a merge of at least 2^16 elements runs on ctx's threads, one token per item, with the same bits as
 * on one. Returns INVALID_ARGUMENT (including ctx in use by another call). */
ATTN_API attn_status attn_merge_attn_states(attn_ctx *ctx, const attn_tensor *out_a,
                                            const attn_tensor *lse_a, const attn_tensor *out_b,
                                            const attn_tensor *lse_b, attn_tensor *out,
                                            attn_tensor *lse_out_opt);

/* attn_merge_attn_states with vLLM's two options (vLLM csrc/attention/merge_attn_states.cu: merge_attn_states(...,
 * prefill_tokens_with_context, output_scale)):
 *   merge_tokens >= 0: rows t < merge_tokens are merged; rows from merge_tokens on take state b as it is (out_b,
 *     and lse_b with +inf written as −inf). INT64_MAX (or any value >= num_tokens) merges every row.
 *   output_scale: 0 = out in out_a's dtype, as attn_merge_attn_states; > 0 and finite = out is FP8_E4M3 or
 *     FP8_E5M2 and receives encode(x · (1 / output_scale)) of each float32 result x, rounded to nearest even and
 *     saturating at ±448 / ±57344 (NaN stays NaN), as the fp8 cache write encodes.
 * Other arguments and rules as attn_merge_attn_states (out may alias out_a or out_b only when it is not fp8).
 * Returns INVALID_ARGUMENT (a negative merge_tokens, an output_scale < 0 or not finite, a float out with
 * output_scale, and as attn_merge_attn_states), OVERFLOW. */
ATTN_API attn_status attn_merge_attn_states_ex(attn_ctx *ctx, const attn_tensor *out_a, const attn_tensor *lse_a,
                                               const attn_tensor *out_b, const attn_tensor *lse_b, int64_t merge_tokens,
                                               float output_scale, attn_tensor *out, attn_tensor *lse_out_opt);

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
 * strides with the last dimension contiguous, any block_size >= 1. The key and value caches may be two
 * allocations (flash-attn's k_cache / v_cache): strides[0] is then the element distance from the key cache to
 * the value cache, negative when the value cache lies below it (the one stride that may be negative; views
 * lying between the two are not overlaps; libattn_mpi's ring prefill still wants strides >= 0). A head-major
 * cache (memory [2, num_blocks, num_kv_heads, block_size, R], rows R >= head_size elements apart: vLLM CPU's and
 * FlashInfer's HND order) is passed with this dimension order and strides {num_blocks·num_kv_heads·block_size·R,
 * num_kv_heads·block_size·R, R, block_size·R, 1}; decode walks it head by head. copy_blocks / swap_blocks move fp8
 * pages as bytes.
 * Token slot s lives in block s / block_size at row s % block_size;
 * slot = block_table[r][pos / block_size]·block_size + pos % block_size. */

/* Cache writes. One entry takes every option: attn_reshape_and_cache_ex with attn_cache_write_options (fp8
 * scales, per tensor or per KV head, and the "KV stored" callback), below after the notification types. The
 * four older entries (attn_reshape_and_cache, _scaled, _notify, _scaled_notify) are thin wrappers over it,
 * bitwise the same writes, statuses and messages; they stay until 1.0 (CHANGELOG.md).
 *
 * Writes new keys/values into the cache: for every token t with slot_mapping[t] >= 0,
 * kv_cache[0][slot / block_size][slot % block_size] = key[t] and kv_cache[1][...] = value[t].
 *   key, value:   [num_tokens, num_kv_heads, head_size] f32/f16/bf16 (same dtype; converted to the cache
 *                 dtype with round-to-nearest-even when they differ)
 *   kv_cache:     [2, num_blocks, block_size, num_kv_heads, head_size]
 *   slot_mapping: int64 or int32 [n], n <= num_tokens (trailing padded key/value rows are ignored, as in
 *                 vLLM); a negative slot (PAD_SLOT_ID = −1) writes nothing.
 * Every slot is checked before anything is written: a slot >= num_blocks·block_size is INVALID_ARGUMENT
 * ("slot_mapping: entry 5 = 9001 >= num_blocks·block_size = 4096") and the cache is untouched. Duplicate
 * slots: the later token wins. The cache must not overlap key/value/slot_mapping, and each of its elements needs
 * its own memory (a stride-0 or interleaved view whose elements meet, or key and value halves that meet element by
 * element, is INVALID_ARGUMENT "kv_cache: its elements overlap in memory ..."); strides[0] = 0 is the exception:
 * both halves are one cache (one key or value cache viewed twice), and for each token the value is written after
 * the key, so the value stays. The same rule holds for the caches copy_blocks and swap_blocks write. The test is
 * the one outputs get (attn_validate_distinct_elements' rule): sorted by size, each stride must reach past the
 * elements the smaller ones span, so an unusual interleaving whose elements happen not to collide is refused too
 * (every layout this header describes, vLLM's included, passes).
 * Returns INVALID_ARGUMENT, OVERFLOW. Source: vLLM reshape_and_cache(_flash), vllm-ascend reshape_and_cache.
 * Wrapper: attn_reshape_and_cache_ex(ctx, key, value, kv_cache, slot_mapping, NULL). */
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
 * quantization/fp8/nvidia/quant_utils.cuh (stored code = fp8(value / scale)).
 * Wrapper: attn_reshape_and_cache_ex with options {k_scale, v_scale}. */
ATTN_API attn_status attn_reshape_and_cache_scaled(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                                   attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                                   float k_scale, float v_scale);

/* Copies whole blocks inside one cache (copy-on-write): for each row i in order,
 * kv_cache[:, dst] = kv_cache[:, src] with (src, dst) = block_mapping[i] (keys and values).
 *   kv_cache: as attn_reshape_and_cache, or a U8 view of an fp8 cache (vLLM allocates fp8 caches as uint8):
 *             blocks move as bytes whatever the dtype.
 *   block_mapping: int64 or int32 [num_pairs, 2]; every id must be in [0, num_blocks) (checked first).
 * Pairs are applied in order (a later pair sees earlier copies). Returns INVALID_ARGUMENT, OVERFLOW.
 * Source: vllm-ascend's AscendAttentionBackend.copy_blocks. */
ATTN_API attn_status attn_copy_blocks(attn_ctx *ctx, attn_tensor *kv_cache, const attn_tensor *block_mapping);

/* Copies whole blocks between two caches (e.g. to/from a host offload pool): dst_cache[:, dst] =
 * src_cache[:, src] for each (src, dst) = block_mapping[i]. The caches must share dtype, block_size,
 * num_kv_heads and head_size (num_blocks may differ) and must not overlap; U8 is accepted as vLLM's fp8
 * storage, and a U8 cache pairs with a U8 or fp8 cache of either format (bytes are moved; the codes keep the
 * meaning of the cache they came from). src ids are checked against
 * src_cache and dst ids against dst_cache before anything is written.
 *   block_mapping: int64 or int32 [num_pairs, 2]. Returns INVALID_ARGUMENT, OVERFLOW.
 * Source: vllm-ascend's AscendAttentionBackend.swap_blocks. */
ATTN_API attn_status attn_swap_blocks(attn_ctx *ctx, const attn_tensor *src_cache, attn_tensor *dst_cache,
                                      const attn_tensor *block_mapping);

/* Copies raw blocks between two regions (newer vLLM's swap_blocks(src, dst, block_size_in_bytes, block_mapping),
 * e.g. a cache and an int8 offload region): src and dst are any views (any dtype, strides >= 0) read as the bytes
 * from their data pointers to the end of their last elements, in blocks of block_size_in_bytes bytes (a trailing
 * partial block is not addressable); for each (s, d) = block_mapping[i] in order, block d of dst = block s of src.
 * src and dst may be one buffer (a pair then reads what an earlier pair wrote).
 *   block_mapping: int64 or int32 [num_pairs, 2]; ids checked against each region's whole blocks first.
 * Returns INVALID_ARGUMENT (block_size_in_bytes <= 0, an id out of range, an FP4_E2M1 view (two codes per
 * byte), block_mapping within dst's byte span), OVERFLOW. Source: newer vLLM's swap_blocks, its block_size_in_bytes
 * form. */
ATTN_API attn_status attn_swap_blocks_bytes(attn_ctx *ctx, const attn_tensor *src, attn_tensor *dst,
                                            int64_t block_size_in_bytes, const attn_tensor *block_mapping);

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

/* Moves a cache the engine allocated itself onto transparent huge pages (Linux), its contents unchanged: the 2 MiB
 * pages inside the span of `cache` (first to last element) are advised madvise(MADV_HUGEPAGE), and each of them that
 * holds only zero bytes and lies in a private anonymous mapping (torch's and NumPy's large allocations, malloc's)
 * is released (MADV_DONTNEED), so that its next touch maps a zero-filled huge page. Meant for a freshly zeroed cache
 * (vLLM allocates its caches with torch.zeros, on base pages unless torch's THP_MEM_ALLOC_ENABLE=1 is set), before
 * anything is written to it: pages already written keep their memory and base pages (the advice lets the kernel's
 * khugepaged collapse them later). On the Intel Xeon of the 2026-12-07 bench results, bf16 decode over vLLM's
 * token-major cache at b8 × 32k keys took 124 ms on base pages and 115 ms on huge pages (bench_decode --pages both).
 * No other thread may write the span during the call: a zero page it writes between the check and the release
 * would lose the write. Elsewhere than Linux, or where THP is "never", nothing happens.
 *   cache: a view with strides >= 0 (attn_tensor_check) of whole-byte elements, e.g. a kv_cache or the engine's
 *          whole byte allocation; the span covers the gaps between its elements. A span over more than one mapping
 *          (/proc/self/maps) is advised but nothing is released.
 *   released_bytes_opt: set to the bytes released to refault as huge pages (0 when none, and on failure), or NULL.
 * Reads every byte of the span once (a second per ~10 GB). Returns INVALID_ARGUMENT (cache NULL, not a valid view,
 * a negative stride, FP4_E2M1 elements), OVERFLOW (a view whose byte size does not fit). Source: Linux madvise(2);
 * this library's decode measurements. */
ATTN_API attn_status attn_kv_cache_to_huge_pages(const attn_tensor *cache, int64_t *released_bytes_opt);

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
 * nothing is written either. No allocation, no lock. Returns INVALID_ARGUMENT, OVERFLOW.
 * Wrapper: attn_reshape_and_cache_ex with options {notify}; notify NULL is INVALID_ARGUMENT here ("notify: is
 * NULL (use attn_reshape_and_cache)"). */
ATTN_API attn_status attn_reshape_and_cache_notify(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                                   attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                                   const attn_kv_notify *notify);
/* attn_reshape_and_cache_scaled (fp8 caches with per-tensor k_scale / v_scale: same arguments, checks, statuses
 * and writes), then the one notify->on_stored call of attn_reshape_and_cache_notify, under the same rules: only
 * after a successful write, never on a validation failure (bad scales included: then nothing is written and no
 * call is made). The event's kv_cache is the fp8 cache: a consumer moves the codes as bytes and uses the same
 * scales. Returns INVALID_ARGUMENT, OVERFLOW. Source: vllm-ascend's is_kv_producer reshape_cache_event, with vLLM's
 * fp8 cache write (attn_reshape_and_cache_scaled). Wrapper: attn_reshape_and_cache_ex with options {k_scale,
 * v_scale, notify} (notify NULL: INVALID_ARGUMENT, as attn_reshape_and_cache_notify). */
ATTN_API attn_status attn_reshape_and_cache_scaled_notify(attn_ctx *ctx, const attn_tensor *key,
                                                          const attn_tensor *value, attn_tensor *kv_cache,
                                                          const attn_tensor *slot_mapping, float k_scale,
                                                          float v_scale, const attn_kv_notify *notify);

/* Options of a cache write (attn_reshape_and_cache_ex). Size-prefixed (the struct_size rule of attn_params;
 * ATTN_CACHE_WRITE_OPTIONS_SIZE_MIN = sizeof of this first version). Initialise with
 * attn_cache_write_options_init(), then set fields. The scale fields have the names, meaning and checks of
 * the read side's attn_params.k_scale / v_scale / k_scales / v_scales: a cache is read with the scales it was
 * written with. */
typedef struct attn_cache_write_options {
    size_t struct_size;          /* sizeof(attn_cache_write_options), set by attn_cache_write_options_init    */
    /* fp8 cache: key element stored as encode(x / k_scale), value element as encode(x / v_scale) (vLLM's
     * per-tensor layer._k_scale / _v_scale); finite and > 0 (INVALID_ARGUMENT "k_scale=0: expected a finite
     * value > 0 for the fp8_e4m3 kv_cache"). Not read for an f32/f16/bf16 cache. Default 1. */
    float k_scale;
    float v_scale;
    /* Per-head fp8 scales (vLLM kv_scale_type "attn_head"): float32 [num_kv_heads] or NULL. When set, kv head
     * g is stored as encode(x / k_scales[g]) (values: v_scales[g]) and the scalar is not read. Every entry
     * finite and > 0 (INVALID_ARGUMENT "k_scales[1]=nan: expected a finite value > 0 for the fp8_e4m3
     * kv_cache"), checked before anything is written; not read for a float cache. Default NULL. */
    const float *k_scales;
    const float *v_scales;
    /* Disaggregated prefill: NULL = no callback; else after a successful write exactly one call
     * notify->on_stored(notify->user, &event), under the rules of attn_reshape_and_cache_notify (a bad
     * notify — NULL on_stored, layer_idx < 0 — is INVALID_ARGUMENT before anything is written). Default NULL. */
    const attn_kv_notify *notify;
} attn_cache_write_options;

#define ATTN_CACHE_WRITE_OPTIONS_SIZE_MIN (offsetof(attn_cache_write_options, notify) + sizeof(void *))

/* Defaults: struct_size = sizeof *opts, k_scale = v_scale = 1, k_scales = v_scales = NULL, notify NULL. A macro
 * over attn_cache_write_options_init_sized(opts, sizeof *opts) (writes the first struct_size bytes only, as
 * attn_params_init_sized). NULL opts: no effect. */
ATTN_API void attn_cache_write_options_init_sized(attn_cache_write_options *opts, size_t struct_size);
#define attn_cache_write_options_init(opts) attn_cache_write_options_init_sized((opts), sizeof *(opts))

/* The cache write with every option: for every token t with slot_mapping[t] >= 0,
 * kv_cache[0][slot / block_size][slot % block_size][g] = key[t][g] and kv_cache[1][...][g] = value[t][g],
 * converted to the cache dtype: float caches round-to-nearest-even; fp8 caches encode(x / scale) with the
 * scale of kv head g (opts->k_scales[g] / v_scales[g] when set, else opts->k_scale / v_scale), x / scale in
 * float32, saturating to ±max (448 E4M3, 57344 E5M2; ±inf saturates too, NaN stays NaN) as vLLM's
 * scaled_convert (__NV_SATFINITE). Then, if opts->notify is set, its one on_stored call.
 *   key, value:   [num_tokens, num_kv_heads, head_size] f32/f16/bf16, same dtype (fp8 rows: INVALID_ARGUMENT)
 *   kv_cache:     [2, num_blocks, block_size, num_kv_heads, head_size] f32/f16/bf16/fp8_e4m3/fp8_e5m2; must
 *                 not overlap key, value or slot_mapping
 *   slot_mapping: int64 or int32 [n], n <= num_tokens (trailing rows ignored); a negative slot writes nothing;
 *                 a slot >= num_blocks·block_size is INVALID_ARGUMENT ("slot_mapping: entry 5 = 9001 >=
 *                 num_blocks·block_size = 4096"); duplicate slots: the later token wins
 *   opts:         NULL = the defaults (= attn_reshape_and_cache); struct_size checked by the rule above
 * Every argument, slot and scale is checked before anything is written; on failure the cache is untouched
 * and no callback is made. No allocation, no lock. Returns INVALID_ARGUMENT, UNSUPPORTED (opts->struct_size
 * past this library's struct with a nonzero tail), OVERFLOW. Source: vLLM csrc/cache_kernels.cu
 * reshape_and_cache(_flash) (per-tensor and, since kv_scale_type "attn_head", per-head k_scale / v_scale
 * tensors), vllm-ascend reshape_and_cache and its is_kv_producer reshape_cache_event. */
ATTN_API attn_status attn_reshape_and_cache_ex(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                               attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                               const attn_cache_write_options *opts);

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

/* Model/engine constants of a plan. Initialise with attn_plan_config_init() (size-prefixed: the struct_size rule
 * of attn_params applies, ATTN_PLAN_CONFIG_SIZE_MIN = the fields through spec_method_mtp). */
typedef struct attn_plan_config {
    size_t struct_size;              /* sizeof(attn_plan_config), set by attn_plan_config_init       */
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

#define ATTN_PLAN_CONFIG_SIZE_MIN (offsetof(attn_plan_config, spec_method_mtp) + sizeof(int32_t))

/* Defaults: struct_size = sizeof *config, all zero except block_size 128, num_speculative_tokens 0,
 * chunked_prefill_enabled 1. A macro over attn_plan_config_init_sized(config, sizeof *config), which writes
 * the first struct_size bytes only (as attn_params_init_sized); the exported attn_plan_config_init writes
 * this library's sizeof. attn_plan_create reads config by the struct_size rule (INVALID_ARGUMENT /
 * UNSUPPORTED as attn_params). */
ATTN_API void attn_plan_config_init_sized(attn_plan_config *config, size_t struct_size);
ATTN_API void(attn_plan_config_init)(attn_plan_config *config);
#define attn_plan_config_init(config) attn_plan_config_init_sized((config), sizeof *(config))

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
 * v_scale (finite, > 0), or with params->k_scales / v_scales per KV head: the finished dot product q·k is
 * multiplied by softmax_scale·k_scale (rounded once to float32; q itself is not scaled) and v_scale enters the
 * final normalisation, K/V rows are widened exactly to float32 on the converted-row path; key_opt /
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
 *   seq_lens int32 [num_reqs] (>= 0; q_len > seq_len leaves the first rows without keys); block_table int32 [num_reqs,
 * max_blocks] (row stride any, entries past ceil(seq_len / block_size) ignored). Validated every call: used block ids
 * in [0, num_blocks) ("block_table: entry [3][7] = 9001 >= num_blocks=4096"), ceil(seq_len / block_size) <= max_blocks.
 * Causal bottom-right per request if params->causal says so. An fp8 kv_cache is dequantized with params->k_scale /
 * v_scale as in attn_forward_paged. Folds the partitions in ascending order in the context's scratch (no workspace);
 * with fewer (sequence, kv-head group) items than threads, each item's partitions are spread over the threads
 * first (the same bits). Returns INVALID_ARGUMENT,
 * UNSUPPORTED (masks), OVERFLOW. */
ATTN_API attn_status attn_paged_attention(attn_ctx *ctx, const attn_tensor *q, const attn_tensor *kv_cache,
                                          const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                          const attn_tensor *block_table, const attn_params *params,
                                          attn_tensor *out, attn_tensor *lse_opt);

/* Oracle twin of attn_paged_attention (double accumulation, one thread; the same arguments but the context, and
 * the same checks; an fp8 cache element is decode(bits)·scale in double). */
ATTN_API attn_status attn_ref_paged_attention(const attn_tensor *q, const attn_tensor *kv_cache,
                                              const attn_tensor *query_start_loc, const attn_tensor *seq_lens,
                                              const attn_tensor *block_table, const attn_params *params,
                                              attn_tensor *out, attn_tensor *lse_opt);

/* flash-attn's flash_attn_with_kvcache (flash-attn 2, with flash-attn 3's descales as params' fp8 scales): appends
 * new keys / values to a cache, in place, then attends the queries over each sequence's keys.
 *   q [batch, seqlen_q, nheads, headdim] f32/f16/bf16; out like q with headdim_v = the cache's head_size;
 *   lse_opt float32 [batch, nheads, seqlen_q] (natural log) or NULL.
 *   kv_cache [2, num_blocks, block_size, nheads_k, headdim] as attn_paged_attention's (halves = flash-attn's
 *     k_cache and v_cache; they may be two allocations, strides[0] the distance between them). Without a
 *     block_table a block is one sequence's cache row: [2, batch_cache, seqlen_cache, nheads_k, headdim].
 *   k_opt / v_opt [batch, seqlen_new, nheads_k, headdim] or both NULL: written at positions cache_seqlens[b] ..
 *     cache_seqlens[b] + seqlen_new − 1 of sequence b, as attn_reshape_and_cache_ex writes them (fp8 caches with
 *     params' k_scale(s) / v_scale(s)); the first two dims must merge without a copy.
 *   cache_seqlens_opt int32 [batch] or 0-d (one length for all): keys already cached; NULL = the whole capacity
 *     (block_size, or block_table's max_blocks·block_size). Each >= 0, plus seqlen_new <= the capacity.
 *   cache_batch_idx_opt int32 [batch]: the cache row of sequence b (no block_table; without it batch_cache >= batch
 *     and row b serves sequence b). block_table_opt int32 [batch, max_blocks] as attn_paged_attention's.
 *   cache_leftpad_opt int32 [batch]: sequence b's keys are positions cache_leftpad[b] .. cache_seqlens[b] +
 *     seqlen_new − 1 (0 <= cache_leftpad[b] <= cache_seqlens[b]); positions below are never read; causal masks and
 *     ALiBi count from the first real key. The cache's rows must run evenly across blocks (one row stride).
 *   alibi_slopes_opt float32 [batch, nheads], rows contiguous: per-sequence slopes (flash-attn's second form; one
 *     attention call per sequence); params->alibi_slopes must then be NULL.
 * Causal is bottom-right over each sequence's keys; seqlen_q may exceed them (those rows: out 0, LSE −inf). Every
 * argument is checked before the cache is written (out must not overlap q, kv_cache, k or v); the same checks as
 * attn_paged_attention and attn_reshape_and_cache_ex otherwise. Needs O(batch) scratch per call (20 bytes a
 * sequence and 8 per new token, plus 4·batch·longest sequence with cache_leftpad, and nheads·batch·seqlen_q floats
 * of LSE when batch and seqlen_q are both > 1): up to 8 KiB it is on the stack (a decode step of up to ~290
 * sequences allocates nothing), beyond that it is allocated per call. Bits equal attn_paged_attention's on the same keys.
 * Returns INVALID_ARGUMENT, UNSUPPORTED (masks), OVERFLOW, OUT_OF_MEMORY. Source: flash-attn
 * flash_attn_interface.flash_attn_with_kvcache. */
ATTN_API attn_status attn_forward_kvcache(attn_ctx *ctx, const attn_tensor *q, attn_tensor *kv_cache,
                                          const attn_tensor *k_opt, const attn_tensor *v_opt,
                                          const attn_tensor *cache_seqlens_opt, const attn_tensor *cache_batch_idx_opt,
                                          const attn_tensor *cache_leftpad_opt, const attn_tensor *block_table_opt,
                                          const attn_tensor *alibi_slopes_opt, const attn_params *params,
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
 * FP8 codecs (OCP OFP8 rev 1.0)
 * ================================================================================================ */

/* The codecs every entry uses to read and write an fp8 KV cache (bindings and tools use them to build fp8 caches
 * with the library's bits). Encoding is round-to-nearest-even with saturation: finite values beyond the format's
 * max and ±inf map to ±max (448 for E4M3, 57344 for E5M2); NaN maps to NaN (0x7F|sign for both formats). Values
 * below half the smallest subnormal flush to ±0. Decoding is exact. None of them allocates. Semantics: OCP 8-bit
 * Floating Point Specification (OFP8) rev 1.0. */
ATTN_API uint8_t attn_fp8_from_float(attn_dtype format, float x); /* format FP8_E4M3 or FP8_E5M2; else 0 */
ATTN_API float attn_fp8_to_float(attn_dtype format, uint8_t bits); /* NaN for an unknown format        */

/* Scaled FP8 of n values: dst[i] = encode(src[i] / scale); dequantize: dst[i] = decode(src[i]) · scale.
 * format FP8_E4M3 or FP8_E5M2; scale finite and > 0. Returns INVALID_ARGUMENT (NULL, n < 0, bad format or
 * scale). */
ATTN_API attn_status attn_quantize_fp8(attn_dtype format, const float *src, int64_t n, float scale,
                                       uint8_t *dst);
ATTN_API attn_status attn_dequantize_fp8(attn_dtype format, const uint8_t *src, int64_t n, float scale,
                                         float *dst);

/* The diffusion and quantized-attention entries (attn_forward_padded, ..., attn_forward_quant) are declared in
 * <attn/attn_experimental.h>, which a caller includes explicitly (see "Stability" at the top). */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTN_H */
