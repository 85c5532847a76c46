/*
 * tile_kv_avx512.c — qk_tile_kv / pv_rows_kv on AVX-512: K/V rows in their storage dtype (f32, f16, bf16,
 * FP8_E4M3, FP8_E5M2) read in place from the caller's tensor or cache page and widened in registers, so a
 * decode step makes no conversion pass through a workspace (docs/KERNELS.md §5).
 *
 * qk, few rows (decode: one token × the GQA group, or a short speculative block): 16 keys in the lanes, K
 * transposed in registers, the same FMA chain over d ascending from 0 as qk_tile. pv_rows_kv: head
 * dimensions in the lanes of a row-major accumulator, the same chain over k ascending as pv_tile (bf16 V:
 * even/odd column halves of 64-byte loads, the pair-split layout of attn_rows_kv_col).
 * fp8 codes become binary16 (exact for both formats) and then f32 by vcvtph2ps; fp8 K is transposed as 32-bit
 * groups of 4 codes, 64 head dimensions per transpose, regrouped by one byte shuffle and one dword permute.
 * Widening bf16/f16/fp8 to f32 is exact, so every output is bitwise the float kernels' on the converted rows
 * (tests/kernels checks it for every dtype and row count).
 * 16-bit K is transposed as 32-bit pairs (d, d+1), 32 head dimensions per transpose, then split into the
 * even and odd halves: half the shuffles of transposing widened floats. qk on more rows widens rows in
 * chunks of 16 keys on the stack and calls qk_tile (generic/tile_kernels_kv.h).
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__)
#error "tile_kv_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq"
#endif
#include <immintrin.h>

#include "kernels/avx512/transpose_avx512.h"
#include "kernels/generic/tile_kernels_kv.h"
#include "kernels/kernels.h"

#define K512_KV_QK_ROWS 12 /* as qk_tile_avx512's keys-in-lanes threshold */

/* tile_kv_avx512_vbmi.c compiles this file again with AVX512_VBMI (K512_VBMI 1): the entries get the suffix
 * _avx512_vbmi and fp8 codes are widened through byte tables (VPERMI2B), with the same results. */
#if !defined(K512_VBMI)
#define K512_VBMI 0
#endif
#if K512_VBMI
#define K512_KV_ENTRY(name) name##_avx512_vbmi
#else
#define K512_KV_ENTRY(name) name##_avx512
#endif

/* fp8 E4M3 magnitude (7 bits) → the binary16 bits of its value: every E4M3 value (subnormals m·2^-9 included) is
 * a binary16 value; entries 8..126 are (mag << 7) + 0x2000 (rebias 7 → 15), 0..7 the subnormals, 127 (NaN)
 * the quiet NaN 0x7E00, which vcvtph2ps widens to 0x7fc00000 as the scalar widening (attn_fp8_e4m3_to_f32). */
static const uint16_t k512_e4m3_f16[128] __attribute__((aligned(64))) = {
    0x0000, 0x1800, 0x1C00, 0x1E00, 0x2000, 0x2100, 0x2200, 0x2300, 0x2400, 0x2480, 0x2500, 0x2580, 0x2600,
    0x2680, 0x2700, 0x2780, 0x2800, 0x2880, 0x2900, 0x2980, 0x2A00, 0x2A80, 0x2B00, 0x2B80, 0x2C00, 0x2C80,
    0x2D00, 0x2D80, 0x2E00, 0x2E80, 0x2F00, 0x2F80, 0x3000, 0x3080, 0x3100, 0x3180, 0x3200, 0x3280, 0x3300,
    0x3380, 0x3400, 0x3480, 0x3500, 0x3580, 0x3600, 0x3680, 0x3700, 0x3780, 0x3800, 0x3880, 0x3900, 0x3980,
    0x3A00, 0x3A80, 0x3B00, 0x3B80, 0x3C00, 0x3C80, 0x3D00, 0x3D80, 0x3E00, 0x3E80, 0x3F00, 0x3F80, 0x4000,
    0x4080, 0x4100, 0x4180, 0x4200, 0x4280, 0x4300, 0x4380, 0x4400, 0x4480, 0x4500, 0x4580, 0x4600, 0x4680,
    0x4700, 0x4780, 0x4800, 0x4880, 0x4900, 0x4980, 0x4A00, 0x4A80, 0x4B00, 0x4B80, 0x4C00, 0x4C80, 0x4D00,
    0x4D80, 0x4E00, 0x4E80, 0x4F00, 0x4F80, 0x5000, 0x5080, 0x5100, 0x5180, 0x5200, 0x5280, 0x5300, 0x5380,
    0x5400, 0x5480, 0x5500, 0x5580, 0x5600, 0x5680, 0x5700, 0x5780, 0x5800, 0x5880, 0x5900, 0x5980, 0x5A00,
    0x5A80, 0x5B00, 0x5B80, 0x5C00, 0x5C80, 0x5D00, 0x5D80, 0x5E00, 0x5E80, 0x5F00, 0x7E00};

/* The same magnitudes → the bfloat16 bits of their values (every E4M3 value is a bfloat16 value), 127 the quiet
 * NaN 0x7FC0: a bf16 word shifted into the high half of 32 bits is the f32 of the code, bitwise cvt_to_f32's. */
static const uint16_t k512_e4m3_bf16[128] __attribute__((aligned(64))) = {
    0x0000, 0x3B00, 0x3B80, 0x3BC0, 0x3C00, 0x3C20, 0x3C40, 0x3C60, 0x3C80, 0x3C90, 0x3CA0, 0x3CB0, 0x3CC0,
    0x3CD0, 0x3CE0, 0x3CF0, 0x3D00, 0x3D10, 0x3D20, 0x3D30, 0x3D40, 0x3D50, 0x3D60, 0x3D70, 0x3D80, 0x3D90,
    0x3DA0, 0x3DB0, 0x3DC0, 0x3DD0, 0x3DE0, 0x3DF0, 0x3E00, 0x3E10, 0x3E20, 0x3E30, 0x3E40, 0x3E50, 0x3E60,
    0x3E70, 0x3E80, 0x3E90, 0x3EA0, 0x3EB0, 0x3EC0, 0x3ED0, 0x3EE0, 0x3EF0, 0x3F00, 0x3F10, 0x3F20, 0x3F30,
    0x3F40, 0x3F50, 0x3F60, 0x3F70, 0x3F80, 0x3F90, 0x3FA0, 0x3FB0, 0x3FC0, 0x3FD0, 0x3FE0, 0x3FF0, 0x4000,
    0x4010, 0x4020, 0x4030, 0x4040, 0x4050, 0x4060, 0x4070, 0x4080, 0x4090, 0x40A0, 0x40B0, 0x40C0, 0x40D0,
    0x40E0, 0x40F0, 0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170, 0x4180, 0x4190, 0x41A0,
    0x41B0, 0x41C0, 0x41D0, 0x41E0, 0x41F0, 0x4200, 0x4210, 0x4220, 0x4230, 0x4240, 0x4250, 0x4260, 0x4270,
    0x4280, 0x4290, 0x42A0, 0x42B0, 0x42C0, 0x42D0, 0x42E0, 0x42F0, 0x4300, 0x4310, 0x4320, 0x4330, 0x4340,
    0x4350, 0x4360, 0x4370, 0x4380, 0x4390, 0x43A0, 0x43B0, 0x43C0, 0x43D0, 0x43E0, 0x7FC0};

