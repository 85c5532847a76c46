/*
 * wl_diffusion.c — the built-in 'diffusion' workload: joint image+text attention (4096 image +
 * 512 text tokens, 24 heads, head_size 128) dense, with a padded text segment (self-attention unpad →
 * pad route), a CFG pair, cross-attention with a key-padding mask, a piecewise video-style span layout,
 * packed documents, prefix K/V slicing with power-of-two pre-scaling, and the four quantized formats.
 * `run`/`bench` use the realistic shapes; `check` (oracle on every row) runs the same cases scaled down
 * (512 image + 64 text tokens, 4 heads) so the scalar oracle finishes. Quantized cases report the error
 * against FLOAT attention (the oracle of the unquantized problem) and pass on a cosine band.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <attn/attn_experimental.h>

#include "util.h"
#include "workload.h"

typedef enum dkind {
    DK_JOINT = 0, /* dense non-causal joint attention                                   */
    DK_PADDED,    /* self-attention with a key-padding mask over the text segment       */
    DK_CFG,       /* batch 2 (cond, uncond) with different text padding                 */
    DK_CROSS,     /* image queries over padded text keys (cross semantics)              */
    DK_PIECEWISE, /* text | frame | text | frame ... with full-attention frame spans    */
    DK_PACKED,    /* batch-1 packed documents (cu_seqlens)                              */
    DK_PREFIX,    /* prefix K/V slice + 2^8 input pre-scaling (MiniMax-H3 style)        */
    DK_QUANT      /* quantized attention, format in qfmt                                */
} dkind;

typedef struct dcase {
    const char *name;
    dkind kind;
    int32_t qfmt; /* attn_quant_format for DK_QUANT */
    attn_dtype dtype;
} dcase;

static const dcase dcases[] = {
    {"joint-dense", DK_JOINT, 0, ATTN_DTYPE_BF16},
    {"joint-padded-text", DK_PADDED, 0, ATTN_DTYPE_BF16},
    {"cfg-pair-padded", DK_CFG, 0, ATTN_DTYPE_BF16},
    {"cross-text-kpm", DK_CROSS, 0, ATTN_DTYPE_BF16},
    {"piecewise-video", DK_PIECEWISE, 0, ATTN_DTYPE_BF16},
    {"packed-docs", DK_PACKED, 0, ATTN_DTYPE_BF16},
    {"prefix-kv-prescale", DK_PREFIX, 0, ATTN_DTYPE_F16},
    {"quant-fp8-e4m3", DK_QUANT, ATTN_QUANT_FP8_E4M3, ATTN_DTYPE_BF16},
    {"quant-fp8-e5m2", DK_QUANT, ATTN_QUANT_FP8_E5M2, ATTN_DTYPE_BF16},
    {"quant-mxfp8", DK_QUANT, ATTN_QUANT_MXFP8, ATTN_DTYPE_BF16},
    {"quant-mxfp4", DK_QUANT, ATTN_QUANT_MXFP4, ATTN_DTYPE_BF16},
};

/* Cosine bands of the quantized cases against float attention (uniform data; docs/DIFFUSION.md). */
static const double dquant_band[4] = {0.997, 0.99, 0.995, 0.95};

/* Everything one timed call needs. */
typedef struct dcall {
    attn_ctx *ctx;
    const dcase *c;
    attn_tensor q, k, v, out, kpm, cuq, cuk, ksl, vsl;
    attn_params params;
    attn_span spans[8];
    int64_t num_spans;
    attn_quant_params qp;
    void *ws;
    size_t ws_size;
} dcall;

static attn_status dcall_run(void *arg) {
    dcall *a = (dcall *)arg;
    switch (a->c->kind) {
    case DK_PADDED:
    case DK_CFG:
        return attn_forward_padded(a->ctx, ATTN_LAYOUT_BSND, &a->q, &a->k, &a->v, &a->kpm, &a->params, &a->out, NULL,
                                   a->ws, a->ws_size);
    case DK_PIECEWISE:
        return attn_forward_piecewise(a->ctx, ATTN_LAYOUT_BSND, &a->q, &a->k, &a->v, a->spans, a->num_spans, NULL, 0,
                                      &a->params, &a->out, NULL);
    case DK_PACKED:
        return attn_forward_packed(a->ctx, &a->q, &a->k, &a->v, &a->cuq, &a->cuk, &a->params, &a->out, NULL);
    case DK_PREFIX:
        return attn_forward_prescaled(a->ctx, ATTN_LAYOUT_BSND, &a->q, &a->ksl, &a->vsl, 8, &a->params, &a->out, NULL,
                                      a->ws, a->ws_size);
    case DK_QUANT:
        return attn_forward_quant(a->ctx, ATTN_LAYOUT_BSND, &a->q, &a->k, &a->v, &a->qp, &a->params, &a->out, NULL,
                                  a->ws, a->ws_size);
    default: /* DK_JOINT, DK_CROSS (params carry the key padding mask) */
        return attn_forward(a->ctx, ATTN_LAYOUT_BSND, &a->q, &a->k, &a->v, &a->params, &a->out, NULL);
    }
}

