/*
 * attn_mpi.h — context parallelism for libattn across processes on MPI: libattn_mpi.
 *
 * A separate library over the public libattn API (include/attn/attn.h); libattn itself has no MPI
 * dependency. Three schemes, each a plan made once (buffers sized and allocated there) and a run per layer
 * that allocates nothing:
 *   DCP      decode context parallel: every rank holds an interleaved shard of each request's KV in its own
 *            paged cache, computes partial attention + LSE of the (replicated) decode queries over it; the
 *            partial states are all-gathered and merged with attn_merge_attn_states in ascending rank order.
 *   ring     prefill context parallel (PCP): zig-zag sequence shards; K/V shards travel around the ring with
 *            MPI_Isend/MPI_Irecv while the shard in hand is computed; partial states merged by LSE.
 *   Ulysses  all-to-all from sequence shards to head shards, any attn forward, all-to-all back; combined
 *            with ring as USP (attn_mpi_usp_forward).
 * Design, merge orders, exactness and the cost model: docs/CONTEXT_PARALLEL.md.
 *
 * Conventions (as attn.h): tensor views with strides in elements, last dimension contiguous; a view with a
 * zero-size dimension (a rank's empty shard, e.g. a ring of seq_len < 2·P) is accepted with any strides,
 * since none of its elements is addressed (NumPy gives such arrays zero strides); statuses are attn_status.
 * Every entry is COLLECTIVE over the plan's communicator: every rank must call it with matching arguments.
 * Collective validation (docs/CONTEXT_PARALLEL.md, Design):
 *   - Each entry validates its own arguments, then agrees on the outcome with the other ranks (one
 *     MPI_Allreduce) BEFORE any other collective or data exchange, so a bad argument on some ranks makes
 *     EVERY rank return an error without any rank deadlocking. A failing rank returns its own status and
 *     message (naming the argument); the others return the lowest failing rank's status with a message
 *     naming the failing rank(s): "rank 2 rejected the config: ATTN_STATUS_INVALID_ARGUMENT (...)".
 *   - Plan creation agrees on the caller's communicator before MPI_Comm_dup: a NULL or invalid config (or
 *     a NULL plan pointer) on one rank fails every rank at once, *plan NULL everywhere.
 *   - What must be the same on every rank is compared in the same allreduce (min and max of each value, or
 *     of a hash for array contents and shapes): the plan configs; in forward calls params.causal,
 *     window_left/right, softmax_scale, softcap, alibi_slopes and sinks (NULL or not, and their values),
 *     mask / key_padding_mask / additive_mask (NULL or not, dtype, shape; contents are not compared), q's
 *     dtype, and for DCP the request layout (query_start_loc, seq_lens), the cache dtype, its KV head count
 *     and k_scale / v_scale. A difference returns INVALID_ARGUMENT on every rank naming the option
 *     ("params.window_left differs between ranks (-1 .. 2; this rank -1): ..."). Tensor CONTENTS that are
 *     meant to be replicated (DCP queries, mask values) are not compared.
 *   - The exceptions, which cannot be agreed on because there is no communicator to talk over: a NULL
 *     plan passed to a forward call, and a plan creation with MPI_COMM_NULL or before MPI_Init / after
 *     MPI_Finalize. These return INVALID_ARGUMENT on the calling rank only, at once; the other ranks then
 *     wait in the call's first collective (a deadlock, as with any MPI collective one rank skips).
 * Nothing is written to any output unless every rank succeeded. A failing MPI call returns
 * ATTN_STATUS_INTERNAL with the MPI error string (the communicator's error handler is set to return).
 * Messages are thread-local and read with attn_mpi_last_error() (libattn's own message is copied into it
 * when a libattn call fails).
 * Semantics: docs/SEMANTICS.md §4 (the LSE merge rule); DCP sharding: vllm-ascend worker/block_table.py and
 * get_dcp_local_seq_lens (docs/CONTEXT_PARALLEL.md); ring attention: Liu et al. 2023 ("Ring Attention
 * with Blockwise Transformers"), zig-zag load balancing as in zhuzilin/ring-flash-attention; Ulysses:
 * Jacobs et al. 2023 (DeepSpeed-Ulysses); USP: Fang & Zhao 2024 (yunchang / xDiT).
 */
