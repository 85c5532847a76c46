"""flash-attn calling conventions over libattn (same argument names, defaults and return values).

    flash_attn_func(q, k, v, ...)                       dense, BSND
    flash_attn_varlen_func(q, k, v, cu_seqlens_q, ...)  packed sequences (optionally paged K/V)
    flash_attn_with_kvcache(q, k_cache, v_cache, ...)   decode/append into a (paged) KV cache
    flash_attn_qkvpacked_func / flash_attn_kvpacked_func and their varlen twins: zero-copy views of the
    packed tensors, then the functions above

Differences from flash-attn (a CPU library): dropout_p must be 0, ``deterministic`` is ignored (attn is
always deterministic), ``return_attn_probs`` returns ``None`` for the probability matrix. Rotary
embedding (``rotary_cos``/``rotary_sin``) and ``cache_leftpad`` in flash_attn_with_kvcache follow
flash-attn 2 (docs/SEMANTICS.md, "Drop-in compatibility"). Extensions: ``out=`` (write the result into
a caller array), ``return_softmax_lse`` on every function, ``sinks``, ``ctx``.
Arrays are NumPy (bfloat16 via ml_dtypes) or torch CPU tensors (DLPack); results have the caller's type.
Forward only: torch tensors with requires_grad are read through detached views (no autograd graph; a
warning is emitted once). causal is a bool (None = False); window_size bounds are ints >= -1 (-1 or any
value > INT32_MAX = unbounded). Bad shapes, lengths, dtypes and out-of-range indices raise ValueError /
TypeError naming the argument before anything (including a KV cache) is written.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, ops
from .ops import Array, Context, _ctx_ptr, _ext

_NI = NotImplemented  # the answer of attn._ext.kvcache / varlen_paged outside their plain case


def _check_common(dropout_p: float) -> None:
    if dropout_p:
        raise NotImplementedError(f"dropout_p={dropout_p}: attn is an inference library (use 0.0)")


def _flash_causal(causal: Any) -> bool:
    """flash-attn's causal flag: a bool (None and 0 are False, 1 is True); anything else is an error
    (never ``bool(2**32)`` or a truthy array)."""
    if causal is None:
        return False
    if isinstance(causal, (bool, np.bool_)):
        return bool(causal)
    if isinstance(causal, (int, np.integer)) and int(causal) in (0, 1):
        return bool(causal)
    raise ValueError(f"causal={causal!r}: expected a bool")


def _check_shape(name: str, actual: Sequence[int], expected: Sequence[Optional[int]], what: str) -> None:
    """ValueError naming ``name`` unless ``actual`` matches ``expected`` (None = any size)."""
    actual = tuple(int(n) for n in actual)
    if len(actual) != len(expected) or any(e is not None and a != e for a, e in zip(actual, expected)):
        want = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{name}: shape {list(actual)}, expected {want} ({what})")


def _zero_tail(out: Any, lse: Any, end: int) -> None:
    """Rows past the last sequence (cu_seqlens_q[-1] <= row < total_q) of outputs allocated here: out 0,
    lse -inf (libattn leaves them untouched)."""
    oa = _arrays.as_numpy(out, "out")
    if end < oa.shape[0]:
        oa[end:] = 0
        if lse is not None:
            _arrays.as_numpy(lse, "softmax_lse")[:, end:] = -np.inf


def _finish(out: Any, lse: Any, return_attn_probs: bool, return_softmax_lse: bool) -> Any:
    if return_attn_probs:
        return out, lse, None
    if return_softmax_lse:
        return out, lse
    return out


def _batch_slopes(alibi_slopes: Optional[Array], batch: int, nheads: int) -> Optional[np.ndarray]:
    """Per-batch ALiBi slopes float32 [batch, nheads] (flash-attn's second form), or None when
    alibi_slopes is None or per-head [nheads] (passed through unchanged)."""
    if alibi_slopes is None or len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) != 2:
        return None
    slopes = np.asarray(_arrays.as_numpy(alibi_slopes, "alibi_slopes"), np.float32)
    _check_shape("alibi_slopes", slopes.shape, (batch, nheads), "[batch, nheads] or [nheads]")
    return slopes


def _empty_rows(oa: np.ndarray, la: Optional[np.ndarray]) -> None:
    """A sequence with queries but no keys: out 0, lse -inf (what libattn writes for such rows)."""
    oa[...] = 0
    if la is not None:
        la[...] = -np.inf


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
    if dropout_p:
        _check_common(dropout_p)
    want_lse = return_attn_probs or return_softmax_lse
    if alibi_slopes is None or len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) != 2:
        r = _ext.forward(_ctx_ptr(ctx), 0, q, k, v, True, softmax_scale, causal, window_size, softcap,
                         alibi_slopes, sinks, out, None, want_lse, None, None, None, False)
        return (r + (None,)) if return_attn_probs else r
    kw = dict(softmax_scale=softmax_scale, causal=_flash_causal(causal), window_size=window_size,
              softcap=softcap, sinks=sinks, ctx=ctx)
    slopes = np.asarray(_arrays.as_numpy(alibi_slopes, "alibi_slopes"), np.float32)
    # Per-batch slopes: one call per batch element on views (no copies of q/k/v).
    qa, ka, va = (_arrays.as_numpy(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if qa.ndim != 4:
        raise ValueError(f"q: shape {list(qa.shape)}, expected [batch, seqlen_q, nheads, headdim]")
    _check_shape("alibi_slopes", slopes.shape, (qa.shape[0], qa.shape[2]), "[batch, nheads] or [nheads]")
    if ka.ndim != 4 or va.ndim != 4 or ka.shape[0] != qa.shape[0] or va.shape[0] != qa.shape[0]:
        raise ValueError(f"k: shape {list(ka.shape)}, v: shape {list(va.shape)}: expected 4-D "
                         f"[batch={qa.shape[0]}, seqlen_k, nheads_k, headdim]")
    if out is None:
        out = _arrays.empty(q, qa.shape[:-1] + (va.shape[-1],), qa.dtype)
    oa = _arrays.as_numpy(out)
    lse = _arrays.empty(q, (qa.shape[0], qa.shape[2], qa.shape[1]), np.float32) if want_lse else None
    la = None if lse is None else _arrays.as_numpy(lse)
    for b in range(qa.shape[0]):
        ops.attention(qa[b:b + 1], ka[b:b + 1], va[b:b + 1], alibi_slopes=slopes[b],
                      out=oa[b:b + 1], lse=None if la is None else la[b:b + 1], **kw)
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
    return _as_strided(k_cache, (2,) + k_cache.shape, (delta,) + k_cache.strides)


def doubled(cache: np.ndarray) -> np.ndarray:
    """[2, ...] view of one cache tensor whose halves alias (stride 0): lets the two-half C ops
    (reshape_and_cache, copy/swap_blocks) work on a separate key or value cache."""
    return _as_strided(cache, (2,) + cache.shape, (0,) + cache.strides)


def _as_strided(a: np.ndarray, shape: Tuple[int, ...], strides: Tuple[int, ...]) -> np.ndarray:
    """np.lib.stride_tricks.as_strided for any dtype: through an unsigned view of the same item size, since
    NumPy cannot rebuild an ml_dtypes float8 array from its __array_interface__ ('<f1')."""
    raw = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(a.itemsize)
    if raw is None or a.dtype == raw:
        return np.lib.stride_tricks.as_strided(a, shape=shape, strides=strides, writeable=bool(a.flags.writeable))
    v = np.lib.stride_tricks.as_strided(a.view(raw), shape=shape, strides=strides,
                                        writeable=bool(a.flags.writeable))
    return v.view(a.dtype)


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
    """Paged attention over separate key/value caches [num_blocks, block_size, nheads_k, headdim].

    When the two caches are the halves of one tensor (see _kv_view) this is zero-copy; otherwise the
    blocks in use are COPIED into a temporary [2, used_blocks, ...] cache and the table renumbered."""
    kv = _kv_view(k_cache, v_cache)
    if kv is None:
        # Caches that cannot be described as one [2, ...] view (e.g. two separate allocations with
        # v_cache below k_cache): attend over a copy of just the blocks in use, renumbered.
        bs = k_cache.shape[1]
        _check_block_ids(block_table, seq_lens, bs, k_cache.shape[0])  # libattn only sees the renumbered copy
        nblk = (seq_lens.astype(np.int64) + bs - 1) // bs
        used_mask = np.arange(block_table.shape[1])[None, :] < nblk[:, None]
        used = np.unique(block_table[used_mask]) if used_mask.any() else np.zeros(0, np.int64)
        if used.size == 0 and k_cache.shape[0]:
            used = np.zeros(1, np.int64)  # no keys at all: any one block keeps the cache non-empty
        kv = np.stack([k_cache[used], v_cache[used]])
        block_table = np.where(used_mask, np.searchsorted(used, block_table), 0).astype(np.int32)
    res = ops.paged_attention(q3, kv, query_start_loc, seq_lens, block_table, out=out3,
                              return_lse=want_lse, **kw)
    return res if want_lse else (res, None)


def _check_caches(k_cache: np.ndarray, v_cache: np.ndarray, kname: str, vname: str, what: str) -> None:
    """Both caches 4-D with equal [num_blocks, block_size, nheads_k] and the same dtype."""
    for name, c in ((kname, k_cache), (vname, v_cache)):
        if c.ndim != 4:
            raise ValueError(f"{name}: shape {list(c.shape)}, expected 4-D {what}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"{vname}: shape {list(v_cache.shape)} does not match {kname}: shape "
                         f"{list(k_cache.shape)} in the first three dimensions {what}")
    if k_cache.dtype != v_cache.dtype:
        raise TypeError(f"{vname}: dtype {v_cache.dtype} differs from {kname}: dtype {k_cache.dtype}")


def _check_block_size(block_size: int) -> None:
    """The caches' block size (k_cache.shape[1]) before Python divides by it."""
    if block_size < 1:
        raise ValueError(f"k_cache: shape[1]={block_size} (the block size, or the cache's sequence length without "
                         "a block_table), expected >= 1")


def _check_block_ids(block_table: np.ndarray, seq_lens: np.ndarray, block_size: int, num_blocks: int,
                     name: str = "block_table") -> None:
    """Every block id a sequence uses (the first ceil(seq_len / block_size) of its row) in [0, num_blocks),
    with libattn's message. libattn checks every table it is given (attn_paged_attention); this is only for the
    paths where Python acts on the ids first: a cache write (flash_attn_with_kvcache), one call per sequence
    (per-batch ALiBi, cache_leftpad) or a renumbered copy of the blocks in use (_paged)."""
    _check_block_size(block_size)
    nblk = (seq_lens.astype(np.int64) + block_size - 1) // block_size
    if np.any(nblk > block_table.shape[1]):
        b = int(np.nonzero(nblk > block_table.shape[1])[0][0])
        raise ValueError(f"{name}: row {b} has {block_table.shape[1]} blocks of {block_size}, but sequence "
                         f"{b} needs {int(nblk[b])} for {int(seq_lens[b])} keys")
    used = np.arange(block_table.shape[1])[None, :] < nblk[:, None]
    bad = np.argwhere(used & ((block_table < 0) | (block_table >= num_blocks)))
    if bad.size:
        r, c = (int(x) for x in bad[0])
        v = int(block_table[r, c])
        raise ValueError(f"{name}: entry [{r}][{c}] = {v} {'< 0, expected in [0,' if v < 0 else '>='} "
                         f"num_blocks={num_blocks}{')' if v < 0 else ''}")


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
    A sequence may have more queries than keys (bottom-right causal: its first rows see no key, out 0,
    lse -inf). Paged k/v that are the two halves of one [2, num_blocks, ...] tensor are used in place;
    two separate allocations are attended through a COPY of the blocks in use (not zero-copy).
    alibi_slopes: float32 [nheads] or [batch, nheads] (per-batch: one call per sequence on views).
    Returns out [total_q, nheads, headdim_v]; with return_softmax_lse also softmax_lse float32
    [nheads, total_q]; with return_attn_probs (out, softmax_lse, None). When out is allocated here, rows
    past cu_seqlens_q[-1] are zero (lse -inf); a caller's out keeps its values in those rows."""
    if dropout_p:
        _check_common(dropout_p)
    want_lse = return_attn_probs or return_softmax_lse
    if block_table is None and seqused_k is None and (
            alibi_slopes is None or len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) != 2):
        r = _ext.varlen(_ctx_ptr(ctx), q, k, v, cu_seqlens_q, cu_seqlens_k, True, softmax_scale, causal,
                        window_size, softcap, alibi_slopes, sinks, out, None, want_lse, True, False)
        return (r + (None,)) if return_attn_probs else r
    if block_table is not None and (alibi_slopes is None or len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) != 2):
        r = _ext.varlen_paged(_ctx_ptr(ctx), q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k,
                              softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out, want_lse)
        if r is not _NI:
            return (r + (None,)) if return_attn_probs else r
    kw = dict(softmax_scale=softmax_scale, causal=_flash_causal(causal), window_size=window_size,
              softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, ctx=ctx)
    allocated = out is None
    cu_q = _arrays.index_array(cu_seqlens_q, "cu_seqlens_q")
    if cu_q.ndim != 1 or cu_q.shape[0] < 1:
        raise ValueError(f"cu_seqlens_q: shape {list(cu_q.shape)}, expected [batch + 1]")
    q_shape = _arrays.shape_of(q, "q")
    slopes = _batch_slopes(alibi_slopes, cu_q.shape[0] - 1, q_shape[1] if len(q_shape) == 3 else -1)
    if slopes is not None and block_table is None and seqused_k is None:
        out, lse = _varlen_per_batch(q, k, v, cu_q, cu_seqlens_k, slopes, out, want_lse, kw)
        if allocated:
            _zero_tail(out, lse, int(cu_q[-1]))
        return _finish(out, lse, return_attn_probs, return_softmax_lse)
    if block_table is None and seqused_k is None:
        res = ops.attention_varlen(q, k, v, cu_q, cu_seqlens_k, out=out, return_lse=want_lse, **kw)
        out, lse = res if want_lse else (res, None)
        if allocated:
            _zero_tail(out, lse, int(cu_q[-1]))
        return _finish(out, lse, return_attn_probs, return_softmax_lse)
    if block_table is None:
        raise NotImplementedError("seqused_k without block_table: pass cu_seqlens_k instead")
    qa = _arrays.as_numpy(q, "q")
    ka, va = _arrays.as_numpy(k, "k"), _arrays.as_numpy(v, "v")
    if qa.ndim != 3:
        raise ValueError(f"q: shape {list(qa.shape)}, expected [total_q, nheads, headdim]")
    _check_caches(ka, va, "k", "v", "[num_blocks, block_size, nheads_k, headdim] with block_table")
    batch = cu_q.shape[0] - 1
    cu_k = _arrays.index_array(cu_seqlens_k, "cu_seqlens_k")
    _check_shape("cu_seqlens_k", cu_k.shape, (batch + 1,), f"[batch + 1], batch={batch} from cu_seqlens_q")
    bt = _arrays.index_array(block_table, "block_table")
    _check_shape("block_table", bt.shape, (batch, None), f"[batch, max_blocks], batch={batch}")
    if seqused_k is None:
        seq_lens = np.diff(cu_k).astype(np.int32)
        if seq_lens.size and seq_lens.min() < 0:
            b = int(np.argmin(seq_lens))
            raise ValueError(f"cu_seqlens_k: entry {b + 1} = {int(cu_k[b + 1])} < entry {b} = {int(cu_k[b])}")
    else:
        seq_lens = _arrays.index_array(seqused_k, "seqused_k")
        _check_shape("seqused_k", seq_lens.shape, (batch,), f"[batch], batch={batch}")
        if seq_lens.size and seq_lens.min() < 0:
            b = int(np.argmin(seq_lens))
            raise ValueError(f"seqused_k: entry {b} = {int(seq_lens[b])} is negative")
    out_shape = (qa.shape[0], qa.shape[1], va.shape[3])
    if out is None:
        out = _arrays.empty(q, out_shape, qa.dtype)
    oa = _arrays.as_numpy(out, "out")
    _check_shape("out", oa.shape, out_shape, "[total_q, nheads, headdim_v]")
    if slopes is not None:  # per-batch ALiBi: one paged call per sequence on views
        _check_block_ids(bt, seq_lens, ka.shape[1], ka.shape[0])  # every sequence's, before the first writes
        lse = np.empty((qa.shape[1], qa.shape[0]), np.float32) if want_lse else None
        ops.Params(num_heads=qa.shape[1], **{n: kw[n] for n in kw if n not in ("ctx", "alibi_slopes")})
        for b in range(batch):
            r0, r1 = int(cu_q[b]), int(cu_q[b + 1])
            if r1 <= r0:
                continue
            kwb = dict(kw, alibi_slopes=slopes[b])
            _, lb = _paged(qa[r0:r1], ka, va, np.array([0, r1 - r0], np.int32), seq_lens[b:b + 1],
                           bt[b:b + 1], oa[r0:r1], want_lse, kwb)
            if lse is not None:
                lse[:, r0:r1] = lb
    else:
        o, lse = _paged(qa, ka, va, cu_q, seq_lens, bt, oa, want_lse, kw)
    if lse is not None and _arrays.is_torch(q):
        import torch

        lse = torch.from_numpy(lse)
    if allocated:
        _zero_tail(out, lse, int(cu_q[-1]))
    return _finish(out, lse, return_attn_probs, return_softmax_lse)


