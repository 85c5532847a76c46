/*
 * dtype.c — dtype sizes and names (public helpers). Conversions are in dtype.h.
 */
#include "core/dtype.h"

size_t attn_dtype_size(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_F32: return 4;
    case ATTN_DTYPE_F16: return 2;
    case ATTN_DTYPE_BF16: return 2;
    case ATTN_DTYPE_I32: return 4;
    case ATTN_DTYPE_I64: return 8;
    case ATTN_DTYPE_BOOL: return 1;
    case ATTN_DTYPE_FP8_E4M3: return 1;
    case ATTN_DTYPE_FP8_E5M2: return 1;
    case ATTN_DTYPE_FP4_E2M1: return 0;
    case ATTN_DTYPE_E8M0: return 1;
    case ATTN_DTYPE_U8: return 1;
    }
    return 0;
}

const char *attn_dtype_name(attn_dtype dtype) {
    switch (dtype) {
    case ATTN_DTYPE_F32: return "f32";
    case ATTN_DTYPE_F16: return "f16";
    case ATTN_DTYPE_BF16: return "bf16";
    case ATTN_DTYPE_I32: return "i32";
    case ATTN_DTYPE_I64: return "i64";
    case ATTN_DTYPE_BOOL: return "bool";
    case ATTN_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case ATTN_DTYPE_FP8_E5M2: return "fp8_e5m2";
    case ATTN_DTYPE_FP4_E2M1: return "fp4_e2m1";
    case ATTN_DTYPE_E8M0: return "e8m0";
    case ATTN_DTYPE_U8: return "u8";
    }
    return "unknown";
}

/* The public f16/bf16 codecs (attn.h): the inline ones of core/dtype.h that every conversion uses. */
uint16_t attn_f16_from_float(float x) { return attn_f32_to_f16(x); }
float attn_f16_to_float(uint16_t bits) { return attn_f16_to_f32(bits); }
uint16_t attn_bf16_from_float(float x) { return attn_f32_to_bf16(x); }
float attn_bf16_to_float(uint16_t bits) { return attn_bf16_to_f32(bits); }
