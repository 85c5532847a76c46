/*
 * fwd.h — the ISA-independent attention driver (the BLIS "framework" layer, docs/CONTRIBUTING.md §6): query blocks,
 * GQA head stacking, kv tiles and fixed split-KV partitions, mask/soft-cap/ALiBi application, the
 * fixed-order fold of partition states, and the final normalisation. Kernels are reached only through
 * the table in attn_exec. Dense, packed and paged calls all run through attn_fwd_run (or the block-level
 * functions below, which the paged split-KV executor composes), so a row's bits depend only on its own
 * sequence: tiles and partitions sit at absolute key positions (multiples of ATTN_KV_TILE and
 * ATTN_KV_PARTITION) and partition states are folded left in ascending order.
 */
#ifndef ATTN_ATTENTION_FWD_H
#define ATTN_ATTENTION_FWD_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "kernels/kernels.h"

/* Per-thread scratch, carved from one fixed-size slice per thread (no allocation while computing). */
typedef struct attn_fwd_scratch {
    float *q_t;          /* [ATTN_HEAD_SIZE_MAX][ATTN_QB]  packed query block (unscaled q)       */
    float *s;            /* [ATTN_KV_TILE][ATTN_QB]        scores → P                            */
    float *o_part;       /* [ATTN_HEAD_SIZE_MAX][ATTN_QB]  partition accumulator                 */
    float *m_part;       /* [ATTN_QB]                                                           */
    float *l_part;       /* [ATTN_QB]                                                           */
    float *o_acc;        /* [ATTN_HEAD_SIZE_MAX][ATTN_QB]  folded accumulator                    */
    float *m_acc;        /* [ATTN_QB]                                                           */
    float *l_acc;        /* [ATTN_QB]                                                           */
    float *k_tile;       /* [ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX + 16] converted K rows (f16/bf16)  */
    float *v_tile;       /* [ATTN_KV_TILE][ATTN_HEAD_SIZE_MAX + 16] converted V rows             */
    const float **k_rows; /* [ATTN_KV_TILE]                                                     */
    const float **v_rows; /* [ATTN_KV_TILE]                                                     */
    const void **k_raw;   /* [ATTN_KV_TILE] K rows in place, storage dtype (few-row blocks)      */
    const void **v_raw;   /* [ATTN_KV_TILE]                                                     */
    const void **v_safe;  /* [ATTN_KV_TILE] V rows of one query row, hidden keys → zero_row      */
    float *p_tmp;         /* [ATTN_KV_TILE][ATTN_QB]  one row's P in lane 0 (attn_fwd_pv_safe)   */
    float *o_tmp;         /* [ATTN_HEAD_SIZE_MAX][ATTN_QB] one row's Oᵀ in lane 0                 */
    float *zero_row;      /* [ATTN_HEAD_SIZE_MAX + 16] zeros (any dtype)                         */
    float *rows;          /* [ATTN_QB][ATTN_HEAD_SIZE_MAX] a block's rows, row-major (q in, o out)  */
    char *multi;         /* ATTN_FWD_MULTI_BYTES: per-block states of multi-block items (fwd_exec.c) */
    int v_rows_finite;   /* 1: every V row in v_rows is finite, checked once for the blocks sharing a tile
                            (attn_fwd_tile then skips its own check); 0: unknown                   */
    void *kv_prep;       /* ATTN_KV_PREP_BYTES: the kv tile in the table's own form (kv_tile_prep)  */
    int kv_prepped;      /* 1: kv_prep holds the keys from kv_prep_key0 of k_rows / v_rows: attn_fwd_tile
                            runs qk_tile_prep / pv_tile_prep on it                                  */
    int64_t kv_prep_key0;
} attn_fwd_scratch;

/* Bytes of each thread's scratch that hold the states of a multi-block item (GQA super-block, all kv
 * heads of a decode sequence): bounds the blocks per item, attn_fwd_multi_capacity(). */
#define ATTN_FWD_MULTI_BYTES ((size_t)2 << 20)