#if K512_VBMI
/* k512_e4m3_bf16 as its high bytes (without the sign) and its low bytes, 128 entries each for VPERMI2B. */
static const uint8_t k512_e4m3_bf16_hi[128] __attribute__((aligned(64))) = {
    0x00, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3D, 0x3D, 0x3D,
    0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E,
    0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F,
    0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
    0x40, 0x40, 0x40, 0x40, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41, 0x41,
    0x41, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x43, 0x43,
    0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x7F};
static const uint8_t k512_e4m3_bf16_lo[128] __attribute__((aligned(64))) = {
    0x00, 0x00, 0x80, 0xC0, 0x00, 0x20, 0x40, 0x60, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10, 0x20,
    0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50,
    0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80,
    0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0,
    0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0,
    0xF0, 0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0, 0x00, 0x10,
    0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xC0};

/* The same for E5M2 magnitudes (every E5M2 value is a bfloat16 value; 0x7C = inf 0x7F80, NaN 0x7FC0). */
static const uint8_t k512_e5m2_bf16_hi[128] __attribute__((aligned(64))) = {
    0x00, 0x37, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x39, 0x3A, 0x3A, 0x3A,
    0x3A, 0x3A, 0x3A, 0x3A, 0x3A, 0x3B, 0x3B, 0x3B, 0x3B, 0x3B, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C,
    0x3C, 0x3C, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3D, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3E, 0x3F,
    0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x41, 0x41, 0x41, 0x41,
    0x41, 0x41, 0x41, 0x41, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43, 0x43,
    0x43, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44, 0x44, 0x45, 0x45, 0x45, 0x45, 0x45, 0x45, 0x45, 0x45, 0x46, 0x46,
    0x46, 0x46, 0x46, 0x46, 0x46, 0x46, 0x47, 0x47, 0x47, 0x47, 0x7F, 0x7F, 0x7F, 0x7F};
static const uint8_t k512_e5m2_bf16_lo[128] __attribute__((aligned(64))) = {
    0x00, 0x80, 0x00, 0x40, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40,
    0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0,
    0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00,
    0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60,
    0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0,
    0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20,
    0x40, 0x60, 0x80, 0xA0, 0xC0, 0xE0, 0x00, 0x20, 0x40, 0x60, 0x80, 0xC0, 0xC0, 0xC0};

/* 64 fp8 codes c → the bfloat16 of each as its low bytes (*lo) and high bytes with the code's sign (*hi). */
static inline __attribute__((always_inline)) void k512_fp8x64_bf16_bytes(__m512i c, __m512i *lo, __m512i *hi,
                                                                         const int DT) {
    const int e5 = DT == ATTN_DTYPE_FP8_E5M2;
    const __m512i *th = (const __m512i *)(const void *)(e5 ? k512_e5m2_bf16_hi : k512_e4m3_bf16_hi);
    const __m512i *tl = (const __m512i *)(const void *)(e5 ? k512_e5m2_bf16_lo : k512_e4m3_bf16_lo);
    *hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(_mm512_load_si512(th), c, _mm512_load_si512(th + 1)), c,
                                    _mm512_set1_epi8((char)0x80), 0xF8); /* table | (c & 0x80) */
    *lo = _mm512_permutex2var_epi8(_mm512_load_si512(tl), c, _mm512_load_si512(tl + 1));
}

/* The byte order that makes k512_fp8x64_load's unpacks give elements in order: byte 16L + 4q + i of the permuted
 * codes is code 16q + 4L + i. */
static const uint8_t k512_fp8x64_order[64] __attribute__((aligned(64))) = {
    0,  1,  2,  3,  16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51, 4,  5,  6,  7,  20, 21,
    22, 23, 36, 37, 38, 39, 52, 53, 54, 55, 8,  9,  10, 11, 24, 25, 26, 27, 40, 41, 42, 43,
    56, 57, 58, 59, 12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63};

/* 64 fp8 codes at p widened to f32, elements 16c .. 16c + 15 in v[c]: permuted once (VPERMB), looked up as
 * bfloat16 bytes, then interleaved into words and into the high halves of 32-bit lanes. */
static inline __attribute__((always_inline)) void k512_fp8x64_load(const uint8_t *p, __m512 v[4], const int DT) {
    const __m512i c = _mm512_permutexvar_epi8(_mm512_load_si512((const void *)k512_fp8x64_order),
                                              _mm512_loadu_si512((const void *)p));
    __m512i lo, hi;
    k512_fp8x64_bf16_bytes(c, &lo, &hi, DT);
    const __m512i wl = _mm512_unpacklo_epi8(lo, hi), wh = _mm512_unpackhi_epi8(lo, hi), z = _mm512_setzero_si512();
    v[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, wl));
    v[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, wl));
    v[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, wh));
    v[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, wh));
}
#endif

static inline __attribute__((always_inline)) int k512_is_fp8(const int DT) {
    return DT == ATTN_DTYPE_FP8_E4M3 || DT == ATTN_DTYPE_FP8_E5M2;
}

/* E4M3 words w (the code in the low byte, its sign in bit 15) → the bits of their values in the format of `table`
 * (k512_e4m3_f16: binary16, k512_e4m3_bf16: bfloat16): the magnitude looked up (two 64-entry word permutes, bit 6
 * selects), the sign ORed in. */
static inline __attribute__((always_inline)) __m512i k512_e4m3_words_lookup(__m512i w, const uint16_t *table) {
    const __m512i *t = (const __m512i *)(const void *)table;
    const __m512i lo = _mm512_permutex2var_epi16(_mm512_load_si512(t), w, _mm512_load_si512(t + 1));
    const __m512i hi = _mm512_permutex2var_epi16(_mm512_load_si512(t + 2), w, _mm512_load_si512(t + 3));
    const __m512i mag = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40)), lo, hi);
    return _mm512_ternarylogic_epi32(mag, w, _mm512_set1_epi16((short)0x8000), 0xF8); /* mag | (w & 0x8000) */
}