/* Rows [r0, r0 + n) of a BSND view (a zero-copy sub-view). */
static attn_tensor drows(const attn_tensor *t, int64_t r0, int64_t n) {
    attn_tensor s = *t;
    const size_t es = attn_dtype_size(t->dtype);
    s.data = (char *)t->data + (size_t)(r0 * t->strides[1]) * es;
    s.shape[1] = n;
    return s;
}

/* Oracle of the last R query rows into ref (BSND [B, R, H, D]); the matching rows of `got` into *got_sub. */
static attn_status doracle(dcall *a, int64_t R, attn_tensor *ref, attn_tensor *got_sub, unsigned char **scratch) {
    const int64_t B = a->q.shape[0], S = a->q.shape[1], Sk = a->k.shape[1];
    attn_tensor qs = drows(&a->q, S - R, R);
    *got_sub = drows(&a->out, S - R, R);
    attn_params p = a->params;
    switch (a->c->kind) {
    case DK_PADDED:
    case DK_CFG: { /* keep(i, j) = valid_i && valid_j (non-causal): the explicit mask of the same rows */
        int64_t ms[4] = {B, 1, R, Sk};
        unsigned char *m = malloc((size_t)(B * R * Sk));
        const unsigned char *kpm = (const unsigned char *)a->kpm.data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < Sk; j++)
                    m[(b * R + i) * Sk + j] = kpm[b * S + S - R + i] && kpm[b * Sk + j];
        *scratch = m;
        static attn_tensor tm;
        tm = attn_tensor_make(m, ATTN_DTYPE_BOOL, 4, ms);
        p.mask = &tm;
        return attn_ref_forward(ATTN_LAYOUT_BSND, &qs, &a->k, &a->v, &p, ref, NULL);
    }
    case DK_PIECEWISE: /* default query range of R rows = the last R global positions */
        return attn_ref_forward_piecewise(ATTN_LAYOUT_BSND, &qs, &a->k, &a->v, a->spans, a->num_spans, NULL, 0, &p, ref,
                                          NULL);
    case DK_PREFIX:
        return attn_ref_forward(ATTN_LAYOUT_BSND, &qs, &a->ksl, &a->vsl, &p, ref, NULL);
    case DK_PACKED: { /* the last R rows of the last document (its queries are the last rows of the batch) */
        const int32_t *cu = (const int32_t *)a->cuq.data;
        const int64_t nd = a->cuq.shape[0] - 1, d0 = cu[nd - 1];
        attn_tensor kd = drows(&a->k, d0, Sk - d0), vd = drows(&a->v, d0, Sk - d0);
        return attn_ref_forward(ATTN_LAYOUT_BSND, &qs, &kd, &vd, &p, ref, NULL); /* bottom-right causal */
    }
    default: /* joint, cross (kpm in params), quant (float attention of the unquantized inputs) */
        return attn_ref_forward(ATTN_LAYOUT_BSND, &qs, &a->k, &a->v, &p, ref, NULL);
    }
}

static void dcosine(const attn_tensor *got, const attn_tensor *ref, double *cos, double *max_err) {
    double dot = 0, ng = 0, nr = 0, mx = 0;
    const int64_t B = ref->shape[0], R = ref->shape[1], H = ref->shape[2], D = ref->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    const float g =
                        attn_cli_load(got->data, got->dtype,
                                      (size_t)(b * got->strides[0] + i * got->strides[1] + h * got->strides[2] + d));
                    const float r = attn_cli_load(ref->data, ref->dtype, (size_t)(((b * R + i) * H + h) * D + d));
                    dot += (double)g * r, ng += (double)g * g, nr += (double)r * r;
                    if (fabs((double)g - r) > mx)
                        mx = fabs((double)g - r);
                }
    *cos = ng > 0 && nr > 0 ? dot / sqrt(ng * nr) : (ng == nr ? 1.0 : 0.0);
    *max_err = mx;
}

