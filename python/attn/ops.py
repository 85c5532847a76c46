"""Thin, complete bindings of the libattn C API (include/attn/attn.h), one Python function per entry.

Arrays are NumPy arrays (bfloat16 / float8 through ml_dtypes) or any DLPack producer (torch CPU tensors),
used in place: strides are honoured, nothing is copied. Outputs can be passed in (``out=``, ``lse=``) or
are allocated (as a torch tensor when the query is one). Every C failure raises an :class:`AttnError`
subclass carrying the C message, and leaves outputs untouched.

Shapes use the header's vocabulary: batch, seq_q/seq_k, num_heads/num_kv_heads, head_size(_v),
num_tokens, num_blocks, block_size. LSE is float32, natural log.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays, _binding, _capi
from ._arrays import tensor


# The compiled extension (python/attn/_ext.c): the one path to libattn.
_ext = _binding.ext

Array = Any  # numpy.ndarray or a DLPack producer (torch.Tensor, ...)
Causal = Union[bool, str, int]


# ------------------------------------------------------------------------------------------------
# Context
# ------------------------------------------------------------------------------------------------
_NO_WORKSPACE = np.zeros(0, dtype=np.uint8)  # the workspace of every plan that needs none (never written)
_NO_WORKSPACE.flags.writeable = False


def _aligned_workspace(nbytes: int) -> np.ndarray:
    """nbytes of zeros, 64-byte aligned (a plan's workspace)."""
    ws = np.zeros(int(nbytes) + 64, dtype=np.uint8)
    off = (-ws.__array_interface__["data"][0]) % 64
    return ws[off:off + int(nbytes)]


class Context:
    """An attn_ctx: thread count and kernel table (ISA). One Context runs one call at a time: a call made on it
    while another thread's call uses it raises AttnInvalidArgumentError ("ctx: is in use by a call on another
    thread") and writes nothing. Give each thread its own Context; the module-level functions use a per-thread
    default context (:func:`default_context`)."""

    def __init__(self, num_threads: Optional[int] = None, isa: Optional[str] = None):
        self._ptr = 0  # the handle as an int for attn._ext (0 = closed)
        self._handle = None
        self._handle = self._ptr = _capi.ext.attn_ctx_create()
        if num_threads is not None:
            self.num_threads = num_threads
        if isa is not None:
            self.isa = isa

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("attn Context is closed")
        return self._handle

    @property
    def num_threads(self) -> int:
        return _capi.ext.attn_ctx_num_threads(self.handle)

    @num_threads.setter
    def num_threads(self, n: int) -> None:
        _capi.call("attn_ctx_set_num_threads", self.handle,
                   _int_in("num_threads", n, 1, MAX_THREADS))

    @property
    def isa(self) -> str:
        return _capi.ext.attn_ctx_isa(self.handle) or ""

    @isa.setter
    def isa(self, name: str) -> None:
        _capi.ext.attn_ctx_set_isa(self.handle, name)

    def close(self) -> None:
        if getattr(self, "_handle", None) is not None:
            self._ptr = 0
            _capi.ext.attn_ctx_destroy(self._handle)
            self._handle = None

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "attn.Context(closed)"
        return f"attn.Context(num_threads={self.num_threads}, isa={self.isa!r})"


MAX_THREADS = 1024  # attn_ctx_set_num_threads accepts 1..1024
INT32_MAX = 2**31 - 1


def _int_in(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as a Python int in [lo, hi], else AttnInvalidArgumentError (a ValueError) naming ``name``
    (TypeError for a non-integer):
    never silently wrapped into a 32-bit C field."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}={value!r}: expected an integer")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}={value!r}: expected an integer, got {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise _capi.AttnInvalidArgumentError(_capi.STATUS_INVALID_ARGUMENT,
                                             f"{name}={v}: expected an integer in [{lo}, {hi}]")
    return v


_local = threading.local()


def default_context() -> Context:
    """This thread's default Context (created on first use: default thread count and best ISA)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = Context()
    return ctx


def set_num_threads(num_threads: int) -> None:
    """Sets the thread count of this thread's default context. Results do not depend on it."""
    default_context().num_threads = num_threads


def _ctx_ptr(ctx: Optional[Context], reference: bool = False) -> int:
    """The context handle as an int for attn._ext (0 when closed: attn._ext raises; the oracle needs none)."""
    if reference:
        return 0
    if ctx is None:
        ctx = getattr(_local, "ctx", None) or default_context()
    elif not isinstance(ctx, Context):
        raise _arrays._type_error(f"ctx: expected an attn.Context or None, got {type(ctx).__name__}")
    return ctx._ptr


# ------------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------------
_CAUSAL = {"none": _capi.CAUSAL_NONE, "bottom_right": _capi.CAUSAL_BOTTOM_RIGHT,
           "top_left": _capi.CAUSAL_TOP_LEFT}


def _causal_value(causal: Causal) -> int:
    """causal: None/False/0 (none), True/1 (bottom-right), 2 or "top_left"; the C enum values 0/1/2 and
    the names in _CAUSAL are accepted. Anything else (e.g. 2**32, 1.5) raises ValueError/TypeError."""
    if causal is None:  # flash-attn treats a falsy causal as False
        return _capi.CAUSAL_NONE
    if isinstance(causal, str):
        if causal.lower() not in _CAUSAL:
            raise ValueError(f"causal={causal!r}: expected a bool or one of {sorted(_CAUSAL)}")
        return _CAUSAL[causal.lower()]
    if isinstance(causal, (bool, np.bool_)):
        return _capi.CAUSAL_BOTTOM_RIGHT if causal else _capi.CAUSAL_NONE
    try:
        v = operator.index(causal)
    except TypeError:
        raise TypeError(f"causal={causal!r}: expected a bool, 0/1/2 or one of {sorted(_CAUSAL)}") from None
    if v not in (_capi.CAUSAL_NONE, _capi.CAUSAL_BOTTOM_RIGHT, _capi.CAUSAL_TOP_LEFT):
        raise ValueError(f"causal={v}: expected a bool, 0 (none), 1 (bottom_right) or 2 (top_left)")
    return v


def _window_value(window_size: Any) -> tuple:
    """(left, right) as int32: -1 = unbounded. A bound above INT32_MAX is larger than any sequence, so it
    means unbounded too and becomes -1 (bounds up to INT32_MAX are passed as is; any bound >= the
    sequence length already behaves as unbounded). A bound < -1 raises ValueError."""
    if window_size is None:
        return (-1, -1)
    try:
        pair = tuple(window_size)
    except TypeError:
        raise TypeError(f"window_size={window_size!r}: expected (left, right)") from None
    if len(pair) != 2:
        raise ValueError(f"window_size={window_size!r}: expected (left, right)")
    res = []
    for side, w in zip(("left", "right"), pair):
        if isinstance(w, (bool, np.bool_)):
            raise TypeError(f"window_size={window_size!r}: {side} bound must be an integer")
        try:
            w = operator.index(w)
        except TypeError:
            raise TypeError(f"window_size={window_size!r}: {side} bound must be an integer, got "
                            f"{type(w).__name__}") from None
        if w < -1:
            raise ValueError(f"window_size={window_size!r}: {side} bound {w} < -1 (-1 = unbounded)")
        res.append(-1 if w > INT32_MAX else w)
    return tuple(res)


def _per_head(x: Any, name: str, num_heads: Optional[int]) -> np.ndarray:
    a = np.ascontiguousarray(_arrays.as_numpy(x, name), dtype=np.float32)
    if a.ndim != 1 or (num_heads is not None and a.shape[0] != num_heads):
        raise ValueError(f"{name}: shape {a.shape}, expected [num_heads] = [{num_heads}]"
                         + (" (per-batch [batch, num_heads] slopes: the flash_attn_* functions only)"
                            if a.ndim == 2 else ""))
    return a


class Params:
    """attn_params plus the arrays its pointers refer to (kept alive while the call runs)."""

    def __init__(self, *, num_heads: Optional[int], softmax_scale: Optional[float] = None,
                 causal: Causal = False, window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                 alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None,
                 mask: Optional[Array] = None, key_padding_mask: Optional[Array] = None,
                 additive_mask: Optional[Array] = None, k_scale: Any = None, v_scale: Any = None,
                 num_kv_heads: Optional[int] = None):
        # fp8 KV cache scales (read by the paged entries on an fp8 cache only): per tensor, or with num_kv_heads
        # also per KV head (a [num_kv_heads] array -> params.k_scales / v_scales)
        scales = [1.0, 1.0, None, None]
        for i, (name, x) in enumerate((("k_scale", k_scale), ("v_scale", v_scale))):
            if x is None:
                continue
            s = kv_scales(x, name, num_kv_heads)
            scales[i + 2 * isinstance(s, np.ndarray)] = s
        scale = 0.0 if softmax_scale is None else float(softmax_scale)
        if softmax_scale is not None and scale == 0.0:
            # a zero scale (flash-attn, SDPA: uniform weights); attn_params' 0 means "default", so the smallest
            # positive float stands for it (its logits are below 2^-126: exp2 of their differences is exactly 1)
            scale = _FLT_TRUE_MIN
        wl, wr = _window_value(window_size)
        alibi = None if alibi_slopes is None else _per_head(alibi_slopes, "alibi_slopes", num_heads)
        sinks = None if sinks is None else _per_head(sinks, "sinks", num_heads)
        if mask is not None and _is_float_mask(mask):
            # torch SDPA's rule: a floating attn_mask is added to the logits, a bool one keeps keys
            if additive_mask is not None:
                raise ValueError("mask: a float mask is additive; pass it or additive_mask=, not both")
            mask, additive_mask = None, mask
        masks = [None if m is None else tensor(m, n) for m, n in (
            (mask, "params.mask"), (key_padding_mask, "params.key_padding_mask"),
            (additive_mask, "params.additive_mask"))]
        # attn_params field by field (attn._ext builds the struct from this tuple)
        self.args = (scale, _causal_value(causal), wl, wr, 0.0 if softcap is None else float(softcap), alibi,
                     sinks, masks[0], masks[1], masks[2], scales[0], scales[1], scales[2], scales[3])

    @property
    def ptr(self) -> tuple:
        return self.args


# vLLM's kv_cache_dtype names -> attn dtype of the cache (None: the cache's own float dtype, "auto").
# "fp8" is E4M3 on CPU (vllm/utils/torch_utils.py maps "fp8" to "fp8_e4m3"); vLLM allocates fp8 caches
# as uint8 tensors, which these names reinterpret without a copy.
KV_CACHE_DTYPES = {None: None, "auto": None, "fp8": _capi.DTYPE_FP8_E4M3, "fp8_e4m3": _capi.DTYPE_FP8_E4M3,
                   "fp8_e5m2": _capi.DTYPE_FP8_E5M2}


def kv_cache_dtype_code(kv_cache_dtype: Optional[str]) -> Optional[int]:
    """attn dtype of a vLLM kv_cache_dtype name ("auto"/None -> None); NotImplementedError otherwise."""
    try:
        return KV_CACHE_DTYPES[kv_cache_dtype]
    except (KeyError, TypeError):
        raise NotImplementedError(f"kv_cache_dtype={kv_cache_dtype!r}: attn supports "
                                  f"{[k for k in KV_CACHE_DTYPES if k]}") from None


def kv_scales(x: Any, name: str, num_kv_heads: Optional[int]) -> Union[float, np.ndarray]:
    """An fp8 scale argument as libattn takes it: a float for one scale per tensor (a number, or a 0-d /
    one-element array or tensor: vLLM's layer._k_scale), or a contiguous float32 [num_kv_heads] array for one
    scale per KV head (vLLM kv_scale_type "attn_head": attn_params.k_scales / attn_cache_write_options.k_scales).
    Any other shape raises ValueError naming the argument. Range checks (finite, > 0) are the C library's."""
    if isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool):
        return float(x)
    a = _arrays.as_numpy(x, name) if not isinstance(x, np.ndarray) else x
    if a.size == 1:
        return float(a.reshape(-1)[0])
    if a.ndim == 1 and num_kv_heads is not None and a.shape[0] == num_kv_heads:
        return np.ascontiguousarray(a, dtype=np.float32)
    raise ValueError(f"{name}: shape {list(a.shape)}, expected a scalar (one scale per tensor) or "
                     f"[num_kv_heads] = [{num_kv_heads}] (one scale per KV head)")