/* Bytes of scratch one thread needs (a multiple of 64). */
size_t attn_fwd_scratch_bytes(void);
/* Carves a thread's slice (64-byte aligned `base` of attn_fwd_scratch_bytes()). */
void attn_fwd_scratch_carve(void *base, attn_fwd_scratch *sc);

/* How a context runs its small calls (below parallel_min_flops), learned by timing them: its first small calls
 * alternate between thread 0 alone and every thread until each way has ATTN_FWD_SMALL_SAMPLES samples (ns per
 * flop); from then on small calls run the way whose median over its last ATTN_FWD_SMALL_SAMPLES samples is lower
 * (every thread only if below 0.9 of alone's), and one in 4 of them is timed; every ATTN_FWD_SMALL_EXPLORE calls
 * a burst of ATTN_FWD_SMALL_BURST runs the other way, timed after its first call (which wakes a pool whose threads
 * slept, or warms the caches alone), so the choice follows the machine: a pool slow in the context's first calls
 * (threads created, scratch first touched), another tenant. Whether a second thread pays for such a call depends
 * on the machine: on a Zen 5 VM (2 vCPUs) the small-model call took 4.7 µs alone and 5.0–5.5 µs on two, on a
 * Zen 4 VM 6.2 µs alone and 5.0 on two. Only speed depends on it: the thread count never changes a bit. */
#define ATTN_FWD_SMALL_SAMPLES 16
#define ATTN_FWD_SMALL_EXPLORE 64
#define ATTN_FWD_SMALL_BURST   4
typedef struct attn_fwd_small_rule {
    int32_t fixed;     /* 1: ATTN_PARALLEL_MIN_FLOPS given: small calls alone, nothing timed */
    int32_t way;       /* the way small calls run once learned: 0 alone, 1 every thread */
    int32_t burst_way; /* the way of the current exploring burst */
    int64_t calls;     /* small calls since the rule was (re)set */
    int64_t taken[2];  /* samples recorded per way; the ring slot of the next is taken % ATTN_FWD_SMALL_SAMPLES */
    double ns_per_flop[2][ATTN_FWD_SMALL_SAMPLES];
} attn_fwd_small_rule;

typedef struct attn_exec {
    const struct attn_kernels *kern;
    int32_t num_threads;
    char *scratch;       /* num_threads slices of attn_fwd_scratch_bytes(), 64-byte aligned */
    double parallel_min_flops;  /* a call of fewer flop is small (ATTN_FWD_PARALLEL_MIN_FLOPS)      */
    attn_fwd_small_rule *small; /* the context's rule for small calls; NULL: they run alone         */
} attn_exec;

/* A block of up to ATTN_QB query rows of one sequence sharing one kv head: tokens × heads stacked. */
typedef struct attn_fwd_block {
    attn_seq_view seq;
    int64_t kv_head;
    int32_t num_rows;
    int64_t row_token[ATTN_QB]; /* query row i within the sequence                              */
    int64_t row_head[ATTN_QB];  /* query head h                                                 */
    int64_t row_pos[ATTN_QB];   /* absolute position p_i (bottom-right, or i for top-left)      */
    int64_t row_lo[ATTN_QB];    /* causal/window visible key range [row_lo, row_hi) of the row   */
    int64_t row_hi[ATTN_QB];
    int64_t key_lo, key_hi;     /* union of the rows' ranges (empty: key_lo >= key_hi)          */
} attn_fwd_block;

/* Block shape for a problem: heads per block, tokens per block, head chunks per kv head. */
typedef struct attn_fwd_shape {
    int64_t group;           /* num_heads / num_kv_heads                */
    int64_t heads_per_block; /* min(group, ATTN_QB)                     */
    int64_t head_chunks;     /* ceil(group / heads_per_block)           */
    int64_t tokens_per_block;/* max(1, ATTN_QB / heads_per_block)       */
} attn_fwd_shape;
void attn_fwd_shape_of(const attn_problem *p, attn_fwd_shape *sh);

