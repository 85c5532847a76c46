"""Diffusion entries of libattn (include/attn/attn_experimental.h: experimental, they may change in any minor
release): padded self-attention, packed documents, piecewise causal/full spans (dense, or over a paged KV cache),
prefix K/V slicing, power-of-two pre-scaling, quantized attention, and the FP8 / MX / FP4 encoders and the
Hadamard rotation they use.

Dense arguments follow :func:`attn.attention`: q [batch, seq_q, num_heads, head_size] (layout "BSND") or
[batch, num_heads, seq_q, head_size] ("BNSD"), k/v likewise, out allocated or passed, lse float32
[batch, num_heads, seq_q]. Option keywords: softmax_scale, causal, window_size, softcap, alibi_slopes,
sinks, mask, key_padding_mask, additive_mask (where the entry allows them; libattn reports UNSUPPORTED
otherwise). ``mask`` follows torch SDPA's attn_mask: broadcastable to [batch, num_heads, seq_q, seq_k] (any
size-1 dimension; leading dimensions may be omitted, e.g. [batch, 1, 1, seq_k] or [seq_q, seq_k]); a bool
mask keeps keys (True = attend), a float32/float16/bfloat16 mask is added to the scaled logits (-inf hides
a key; large finite negatives such as -1e30 or finfo.min stay finite). ``additive_mask=`` passes a float
mask explicitly, e.g. beside a bool ``mask``.
"""

from __future__ import annotations

import operator
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from . import _arrays, _capi
from .ops import Array, Context, _aligned_workspace, _ctx_ptr, _layout, _lse_out, _result
from ._arrays import tensor

_QUANT_FORMATS = {"fp8_e4m3": _capi.QUANT_FP8_E4M3, "fp8_e5m2": _capi.QUANT_FP8_E5M2,
                  "mxfp8": _capi.QUANT_MXFP8, "mxfp4": _capi.QUANT_MXFP4}
_FP8 = {"e4m3": _capi.DTYPE_FP8_E4M3, "fp8_e4m3": _capi.DTYPE_FP8_E4M3,
        "e5m2": _capi.DTYPE_FP8_E5M2, "fp8_e5m2": _capi.DTYPE_FP8_E5M2}
_MX_ELEMENTS = {"e4m3": _capi.DTYPE_FP8_E4M3, "e5m2": _capi.DTYPE_FP8_E5M2, "e2m1": _capi.DTYPE_FP4_E2M1,
                "mxfp8": _capi.DTYPE_FP8_E4M3, "mxfp4": _capi.DTYPE_FP4_E2M1}


def _workspace(nbytes: int) -> Tuple[Optional[np.ndarray], int, None]:
    """nbytes of zeros, 64-byte aligned (None for none)."""
    return (_aligned_workspace(nbytes) if nbytes else None), nbytes, None


def _size(name: str, *args: Any) -> int:
    return _capi.call(name, *args)


# The option keywords of the dense entries and their defaults, in the order attn._ext reads them (ext_conv_options)
_OPTIONS = {"softmax_scale": None, "causal": False, "window_size": None, "softcap": 0.0, "alibi_slopes": None,
            "sinks": None, "mask": None, "key_padding_mask": None, "additive_mask": None}


def _options(kw: dict) -> tuple:
    """The option keywords as the tuple attn._ext converts (as attn.attention's keywords); TypeError for others."""
    bad = sorted(set(kw) - set(_OPTIONS))
    if bad:
        raise TypeError(f"unexpected option(s) {bad}; allowed: {list(_OPTIONS)}")
    return tuple(kw.get(name, default) for name, default in _OPTIONS.items())


