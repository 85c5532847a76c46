/*
 * wl_default.c — the built-in data workloads of the `attn` CLI:
 *   default: Llama-3-8B attention (32 query heads, 8 kv heads, head_size 128) as a server sees it: prefill
 *            512–2048, a chunked prefill over a cached context, decode and speculative decode, a packed batch.
 *            Sized to finish `attn run` in well under 30 s on 2 cores with the unoptimised kernels.
 *   check:   small cases covering every option, layout and dtype, compared in full by `attn check`.
 */
#include <string.h>

#include "workload.h"

/* Llama-3-8B attention: 32 query heads, 8 kv heads (GQA 4), head_size 128, causal, bf16. */
static void wl_llama3(attn_wl_case *c, const char *name) {
    attn_wl_case_init(c, name);
    c->num_heads = 32;
    c->num_kv_heads = 8;
    c->head_size = c->head_size_v = 128;
    c->dtype = c->kv_dtype = ATTN_DTYPE_BF16;
    c->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    c->lse = 1;
}

static void wl_dense(attn_wl_case *c, int64_t batch, int64_t seq_q, int64_t seq_k) {
    c->layout = ATTN_WL_LAYOUT_BSND;
    c->batch = batch;
    c->seq_q[0] = seq_q;
    c->seq_k[0] = seq_k;
}

static void wl_varlen(attn_wl_case *c, int64_t n, const int64_t *seq_q, const int64_t *seq_k) {
    c->layout = ATTN_WL_LAYOUT_VARLEN;
    c->batch = n;
    memcpy(c->seq_q, seq_q, (size_t)n * sizeof *seq_q);
    memcpy(c->seq_k, seq_k, (size_t)n * sizeof *seq_k);
}

int attn_wl_default_build(attn_workload *wl) {
    memset(wl, 0, sizeof *wl);
    strcpy(wl->name, "default");
    strcpy(wl->description, "Llama-3-8B attention (32/8 heads, d128, bf16, causal): prefill, chunked prefill, decode");
    attn_wl_case c;
    int rc = 0;

    static const int64_t prefill[] = {512, 1024, 2048};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "llama3-prefill-%lld", (long long)prefill[i]);
        wl_llama3(&c, name);
        wl_dense(&c, 1, prefill[i], prefill[i]);
        rc |= attn_workload_add(wl, &c);
    }
    /* chunked prefill: 512 new tokens on a 1536-token cached context */
    wl_llama3(&c, "llama3-chunked-512+1536");
    wl_dense(&c, 1, 512, 2048);
    rc |= attn_workload_add(wl, &c);
    /* a packed prefill batch of three documents */
    wl_llama3(&c, "llama3-packed-3docs");
    {
        const int64_t lens[3] = {300, 700, 1048};
        wl_varlen(&c, 3, lens, lens);
    }
    rc |= attn_workload_add(wl, &c);
    /* decode: 16 requests, one new token each, contexts 256..4096 */
    wl_llama3(&c, "llama3-decode-16");
    {
        int64_t q[16], k[16];
        for (int i = 0; i < 16; i++)
            q[i] = 1, k[i] = 256 + i * 256;
        wl_varlen(&c, 16, q, k);
    }
    c.repeats = 5;
    rc |= attn_workload_add(wl, &c);
    /* speculative decode: 8 requests × 4 query tokens (1 + 3 draft) on 2048 keys */
    wl_llama3(&c, "llama3-specdec-8x4");
    wl_dense(&c, 8, 4, 2048);
    c.repeats = 5;
    rc |= attn_workload_add(wl, &c);
    /* the same prefill in float32 (accuracy/throughput baseline) */
    wl_llama3(&c, "llama3-prefill-1024-f32");
    c.dtype = c.kv_dtype = ATTN_DTYPE_F32;
    wl_dense(&c, 1, 1024, 1024);
    rc |= attn_workload_add(wl, &c);
    if (rc)
        attn_workload_free(wl);
    return rc ? -1 : 0;
}

int attn_wl_check_build(attn_workload *wl) {
    memset(wl, 0, sizeof *wl);
    strcpy(wl->name, "check");
    strcpy(wl->description, "small cases over every option, layout and dtype; full oracle comparison");
    attn_wl_case c;
    int rc = 0;

    attn_wl_case_init(&c, "gqa-causal-lse-f32");
    wl_dense(&c, 2, 37, 100), c.num_heads = 8, c.num_kv_heads = 2;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "bnsd-f16-d128");
    wl_dense(&c, 1, 17, 33), c.layout = ATTN_WL_LAYOUT_BNSD, c.num_heads = c.num_kv_heads = 4;
    c.head_size = c.head_size_v = 128, c.dtype = c.kv_dtype = ATTN_DTYPE_F16, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "top-left-mqa-bf16");
    wl_dense(&c, 2, 40, 30), c.num_heads = 4, c.num_kv_heads = 1;
    c.dtype = c.kv_dtype = ATTN_DTYPE_BF16, c.causal = ATTN_CAUSAL_TOP_LEFT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "empty-rows-causal");
    wl_dense(&c, 1, 40, 16), c.num_heads = 2, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "window-softcap-d96");
    wl_dense(&c, 1, 64, 96), c.num_heads = 4, c.num_kv_heads = 2, c.head_size = c.head_size_v = 96;
    c.window_left = 8, c.window_right = 0, c.softcap = 30.0f, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "alibi-sinks-6heads");
    wl_dense(&c, 1, 48, 48), c.num_heads = 6, c.num_kv_heads = 3;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.alibi = 1, c.sinks = 1, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "dv32-scale-f32-bf16kv");
    wl_dense(&c, 2, 9, 70), c.num_heads = 4, c.num_kv_heads = 2, c.head_size_v = 32;
    c.kv_dtype = ATTN_DTYPE_BF16, c.softmax_scale = 0.05f, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "split-kv-1500");
    wl_dense(&c, 1, 8, 1500), c.num_heads = 4, c.num_kv_heads = 2;
    c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "decode-llama3-bf16");
    wl_dense(&c, 4, 1, 300), c.num_heads = 32, c.num_kv_heads = 8, c.head_size = c.head_size_v = 128;
    c.dtype = c.kv_dtype = ATTN_DTYPE_BF16, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "d256-f16-window");
    wl_dense(&c, 1, 20, 50), c.num_heads = 2, c.head_size = c.head_size_v = 256;
    c.dtype = c.kv_dtype = ATTN_DTYPE_F16, c.window_left = 5, c.window_right = 3;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "varlen-causal-lse");
    {
        const int64_t q[4] = {3, 17, 0, 64}, k[4] = {5, 40, 9, 64};
        wl_varlen(&c, 4, q, k);
    }
    c.num_heads = 8, c.num_kv_heads = 2, c.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    attn_wl_case_init(&c, "varlen-bf16-window-alibi");
    {
        const int64_t q[3] = {12, 1, 30}, k[3] = {12, 600, 30};
        wl_varlen(&c, 3, q, k);
    }
    c.num_heads = 4, c.num_kv_heads = 4, c.dtype = c.kv_dtype = ATTN_DTYPE_BF16;
    c.window_left = 4, c.window_right = 4, c.alibi = 1, c.lse = 1;
    rc |= attn_workload_add(wl, &c);

    if (rc)
        attn_workload_free(wl);
    return rc ? -1 : 0;
}