/* Fills `blk` for kv head g, head chunk c and query-token block qb (tokens [qb·tpb, ...)) of `seq`. */
void attn_fwd_block_init(const attn_problem *p, const attn_fwd_shape *sh, const attn_seq_view *seq,
                         int64_t kv_head, int64_t head_chunk, int64_t token_block, attn_fwd_block *blk);

/* Packs the block's queries into sc->q_t as float32, unscaled (the logit scale is applied to the finished dot
 * product, attn_fwd_tile_logits_mask). */
void attn_fwd_pack_q(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                     attn_fwd_scratch *sc);

/* Keys [a, b) of kv head g stored by dimension (seq->k_dim_stride != 0) as float32 rows of `width` in `tile`,
 * tile_row floats apart, rows[] pointed at them: each element widened exactly (attn_load_f), the values every
 * other path computes with, so the bits are those of the same keys stored as rows. */
void attn_fwd_k_gather(const attn_seq_view *seq, attn_dtype dtype, int64_t g, int64_t a, int64_t b, int64_t width,
                       float *tile, int64_t tile_row, const float **rows);
/* Row pointers of keys [a, b) of kv head g as float32 rows of `width` (shared by every schedule): in place
 * for f32 rows whose byte stride is not a multiple of 1 KiB, else converted or copied into `tile` (padded
 * row stride <= ATTN_HEAD_SIZE_MAX + 16 floats). The values are the same floats either way. */
void attn_fwd_rows(const struct attn_kernels *kern, const attn_seq_view *seq, attn_dtype dtype, int is_v,
                   int64_t g, int64_t a, int64_t b, int64_t width, float *tile, const float **rows);

/* Software prefetch of every cache line of the K and V rows of keys [a, b), kv head g (no effect on results). */
void attn_fwd_prefetch(const attn_problem *p, const attn_seq_view *seq, int64_t g, int64_t a, int64_t b);

/* Index range [first, last) of the partitions that intersect the block's visible keys. */
void attn_fwd_partitions(const attn_fwd_block *blk, int64_t *first, int64_t *last);

/* Computes partition `part` of the block from a fresh state into (m, l, o) ([ATTN_QB], [ATTN_QB],
 * [head_size_v][ATTN_QB]); uses sc->q_t (packed), sc->s, sc->k_tile/v_tile, sc->k_rows/v_rows. */
void attn_fwd_partition(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                        attn_fwd_scratch *sc, int64_t part, float *m, float *l, float *o);

/* One kv tile [a, b) of one block on K/V rows already in float32 (k_rows[0] is key a): Q·Kᵀ, soft-cap and
 * ALiBi, the mask, the online-softmax update of (m, l, o) and O += P·V (attn_fwd_pv_safe where hidden keys
 * hold non-finite V). q_t is the block's packed query, s a [ATTN_KV_TILE][ATTN_QB] scratch; sc supplies the
 * temporaries of the safe P·V. The one float-row tile body (fwd_exec.c has the few-row one). */
void attn_fwd_tile(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                   attn_fwd_scratch *sc, const float *q_t, float *s, const float *const *k_rows,
                   const float *const *v_rows, int64_t a, int64_t b, float *m, float *l, float *o);

/* Blocks with at most this many rows (decode: one token × a GQA group, short speculative blocks) run on K/V
 * rows in place in their storage dtype (qk_tile_kv / pv_rows_kv, widened in registers; fwd_exec.c) instead
 * of rows converted into the scratch tile; the bits are the same either way. fp8 rows, which those
 * kernels do not read, are widened into the scratch tiles first and read there as f32 rows. */
#define ATTN_FWD_FEW_ROWS 16