class _DenseCall:
    """Arguments of a dense-layout entry: the layout, (q as a NumPy view, k, v), the options tuple and the outputs,
    allocated when not given (out [.., head_size_v] in q's dtype, lse [batch, num_heads, seq_q] float32)."""

    def __init__(self, q: Array, k: Array, v: Array, layout: Union[str, int], out: Optional[Array],
                 lse: Optional[Array], return_lse: bool, options: dict):
        self.layout = lay = _layout(layout)
        qa = _arrays.as_numpy(q, "q")
        nd = 2 if lay == _capi.LAYOUT_BSND else 1
        if out is None:
            out_shape = qa.shape[:-1] + (_arrays.shape_of(v)[-1],) if qa.ndim == 4 else qa.shape
            out = _arrays.empty(q, out_shape, qa.dtype)
        self.want_lse = return_lse or lse is not None
        if self.want_lse and lse is None and qa.ndim == 4:
            lse = _lse_out(q, (qa.shape[0], qa.shape[nd], qa.shape[3 - nd]))
        self.out, self.lse, self.opts = out, lse, _options(options)
        self.qkv = (qa, k, v)
        self.outs = (out, lse if self.want_lse else None)

    def result(self) -> Any:
        return _result(self.out, self.lse, self.want_lse)


def forward_padded(q: Array, k: Array, v: Array, key_padding_mask: Array, *,
                   layout: Union[str, int] = "BSND", out: Optional[Array] = None,
                   lse: Optional[Array] = None, return_lse: bool = False, ctx: Optional[Context] = None,
                   reference: bool = False, **options: Any) -> Any:
    """Self-attention over the valid tokens of each row (attn_forward_padded): key_padding_mask bool
    [batch, seq] (True = valid; holes anywhere). Padded query rows output 0 (LSE -inf). seq_k == seq_q.
    ``mask`` (bool or additive float) / ``additive_mask`` may be combined with it: broadcastable to the
    unpadded [batch, num_heads, seq, seq] and indexed by token (diffusers' attention_mask)."""
    d = _DenseCall(q, k, v, layout, out, lse, return_lse, options)
    m = tensor(key_padding_mask, "key_padding_mask")
    qa = d.qkv[0]
    seq_dim = 1 if d.layout == _capi.LAYOUT_BSND else 2
    batch, seq = (qa.shape[0], qa.shape[seq_dim]) if qa.ndim == 4 else (0, 0)
    ws, nbytes, _keep = _workspace(_size("attn_forward_padded_workspace_size", batch, seq))
    if reference:
        _capi.call("attn_ref_forward_padded", d.layout, *d.qkv, m, d.opts, *d.outs, ws, nbytes)
    else:
        _capi.call("attn_forward_padded", _ctx_ptr(ctx), d.layout, *d.qkv, m, d.opts, *d.outs, ws,
                   nbytes)
    return d.result()


def forward_packed(q: Array, k: Array, v: Array, cu_seqlens_q: Array, cu_seqlens_k: Array, *,
                   out: Optional[Array] = None, lse: Optional[Array] = None, return_lse: bool = False,
                   ctx: Optional[Context] = None, **options: Any) -> Any:
    """Packed documents in batch 1 (attn_forward_packed): q [1, total_q, num_heads, head_size], k/v
    [1, total_k, num_kv_heads, head_size(_v)], cu_seqlens int32 [num_docs + 1]; lse float32
    [num_heads, total_q]."""
    qa = _arrays.as_numpy(q)
    if out is None:
        out_shape = qa.shape[:-1] + (_arrays.shape_of(v)[-1],) if qa.ndim == 4 else qa.shape
        out = _arrays.empty(q, out_shape, qa.dtype)
    want_lse = return_lse or lse is not None
    if want_lse and lse is None and qa.ndim == 4:
        lse = _lse_out(q, (qa.shape[2], qa.shape[1]))
    cq = _arrays.index_array(cu_seqlens_q, "cu_seqlens_q")
    ck = _arrays.index_array(cu_seqlens_k, "cu_seqlens_k")
    _capi.call("attn_forward_packed", _ctx_ptr(ctx), qa, k, v, cq, ck, _options(options), out,
               lse if want_lse else None)
    return _result(out, lse, want_lse)