#ifndef ATTN_ATTN_MPI_H
#define ATTN_ATTN_MPI_H

#include <mpi.h>
#include <stdint.h>

#include "attn/attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Thread-local message of the last failing libattn_mpi call on this thread ("" if none). */
ATTN_API const char *attn_mpi_last_error(void);

/* Counters of one collective call (all ranks fill their own). Bytes are payload bytes this rank handed to
 * MPI for other ranks (an all-gather of n bytes to P ranks counts n·(P−1)). Seconds by MPI_Wtime.
 *   compute_seconds: in libattn calls (attention, merge) and packing;
 *   wait_seconds:    blocked in MPI waits / collectives after the compute that could overlap them — the
 *                    communication that was NOT hidden (ring: time in MPI_Waitall after each step's compute). */
typedef struct attn_mpi_stats {
    int64_t bytes_sent;
    int64_t bytes_received;
    int64_t num_messages;
    double compute_seconds;
    double wait_seconds;
    double total_seconds;
} attn_mpi_stats;

/* ================================================================================================
 * DCP: decode context parallel on the paged cache
 * ================================================================================================ */

/* Sharding (vllm-ascend's DCP with interleave I = cp_kv_cache_interleave_size over P ranks): global position p of a
 * request belongs to rank (p / I) mod P and is that rank's local token (p / (I·P))·I + p mod I. This equals
 * vllm-ascend's ((p mod (B·P)) / I) mod P whenever I divides the block size B. Local tokens are stored in the
 * rank's own cache through the rank's own block table (slot = block_table[t / B]·B + t mod B).
 * attn_mpi_dcp_local_len: keys of a length-seq_len request that rank holds (vllm-ascend's get_dcp_local_seq_lens);
 * 0 for bad arguments (seq_len < 0, world < 1, interleave < 1, rank outside [0, world)). */
ATTN_API int64_t attn_mpi_dcp_local_len(int64_t seq_len, int32_t world, int32_t interleave, int32_t rank);

/* Slot mapping of new tokens for this rank's cache: tokens at global positions first_pos + t,
 * t in [0, num_tokens), get slots[t] = their local slot if rank owns them, else −1 (vLLM's "not local";
 * attn_reshape_and_cache skips negative slots). block_ids: [num_block_ids] the request's local block table.
 * Pure (no communication). Returns INVALID_ARGUMENT (NULLs, ranges, a local block index past num_block_ids:
 * "block_ids: local token 37 needs block 2 >= num_block_ids=2"), nothing written then. */
ATTN_API attn_status attn_mpi_dcp_slot_mapping(int32_t rank, int32_t world, int32_t interleave,
                                               int32_t block_size, int64_t first_pos, int64_t num_tokens,
                                               const int32_t *block_ids, int64_t num_block_ids,
                                               int64_t *slots);

typedef struct attn_mpi_dcp_config {
    int32_t interleave_size;     /* I >= 1 (vllm-ascend's cp_kv_cache_interleave_size)               */
    int32_t num_heads;           /* query heads (all of them: queries are replicated on every rank)  */
    int32_t head_size;           /* key = value head size, 1..256                                    */
    int32_t max_tokens;          /* most decode query rows of one call (>= 1)                        */
    int32_t max_blocks_per_req;  /* width of the local block tables passed to attn_mpi_dcp_forward   */
} attn_mpi_dcp_config;

typedef struct attn_mpi_dcp_plan attn_mpi_dcp_plan;

/* Creates a DCP plan on comm (duplicated inside; collective). Allocates per-rank partial states
 * [P][max_tokens·num_heads·(head_size + 1)] float32, a query copy and the per-row metadata once.
 * Returns INVALID_ARGUMENT (NULLs, config fields out of range, configs differing between ranks; on every
 * rank when any rank's config is refused, see the header comment), OVERFLOW, OUT_OF_MEMORY, INTERNAL (MPI).
 * *plan is NULL on failure. */
