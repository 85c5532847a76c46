"""flash-attn calling conventions over libattn (same argument names, defaults and return values).

    flash_attn_func(q, k, v, ...)                       dense, BSND
    flash_attn_varlen_func(q, k, v, cu_seqlens_q, ...)  packed sequences (optionally paged K/V)
    flash_attn_with_kvcache(q, k_cache, v_cache, ...)   decode/append into a (paged) KV cache

Differences from flash-attn (a CPU library): dropout_p must be 0, ``deterministic`` is ignored (attn is
always deterministic), ``return_attn_probs`` returns ``None`` for the probability matrix, rotary
embedding and ``cache_leftpad`` are not implemented (NotImplementedError). Extensions: ``out=`` (write
the result into a caller array), ``return_softmax_lse`` on every function, ``sinks``, ``ctx``.
Arrays are NumPy (bfloat16 via ml_dtypes) or torch CPU tensors (DLPack); results have the caller's type.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, ops
from .ops import Array, Context


def _check_common(dropout_p: float) -> None:
    if dropout_p:
        raise NotImplementedError(f"dropout_p={dropout_p}: attn is an inference library (use 0.0)")


def _finish(out: Any, lse: Any, return_attn_probs: bool, return_softmax_lse: bool) -> Any:
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out


def flash_attn_func(q: Array, k: Array, v: Array, dropout_p: float = 0.0,
                    softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                    return_attn_probs: bool = False, *, return_softmax_lse: bool = False,
                    out: Optional[Array] = None, sinks: Optional[Array] = None,
                    ctx: Optional[Context] = None) -> Any:
    """Dense attention, flash-attn layout.

    q: [batch, seqlen_q, nheads, headdim]; k: [batch, seqlen_k, nheads_k, headdim];
    v: [batch, seqlen_k, nheads_k, headdim_v]; nheads % nheads_k == 0 (GQA/MQA).
    causal is aligned bottom-right; window_size (left, right), -1 = unbounded; softcap > 0 enables
    soft-capping; alibi_slopes float32 [nheads] or [batch, nheads] (bias -slope*|i + seqlen_k - seqlen_q - j|).
    Returns out [batch, seqlen_q, nheads, headdim_v] (q's dtype); with return_softmax_lse also
    softmax_lse float32 [batch, nheads, seqlen_q]; with return_attn_probs (out, softmax_lse, None)."""
    _check_common(dropout_p)
    want_lse = return_attn_probs or return_softmax_lse
    kw = dict(softmax_scale=softmax_scale, causal=bool(causal), window_size=window_size,
              softcap=softcap, sinks=sinks, ctx=ctx)
    slopes = None if alibi_slopes is None else np.asarray(_arrays.as_numpy(alibi_slopes), np.float32)
    if slopes is not None and slopes.ndim == 2:
        # Per-batch slopes: one call per batch element on views (no copies of q/k/v).
        qa, ka, va = (_arrays.as_numpy(x) for x in (q, k, v))
        if out is None:
            out = _arrays.empty(q, qa.shape[:-1] + (va.shape[-1],), qa.dtype)
        oa = _arrays.as_numpy(out)
        lse = _arrays.empty(q, (qa.shape[0], qa.shape[2], qa.shape[1]), np.float32) if want_lse else None
        la = None if lse is None else _arrays.as_numpy(lse)
        for b in range(qa.shape[0]):
            ops.attention(qa[b:b + 1], ka[b:b + 1], va[b:b + 1], alibi_slopes=slopes[b],
                          out=oa[b:b + 1], lse=None if la is None else la[b:b + 1], **kw)
        return _finish(out, lse, return_attn_probs, return_softmax_lse)
    res = ops.attention(q, k, v, alibi_slopes=slopes, out=out, return_lse=want_lse, **kw)
    out, lse = res if want_lse else (res, None)
    return _finish(out, lse, return_attn_probs, return_softmax_lse)


def _kv_view(k_cache: np.ndarray, v_cache: np.ndarray) -> Optional[np.ndarray]:
    """A [2, ...] view whose index 0 is k_cache and 1 is v_cache, when the two are the halves of one
    tensor (kv[0], kv[1] of a vLLM cache): same dtype, shape and strides, v_cache starting a whole
    number of elements after k_cache and no later than the end of k_cache. None otherwise."""
    if k_cache.dtype != v_cache.dtype or k_cache.shape != v_cache.shape:
        return None
    if k_cache.strides != v_cache.strides:
        return None
    delta = v_cache.__array_interface__["data"][0] - k_cache.__array_interface__["data"][0]
    extent = k_cache.itemsize + sum((n - 1) * st for n, st in zip(k_cache.shape, k_cache.strides))
    if delta < 0 or delta % k_cache.itemsize or delta > extent:
        return None  # (a gap would make the view span unrelated memory, which libattn rejects)
    return np.lib.stride_tricks.as_strided(k_cache, shape=(2,) + k_cache.shape,
                                           strides=(delta,) + k_cache.strides,
                                           writeable=bool(k_cache.flags.writeable))


def doubled(cache: np.ndarray) -> np.ndarray:
    """[2, ...] view of one cache tensor whose halves alias (stride 0): lets the two-half C ops
    (reshape_and_cache, copy/swap_blocks) work on a separate key or value cache."""
    return np.lib.stride_tricks.as_strided(cache, shape=(2,) + cache.shape, strides=(0,) + cache.strides,
                                           writeable=bool(cache.flags.writeable))


def _view3(a: np.ndarray, shape: Sequence[int]) -> Optional[np.ndarray]:
    """``a`` reshaped without a copy, or None if that needs a copy."""
    v = a.view()
    try:
        v.shape = tuple(shape)
    except AttributeError:
        return None
    return v


def _paged(q3: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, query_start_loc: np.ndarray,
           seq_lens: np.ndarray, block_table: np.ndarray, out3: Optional[np.ndarray], want_lse: bool,
           kw: dict) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Paged attention over separate key/value caches [num_blocks, block_size, nheads_k, headdim]."""
    kv = _kv_view(k_cache, v_cache)
    if kv is None:
        # Caches that cannot be described as one [2, ...] view (e.g. two separate allocations with
        # v_cache below k_cache): attend over a copy of just the blocks in use, renumbered.
        bs = k_cache.shape[1]
        nblk = (seq_lens.astype(np.int64) + bs - 1) // bs
        used_mask = np.arange(block_table.shape[1])[None, :] < nblk[:, None]
        used = np.unique(block_table[used_mask]) if used_mask.any() else np.zeros(0, np.int64)
        if used.size and (used.min() < 0 or used.max() >= k_cache.shape[0]):
            raise ValueError(f"block_table: block ids must be in [0, {k_cache.shape[0]})")
        kv = np.stack([k_cache[used], v_cache[used]])
        block_table = np.where(used_mask, np.searchsorted(used, block_table), 0).astype(np.int32)
    res = ops.paged_attention(q3, kv, query_start_loc, seq_lens, block_table, out=out3,
                              return_lse=want_lse, **kw)
    return res if want_lse else (res, None)


def flash_attn_varlen_func(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                           max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                           dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                           causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                           softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                           deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Optional[Array] = None, *, seqused_k: Optional[Array] = None,
                           return_softmax_lse: bool = False, out: Optional[Array] = None,
                           sinks: Optional[Array] = None, ctx: Optional[Context] = None) -> Any:
    """Packed variable-length attention, flash-attn layout.

    q: [total_q, nheads, headdim]; k, v: [total_k, nheads_k, headdim(_v)]; cu_seqlens_q/k int32
    [batch + 1]. max_seqlen_q/k are accepted for compatibility (attn derives them).
    Paged K/V: with block_table int32 [batch, max_blocks], k and v are caches [num_blocks, block_size,
    nheads_k, headdim] and sequence b has cu_seqlens_k[b+1] - cu_seqlens_k[b] keys (or seqused_k[b]).
    Returns out [total_q, nheads, headdim_v]; with return_softmax_lse also softmax_lse float32
    [nheads, total_q]; with return_attn_probs (out, softmax_lse, None)."""
    _check_common(dropout_p)
    want_lse = return_attn_probs or return_softmax_lse
    kw = dict(softmax_scale=softmax_scale, causal=bool(causal), window_size=window_size,
              softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, ctx=ctx)
    if block_table is None and seqused_k is None:
        res = ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, out=out, return_lse=want_lse,
                                   **kw)
        out, lse = res if want_lse else (res, None)
        return _finish(out, lse, return_attn_probs, return_softmax_lse)
    if block_table is None:
        raise NotImplementedError("seqused_k without block_table: pass cu_seqlens_k instead")
    qa = _arrays.as_numpy(q)
    cu_k = _arrays.index_array(cu_seqlens_k, "cu_seqlens_k")
    seq_lens = (np.diff(cu_k).astype(np.int32) if seqused_k is None
                else _arrays.index_array(seqused_k, "seqused_k"))
    if out is None:
        out = _arrays.empty(q, qa.shape, qa.dtype)
    o, lse = _paged(qa, _arrays.as_numpy(k), _arrays.as_numpy(v),
                    _arrays.index_array(cu_seqlens_q, "cu_seqlens_q"), seq_lens,
                    _arrays.index_array(block_table, "block_table"), _arrays.as_numpy(out), want_lse, kw)
    if lse is not None and _arrays.is_torch(q):
        import torch

        lse = torch.from_numpy(lse)
    return _finish(out, lse, return_attn_probs, return_softmax_lse)