def forward_piecewise(q: Array, k: Array, v: Array, spans: Sequence[Tuple[int, int]],
                      query_ranges: Optional[Sequence[Tuple[int, int, int]]] = None, *,
                      layout: Union[str, int] = "BSND", out: Optional[Array] = None,
                      lse: Optional[Array] = None, return_lse: bool = False,
                      ctx: Optional[Context] = None, reference: bool = False, **options: Any) -> Any:
    """Piecewise mixed causal/full attention (attn_forward_piecewise): a query at global position p sees
    keys j < e when p lies in a span [a, e), else j <= p. spans: [(start, end), ...] sorted and disjoint;
    query_ranges: [(local_start, local_end, global_start), ...] or None (the last seq_q positions).
    causal must stay False (the spans define causality)."""
    d = _DenseCall(q, k, v, layout, out, lse, return_lse, options)
    sp = _int64_rows(_pairs(spans, "spans"), 2)
    qr, nqr = (None, 0) if query_ranges is None else (_int64_rows(query_ranges, 3), len(query_ranges))
    if reference:
        _capi.call("attn_ref_forward_piecewise", d.layout, *d.qkv, sp, len(spans), qr, nqr,
                   d.opts, *d.outs)
    else:
        _capi.call("attn_forward_piecewise", _ctx_ptr(ctx), d.layout, *d.qkv, sp, len(spans), qr, nqr,
                   d.opts, *d.outs)
    return d.result()


def _int64_rows(rows: Sequence[Tuple[int, ...]], width: int) -> np.ndarray:
    """attn_span / attn_query_range records: a contiguous int64 [n, width] array (at least one row)."""
    a = np.zeros((max(len(rows), 1), width), dtype=np.int64)
    for i, r in enumerate(rows):
        a[i] = [int(x) for x in r]
    return a


def _pairs(spans: Any, name: str) -> list:
    """[(start, end), ...] from a sequence of integer pairs, or the family's TypeError naming the argument."""
    if isinstance(spans, (str, bytes)) or not hasattr(spans, "__iter__"):
        raise _arrays._type_error(f"{name}: expected a sequence of (start, end) integer pairs, got "
                                  f"{type(spans).__name__}")
    out = []
    for i, s in enumerate(spans):
        try:
            a, e = s
            if isinstance(a, (str, bytes, float)) or isinstance(e, (str, bytes, float)):
                raise TypeError
            out.append((int(a), int(e)))
        except (TypeError, ValueError):
            raise _arrays._type_error(f"{name}: entry {i} = {s!r} is not a (start, end) pair of integers") from None
    return out


def paged_piecewise_segments(spans: Sequence[Tuple[int, int]], query_offset: int,
                             query_len: int) -> list:
    """The pieces of one row (docs/DIFFUSION.md §2, vllm-omni build_segments): [(start, end, kv_end, mode)]
    in global positions, mode "causal" or "full", covering [query_offset, query_offset + query_len)."""
    qs, qe = int(query_offset), int(query_offset) + int(query_len)
    cur, segs = qs, []
    for a, e in spans:
        s0, e0 = max(int(a), qs), min(int(e), qe)
        if s0 >= e0:
            continue
        if cur < s0:
            segs.append((cur, s0, s0, "causal"))
        segs.append((s0, e0, int(e), "full"))
        cur = e0
    if cur < qe:
        segs.append((cur, qe, qe, "causal"))
    return segs