static void drun_case(const attn_cli_env *env, const dcase *c, attn_cli_report *rep) {
    const int small = env->mode == ATTN_CLI_MODE_CHECK;
    /* ATTN_TEST_SMALL=1 (the sanitizer test tier) halves the check shapes again: the same cases and routes */
    const char *tiny_env = getenv("ATTN_TEST_SMALL");
    const int tiny = small && tiny_env != NULL && strcmp(tiny_env, "1") == 0;
    const int64_t img = tiny ? 256 : small ? 512 : 4096, txt = tiny ? 32 : small ? 64 : 512;
    const int64_t H = tiny ? 2 : small ? 4 : 24, D = 128;
    const int64_t B = c->kind == DK_CFG ? 2 : 1;
    const int64_t S = c->kind == DK_CROSS ? img : img + txt, Sk = c->kind == DK_CROSS ? txt : S;
    attn_cli_result r;
    attn_cli_result_init(&r, c->name);
    dcall a;
    memset(&a, 0, sizeof a);
    a.ctx = env->ctx, a.c = c;
    attn_params_init(&a.params);
    attn_cli_rng rng;
    attn_cli_rng_seed(&rng, 4 + (uint64_t)(c - dcases));
    double vmax = 1.0;
    int64_t qs[4] = {B, S, H, D}, ks[4] = {B, Sk, H, D};
    void *q = attn_cli_alloc_fill(&rng, c->dtype, (size_t)(B * S * H * D), -2, 2, NULL);
    void *k = attn_cli_alloc_fill(&rng, c->dtype, (size_t)(B * Sk * H * D), -2, 2, NULL);
    void *v = attn_cli_alloc_fill(&rng, c->dtype, (size_t)(B * Sk * H * D), -1, 1, &vmax);
    void *o = attn_cli_alloc((size_t)(B * S * H * D) * attn_dtype_size(c->dtype));
    unsigned char *kpm = NULL, *scratch = NULL;
    int32_t cu[6];
    int64_t pairs = B * S * Sk;
    a.q = attn_tensor_make(q, c->dtype, 4, qs), a.k = attn_tensor_make(k, c->dtype, 4, ks);
    a.v = attn_tensor_make(v, c->dtype, 4, ks), a.out = attn_tensor_make(o, c->dtype, 4, qs);
    const char *opt = "";
    if (c->kind == DK_PADDED || c->kind == DK_CFG || c->kind == DK_CROSS) {
        /* [text (valid prefix, then pad) | image]; the CFG uncond row keeps only 12 text tokens */
        const int64_t L = c->kind == DK_CROSS ? Sk : S;
        int64_t kps[2] = {B, L};
        kpm = malloc((size_t)(B * L));
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < L; s++)
                kpm[b * L + s] = s >= txt || s < (b == 0 ? txt * 3 / 5 : 12);
        a.kpm = attn_tensor_make(kpm, ATTN_DTYPE_BOOL, 2, kps);
        if (c->kind == DK_CROSS) {
            a.params.key_padding_mask = &a.kpm;
            opt = "kpm (cross)";
        } else {
            attn_forward_padded_workspace_size(B, S, &a.ws_size);
            a.ws = attn_cli_alloc(a.ws_size);
            opt = "unpad->pad";
        }
        pairs = 0;
        for (int64_t b = 0; b < B; b++) {
            int64_t n = 0;
            for (int64_t s = 0; s < L; s++)
                n += kpm[b * L + s];
            pairs += c->kind == DK_CROSS ? S * n : n * n;
        }
    } else if (c->kind == DK_PIECEWISE) { /* text | frame | text | frame | frame (video-style spans) */
        const int64_t f = img / 3;
        const int64_t t0 = txt / 2, t1 = txt - t0;
        const attn_span sp[3] = {{t0, t0 + f}, {t0 + f + t1, t0 + 2 * f + t1}, {t0 + 2 * f + t1, S}};
        memcpy(a.spans, sp, sizeof sp);
        a.num_spans = 3;
        pairs = 0;
        for (int64_t i = 0; i < S; i++) {
            int64_t lim = i + 1;
            for (int t = 0; t < 3; t++)
                if (i >= sp[t].start && i < sp[t].end)
                    lim = sp[t].end;
            pairs += lim;
        }
        opt = "spans 3, causal text";
    } else if (c->kind == DK_PACKED) { /* 4 documents, one zero-length, causal per document */
        const int64_t len[4] = {S / 2, 0, S / 4, S - S / 2 - S / 4};
        int64_t cs[1] = {5};
        cu[0] = 0;
        pairs = 0;
        for (int d = 0; d < 4; d++)
            cu[d + 1] = cu[d] + (int32_t)len[d], pairs += len[d] * (len[d] + 1) / 2;
        a.cuq = attn_tensor_make(cu, ATTN_DTYPE_I32, 1, cs);
        a.cuk = a.cuq;
        a.params.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        opt = "4 docs causal";
    } else if (c->kind == DK_PREFIX) {
        const int64_t used = S - txt / 2; /* pad is a strict suffix */
        a.ksl = a.k, a.vsl = a.v;
        a.ksl.shape[1] = a.vsl.shape[1] = used;
        attn_forward_prescaled_workspace_size(&a.q, &a.ksl, &a.vsl, &a.ws_size);
        a.ws = attn_cli_alloc(a.ws_size);
        pairs = B * S * used;
        opt = "kv prefix, /256";
    } else if (c->kind == DK_QUANT) {
        attn_quant_params_init(&a.qp, (attn_quant_format)c->qfmt);
        attn_forward_quant_workspace_size(ATTN_LAYOUT_BSND, &a.q, &a.k, &a.v, &a.ws_size);
        a.ws = attn_cli_alloc(a.ws_size);
        opt = "rotated, vs float";
    }
    snprintf(r.shape, sizeof r.shape, "%lldx%lld/%lld h%lld d%lld", (long long)B, (long long)S, (long long)Sk,
             (long long)H, (long long)D);
    snprintf(r.options, sizeof r.options, "%s %s", attn_dtype_name(c->dtype), opt);
    r.gflop = attn_cli_gflop(pairs, H, D, D);
    r.ok = 1;
    if (!q || !k || !v || !o || ((c->kind == DK_PADDED || c->kind == DK_CFG || c->kind >= DK_PREFIX) && !a.ws)) {
        r.ok = 0;
        snprintf(r.error, sizeof r.error, "out of memory");
    } else {
        const int32_t repeats = env->repeats ? env->repeats : attn_cli_default_repeats(env);
        attn_status st = ATTN_STATUS_OK;
        if (env->mode != ATTN_CLI_MODE_CHECK)
            st = attn_cli_time(env, r.name, repeats, dcall_run, &a, &r.timing);
        else
            st = dcall_run(&a);
        if (st != ATTN_STATUS_OK) {
            r.ok = 0;
            snprintf(r.error, sizeof r.error, "%s", attn_last_error());
        } else if (env->check_rows != 0) {
            int64_t R = env->check_rows < 0 || env->check_rows > S ? S : env->check_rows;
            if (c->kind == DK_PACKED && R > cu[4] - cu[3])
                R = cu[4] - cu[3];
            int64_t rs[4] = {B, R, H, D};
            void *ref = attn_cli_alloc((size_t)(B * R * H * D) * attn_dtype_size(c->dtype));
            attn_tensor tref = attn_tensor_make(ref, c->dtype, 4, rs), got;
            st = doracle(&a, R, &tref, &got, &scratch);
            if (st != ATTN_STATUS_OK) {
                r.ok = 0;
                snprintf(r.error, sizeof r.error, "oracle: %s", attn_last_error());
            } else if (c->kind == DK_QUANT) {
                double cos, mx;
                dcosine(&got, &tref, &cos, &mx);
                r.rows_checked = env->check_rows;
                r.max_abs_err = mx;
                r.ok = cos >= dquant_band[c->qfmt];
                snprintf(r.options, sizeof r.options, "%s rotated, cos %.5f vs float", attn_dtype_name(c->dtype), cos);
            } else {
                attn_cli_cmp cmp;
                attn_cli_cmp_init(&cmp);
                attn_cli_compare(&got, &tref, attn_cli_tol_for(c->dtype), vmax, &cmp);
                r.rows_checked = env->check_rows;
                r.max_abs_err = cmp.max_abs_err;
                r.ok = cmp.num_bad == 0;
            }
            attn_cli_free(ref);
        }
    }
    attn_cli_report_add(rep, &r);
    attn_cli_free(q), attn_cli_free(k), attn_cli_free(v), attn_cli_free(o), attn_cli_free(a.ws);
    free(kpm), free(scratch);
}

int attn_wl_diffusion_run(const attn_cli_env *env) {
    attn_cli_report rep;
    char note[160];
    attn_cli_report_begin(&rep, env, "diffusion", attn_cli_check_note(env, note, sizeof note));
    for (size_t i = 0; i < sizeof dcases / sizeof dcases[0]; i++)
        drun_case(env, &dcases[i], &rep);
    return attn_cli_report_end(&rep);
}