def _is_float_mask(mask: Array) -> bool:
    """True for a floating-point mask (float32/float16/bfloat16, NumPy or DLPack): the additive path."""
    dt = _arrays.dtype_of(mask, "params.mask")
    return dt.kind == "f" or dt.name == "bfloat16"


_LAYOUTS = {"bsnd": _capi.LAYOUT_BSND, "bshd": _capi.LAYOUT_BSND,
            "bnsd": _capi.LAYOUT_BNSD, "bhsd": _capi.LAYOUT_BNSD}


def _layout(layout: Union[str, int]) -> int:
    if isinstance(layout, str):
        if layout.lower() not in _LAYOUTS:
            raise ValueError(f"layout={layout!r}: expected 'BSND' or 'BNSD'")
        return _LAYOUTS[layout.lower()]
    return int(layout)


def _lse_out(q: Array, shape: Sequence[int]) -> Any:
    """An LSE output attn allocates: -inf (the LSE of a row that sees no key) where no call writes."""
    lse = _arrays.empty(q, shape, np.float32)
    _arrays.as_numpy(lse, "lse").fill(-np.inf)
    return lse


def _result(out: Any, lse: Any, return_lse: bool) -> Any:
    return (out, lse) if return_lse else out


# ------------------------------------------------------------------------------------------------
# Dense, varlen, merge
# ------------------------------------------------------------------------------------------------
def attention(q: Array, k: Array, v: Array, *, layout: Union[str, int] = "BSND",
              softmax_scale: Optional[float] = None, causal: Causal = False,
              window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
              alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None,
              mask: Optional[Array] = None, key_padding_mask: Optional[Array] = None,
              out: Optional[Array] = None, lse: Optional[Array] = None, return_lse: bool = False,
              ctx: Optional[Context] = None, reference: bool = False,
              additive_mask: Optional[Array] = None) -> Any:
    """Dense attention (attn_forward; ``reference=True``: the float64 oracle attn_ref_forward).

    layout "BSND": q [batch, seq_q, num_heads, head_size], k [batch, seq_k, num_kv_heads, head_size],
    v [batch, seq_k, num_kv_heads, head_size_v] -> out [batch, seq_q, num_heads, head_size_v] (q's dtype);
    "BNSD" swaps dims 1 and 2. lse: float32 [batch, num_heads, seq_q]. causal: False/True (bottom-right)
    or "top_left". window_size (left, right), -1 = unbounded. mask: broadcastable to [batch, num_heads,
    seq_q, seq_k] (any size-1 dimension, leading dimensions may be omitted), as torch SDPA's attn_mask:
    bool = keep-mask (True = attend), float32/float16/bfloat16 = additive (added to the scaled logits,
    -inf hides a key; params.additive_mask); additive_mask= passes a float mask explicitly (beside a bool
    mask). key_padding_mask: bool [batch, seq_k].
    Returns out, or (out, lse) when return_lse (or lse=) is given."""
    return _ext.forward(_ctx_ptr(ctx, reference), _layout(layout), q, k, v, False, softmax_scale, causal,
                        window_size, softcap, alibi_slopes, sinks, out, lse, bool(return_lse or lse is not None),
                        mask, key_padding_mask, additive_mask, reference)


