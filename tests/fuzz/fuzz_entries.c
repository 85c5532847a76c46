/*
 * fuzz_entries.c — one libFuzzer target over the public C entries: the input bytes choose an entry
 * and decode every argument (ndim, dtype, shapes and strides with special values around the documented limits,
 * index metadata, params, workspace size and aliasing, plan configs and requests). Every buffer is allocated to
 * exactly the extent its view spans (so ASan sees any read or write past it; a view whose extent would exceed
 * FZ_MAX_VIEW bytes gets data NULL, which the library must refuse when the view has elements), and on failure every buffer
 * must be byte-identical to its state before the call (nothing written on failure).
 *
 * One source, one libFuzzer binary per group of entries (FZ_TARGET_ENTRIES, the table fz_targets below: dense,
 * varlen, merge, paged, plan, cache, diffusion, codec; the CLI's workload parser is fuzz_workload.c). Built as
 * libFuzzer binaries with -DATTN_FUZZ=ON (clang) and, always, into the corpus replay ctest
 * (tests/fuzz/test_fuzz_replay.c), which replays tests/fuzz/corpus/<target>/ plus seeded mutations of it.
 * Views are capped at FZ_MAX_VIEW bytes so one input costs microseconds to a few milliseconds.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

/* Largest view the harness allocates (bytes); a larger view gets data NULL. Small, so executions are fast. */
#ifndef FZ_MAX_VIEW
#define FZ_MAX_VIEW (256 << 10)
#endif

/* Work bound of a call that passes validation (keeps 10M-execution campaigns fast): a call whose estimated
 * multiply-adds exceed FZ_MAX_WORK gets its output's data NULL (the library must refuse it: the view has
 * elements), so every argument before the output is still validated at its decoded size, huge or not, and only
 * the compute of a large valid call is skipped. Small shapes reach every kernel path (tiles and tails, masks,
 * GQA, dtypes, ISA tables), so the cap keeps the coverage and makes a valid call cost microseconds. */
#ifndef FZ_MAX_WORK
#define FZ_MAX_WORK (1 << 15)
#endif
/* The paged entries (plan-less, planned, piecewise) do more per key (block-table gather, fp8 widening, the
 * partition fold), and with views shaped from the plan most planned inputs are valid: a lower bound. */
#ifndef FZ_MAX_WORK_PAGED
#define FZ_MAX_WORK_PAGED (1 << 12)
#endif

static int64_t fz_mulsat(int64_t a, int64_t b) {
    int64_t x;
    if (a <= 0 || b <= 0) return 0;
    return __builtin_mul_overflow(a, b, &x) ? INT64_MAX : x;
}

/* Elements of a view (0 when empty or malformed, saturating). */
static int64_t fz_numel(const attn_tensor *t) {
    if (t->ndim <= 0 || t->ndim > ATTN_MAX_DIMS) return 0;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n = fz_mulsat(n, t->shape[i]);
    return n;
}

/* Rows of a view: its elements over the last dimension. */
static int64_t fz_rows(const attn_tensor *t) {
    const int64_t n = fz_numel(t);
    return n > 0 ? n / t->shape[t->ndim - 1] : 0;
}

/* Largest dimension of a view. */
static int64_t fz_maxdim(const attn_tensor *t) {
    int64_t m = 0;
    for (int i = 0; i < t->ndim && i < ATTN_MAX_DIMS; i++) m = t->shape[i] > m ? t->shape[i] : m;
    return m;
}

/* Applies the bound: the output of a call above `limit` loses its data (if it has elements). */
static void fz_bound(attn_tensor *out, int64_t work, int64_t limit) {
    if (work > limit && fz_numel(out) > 0) out->data = NULL;
}

/* Paged work: numel(q) * (block-table columns x block size) bounds every sequence's keys. */
static int64_t fz_paged_work(const attn_tensor *q, const attn_tensor *cache, const attn_tensor *table) {
    const int64_t cols = table->ndim == 2 ? table->shape[1] : fz_numel(table);
    const int64_t bs = cache->ndim == 5 ? cache->shape[2] : fz_maxdim(cache);
    return fz_mulsat(fz_numel(q), fz_mulsat(cols, bs));
}

/* Dense-style work (q rows x head size x key rows): numel(q) * rows(k) >= batch·seq_q·heads·d·seq_k. */
static int64_t fz_attn_work(const attn_tensor *q, const attn_tensor *k) { return fz_mulsat(fz_numel(q), fz_rows(k)); }

static uint8_t rd_u8(rd *r) { return r->i < r->n ? r->p[r->i++] : 0; }

/* Small values mostly; a byte >= 240 picks a special around the limits (none of them makes a valid call
 * expensive: valid specials are small, large ones are beyond a documented limit). */
static int64_t rd_dim(rd *r) {
    static const int64_t special[16] = {0, 1, 2, 3, 4096, 4097, 512, 513, (int64_t)1 << 31, (int64_t)1 << 40,
                                        (int64_t)1 << 62, INT64_MAX, -1, INT64_MIN, ((int64_t)1 << 24) + 1, 16};
    const uint8_t b = rd_u8(r);
    return b >= 240 ? special[b - 240] : (int64_t)(b % 9);
}

static int32_t rd_i32(rd *r) {
    static const int32_t special[8] = {0, 1, -1, INT32_MAX, INT32_MIN, 4096, (1 << 24) + 1, 600};
    const uint8_t b = rd_u8(r);
    return b >= 248 ? special[b - 248] : (int32_t)(b % 24) - 2;
}

static float rd_f(rd *r) {
    static const float special[8] = {0.0f, 1.0f, -1.0f, NAN, INFINITY, -INFINITY, 3e38f, 1e-30f};
    const uint8_t b = rd_u8(r);
    return b >= 248 ? special[b - 248] : (float)((int)b - 124) * 0.03125f;
}

/* Every buffer of one call, freed at the end; `snap` keeps a copy for the nothing-written check. */
#define FZ_MAX_BUFS 40
typedef struct fz {
    void *base[FZ_MAX_BUFS], *snap[FZ_MAX_BUFS];
    size_t size[FZ_MAX_BUFS];
    int n;
} fz;