def forward_paged_piecewise(q: Array, kv_cache: Array, seq_lens: Array, block_table: Array,
                            spans: Sequence[Tuple[int, int]],
                            query_ranges: Optional[Sequence[Tuple[int, int, int]]] = None, *,
                            per_piece: bool = False, out: Optional[Array] = None,
                            lse: Optional[Array] = None, return_lse: bool = False,
                            ctx: Optional[Context] = None, reference: bool = False, **options: Any) -> Any:
    """Piecewise causal/full spans over a paged KV cache (attn_forward_paged_piecewise; vllm-omni
    run_paged_piecewise_plan). q [rows, query_len, num_heads, head_size] (the homogeneous batch, e.g. CFG
    rows; any strides); kv_cache [2, num_blocks, block_size, num_kv_heads, head_size] with the rows' keys
    already written; seq_lens int32 [rows] (row r's keys are positions [0, seq_lens[r])); block_table int32
    [rows, max_blocks]. spans: global positions, the same for every row. query_ranges None: each row's
    queries are its last query_len positions (kv_start_pos = seq_len - query_len). out like q; lse float32
    [rows, num_heads, query_len].

    per_piece=True runs vllm-omni's homogeneous-batch execution: one call per piece of
    :func:`paged_piecewise_segments` on the strided slices q[:, s:e] / out[:, s:e] (all rows must share
    seq_len; query_ranges None); the result is bitwise equal to the single call."""
    qa = _arrays.as_numpy(q, "q")
    if qa.ndim != 4:
        raise _arrays._invalid(f"q: ndim={qa.ndim}, expected 4 [rows, query_len, num_heads, head_size]")
    rows, qlen, num_heads = qa.shape[0], qa.shape[1], qa.shape[2]
    want_lse = return_lse or lse is not None
    if out is None:
        out = _arrays.empty(q, qa.shape, qa.dtype)
    if want_lse and lse is None:
        lse = _lse_out(q, (rows, num_heads, qlen))
    opts = _options(options)
    sla = _arrays.index_array(seq_lens, "seq_lens")
    bt = _arrays.index_array(block_table, "block_table")
    sp = _int64_rows(_pairs(spans, "spans"), 2)

    def run(qv: Any, ov: Any, lv: Any, ranges: Optional[Sequence[Tuple[int, int, int]]]) -> None:
        qr, nqr = (None, 0) if ranges is None else (_int64_rows(ranges, 3), len(ranges))
        args = (qv, kv_cache, sla, bt, sp, len(spans), qr, nqr, opts, ov, lv)
        if reference:
            _capi.call("attn_ref_forward_paged_piecewise", *args)
        else:
            _capi.call("attn_forward_paged_piecewise", _ctx_ptr(ctx), *args)

    if not per_piece:
        run(qa, out, lse if want_lse else None, query_ranges)
        return _result(out, lse, want_lse)
    if query_ranges is not None:
        raise _arrays._invalid("query_ranges: per_piece runs the default row model (query_ranges=None)")
    if rows and len(set(int(x) for x in np.asarray(sla).reshape(-1))) != 1:
        raise _arrays._invalid("seq_lens: per_piece needs the homogeneous batch (one seq_len for every row)")
    oa = _arrays.as_numpy(out, "out")
    la = _arrays.as_numpy(lse, "lse") if want_lse else None
    offset = (int(np.asarray(sla).reshape(-1)[0]) if rows else qlen) - qlen
    for s, e, _kv_end, _mode in paged_piecewise_segments(spans, offset, qlen):
        a, b = s - offset, e - offset  # the piece's local rows, the same in every row
        run(qa[:, a:b], oa[:, a:b], None if la is None else la[:, :, a:b], [(0, b - a, s)])
    return _result(out, lse, want_lse)


def forward_kv_prefix(q: Array, k: Array, v: Array, valid_kv_length: int, *,
                      layout: Union[str, int] = "BSND", out: Optional[Array] = None,
                      lse: Optional[Array] = None, return_lse: bool = False,
                      ctx: Optional[Context] = None, **options: Any) -> Any:
    """Attention over k[:, :valid_kv_length], v[:, :valid_kv_length] (zero-copy; attn_forward_kv_prefix).
    Non-causal only."""
    d = _DenseCall(q, k, v, layout, out, lse, return_lse, options)
    _capi.call("attn_forward_kv_prefix", _ctx_ptr(ctx), d.layout, *d.qkv, int(valid_kv_length), d.opts,
               *d.outs)
    return d.result()


def forward_prescaled(q: Array, k: Array, v: Array, input_scale_log2: int, *,
                      layout: Union[str, int] = "BSND", out: Optional[Array] = None,
                      lse: Optional[Array] = None, return_lse: bool = False,
                      ctx: Optional[Context] = None, **options: Any) -> Any:
    """Attention with q, k, v divided by c = 2^input_scale_log2 (0..30) and the scale/output corrected
    (attn_forward_prescaled): exact for float32 inputs in the normal range."""
    d = _DenseCall(q, k, v, layout, out, lse, return_lse, options)
    ws, nbytes, _keep = _workspace(_size("attn_forward_prescaled_workspace_size", *d.qkv))
    _capi.call("attn_forward_prescaled", _ctx_ptr(ctx), d.layout, *d.qkv, int(input_scale_log2),
               d.opts, *d.outs, ws, nbytes)
    return d.result()