/* Hidden keys never reach a row (docs/SEMANTICS.md §7): P·V adds p·v for every key of a tile, and a key
 * hidden from the row (p = 0) whose V row holds NaN/±Inf would add 0·NaN = NaN. Tiles where some key is
 * hidden from some row (the mask was applied) and some V row is not finite therefore run P·V row by row,
 * each row on V rows where its hidden keys (p = 0) read a zero row: the same kernel chain per element
 * (lane invariance), so with finite V the bits equal the plain call (o + 0·v = o + 0 = o, o is never −0).
 * 1 if any of the rows[0..n) (width elements of `dtype`) holds a NaN or ±Inf. */
int attn_fwd_rows_nonfinite(const void *const *rows, attn_dtype dtype, int64_t n, int64_t width);
/* P·V of tile s [nk][ATTN_QB] for the block's rows into Oᵀ o, row by row as above (float V rows). */
void attn_fwd_pv_safe(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                      attn_fwd_scratch *sc, const float *s, const float *const *v_rows, int64_t nk, float *o);

/* Soft-cap, ALiBi and the mask on the score tile s of keys [a, b) (between Q·Kᵀ and the softmax). */
void attn_fwd_tile_logits_mask(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                               int64_t a, int64_t b, float *s);

/* Resets m [ATTN_QB] to −inf and l [ATTN_QB] to 0 (o untouched: callers that overwrite it skip its clear). */
void attn_fwd_ml_reset(float *m, float *l);
/* Resets a state to empty (m = −inf, l = 0, o = 0). */
void attn_fwd_state_reset(int64_t head_size_v, float *m, float *l, float *o);

/* acc ← fold(acc, part): the fixed merge rule of two unnormalised states (natural units: weights e^(m − max)). */
void attn_fwd_fold(int64_t num_rows, int64_t head_size_v, float *m_acc, float *l_acc, float *o_acc,
                   const float *m, const float *l, const float *o);

/* Normalises the folded state (with sinks) and writes the block's out rows and LSE. */
void attn_fwd_finalize(const attn_problem *p, const struct attn_kernels *kern, const attn_fwd_block *blk,
                       attn_fwd_scratch *sc, const float *m, const float *l, const float *o);

/* ---- fwd_exec.c: multi-block items (same per-block kernel calls, K/V tiles fetched once per item) ---- */

/* Scheduling constants shared by the dense/packed schedule (attn_fwd_run) and the paged split-KV executor
 * (attn_fwd_run_work). None of them changes a bit: which blocks share an item never does. */
#define ATTN_FWD_DECODE_Q         16 /* sequences with at most this many query tokens run as decode items     */
#define ATTN_FWD_SUPER            16 /* query blocks per prefill super-block, at most (16 × 32 rows)         */
#define ATTN_FWD_SUPER_MIN        4  /* ... and at least, when more items are needed to feed the threads    */
#define ATTN_FWD_ITEMS_PER_THREAD 4  /* prefill super-blocks shrink until the call has this many per thread */
/* The default of attn_exec.parallel_min_flops: a call of fewer flop (2·rows·keys·(head_size + head_size_v) over
 * its blocks) is small, and runs alone or on every thread as the context has learned (attn_fwd_small_rule). A
 * context takes ATTN_PARALLEL_MIN_FLOPS from the environment when created: then a smaller call always runs on
 * one thread, and 0 runs every call on every thread (the C test suites run so, to keep exercising the threads on
 * small shapes). The thread count never changes a bit. */
#define ATTN_FWD_PARALLEL_MIN_FLOPS (1 << 18)
#define ATTN_FWD_SMALL_MAX_BLOCKS   64 /* calls with more blocks (or sequences) are not counted: never small */

/* Whether a call on ex may run on one thread (the rule is on and there are threads to spare): only then do the
 * executors count its flop. */
static inline int attn_fwd_may_run_alone(const attn_exec *ex) {
    return ex->num_threads > 1 && ex->parallel_min_flops > 0.0;
}

/* The thread count of a small call on ex (ex->num_threads or 1) by ex->small; *way is the way of a timed call
 * (0 alone, 1 every thread) and *t0 its start, for attn_fwd_small_done, or -1 when the call is not timed. */
