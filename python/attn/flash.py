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
    # Per-batch slopes: one call per batch element on views (no copies of q/k/v).
    qa, ka, va = (_arrays.as_numpy(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    if qa.ndim != 4:
        raise ValueError(f"q: shape {list(qa.shape)}, expected [batch, seqlen_q, nheads, headdim]")
    slopes = _batch_slopes(alibi_slopes, qa.shape[0], qa.shape[2])
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
    lse -inf). Paged k/v are read in place, whether they are the two halves of one [2, num_blocks, ...] tensor
    or two allocations with the same strides (caches whose strides differ: a COPY into one buffer first).
    alibi_slopes: float32 [nheads] or [batch, nheads] (per-batch: one call per sequence on views).
    Returns out [total_q, nheads, headdim_v]; with return_softmax_lse also softmax_lse float32
    [nheads, total_q]; with return_attn_probs (out, softmax_lse, None). When out is allocated here, rows
    past cu_seqlens_q[-1] are zero (lse -inf); a caller's out keeps its values in those rows."""
    if dropout_p:
        _check_common(dropout_p)
    want_lse = return_attn_probs or return_softmax_lse
    if alibi_slopes is not None and len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) == 2:
        r = _varlen_per_batch(q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k, alibi_slopes, out,
                              want_lse, (softmax_scale, causal, window_size, softcap), sinks, ctx)
    elif block_table is not None:
        r = _ext.varlen_paged(_ctx_ptr(ctx), q, k, v, cu_seqlens_q, cu_seqlens_k, block_table, seqused_k,
                              softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out, want_lse)
    elif seqused_k is not None:
        raise NotImplementedError("seqused_k without block_table: pass cu_seqlens_k instead")
    else:
        r = _ext.varlen(_ctx_ptr(ctx), q, k, v, cu_seqlens_q, cu_seqlens_k, True, softmax_scale, causal,
                        window_size, softcap, alibi_slopes, sinks, out, None, want_lse, False)
    return (r + (None,)) if return_attn_probs else r