def _varlen_per_batch(q: Array, k: Array, v: Array, cu_q: np.ndarray, cu_seqlens_k: Array,
                      slopes: np.ndarray, out: Optional[Array], want_lse: bool,
                      kw: dict) -> Tuple[Any, Any]:
    """flash_attn_varlen_func with per-batch ALiBi slopes [batch, nheads]: one attn_forward_varlen per
    sequence on views of q/k/v/out (no copies). Returns (out, lse or None)."""
    qa, ka, va = (_arrays.as_numpy(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    batch = cu_q.shape[0] - 1
    cu_k = _arrays.index_array(cu_seqlens_k, "cu_seqlens_k")
    _check_shape("cu_seqlens_k", cu_k.shape, (batch + 1,), f"[batch + 1], batch={batch} from cu_seqlens_q")
    if qa.ndim != 3 or ka.ndim != 3 or va.ndim != 3:
        raise ValueError(f"q, k, v: shapes {list(qa.shape)}, {list(ka.shape)}, {list(va.shape)}, expected "
                         "[total_q, nheads, headdim], [total_k, nheads_k, headdim], [total_k, nheads_k, "
                         "headdim_v]")
    for name, cu, total in (("cu_seqlens_q", cu_q, qa.shape[0]), ("cu_seqlens_k", cu_k, ka.shape[0])):
        if cu[0] != 0 or np.any(np.diff(cu.astype(np.int64)) < 0) or cu[-1] > total:
            raise ValueError(f"{name}: {cu.tolist()} must start at 0, not decrease and end <= {total}")
    out_shape = (qa.shape[0], qa.shape[1], va.shape[2])
    if out is None:
        out = _arrays.empty(q, out_shape, qa.dtype)
    oa = _arrays.as_numpy(out, "out")
    _check_shape("out", oa.shape, out_shape, "[total_q, nheads, headdim_v]")
    lse = _arrays.empty(q, (qa.shape[1], qa.shape[0]), np.float32) if want_lse else None
    la = None if lse is None else _arrays.as_numpy(lse)
    ops.Params(num_heads=qa.shape[1], **{n: kw[n] for n in kw if n not in ("ctx", "alibi_slopes")})
    for b in range(batch):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 == q0:
            continue
        lb = None if la is None else la[:, q0:q1]
        if k1 == k0:
            _empty_rows(oa[q0:q1], lb)
            continue
        ops.attention_varlen(qa[q0:q1], ka[k0:k1], va[k0:k1], np.array([0, q1 - q0], np.int32),
                             np.array([0, k1 - k0], np.int32), out=oa[q0:q1], lse=lb,
                             **dict(kw, alibi_slopes=slopes[b]))
    return out, lse


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
                            q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
                            ctx: Optional[Context] = None) -> Any:
    """Attention of new queries against a KV cache, appending k/v to the cache first (in place).

    q: [batch, seqlen_q, nheads, headdim].
    k_cache, v_cache: [batch_cache, seqlen_cache, nheads_k, headdim] (contiguous per batch row), or paged
    [num_blocks, page_block_size, nheads_k, headdim] when block_table int32 [batch, max_blocks] is given.
    k, v (optional): [batch, seqlen_new, nheads_k, headdim], written at positions cache_seqlens[b] ...
    cache_seqlens[b] + seqlen_new - 1 of sequence b (through libattn's reshape_and_cache).
    cache_seqlens: int or int32 [batch], keys already in the cache (default: the whole cache); >= 0 and
    cache_seqlens[b] + seqlen_new <= the cache capacity, checked before anything is written.
    cache_batch_idx: int32 [batch], the cache row of each batch element (non-paged only; without it
    batch_cache >= batch and row b serves batch element b).
    Causal is bottom-right over cache_seqlens[b] + seqlen_new keys; seqlen_q may exceed that count (the
    first rows then see no key: out 0, lse -inf).
    cache_leftpad: int32 [batch] (flash-attn): the keys of sequence b are cache positions
    cache_leftpad[b] ... cache_seqlens[b] + seqlen_new - 1 (cache_seqlens counts the padding); positions
    below are never read, and causal masks and ALiBi count from the first real key. 0 <= cache_leftpad[b]
    <= cache_seqlens[b]. With block_table the keys in use are gathered (a COPY); flash-attn 2 rejects it. Not
    with an fp8 cache (ValueError naming cache_leftpad, before anything is written).
    rotary_cos, rotary_sin: [seqlen_ro, rotary_dim / 2] (flash-attn; any float dtype, computed in float32):
    q and the new k are rotated on their first rotary_dim features before the cache write (k itself is
    not modified), interleaved (GPT-J pairs 2i, 2i+1; the default) or not (GPT-NeoX halves). The new key
    j sits at position cache_seqlens[b] + j; query i at cache_seqlens[b] + i when causal or a window is
    set, else at cache_seqlens[b]. Needs k and v (as flash-attn); every position used must be < seqlen_ro.
    alibi_slopes: float32 [nheads] or [batch, nheads].
    k_cache/v_cache that are the two halves of one tensor (kv[0], kv[1]) are used in place (zero-copy);
    two separate allocations are written in place, but attention then runs over a COPY of the blocks in
    use (not zero-copy; allocate one [2, ...] tensor to avoid it).
    fp8 caches (torch float8_e4m3fn / float8_e5m2, or ml_dtypes): k_descale / v_descale (flash-attn 3) give the
    scales, key = fp8(k_cache)·k_descale, value = fp8(v_cache)·v_descale; new k/v are stored as fp8(k / k_descale)
    (attn_reshape_and_cache_ex). Each is a number or a 0-d / one-element float array (one scale per tensor), a
    float array [nheads_k] (one scale per KV head: head g reads fp8·k_descale[g] and stores fp8(k / k_descale[g]);
    attn_params.k_scales), or flash-attn 3's [batch, nheads_k] whose rows must all be equal (attn has one scale
    per KV head for the whole cache, not per sequence), then its first row is used; any other shape, unequal
    rows, or an entry that is not finite and > 0 raises ValueError naming the argument. None means 1. Float
    caches ignore them (as vLLM's "auto" cache ignores k_scale/v_scale; the shapes are still checked). Per-head
    scales take the Python path (the compiled fast path takes per-tensor scales only). q_descale:
    attn has no fp8 queries (q is in a float dtype), so anything but None or all ones raises ValueError naming
    q_descale.
    Returns out [batch, seqlen_q, nheads, headdim_v]; with return_softmax_lse also softmax_lse float32
    [batch, nheads, seqlen_q]."""
    k_sc, v_sc = _descales(q_descale, k_descale, v_descale, q, k_cache)
    if (rotary_cos is None and rotary_sin is None and cache_leftpad is None and _unit(k_sc) and _unit(v_sc)
            and (alibi_slopes is None or len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) != 2)):
        r = _ext.kvcache(_ctx_ptr(ctx), q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                         softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out,
                         bool(return_softmax_lse))
        if r is not _NI:
            return r
    qa = _arrays.as_numpy(q, "q")
    kc, vc = _arrays.as_numpy(k_cache, "k_cache"), _arrays.as_numpy(v_cache, "v_cache")
    if qa.ndim != 4:
        raise ValueError(f"q: shape {list(qa.shape)}, expected [batch, seqlen_q, nheads, headdim]")
    layout = ("[num_blocks, page_block_size, nheads_k, headdim]" if block_table is not None
              else "[batch_cache, seqlen_cache, nheads_k, headdim]")
    _check_caches(kc, vc, "k_cache", "v_cache", layout)
    batch, seqlen_q, nheads = qa.shape[0], qa.shape[1], qa.shape[2]
    block_size = kc.shape[1]
    if block_table is not None:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx cannot be used with block_table")
        bt = _arrays.index_array(block_table, "block_table")
        _check_shape("block_table", bt.shape, (batch, None), f"[batch, max_blocks], batch={batch}")
        capacity = bt.shape[1] * block_size
    else:
        if cache_batch_idx is None:
            if kc.shape[0] < batch:
                raise ValueError(f"k_cache: batch_cache={kc.shape[0]} < batch={batch} (shape "
                                 f"{list(kc.shape)}); pass cache_batch_idx to map batch rows to cache rows")
            rows = np.arange(batch, dtype=np.int32)
        else:
            rows = _arrays.index_array(cache_batch_idx, "cache_batch_idx").reshape(-1)
            _check_shape("cache_batch_idx", rows.shape, (batch,), f"[batch], batch={batch}")
            bad = np.nonzero((rows < 0) | (rows >= kc.shape[0]))[0]
            if bad.size:
                raise ValueError(f"cache_batch_idx: entry {int(bad[0])} = {int(rows[bad[0]])} is not a row "
                                 f"of k_cache (batch_cache={kc.shape[0]})")
        bt = np.ascontiguousarray(rows.astype(np.int32).reshape(-1, 1))  # blocks of seqlen_cache rows
        capacity = block_size
    if cache_seqlens is None:
        seqlens = np.full(batch, capacity, dtype=np.int32)
    else:
        seqlens = _arrays.index_array(cache_seqlens, "cache_seqlens")
        if seqlens.ndim == 0:
            seqlens = np.full(batch, int(seqlens), dtype=np.int32)
        _check_shape("cache_seqlens", seqlens.shape, (batch,), f"an int or [batch], batch={batch}")
        seqlens = seqlens.astype(np.int32)
    if seqlens.size and seqlens.min() < 0:
        b = int(np.argmin(seqlens))
        raise ValueError(f"cache_seqlens: entry {b} = {int(seqlens[b])} is negative")
    seqlen_new = 0
    if k is not None or v is not None:
        if k is None or v is None:
            raise ValueError("k and v must be given together")
        ka, va = _arrays.as_numpy(k, "k"), _arrays.as_numpy(v, "v")
        if ka.ndim != 4:
            raise ValueError(f"k: shape {list(ka.shape)}, expected [batch={batch}, seqlen_new, "
                             f"nheads_k={kc.shape[2]}, headdim={kc.shape[3]}]")
        seqlen_new = ka.shape[1]
        _check_shape("k", ka.shape, (batch, seqlen_new, kc.shape[2], kc.shape[3]),
                     "[batch, seqlen_new, nheads_k, headdim] of q and k_cache")
        _check_shape("v", va.shape, (batch, seqlen_new, vc.shape[2], vc.shape[3]),
                     "[batch, seqlen_new, nheads_k, headdim_v] of k and v_cache")
        if ka.dtype != va.dtype:
            raise TypeError(f"v: dtype {va.dtype} differs from k: dtype {ka.dtype}")
    seq_lens = (seqlens.astype(np.int64) + seqlen_new)
    if seq_lens.size and seq_lens.max() > capacity:
        b = int(np.argmax(seq_lens))
        raise ValueError(f"cache_seqlens: entry {b} = {int(seqlens[b])} + seqlen_new={seqlen_new} exceeds "
                         f"the cache capacity {capacity}")
    seq_lens = seq_lens.astype(np.int32)
    leftpad = None
    if cache_leftpad is not None:
        leftpad = _arrays.index_array(cache_leftpad, "cache_leftpad")
        _check_shape("cache_leftpad", leftpad.shape, (batch,), f"[batch], batch={batch}")
        bad = np.nonzero((leftpad < 0) | (leftpad > seqlens))[0]
        if bad.size:
            b = int(bad[0])
            raise ValueError(f"cache_leftpad: entry {b} = {int(leftpad[b])} is outside [0, cache_seqlens[{b}]"
                             f" = {int(seqlens[b])}]")
    slopes = _batch_slopes(alibi_slopes, batch, nheads)
    if block_table is not None and (seqlen_new or leftpad is not None or slopes is not None):
        _check_block_ids(bt, seq_lens, block_size, kc.shape[0])  # before the cache write and per-batch calls
    causal = _flash_causal(causal)
    if rotary_cos is not None or rotary_sin is not None:
        qa, ka = _rotate_q_k(qa, ka if seqlen_new else None, rotary_cos, rotary_sin, rotary_interleaved,
                             seqlens, causal, window_size, capacity)
    out_shape = (batch, seqlen_q, nheads, vc.shape[3])
    if out is not None:
        _check_shape("out", _arrays.shape_of(out, "out"), out_shape, "[batch, seqlen_q, nheads, headdim_v]")
        _arrays.tensor(out, "out", True)
    kw = dict(softmax_scale=softmax_scale, causal=causal, window_size=window_size,
              softcap=softcap, alibi_slopes=None if slopes is not None else alibi_slopes, sinks=sinks,
              ctx=ctx)
    scales = {}
    fp8 = ops.is_fp8_cache(kc, None)
    if leftpad is not None and fp8:  # checked before the cache write (the dense entry takes no fp8 keys)
        raise ValueError("cache_leftpad: not supported with an fp8 cache (the left-padded keys are attended by the "
                         "dense entry, which reads no fp8 keys)")
    if not (_unit(k_sc) and _unit(v_sc)) and fp8:
        scales = dict(k_scale=k_sc, v_scale=v_sc)  # float caches ignore the descales
        kw.update(scales)
    ops.Params(num_heads=nheads, num_kv_heads=kc.shape[2],
               **{n: kw[n] for n in kw if n != "ctx"})  # option errors: before writes
    _arrays.tensor(qa, "q"), _arrays.tensor(kc, "k_cache", True), _arrays.tensor(vc, "v_cache", True)
    if seqlen_new:
        _arrays.tensor(ka, "k"), _arrays.tensor(va, "v")  # dtypes
    # Everything is checked: from here on, writing the cache cannot fail on the arguments.
    kv = _kv_view(kc, vc)
    if seqlen_new:
        pos = seqlens[:, None].astype(np.int64) + np.arange(seqlen_new, dtype=np.int64)[None, :]
        blk = np.take_along_axis(bt.astype(np.int64), pos // block_size, axis=1)
        slots = (blk * block_size + pos % block_size).reshape(-1)
        k3 = ka.reshape(batch * seqlen_new, ka.shape[2], ka.shape[3])
        v3 = va.reshape(batch * seqlen_new, va.shape[2], va.shape[3])
        if kv is not None:
            ops.reshape_and_cache(k3, v3, kv, slots, ctx=ctx, **scales)
        else:  # two separate caches: write each through a [2, ...] view with aliased halves
            ops.reshape_and_cache(k3, k3, doubled(kc), slots, ctx=ctx,
                                  **({} if not scales else dict(k_scale=k_sc, v_scale=k_sc)))
            ops.reshape_and_cache(v3, v3, doubled(vc), slots, ctx=ctx,
                                  **({} if not scales else dict(k_scale=v_sc, v_scale=v_sc)))
    if out is None:
        out = _arrays.empty(q, out_shape, qa.dtype)
    oa = _arrays.as_numpy(out, "out")
    if leftpad is not None or slopes is not None:
        return _kvcache_per_batch(q, qa, kc, vc, bt, seq_lens, leftpad, slopes, block_table is not None,
                                  out, oa, return_softmax_lse, kw)
    q3 = qa.reshape(batch * seqlen_q, nheads, qa.shape[3])
    qsl = (np.arange(batch + 1, dtype=np.int32) * seqlen_q).astype(np.int32)
    o3 = _view3(oa, (batch * seqlen_q, nheads, oa.shape[-1]))
    res, lse3 = _paged(q3, kc, vc, qsl, seq_lens, bt, o3, return_softmax_lse, kw)
    if o3 is None:  # out was not reshapeable in place
        oa[...] = res.reshape(oa.shape)
    if not return_softmax_lse:
        return out
    lse = _arrays.empty(q, (batch, nheads, seqlen_q), np.float32)
    _arrays.as_numpy(lse)[...] = lse3.reshape(nheads, batch, seqlen_q).transpose(1, 0, 2)
    return out, lse


def _unit(s: Any) -> bool:
    """True for the per-tensor scale 1 (a float), False for another value or a per-head array."""
    return not isinstance(s, np.ndarray) and s == 1.0


def _descale_array(name: str, x: Any) -> np.ndarray:
    try:
        return np.asarray(_arrays.as_numpy(x, name) if not isinstance(x, (int, float)) else x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: expected a number or a float array, got {type(x).__name__}") from e


def _descale(name: str, x: Any, num_kv_heads: Optional[int]) -> Any:
    """The scale of a flash-attn 3 descale argument (None: 1): a float (a number, a 0-d or one-element array), or
    a float32 [num_kv_heads] array (per KV head: an array [num_kv_heads], or flash-attn 3's [batch,
    num_kv_heads] whose rows are all equal). Every entry finite and > 0; ValueError naming the argument
    otherwise."""
    if x is None:
        return 1.0
    a = _descale_array(name, x)
    if a.size == 0:
        raise ValueError(f"{name}: is empty")
    bad = np.nonzero(~(np.isfinite(a) & (a > 0)).reshape(-1))[0]
    if bad.size:
        raise ValueError(f"{name}={float(a.reshape(-1)[bad[0]])}: must be finite and > 0")
    if a.size == 1:
        return float(a.reshape(-1)[0])
    if a.ndim == 2 and a.shape[1] == num_kv_heads:
        if not np.all(a == a[:1]):
            r = int(np.nonzero(np.any(a != a[:1], axis=1))[0][0])
            raise ValueError(f"{name}: row {r} differs from row 0 (shape {list(a.shape)} = [batch, nheads_k]); attn "
                             "has one scale per KV head for the whole cache, not per (batch, head)")
        a = a[0]
    if a.ndim != 1 or a.shape[0] != num_kv_heads:
        raise ValueError(f"{name}: shape {list(a.shape)}, expected a scalar, [nheads_k] = [{num_kv_heads}] or "
                         f"[batch, nheads_k] with equal rows")
    return np.ascontiguousarray(a, dtype=np.float32)


def _descales(q_descale: Any, k_descale: Any, v_descale: Any, q: Any, k_cache: Any) -> Tuple[Any, Any]:
    """(k_scale, v_scale) of flash_attn_with_kvcache's descale arguments (floats or float32 [nheads_k] arrays);
    q_descale must be None or all ones: attn has no fp8 queries."""
    if q_descale is not None:
        a = _descale_array("q_descale", q_descale)
        if a.size == 0 or not np.all(a == 1.0):
            raise ValueError("q_descale: fp8 queries are not supported (q is in a float dtype: dequantize it "
                             "first); pass None or ones")
    shape = _arrays.shape_of(k_cache, "k_cache")
    hk = int(shape[2]) if len(shape) == 4 else None
    return _descale("k_descale", k_descale, hk), _descale("v_descale", v_descale, hk)


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, pos: np.ndarray,
            interleaved: bool) -> np.ndarray:
    """x [batch, seqlen, nheads, headdim] rotated as flash-attn's apply_rotary_emb: the first rotary_dim =
    2·cos.shape[1] features, feature pair j (2j, 2j+1 interleaved; j, j + rotary_dim/2 otherwise) of the
    row at position p turned by the angle whose cos/sin are cos[p, j], sin[p, j]; arithmetic in float32,
    the result (a new array) in x's dtype. pos: int64 [batch, seqlen]."""
    half = cos.shape[1]
    c, s = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
    xf = x.astype(np.float32)
    i1, i2 = (slice(0, 2 * half, 2), slice(1, 2 * half, 2)) if interleaved else \
        (slice(0, half), slice(half, 2 * half))
    x1, x2 = xf[..., i1].copy(), xf[..., i2].copy()
    xf[..., i1] = x1 * c - x2 * s
    xf[..., i2] = x2 * c + x1 * s
    return xf.astype(x.dtype)


def _rotate_q_k(qa: np.ndarray, ka: Optional[np.ndarray], rotary_cos: Any, rotary_sin: Any,
                interleaved: bool, seqlens: np.ndarray, causal: bool, window_size: Any,
                seqlen_k: int) -> Tuple[np.ndarray, np.ndarray]:
    """flash_attn_with_kvcache's rotary embedding: rotated copies of q and the new keys k (see its
    docstring). Checks everything before returning (nothing is written yet)."""
    if rotary_cos is None or rotary_sin is None:
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if ka is None:
        raise ValueError("rotary_cos/rotary_sin: rotary embedding needs the new k and v to append (as in "
                         "flash-attn)")
    cos = np.asarray(_arrays.as_numpy(rotary_cos, "rotary_cos"), np.float32)
    sin = np.asarray(_arrays.as_numpy(rotary_sin, "rotary_sin"), np.float32)
    if cos.ndim != 2 or cos.shape[1] < 1 or 2 * cos.shape[1] > qa.shape[3]:
        raise ValueError(f"rotary_cos: shape {list(cos.shape)}, expected [seqlen_ro, rotary_dim / 2] with "
                         f"1 <= rotary_dim / 2 <= headdim / 2 = {qa.shape[3] // 2}")
    _check_shape("rotary_sin", sin.shape, cos.shape, "[seqlen_ro, rotary_dim / 2] of rotary_cos")
    left, right = ops._window_value(window_size)
    # flash-attn: window bounds >= seqlen_k are unbounded; queries take consecutive positions when the
    # mask depends on them (causal or local), else all sit at cache_seqlens.
    local = 0 <= left < seqlen_k or 0 <= right < seqlen_k
    base = seqlens.astype(np.int64)[:, None]
    q_pos = base + (np.arange(qa.shape[1], dtype=np.int64)[None, :] if causal or local else 0)
    q_pos = np.broadcast_to(q_pos, qa.shape[:2])
    k_pos = base + np.arange(ka.shape[1], dtype=np.int64)[None, :]
    need = int(max(q_pos.max(initial=-1), k_pos.max(initial=-1))) + 1
    if need > cos.shape[0]:
        raise ValueError(f"rotary_cos: seqlen_ro={cos.shape[0]} rows, but positions up to {need - 1} are "
                         "used (cache_seqlens + seqlen_new or seqlen_q)")
    return _rotate(qa, cos, sin, q_pos, bool(interleaved)), _rotate(ka, cos, sin, k_pos, bool(interleaved))


def _kvcache_per_batch(q: Array, qa: np.ndarray, kc: np.ndarray, vc: np.ndarray, bt: np.ndarray,
                       seq_lens: np.ndarray, leftpad: Optional[np.ndarray], slopes: Optional[np.ndarray],
                       paged: bool, out: Any, oa: np.ndarray, want_lse: bool, kw: dict) -> Any:
    """The attention step of flash_attn_with_kvcache (cache already written) one sequence at a time: for
    per-batch ALiBi slopes and for cache_leftpad. Without leftpad: one paged call per sequence on views.
    With leftpad: dense attention over keys cache_leftpad[b] ... seq_lens[b] - 1 (views of a contiguous
    cache row; gathered copies through a block table)."""
    batch, block_size = qa.shape[0], kc.shape[1]
    lse = _arrays.empty(q, (batch, qa.shape[2], qa.shape[1]), np.float32) if want_lse else None
    la = None if lse is None else _arrays.as_numpy(lse)
    for b in range(batch):
        kwb = kw if slopes is None else dict(kw, alibi_slopes=slopes[b])
        lb = None if la is None else la[b:b + 1]
        if leftpad is None:
            _, l3 = _paged(qa[b], kc, vc, np.array([0, qa.shape[1]], np.int32), seq_lens[b:b + 1],
                           bt[b:b + 1], oa[b], want_lse, kwb)
            if lb is not None:
                lb[0] = l3
            continue
        lo, hi = int(leftpad[b]), int(seq_lens[b])
        if hi == lo:
            _empty_rows(oa[b], lb)
            continue
        if paged:
            pos = np.arange(lo, hi, dtype=np.int64)
            blk, off = bt[b].astype(np.int64)[pos // block_size], pos % block_size
            kb, vb = kc[blk, off], vc[blk, off]
        else:
            kb, vb = kc[int(bt[b, 0]), lo:hi], vc[int(bt[b, 0]), lo:hi]
        ops.attention(qa[b:b + 1], kb[None], vb[None], out=oa[b:b + 1], lse=lb, **kwb)
    return (out, lse) if want_lse else out


# ------------------------------------------------------------------------------------------------
# Packed q/k/v (flash-attn's *_qkvpacked_func / *_kvpacked_func): zero-copy views, then the above
# ------------------------------------------------------------------------------------------------
def _unpack(x: Array, name: str, axis: int, parts: int, what: str) -> tuple:
    """Views x[..., i, ...] (i < parts) along ``axis`` (no copies; torch tensors stay torch)."""
    shape = _arrays.shape_of(x, name)
    if len(shape) != axis + 3 or shape[axis] != parts:
        raise ValueError(f"{name}: shape {list(shape)}, expected {what}")
    idx = (slice(None),) * axis
    return tuple(x[idx + (i,)] for i in range(parts))


def flash_attn_qkvpacked_func(qkv: Array, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                              softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                              deterministic: bool = False, return_attn_probs: bool = False, *,
                              return_softmax_lse: bool = False, out: Optional[Array] = None,
                              sinks: Optional[Array] = None, ctx: Optional[Context] = None) -> Any:
    """flash_attn_func on qkv [batch, seqlen, 3, nheads, headdim] (q, k, v = qkv[:, :, 0/1/2], views)."""
    q, k, v = _unpack(qkv, "qkv", 2, 3, "[batch, seqlen, 3, nheads, headdim]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, return_softmax_lse=return_softmax_lse,
                           out=out, sinks=sinks, ctx=ctx)


def flash_attn_kvpacked_func(q: Array, kv: Array, dropout_p: float = 0.0,
                             softmax_scale: Optional[float] = None, causal: bool = False,
                             window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             alibi_slopes: Optional[Array] = None, deterministic: bool = False,
                             return_attn_probs: bool = False, *, return_softmax_lse: bool = False,
                             out: Optional[Array] = None, sinks: Optional[Array] = None,
                             ctx: Optional[Context] = None) -> Any:
    """flash_attn_func on q and kv [batch, seqlen_k, 2, nheads_k, headdim] (k, v = kv[:, :, 0/1], views)."""
    k, v = _unpack(kv, "kv", 2, 2, "[batch, seqlen_k, 2, nheads_k, headdim]")
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs, return_softmax_lse=return_softmax_lse,
                           out=out, sinks=sinks, ctx=ctx)


def flash_attn_varlen_qkvpacked_func(qkv: Array, cu_seqlens: Array, max_seqlen: Optional[int] = None,
                                     dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                     causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                     softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                                     deterministic: bool = False, return_attn_probs: bool = False, *,
                                     return_softmax_lse: bool = False, out: Optional[Array] = None,
                                     sinks: Optional[Array] = None, ctx: Optional[Context] = None) -> Any:
    """flash_attn_varlen_func on qkv [total, 3, nheads, headdim] with one cu_seqlens int32 [batch + 1]
    for queries and keys (q, k, v = qkv[:, 0/1/2], views)."""
    q, k, v = _unpack(qkv, "qkv", 1, 3, "[total, 3, nheads, headdim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs, return_softmax_lse=return_softmax_lse, out=out,
                                  sinks=sinks, ctx=ctx)


def flash_attn_varlen_kvpacked_func(q: Array, kv: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                                    max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
                                    dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                                    softcap: float = 0.0, alibi_slopes: Optional[Array] = None,
                                    deterministic: bool = False, return_attn_probs: bool = False, *,
                                    return_softmax_lse: bool = False, out: Optional[Array] = None,
                                    sinks: Optional[Array] = None, ctx: Optional[Context] = None) -> Any:
    """flash_attn_varlen_func on q [total_q, nheads, headdim] and kv [total_k, 2, nheads_k, headdim]
    (k, v = kv[:, 0/1], views)."""
    k, v = _unpack(kv, "kv", 1, 2, "[total_k, 2, nheads_k, headdim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                                  deterministic, return_attn_probs, return_softmax_lse=return_softmax_lse,
                                  out=out, sinks=sinks, ctx=ctx)