def attention_varlen(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array, *,
                     softmax_scale: Optional[float] = None, causal: Causal = False,
                     window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                     alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None,
                     out: Optional[Array] = None, lse: Optional[Array] = None, return_lse: bool = False,
                     ctx: Optional[Context] = None, reference: bool = False) -> Any:
    """Packed variable-length attention (attn_forward_varlen / attn_ref_forward_varlen).

    q [total_q, num_heads, head_size], k [total_k, num_kv_heads, head_size], v [total_k, num_kv_heads,
    head_size_v]; cu_seqlens_q/k int32 [batch + 1] (lists accepted). out [total_q, num_heads, head_size_v];
    lse float32 [num_heads, total_q]. Causal is bottom-right within each sequence."""
    return _ext.varlen(_ctx_ptr(ctx, reference), q, k, v, cu_seqlens_q, cu_seqlens_k, False, softmax_scale, causal,
                       window_size, softcap, alibi_slopes, sinks, out, lse, bool(return_lse or lse is not None),
                       reference)


def merge_attn_states(out_a: Array, lse_a: Array, out_b: Array, lse_b: Array, *,
                      out: Optional[Array] = None, lse_out: Optional[Array] = None,
                      return_lse: bool = False, ctx: Optional[Context] = None) -> Any:
    """Merges two attention states over disjoint key sets (attn_merge_attn_states).

    out_a/out_b [num_tokens, num_heads, head_size]; lse_a/lse_b float32 [num_heads, num_tokens].
    lse = logaddexp(lse_a, lse_b); out = e^(lse_a-lse)*out_a + e^(lse_b-lse)*out_b. ``out`` may be
    out_a or out_b itself. Returns out, or (out, lse_out) when return_lse (or lse_out=) is given."""
    return _ext.merge_attn_states(_ctx_ptr(ctx), out_a, lse_a, out_b, lse_b, out, lse_out,
                                  bool(return_lse or lse_out is not None))