def quant_params(format: str = "fp8_e4m3", rotate: Optional[bool] = None,
                 rotation_seed: Optional[int] = None, q_block_rows: Optional[int] = None,
                 kv_block_rows: Optional[int] = None) -> tuple:
    """attn_quant_params for format "fp8_e4m3" | "fp8_e5m2" | "mxfp8" | "mxfp4" (defaults from
    attn_quant_params_init: rotation on, seed 425500, FP8 row blocks 128/256)."""
    if format not in _QUANT_FORMATS:
        raise ValueError(f"format={format!r}: expected one of {sorted(_QUANT_FORMATS)}")
    def whole(name: str, x: Optional[int]) -> Optional[int]:
        if x is None:
            return None
        try:  # an integer: not a float that int() would truncate, nor a bool
            if isinstance(x, (bool, np.bool_)):
                raise TypeError
            return operator.index(x)
        except TypeError:
            raise TypeError(f"{name}={x!r}: expected an integer") from None

    # (format, rotate, rotation_seed, q_block_rows, kv_block_rows): None keeps attn_quant_params_init's value;
    # the extension checks the ranges and names the field
    return (_QUANT_FORMATS[format], None if rotate is None else int(bool(rotate)),
            whole("rotation_seed", rotation_seed), whole("q_block_rows", q_block_rows),
            whole("kv_block_rows", kv_block_rows))


def forward_quant(q: Array, k: Array, v: Array, format: str = "fp8_e4m3", *,
                  rotate: Optional[bool] = None, rotation_seed: Optional[int] = None,
                  q_block_rows: Optional[int] = None, kv_block_rows: Optional[int] = None,
                  layout: Union[str, int] = "BSND", out: Optional[Array] = None,
                  lse: Optional[Array] = None, return_lse: bool = False, ctx: Optional[Context] = None,
                  reference: bool = False, **options: Any) -> Any:
    """Quantized attention (attn_forward_quant): Q, K (Hadamard-rotated unless rotate=False) and V are
    quantized to ``format``, then attention runs on the quantized values (on CPUs with AVX2 or
    AVX512-BF16 directly on the codes; docs/DIFFUSION.md §5). Non-causal, no window, no masks
    (UNSUPPORTED otherwise)."""
    d = _DenseCall(q, k, v, layout, out, lse, return_lse, options)
    qp = quant_params(format, rotate, rotation_seed, q_block_rows, kv_block_rows)
    if reference:
        _capi.call("attn_ref_forward_quant", d.layout, *d.qkv, qp, d.opts, *d.outs)
        return d.result()
    try:
        size = _size("attn_forward_quant_workspace_size", d.layout, *d.qkv)
    except _capi.AttnError:  # the same check, reported under the entry the caller used
        _capi.call("attn_forward_quant", _ctx_ptr(ctx), d.layout, *d.qkv, qp, d.opts, *d.outs, None, 0)
        raise
    ws, nbytes, _keep = _workspace(size)
    _capi.call("attn_forward_quant", _ctx_ptr(ctx), d.layout, *d.qkv, qp, d.opts,
               *d.outs, ws, nbytes)
    return d.result()


def quant_kernels(ctx: Optional[Context] = None) -> str:
    """The kernels :func:`forward_quant` runs on ``ctx`` (attn_forward_quant_kernels): "amx" (the bf16 path on
    AMX tiles, every format, P rounded to bf16), "avx512bf16" (bf16
    products, P rounded to bf16; MXFP4 with AVX512-VNNI on int8 dots, P as bytes per 32-key block), "avx2"
    (bitwise the fake quantization) or "fake" (docs/DIFFUSION.md §5)."""
    return _capi.ext.attn_forward_quant_kernels(_ctx_ptr(ctx))


# ------------------------------------------------------------------------------------------------
# Formats
# ------------------------------------------------------------------------------------------------
def _f32(x: Any) -> np.ndarray:
    return np.ascontiguousarray(_arrays.as_numpy(x), dtype=np.float32)


def _fp8_format(format: str) -> int:
    """The attn dtype code of an FP8 format name ("e4m3" / "e5m2")."""
    code = _FP8.get(format) if isinstance(format, str) else None
    if code is None:
        raise _arrays._invalid(f"format={format!r}: expected one of {sorted(_FP8)}")
    return code