ATTN_API attn_status attn_mpi_dcp_plan_create(MPI_Comm comm, const attn_mpi_dcp_config *config,
                                              attn_mpi_dcp_plan **plan);
ATTN_API void attn_mpi_dcp_plan_free(attn_mpi_dcp_plan *plan);

/* Decode attention of requests whose KV is sharded over the plan's ranks (collective).
 *   q:               [num_tokens, num_heads, head_size] f32/f16/bf16, the SAME on every rank (replicated
 *                    queries, as vllm-ascend all-gathers query heads); num_tokens <= max_tokens
 *   kv_cache:        this rank's cache [2, num_blocks, block_size, num_kv_heads, head_size] (attn.h)
 *   query_start_loc: int32 [num_reqs + 1] (same on every rank); q_len of a request <= 16
 *   seq_lens:        int32 [num_reqs] GLOBAL key counts (cached + new; same on every rank)
 *   block_table:     int32 [num_reqs, max_blocks] this rank's local tables, max_blocks <= max_blocks_per_req
 *   params:          causal NONE or BOTTOM_RIGHT (query row i of a request at global position
 *                    seq_len − q_len + i sees keys <= it), softcap, scale, sinks (added once, by rank 0);
 *                    window, ALiBi and masks are UNSUPPORTED (they need global positions inside the kernel)
 *   out:             [num_tokens, num_heads, head_size] q's dtype; lse_opt float32 [num_heads, num_tokens]
 * Every rank gets the whole result. Rank r computes its partial state in float32 with attn_paged_attention
 * (each query row as its own request over its visible local prefix), the states are all-gathered and folded
 * left in rank order 0, 1, ..., P−1 with attn_merge_attn_states: for a given P the bits are the same on
 * every rank and in every run. Returns INVALID_ARGUMENT, UNSUPPORTED, OVERFLOW, INTERNAL. */
ATTN_API attn_status attn_mpi_dcp_forward(attn_ctx *ctx, attn_mpi_dcp_plan *plan, const attn_tensor *q,
                                          const attn_tensor *kv_cache, const attn_tensor *query_start_loc,
                                          const attn_tensor *seq_lens, const attn_tensor *block_table,
                                          const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                          attn_mpi_stats *stats_opt);

/* ================================================================================================
 * Ring attention (PCP) with zig-zag sharding
 * ================================================================================================ */

/* Zig-zag shard of a length-seq_len sequence over world ranks: the sequence is cut into 2·world chunks,
 * chunk c = [c·seq_len/(2·world), (c+1)·seq_len/(2·world)) (integer division), and rank r holds chunks r and
 * 2·world−1−r, in that order, as its local rows. Writes chunk_start[2], chunk_len[2]. Returns
 * INVALID_ARGUMENT for bad arguments (nothing written). */
ATTN_API attn_status attn_mpi_zigzag_chunks(int64_t seq_len, int32_t world, int32_t rank,
                                            int64_t chunk_start[2], int64_t chunk_len[2]);

typedef struct attn_mpi_ring_config {
    int64_t batch;        /* sequences (dense entry; the paged entry needs 1)                     */
    int64_t seq_len;      /* GLOBAL tokens per sequence (self-attention: queries = keys)          */
    int32_t num_heads;    /* query heads                                                           */
    int32_t num_kv_heads; /* divides num_heads                                                     */
    int32_t head_size;    /* q/k, 1..256                                                           */
    int32_t head_size_v;  /* v/out, 1..256                                                         */
    attn_dtype kv_dtype;  /* dtype of k/v (travels around the ring as is): f32, f16, bf16          */
} attn_mpi_ring_config;

typedef struct attn_mpi_ring_plan attn_mpi_ring_plan;

/* Creates a ring plan on comm (duplicated; collective): two ring buffers (double buffering) of the largest
 * shard's K and V, float32 accumulators and partial-state buffers for the local queries.
 * Returns INVALID_ARGUMENT (also for configs differing between ranks; on every rank when any rank's config is
 * refused), OVERFLOW, OUT_OF_MEMORY, INTERNAL. */