/* 32 fp8 codes → the binary16 bits of their values (exact: every E4M3 / E5M2 value is a binary16 value), NaN
 * codes as the quiet NaN sign | 0x7E00, so vcvtph2ps gives the bits of cvt_to_f32 (attn_fp8_to_float) for every
 * code. E5M2 is the high byte of the binary16 of the same value; E4M3 looks its magnitude up in k512_e4m3_f16
 * (two 64-entry word permutes, bit 6 selects) and ORs the sign in. */
static inline __attribute__((always_inline)) __m512i k512_fp8x32_to_f16(__m256i codes, const int DT) {
    const __m512i w = _mm512_cvtepi8_epi16(codes); /* sign-extended: bit 15 = the sign, low byte = the code */
    if (DT == ATTN_DTYPE_FP8_E5M2) {
        const __m512i h = _mm512_slli_epi16(w, 8);
        /* NaN: magnitude > 0x7C, i.e. (code << 9) > 0xF800 as 16 bits (the sign shifted out) */
        const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_slli_epi16(w, 9), _mm512_set1_epi16((short)0xF800));
        const __m512i q = _mm512_ternarylogic_epi32(h, _mm512_set1_epi16((short)0x8000), _mm512_set1_epi16(0x7E00),
                                                    0xEA); /* (h & 0x8000) | 0x7E00 */
        return _mm512_mask_mov_epi16(h, nan, q);
    }
    return k512_e4m3_words_lookup(w, k512_e4m3_f16);
}

/* 16 fp8 codes (the low 16 bytes of c) widened to f32. */
static inline __attribute__((always_inline)) __m512 k512_fp8x16_to_f32(__m128i c, const int DT) {
    return _mm512_cvtph_ps(_mm512_castsi512_si256(k512_fp8x32_to_f16(_mm256_castsi128_si256(c), DT)));
}

/* 64 fp8 codes z → binary16 bits as k512_fp8x32_to_f16, by in-lane byte unpacks: *lo holds bytes 0..7 of each
 * 128-bit lane of z, *hi bytes 8..15 (word j of a lane = byte j of that half). E5M2 NaN codes are first made
 * sign | 0x7E (binary16 sign | 0x7E00); E4M3 words get the sign in bit 15 from the unpack. */
static inline __attribute__((always_inline)) void k512_fp8x64_to_f16(__m512i z, __m512i *lo, __m512i *hi,
                                                                     const int DT) {
    if (DT == ATTN_DTYPE_FP8_E5M2) {
        const __mmask64 nan =
            _mm512_cmpgt_epu8_mask(_mm512_and_si512(z, _mm512_set1_epi8(0x7F)), _mm512_set1_epi8(0x7C));
        z = _mm512_mask_mov_epi8(
            z, nan, _mm512_ternarylogic_epi32(z, _mm512_set1_epi8((char)0x80), _mm512_set1_epi8(0x7E), 0xEA));
        *lo = _mm512_unpacklo_epi8(_mm512_setzero_si512(), z);
        *hi = _mm512_unpackhi_epi8(_mm512_setzero_si512(), z);
        return;
    }
    const __m512i sgn = _mm512_and_si512(z, _mm512_set1_epi8((char)0x80));
    *lo = k512_e4m3_words_lookup(_mm512_unpacklo_epi8(z, sgn), k512_e4m3_f16);
    *hi = k512_e4m3_words_lookup(_mm512_unpackhi_epi8(z, sgn), k512_e4m3_f16);
}

/* 32 fp8 codes at p widened to f32: elements 0..15 in *lo, 16..31 in *hi (P·V: one vpmovzxbw per 32 codes
 * measured faster than the in-lane unpacks of k512_fp8x64_to_f16 and a qword permute for E4M3, equal for E5M2). */
static inline __attribute__((always_inline)) void k512_fp8x32_load(const uint8_t *p, __m512 *lo, __m512 *hi,
                                                                   const int DT) {
    const __m512i h = k512_fp8x32_to_f16(_mm256_loadu_si256((const __m256i *)(const void *)p), DT);
    *lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
    *hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/* 16 consecutive elements of a row from element d0 (masked by m), widened to f32. DT: attn_dtype. */
static inline __attribute__((always_inline)) __m512 k512_kv_load(const void *row, int64_t d0, __mmask16 m,
                                                                 const int DT) {
    if (DT == ATTN_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)row + d0);
    if (k512_is_fp8(DT))
        return k512_fp8x16_to_f32(_mm_maskz_loadu_epi8(m, (const uint8_t *)row + d0), DT);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + d0);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Unmasked 16 elements. */
static inline __attribute__((always_inline)) __m512 k512_kv_load16(const void *row, int64_t d0, const int DT) {
    if (DT == ATTN_DTYPE_F32)
        return _mm512_loadu_ps((const float *)row + d0);
    if (k512_is_fp8(DT))
        return k512_fp8x16_to_f32(_mm_loadu_si128((const __m128i *)(const void *)((const uint8_t *)row + d0)), DT);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d0));
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

/* Even / odd element of each 32-bit pair of 16-bit values, widened to f32. */
static inline __attribute__((always_inline)) __m512 k512_pair_lo(__m512 x, const int DT) {
    const __m512i u = _mm512_castps_si512(x);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u));
}
static inline __attribute__((always_inline)) __m512 k512_pair_hi(__m512 x, const int DT) {
    const __m512i u = _mm512_castps_si512(x);
    if (DT == ATTN_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
}

/* 1 where k512_fp8_column widens DT: both formats through the byte tables of the vbmi variant, E4M3 through
 * bfloat16 words otherwise (E5M2 without VBMI goes through binary16 in k512_qk_kv_keys16). */
static inline __attribute__((always_inline)) int k512_fp8_columns(const int DT) {
    return K512_VBMI ? k512_is_fp8(DT) : DT == ATTN_DTYPE_FP8_E4M3;
}

/* One transposed column of fp8 K, dword b = codes i = 0..3 of key b, widened to f32: k4[i] lane b = code i of key
 * b. The codes' bfloat16 words come in pairs per 32-bit lane (codes 0, 1 and 2, 3), widened by a shift and a mask. */
static inline __attribute__((always_inline)) void k512_fp8_column(__m512 x, __m512 k4[4], const int DT) {
#if K512_VBMI /* codes 0, 1 of each key in bytes 0..7 of a lane, codes 2, 3 in bytes 8..15 */
    const __m512i spair = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    __m512i lo, hi;
    k512_fp8x64_bf16_bytes(_mm512_shuffle_epi8(_mm512_castps_si512(x), spair), &lo, &hi, DT);
    const __m512i w01 = _mm512_unpacklo_epi8(lo, hi), w23 = _mm512_unpackhi_epi8(lo, hi);
#else
    /* E4M3: words (c0, c0), (c1, c1) and (c2, c2), (c3, c3) per key looked up as bfloat16 (the code in the low byte,
     * its sign in bit 15) */
    (void)DT;
    const __m512i s01 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13));
    const __m512i s23 = _mm512_add_epi8(s01, _mm512_set1_epi8(2));
    const __m512i w01 = k512_e4m3_words_lookup(_mm512_shuffle_epi8(_mm512_castps_si512(x), s01), k512_e4m3_bf16);
    const __m512i w23 = k512_e4m3_words_lookup(_mm512_shuffle_epi8(_mm512_castps_si512(x), s23), k512_e4m3_bf16);
