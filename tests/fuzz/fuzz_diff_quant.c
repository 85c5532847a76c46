/*
 * fuzz_diff_quant.c — differential target of the quantized entry attn_forward_quant (fuzz_diff.h): a small
 * dense problem (both layouts, GQA, head sizes 1..256, f32/f16/bf16; no causal or window, which the entry
 * refuses), every format (block FP8 E4M3 / E5M2 with decoded q / kv row blocks, MXFP8, MXFP4), with and without
 * the Hadamard rotation (a head size that is not a power of two must then be refused by both), soft-cap, ALiBi,
 * sinks; the exact workspace size. Every usable kernel table against attn_ref_forward_quant (literal rotation and
 * nearest-code quantization, then the float oracle): out and LSE within the float tolerance of the dtype and
 * table, widened as docs/DIFFUSION.md §5 states where the context runs the bf16 quant kernels (a CPU with
 * AVX512-BF16, whatever the table), the same status when the oracle refuses, nothing written then.
 */
#include "attn/attn_experimental.h"
#include "fuzz_diff.h"

static int fzd_quant_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_quant");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    fzd_dense c;
    fzd_dense_decode(&r, &c, 0, 0, 1 << 16);
    static const int32_t rows[8] = {128, 256, 1, 2, 3, 7, 16, 64};
    const uint8_t qb = fzd_u8(&r), rb = fzd_u8(&r);
    attn_quant_params qp;
    attn_quant_params_init(&qp, (attn_quant_format)(qb & 3));
    qp.rotate = (qb >> 2) & 1;
    if (qb & 8)
        qp.rotation_seed = (uint32_t)rb * 7919u;
    if (qb & 16)
        qp.q_block_rows = rows[rb & 7], qp.kv_block_rows = rows[(rb >> 3) & 7];
    fzd_say("format=%d rotate=%d seed=%u q_block_rows=%d kv_block_rows=%d", (int)qp.format, (int)qp.rotate,
            qp.rotation_seed, (int)qp.q_block_rows, (int)qp.kv_block_rows);
    fzd_kind = 1 + (int)qp.format + 4 * qp.rotate + 8 * (c.qdt != ATTN_DTYPE_F32) + 16 * ((qb >> 4) & 1);
    void *ro;
    float *rl;
    attn_tensor tro, trl;
    fzd_dense_outputs(&c, &ro, &rl, &tro, &trl);
    const attn_status rst = attn_ref_forward_quant((attn_layout)c.layout, &c.tq, &c.tk, &c.tv, &qp, &c.o.p, &tro, &trl);
    attn_clear_error();
    size_t wsb = 0;
    const attn_status wst = attn_forward_quant_workspace_size((attn_layout)c.layout, &c.tq, &c.tk, &c.tv, &wsb);
    attn_clear_error();
    for (int t = 0; t < fzd_ntables; t++) {
        const char *isa = fzd_tables[t].name;
        void *fo;
        float *fl;
        attn_tensor tfo, tfl;
        fzd_dense_outputs(&c, &fo, &fl, &tfo, &tfl);
        void *ws = wst == ATTN_STATUS_OK && wsb > 0 ? malloc(wsb) : NULL;
        const attn_status st = attn_forward_quant(fzd_tables[t].ctx, (attn_layout)c.layout, &c.tq, &c.tk, &c.tv, &qp,
                                                  &c.o.p, &tfo, &tfl, ws, ws ? wsb : 0);
        if (rst != ATTN_STATUS_OK) {
            if (st != rst)
                fzd_fail("attn_forward_quant on %s returned %s, the oracle %s (%s)", isa, attn_status_string(st),
                         attn_status_string(rst), attn_last_error());
            fzd_check_untouched("attn_forward_quant out after a refusal", isa, fo, fzd_bytes(c.qdt, c.nout));
        } else {
            fzd_check_status("attn_forward_quant", isa, st);
            /* quantized magnitudes: at most twice the inputs' (MX scale rounding, FP8 saturation only shrinks) */
            fzd_tol tol = fzd_tol_of(&fzd_tables[t], c.qdt, 2.0 * c.vmax,
                                     4.0 * fzd_logit_mag(&c.o, c.D, c.qmax, c.kmax, c.Sq + c.Sk), c.D, &c.o, c.Sk + 1,
                                     c.Sq + c.Sk, 0);
            if (th_quant_kernels_bf16(attn_forward_quant_kernels(fzd_tables[t].ctx))) {
                /* the bf16 kernels, which any table's context runs where the CPU has AVX512-BF16 (the kernels are
                 * chosen by CPU features, not by the table): P·v_scale rounded to bf16 (docs/DIFFUSION.md §5;
                 * what th_tol_for_quant_bf16 adds to the dtype's tolerance in the conformance tests), or for MXFP4
                 * where the CPU has AVX512-VNNI P as bytes per 32-key block (th_tol_for_quant_kernels) */
                const th_tol f = th_tol_for(c.qdt), q = th_tol_for_quant_kernels(c.qdt, qp.format);
                tol.atol += q.atol - f.atol, tol.rtol += q.rtol - f.rtol, tol.lse_sum += q.lse_atol - f.lse_atol;
            }
            fzd_check_out("attn_forward_quant out", isa, fo, ro, c.qdt, c.nout, &tol);
            fzd_check_lse("attn_forward_quant", isa, fl, rl, c.nlse, &tol);
        }
        attn_clear_error();
        free(fo), free(fl), free(ws);
    }
    free(ro), free(rl);
    fzd_dense_free(&c);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_quant_run(data, size);
}
#endif