ATTN_API attn_status attn_mpi_ring_plan_create(MPI_Comm comm, const attn_mpi_ring_config *config,
                                               attn_mpi_ring_plan **plan);
ATTN_API void attn_mpi_ring_plan_free(attn_mpi_ring_plan *plan);

/* Ring attention over zig-zag shards (collective).
 *   q:   [batch, seq_local, num_heads, head_size] BSND, f32/f16/bf16; seq_local = chunk_len[0] + chunk_len[1]
 *        of attn_mpi_zigzag_chunks (rows: chunk r, then chunk 2P−1−r)
 *   k, v: [batch, seq_local, num_kv_heads, head_size(_v)] in config.kv_dtype, the same rows
 *   params: causal NONE, BOTTOM_RIGHT or TOP_LEFT (equal here: queries = keys), scale, softcap, sinks
 *        (added once); window, ALiBi, masks UNSUPPORTED (use Ulysses for masked diffusion attention)
 *   out: [batch, seq_local, num_heads, head_size_v] q's dtype; lse_opt float32 [batch, num_heads, seq_local]
 * Step s = 0..P−1: rank r holds the K/V shard of rank (r − s) mod P, posts MPI_Irecv of the next shard from
 * rank r−1 and MPI_Isend of the one in hand to rank r+1, computes attn_forward of each local query chunk
 * against each held key chunk (chunk pairs above the diagonal skipped, the diagonal causal, below it full)
 * into float32 partial states, merges them into the accumulator (attn_merge_attn_states), then waits.
 * The merge order is fixed by (P, r): bitwise identical across runs for a given P.
 * Returns INVALID_ARGUMENT, UNSUPPORTED, OVERFLOW, INTERNAL. */
ATTN_API attn_status attn_mpi_ring_forward(attn_ctx *ctx, attn_mpi_ring_plan *plan, const attn_tensor *q,
                                           const attn_tensor *k, const attn_tensor *v,
                                           const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                           attn_mpi_stats *stats_opt);

/* Ring attention with this rank's K/V shard in its own paged cache (config.batch must be 1):
 *   q:           [seq_local, num_heads, head_size]; out [seq_local, num_heads, head_size_v] (head_size_v ==
 *                head_size); lse_opt float32 [num_heads, seq_local]
 *   kv_cache:    [2, num_blocks, block_size, num_kv_heads, head_size], dtype config.kv_dtype, holding local
 *                token t (row t of the zig-zag shard) at slot block_table[t / block_size]·block_size +
 *                t mod block_size (written with attn_reshape_and_cache)
 *   block_table: int32 [num_block_ids] >= ceil(seq_local / block_size), ids < num_blocks
 * The local shard is gathered from the cache into the first ring buffer, then as attn_mpi_ring_forward. */
ATTN_API attn_status attn_mpi_ring_forward_paged(attn_ctx *ctx, attn_mpi_ring_plan *plan, const attn_tensor *q,
                                                 const attn_tensor *kv_cache, const attn_tensor *block_table,
                                                 const attn_params *params, attn_tensor *out,
                                                 attn_tensor *lse_opt, attn_mpi_stats *stats_opt);

/* ================================================================================================
 * Ulysses (sequence shards <-> head shards) and USP
 * ================================================================================================ */

typedef struct attn_mpi_ulysses_config {
    int64_t batch;        /* sequences (the varlen entry needs 1)                                  */
    int64_t seq_local;    /* tokens per rank; the global sequence is rank 0's rows, rank 1's, ...  */
    int32_t num_heads;    /* divisible by the number of ranks                                      */
    int32_t num_kv_heads; /* divisible by the number of ranks; divides num_heads                   */
    int32_t head_size;    /* q/k, 1..256                                                           */
    int32_t head_size_v;  /* v/out, 1..256                                                         */
    attn_dtype dtype;     /* q and out: f32, f16, bf16                                             */
    attn_dtype kv_dtype;  /* k and v                                                               */
} attn_mpi_ulysses_config;

typedef struct attn_mpi_ulysses_plan attn_mpi_ulysses_plan;