#endif
    const __m512i hi16 = _mm512_set1_epi32((int)0xFFFF0000u);
    k4[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w01, 16));
    k4[1] = _mm512_castsi512_ps(_mm512_and_si512(w01, hi16));
    k4[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w23, 16));
    k4[3] = _mm512_castsi512_ps(_mm512_and_si512(w23, hi16));
}

/* s[b][0..15] = (acc[0][b], ..., acc[R−1][b], 0, ...) for keys b < nk, R <= 4: a 4×16 transpose in 128-bit lanes
 * (lane L of u[i] = s[4L + i][0..3]), a quarter of the shuffles of k512_transpose16. */
static inline __attribute__((always_inline)) void k512_qk_store4(const __m512 *acc, int nk, float *restrict s,
                                                                 const int R) {
    const __m512 z = _mm512_setzero_ps();
    const __m512 a[4] = {acc[0], R > 1 ? acc[1] : z, R > 2 ? acc[2] : z, R > 3 ? acc[3] : z};
    __m512 u[4];
    k512_transpose4_lanes(a, u);
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
        if (i < nk)
            _mm512_storeu_ps(s + i * ATTN_QB, _mm512_maskz_mov_ps(0x000F, u[i]));
        if (4 + i < nk)
            _mm512_storeu_ps(s + (4 + i) * ATTN_QB, _mm512_maskz_shuffle_f32x4(0x000F, u[i], u[i], 1));
        if (8 + i < nk)
            _mm512_storeu_ps(s + (8 + i) * ATTN_QB, _mm512_maskz_shuffle_f32x4(0x000F, u[i], u[i], 2));
        if (12 + i < nk)
            _mm512_storeu_ps(s + (12 + i) * ATTN_QB, _mm512_maskz_shuffle_f32x4(0x000F, u[i], u[i], 3));
    }
}

/* Eight 32-bit elements from byte byte0 (f32, or 16-bit pairs) of rows b and b + 8 of k_rows (zero past nk) in one
 * vector: lanes 0..7 row b, lanes 8..15 row b + 8. */
static inline __attribute__((always_inline)) __m512 k512_rows8_pair(const void *const *k_rows, int b, int nk,
                                                                    int64_t byte0) {
    const __m256 lo =
        b < nk ? _mm256_loadu_ps((const float *)(const void *)((const char *)k_rows[b] + byte0)) : _mm256_setzero_ps();
    const __m256 hi = b + 8 < nk ? _mm256_loadu_ps((const float *)(const void *)((const char *)k_rows[b + 8] + byte0))
                                 : _mm256_setzero_ps();
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

/* R <= 4 rows, f32 or 16-bit K (head_size a multiple of 16) or fp8 K that k512_fp8_column widens (a multiple of 32),
 * keys [0, nk) with 16 < nk <= 32: two groups of 16 keys
 * (A: keys 0..15, B: 16..31) whose FMA chains are interleaved, so that 2R accumulator chains are in flight instead
 * of R (at four rows or fewer one group's chains leave the FMA pipes idle for most of their latency). Rows are read
 * 32 bytes at a time, 16 per group, to keep both groups' transposed K in registers. Every score is the same single
 * chain over d ascending as k512_qk_kv_keys16, so the bits are the same. */
static inline __attribute__((always_inline)) void k512_qk_kv_keys32(const float *restrict q_t, int64_t head_size,
                                                                    const void *const *k_rows, int nk,
                                                                    float *restrict s, const int R, const int DT,
                                                                    attn_kv_prefetch *pf, int64_t pfn) {
    __m512 acc_a[4], acc_b[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) acc_a[r] = acc_b[r] = _mm512_setzero_ps();
    const int64_t es = DT == ATTN_DTYPE_F32 ? 4 : k512_is_fp8(DT) ? 1 : 2, step = 32 / es; /* dims per 32 bytes */
    for (int64_t d0 = 0; d0 < head_size; d0 += step) {
        __m512 xa[8], xb[8];
        _Pragma("GCC unroll 8") for (int b = 0; b < 8; b++) {
            xa[b] = k512_rows8_pair(k_rows, b, 16, d0 * es);
            xb[b] = k512_rows8_pair(k_rows + 16, b, nk - 16, d0 * es);
        }
        k512_transpose8x2(xa);
        k512_transpose8x2(xb);
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            attn_kv_prefetch_step(pf, 2 * pfn);
            if (k512_is_fp8(DT)) { /* dword j of a key = codes d0 + 4j .. d0 + 4j + 3 */
                __m512 ka[4], kb[4];
                k512_fp8_column(xa[j], ka, DT);
                k512_fp8_column(xb[j], kb, DT);
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                    const float *q = q_t + (d0 + 4 * j + i) * ATTN_QB;
                    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                        const __m512 qr = _mm512_set1_ps(q[r]);
                        acc_a[r] = _mm512_fmadd_ps(ka[i], qr, acc_a[r]);
                        acc_b[r] = _mm512_fmadd_ps(kb[i], qr, acc_b[r]);
                    }
                }
            } else if (DT == ATTN_DTYPE_F32) {
                const float *q = q_t + (d0 + j) * ATTN_QB;
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    const __m512 qr = _mm512_set1_ps(q[r]);
                    acc_a[r] = _mm512_fmadd_ps(xa[j], qr, acc_a[r]);
                    acc_b[r] = _mm512_fmadd_ps(xb[j], qr, acc_b[r]);
                }
            } else {
                const __m512 lo_a = k512_pair_lo(xa[j], DT), hi_a = k512_pair_hi(xa[j], DT);
                const __m512 lo_b = k512_pair_lo(xb[j], DT), hi_b = k512_pair_hi(xb[j], DT);
                const float *q0 = q_t + (d0 + 2 * j) * ATTN_QB, *q1 = q0 + ATTN_QB;
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    const __m512 q0r = _mm512_set1_ps(q0[r]);
                    acc_a[r] = _mm512_fmadd_ps(lo_a, q0r, acc_a[r]);
                    acc_b[r] = _mm512_fmadd_ps(lo_b, q0r, acc_b[r]);
                }
                _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {
                    const __m512 q1r = _mm512_set1_ps(q1[r]);
                    acc_a[r] = _mm512_fmadd_ps(hi_a, q1r, acc_a[r]);
                    acc_b[r] = _mm512_fmadd_ps(hi_b, q1r, acc_b[r]);
                }
            }
        }
    }
    k512_qk_store4(acc_a, 16, s, R);
    k512_qk_store4(acc_b, nk - 16, s + 16 * ATTN_QB, R);
}