def flash_attn_with_kvcache(q: Array, k_cache: Array, v_cache: Array, k: Optional[Array] = None,
                            v: Optional[Array] = None, rotary_cos: Optional[Array] = None,
                            rotary_sin: Optional[Array] = None,
                            cache_seqlens: Optional[Any] = None,
                            cache_batch_idx: Optional[Array] = None,
                            cache_leftpad: Optional[Array] = None,
                            block_table: Optional[Array] = None,
                            softmax_scale: Optional[float] = None, causal: bool = False,
                            window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Optional[Array] = None,
                            num_splits: int = 0, return_softmax_lse: bool = False, *,
                            out: Optional[Array] = None, sinks: Optional[Array] = None,
                            ctx: Optional[Context] = None) -> Any:
    """Attention of new queries against a KV cache, appending k/v to the cache first (in place).

    q: [batch, seqlen_q, nheads, headdim].
    k_cache, v_cache: [batch_cache, seqlen_cache, nheads_k, headdim] (contiguous per batch row), or paged
    [num_blocks, page_block_size, nheads_k, headdim] when block_table int32 [batch, max_blocks] is given.
    k, v (optional): [batch, seqlen_new, nheads_k, headdim], written at positions cache_seqlens[b] ...
    cache_seqlens[b] + seqlen_new - 1 of sequence b (through libattn's reshape_and_cache).
    cache_seqlens: int or int32 [batch], keys already in the cache (default: the whole cache).
    cache_batch_idx: int32 [batch], the cache row of each batch element (non-paged only).
    Causal is bottom-right over cache_seqlens[b] + seqlen_new keys.
    Returns out [batch, seqlen_q, nheads, headdim]; with return_softmax_lse also softmax_lse float32
    [batch, nheads, seqlen_q]."""
    if rotary_cos is not None or rotary_sin is not None:
        raise NotImplementedError("flash_attn_with_kvcache: rotary embedding is not implemented; apply "
                                  "RoPE to q/k before the call")
    if cache_leftpad is not None:
        raise NotImplementedError("flash_attn_with_kvcache: cache_leftpad is not implemented")
    qa = _arrays.as_numpy(q)
    kc, vc = _arrays.as_numpy(k_cache), _arrays.as_numpy(v_cache)
    if qa.ndim != 4 or kc.ndim != 4:
        raise ValueError(f"q: shape {qa.shape}, k_cache: shape {kc.shape}; expected 4-D "
                         "[batch, seqlen, nheads, headdim] tensors")
    batch, seqlen_q, nheads = qa.shape[0], qa.shape[1], qa.shape[2]
    if block_table is not None:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx cannot be used with block_table")
        bt = _arrays.index_array(block_table, "block_table")
        capacity = bt.shape[1] * kc.shape[1] if bt.ndim == 2 else 0
    else:
        rows = (np.arange(batch, dtype=np.int32) if cache_batch_idx is None
                else _arrays.index_array(cache_batch_idx, "cache_batch_idx"))
        bt = np.ascontiguousarray(rows.reshape(-1, 1))  # the cache as blocks of seqlen_cache rows
        capacity = kc.shape[1]
    if cache_seqlens is None:
        seqlens = np.full(batch, capacity, dtype=np.int32)
    elif isinstance(cache_seqlens, (int, np.integer)):
        seqlens = np.full(batch, int(cache_seqlens), dtype=np.int32)
    else:
        seqlens = _arrays.index_array(cache_seqlens, "cache_seqlens").astype(np.int32).reshape(-1)
    if seqlens.shape[0] != batch or bt.shape[0] != batch:
        raise ValueError(f"cache_seqlens: {seqlens.shape[0]} entries and block_table/cache_batch_idx: "
                         f"{bt.shape[0]} rows, expected batch={batch}")
    kv = _kv_view(kc, vc)
    block_size = kc.shape[1]
    if k is not None or v is not None:
        if k is None or v is None:
            raise ValueError("k and v must be given together")
        ka, va = _arrays.as_numpy(k), _arrays.as_numpy(v)
        seqlen_new = ka.shape[1]
        pos = seqlens[:, None].astype(np.int64) + np.arange(seqlen_new, dtype=np.int64)[None, :]
        if np.any(pos // block_size >= bt.shape[1]):
            raise ValueError(f"cache_seqlens + seqlen_new exceeds the cache capacity {capacity}")
        blk = np.take_along_axis(bt.astype(np.int64), pos // block_size, axis=1)
        slots = (blk * block_size + pos % block_size).reshape(-1)
        k3 = ka.reshape(batch * seqlen_new, ka.shape[2], ka.shape[3])
        v3 = va.reshape(batch * seqlen_new, va.shape[2], va.shape[3])
        if kv is not None:
            ops.reshape_and_cache(k3, v3, kv, slots, ctx=ctx)
        else:  # two separate caches: write each through a [2, ...] view with aliased halves
            ops.reshape_and_cache(k3, k3, doubled(kc), slots, ctx=ctx)
            ops.reshape_and_cache(v3, v3, doubled(vc), slots, ctx=ctx)
        seq_lens = (seqlens + seqlen_new).astype(np.int32)
    else:
        seq_lens = seqlens
    q3 = qa.reshape(batch * seqlen_q, nheads, qa.shape[3])
    qsl = (np.arange(batch + 1, dtype=np.int32) * seqlen_q).astype(np.int32)
    if out is None:
        out = _arrays.empty(q, qa.shape, qa.dtype)
    oa = _arrays.as_numpy(out)
    o3 = _view3(oa, (batch * seqlen_q, nheads, oa.shape[-1]))
    kw = dict(softmax_scale=softmax_scale, causal=bool(causal), window_size=window_size,
              softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, ctx=ctx)
    res, lse3 = _paged(q3, kc, vc, qsl, seq_lens, bt, o3, return_softmax_lse, kw)
    if o3 is None:  # out was not reshapeable in place
        oa[...] = res.reshape(oa.shape)
    if not return_softmax_lse:
        return out
    lse = _arrays.empty(q, (batch, nheads, seqlen_q), np.float32)
    _arrays.as_numpy(lse)[...] = lse3.reshape(nheads, batch, seqlen_q).transpose(1, 0, 2)
    return out, lse