# ------------------------------------------------------------------------------------------------
# Serving: paged KV cache
# ------------------------------------------------------------------------------------------------
def reshape_and_cache(key: Array, value: Array, kv_cache: Array, slot_mapping: Array, *,
                      kv_cache_dtype: Optional[str] = None, k_scale: Any = None, v_scale: Any = None,
                      ctx: Optional[Context] = None) -> None:
    """Writes new keys/values into the paged cache (attn_reshape_and_cache), in place.

    key/value [num_tokens, num_kv_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads,
    head_size]; slot_mapping int64/int32 [n], n <= num_tokens (slot = block*block_size + offset; -1 = skip;
    key/value rows past the n-th are padding and not written, as in vLLM). key/value are converted to the
    cache's dtype (round to nearest even). Every slot is checked before anything is written.
    fp8 cache (kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2" on a uint8 cache, or an ml_dtypes / torch
    float8 cache): stored = fp8(x / k_scale) (values: v_scale), saturating (attn_reshape_and_cache_scaled);
    scales default 1. k_scale / v_scale: a number or one-element array (per tensor), or a float array
    [num_kv_heads] (per KV head, vLLM kv_scale_type "attn_head": head g stored as fp8(x / k_scale[g]);
    attn_reshape_and_cache_ex); other shapes raise ValueError
    naming the argument. For a float cache the scales are ignored, as vLLM ignores them for "auto"."""
    _ext.reshape_and_cache(_ctx_ptr(ctx), key, value, kv_cache, slot_mapping, kv_cache_dtype,
                           _scale_arg(k_scale, "k_scale"), _scale_arg(v_scale, "v_scale"))


