/*
 * bench_free_order.c — what the decode kernels' fixed summation order costs (bench_kernels --kv).
 *
 * attn's qk_tile_kv computes each score as one FMA chain over d ascending from 0, with keys in the lanes, so a
 * row's bits never depend on the kernel, the batch or the chunking (docs/KERNELS.md §8); at few rows (one decode
 * token × a GQA group) that means transposing K in registers. A kernel free to choose the order keeps head
 * dimensions in the lanes instead — each K row loaded as it lies, one partial sum per (key, row) across 16 lanes,
 * then a horizontal reduction of 16 such sums at a time (45 operations) — with no transpose. That variant lives
 * here, in the bench only: it is not lane invariant, its bits differ from every table's, and nothing in the
 * library calls it. It computes the same scores (checked against qk_tile_kv within 1e-5 relative before timing).
 * AVX-512 only (compiled with a function target; the caller checks the CPU); D a multiple of 32; R 4 or 8.
 *
 * The second variant keeps the order and the bits and changes the layout instead: K stored dimension by dimension
 * (one dimension's keys side by side, as a key cache laid out [head_size][block_size] per block and kv head would
 * hold them), so a column of 16 keys is one load and nothing is transposed. What it saves is what the transposes
 * cost; its scores must equal qk_tile_kv's bit for bit (checked before timing).
 */
#include "bench_free_order.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <string.h>

#define BFO_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define BFO_INLINE inline __attribute__((always_inline))

/* lane 4j + m of the result = Σ of the 16 lanes of v[4j + m] */
static BFO_INLINE BFO_TARGET __m512 bfo_reduce16(const __m512 v[16]) {
    __m512 w[8], x[4];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(w[2 * i]), b = _mm512_castps_pd(w[2 * i + 1]);
        x[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    const __m512 y0 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88), _mm512_shuffle_f32x4(x[0], x[1], 0xDD));
    const __m512 y1 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], 0x88), _mm512_shuffle_f32x4(x[2], x[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(y0, y1, 0x88), _mm512_shuffle_f32x4(y0, y1, 0xDD));
}

/* NKY keys × R rows (NKY·R = 16) from key k0: acc[key·R + r] over d, then one reduction. */
static BFO_INLINE BFO_TARGET void bfo_keys(const float *qp, int64_t D, const void *const *k_rows, int64_t k0, int bf16,
                                           float *s, const int R) {
    const int NKY = 16 / R;
    __m512 acc[16];
    for (int i = 0; i < 16; i++)
        acc[i] = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < D; d0 += 32)
        for (int key = 0; key < NKY; key++) {
            __m512 lo, hi;
            if (bf16) { /* even elements in the low halves of the dwords, odd in the high: q is permuted to match */
                const __m512i z = _mm512_loadu_si512((const uint16_t *)k_rows[k0 + key] + d0);
                lo = _mm512_castsi512_ps(_mm512_slli_epi32(z, 16));
                hi = _mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32((int)0xFFFF0000u)));
            } else {
                lo = _mm512_loadu_ps((const float *)k_rows[k0 + key] + d0);
                hi = _mm512_loadu_ps((const float *)k_rows[k0 + key] + d0 + 16);
            }
            for (int r = 0; r < R; r++) {
                acc[key * R + r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(qp + r * D + d0), acc[key * R + r]);
                acc[key * R + r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(qp + r * D + d0 + 16), acc[key * R + r]);
            }
        }
    float t[16];
    _mm512_storeu_ps(t, bfo_reduce16(acc));
    for (int key = 0; key < NKY; key++)
        memcpy(s + (k0 + key) * BFO_QB, t + key * R, (size_t)R * sizeof(float));
}

BFO_TARGET void bench_free_order_qk(const float *qp, int64_t num_rows, int64_t D, const void *const *k_rows, int bf16,
                                    int64_t num_keys, float *s) {
    const int64_t step = 16 / num_rows;
    for (int64_t k0 = 0; k0 + step <= num_keys; k0 += step) {
        if (num_rows == 4) bfo_keys(qp, D, k_rows, k0, bf16, s, 4);
        else bfo_keys(qp, D, k_rows, k0, bf16, s, 8);
    }
}

void bench_free_order_prep(const float *q_t, int64_t num_rows, int64_t D, int bf16, float *qp) {
    for (int64_t r = 0; r < num_rows; r++)
        for (int64_t d = 0; d < D; d++) { /* bf16: per 32-block the even dimensions, then the odd ones */
            const int64_t c = bf16 ? (d & ~(int64_t)31) + (d & 1) * 16 + ((d & 31) >> 1) : d;
            qp[r * D + c] = q_t[d * BFO_QB + r];
        }
}

