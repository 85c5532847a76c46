/*
 * ref_quant.h — the oracle of quantized attention's operand quantization (docs/CONTRIBUTING.md §5): a literal
 * rotation (explicit d×d product in double) and quantization by nearest-code search in the format's own
 * value table. attn_ref_forward_quant (src/api/api_diffusion.c) runs it, then the float oracle.
 */
#ifndef ATTN_REF_QUANT_H
#define ATTN_REF_QUANT_H

#include <stdint.h>

#include "attn/attn.h"
#include "attn/attn_experimental.h"

/* Same contract as attn_quant_fake_tensor (src/quant/quant.h), one thread, literal arithmetic.
 * x: float32 [num_mats][seq][width]; role 0 = Q, 1 = K, 2 = V. */
void attn_ref_quant_fake_tensor(float *x, int64_t num_mats, int64_t seq, int64_t width, int32_t role,
                                const attn_quant_params *qp);

#endif