/* 1 where k512_qk_kv_keys32 serves R rows of DT keys from k_rows: rows whose distance is a multiple of 4 KiB
 * (2 KiB for f32) put the 32 rows' half-line loads into one or two L1 sets, and there the two groups ran slower
 * than one (Zen 5, 64 keys in L1: f32 rows 4 KiB apart 9.0 → 17 ns per key at 4 rows × 128, bf16 rows 4 KiB apart
 * 8.5 → 13 ns; rows 384 B or 2 KiB (bf16) apart 1.4× and 1.1× faster). */
static inline __attribute__((always_inline)) int k512_qk_two_groups(const void *const *k_rows, int64_t head_size,
                                                                    int64_t num_keys, const int R, const int DT) {
    if (R > 4 || num_keys <= 16 || head_size % (k512_is_fp8(DT) ? 32 : 16) != 0)
        return 0;
    if (DT != ATTN_DTYPE_F32 && DT != ATTN_DTYPE_BF16 && DT != ATTN_DTYPE_F16 && !k512_fp8_columns(DT))
        return 0;
    const uintptr_t dist = (uintptr_t)k_rows[1] - (uintptr_t)k_rows[0];
    return (dist & (DT == ATTN_DTYPE_F32 ? 2047u : 4095u)) != 0;
}

/* ---------------------------------------------------------------------------------------------
 * Q·Kᵀ: s[k][r] for 16 keys (nk valid) × R rows, keys in lanes; lanes r ≥ R of written s rows are 0.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k512_qk_kv_keys16(const float *restrict q_t, int64_t head_size,
                                                                    const void *const *k_rows, int nk,
                                                                    float *restrict s, const int R, const int DT,
                                                                    attn_kv_prefetch *pf, int64_t pfn) {
    __m512 acc[K512_KV_QK_ROWS];
    __m512 x[16];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int64_t d0 = 0;
    if (k512_is_fp8(DT)) { /* 64 head dimensions per transpose: dword j of a row = codes d0+4j .. d0+4j+3 */
        /* per 128-bit lane (4 keys): byte 4i + key ← byte 4·key + i (dword 4L + i = code i of keys 4L..4L+3), then
         * dwords 0,4,1,5 | 8,12,9,13 | 2,6,3,7 | 10,14,11,15, so that the low unpack half holds codes 0 and 2 of
         * keys 0..15 and the high half codes 1 and 3 */
        const __m512i bsel =
            _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
        const __m512i dsel = _mm512_setr_epi32(0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15);
        for (; d0 + 64 <= head_size; d0 += 64) {
            _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
                b < nk ? _mm512_loadu_ps((const float *)(const void *)((const uint8_t *)k_rows[b] + d0))
                       : _mm512_setzero_ps();
            k512_transpose16(x);
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                attn_kv_prefetch_step(pf, pfn);
                __m512 k4[4];
                if (k512_fp8_columns(DT)) {
                    k512_fp8_column(x[j], k4, DT);
                } else { /* E5M2 without VBMI: through binary16 */
                    __m512i lo, hi;
                    k512_fp8x64_to_f16(
                        _mm512_permutexvar_epi32(dsel, _mm512_shuffle_epi8(_mm512_castps_si512(x[j]), bsel)), &lo, &hi,
                        DT);
                    k4[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(lo));
                    k4[1] = _mm512_cvtph_ps(_mm512_castsi512_si256(hi));
                    k4[2] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(lo, 1));
                    k4[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(hi, 1));
                }
                _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) {
                    const float *q = q_t + (d0 + 4 * j + i) * ATTN_QB;
                    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] =
                        _mm512_fmadd_ps(k4[i], _mm512_set1_ps(q[r]), acc[r]);
                }
            }
        }
    }
    /* 16-bit K: 32 head dimensions per transpose, dword j of a row = (d0+2j, d0+2j+1) */
    if (DT == ATTN_DTYPE_BF16 || DT == ATTN_DTYPE_F16) {
        for (; d0 + 32 <= head_size; d0 += 32) {
            _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
                b < nk ? _mm512_loadu_ps((const float *)(const void *)((const uint16_t *)k_rows[b] + d0))
                       : _mm512_setzero_ps();
            k512_transpose16(x);
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                attn_kv_prefetch_step(pf, pfn);
                const __m512 lo = k512_pair_lo(x[j], DT), hi = k512_pair_hi(x[j], DT);
                const float *q0 = q_t + (d0 + 2 * j) * ATTN_QB, *q1 = q0 + ATTN_QB;
                _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {
                    acc[r] = _mm512_fmadd_ps(lo, _mm512_set1_ps(q0[r]), acc[r]);
                    acc[r] = _mm512_fmadd_ps(hi, _mm512_set1_ps(q1[r]), acc[r]);
                }
            }
        }
    }
    for (; d0 + 16 <= head_size; d0 += 16) {
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
            b < nk ? k512_kv_load16(k_rows[b], d0, DT) : _mm512_setzero_ps();
        k512_transpose16(x); /* x[j] lane b = K[b][d0 + j] */
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
            attn_kv_prefetch_step(pf, pfn);
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] =
                _mm512_fmadd_ps(x[j], _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    if (d0 < head_size) {
        const int nd = (int)(head_size - d0);
        const __mmask16 dm = (__mmask16)((1u << nd) - 1u);
        float kt[16][16];
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) x[b] =
            b < nk ? k512_kv_load(k_rows[b], d0, dm, DT) : _mm512_setzero_ps();
        k512_transpose16(x);
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) _mm512_storeu_ps(kt[j], x[j]);
        for (int j = 0; j < nd; j++) {
            const __m512 kj = _mm512_loadu_ps(kt[j]);
            const float *q = q_t + (d0 + j) * ATTN_QB;
            _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) acc[r] =
                _mm512_fmadd_ps(kj, _mm512_set1_ps(q[r]), acc[r]);
        }
    }
    if (R <= 4) {
        k512_qk_store4(acc, nk, s, R);
        return;
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R ? acc[r] : _mm512_setzero_ps();
    k512_transpose16(x); /* x[b] lane r = s[b][r] */
    _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) if (b < nk) _mm512_storeu_ps(s + b * ATTN_QB, x[b]);
}