/* Creates an Ulysses plan on comm (duplicated; collective): pack buffers and the head-sharded full-sequence
 * q, k, v, out, lse buffers. Returns INVALID_ARGUMENT (heads not divisible by P, configs differing; on every
 * rank when any rank's config is refused), OVERFLOW, OUT_OF_MEMORY, INTERNAL. */
ATTN_API attn_status attn_mpi_ulysses_plan_create(MPI_Comm comm, const attn_mpi_ulysses_config *config,
                                                  attn_mpi_ulysses_plan **plan);
ATTN_API void attn_mpi_ulysses_plan_free(attn_mpi_ulysses_plan *plan);

/* Dense attention of the global sequence (collective): all-to-all q, k, v from [batch, seq_local, H, D] to
 * [batch, P·seq_local, H/P, D] (rank r gets heads [r·H/P, (r+1)·H/P)), attn_forward with every attn_params
 * option (masks of shape [.., H, S, S] are sliced to the rank's heads, ALiBi slopes and sinks likewise;
 * positions are global, so causal, windows and ALiBi are exact), then all-to-all of out (and LSE) back.
 *   q [batch, seq_local, num_heads, head_size] BSND, k/v [batch, seq_local, num_kv_heads, head_size(_v)],
 *   out [batch, seq_local, num_heads, head_size_v], lse_opt float32 [batch, num_heads, seq_local].
 * The attention of each head is computed by one rank exactly as one process computes it: the result is
 * bitwise equal to attn_forward on the gathered tensors. Returns INVALID_ARGUMENT, UNSUPPORTED, OVERFLOW,
 * INTERNAL. */
ATTN_API attn_status attn_mpi_ulysses_forward(attn_ctx *ctx, attn_mpi_ulysses_plan *plan, const attn_tensor *q,
                                              const attn_tensor *k, const attn_tensor *v,
                                              const attn_params *params, attn_tensor *out, attn_tensor *lse_opt,
                                              attn_mpi_stats *stats_opt);

/* Packed documents (config.batch 1): q [seq_local, H, D] etc. are rank r's rows [r·seq_local, (r+1)·
 * seq_local) of the packed global sequence; cu_seqlens_q/k int32 [num_docs + 1] over the GLOBAL rows (same
 * on every rank); attn_forward_varlen runs on the head shard. lse_opt float32 [num_heads, seq_local].
 * Bitwise equal to attn_forward_varlen on the gathered tensors. */
ATTN_API attn_status attn_mpi_ulysses_forward_varlen(attn_ctx *ctx, attn_mpi_ulysses_plan *plan,
                                                     const attn_tensor *q, const attn_tensor *k,
                                                     const attn_tensor *v, const attn_tensor *cu_seqlens_q,
                                                     const attn_tensor *cu_seqlens_k, const attn_params *params,
                                                     attn_tensor *out, attn_tensor *lse_opt,
                                                     attn_mpi_stats *stats_opt);

/* USP (Ulysses inside ring): ranks form a grid of ring groups × Ulysses groups (two communicators: the
 * Ulysses plan's of size U, the ring plan's of size R). The global sequence is zig-zag sharded over the ring
 * ranks; each ring shard is cut contiguously into U pieces, one per Ulysses rank. This entry all-to-alls
 * q, k, v inside the Ulysses group to [batch, ring_shard, H/U, D], runs attn_mpi_ring_forward on the ring
 * group (its plan configured with num_heads/U, num_kv_heads/U), and all-to-alls out (and LSE) back.
 * Arguments as attn_mpi_ulysses_forward; params as attn_mpi_ring_forward (sinks sliced to the head shard).
 * stats_opt sums both stages. */
ATTN_API attn_status attn_mpi_usp_forward(attn_ctx *ctx, attn_mpi_ulysses_plan *ulysses,
                                          attn_mpi_ring_plan *ring, const attn_tensor *q, const attn_tensor *k,
                                          const attn_tensor *v, const attn_params *params, attn_tensor *out,
                                          attn_tensor *lse_opt, attn_mpi_stats *stats_opt);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTN_MPI_H */