/* Stores acc[0..R) (lane j = key keys[j]) into s[key][r]: one 4 × 4 transpose per 128-bit lane for each 4 rows. */
static BFO_INLINE BFO_TARGET void bfo_store_cols(const __m512 *acc, int R, const int *keys, float *s) {
    for (int r0 = 0; r0 < R; r0 += 4) {
        const __m512 z = _mm512_setzero_ps();
        const __m512 a0 = acc[r0], a1 = r0 + 1 < R ? acc[r0 + 1] : z, a2 = r0 + 2 < R ? acc[r0 + 2] : z,
                     a3 = r0 + 3 < R ? acc[r0 + 3] : z;
        const __m512 t0 = _mm512_unpacklo_ps(a0, a1), t1 = _mm512_unpackhi_ps(a0, a1);
        const __m512 t2 = _mm512_unpacklo_ps(a2, a3), t3 = _mm512_unpackhi_ps(a2, a3);
        __m512 u[4];
        u[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        u[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        u[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
        u[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
        float t[4][16];
        for (int i = 0; i < 4; i++)
            _mm512_storeu_ps(t[i], u[i]);
        const int n = R - r0 < 4 ? R - r0 : 4;
        for (int L = 0; L < 4; L++)
            for (int i = 0; i < 4; i++)
                memcpy(s + keys[4 * L + i] * BFO_QB + r0, t[i] + 4 * L, (size_t)n * 4);
    }
}

/* 32 keys from column base k: two accumulators per row (lanes = keys), one chain over d per score. */
static BFO_INLINE BFO_TARGET void bfo_cols32(const float *q_t, int64_t D, const char *k, int64_t ld_bytes, int bf16,
                                             float *s, const int R) {
    __m512 a[8], b[8];
    for (int r = 0; r < R; r++)
        a[r] = b[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        const char *col = k + d * ld_bytes;
        __m512 x, y;
        if (bf16) { /* x: even keys, y: odd keys */
            const __m512i z = _mm512_loadu_si512(col);
            x = _mm512_castsi512_ps(_mm512_slli_epi32(z, 16));
            y = _mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32((int)0xFFFF0000u)));
        } else {
            x = _mm512_loadu_ps((const float *)(const void *)col);
            y = _mm512_loadu_ps((const float *)(const void *)col + 16);
        }
        const float *q = q_t + d * BFO_QB;
        for (int r = 0; r < R; r++) {
            const __m512 qr = _mm512_set1_ps(q[r]);
            a[r] = _mm512_fmadd_ps(x, qr, a[r]);
            b[r] = _mm512_fmadd_ps(y, qr, b[r]);
        }
    }
    int ka[16], kb[16];
    for (int j = 0; j < 16; j++)
        ka[j] = bf16 ? 2 * j : j, kb[j] = bf16 ? 2 * j + 1 : 16 + j;
    bfo_store_cols(a, R, ka, s);
    bfo_store_cols(b, R, kb, s);
}

BFO_TARGET void bench_columns_qk(const float *q_t, int64_t num_rows, int64_t D, const void *k_cols, int64_t ld,
                                 int bf16, int64_t num_keys, float *s) {
    const int64_t es = bf16 ? 2 : 4;
    for (int64_t k0 = 0; k0 + 32 <= num_keys; k0 += 32) {
        const char *k = (const char *)k_cols + k0 * es;
        float *sk = s + k0 * BFO_QB;
        switch (num_rows) { /* R a constant in each call, so the accumulators stay in registers */
        case 1:
            bfo_cols32(q_t, D, k, ld * es, bf16, sk, 1);
            break;
        case 2:
            bfo_cols32(q_t, D, k, ld * es, bf16, sk, 2);
            break;
        case 3:
            bfo_cols32(q_t, D, k, ld * es, bf16, sk, 3);
            break;
        case 4:
            bfo_cols32(q_t, D, k, ld * es, bf16, sk, 4);
            break;
        default:
            bfo_cols32(q_t, D, k, ld * es, bf16, sk, 8);
            break;
        }
    }
}

int bench_free_order_available(void) { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
#else
void bench_free_order_qk(const float *qp, int64_t num_rows, int64_t D, const void *const *k_rows, int bf16,
                         int64_t num_keys, float *s) {
    (void)qp, (void)num_rows, (void)D, (void)k_rows, (void)bf16, (void)num_keys, (void)s;
}
void bench_free_order_prep(const float *q_t, int64_t num_rows, int64_t D, int bf16, float *qp) {
    (void)q_t, (void)num_rows, (void)D, (void)bf16, (void)qp;
}
void bench_columns_qk(const float *q_t, int64_t num_rows, int64_t D, const void *k_cols, int64_t ld, int bf16,
                      int64_t num_keys, float *s) {
    (void)q_t, (void)num_rows, (void)D, (void)k_cols, (void)ld, (void)bf16, (void)num_keys, (void)s;
}
int bench_free_order_available(void) { return 0; }
#endif