static inline __attribute__((always_inline)) void k512_qk_kv_few(const float *q_t, int64_t head_size,
                                                                 const void *const *k_rows, int64_t num_keys, float *s,
                                                                 const int R, const int DT, attn_kv_prefetch *pf) {
    /* one tick per transposed column j: head_size / (head dimensions per column) per 16 keys */
    const int64_t per = DT == ATTN_DTYPE_F32 ? 1 : k512_is_fp8(DT) ? 4 : 2;
    const int64_t pfn = attn_kv_prefetch_rate(pf, (num_keys + 15) / 16 * ((head_size + per - 1) / per));
    int64_t k = 0;
    if (k512_qk_two_groups(k_rows, head_size, num_keys, R, DT))
        for (; k + 16 < num_keys; k += 32)
            k512_qk_kv_keys32(q_t, head_size, k_rows + k, num_keys - k < 32 ? (int)(num_keys - k) : 32, s + k * ATTN_QB,
                              R, DT, pf, pfn);
    for (; k + 16 <= num_keys; k += 16)
        k512_qk_kv_keys16(q_t, head_size, k_rows + k, 16, s + k * ATTN_QB, R, DT, pf, pfn);
    if (k < num_keys)
        k512_qk_kv_keys16(q_t, head_size, k_rows + k, (int)(num_keys - k), s + k * ATTN_QB, R, DT, pf, pfn);
}

#define K512_QK_KV_CASE(n)                                                                                             \
    case n:                                                                                                            \
        if (kv_dtype == ATTN_DTYPE_F32)                                                                                \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F32, pf);                                \
        else if (kv_dtype == ATTN_DTYPE_BF16)                                                                          \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_BF16, pf);                               \
        else if (kv_dtype == ATTN_DTYPE_FP8_E4M3)                                                                      \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_FP8_E4M3, pf);                           \
        else if (kv_dtype == ATTN_DTYPE_FP8_E5M2)                                                                      \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_FP8_E5M2, pf);                           \
        else                                                                                                           \
            k512_qk_kv_few(q_t, head_size, k_rows, num_keys, s, n, ATTN_DTYPE_F16, pf);                                \
        *pf_io = st;                                                                                                   \
        return;

void K512_KV_ENTRY(attn_k_qk_tile_kv_pf)(const float *q_t, int64_t num_rows, int64_t head_size,
                                         const void *const *k_rows, attn_dtype kv_dtype, int64_t num_keys, float *s,
                                         attn_kv_prefetch *pf_io) {
    /* a local copy the compiler keeps in registers: through *pf_io, every step stored and reloaded the state (the
     * stores may alias the row pointers), ~10 % of a hot bf16 decode */
    attn_kv_prefetch st = *pf_io, *pf = &st;
    switch (num_rows) {
        K512_QK_KV_CASE(1)
        K512_QK_KV_CASE(2)
        K512_QK_KV_CASE(3)
        K512_QK_KV_CASE(4)
        K512_QK_KV_CASE(5)
        K512_QK_KV_CASE(6)
        K512_QK_KV_CASE(7)
        K512_QK_KV_CASE(8)
        K512_QK_KV_CASE(9)
        K512_QK_KV_CASE(10)
        K512_QK_KV_CASE(11)
        K512_QK_KV_CASE(12)
    default:
        break;
    }
    k_qk_tile_kv_chunked(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, attn_k_qk_tile_avx512,
                         attn_k_cvt_to_f32_avx512);
}

void K512_KV_ENTRY(attn_k_qk_tile_kv)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *k_rows,
                                      attn_dtype kv_dtype, int64_t num_keys, float *s) {
    attn_kv_prefetch none = {0};
    K512_KV_ENTRY(attn_k_qk_tile_kv_pf)(q_t, num_rows, head_size, k_rows, kv_dtype, num_keys, s, &none);
}

#if !K512_VBMI /* the column kernel uses no VBMI instruction: one copy, in both tables */
/* ---------------------------------------------------------------------------------------------
 * Q·Kᵀ on K stored by dimension (kernels.h, qk_cols_kv): dimension d of key b at k0 + d·ds + b·(element size).
 * Each score is the chain of k512_qk_kv_keys16 (fma(k, q[r], acc) over d ascending from 0), so the bits are
 * the row kernels'; a column of 16 keys is one load (widened: bf16 by a shift, f16 by vcvtph2ps), no transpose.
 * --------------------------------------------------------------------------------------------- */
/* the fp8 codes of keys [0, nk) of a column (nk <= 16; zero past nk, which is not read) */
static inline __attribute__((always_inline)) __m128i k512_col_codes(const char *col, int nk) {
    return nk >= 16 ? _mm_loadu_si128((const __m128i *)(const void *)col)
                    : _mm_maskz_loadu_epi8((__mmask16)((1u << nk) - 1u), col);
}

/* dimension d's values of keys [0, nk) of a column (nk <= 16; zero past nk, which is not read): the row loads of
 * k512_kv_load16 / k512_kv_load, a column of keys being contiguous as a row's elements are */
static inline __attribute__((always_inline)) __m512 k512_col16(const char *col, int nk, const int DT) {
    return nk >= 16 ? k512_kv_load16(col, 0, DT) : k512_kv_load(col, 0, (__mmask16)((1u << nk) - 1u), DT);
}

