/*
 * kernels_avx512bf16.c — the opt-in "avx512bf16" kernel table: the avx512 table with the bf16 K/V
 * decode entries (qk_tile_kv, pv_rows_kv) on VDPBF16PS (tile_kv_avx512bf16.c); f32 / f16 / fp8 K/V in the
 * avx512 table's decode kernels (in place, with their prefetch steps), and like avx512 a vbmi variant for them. Never
 * chosen by default (it is not on the pinned chains: q and P are rounded to bf16); selected by name only
 * (ATTN_ISA=avx512bf16 or attn_ctx_set_isa), listed by attn_isa_opt_in_name. Tolerance and contract: docs/SEMANTICS.md.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512BF16__)
#error "kernels_avx512bf16.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16"
#endif
#include "kernels/kernels.h"

/* The table with the few-row decode entries QK (Q·Kᵀ), PV (P·V) and their prefetching forms QK_PF, PV_PF. fp8
 * few-row blocks are read in place by avx512's kernels (through the entries' fallbacks), as in the amx table. */
#define ATTN_AVX512BF16_TABLE(QK, QK_PF, PV, PV_PF)                                                                    \
    {                                                                                                                  \
        .name = "avx512bf16", .cvt_to_f32 = attn_k_cvt_to_f32_avx512, .cvt_from_f32 = attn_k_cvt_from_f32_avx512,      \
        .cvt_to_fp8 = attn_k_cvt_to_fp8_avx512, .qk_tile = attn_k_qk_tile_avx512,                                      \
        .softmax_tile = attn_k_softmax_tile_avx512, .pv_tile = attn_k_pv_tile_avx512, .qk_tile_kv = QK,                \
        .pv_rows_kv = PV, .qk_tile_kv_pf = QK_PF, .pv_rows_kv_pf = PV_PF, .transpose = attn_k_transpose_avx512,        \
        .scale_tile = attn_k_scale_tile_avx512, .qk_prep_kv = attn_k_qk_prep_kv_avx512bf16, .fp8_kv = 1,               \
    }

/* The prefetching entries: f32 / f16 / fp8 K/V through avx512's (`exact_qk` / `exact_pv`: the plain or the vbmi
 * entry; its bits and its prefetch steps); bf16 K/V issue all of the step's prefetches first, in one burst, then run
 * the VDPBF16PS kernels (which have no steps of their own). */
static inline __attribute__((always_inline)) void
kbf_qk_pf(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows, attn_dtype kv_dtype,
          int64_t num_keys, float *s, attn_kv_prefetch *pf,
          void (*exact_qk)(const float *, int64_t, int64_t, const void *const *, attn_dtype, int64_t, float *,
                           attn_kv_prefetch *)) {
    if (kv_dtype != ATTN_DTYPE_BF16) {
        exact_qk(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf);
        return;
    }
    attn_kv_prefetch_step(pf, attn_kv_prefetch_rate(pf, 1));
    attn_k_qk_tile_kv_avx512bf16(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s);
}

static inline __attribute__((always_inline)) void
kbf_pv_pf(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows, attn_dtype kv_dtype,
          int64_t head_size_v, float *o_d, attn_kv_prefetch *pf,
          void (*exact_pv)(const float *, int64_t, int64_t, const void *const *, attn_dtype, int64_t, float *,
                           attn_kv_prefetch *)) {
    if (kv_dtype != ATTN_DTYPE_BF16) {
        exact_pv(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, pf);
        return;
    }
    attn_kv_prefetch_step(pf, attn_kv_prefetch_rate(pf, 1));
    attn_k_pv_rows_kv_avx512bf16(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d);
}

static void kbf_qk_tile_kv_pf(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                              attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf) {
    kbf_qk_pf(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf, attn_k_qk_tile_kv_pf_avx512);
}

static void kbf_pv_rows_kv_pf(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                              attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf) {
    kbf_pv_pf(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, pf, attn_k_pv_rows_kv_pf_avx512);
}

const struct attn_kernels attn_kernels_avx512bf16 = ATTN_AVX512BF16_TABLE(
    attn_k_qk_tile_kv_avx512bf16, kbf_qk_tile_kv_pf, attn_k_pv_rows_kv_avx512bf16, kbf_pv_rows_kv_pf);

#if defined(ATTN_HAVE_AVX512_VBMI)
/* The vbmi variant (dispatch hands it out as "avx512bf16" where CPUID reports AVX512_VBMI): f32 / f16 / fp8 K/V
 * through the avx512 table's vbmi entries (fp8 widened through VPERMI2B byte tables), the same bits as the plain
 * table; bf16 K/V on VDPBF16PS as there. */
static void kbf_qk_tile_kv_pf_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                   attn_dtype kv_dtype, int64_t num_keys, float *s, attn_kv_prefetch *pf) {
    kbf_qk_pf(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, pf, attn_k_qk_tile_kv_pf_avx512_vbmi);
}

static void kbf_pv_rows_kv_pf_vbmi(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                   attn_dtype kv_dtype, int64_t head_size_v, float *o_d, attn_kv_prefetch *pf) {
    kbf_pv_pf(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, pf, attn_k_pv_rows_kv_pf_avx512_vbmi);
}

static void kbf_qk_tile_kv_vbmi(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                attn_dtype kv_dtype, int64_t num_keys, float *s) {
    attn_kv_prefetch none = {0};
    kbf_qk_pf(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, &none, attn_k_qk_tile_kv_pf_avx512_vbmi);
}

static void kbf_pv_rows_kv_vbmi(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    attn_kv_prefetch none = {0};
    kbf_pv_pf(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, &none, attn_k_pv_rows_kv_pf_avx512_vbmi);
}

const struct attn_kernels attn_kernels_avx512bf16_vbmi =
    ATTN_AVX512BF16_TABLE(kbf_qk_tile_kv_vbmi, kbf_qk_tile_kv_pf_vbmi, kbf_pv_rows_kv_vbmi, kbf_pv_rows_kv_pf_vbmi);
#endif

/* The quantized-attention table where the CPU has AVX512-BF16 (chosen by CPU features, not by name:
 * src/dispatch/dispatch.c attn_dispatch_quant; contract in docs/DIFFUSION.md §5): MXFP4 Q·Kᵀ on VPDPBUSD where
 * the CPU also has AVX512-VNNI, on VDPBF16PS otherwise. */
#define ATTN_QUANT_AVX512BF16_ENTRIES                                                                                  \
    .name = "avx512bf16", ATTN_QUANT_AVX512BF16_SHARED, .qk_bf16 = attn_k_qk_bf16_avx512bf16,                          \
    .pv_pairs_bf16 = attn_k_pv_pairs_bf16_avx512bf16

const struct attn_quant_kernels attn_quant_kernels_avx512bf16 = {
    ATTN_QUANT_AVX512BF16_ENTRIES,
    .qk_e2m1_i8 = attn_k_qk_e2m1_i8_avx512bf16,
    .e2m1_bytes = attn_k_e2m1_bytes_avx512bf16,
    .softmax_quads_u8 = attn_k_softmax_quads_u8_avx512bf16,
    .v_quads_e2m1 = attn_k_v_quads_e2m1_avx512bf16,
    .pv_e2m1_i8 = attn_k_pv_e2m1_i8_avx512bf16,
};

const struct attn_quant_kernels attn_quant_kernels_avx512bf16_novnni = {ATTN_QUANT_AVX512BF16_ENTRIES};