def block_pairs(block_mapping: Array) -> np.ndarray:
    """block_mapping as int64 for libattn, which checks it is [num_pairs, 2] (an empty one of any shape: no
    pairs)."""
    bm = _arrays.index_array(block_mapping, "block_mapping", np.int64)
    return bm.reshape(0, 2) if bm.size == 0 else bm


def copy_blocks(kv_cache: Array, block_mapping: Array, *, ctx: Optional[Context] = None) -> None:
    """kv_cache[:, dst] = kv_cache[:, src] for each (src, dst) row of block_mapping int64 [num_pairs, 2],
    in order (attn_copy_blocks)."""
    _capi.call("attn_copy_blocks", _ctx_ptr(ctx), kv_cache, block_pairs(block_mapping))


def swap_blocks(src_cache: Array, dst_cache: Array, block_mapping: Array, *,
                ctx: Optional[Context] = None) -> None:
    """dst_cache[:, dst] = src_cache[:, src] for each (src, dst) row of block_mapping int64 [num_pairs, 2]
    (attn_swap_blocks). Caches share dtype, block_size, num_kv_heads, head_size."""
    _capi.call("attn_swap_blocks", _ctx_ptr(ctx), src_cache, dst_cache, block_pairs(block_mapping))


def paged_attention(q: Array, kv_cache: Array, query_start_loc: Array, seq_lens: Array,
                    block_table: Array, *, softmax_scale: Optional[float] = None,
                    causal: Causal = True, window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None,
                    out: Optional[Array] = None, lse: Optional[Array] = None, return_lse: bool = False,
                    kv_cache_dtype: Optional[str] = None, k_scale: Any = None, v_scale: Any = None,
                    ctx: Optional[Context] = None, reference: bool = False) -> Any:
    """Plan-less paged attention (attn_paged_attention / attn_ref_paged_attention).

    q [num_tokens, num_heads, head_size]; kv_cache [2, num_blocks, block_size, num_kv_heads, head_size]
    (this step's keys already written); query_start_loc int32 [num_reqs + 1]; seq_lens int32 [num_reqs]
    (cached + new keys); block_table int32 [num_reqs, max_blocks]. out like q; lse float32
    [num_heads, num_tokens]. causal defaults to True (bottom-right per request). An fp8 cache
    (kv_cache_dtype on a uint8 cache, or a float8 array) is dequantized inside the call with k_scale /
    v_scale (default 1; ignored for a float cache): each a number or one-element array (per tensor), or a
    float array [num_kv_heads] (per KV head, attn_params.k_scales / v_scales); other shapes raise ValueError
    naming the argument."""
    return _ext.paged_attention(_ctx_ptr(ctx, reference), q, kv_cache, query_start_loc, seq_lens, block_table,
                                softmax_scale, causal, window_size, softcap, alibi_slopes, sinks, out, lse,
                                bool(return_lse or lse is not None), kv_cache_dtype, _scale_arg(k_scale, "k_scale"),
                                _scale_arg(v_scale, "v_scale"), reference)


_FLT_TRUE_MIN = float(np.finfo(np.float32).smallest_subnormal)


def _scale_arg(x: Any, name: str) -> Any:
    """An fp8 scale as attn._ext takes it: None or a number as given, a one-element array or tensor as its number
    (vLLM's layer._k_scale), any other array as float32 (attn._ext checks it against the cache's num_kv_heads and
    reads it only for an fp8 cache)."""
    if x is None or isinstance(x, (int, float)):
        return x
    if isinstance(x, (np.floating, np.integer)):
        return float(x)
    a = _arrays.as_numpy(x, name)
    return float(a.reshape(-1)[0]) if a.size == 1 else np.ascontiguousarray(a, dtype=np.float32)