/* s0[b][r] for the nk0 keys of run k0 and, with G = 2, s1[b][r] for the nk1 keys of run k1 (2R chains in flight) */
static inline __attribute__((always_inline)) void k512_qk_cols_keys(const float *restrict q_t, int64_t head_size,
                                                                    const char *k0, int nk0, float *restrict s0,
                                                                    const char *k1, int nk1, float *restrict s1,
                                                                    int64_t ds, int rows, const int R, const int DT,
                                                                    const int G) {
    __m512 a0[K512_KV_QK_ROWS], a1[K512_KV_QK_ROWS];
    _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) a0[r] = a1[r] = _mm512_setzero_ps();
    for (int64_t d = 0; d < head_size; d++) {
        __m512 x0, x1 = _mm512_setzero_ps();
        if (k512_is_fp8(DT) && G == 2) { /* both runs' 32 codes widened by one lookup */
            const __m512i h =
                k512_fp8x32_to_f16(_mm256_inserti128_si256(_mm256_castsi128_si256(k512_col_codes(k0 + d * ds, nk0)),
                                                           k512_col_codes(k1 + d * ds, nk1), 1),
                                   DT);
            x0 = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
            x1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
        } else {
            x0 = k512_col16(k0 + d * ds, nk0, DT);
            if (G == 2)
                x1 = k512_col16(k1 + d * ds, nk1, DT);
        }
        const float *q = q_t + d * ATTN_QB;
        _Pragma("GCC unroll 12") for (int r = 0; r < R; r++) {
            const __m512 qr = _mm512_set1_ps(q[r]);
            a0[r] = _mm512_fmadd_ps(x0, qr, a0[r]);
            if (G == 2)
                a1[r] = _mm512_fmadd_ps(x1, qr, a1[r]);
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 *acc = g == 0 ? a0 : a1;
        const int n = g == 0 ? nk0 : nk1;
        float *sg = g == 0 ? s0 : s1;
        if (R <= 4) {
            k512_qk_store4(acc, n, sg, R);
            continue;
        }
        __m512 x[16]; /* rows >= `rows` (computed on whatever q_t held there) written as 0 */
        _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) x[r] = r < R && r < rows ? acc[r] : _mm512_setzero_ps();
        k512_transpose16(x); /* x[b] lane r = s[b][r] */
        _Pragma("GCC unroll 16") for (int b = 0; b < 16; b++) if (b < n) _mm512_storeu_ps(sg + b * ATTN_QB, x[b]);
    }
}

static inline __attribute__((always_inline)) void k512_qk_cols(const float *q_t, int64_t head_size,
                                                               const void *const *runs, const int32_t *run_keys,
                                                               int64_t num_runs, int64_t ds, float *s, int rows,
                                                               const int R, const int DT) {
    int64_t i = 0;
    if (R <= 8) /* two runs at a time: 2R accumulators and two columns fit the 32 registers */
        for (; i + 1 < num_runs; i += 2) {
            k512_qk_cols_keys(q_t, head_size, (const char *)runs[i], run_keys[i], s, (const char *)runs[i + 1],
                              run_keys[i + 1], s + run_keys[i] * ATTN_QB, ds, rows, R, DT, 2);
            s += (run_keys[i] + run_keys[i + 1]) * ATTN_QB;
        }
    for (; i < num_runs; i++) {
        k512_qk_cols_keys(q_t, head_size, (const char *)runs[i], run_keys[i], s, NULL, 0, NULL, ds, rows, R, DT, 1);
        s += run_keys[i] * ATTN_QB;
    }
}

#define K512_QK_COLS_CASE(n)                                                                                           \
    case n:                                                                                                            \
        if (kv_dtype == ATTN_DTYPE_F32)                                                                                \
            k512_qk_cols(q_t, head_size, runs, run_keys, num_runs, dim_stride, s, (int)num_rows, n, ATTN_DTYPE_F32);   \
        else if (kv_dtype == ATTN_DTYPE_BF16)                                                                          \
            k512_qk_cols(q_t, head_size, runs, run_keys, num_runs, dim_stride, s, (int)num_rows, n, ATTN_DTYPE_BF16);  \
        else if (kv_dtype == ATTN_DTYPE_FP8_E4M3)                                                                      \
            k512_qk_cols(q_t, head_size, runs, run_keys, num_runs, dim_stride, s, (int)num_rows, n,                    \
                         ATTN_DTYPE_FP8_E4M3);                                                                         \
        else if (kv_dtype == ATTN_DTYPE_FP8_E5M2)                                                                      \
            k512_qk_cols(q_t, head_size, runs, run_keys, num_runs, dim_stride, s, (int)num_rows, n,                    \
                         ATTN_DTYPE_FP8_E5M2);                                                                         \
        else                                                                                                           \
            k512_qk_cols(q_t, head_size, runs, run_keys, num_runs, dim_stride, s, (int)num_rows, n, ATTN_DTYPE_F16);   \
        return 1;

int K512_KV_ENTRY(attn_k_qk_cols_kv)(const float *q_t, int64_t num_rows, int64_t head_size, const void *const *runs,
                                     const int32_t *run_keys, int64_t num_runs, int64_t dim_stride, attn_dtype kv_dtype,
                                     float *s) {
    if (kv_dtype != ATTN_DTYPE_F32 && kv_dtype != ATTN_DTYPE_BF16 && kv_dtype != ATTN_DTYPE_F16 &&
        !attn_dtype_is_fp8(kv_dtype))
        return 0;
    /* rows 5..8 run as 8 and 9..12 as 12 (fewer copies of the kernel; each row's chain is its own, so the extra
     * rows change no bit of the others) */
    switch (num_rows) {
        K512_QK_COLS_CASE(1)
        K512_QK_COLS_CASE(2)
        K512_QK_COLS_CASE(3)
        K512_QK_COLS_CASE(4)
    case 5:
    case 6:
    case 7:
        K512_QK_COLS_CASE(8)
    case 9:
    case 10:
    case 11:
        K512_QK_COLS_CASE(12)
    default:
        return 0;
    }
}
#endif

/* ---------------------------------------------------------------------------------------------
 * P·V into the row-major accumulator o_d[num_rows][head_size_v]: groups of RB rows × NC chunks of 16 head
 * dimensions held in registers over all keys (keys outer: each V row is read front to back, NC·64 B at a
 * time), so there is nothing to transpose. o_d[r][d] = fma(v[k][d], p[k][r], o_d[r][d]), k ascending.
 * --------------------------------------------------------------------------------------------- */
static inline __attribute__((always_inline)) void k512_pv_rows_pass(const float *restrict p, int64_t num_keys,
                                                                    const void *const *v_rows, int64_t r0, int64_t d0,
                                                                    int64_t head_size_v, float *restrict o_d,
                                                                    const int RB, const int NC, const int DT,
                                                                    attn_kv_prefetch *pf, int64_t pfn) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
        acc[r][c] = _mm512_loadu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c);
    for (int64_t k = 0; k < num_keys; k++) {
        __m512 v[8];
        attn_kv_prefetch_step(pf, pfn);
#if K512_VBMI
        if (k512_is_fp8(DT) && NC % 4 == 0) { /* 64 codes per widening */
            _Pragma("GCC unroll 2") for (int c = 0; c < NC; c += 4)
                k512_fp8x64_load((const uint8_t *)v_rows[k] + d0 + 16 * c, &v[c], DT);
        } else
#endif
            if (k512_is_fp8(DT) && NC % 2 == 0) { /* 32 codes per widening */
            _Pragma("GCC unroll 4") for (int c = 0; c < NC; c += 2)
                k512_fp8x32_load((const uint8_t *)v_rows[k] + d0 + 16 * c, &v[c], &v[c + 1], DT);
        } else {
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) v[c] = k512_kv_load16(v_rows[k], d0 + 16 * c, DT);
        }
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512 pr = _mm512_set1_ps(pk[r]);
            _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(v[c], pr, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < NC; c++)
        _mm512_storeu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c, acc[r][c]);
}

