"""Disaggregated prefill: the per-layer "KV stored" notification (attn_reshape_and_cache_notify).

A KV producer (the prefill side of a disaggregated deployment; vllm-ascend records ``reshape_cache_event``
after each layer's cache write when ``is_kv_producer``) starts a layer's transfer as soon as that layer's
K/V are in the cache. :func:`reshape_and_cache_notify` is :func:`attn.reshape_and_cache` plus one call of
``on_stored(event)`` after the write, on the calling thread, before it returns; never when the write is
rejected. ``event`` is a :class:`KVStored`: the layer id and the written rows as (block, row range) runs.
The callback runs Python, so attn._ext takes the GIL around it; without a callback use
:func:`attn.reshape_and_cache`, whose path is the fast one.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from . import _arrays
from .ops import Array, Context, _ctx_ptr, _ext, _scale_arg


class KVStored:
    """What one layer's cache write stored.

    layer_idx: the caller's layer id; runs: int64 [num_runs, 4] rows (block_idx, row_start, row_end,
    token_start): rows [row_start, row_end) of block block_idx hold tokens token_start..; block_ids: the
    distinct blocks written, ascending; num_tokens / num_written: slot_mapping entries read / stored;
    block_size. The arrays are copies, valid after the callback returns."""

    __slots__ = ("layer_idx", "runs", "block_ids", "num_tokens", "num_written", "block_size")

    def __init__(self, layer_idx: int, runs: np.ndarray, num_tokens: int, num_written: int, block_size: int):
        self.layer_idx = layer_idx
        self.runs = runs
        self.block_ids = np.unique(runs[:, 0]) if len(runs) else np.zeros(0, dtype=np.int64)
        self.num_tokens = num_tokens
        self.num_written = num_written
        self.block_size = block_size

    def __repr__(self) -> str:
        return (f"KVStored(layer_idx={self.layer_idx}, num_written={self.num_written}, "
                f"runs={len(self.runs)}, block_ids={self.block_ids.tolist()})")


def _event_of(layer_idx: int, runs: bytearray, num_runs: int, num_tokens: int, num_written: int,
              block_size: int) -> KVStored:
    """The KVStored of one attn_kv_stored (attn._ext copies its runs, attn_kv_stored_next, into ``runs``)."""
    rows = np.frombuffer(runs, dtype=np.int64, count=4 * num_runs).reshape(num_runs, 4)
    return KVStored(layer_idx, rows, num_tokens, num_written, block_size)


def reshape_and_cache_notify(key: Array, value: Array, kv_cache: Array, slot_mapping: Array,
                             on_stored: Callable[[KVStored], Any], *, layer_idx: int = 0,
                             kv_cache_dtype: Optional[str] = None, k_scale: Any = None, v_scale: Any = None,
                             ctx: Optional[Context] = None) -> None:
    """attn.reshape_and_cache (same arguments and checks, fp8 caches with kv_cache_dtype / k_scale / v_scale
    included, per-tensor or per-KV-head: attn_reshape_and_cache_scaled_notify / attn_reshape_and_cache_ex), then
    ``on_stored(event)`` once, synchronously, after the write is complete (the event describes what was stored,
    see :class:`KVStored`). Not called when the write is rejected (AttnInvalidArgumentError, cache untouched). An
    exception raised by ``on_stored`` propagates from this call after the write."""
    if not callable(on_stored):
        raise _arrays._type_error(f"on_stored: expected a callable, got {type(on_stored).__name__}")
    layer = int(layer_idx)
    if not 0 <= layer < 2 ** 31:
        raise _arrays._invalid(f"layer_idx={layer}: expected 0 <= layer_idx < 2**31")
    ks, vs = _scale_arg(k_scale, "k_scale"), _scale_arg(v_scale, "v_scale")

    def on_event(*event: Any) -> None:  # called by attn._ext with the GIL, after the write
        on_stored(_event_of(*event))

    _ext.reshape_and_cache(_ctx_ptr(ctx), key, value, kv_cache, slot_mapping, kv_cache_dtype, ks, vs, on_event, layer)
