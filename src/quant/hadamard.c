/*
 * hadamard.c — the deterministic rotation R = diag(s)·H_d/sqrt(d) applied to Q and K before quantization
 * (docs/DIFFUSION.md §5; vllm-omni get_quant_attention_rotation, FlashAttention-3 "incoherent processing").
 * The sign vector comes from a plain MT19937 (Matsumoto & Nishimura 1998, init_genrand), which reproduces
 * torch.Generator("cpu").manual_seed(seed) + randint(0, 2, (d,)) bit for bit. No allocation.
 */
#include <math.h>
#include <stddef.h>

#include "attn/attn_experimental.h"
#include "core/error.h"
#include "quant/quant.h"

/* ---------------------------------------------------------------------------------------------
 * MT19937, the reference init_genrand / genrand_int32
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_mt19937 {
    uint32_t mt[624];
    int32_t idx;
} attn_mt19937;

static void attn_mt_seed(attn_mt19937 *g, uint32_t seed) {
    g->mt[0] = seed;
    for (int32_t i = 1; i < 624; i++)
        g->mt[i] = 1812433253u * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i;
    g->idx = 624;
}

static uint32_t attn_mt_next(attn_mt19937 *g) {
    if (g->idx >= 624) {
        for (int32_t i = 0; i < 624; i++) {
            const uint32_t y = (g->mt[i] & 0x80000000u) | (g->mt[(i + 1) % 624] & 0x7fffffffu);
            g->mt[i] = g->mt[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        g->idx = 0;
    }
    uint32_t y = g->mt[g->idx++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

/* ---------------------------------------------------------------------------------------------
 * Internal
 * --------------------------------------------------------------------------------------------- */
void attn_hadamard_sign_vector(int64_t head_size, uint32_t seed, int8_t *signs) {
    attn_mt19937 g;
    attn_mt_seed(&g, seed);
    for (int64_t i = 0; i < head_size; i++)
        signs[i] = (int8_t)(2 * (int32_t)(attn_mt_next(&g) % 2u) - 1);
}

void attn_hadamard_row(const float *src, const int8_t *signs, int64_t head_size, double *tmp, float *dst) {
    for (int64_t i = 0; i < head_size; i++)
        tmp[i] = (double)signs[i] * (double)src[i];
    /* unnormalised fast Walsh–Hadamard transform: H is symmetric, so x·H = H·x */
    for (int64_t len = 1; len < head_size; len *= 2)
        for (int64_t i = 0; i < head_size; i += 2 * len)
            for (int64_t j = i; j < i + len; j++) {
                const double a = tmp[j], b = tmp[j + len];
                tmp[j] = a + b;
                tmp[j + len] = a - b;
            }
    const double norm = 1.0 / sqrt((double)head_size);
    for (int64_t i = 0; i < head_size; i++)
        dst[i] = (float)(tmp[i] * norm);
}

/* ---------------------------------------------------------------------------------------------
 * Public
 * --------------------------------------------------------------------------------------------- */
static attn_status attn_check_head_size(int64_t head_size) {
    ATTN_CHECK(head_size >= 1 && head_size <= 256, ATTN_STATUS_INVALID_ARGUMENT, "head_size=%lld is outside 1..256",
               (long long)head_size);
    ATTN_CHECK(attn_is_pow2(head_size), ATTN_STATUS_UNSUPPORTED,
               "head_size=%lld is not a power of two: the Hadamard rotation needs one", (long long)head_size);
    return ATTN_STATUS_OK;
}

attn_status attn_hadamard_signs(int64_t head_size, uint32_t seed, int8_t *signs) {
    ATTN_TRY(attn_check_head_size(head_size));
    ATTN_CHECK(signs != NULL, ATTN_STATUS_INVALID_ARGUMENT, "signs: is NULL");
    attn_hadamard_sign_vector(head_size, seed, signs);
    return ATTN_STATUS_OK;
}

attn_status attn_hadamard_rotate(const float *src, int64_t num_rows, int64_t head_size, uint32_t seed, float *dst) {
    ATTN_TRY(attn_check_head_size(head_size));
    ATTN_CHECK(num_rows >= 0, ATTN_STATUS_INVALID_ARGUMENT, "num_rows=%lld, expected >= 0", (long long)num_rows);
    ATTN_CHECK(num_rows == 0 || src != NULL, ATTN_STATUS_INVALID_ARGUMENT, "src: is NULL");
    ATTN_CHECK(num_rows == 0 || dst != NULL, ATTN_STATUS_INVALID_ARGUMENT, "dst: is NULL");
    int8_t signs[256];
    double tmp[256];
    attn_hadamard_sign_vector(head_size, seed, signs);
    for (int64_t r = 0; r < num_rows; r++)
        attn_hadamard_row(src + r * head_size, signs, head_size, tmp, dst + r * head_size);
    return ATTN_STATUS_OK;
}