/* The last head_size_v % 16 columns of rows [r0, r0 + RB), masked. */
static inline __attribute__((always_inline)) void k512_pv_rows_tail(const float *restrict p, int64_t num_keys,
                                                                    const void *const *v_rows, int64_t r0, int64_t d0,
                                                                    int64_t head_size_v, float *restrict o_d,
                                                                    const int RB, const int DT) {
    const __mmask16 dm = (__mmask16)((1u << (head_size_v - d0)) - 1u);
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] =
        _mm512_maskz_loadu_ps(dm, o_d + (r0 + r) * head_size_v + d0);
    for (int64_t k = 0; k < num_keys; k++) {
        const __m512 v = k512_kv_load(v_rows[k], d0, dm, DT);
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) acc[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(pk[r]), acc[r]);
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++)
        _mm512_mask_storeu_ps(o_d + (r0 + r) * head_size_v + d0, dm, acc[r]);
}

/* bf16 V, NB full 32-column blocks from d0 in the pair-split layout (attn_rows_kv_col): one 64-byte load per
 * block and key, even columns = low halves << 16, odd columns = high halves masked. */
static inline __attribute__((always_inline)) void
k512_pv_rows_pass_pairs(const float *restrict p, int64_t num_keys, const void *const *v_rows, int64_t r0, int64_t d0,
                        int64_t head_size_v, float *restrict o_d, const int RB, const int NB, attn_kv_prefetch *pf,
                        int64_t pfn) {
    __m512 acc[4][8];
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        acc[r][c] = _mm512_loadu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c);
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
    for (int64_t k = 0; k < num_keys; k++) {
        __m512 v[8];
        attn_kv_prefetch_step(pf, pfn);
        _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++) {
            const __m512i u = _mm512_loadu_si512((const void *)((const uint16_t *)v_rows[k] + d0 + 32 * b));
            v[2 * b] = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
            v[2 * b + 1] = _mm512_castsi512_ps(_mm512_and_si512(u, hi_mask));
        }
        const float *pk = p + k * ATTN_QB + r0;
        _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) {
            const __m512 pr = _mm512_set1_ps(pk[r]);
            _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++) acc[r][c] = _mm512_fmadd_ps(v[c], pr, acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < RB; r++) _Pragma("GCC unroll 8") for (int c = 0; c < 2 * NB; c++)
        _mm512_storeu_ps(o_d + (r0 + r) * head_size_v + d0 + 16 * c, acc[r][c]);
}

/* Rows [r0, r0 + RB): 8 chunks per pass for 1–2 rows, 4 for 3–4 (≤ 16 accumulators), then 1-chunk passes;
 * bf16 V in 32-column pair blocks over the full blocks first. */
static inline __attribute__((always_inline)) void k512_pv_rows_group(const float *p, int64_t num_keys,
                                                                     const void *const *v_rows, int64_t r0,
                                                                     int64_t head_size_v, float *o_d, const int RB,
                                                                     const int DT, attn_kv_prefetch *pf, int64_t pfn) {
    const int NC = RB <= 2 ? 8 : 4;
    int64_t d0 = 0;
    if (DT == ATTN_DTYPE_BF16) {
        const int64_t full = head_size_v & ~(int64_t)31;
        for (; d0 + 16 * NC <= full; d0 += 16 * NC)
            k512_pv_rows_pass_pairs(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, NC / 2, pf, pfn);
        for (; d0 < full; d0 += 32)
            k512_pv_rows_pass_pairs(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, 1, pf, pfn);
    }
    for (; d0 + 16 * NC <= head_size_v; d0 += 16 * NC)
        k512_pv_rows_pass(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, NC, DT, pf, pfn);
    for (; d0 + 16 <= head_size_v; d0 += 16)
        k512_pv_rows_pass(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, 1, DT, pf, pfn);
    if (d0 < head_size_v)
        k512_pv_rows_tail(p, num_keys, v_rows, r0, d0, head_size_v, o_d, RB, DT);
}

static inline __attribute__((always_inline)) void k512_pv_rows_dt(const float *p, int64_t num_keys, int64_t num_rows,
                                                                  const void *const *v_rows, int64_t head_size_v,
                                                                  float *o_d, const int DT, attn_kv_prefetch *pf) {
    /* one tick per key of each pass: passes of 64 head dimensions (128 for one or two rows) per group of four rows */
    const int64_t cols = num_rows <= 2 ? 128 : 64;
    const int64_t pfn = attn_kv_prefetch_rate(pf, num_keys * ((num_rows + 3) / 4) * ((head_size_v + cols - 1) / cols));
    int64_t r0 = 0;
    for (; r0 + 4 <= num_rows; r0 += 4)
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 4, DT, pf, pfn);
    switch (num_rows - r0) {
    case 3:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 3, DT, pf, pfn);
        break;
    case 2:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 2, DT, pf, pfn);
        break;
    case 1:
        k512_pv_rows_group(p, num_keys, v_rows, r0, head_size_v, o_d, 1, DT, pf, pfn);
        break;
    default:
        break;
    }
}

void K512_KV_ENTRY(attn_k_pv_rows_kv_pf)(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                         attn_dtype kv_dtype, int64_t head_size_v, float *o_d,
                                         attn_kv_prefetch *pf_io) {
    attn_kv_prefetch st = *pf_io, *pf = &st; /* in registers, as in the Q·Kᵀ entry */
    if (kv_dtype == ATTN_DTYPE_F32)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F32, pf);
    else if (kv_dtype == ATTN_DTYPE_BF16)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_BF16, pf);
    else if (kv_dtype == ATTN_DTYPE_FP8_E4M3)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_FP8_E4M3, pf);
    else if (kv_dtype == ATTN_DTYPE_FP8_E5M2)
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_FP8_E5M2, pf);
    else
        k512_pv_rows_dt(p, num_keys, num_rows, v_rows, head_size_v, o_d, ATTN_DTYPE_F16, pf);
    *pf_io = st;
}

void K512_KV_ENTRY(attn_k_pv_rows_kv)(const float *p, int64_t num_keys, int64_t num_rows, const void *const *v_rows,
                                      attn_dtype kv_dtype, int64_t head_size_v, float *o_d) {
    attn_kv_prefetch none = {0};
    K512_KV_ENTRY(attn_k_pv_rows_kv_pf)(p, num_keys, num_rows, v_rows, kv_dtype, head_size_v, o_d, &none);
}