static void *fz_alloc(fz *f, rd *r, size_t bytes) {
    if (f->n == FZ_MAX_BUFS) return NULL;
    unsigned char *p = (unsigned char *)malloc(bytes ? bytes : 1);
    if (!p) return NULL;
    if (r->i < r->n) { /* the input bytes from the read position on, repeated (p[i] = input[(pos + i) % n]) */
        size_t at = r->i, done = 0;
        while (done < bytes) {
            const size_t run = r->n - at < bytes - done ? r->n - at : bytes - done;
            memcpy(p + done, r->p + at, run);
            done += run, at = 0;
        }
    } else {
        for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)i;
    }
    f->base[f->n] = p, f->size[f->n] = bytes, f->snap[f->n] = NULL;
    f->n++;
    return p;
}

/* Exact byte extent of a view (esize + sum shape·stride·esize over the non-empty dims, 0 if empty); -1 when
 * it cannot be represented or is above FZ_MAX_VIEW. */
static int64_t fz_extent(const attn_tensor *t) {
    size_t es = attn_dtype_size(t->dtype);
    if (es == 0) es = 1;
    if (t->ndim < 0 || t->ndim > ATTN_MAX_DIMS) return -1;
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->strides[i] < 0) return -1;
        if (t->shape[i] == 0) return 0;
    }
    for (int i = 0; i < t->ndim; i++) {
        int64_t x;
        if (__builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &x) || __builtin_add_overflow(last, x, &last))
            return -1;
    }
    int64_t bytes;
    if (last == INT64_MAX || __builtin_mul_overflow(last + 1, (int64_t)es, &bytes) || bytes > FZ_MAX_VIEW) return -1;
    return bytes;
}

/* A tensor: ndim (or `want` mostly), dtype (or `dt` mostly), shapes, contiguous or decoded strides, and
 * exactly-sized data (NULL when too large or by choice). */
static attn_tensor fz_tensor(fz *f, rd *r, int want, attn_dtype dt) {
    attn_tensor t;
    memset(&t, 0, sizeof t);
    const uint8_t mode = rd_u8(r);
    t.ndim = (mode & 0x70) == 0x70 ? (int32_t)(rd_u8(r) % 8) : want;
    if ((mode & 0x70) == 0x60) t.ndim = 64; /* the F8 shape: ndim far beyond ATTN_MAX_DIMS */
    t.dtype = (mode & 0x0C) == 0x0C ? (attn_dtype)(rd_u8(r) % 12) : dt;
    const int n = t.ndim < 0 ? 0 : (t.ndim > ATTN_MAX_DIMS ? ATTN_MAX_DIMS : t.ndim);
    for (int i = 0; i < n; i++) t.shape[i] = rd_dim(r);
    int64_t stride = 1;
    for (int i = n - 1; i >= 0; i--) {
        if (mode & 0x80) {
            t.strides[i] = rd_dim(r);
        } else {
            t.strides[i] = stride;
            int64_t s = t.shape[i] > 0 ? t.shape[i] : 1;
            if (__builtin_mul_overflow(stride, s, &stride)) stride = INT64_MAX;
        }
    }
    const int64_t ext = t.ndim > ATTN_MAX_DIMS ? -1 : fz_extent(&t);
    if (ext > 0 && !(mode & 0x01)) {
        const int misalign = (mode & 0x02) != 0;
        char *p = (char *)fz_alloc(f, r, (size_t)ext + (size_t)misalign);
        t.data = p ? p + misalign : NULL;
    }
    return t;
}

/* A contiguous view of the given shape, data allocated (filled from the input) when its extent fits FZ_MAX_VIEW. */
static attn_tensor fz_shaped(fz *f, rd *r, attn_dtype dt, int ndim, const int64_t *shape) {
    attn_tensor t = attn_tensor_make(NULL, dt, ndim, shape);
    const int64_t ext = fz_extent(&t);
    if (ext > 0) t.data = fz_alloc(f, r, (size_t)ext);
    return t;
}