int32_t attn_fwd_small_threads(const attn_exec *ex, int *way, double *t0);
/* Records the time of a timed small call of `flops` that ran `way` (>= 0, as attn_fwd_small_threads set it) from
 * t0 (attn_fwd_small_record). */
void attn_fwd_small_done(const attn_exec *ex, int way, double flops, double t0);
/* Records one sample of `way` in r's ring and updates r->way once both rings are full. */
void attn_fwd_small_record(attn_fwd_small_rule *r, int way, double ns_per_flop);

/* The flop of `rows` query rows of p over seq_k keys: 2·rows·seq_k·(head_size + head_size_v). */
static inline double attn_fwd_flops(const attn_problem *p, int64_t rows, int64_t seq_k) {
    return 2.0 * (double)rows * (double)seq_k * (double)(p->head_size + p->head_size_v);
}

/* The thread-spreading rule of every decode schedule: each of num_seqs sequences has `units` independent
 * units (kv heads, or blocks over kv heads), an item holds at most `cap` of them. Returns the units per item:
 * as many as fit, but few enough that every one of num_threads threads gets an item when the sequences
 * alone would leave some idle. */
int64_t attn_fwd_units_per_item(int64_t units, int64_t num_seqs, int64_t cap, int32_t num_threads);

/* The prefill super-block size rule: min(cap, ATTN_FWD_SUPER) query blocks, halved (down to
 * ATTN_FWD_SUPER_MIN) while items(arg, size) < ATTN_FWD_ITEMS_PER_THREAD · num_threads. */
int64_t attn_fwd_super_size(int64_t cap, int32_t num_threads, int64_t (*items)(const void *arg, int64_t size),
                            const void *arg);

/* Bytes the token-major decode schedule prefetches from kv head g0's row of each token for an item of heads
 * [g0, g0 + heads_after]: the item's rows of one token as one span where they lie within that token's row
 * (BSND, a token-major cache page), else kv head g0's row alone — where kv heads are further apart than tokens
 * (BNSD, a head-major page) the span would cover other tokens' rows and be prefetched again for every token
 * (decode 200–2000× slower). Strides and sizes in bytes. */
static inline int64_t attn_fwd_token_span(int64_t heads_after, int64_t head_stride, int64_t row_bytes,
                                          int64_t token_stride) {
    const int64_t span = heads_after * head_stride + row_bytes;
    return span <= token_stride ? span : row_bytes;
}

/* Runs a whole validated problem, bitwise equal to running each block alone (block_init, pack_q, then
 * partition + fold in ascending order, finalize; tests/conformance/test_driver_paths.c): prefill items are GQA
 * super-blocks (sequence, kv head, up to 16 query blocks), decode-shaped problems (every sequence
 * <= 16 query tokens) use items of all kv heads of a sequence walking the keys in memory order. */
void attn_fwd_run(const attn_problem *p, const attn_exec *ex);

/* Blocks one multi-block item can hold for this problem's head sizes (>= 4, <= ATTN_FWD_MULTI_MAX). */
#define ATTN_FWD_MULTI_MAX 64
int64_t attn_fwd_multi_capacity(const attn_problem *p);
/* Block i (< capacity) of the item in thread scratch `sc`: the caller fills it with attn_fwd_block_init.
 * Blocks of one kv head must be adjacent; all blocks belong to one sequence. */
attn_fwd_block *attn_fwd_multi_block(const attn_problem *p, attn_fwd_scratch *sc, int64_t i);
/* Packs the queries of blocks [0, n) and resets their folded states. */
void attn_fwd_multi_begin(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc, int64_t n);
/* Partition `part` of every block [0, n) whose partition range holds it (fresh state, as
 * attn_fwd_partition), each kv tile fetched once for the blocks of its kv head; then, if `fold`, folds
 * each such block's partition state into its folded state. */
void attn_fwd_multi_partition(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                              int64_t n, int64_t part, int fold);
/* Partition range [first, last) of the item: union over its blocks. */
void attn_fwd_multi_partitions(const attn_problem *p, attn_fwd_scratch *sc, int64_t n, int64_t *first,
                               int64_t *last);