def _varlen_per_batch(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array,
                      block_table: Optional[Array], seqused_k: Optional[Array], alibi_slopes: Array,
                      out: Optional[Array], want_lse: bool, opts: tuple, sinks: Optional[Array],
                      ctx: Optional[Context]) -> Any:
    """flash_attn_varlen_func with per-batch ALiBi slopes [batch, nheads] (libattn takes one slope per head): one
    call per sequence on views of q / out (and of k / v without a block table), no copies. Returns out or
    (out, lse)."""
    qa = _arrays.as_numpy(q, "q")
    cu_q, cu_k = _arrays.index_array(cu_seqlens_q, "cu_seqlens_q"), _arrays.index_array(cu_seqlens_k, "cu_seqlens_k")
    if qa.ndim != 3 or cu_q.ndim != 1 or cu_q.shape[0] < 1 or cu_k.shape != cu_q.shape:
        raise ValueError(f"q: shape {list(qa.shape)}, cu_seqlens_q / cu_seqlens_k: shapes {list(cu_q.shape)}, "
                         f"{list(cu_k.shape)}; expected [total_q, nheads, headdim] and [batch + 1] each")
    batch = cu_q.shape[0] - 1
    slopes = _batch_slopes(alibi_slopes, batch, qa.shape[1])
    ka, va = _arrays.as_numpy(k, "k"), _arrays.as_numpy(v, "v")
    for name, cu, total in (("cu_seqlens_q", cu_q, qa.shape[0]), ("cu_seqlens_k", cu_k, None)):
        if cu[0] != 0 or np.any(np.diff(cu.astype(np.int64)) < 0) or (total is not None and cu[-1] > total):
            raise ValueError(f"{name}: {cu.tolist()} must start at 0, not decrease and end <= {total}")
    if out is None:
        out = _arrays.empty(q, qa.shape[:2] + (va.shape[-1],), qa.dtype)
    oa = _arrays.as_numpy(out, "out")
    lse = _arrays.empty(q, (qa.shape[1], qa.shape[0]), np.float32) if want_lse else None
    la = None if lse is None else _arrays.as_numpy(lse)
    if la is not None:
        la[...] = -np.inf
    bt = None if block_table is None else _arrays.index_array(block_table, "block_table")
    lens = np.diff(cu_k) if seqused_k is None else _arrays.index_array(seqused_k, "seqused_k")
    c, one = _ctx_ptr(ctx), np.zeros(2, np.int32)
    for b in range(batch):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 == q0:
            continue
        cq = np.array([0, q1 - q0], np.int32)
        if bt is None:
            r = _ext.varlen(c, qa[q0:q1], ka[k0:k1], va[k0:k1], cq, np.array([0, k1 - k0], np.int32), True, *opts,
                            slopes[b], sinks, oa[q0:q1], None, want_lse, False)
        else:
            one[1] = lens[b]
            r = _ext.varlen_paged(c, qa[q0:q1], k, v, cq, one, bt[b:b + 1], None, *opts, slopes[b], sinks,
                                  oa[q0:q1], want_lse)
        if la is not None:
            la[:, q0:q1] = _arrays.as_numpy(r[1])
    return (out, lse) if want_lse else out


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
    <= cache_seqlens[b]. Also with block_table (flash-attn 2 rejects it) and fp8 caches.
    rotary_cos, rotary_sin: [seqlen_ro, rotary_dim / 2] (flash-attn; any float dtype, computed in float32):
    q and the new k are rotated on their first rotary_dim features before the cache write (k itself is
    not modified), interleaved (GPT-J pairs 2i, 2i+1; the default) or not (GPT-NeoX halves). The new key
    j sits at position cache_seqlens[b] + j; query i at cache_seqlens[b] + i when causal or a window is
    set, else at cache_seqlens[b]. Needs k and v (as flash-attn); every position used must be < seqlen_ro.
    alibi_slopes: float32 [nheads] or [batch, nheads].
    k_cache/v_cache are read and written in place (zero-copy), whether they are the two halves of one tensor
    (kv[0], kv[1]) or two allocations, as long as their strides are equal; caches whose strides differ are
    attended through a COPY of both joined into one [2, ...] buffer (written back when k/v are appended).
    fp8 caches (torch float8_e4m3fn / float8_e5m2, or ml_dtypes): k_descale / v_descale (flash-attn 3) give the
    scales, key = fp8(k_cache)·k_descale, value = fp8(v_cache)·v_descale; new k/v are stored as fp8(k / k_descale)
    (attn_reshape_and_cache_ex). Each is a number or a 0-d / one-element float array (one scale per tensor), a
    float array [nheads_k] (one scale per KV head: head g reads fp8·k_descale[g] and stores fp8(k / k_descale[g]);
    attn_params.k_scales), or flash-attn 3's [batch, nheads_k] whose rows must all be equal (attn has one scale
    per KV head for the whole cache, not per sequence), then its first row is used; any other shape, unequal
    rows, or an entry that is not finite and > 0 raises ValueError naming the argument. None means 1. Float
    caches ignore them (as vLLM's "auto" cache ignores k_scale/v_scale; the shapes are still checked). q_descale:
    attn has no fp8 queries (q is in a float dtype), so anything but None or all ones raises ValueError naming
    q_descale.
    Returns out [batch, seqlen_q, nheads, headdim_v]; with return_softmax_lse also softmax_lse float32
    [batch, nheads, seqlen_q]."""
    k_sc = v_sc = None
    if q_descale is not None or k_descale is not None or v_descale is not None:
        k_sc, v_sc = _descales(q_descale, k_descale, v_descale, q, k_cache)
    if rotary_cos is not None or rotary_sin is not None:
        q, k = _rotate_q_k(q, k, k_cache, block_table, cache_seqlens, rotary_cos, rotary_sin, rotary_interleaved,
                           _flash_causal(causal), window_size)
    if alibi_slopes is not None and len(_arrays.shape_of(alibi_slopes, "alibi_slopes")) == 2:
        alibi_slopes = np.ascontiguousarray(_arrays.as_numpy(alibi_slopes, "alibi_slopes"), np.float32)
    return _ext.kvcache(_ctx_ptr(ctx), q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                        softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out, return_softmax_lse,
                        cache_leftpad, k_sc, v_sc)


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


def _rotate_q_k(q: Array, k: Optional[Array], k_cache: Array, block_table: Optional[Array], cache_seqlens: Any,
                rotary_cos: Any, rotary_sin: Any, interleaved: bool, causal: bool, window_size: Any) -> Tuple[Any, Any]:
    """flash_attn_with_kvcache's rotary embedding: rotated copies of q (q's array type) and of the new keys k (see
    its docstring). Nothing is written."""
    if rotary_cos is None or rotary_sin is None:
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if k is None:
        raise ValueError("rotary_cos/rotary_sin: rotary embedding needs the new k and v to append (as in "
                         "flash-attn)")
    qa, ka = _arrays.as_numpy(q, "q"), _arrays.as_numpy(k, "k")
    if qa.ndim != 4 or ka.ndim != 4 or ka.shape[0] != qa.shape[0]:
        raise ValueError(f"q, k: shapes {list(qa.shape)}, {list(ka.shape)}, expected [batch, seqlen_q, nheads, "
                         "headdim] and [batch, seqlen_new, nheads_k, headdim]")
    cos = np.asarray(_arrays.as_numpy(rotary_cos, "rotary_cos"), np.float32)
    sin = np.asarray(_arrays.as_numpy(rotary_sin, "rotary_sin"), np.float32)
    if cos.ndim != 2 or cos.shape[1] < 1 or 2 * cos.shape[1] > qa.shape[3]:
        raise ValueError(f"rotary_cos: shape {list(cos.shape)}, expected [seqlen_ro, rotary_dim / 2] with "
                         f"1 <= rotary_dim / 2 <= headdim / 2 = {qa.shape[3] // 2}")
    _check_shape("rotary_sin", sin.shape, cos.shape, "[seqlen_ro, rotary_dim / 2] of rotary_cos")
    cache_shape = _arrays.shape_of(k_cache, "k_cache")
    seqlen_k = int(cache_shape[1]) * (1 if block_table is None else
                                      int(_arrays.shape_of(block_table, "block_table")[-1]))
    base = (seqlen_k if cache_seqlens is None else _arrays.index_array(cache_seqlens, "cache_seqlens"))
    base = np.broadcast_to(np.asarray(base, np.int64).reshape(-1, 1), (qa.shape[0], 1))
    left, right = ops._window_value(window_size)
    # flash-attn: window bounds >= seqlen_k are unbounded; queries take consecutive positions when the
    # mask depends on them (causal or local), else all sit at cache_seqlens.
    local = causal or 0 <= left < seqlen_k or 0 <= right < seqlen_k
    q_pos = base + (np.arange(qa.shape[1], dtype=np.int64)[None, :] if local else 0)
    q_pos = np.broadcast_to(q_pos, qa.shape[:2])
    k_pos = base + np.arange(ka.shape[1], dtype=np.int64)[None, :]
    need = int(max(q_pos.max(initial=-1), k_pos.max(initial=-1))) + 1
    if need > cos.shape[0] or min(q_pos.min(initial=0), k_pos.min(initial=0)) < 0:
        raise ValueError(f"rotary_cos: seqlen_ro={cos.shape[0]} rows, but positions up to {need - 1} are "
                         "used (cache_seqlens + seqlen_new or seqlen_q)")
    q_ro = _arrays.empty(q, qa.shape, qa.dtype)
    _arrays.as_numpy(q_ro)[...] = _rotate(qa, cos, sin, q_pos, bool(interleaved))
    return q_ro, _rotate(ka, cos, sin, k_pos, bool(interleaved))


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
