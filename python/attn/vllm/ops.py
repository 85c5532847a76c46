"""vLLM-style cache and attention-state ops (vllm._custom_ops names and argument order) over libattn.

    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto", ...)
    copy_blocks(key_caches, value_caches, block_mapping)
    swap_blocks(src, dst, block_mapping)  or  swap_blocks(src, dst, block_size_in_bytes, block_mapping)
    merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None,
                      prefill_tokens_with_context=None, output_scale=None)

All ops work in place on caller arrays (NumPy or torch CPU tensors, no copies) and raise AttnError with
the C message on bad input, writing nothing. Caches use vLLM's flash layout: key_cache / value_cache
[num_blocks, block_size, num_kv_heads, head_size]; when they are the two halves of one tensor
kv_cache [2, num_blocks, ...] (vLLM's and vllm-ascend's allocation) one C call handles both.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .. import _arrays, ops
from ..flash import doubled
from ..ops import Array, Context, _ctx_ptr, _ext


def reshape_and_cache(key: Array, value: Array, key_cache: Array, value_cache: Array,
                      slot_mapping: Array, kv_cache_dtype: str = "auto", k_scale: Any = None,
                      v_scale: Any = None, *, ctx: Optional[Context] = None) -> None:
    """key_cache[slot // block_size, slot % block_size] = key[t] (and value) for every token t with
    slot_mapping[t] >= 0.

    key, value: [num_tokens, num_kv_heads, head_size]; key_cache, value_cache: [num_blocks, block_size,
    num_kv_heads, head_size]; slot_mapping: int64 [n] with n <= num_tokens: as in vLLM, key/value rows past
    the n-th (padding of a captured batch) are not written. key and value share a dtype and are converted to
    the caches' dtype (round to nearest even); the caches share [num_blocks, block_size] and a dtype. Every
    argument and slot is checked by libattn before either cache is written (also for two separately
    allocated caches, each written through a [2, ...] view whose halves alias); errors name the argument.
    kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2": uint8 caches (or float8 arrays) receive
    fp8(x / k_scale) and fp8(x / v_scale), saturating (attn_reshape_and_cache_ex); k_scale / v_scale
    are floats or one-element tensors (vLLM's layer._k_scale), or float tensors [num_kv_heads] (vLLM's
    kv_scale_type "attn_head": head g stored as fp8(x / k_scale[g]); attn_reshape_and_cache_ex); other shapes
    raise ValueError naming the argument."""
    _ext.vllm_reshape_and_cache(_ctx_ptr(ctx), key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                ops._scale_arg(k_scale, "k_scale"), ops._scale_arg(v_scale, "v_scale"))


reshape_and_cache_flash = reshape_and_cache


def copy_blocks(key_caches: Sequence[Array], value_caches: Sequence[Array], block_mapping: Array, *,
                ctx: Optional[Context] = None) -> None:
    """For every layer: key_caches[l][dst] = key_caches[l][src] and the same for values, for each
    (src, dst) row of block_mapping int64 [num_pairs, 2], in order."""
    if len(key_caches) != len(value_caches):
        raise ValueError(f"key_caches: {len(key_caches)} layers, value_caches: {len(value_caches)}")
    for kc, vc in zip(key_caches, value_caches):  # each cache through a [2, ...] view whose halves alias
        ops.copy_blocks(doubled(_arrays.as_numpy(kc, "key_caches")), block_mapping, ctx=ctx)
        ops.copy_blocks(doubled(_arrays.as_numpy(vc, "value_caches")), block_mapping, ctx=ctx)


def _byte_span(a: np.ndarray, name: str) -> int:
    """Bytes from a's first element to the end of its last one (a view that may be read as raw bytes
    from its data pointer); ValueError for negative strides."""
    if any(st < 0 for st in a.strides):
        raise ValueError(f"{name}: negative strides {a.strides} (block_size_in_bytes needs blocks laid out "
                         "upwards from the data pointer)")
    if a.size == 0:
        return 0
    return a.itemsize + sum((n - 1) * st for n, st in zip(a.shape, a.strides))


def _swap_bytes(src: Array, dst: Array, block_size_in_bytes: Any, block_mapping: Array,
                ctx: Optional[Context]) -> None:
    """Newer vLLM's swap_blocks(src, dst, block_size_in_bytes, block_mapping) on the raw bytes of each tensor
    (any dtype: attn_swap_blocks_bytes)."""
    if isinstance(block_size_in_bytes, (bool, np.bool_)) or not isinstance(block_size_in_bytes,
                                                                           (int, np.integer)):
        raise TypeError(f"block_size_in_bytes: {block_size_in_bytes!r}, expected an int")
    views = []
    for a, name in ((src, "src"), (dst, "dst")):
        a = _arrays.as_numpy(a, name)
        if a.dtype.hasobject:
            raise TypeError(f"{name}: dtype {a.dtype} holds Python objects, not bytes to copy")
        if name == "dst" and not a.flags.writeable:
            raise ValueError("dst: is read-only")
        views.append(_arrays.raw_bytes(a.__array_interface__["data"][0], _byte_span(a, name), a))
    _ext.attn_swap_blocks_bytes(_ctx_ptr(ctx), views[0], views[1], int(block_size_in_bytes),
                                ops.block_pairs(block_mapping))


def swap_blocks(src: Array, dst: Array, block_size_in_bytes: Any = None,
                block_mapping: Optional[Array] = None, *, ctx: Optional[Context] = None) -> None:
    """dst[d] = src[s] for each (s, d) row of block_mapping int64 [num_pairs, 2].

    Both of vLLM's forms: swap_blocks(src, dst, block_mapping) -- src and dst are one cache each
    ([num_blocks, block_size, num_kv_heads, head_size], e.g. a GPU-side and a host-side key cache) or
    whole [2, num_blocks, ...] kv caches (attn_swap_blocks); and newer vLLM's
    swap_blocks(src, dst, block_size_in_bytes, block_mapping) -- any tensors made of consecutive blocks of
    block_size_in_bytes bytes from their data pointers (a raw byte copy per pair, e.g. an int8 offload
    region). Ids are checked against each tensor before anything is written."""
    if block_mapping is not None:
        if block_size_in_bytes is not None:
            return _swap_bytes(src, dst, block_size_in_bytes, block_mapping, ctx)
    elif block_size_in_bytes is not None:
        block_mapping = block_size_in_bytes  # the three-argument form: (src, dst, block_mapping)
        if isinstance(block_mapping, (int, np.integer)):
            raise TypeError("swap_blocks: block_size_in_bytes given without block_mapping")
    else:
        raise TypeError("swap_blocks: missing block_mapping")
    sa, da = _arrays.as_numpy(src), _arrays.as_numpy(dst)
    if sa.ndim == 5:
        ops.swap_blocks(sa, da, block_mapping, ctx=ctx)
    else:
        ops.swap_blocks(doubled(sa), doubled(da), block_mapping, ctx=ctx)


def merge_attn_states(output: Array, prefix_output: Array, prefix_lse: Array, suffix_output: Array,
                      suffix_lse: Array, output_lse: Optional[Array] = None,
                      prefill_tokens_with_context: Optional[int] = None, output_scale: Any = None, *,
                      ctx: Optional[Context] = None) -> Array:
    """output = merge of the prefix and suffix attention states (vLLM merge_attn_states), in place.

    prefix/suffix_output, output: [num_tokens, num_heads, head_size]; prefix/suffix_lse, output_lse:
    float32 [num_heads, num_tokens]. An LSE of +inf (FA2's empty state) counts as -inf, as in vLLM.
    prefill_tokens_with_context (vLLM): only tokens below it are merged; later tokens copy suffix_output
    (and suffix_lse into output_lse, +inf as -inf). None = every token; values above num_tokens act as
    num_tokens. output_scale (vLLM's static FP8 output): output is float8 (ml_dtypes) and receives
    clamp(merged / output_scale) rounded to it. Returns output."""
    if prefill_tokens_with_context is None and output_scale is None:
        _ext.merge_attn_states(_ctx_ptr(ctx), prefix_output, prefix_lse, suffix_output, suffix_lse, output,
                               output_lse, output_lse is not None)
        return output
    tokens = 2**63 - 1
    if prefill_tokens_with_context is not None:
        if isinstance(prefill_tokens_with_context, (bool, np.bool_)) or not isinstance(
                prefill_tokens_with_context, (int, np.integer)) or prefill_tokens_with_context < 0:
            raise ValueError(f"prefill_tokens_with_context: {prefill_tokens_with_context!r}, expected an int "
                             ">= 0 or None")
        tokens = int(prefill_tokens_with_context)
    scale = 0.0
    if output_scale is not None:
        dt = _arrays.dtype_of(output, "output")
        if "float8" not in dt.name:
            raise TypeError(f"output: dtype {dt}, expected a float8 dtype with output_scale (as vLLM: "
                            "output_scale quantizes the merged output to FP8)")
        if isinstance(output_scale, (bool, np.bool_, str, bytes)):
            raise TypeError(f"output_scale: {output_scale!r}, expected a number or a one-element float array")
        scale = np.asarray(output_scale if isinstance(output_scale, (int, float, np.number)) else
                           _arrays.as_numpy(output_scale, "output_scale"), np.float32)
        if scale.size != 1:
            raise ValueError(f"output_scale: shape {list(scale.shape)}, expected a scalar")
        scale = float(scale.reshape(()))
    _ext.attn_merge_attn_states_ex(_ctx_ptr(ctx), prefix_output, prefix_lse, suffix_output, suffix_lse, tokens, scale,
                                   output, output_lse)
    return output