def quantize_fp8(x: Any, scale: float = 1.0, format: str = "e4m3") -> np.ndarray:
    """encode(x / scale) to FP8 (round-to-nearest-even, saturating). Returns uint8 codes of x's shape
    (view them as ml_dtypes.float8_e4m3fn / float8_e5m2 if wanted)."""
    src = _f32(x)
    dst = np.empty(src.shape, dtype=np.uint8)
    _capi.call("attn_quantize_fp8", _fp8_format(format), src, src.size, float(scale), dst)
    return dst


def dequantize_fp8(codes: Any, scale: float = 1.0, format: str = "e4m3") -> np.ndarray:
    """decode(codes) * scale as float32 (codes: uint8 or an ml_dtypes float8 array)."""
    src = np.ascontiguousarray(_arrays.as_numpy(codes)).view(np.uint8)
    dst = np.empty(src.shape, dtype=np.float32)
    _capi.call("attn_dequantize_fp8", _fp8_format(format), src, src.size, float(scale), dst)
    return dst


def quantize_mx(x: Any, element_format: str = "e4m3") -> Tuple[np.ndarray, np.ndarray]:
    """OCP MX quantization of x (flattened) in blocks of 32: returns (elements uint8, scales uint8 E8M0).
    element_format "e4m3" | "e5m2" (one byte each) | "e2m1" (packed two per byte)."""
    src = _f32(x).reshape(-1)
    fmt = _MX_ELEMENTS[element_format]
    n = src.size
    elems = np.zeros((n + 1) // 2 if fmt == _capi.DTYPE_FP4_E2M1 else n, dtype=np.uint8)
    scales = np.zeros((n + 31) // 32, dtype=np.uint8)
    _capi.call("attn_quantize_mx", fmt, src, n, elems, scales)
    return elems, scales


def dequantize_mx(elements: Any, scales: Any, n: int, element_format: str = "e4m3") -> np.ndarray:
    """Inverse of :func:`quantize_mx`: float32 [n]."""
    e = np.ascontiguousarray(_arrays.as_numpy(elements)).view(np.uint8)
    s = np.ascontiguousarray(_arrays.as_numpy(scales)).view(np.uint8)
    fmt = _MX_ELEMENTS[element_format]
    need_e = (n + 1) // 2 if fmt == _capi.DTYPE_FP4_E2M1 else n
    if e.size < need_e or s.size < (n + 31) // 32:
        raise ValueError(f"elements: {e.size} bytes, scales: {s.size} bytes; n={n} needs {need_e} and "
                         f"{(n + 31) // 32}")
    dst = np.empty(int(n), dtype=np.float32)
    _capi.call("attn_dequantize_mx", fmt, e, s, int(n), dst)
    return dst


def fp8_from_float(x: float, format: str = "e4m3") -> int:
    return int(_capi.ext.attn_fp8_from_float(_fp8_format(format), float(x)))


def fp8_to_float(bits: int, format: str = "e4m3") -> float:
    return float(_capi.ext.attn_fp8_to_float(_fp8_format(format), int(bits)))


def fp4_e2m1_from_float(x: float) -> int:
    return int(_capi.ext.attn_fp4_e2m1_from_float(float(x)))


def fp4_e2m1_to_float(nibble: int) -> float:
    return float(_capi.ext.attn_fp4_e2m1_to_float(int(nibble)))


def e8m0_to_float(bits: int) -> float:
    return float(_capi.ext.attn_e8m0_to_float(int(bits)))


def hadamard_signs(head_size: int, seed: int = _capi.HADAMARD_SEED) -> np.ndarray:
    """int8 [head_size] of +-1 (MT19937-seeded signs of the rotation)."""
    out = np.empty(int(head_size), dtype=np.int8)
    _capi.call("attn_hadamard_signs", int(head_size), int(seed), out)
    return out


def hadamard_rotate(x: Any, seed: int = _capi.HADAMARD_SEED) -> np.ndarray:
    """x' = x . R for rows of x float32 [..., head_size] (head_size a power of two <= 256)."""
    src = _f32(x)
    d = src.shape[-1] if src.ndim else 0
    dst = np.empty_like(src)
    _capi.call("attn_hadamard_rotate", src, src.size // max(d, 1), d, int(seed), dst)
    return dst
