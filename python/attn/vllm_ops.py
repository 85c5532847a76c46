"""vLLM-style cache and attention-state ops (vllm._custom_ops names and argument order) over libattn.

    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto", ...)
    copy_blocks(key_caches, value_caches, block_mapping)
    swap_blocks(src, dst, block_mapping)
    merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None)

All ops work in place on caller arrays (NumPy or torch CPU tensors, no copies) and raise AttnError with
the C message on bad input, writing nothing. Caches use vLLM's flash layout: key_cache / value_cache
[num_blocks, block_size, num_kv_heads, head_size]; when they are the two halves of one tensor
kv_cache [2, num_blocks, ...] (vLLM's and the seed's allocation) one C call handles both.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import _arrays, ops
from .flash import _kv_view, doubled
from .ops import _NI, Array, Context, _ctx_ptr, _ext


def _check_cache_dtype(kv_cache_dtype: str, k_scale: Any, v_scale: Any) -> None:
    """kv_cache_dtype "auto" (the cache has the model's dtype): k_scale / v_scale are accepted and ignored,
    as vLLM's reshape_and_cache(_flash) does (it reads them only for fp8 caches, and vLLM passes them on
    every call). fp8 caches are not supported yet (attn_capabilities_get: kv_cache_dtypes)."""
    del k_scale, v_scale  # unused for "auto", like vLLM
    if kv_cache_dtype not in ("auto", None):
        raise NotImplementedError(f"kv_cache_dtype={kv_cache_dtype!r}: attn caches are f32/f16/bf16 "
                                  "('auto')")


def reshape_and_cache(key: Array, value: Array, key_cache: Array, value_cache: Array,
                      slot_mapping: Array, kv_cache_dtype: str = "auto", k_scale: Any = None,
                      v_scale: Any = None, *, ctx: Optional[Context] = None) -> None:
    """key_cache[slot // block_size, slot % block_size] = key[t] (and value) for every token t with
    slot_mapping[t] >= 0.

    key, value: [num_tokens, num_kv_heads, head_size]; key_cache, value_cache: [num_blocks, block_size,
    num_kv_heads, head_size]; slot_mapping: int64 [num_tokens]. key and value share a dtype, the caches
    share [num_blocks, block_size] and a dtype. Every argument and slot is checked before either cache
    is written (also for two separately allocated caches); errors name the argument."""
    _check_cache_dtype(kv_cache_dtype, k_scale, v_scale)
    if _ext is not None and _ext.vllm_reshape_and_cache(_ctx_ptr(ctx), key, value, key_cache, value_cache,
                                                        slot_mapping) is not _NI:
        return None
    kc, vc = _arrays.as_numpy(key_cache, "key_cache"), _arrays.as_numpy(value_cache, "value_cache")
    sm = _arrays.index_array(slot_mapping, "slot_mapping", np.int64)
    kv = _kv_view(kc, vc)
    if kv is not None:  # one C call checks everything before writing
        ops.reshape_and_cache(key, value, kv, sm, ctx=ctx)
        return
    # Two separate caches: two C calls, so every argument is checked here before the first write.
    ka, va = _arrays.as_numpy(key, "key"), _arrays.as_numpy(value, "value")
    for name, a, c, cname in (("key", ka, kc, "key_cache"), ("value", va, vc, "value_cache")):
        _arrays.tensor(a, name), _arrays.tensor(c, cname, True)  # dtypes, strides, writability
        if c.ndim != 4:
            raise ValueError(f"{cname}: shape {list(c.shape)}, expected [num_blocks, block_size, "
                             "num_kv_heads, head_size]")
        if a.ndim != 3 or tuple(a.shape[1:]) != tuple(c.shape[2:]):
            raise ValueError(f"{name}: shape {list(a.shape)}, expected [num_tokens, {c.shape[2]}, "
                             f"{c.shape[3]}] ([num_tokens, num_kv_heads, head_size] of {cname})")
    if ka.shape[0] != va.shape[0]:
        raise ValueError(f"value: {va.shape[0]} tokens, key: {ka.shape[0]} tokens")
    if ka.dtype != va.dtype:
        raise TypeError(f"value: dtype {va.dtype} differs from key: dtype {ka.dtype} (must be equal)")
    if kc.shape[:2] != vc.shape[:2] or kc.dtype != vc.dtype:
        raise ValueError(f"value_cache: shape {list(vc.shape)} dtype {vc.dtype} does not match key_cache: "
                         f"shape {list(kc.shape)} dtype {kc.dtype} in [num_blocks, block_size] and dtype")
    if sm.ndim != 1 or sm.shape[0] > ka.shape[0]:
        raise ValueError(f"slot_mapping: shape {list(sm.shape)}, expected [n] with n <= num_tokens="
                         f"{ka.shape[0]}")
    num_slots = kc.shape[0] * kc.shape[1]
    bad = np.nonzero(sm >= num_slots)[0]
    if bad.size:  # check before the first write, like the C op
        raise ops._capi.AttnInvalidArgumentError(
            ops._capi.STATUS_INVALID_ARGUMENT,
            f"slot_mapping: entry {bad[0]} = {sm[bad[0]]} >= num_blocks·block_size = {num_slots}",
            "reshape_and_cache")
    ops.reshape_and_cache(ka, ka, doubled(kc), sm, ctx=ctx)
    ops.reshape_and_cache(va, va, doubled(vc), sm, ctx=ctx)


reshape_and_cache_flash = reshape_and_cache


def copy_blocks(key_caches: Sequence[Array], value_caches: Sequence[Array], block_mapping: Array, *,
                ctx: Optional[Context] = None) -> None:
    """For every layer: key_caches[l][dst] = key_caches[l][src] and the same for values, for each
    (src, dst) row of block_mapping int64 [num_pairs, 2], in order."""
    if len(key_caches) != len(value_caches):
        raise ValueError(f"key_caches: {len(key_caches)} layers, value_caches: {len(value_caches)}")
    for kc, vc in zip(key_caches, value_caches):
        ka, va = _arrays.as_numpy(kc), _arrays.as_numpy(vc)
        kv = _kv_view(ka, va)
        if kv is not None:
            ops.copy_blocks(kv, block_mapping, ctx=ctx)
        else:
            ops.copy_blocks(doubled(ka), block_mapping, ctx=ctx)
            ops.copy_blocks(doubled(va), block_mapping, ctx=ctx)


def swap_blocks(src: Array, dst: Array, block_mapping: Array, *, ctx: Optional[Context] = None) -> None:
    """dst[d] = src[s] for each (s, d) row of block_mapping int64 [num_pairs, 2]. src and dst are one
    cache each ([num_blocks, block_size, num_kv_heads, head_size], e.g. a GPU-side and a host-side key
    cache) or whole [2, num_blocks, ...] kv caches."""
    sa, da = _arrays.as_numpy(src), _arrays.as_numpy(dst)
    if sa.ndim == 5:
        ops.swap_blocks(sa, da, block_mapping, ctx=ctx)
    else:
        ops.swap_blocks(doubled(sa), doubled(da), block_mapping, ctx=ctx)


def merge_attn_states(output: Array, prefix_output: Array, prefix_lse: Array, suffix_output: Array,
                      suffix_lse: Array, output_lse: Optional[Array] = None, *,
                      ctx: Optional[Context] = None) -> Array:
    """output = merge of the prefix and suffix attention states (vLLM merge_attn_states), in place.

    prefix/suffix_output, output: [num_tokens, num_heads, head_size]; prefix/suffix_lse, output_lse:
    float32 [num_heads, num_tokens]. Returns output."""
    if _ext is not None and _ext.merge_attn_states(_ctx_ptr(ctx), prefix_output, prefix_lse, suffix_output,
                                                   suffix_lse, output, output_lse,
                                                   output_lse is not None) is not _NI:
        return output
    ops.merge_attn_states(prefix_output, prefix_lse, suffix_output, suffix_lse, out=output,
                          lse_out=output_lse, ctx=ctx)
    return output