def _int64_arg(v: Any, name: str) -> int:
    """An integer argument stored in a C int64 field: an int (or NumPy integer) inside int64, else the family's
    TypeError / OverflowError naming it (never truncated or wrapped around into the C field)."""
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise _arrays._type_error(f"{name}: expected an integer, got {type(v).__name__}")
    i = v.__index__()
    if not -(1 << 63) <= i < (1 << 63):
        raise _capi.make_error(_capi.STATUS_OVERFLOW, f"{name}={i} does not fit int64")
    return i


def _int32_arg(v: Any, name: str) -> int:
    """As _int64_arg, for a C int32 field (a plan config value)."""
    i = _int64_arg(v, name)
    if not -(1 << 31) <= i < (1 << 31):
        raise _capi.make_error(_capi.STATUS_OVERFLOW, f"{name}={i} does not fit int32")
    return i


def _plan_config(num_blocks: int, block_size: int, num_heads: int, num_kv_heads: int, head_size: int,
                 max_blocks_per_req: int, num_speculative_tokens: int = 0, chunked_prefill_enabled: bool = True,
                 spec_method_mtp: bool = False) -> Any:
    """attn_plan_config of a Plan's keywords: its int32 fields in declaration order (each range-checked)."""
    return (_int32_arg(num_blocks, "num_blocks"), _int32_arg(block_size, "block_size"),
            _int32_arg(num_heads, "num_heads"), _int32_arg(num_kv_heads, "num_kv_heads"),
            _int32_arg(head_size, "head_size"), _int32_arg(max_blocks_per_req, "max_blocks_per_req"),
            _int32_arg(num_speculative_tokens, "num_speculative_tokens"), int(bool(chunked_prefill_enabled)),
            int(bool(spec_method_mtp)))


# attn_request as a NumPy record (the plan's requests are one array of them; attn._ext gives the layout)
_REQUEST_FIELDS = {"num_computed_tokens": np.int64, "num_scheduled_tokens": np.int64, "num_spec_tokens": np.int64,
                   "kind": np.int32, "block_ids": np.uintp, "num_block_ids": np.int64, "encoder_len": np.int64}
_REQUEST_DTYPE = np.dtype({"names": list(_REQUEST_FIELDS), "formats": list(_REQUEST_FIELDS.values()),
                           "offsets": [_capi.ext.REQUEST_LAYOUT[f] for f in _REQUEST_FIELDS],
                           "itemsize": _capi.ext.REQUEST_LAYOUT["itemsize"]})


class PlanRequest:
    """One scheduled request of an engine step (attn_request).

    num_computed_tokens: tokens already cached; num_scheduled_tokens: new tokens this step (>= 1);
    block_ids: physical blocks in logical order; kind: "decoder" | "encoder_only" | "cross"."""

    KINDS = {"decoder": _capi.REQUEST_DECODER, "encoder_only": _capi.REQUEST_ENCODER_ONLY,
             "cross": _capi.REQUEST_CROSS}

    def __init__(self, num_computed_tokens: int, num_scheduled_tokens: int,
                 block_ids: Sequence[int] = (), num_spec_tokens: int = 0, kind: str = "decoder",
                 encoder_len: int = 0):
        self.num_computed_tokens = _int64_arg(num_computed_tokens, "num_computed_tokens")
        self.num_scheduled_tokens = _int64_arg(num_scheduled_tokens, "num_scheduled_tokens")
        self.block_ids = np.ascontiguousarray(
            _arrays.index_array(block_ids if not isinstance(block_ids, range) else list(block_ids), "block_ids",
                                np.int32).reshape(-1))
        self.num_spec_tokens = _int64_arg(num_spec_tokens, "num_spec_tokens")
        if kind not in self.KINDS:
            raise ValueError(f"kind={kind!r}: expected one of {sorted(self.KINDS)}")
        self.kind = kind
        self.encoder_len = _int64_arg(encoder_len, "encoder_len")


