/*
 * bench_quant.c — attn_forward_quant (fp8 e4m3 block, MXFP8, MXFP4; rotation on) against bf16 and f32
 * attn_forward of the same shape: B = 1, H = 4, D = 128, non-causal prefill of S = 1024 and 4096 tokens, 1 and 2
 * threads; min and median of REPS runs, GFLOP/s (4·S²·D·H flop), the ratio quantized ÷ bf16 time, and the
 * fraction of the single-thread VDPBF16PS, VPDPBUSD (int8), TDPBF16PS (AMX tiles, where the CPU has them) and FMA
 * peaks measured in the same run (× threads;
 * measured before and after: the clock of a shared machine moves). The five kinds take turns within each repeat.
 *   bench_quant [reps=5] [seq...]      ATTN_QUANT_KERNELS=fake runs the fake-quantization path for comparison.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"
#include "bench_peak.h"

static void fill(void *p, attn_dtype dt, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float x = (float)((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
        if (dt == ATTN_DTYPE_F32)
            ((float *)p)[i] = x;
        else {
            uint32_t u;
            memcpy(&u, &x, 4);
            ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        }
    }
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    int64_t seqs[8] = {1024, 4096};
    int nseq = 2;
    if (argc > 2) {
        nseq = 0;
        for (int i = 2; i < argc && nseq < 8; i++)
            seqs[nseq++] = atoll(argv[i]);
    }
    const double dp = bench_peak_dpbf16_gflops(), i8 = bench_peak_dpbusd_gops(), fma = bench_peak_fma_gflops(512);
    const double amx = bench_peak_amx_bf16_gflops();
    printf("# single-thread peaks: VDPBF16PS %.1f GFLOP/s, VPDPBUSD %.1f GOP/s, TDPBF16PS %.1f GFLOP/s, FMA512 %.1f "
           "GFLOP/s; quant kernels \"%s\"\n",
           dp, i8, amx, fma, attn_forward_quant_kernels(NULL));
    printf("%-6s %-3s %-10s %10s %10s %9s %12s %8s %8s %8s %8s\n", "seq", "thr", "kind", "min_ms", "med_ms", "GFLOP/s",
           "bf16/q min/med", "%dpbf16", "%dpbusd", "%amx", "%fma");
    const int64_t B = 1, H = 4, D = 128;
    for (int si = 0; si < nseq; si++) {
        const int64_t S = seqs[si];
        const size_t n = (size_t)(B * S * H * D);
        int64_t shape[4] = {B, S, H, D};
        float *qf = malloc(n * 4), *kf = malloc(n * 4), *vf = malloc(n * 4), *of = malloc(n * 4);
        uint16_t *qb = malloc(n * 2), *kb = malloc(n * 2), *vb = malloc(n * 2), *ob = malloc(n * 2);
        fill(qf, ATTN_DTYPE_F32, n, 1), fill(kf, ATTN_DTYPE_F32, n, 2), fill(vf, ATTN_DTYPE_F32, n, 3);
        fill(qb, ATTN_DTYPE_BF16, n, 1), fill(kb, ATTN_DTYPE_BF16, n, 2), fill(vb, ATTN_DTYPE_BF16, n, 3);
        attn_tensor tqf = attn_tensor_make(qf, ATTN_DTYPE_F32, 4, shape),
                    tkf = attn_tensor_make(kf, ATTN_DTYPE_F32, 4, shape),
                    tvf = attn_tensor_make(vf, ATTN_DTYPE_F32, 4, shape),
                    tof = attn_tensor_make(of, ATTN_DTYPE_F32, 4, shape);
        attn_tensor tqb = attn_tensor_make(qb, ATTN_DTYPE_BF16, 4, shape),
                    tkb = attn_tensor_make(kb, ATTN_DTYPE_BF16, 4, shape),
                    tvb = attn_tensor_make(vb, ATTN_DTYPE_BF16, 4, shape),
                    tob = attn_tensor_make(ob, ATTN_DTYPE_BF16, 4, shape);
        size_t ws = 0;
        attn_forward_quant_workspace_size(ATTN_LAYOUT_BSND, &tqb, &tkb, &tvb, &ws);
        void *w = malloc(ws);
        const double flop = 4.0 * (double)S * (double)S * (double)D * (double)H;
        for (int32_t thr = 1; thr <= 2; thr++) {
            attn_ctx *ctx = NULL;
            if (attn_ctx_create(&ctx) != ATTN_STATUS_OK || attn_ctx_set_num_threads(ctx, thr) != ATTN_STATUS_OK)
                return 1;
            const char *kinds[5] = {"f32", "bf16", "fp8e4m3", "mxfp8", "mxfp4"};
            double t[5][64];
            const int r = reps > 64 ? 64 : reps;
            /* the kinds take turns within each repeat, so that a change of clock or load hits all of them */
            for (int i = -1; i < r; i++)
                for (int kind = 0; kind < 5; kind++) {
                    const double t0 = bench_now();
                    attn_status st;
                    if (kind == 0)
                        st = attn_forward(ctx, ATTN_LAYOUT_BSND, &tqf, &tkf, &tvf, NULL, &tof, NULL);
                    else if (kind == 1)
                        st = attn_forward(ctx, ATTN_LAYOUT_BSND, &tqb, &tkb, &tvb, NULL, &tob, NULL);
                    else {
                        attn_quant_params qp;
                        attn_quant_params_init(&qp, kind == 2   ? ATTN_QUANT_FP8_E4M3
                                                    : kind == 3 ? ATTN_QUANT_MXFP8
                                                                : ATTN_QUANT_MXFP4);
                        st = attn_forward_quant(ctx, ATTN_LAYOUT_BSND, &tqb, &tkb, &tvb, &qp, NULL, &tob, NULL, w, ws);
                    }
                    if (st != ATTN_STATUS_OK) {
                        fprintf(stderr, "%s: %s\n", kinds[kind], attn_last_error());
                        return 1;
                    }
                    if (i >= 0)
                        t[kind][i] = bench_now() - t0;
                }
            double bf16_min = 0.0, bf16_med = 0.0;
            for (int kind = 0; kind < 5; kind++) {
                double tmin, tmed;
                bench_min_median(t[kind], r, &tmin, &tmed);
                if (kind == 1)
                    bf16_min = tmin, bf16_med = tmed;
                const double g = flop / tmin * 1e-9;
                char ratio[32] = "-";
                if (kind >= 2)
                    snprintf(ratio, sizeof ratio, "%.2fx/%.2fx", bf16_min / tmin, bf16_med / tmed);
                printf("%-6lld %-3d %-10s %10.2f %10.2f %9.1f %12s %7.0f%% %7.0f%% %7.1f%% %7.0f%%\n", (long long)S,
                       (int)thr, kinds[kind], tmin * 1e3, tmed * 1e3, g, ratio, dp > 0 ? 100.0 * g / (dp * thr) : 0.0,
                       i8 > 0 ? 100.0 * g / (i8 * thr) : 0.0, amx > 0 ? 100.0 * g / (amx * thr) : 0.0,
                       100.0 * g / (fma * thr));
            }
            fflush(stdout);
            attn_ctx_destroy(ctx);
        }
        (void)0;
        free(qf), free(kf), free(vf), free(of), free(qb), free(kb), free(vb), free(ob), free(w);
    }
    printf("# peaks after: VDPBF16PS %.1f GFLOP/s, VPDPBUSD %.1f GOP/s, TDPBF16PS %.1f GFLOP/s, FMA512 %.1f GFLOP/s\n",
           bench_peak_dpbf16_gflops(), bench_peak_dpbusd_gops(), bench_peak_amx_bf16_gflops(),
           bench_peak_fma_gflops(512));
    return 0;
}