/* Partition state of block i after attn_fwd_multi_partition: m [ATTN_QB], l [ATTN_QB], o [Dv][ATTN_QB]. */
void attn_fwd_multi_part_state(const attn_problem *p, attn_fwd_scratch *sc, int64_t i, float **m, float **l,
                               float **o);
/* Normalises blocks [0, n) from their folded states and writes out rows and LSE. */
void attn_fwd_multi_finalize(const attn_problem *p, const struct attn_kernels *kern, attn_fwd_scratch *sc,
                             int64_t n);

/* ---- fwd_paged.c: the split-KV executor of a plan's work list ---- */

/* One work block of a paged call: up to ATTN_QB query rows (tokens × heads of one kv head) of one request,
 * exactly a block of attn_fwd_block_init. The blocks of a request are listed consecutively in (kv head, head
 * chunk, token block descending) order; the executor's multi-block items are runs of consecutive blocks. */
typedef struct attn_fwd_work_block {
    int32_t req;         /* request index (plan order)                                    */
    int32_t kv_head;     /* kv head g                                                     */
    int32_t head_chunk;  /* chunk of the g-th query-head group                            */
    int32_t token_block; /* tokens [token_block·tokens_per_block, ...) of the request     */
    int32_t num_rows;    /* rows of the block (tokens × heads), <= ATTN_QB                */
    int32_t num_parts;   /* ATTN_KV_PARTITION partitions covering [0, seq_len)            */
    int64_t ws_offset;   /* split blocks: float offset of partition 0's state; −1 = direct */
} attn_fwd_work_block;

/* One split-KV work item: partition `part` of block `block`. */
typedef struct attn_fwd_split_item {
    int32_t block;
    int32_t part;
} attn_fwd_split_item;

/* Floats of one split-KV partial state in the caller's workspace, for a block of `rows` rows: m[rows],
 * l[rows], then o[head_size_v][rows]. Partition k of a split block starts at ws_offset + k · this. */
static inline int64_t attn_fwd_split_state_floats(int64_t rows, int64_t head_size_v) {
    return rows * (2 + head_size_v);
}

/* The work list of a paged call (src/plan/partition.c builds it once per step). */
typedef struct attn_fwd_work {
    const attn_fwd_work_block *blocks;  /* [num_work_blocks] every block of the call                        */
    const int32_t *direct;              /* [num_direct] blocks run whole by one thread                      */
    int64_t num_direct;
    const attn_fwd_split_item *splits;  /* [num_split_items] one partition of a split block each            */
    int64_t num_split_items;
    const int32_t *split_blocks;        /* [num_split_blocks] blocks folded after the split items           */
    int64_t num_split_blocks;
    const int32_t *query_start_loc;     /* [num_reqs + 1]                                                   */
    const int32_t *kinds;               /* [num_reqs] attn_request_kind: DECODER → prob[0], else prob[1]    */
    int64_t num_decodes;                /* decode requests (the plan's class), for the spreading rule       */
    int64_t max_query_len;              /* the longest request's query tokens (prefill items only above      */
                                        /* ATTN_FWD_DECODE_Q: the executor skips their count otherwise)      */
} attn_fwd_work;

/* Runs a validated paged call from its work list: with one thread every block as a direct item (partitions
 * folded in ascending order in the thread's scratch); with more, phase 1 runs the split items (one partition
 * each, state stored in `ws`, attn_fwd_split_state_floats) and the direct items, phase 2 folds each split
 * block's states in ascending order and finalizes. Every block makes the kernel calls it would make alone, so
 * the bits equal attn_fwd_run's on the same sequences for any thread count. prob[0] serves DECODER
 * requests (causal per params), prob[1] ENCODER_ONLY / CROSS ones (non-causal). */
void attn_fwd_run_work(const attn_problem *const prob[2], const attn_fwd_work *work, float *ws, const attn_exec *ex);

#endif