class Plan:
    """The metadata and work plan of one engine step (attn_plan_create), reused by every layer.

    Attributes (NumPy copies, plan order = decodes, then partial prefills, then fresh prefills):
    query_start_loc int32 [num_reqs+1], seq_lens int32 [num_reqs], slot_mapping int64 [num_tokens],
    block_table int32 [num_reqs, max_blocks_per_req], req_order int32 [num_reqs] (plan request i is input
    request req_order[i]), token_src int32 [num_tokens] (plan row t is input row token_src[t]), and the
    counts num_reqs, num_tokens, num_decodes, num_decode_tokens, num_prefills, num_prefill_tokens,
    attn_state, max_query_len, max_seq_len, workspace_size."""

    def __init__(self, requests: Sequence[PlanRequest], *, num_blocks: int, block_size: int,
                 num_heads: int, num_kv_heads: int, head_size: int, max_blocks_per_req: int,
                 num_speculative_tokens: int = 0, chunked_prefill_enabled: bool = True,
                 spec_method_mtp: bool = False):
        self._plan = None
        self._ptr = 0  # the handle as an int for attn._ext (0 = freed)
        cfg = _plan_config(num_blocks, block_size, num_heads, num_kv_heads, head_size, max_blocks_per_req,
                           num_speculative_tokens, chunked_prefill_enabled, spec_method_mtp)
        n = len(requests)
        reqs = np.zeros(max(n, 1), _REQUEST_DTYPE)
        for i, r in enumerate(requests):
            reqs[i] = (r.num_computed_tokens, r.num_scheduled_tokens, r.num_spec_tokens, PlanRequest.KINDS[r.kind],
                       r.block_ids.__array_interface__["data"][0] if r.block_ids.size else 0,
                       int(r.block_ids.size), r.encoder_len)
        self._keep = requests  # the block ids the records point at
        self._create(cfg, reqs, n, sum(r.num_scheduled_tokens for r in requests))

    @classmethod
    def _of_step(cls, config: Any, kind: str, query_start_loc: Array, seq_lens: Array, block_table: Array,
                 num_reqs: int) -> "Plan":
        """The plan of an engine step as vLLM's metadata builder has it (attn.vllm.backend), made in one call
        (attn._ext.plan_step: no Python object per request): request r of ``kind`` schedules
        query_start_loc[r + 1] - query_start_loc[r] tokens over seq_lens[r] keys (cross: seq_lens[r] encoder
        keys) with the first ceil(seq_lens[r] / block_size) ids of block_table row r (int32 arrays or tensors,
        at least num_reqs rows; an encoder-only request's row is not read). ``config``: _plan_config of the
        constructor's keywords, built once by a caller that plans every step with the same ones; the plan's
        max_blocks_per_req is block_table's width, and num_blocks is raised to the largest block id used + 1
        where smaller (0: not known). Same checks and errors as the constructor on those requests."""
        self = cls.__new__(cls)
        self._plan = None
        self._ptr = 0
        self._set(_ext.plan_step(config, PlanRequest.KINDS[kind], query_start_loc, seq_lens, block_table, num_reqs),
                  config)
        return self

    def _create(self, cfg: Any, reqs: Any, n: int, expected_tokens: int) -> None:
        """attn_plan_create on the filled requests."""
        self._set(_capi.ext.attn_plan_create(cfg, reqs, n), cfg)
        if self.num_reqs != n or self.num_tokens != expected_tokens:
            raise RuntimeError("attn_plan_create planned another batch than the one given")

    def _set(self, res: tuple, cfg: Any) -> None:
        """The new plan's handle, counts and workspace (attn._ext's plan tuple); the arrays and the other counts
        are read from the plan when first asked for (_PlanInfo), which in an engine's step they mostly never are."""
        (h, self.num_reqs, self.num_tokens, self.num_decodes, self.num_decode_tokens, self.num_prefills,
         self.num_prefill_tokens, self.attn_state, self.workspace_size, self.identity_order) = res
        self._plan = self._ptr = h
        self.num_heads, self.num_kv_heads, self.head_size = cfg[2], cfg[3], cfg[4]
        self._workspace = _aligned_workspace(self.workspace_size) if self.workspace_size else _NO_WORKSPACE
        self._ws_ptr = self._workspace.__array_interface__["data"][0] if self.workspace_size else 0
        self._ws_size = int(self.workspace_size)
        # The plan's own workspace serves one forward at a time: a forward on another thread while it is in use
        # (several contexts over one plan, as the C API allows with one workspace each) gets a temporary one.
        self._ws_lock = threading.Lock()

    def _read_info(self) -> None:
        """The plan's arrays (NumPy copies) and remaining counts from attn_plan_get_info (at the first use of
        one of them: _PlanInfo)."""
        if self._plan is None:
            raise ValueError("attn Plan is freed")
        i = _capi.ext.attn_plan_get_info(self._plan)  # (the arrays as bytes of their exact lengths)
        for f in _PLAN_COUNTS:
            setattr(self, f, i[f])
        for f, dtype in _PLAN_ARRAYS:
            setattr(self, f, np.frombuffer(i[f], dtype=dtype))
        self.block_table = self.block_table.reshape(self.num_reqs, i["max_blocks_per_req"])

    def forward(self, q: Array, kv_cache: Array, *, key: Optional[Array] = None,
                value: Optional[Array] = None, softmax_scale: Optional[float] = None,
                causal: Causal = True, window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                alibi_slopes: Optional[Array] = None, sinks: Optional[Array] = None,
                out: Optional[Array] = None, lse: Optional[Array] = None, return_lse: bool = False,
                kv_cache_dtype: Optional[str] = None, k_scale: Any = None, v_scale: Any = None,
                ctx: Optional[Context] = None) -> Any:
        """One layer of the step (attn_forward_paged). q [num_tokens, num_heads, head_size] in PLAN row
        order (see token_src); kv_cache with this step's keys written (slot_mapping). key/value
        [num_tokens, num_kv_heads, head_size] only for encoder-only requests. out like q; lse float32
        [num_heads, num_tokens]. fp8 cache: kv_cache_dtype / k_scale / v_scale (per tensor or per KV head) as
        paged_attention."""
        # the per-layer hot path (a ~5 µs call at a small model's decode): the arguments go to attn._ext as they are,
        # with no second Python frame, keyword call or scale conversion in the common case (a Context, no fp8 scales)
        cp = ctx._ptr if type(ctx) is Context else _ctx_ptr(ctx)
        if k_scale is not None or v_scale is not None:
            k_scale, v_scale = _scale_arg(k_scale, "k_scale"), _scale_arg(v_scale, "v_scale")
        if self._ws_lock.acquire(False):  # the plan's workspace (its address was taken once); False: no waiting
            try:
                return _ext.forward_paged(cp, self._ptr, self.num_heads, q, kv_cache, key, value, softmax_scale,
                                          causal, window_size, softcap, alibi_slopes, sinks, out, lse,
                                          bool(return_lse or lse is not None), self._ws_ptr, self._ws_size,
                                          kv_cache_dtype, k_scale, v_scale)
            finally:
                self._ws_lock.release()
        # another thread's forward holds the plan's workspace: a temporary one, alive in `ws` until the call returns
        ws = _aligned_workspace(self._ws_size)
        return _ext.forward_paged(cp, self._ptr, self.num_heads, q, kv_cache, key, value, softmax_scale, causal,
                                  window_size, softcap, alibi_slopes, sinks, out, lse,
                                  bool(return_lse or lse is not None),
                                  ws.__array_interface__["data"][0] if ws.size else 0, int(ws.size), kv_cache_dtype,
                                  k_scale, v_scale)

    @property
    def handle(self) -> int:
        if self._plan is None:
            raise ValueError("attn Plan is freed")
        return self._plan

    def free(self) -> None:
        if getattr(self, "_plan", None) is not None:
            self._ptr = 0
            _capi.ext.attn_plan_free(self._plan)
            self._plan = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.free()
        except Exception:
            pass