/* A workspace of exactly `bytes` (64-byte aligned), registered for the nothing-written check. */
static void *fz_ws_exact(fz *f, size_t bytes) {
    void *p = NULL;
    if (f->n == FZ_MAX_BUFS || posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
    memset(p, 0x5A, bytes);
    f->base[f->n] = p, f->size[f->n] = bytes, f->snap[f->n] = NULL, f->n++;
    return p;
}

/* The kv_cache of a paged call: mostly a decoded 5-d view; for a byte % 4 == 0 one that fits q, whose heads are
 * dimension `axis` and head size the last (q [tokens, heads, d] of the plan-less entry: axis 1; q [rows,
 * query_len, heads, d] of the piecewise one: axis 2): [2, 1..8 blocks, block size 1..8 or 16, heads or heads / 2,
 * d], f32 or fp8 (*fits = 1; else 0). */
static attn_tensor fz_cache_for(fz *f, rd *r, const attn_tensor *q, int axis, int *fits) {
    const uint8_t g = rd_u8(r);
    *fits = 0;
    if (g % 4 != 0 || q->ndim != axis + 2 || q->shape[axis] <= 0 || q->shape[axis + 1] <= 0)
        return fz_tensor(f, r, 5, ATTN_DTYPE_F32);
    *fits = 1;
    static const attn_dtype cdt[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F32, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    const int64_t h = q->shape[axis], hkv = (g & 4) && h % 2 == 0 ? h / 2 : h, bs = (g & 8) ? 16 : 1 + (g >> 5);
    const int64_t shape[5] = {2, 1 + rd_u8(r) % 8, bs, hkv, q->shape[axis + 1]};
    return fz_shaped(f, r, cdt[(g >> 4) & 1 ? 2 + ((g >> 6) & 1) : 0], 5, shape);
}

/* The seq_lens [rows] and block_table [rows, cols] of a piecewise paged call that fit its cache (block size bs,
 * nblk blocks): each length in [query_len, cols·bs] (the keys the table holds, the default row model's
 * minimum; query_len itself when it exceeds them), block ids in [0, nblk); int32, contiguous, registered for
 * the nothing-written check. */
static void fz_seq_table(fz *f, rd *r, int64_t rows, int64_t cols, int64_t bs, int64_t nblk, int64_t query_len,
                         attn_tensor *seq_lens, attn_tensor *table) {
    const int64_t ss[1] = {rows}, ts[2] = {rows, cols}, keys = cols * bs;
    int32_t *sl = (int32_t *)fz_alloc(f, r, (size_t)rows * sizeof(int32_t));
    int32_t *bt = (int32_t *)fz_alloc(f, r, (size_t)(rows * cols) * sizeof(int32_t));
    for (int64_t i = 0; sl != NULL && i < rows; i++)
        sl[i] = (int32_t)(keys >= query_len ? query_len + rd_u8(r) % (keys - query_len + 1) : query_len);
    for (int64_t i = 0; bt != NULL && i < rows * cols; i++) bt[i] = (int32_t)(rd_u8(r) % nblk);
    *seq_lens = attn_tensor_make(sl, ATTN_DTYPE_I32, 1, ss);
    *table = attn_tensor_make(bt, ATTN_DTYPE_I32, 2, ts);
}

/* The key, value, kv_cache and slot_mapping of a cache write (entries 25, 26, 29) that can be valid: key and value
 * [1..8 tokens, 1..4 heads, head size 1..8] f32 (value bf16 for a set bit: a dtype mismatch), kv_cache [2, 1..8
 * blocks, block size 1..8 or 16, heads, head size] of dtype cd, slot_mapping [tokens] int32 or int64 with
 * slots in [-1, num_blocks·block_size) (-1: skipped; repeats allowed). */
static void fz_kv_write(fz *f, rd *r, attn_dtype cd, attn_tensor *key, attn_tensor *value, attn_tensor *cache,
                        attn_tensor *slots) {
    const uint8_t b = rd_u8(r);
    const int64_t tokens = 1 + b % 8, heads = 1 + (b >> 3) % 4, d = 1 + rd_u8(r) % 8, blocks = 1 + rd_u8(r) % 8;
    const int64_t bs = (b & 0x40) ? 16 : 1 + rd_u8(r) % 8; /* (one read per declarator: a fixed byte order) */
    const int64_t ks[3] = {tokens, heads, d}, cs[5] = {2, blocks, bs, heads, d};
    *key = fz_shaped(f, r, ATTN_DTYPE_F32, 3, ks);
    *value = fz_shaped(f, r, (b & 0x80) ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32, 3, ks);
    *cache = fz_shaped(f, r, cd, 5, cs);
    const int64_t num_slots = cs[1] * cs[2], n[1] = {tokens};
    const int wide = rd_u8(r) & 1;
    void *p = fz_alloc(f, r, (size_t)tokens * (wide ? 8 : 4));
    for (int64_t i = 0; p != NULL && i < tokens; i++) {
        const int64_t slot = (int64_t)(rd_u8(r) % (num_slots + 1)) - 1;
        if (wide) ((int64_t *)p)[i] = slot;
        else ((int32_t *)p)[i] = (int32_t)slot;
    }
    *slots = attn_tensor_make(p, wide ? ATTN_DTYPE_I64 : ATTN_DTYPE_I32, 1, n);
}

/* Optional tensor: NULL for a zero flag byte. */
static attn_tensor *fz_opt(fz *f, rd *r, attn_tensor *slot, int want, attn_dtype dt) {
    if (rd_u8(r) % 3 == 0) return NULL;
    *slot = fz_tensor(f, r, want, dt);
    return slot;
}

/* An int32 / int64 index vector with decoded values. */
static attn_tensor fz_index(fz *f, rd *r, int ndim, int64_t n0, int64_t n1, attn_dtype dt) {
    attn_tensor t;
    const int64_t shape[2] = {n0, n1};
    int64_t count = 0;
    if (n0 > 0 && (ndim == 1 || n1 > 0) && (__builtin_mul_overflow(n0, ndim == 2 ? n1 : 1, &count) || count > 4096))
        count = -1; /* too large to hold: data NULL (refused when the view has elements) */
    const size_t es = attn_dtype_size(dt);
    void *p = count > 0 ? fz_alloc(f, r, (size_t)count * es) : NULL;
    t = attn_tensor_make(p, dt, ndim, shape);
    for (int64_t i = 0; p != NULL && i < count; i++) {
        const int64_t v = rd_u8(r) < 200 ? (int64_t)i * (rd_u8(r) % 4) : (int64_t)rd_i32(r);
        if (dt == ATTN_DTYPE_I64) ((int64_t *)p)[i] = v;
        else ((int32_t *)p)[i] = (int32_t)v;
    }
    if (rd_u8(r) == 255) t = fz_tensor(f, r, ndim, dt); /* occasionally any shape and stride */
    return t;
}

/* The slot_mapping / block_mapping of the cache entries: fz_index with a decoded length (first) and int64 or int32
 * (a byte, second). The reads are statements of their own: as arguments of one call their order would be
 * unspecified (gcc and clang differ), and an input would mean different calls in the two builds. */
static attn_tensor fz_index_of(fz *f, rd *r, int ndim, int64_t n1) {
    const int64_t n0 = rd_dim(r);
    const attn_dtype dt = rd_u8(r) & 1 ? ATTN_DTYPE_I64 : ATTN_DTYPE_I32;
    return fz_index(f, r, ndim, n0, n1, dt);
}

/* A [ATTN_MAX_HEADS + 1] vector: 16 decoded values repeated (x[i] = x[i % 16]), filled by doubling copies (an
 * element loop costs 4097 traced comparisons per input). */
static void fz_fill16(rd *r, float *x) {
    for (int i = 0; i < 16; i++) x[i] = rd_f(r);
    for (int have = 16; have < ATTN_MAX_HEADS + 1; have *= 2) {
        const int n = ATTN_MAX_HEADS + 1 - have < have ? ATTN_MAX_HEADS + 1 - have : have;
        memcpy(x + have, x, (size_t)n * sizeof *x);
    }
}

static void fz_params(rd *r, attn_params *p, float *alibi, float *sinks, attn_tensor *mask, attn_tensor *kpm, fz *f) {
    attn_params_init(p);
    const uint8_t flags = rd_u8(r);
    if (flags & 1) p->softmax_scale = rd_f(r);
    if (flags & 2) p->causal = (attn_causal)(rd_u8(r) % 4);
    if (flags & 4) p->window_left = rd_i32(r), p->window_right = rd_i32(r);
    if (flags & 8) p->softcap = rd_f(r);
    if (flags & 16) fz_fill16(r, alibi), p->alibi_slopes = alibi;
    if (flags & 32) fz_fill16(r, sinks), p->sinks = sinks;
    if (flags & 64) *mask = fz_tensor(f, r, 2 + 2 * (rd_u8(r) & 1), ATTN_DTYPE_BOOL), p->mask = mask;
    if (flags & 128) *kpm = fz_tensor(f, r, 2, ATTN_DTYPE_U8), p->key_padding_mask = kpm;
}

/* Largest workspace the harness allocates (a larger decoded size is clamped to it): below the sanitizer
 * allocator's 128 KiB size classes, so a workspace is not a fresh mmap (page faults) on every input. */
#ifndef FZ_MAX_WS
#define FZ_MAX_WS (64u << 10)
#endif

/* The workspace: a fresh buffer of a decoded size, NULL, or a pointer into another argument (F6). `used` = 0 for
 * an entry without a workspace argument: the same bytes are read (the input keeps its meaning), nothing is
 * allocated. */
static void *fz_workspace(fz *f, rd *r, size_t *size, int used) {
    const uint8_t b = rd_u8(r);
    *size = b < 128 ? (size_t)b * 64 : (b < 200 ? (size_t)(b - 127) * 4096 : (size_t)rd_dim(r));
    if (b % 5 == 0) return NULL;
    if (b % 7 == 0 && f->n > 0) { /* alias an input or output */
        const int k = rd_u8(r) % f->n;
        if (*size > f->size[k]) *size = f->size[k];
        return used ? f->base[k] : NULL;
    }
    if (!used) return NULL;
    const size_t alloc = *size < FZ_MAX_WS ? *size : FZ_MAX_WS;
    if (*size > alloc) *size = alloc;
    void *p = NULL;
    if (posix_memalign(&p, 64, alloc ? alloc : 64) != 0 || f->n == FZ_MAX_BUFS) {
        free(p);
        return NULL;
    }
    memset(p, 0x5A, alloc);
    f->base[f->n] = p, f->size[f->n] = alloc, f->snap[f->n] = NULL, f->n++;
    return p;
}

/* Snapshots every buffer not yet snapshotted (called right before the entry). */
static void fz_snap(fz *f) {
    for (int i = 0; i < f->n; i++)
        if (!f->snap[i]) {
            f->snap[i] = malloc(f->size[i] ? f->size[i] : 1);
            if (f->snap[i]) memcpy(f->snap[i], f->base[i], f->size[i]);
        }
}
#define CALL(expr) (fz_snap(&f), (expr))

/* The additive mask (params.additive_mask), decoded after an entry's own arguments (so the seeds of an entry
 * keep their meaning): f32/f16/bf16 or any dtype, ndim 1..4 mostly, broadcast or strided views. */
static void fz_additive(fz *f, rd *r, attn_params *p, attn_tensor *am) {
    const uint8_t b = rd_u8(r);
    if (b < 0xE0) return;
    static const attn_dtype dt[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_F32};
    *am = fz_tensor(f, r, 1 + (b & 3), dt[(b >> 2) & 3]);
    p->additive_mask = am;
}

/* The entries of one target: the first input byte picks one of them (index modulo the count). */
typedef struct fz_target {
    const char *name;
    uint8_t entries[12];
    int num_entries;
} fz_target;

/* Entry numbers: 0 attn_forward, 1 attn_ref_forward, 2 attn_forward_varlen, 3 attn_forward_packed,
 * 4 attn_merge_attn_states, 5 attn_paged_attention, 6 attn_ref_paged_attention, 7 attn_reshape_and_cache,
 * 8 attn_copy_blocks, 9 attn_swap_blocks, 10 attn_forward_padded, 11 attn_ref_forward_padded,
 * 12 attn_forward_prescaled, 13 attn_forward_quant, 14 attn_ref_forward_quant, 15 attn_forward_piecewise,
 * 16 attn_forward_kv_prefix, 17 attn_plan_create + get_info + workspace_size + attn_forward_paged,
 * 18 the workspace-size functions, 19 attn_quantize_fp8, 20 attn_ref_forward_varlen,
 * 21 attn_ref_forward_piecewise, 22 attn_dequantize_fp8 / attn_quantize_mx / attn_dequantize_mx,
 * 23 attn_hadamard_signs / attn_hadamard_rotate, 24 attn_capabilities_get / attn_ctx_set_isa /
 * attn_ctx_set_num_threads, 25 attn_reshape_and_cache_scaled, 26 attn_reshape_and_cache_notify +
 * attn_kv_stored_next, 27 attn_forward_paged_piecewise, 28 attn_ref_forward_paged_piecewise, 29
 * attn_reshape_and_cache_scaled_notify + attn_kv_stored_next (reached through entry 25: a byte after the scales
 * picks it, so the cache target's entry choice, the first byte modulo 5, keeps its meaning; fz_last_entry
 * reports 29), 30 attn_swap_blocks_bytes (reached through entry 9 the same way). */
static const fz_target fz_targets[] = {
    {"dense", {0, 1}, 2},
    {"varlen", {2, 3, 20}, 3},
    {"merge", {4}, 1},
    {"paged", {5, 6, 27, 28}, 4},
    {"plan", {17}, 1},
    {"cache", {7, 8, 9, 25, 26}, 5},
    {"diffusion", {10, 11, 12, 13, 14, 15, 21, 16, 18}, 9},
    {"codec", {19, 22, 23, 24}, 4},
};
#define FZ_NUM_TARGETS ((int)(sizeof fz_targets / sizeof fz_targets[0]))

/* Status of the last input (read by the replay driver's corpus generator). */
attn_status fz_last_status;
int fz_last_entry;
char fz_last_msg[512];

/* The KV-stored callback of entry 26: walks every run (attn_kv_stored_next) and checks it against the event. */
typedef struct fz_notify_state {
    int calls;
    int32_t layer_idx;
} fz_notify_state;
static void fz_on_stored(void *user, const attn_kv_stored *ev) {
    fz_notify_state *ns = (fz_notify_state *)user;
    ns->calls++;
    if (ev->layer_idx != ns->layer_idx || ev->num_written < 0 || ev->num_written > ev->num_tokens) abort();
    int64_t cursor = 0, runs = 0, rows = 0;
    attn_kv_block_rows run;
    const int64_t num_blocks = ev->kv_cache->shape[1];
    while (attn_kv_stored_next(ev, &cursor, &run)) {
        if (run.block_idx < 0 || run.block_idx >= num_blocks || run.row_start < 0 || run.row_start >= run.row_end ||
            run.row_end > ev->block_size || run.token_start < 0 || run.token_start >= ev->num_tokens || ++runs > ev->num_tokens)
            abort();
        rows += run.row_end - run.row_start;
    }
    if (runs != ev->num_runs || rows != ev->num_written || attn_kv_stored_next(NULL, &cursor, &run) != 0) abort();
}

/* The notification of entries 26 and 29: NULL (a byte % 11 == 0), a NULL callback (% 7 == 0) or fz_on_stored, with
 * a decoded layer_idx (negative ones are refused). */
static const attn_kv_notify *fz_notify_of(rd *r, fz_notify_state *ns, attn_kv_notify *nt) {
    const uint8_t nb8 = rd_u8(r);
    ns->calls = 0, ns->layer_idx = rd_i32(r);
    memset(nt, 0, sizeof *nt);
    nt->on_stored = nb8 % 7 == 0 ? NULL : fz_on_stored, nt->user = ns, nt->layer_idx = ns->layer_idx;
    return nb8 % 11 == 0 ? NULL : nt;
}

/* One input against one target's entries. */
static int fz_run(const fz_target *tg, const uint8_t *data, size_t size) {
    static attn_ctx *ctx = NULL;
    static const char *const isas[3] = {"avx512", "avx2", "generic"};
    static int isa_now = -1;
    if (!ctx && attn_ctx_create(&ctx) != ATTN_STATUS_OK) return 0;
    /* The kernel table follows the input's length (no byte consumed): every table sees every entry. */
    const int isa = (int)(size % 3);
    if (isa != isa_now) {
        if (attn_isa_available(isas[isa]) && attn_ctx_set_isa(ctx, isas[isa]) == ATTN_STATUS_OK) isa_now = isa;
        attn_clear_error();
    }
    rd r = {data, size, 0};
    fz f;
    memset(&f, 0, sizeof f);
    uint8_t entry = tg->entries[rd_u8(&r) % tg->num_entries]; /* (29 after the call: see case 25) */
    const attn_layout layout = (attn_layout)(rd_u8(&r) % 3);
    attn_tensor q = fz_tensor(&f, &r, 4, ATTN_DTYPE_F32), k = fz_tensor(&f, &r, 4, ATTN_DTYPE_F32);
    attn_tensor v = fz_tensor(&f, &r, 4, ATTN_DTYPE_F32), out = fz_tensor(&f, &r, 4, ATTN_DTYPE_F32);
    attn_tensor lse_s, mask, kpm, a1, a2, a3, a4, a5, am;
    memset(&lse_s, 0, sizeof lse_s), memset(&mask, 0, sizeof mask), memset(&kpm, 0, sizeof kpm);
    memset(&a1, 0, sizeof a1), memset(&a2, 0, sizeof a2), memset(&a3, 0, sizeof a3);
    memset(&a4, 0, sizeof a4), memset(&a5, 0, sizeof a5), memset(&am, 0, sizeof am);
    attn_tensor *lse = fz_opt(&f, &r, &lse_s, 3, ATTN_DTYPE_F32);
    attn_params p;
    float alibi[ATTN_MAX_HEADS + 1], sinks[ATTN_MAX_HEADS + 1]; /* [num_heads] up to the limit */
    fz_params(&r, &p, alibi, sinks, &mask, &kpm, &f);
    const int64_t nb = rd_dim(&r), nb2 = rd_dim(&r);
    /* Plan-less paged: query_start_loc [num_reqs + 1] (idx1), seq_lens [num_reqs] (idx2) and, mostly, block_table
     * [num_reqs, max_blocks] (idx3), so that a call can be valid (with nb vectors both, it never was). */
    const int paged = entry == 5 || entry == 6;
    attn_tensor idx1 = fz_index(&f, &r, 1, nb, 0, ATTN_DTYPE_I32);
    attn_tensor idx2 = fz_index(&f, &r, 1, paged && nb > 0 ? nb - 1 : nb, 0, ATTN_DTYPE_I32);
    const int64_t max_blocks = rd_dim(&r) % 5;
    attn_tensor idx3 = fz_index(&f, &r, 2, paged && nb > 0 && nb2 % 2 == 0 ? nb - 1 : nb2, max_blocks, ATTN_DTYPE_I32);
    size_t ws_size = 0;
    void *ws = NULL;
    if (entry >= 10) /* (read for every entry from 10 on; allocated for those that take a workspace) */
        ws = fz_workspace(&f, &r, &ws_size, (entry <= 13 && entry != 14) || entry == 17);
    attn_status st = ATTN_STATUS_OK;
    int writes_ws = 1; /* a failing call may not write anything, the workspace included */
    switch (entry) {
    case 0: case 1:
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(entry == 0 ? attn_forward(ctx, layout, &q, &k, &v, &p, &out, lse)
                             : attn_ref_forward(layout, &q, &k, &v, &p, &out, lse));
        break;
    case 2: case 3: case 20: {
        if (entry != 3) q.ndim = k.ndim = v.ndim = out.ndim = 3; /* packed takes [1, rows, heads, d] */
        if (lse) lse->ndim = 2;
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(entry == 2   ? attn_forward_varlen(ctx, &q, &k, &v, &idx1, &idx2, &p, &out, lse)
                  : entry == 3 ? attn_forward_packed(ctx, &q, &k, &v, &idx1, &idx2, &p, &out, lse)
                               : attn_ref_forward_varlen(&q, &k, &v, &idx1, &idx2, &p, &out, lse));
        break;
    }
    case 4: {
        a1 = out, a1.ndim = 3;
        a2 = k, a2.ndim = 3;
        a3 = fz_tensor(&f, &r, 2, ATTN_DTYPE_F32), a4 = fz_tensor(&f, &r, 2, ATTN_DTYPE_F32);
        q.ndim = 3;
        if (lse) lse->ndim = 2;
        st = CALL(attn_merge_attn_states(ctx, &q, &a3, &a2, &a4, &a1, lse));
        break;
    }
    case 5: case 6: {
        q.ndim = out.ndim = 3;
        int fits;
        a5 = fz_cache_for(&f, &r, &q, 1, &fits); /* kv_cache */
        if (lse) lse->ndim = 2;
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_paged_work(&q, &a5, &idx3), FZ_MAX_WORK_PAGED);
        st = CALL(entry == 5 ? attn_paged_attention(ctx, &q, &a5, &idx1, &idx2, &idx3, &p, &out, lse)
                        : attn_ref_paged_attention(&q, &a5, &idx1, &idx2, &idx3, &p, &out, lse));
        break;
    }
    case 7: {
        a5 = fz_tensor(&f, &r, 5, ATTN_DTYPE_F32);
        attn_tensor sl = fz_index_of(&f, &r, 1, 0);
        k.ndim = v.ndim = 3;
        st = CALL(attn_reshape_and_cache(ctx, &k, &v, &a5, &sl));
        break;
    }
    case 8: case 9: {
        a5 = fz_tensor(&f, &r, 5, ATTN_DTYPE_F32), a4 = fz_tensor(&f, &r, 5, ATTN_DTYPE_F32);
        attn_tensor m = fz_index_of(&f, &r, 2, 2);
        if (entry == 9 && (rd_u8(&r) & 1)) { /* the byte form (fz_last_entry 30, as 29 through entry 25) */
            st = CALL(attn_swap_blocks_bytes(ctx, &a5, &a4, rd_i32(&r), &m));
            entry = 30;
            break;
        }
        st = CALL(entry == 8 ? attn_copy_blocks(ctx, &a5, &m) : attn_swap_blocks(ctx, &a5, &a4, &m));
        break;
    }
    case 10: case 11: {
        attn_tensor *m = p.key_padding_mask ? &kpm : NULL;
        p.key_padding_mask = NULL;
        if (!m) kpm = fz_tensor(&f, &r, 2, ATTN_DTYPE_U8), m = &kpm;
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(entry == 10 ? attn_forward_padded(ctx, layout, &q, &k, &v, m, &p, &out, lse, ws, ws_size)
                         : attn_ref_forward_padded(layout, &q, &k, &v, m, &p, &out, lse, ws, ws_size));
        break;
    }
    case 12: {
        const int32_t s2 = rd_i32(&r);
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(attn_forward_prescaled(ctx, layout, &q, &k, &v, s2, &p, &out, lse, ws, ws_size));
        break;
    }
    case 13: case 14: {
        attn_quant_params qp;
        attn_quant_params_init(&qp, (attn_quant_format)(rd_u8(&r) % 5));
        qp.rotate = rd_u8(&r) % 3;
        qp.q_block_rows = rd_i32(&r), qp.kv_block_rows = rd_i32(&r);
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(entry == 13 ? attn_forward_quant(ctx, layout, &q, &k, &v, &qp, &p, &out, lse, ws, ws_size)
                         : attn_ref_forward_quant(layout, &q, &k, &v, &qp, &p, &out, lse));
        writes_ws = entry == 13;
        break;
    }
    case 15: case 21: {
        attn_span spans[4];
        attn_query_range qr[3];
        const int64_t ns = rd_u8(&r) % 5 - 1, nr = rd_u8(&r) % 4;
        for (int i = 0; i < 4; i++) spans[i].start = rd_dim(&r), spans[i].end = rd_dim(&r);
        for (int i = 0; i < 3; i++) qr[i].local_start = rd_dim(&r), qr[i].local_end = rd_dim(&r), qr[i].global_start = rd_dim(&r);
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(entry == 15 ? attn_forward_piecewise(ctx, layout, &q, &k, &v, ns < 0 ? NULL : spans, ns < 0 ? 1 : ns,
                                                       nr ? qr : NULL, nr, &p, &out, lse)
                              : attn_ref_forward_piecewise(layout, &q, &k, &v, ns < 0 ? NULL : spans,
                                                           ns < 0 ? 1 : ns, nr ? qr : NULL, nr, &p, &out, lse));
        break;
    }
    case 16: {
        const int64_t valid = rd_dim(&r);
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_attn_work(&q, &k), FZ_MAX_WORK);
        st = CALL(attn_forward_kv_prefix(ctx, layout, &q, &k, &v, valid, &p, &out, lse));
        break;
    }
    case 17: { /* plan + paged forward */
        attn_plan_config cfg;
        attn_plan_config_init(&cfg);
        cfg.num_blocks = rd_i32(&r), cfg.block_size = rd_i32(&r), cfg.num_heads = rd_i32(&r);
        cfg.num_kv_heads = rd_i32(&r), cfg.head_size = rd_i32(&r), cfg.max_blocks_per_req = rd_i32(&r);
        cfg.num_speculative_tokens = rd_u8(&r) % 18;
        attn_request req[4];
        int32_t ids[4][8];
        const int64_t nreq = rd_u8(&r) % 5;
        for (int i = 0; i < 4; i++) {
            memset(&req[i], 0, sizeof req[i]);
            req[i].kind = rd_u8(&r) % 4;
            req[i].num_computed_tokens = rd_dim(&r), req[i].num_scheduled_tokens = rd_dim(&r);
            req[i].num_spec_tokens = rd_u8(&r) % 3, req[i].encoder_len = rd_dim(&r);
            for (int j = 0; j < 8; j++) ids[i][j] = rd_i32(&r);
            req[i].block_ids = ids[i], req[i].num_block_ids = rd_u8(&r) % 9;
        }
        attn_plan *plan = NULL;
        st = CALL(attn_plan_create(&cfg, req, nreq, &plan));
        if (st == ATTN_STATUS_OK) {
            attn_plan_info info;
            if (attn_plan_get_info(plan, &info) != ATTN_STATUS_OK || info.workspace_size != attn_plan_workspace_size(plan) ||
                info.num_reqs != nreq || attn_plan_get_info(plan, NULL) == ATTN_STATUS_OK)
                abort(); /* the plan's own description must be consistent */
            attn_clear_error();
            a5 = fz_tensor(&f, &r, 5, ATTN_DTYPE_F32);
            q.ndim = out.ndim = 3;
            if (lse) lse->ndim = 2;
            const uint8_t kvb = rd_u8(&r); /* new rows of ENCODER_ONLY requests: none, the decoded k/v, or k twice */
            k.ndim = v.ndim = 3;
            const uint8_t g = rd_u8(&r);
            if (g % 4 != 0) { /* mostly: the views the plan describes (decoded ones almost never match its config) */
                static const attn_dtype cdt[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F32, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
                const attn_dtype cd = cdt[(g >> 2) & 3];
                const int64_t cs[5] = {2, cfg.num_blocks, cfg.block_size, cfg.num_kv_heads, cfg.head_size};
                const int64_t qs[3] = {info.num_tokens, cfg.num_heads, cfg.head_size};
                const int64_t ks[3] = {info.num_tokens, cfg.num_kv_heads, cfg.head_size};
                a5 = fz_shaped(&f, &r, cd, 5, cs);
                q = fz_shaped(&f, &r, ATTN_DTYPE_F32, 3, qs), out = fz_shaped(&f, &r, ATTN_DTYPE_F32, 3, qs);
                k = fz_shaped(&f, &r, cd, 3, ks), v = fz_shaped(&f, &r, cd, 3, ks);
                if (lse && (g & 16)) {
                    const int64_t ls[2] = {cfg.num_heads, info.num_tokens};
                    *lse = fz_shaped(&f, &r, ATTN_DTYPE_F32, 2, ls);
                }
                if ((g & 32) && info.workspace_size <= FZ_MAX_WS) ws = fz_ws_exact(&f, info.workspace_size), ws_size = info.workspace_size;
            }
            const attn_tensor *ko = kvb % 3 == 0 ? NULL : &k, *vo = kvb % 3 == 0 ? NULL : (kvb % 3 == 1 ? &v : &k);
            fz_additive(&f, &r, &p, &am);
            fz_bound(&out, fz_mulsat(fz_mulsat(info.num_tokens, info.max_seq_len), fz_mulsat(cfg.num_heads, cfg.head_size)),
                     FZ_MAX_WORK_PAGED);
            st = CALL(attn_forward_paged(ctx, plan, &q, ko, vo, &a5, &p, &out, lse, ws, ws_size));
            attn_plan_free(plan);
        } else if (plan != NULL) {
            abort(); /* a failing plan_create must leave *plan NULL */
        }
        break;
    }
    case 18: {
        size_t b = 0;
        (void)attn_forward_prescaled_workspace_size(&q, &k, &v, &b);
        (void)attn_forward_quant_workspace_size(layout, &q, &k, &v, &b);
        const int64_t pb = rd_dim(&r), ps = rd_dim(&r);
        st = CALL(attn_forward_padded_workspace_size(pb, ps, &b));
        break;
    }
    case 25: case 26: { /* scaled (fp8 caches) and notifying cache writes */
        static const attn_dtype cdt[5] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_BF16, ATTN_DTYPE_FP8_E4M3,
                                          ATTN_DTYPE_FP8_E5M2};
        const uint8_t cb = rd_u8(&r);
        attn_tensor sl;
        if ((cb >> 4) & 1) { /* half the inputs: a write that can be valid (fz_kv_write), else the decoded views */
            fz_kv_write(&f, &r, cdt[cb % 5], &k, &v, &a5, &sl);
        } else {
            a5 = fz_tensor(&f, &r, 5, cdt[cb % 5]);
            sl = fz_index_of(&f, &r, 1, 0);
            k.ndim = v.ndim = 3;
        }
        if (entry == 25) {
            const float ks = rd_f(&r), vs = rd_f(&r);
            if (rd_u8(&r) & 1) { /* the scaled write with its notification (fz_last_entry 29, see below) */
                fz_notify_state ns;
                attn_kv_notify nt;
                const attn_kv_notify *ntp = fz_notify_of(&r, &ns, &nt);
                st = CALL(attn_reshape_and_cache_scaled_notify(ctx, &k, &v, &a5, &sl, ks, vs, ntp));
                if (ns.calls != (st == ATTN_STATUS_OK ? 1 : 0)) abort(); /* exactly one callback on success, none else */
                entry = 29;
            } else {
                st = CALL(attn_reshape_and_cache_scaled(ctx, &k, &v, &a5, &sl, ks, vs));
            }
        } else {
            fz_notify_state ns;
            attn_kv_notify nt;
            const attn_kv_notify *ntp = fz_notify_of(&r, &ns, &nt);
            st = CALL(attn_reshape_and_cache_notify(ctx, &k, &v, &a5, &sl, ntp));
            if (ns.calls != (st == ATTN_STATUS_OK ? 1 : 0)) abort(); /* exactly one callback on success, none else */
        }
        break;
    }
    case 27: case 28: { /* piecewise spans over the paged cache */
        /* With fz_cache_for's cache that fits q (its byte % 4 == 0, as for the plan-less entry) and a small q
         * [rows <= 8, query_len <= 8, heads, d], mostly (a byte % 4 != 0) a call that can be valid: seq_lens and
         * block_table fit the cache (fz_seq_table), out has q's shape and dtype and, for a set bit, lse is
         * [rows, heads, query_len]; else the decoded views (idx1 as seq_lens, idx3 as block_table, out, lse).
         * The spans and query ranges are decoded either way. */
        attn_tensor *sl = &idx1, *bt = &idx3;
        int fits;
        a5 = fz_cache_for(&f, &r, &q, 2, &fits);
        const uint8_t g = rd_u8(&r);
        if (fits && q.shape[0] >= 1 && q.shape[0] <= 8 && q.shape[1] >= 0 && q.shape[1] <= 8 && g % 4 != 0) {
            fz_seq_table(&f, &r, q.shape[0], 1 + (g >> 2) % 4, a5.shape[2], a5.shape[1], q.shape[1], &a1, &a2);
            sl = &a1, bt = &a2;
            out = fz_shaped(&f, &r, q.dtype, 4, q.shape);
            if (lse && (g & 64)) {
                const int64_t ls[3] = {q.shape[0], q.shape[2], q.shape[1]};
                *lse = fz_shaped(&f, &r, ATTN_DTYPE_F32, 3, ls);
            }
        }
        attn_span spans[4];
        attn_query_range qr[3];
        const int64_t ns = rd_u8(&r) % 5 - 1, nr = rd_u8(&r) % 4;
        for (int i = 0; i < 4; i++) spans[i].start = rd_dim(&r), spans[i].end = rd_dim(&r);
        for (int i = 0; i < 3; i++) qr[i].local_start = rd_dim(&r), qr[i].local_end = rd_dim(&r), qr[i].global_start = rd_dim(&r);
        fz_additive(&f, &r, &p, &am);
        fz_bound(&out, fz_paged_work(&q, &a5, bt), FZ_MAX_WORK_PAGED);
        st = CALL(entry == 27 ? attn_forward_paged_piecewise(ctx, &q, &a5, sl, bt, ns < 0 ? NULL : spans,
                                                             ns < 0 ? 1 : ns, nr ? qr : NULL, nr, &p, &out, lse)
                              : attn_ref_forward_paged_piecewise(&q, &a5, sl, bt, ns < 0 ? NULL : spans,
                                                                 ns < 0 ? 1 : ns, nr ? qr : NULL, nr, &p, &out, lse));
        break;
    }
    case 22: { /* fp8 / MX codecs: n decoded (negative, huge), buffers exactly n (and ceil(n/32) scales) long */
        const uint8_t mb = rd_u8(&r);
        int64_t n = rd_dim(&r);
        if (n >= 0 && n < 9) n = n * (1 + rd_u8(&r) % 16); /* up to 128 values: several MX blocks */
        const attn_dtype fmt = (mb & 0x30) == 0x30 ? (attn_dtype)(rd_u8(&r) % 12)
                               : (attn_dtype)(ATTN_DTYPE_FP8_E4M3 + (mb >> 4) % 3);
        const int64_t nblk = n > 0 && n <= 4096 ? (n + 31) / 32 : 0; /* (no overflow for huge n) */
        const int fits = n > 0 && n <= 4096;
        float *fsrc = fits ? (float *)fz_alloc(&f, &r, (size_t)n * sizeof(float)) : NULL;
        uint8_t *bytes = fits ? (uint8_t *)fz_alloc(&f, &r, (size_t)n) : NULL;
        uint8_t *scales = fits ? (uint8_t *)fz_alloc(&f, &r, (size_t)nblk) : NULL;
        float *fdst = fits ? (float *)fz_alloc(&f, &r, (size_t)n * sizeof(float)) : NULL;
        if (fsrc && (mb & 1)) for (int64_t i = 0; i < n; i++) fsrc[i] = rd_f(&r);
        const float scale = rd_f(&r);
        switch (mb % 3) {
        case 0: st = CALL(attn_dequantize_fp8(fmt, mb & 8 ? NULL : bytes, n, scale, mb & 4 ? NULL : fdst)); break;
        case 1: st = CALL(attn_quantize_mx(fmt, mb & 8 ? NULL : fsrc, n, mb & 4 ? NULL : bytes, scales)); break;
        default: st = CALL(attn_dequantize_mx(fmt, bytes, mb & 8 ? NULL : scales, n, mb & 4 ? NULL : fdst)); break;
        }
        break;
    }
    case 23: { /* Hadamard signs / rotation: head_size and rows decoded, buffers exact (in place by choice) */
        const uint8_t mb = rd_u8(&r);
        const int64_t hs = mb & 2 ? rd_dim(&r) : (int64_t)1 << (rd_u8(&r) % 10), rows = rd_dim(&r);
        const uint32_t seed = (uint32_t)rd_i32(&r);
        int64_t cnt = 0;
        const int fits = hs > 0 && rows >= 0 && !__builtin_mul_overflow(hs, rows, &cnt) && cnt <= 16384 && hs <= 4096;
        if (mb & 1) {
            int8_t *signs = hs > 0 && hs <= 4096 ? (int8_t *)fz_alloc(&f, &r, (size_t)hs) : NULL;
            st = CALL(attn_hadamard_signs(hs, seed, mb & 4 ? NULL : signs));
        } else {
            float *src = fits && cnt > 0 ? (float *)fz_alloc(&f, &r, (size_t)cnt * sizeof(float)) : NULL;
            float *dst = (mb & 8) ? src : (fits && cnt > 0 ? (float *)fz_alloc(&f, &r, (size_t)cnt * sizeof(float)) : NULL);
            if (src) for (int64_t i = 0; i < cnt && i < 64; i++) src[i] = rd_f(&r);
            st = CALL(attn_hadamard_rotate(mb & 4 ? NULL : src, rows, hs, seed, dst));
        }
        break;
    }
    case 24: { /* capabilities with a decoded caps_size (a buffer of exactly that size), context settings */
        const uint8_t mb = rd_u8(&r);
        if (mb % 3 == 0) {
            static const size_t sizes[8] = {0, 1, 4, 8, 12, sizeof(attn_capabilities) - 4, sizeof(attn_capabilities),
                                            sizeof(attn_capabilities) + 60};
            const size_t cs = sizes[rd_u8(&r) % 8];
            void *caps = cs ? fz_alloc(&f, &r, cs) : NULL;
            st = CALL(attn_capabilities_get(mb & 8 ? NULL : (attn_capabilities *)caps, cs));
        } else {
            static const char *const names[8] = {"generic", "avx2", "avx512", "neon", "", "AVX2", "avx512x", NULL};
            static attn_ctx *c2 = NULL; /* one context for the whole run (a fresh one per input allocated and
                                           poisoned a thread's scratch every time); the settings carry over */
            if (!c2 && attn_ctx_create(&c2) != ATTN_STATUS_OK) break;
            if (mb % 3 == 1) {
                const char *name = names[rd_u8(&r) % 8];
                st = CALL(attn_ctx_set_isa(mb & 8 ? NULL : c2, name));
                if (st == ATTN_STATUS_OK && strcmp(attn_ctx_isa(c2), name) != 0) abort(); /* the table asked for */
            } else {
                const int32_t nt = rd_i32(&r);
                st = CALL(attn_ctx_set_num_threads(mb & 8 ? NULL : c2, nt));
                if (st == ATTN_STATUS_OK && attn_ctx_num_threads(c2) != nt) abort();
            }
        }
        break;
    }
    default: {
        const int64_t n = rd_dim(&r) % 64;
        float src[64];
        uint8_t dst[64];
        for (int i = 0; i < 64; i++) src[i] = rd_f(&r);
        const uint8_t fb = rd_u8(&r);
        const attn_dtype fmt = fb & 1 ? ATTN_DTYPE_FP8_E4M3 : (attn_dtype)(rd_u8(&r) % 12);
        const float scale = rd_f(&r);
        st = CALL(attn_quantize_fp8(fmt, src, n, scale, dst));
        break;
    }
    }
    (void)writes_ws;
    fz_last_status = st, fz_last_entry = entry;
    if (st != ATTN_STATUS_OK) {
        if (attn_last_error()[0] == '\0') abort(); /* every failure names its argument */
        for (int i = 0; i < f.n; i++)
            if (f.snap[i] && memcmp(f.snap[i], f.base[i], f.size[i]) != 0) {
                fprintf(stderr, "fuzz_entries: entry %d failed (%s: %s) but changed buffer %d\n", (int)entry,
                        attn_status_string(st), attn_last_error(), i);
                abort();
            }
    }
    snprintf(fz_last_msg, sizeof fz_last_msg, "%s", attn_last_error());
    attn_clear_error();
    for (int i = 0; i < f.n; i++) free(f.base[i]), free(f.snap[i]);
    return 0;
}

#ifndef FZ_NO_MAIN
/* The libFuzzer entry of one target: -DFZ_TARGET_INDEX=<index into fz_targets>. */
#ifndef FZ_TARGET_INDEX
#error "define FZ_TARGET_INDEX (tests/fuzz/tests.cmake builds one binary per fz_targets row)"
#endif
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fz_run(&fz_targets[FZ_TARGET_INDEX], data, size); }
#endif