class _PlanInfo:
    """A Plan attribute read from the plan at its first use (Plan._read_info), then an instance attribute: a
    non-data descriptor, so other attribute reads keep CPython's fast path (a __getattr__ would slow them all)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, plan: Any, owner: Any = None) -> Any:
        if plan is None:
            return self
        plan._read_info()
        return plan.__dict__[self.name]


# What Plan._read_info reads: counts, and arrays with their dtypes (block_table as [num_reqs, max_blocks_per_req])
_PLAN_COUNTS = ("decode_threshold", "max_query_len", "max_seq_len", "num_work_blocks", "num_split_items")
_PLAN_ARRAYS = (("query_start_loc", np.int32), ("seq_lens", np.int32), ("slot_mapping", np.int64),
                ("block_table", np.int32), ("kinds", np.int32), ("req_order", np.int32), ("token_src", np.int32))
for _name in _PLAN_COUNTS + tuple(f for f, _ in _PLAN_ARRAYS):
    setattr(Plan, _name, _PlanInfo(_name))


# ------------------------------------------------------------------------------------------------
# Info
# ------------------------------------------------------------------------------------------------
def info() -> dict:
    """Library facts: version, library path, Python binding ("ext": the compiled attn._ext, the only one)
    and the extension's path, compiled ISAs (and which run here), CPU features, the
    default context's ISA and thread count, and which optional C entries this libattn exports."""
    ctx = default_context()
    names = _capi.isa_names()
    return dict(version=_capi.version(), library=_capi.library_path, binding=_binding.name,
                extension=_binding.path, isas=names,
                isas_available=[n for n in names if _capi.isa_available(n)],
                isa=ctx.isa, num_threads=ctx.num_threads, cpu_features=_capi.cpu_features(),
                entries={n: True for n in _capi.ENTRIES})
