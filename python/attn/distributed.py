"""attn.distributed — context parallelism across processes on MPI, over libattn_mpi.

The same operations as include/attn/attn_mpi.h on NumPy arrays and torch tensors (DLPack, no copies of the
inputs), with communicators from mpi4py (the optional ``distributed`` extra: ``pip install .[distributed]``):

    from mpi4py import MPI
    import attn.distributed as ad
    plan = ad.RingPlan(MPI.COMM_WORLD, batch=1, seq_len=S, num_heads=8, num_kv_heads=2, head_size=128)
    out = plan.forward(q, k, v, causal=True)          # q/k/v: this rank's zig-zag rows

    DCPPlan      decode context parallel on the paged cache (interleaved KV shards, merge in rank order)
    RingPlan     ring attention (PCP) with zig-zag shards; forward_paged reads the rank's own cache
    UlyssesPlan  all-to-all sequence <-> head shards around attention (masks, windows, ALiBi) / varlen
    usp_forward  Ulysses inside ring (two communicators)

Every call is collective over the plan's communicator. Bad arguments raise the package's exception family
(attn.AttnInvalidArgumentError, ...) on EVERY rank (the other ranks' message names the failing rank), and so
do options that differ between ranks (window_size, softcap, softmax_scale, sinks, ... : the message names
the option). A plan closed on one rank only cannot be agreed on (it has no communicator left): that rank
raises at once and the others wait in the collective, as with any MPI call one rank skips.
Semantics, sharding and merge orders: docs/CONTEXT_PARALLEL.md. The library is found at ATTN_MPI_LIBRARY,
else next to the libattn in use (libattn_mpi.so in the same directory).
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _capi
from .ops import Context, Params, _ctx

try:
    from mpi4py import MPI
except ImportError as e:  # pragma: no cover - optional extra
    raise ImportError("attn.distributed needs mpi4py: pip install mpi4py (or pip install .[distributed]) "
                      "and an MPI library (bash scripts/mpi_env.sh installs Open MPI)") from e

__all__ = ["DCPPlan", "RingPlan", "UlyssesPlan", "usp_forward", "dcp_local_len", "dcp_slot_mapping",
           "zigzag_chunks", "Stats"]


def _load() -> ctypes.CDLL:
    env = os.environ.get("ATTN_MPI_LIBRARY")
    cands = [env] if env else [os.path.join(os.path.dirname(_capi.library_path or ""), "libattn_mpi.so"),
                               os.path.join(os.path.dirname(os.path.abspath(__file__)), "libattn_mpi.so")]
    for c in cands:
        if c and os.path.exists(c):
            return ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
    raise ImportError("attn.distributed: libattn_mpi.so not found (tried " + ", ".join(map(str, cands)) +
                      "); build with MPI (cmake -DATTN_MPI=ON) or set ATTN_MPI_LIBRARY")


_lib = _load()
_lib.attn_mpi_last_error.restype = ctypes.c_char_p
_lib.attn_mpi_dcp_local_len.restype = ctypes.c_int64
_lib.attn_mpi_dcp_local_len.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
_P = ctypes.c_void_p


class Stats(ctypes.Structure):
    """Counters of the last call (attn_mpi_stats): bytes this rank sent / received, messages, and seconds
    in compute, in not-hidden communication (wait) and in total."""
    _fields_ = [("bytes_sent", ctypes.c_int64), ("bytes_received", ctypes.c_int64),
                ("num_messages", ctypes.c_int64), ("compute_seconds", ctypes.c_double),
                ("wait_seconds", ctypes.c_double), ("total_seconds", ctypes.c_double)]

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f, _ in self._fields_}


class _DCPConfig(ctypes.Structure):
    _fields_ = [("interleave_size", ctypes.c_int32), ("num_heads", ctypes.c_int32), ("head_size", ctypes.c_int32),
                ("max_tokens", ctypes.c_int32), ("max_blocks_per_req", ctypes.c_int32)]


class _RingConfig(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("seq_len", ctypes.c_int64), ("num_heads", ctypes.c_int32),
                ("num_kv_heads", ctypes.c_int32), ("head_size", ctypes.c_int32), ("head_size_v", ctypes.c_int32),
                ("kv_dtype", ctypes.c_int32)]


class _UlyssesConfig(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int64), ("seq_local", ctypes.c_int64), ("num_heads", ctypes.c_int32),
                ("num_kv_heads", ctypes.c_int32), ("head_size", ctypes.c_int32), ("head_size_v", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("kv_dtype", ctypes.c_int32)]


class _Tensor(ctypes.Structure):
    """attn_tensor (attn.h): a strided view, shape and strides in elements."""

    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 6), ("strides", ctypes.c_int64 * 6)]


class _Params(ctypes.Structure):
    """attn_params (attn.h), every field set (struct_size = sizeof)."""

    _fields_ = [("struct_size", ctypes.c_size_t), ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32),
                ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32), ("softcap", ctypes.c_float),
                ("alibi_slopes", ctypes.c_void_p), ("sinks", ctypes.c_void_p), ("mask", ctypes.POINTER(_Tensor)),
                ("key_padding_mask", ctypes.POINTER(_Tensor)), ("additive_mask", ctypes.POINTER(_Tensor)),
                ("k_scale", ctypes.c_float), ("v_scale", ctypes.c_float), ("k_scales", ctypes.c_void_p),
                ("v_scales", ctypes.c_void_p)]


class _Args:
    """The attn_tensor / attn_params arguments of one libattn_mpi call (libattn_mpi is the one library the
    package still calls through ctypes: attn._ext binds libattn only), alive until the call returns."""

    def __init__(self) -> None:
        self.keep: list = []

    def _tensor(self, x: Any, name: str, writable: bool = False) -> Any:
        a = _arrays.tensor(x, name, writable)  # checked as attn._ext checks it, as a NumPy view
        t = _Tensor(a.__array_interface__["data"][0], _arrays.NP_TO_ATTN[a.dtype], a.ndim)
        for i, (n, st) in enumerate(zip(a.shape, a.strides)):
            t.shape[i] = n
            t.strides[i] = st // a.itemsize if n > 1 else int(i == a.ndim - 1)  # (size 1: never used)
        self.keep.append((t, a))
        return t

    def t(self, x: Any, name: str, writable: bool = False) -> Any:
        return None if x is None else ctypes.byref(self._tensor(x, name, writable))

    def p(self, num_heads: int, **kw: Any) -> Any:
        a = Params(num_heads=num_heads, **kw).args
        self.keep.append(a)
        ptr = (lambda v: None if v is None else v.__array_interface__["data"][0])
        tp = (lambda v, n: None if v is None else ctypes.pointer(self._tensor(v, n)))
        p = _Params(ctypes.sizeof(_Params), a[0], a[1], a[2], a[3], a[4], ptr(a[5]), ptr(a[6]),
                    tp(a[7], "params.mask"), tp(a[8], "params.key_padding_mask"), tp(a[9], "params.additive_mask"),
                    a[10], a[11], ptr(a[12]), ptr(a[13]))
        self.keep.append(p)
        return ctypes.byref(p)


def _c_ctx(ctx: Optional[Context]) -> ctypes.c_void_p:
    return ctypes.c_void_p(_ctx(ctx))


def _check(status: int, name: str) -> None:
    if status != _capi.STATUS_OK:
        msg = (_lib.attn_mpi_last_error() or b"").decode("utf-8", "replace")
        raise _capi.make_error(status, msg, name)


def _comm(comm: Any) -> ctypes.c_void_p:
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm: expected an mpi4py communicator, got {type(comm).__name__}")
    return ctypes.c_void_p(MPI._handleof(comm))


def _dtype_code(dt: Any, name: str) -> int:
    try:
        return _arrays.attn_dtype(np.dtype(dt) if not isinstance(dt, int) else dt)
    except Exception:
        raise TypeError(f"{name}={dt!r}: expected float32, float16 or bfloat16") from None


def dcp_local_len(seq_len: int, world: int, interleave: int, rank: int) -> int:
    """Keys of a length-seq_len request that `rank` holds under DCP (vllm-ascend's get_dcp_local_seq_lens)."""
    return int(_lib.attn_mpi_dcp_local_len(seq_len, world, interleave, rank))


def dcp_slot_mapping(rank: int, world: int, interleave: int, block_size: int, first_pos: int,
                     num_tokens: int, block_ids: Any) -> np.ndarray:
    """int64 [num_tokens]: this rank's cache slot of positions first_pos.., −1 where another rank owns it."""
    ids = np.ascontiguousarray(_arrays.index_array(block_ids, "block_ids"), dtype=np.int32)
    out = np.empty(num_tokens, dtype=np.int64)
    _check(_lib.attn_mpi_dcp_slot_mapping(rank, world, interleave, block_size, ctypes.c_int64(first_pos),
                                          ctypes.c_int64(num_tokens), ids.ctypes.data_as(_P),
                                          ctypes.c_int64(ids.size), out.ctypes.data_as(_P)), "attn_mpi_dcp_slot_mapping")
    return out


def zigzag_chunks(seq_len: int, world: int, rank: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """((start, len) of chunk `rank`, (start, len) of chunk 2·world−1−rank): this rank's zig-zag rows."""
    s = (ctypes.c_int64 * 2)()
    n = (ctypes.c_int64 * 2)()
    _check(_lib.attn_mpi_zigzag_chunks(ctypes.c_int64(seq_len), world, rank, s, n), "attn_mpi_zigzag_chunks")
    return (s[0], n[0]), (s[1], n[1])


class _Plan:
    _free = ""

    def __init__(self) -> None:
        self._h = ctypes.c_void_p()
        self.stats = Stats()

    def _handle(self) -> ctypes.c_void_p:
        if not self._h:
            raise _capi.make_error(_capi.STATUS_INVALID_ARGUMENT, "plan: closed (close() was called on this rank; "
                                   "the other ranks wait in the collective)", type(self).__name__)
        return self._h

    def close(self) -> None:
        if self._h:
            getattr(_lib, self._free)(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self) -> None:  # pragma: no cover - collected at exit
        try:
            if not MPI.Is_finalized():
                self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a) -> None:
        self.close()


class DCPPlan(_Plan):
    """Decode context parallel (attn_mpi_dcp_plan): queries replicated, KV interleaved over the ranks."""
    _free = "attn_mpi_dcp_plan_free"

    def __init__(self, comm: Any, *, interleave_size: int, num_heads: int, head_size: int, max_tokens: int,
                 max_blocks_per_req: int):
        super().__init__()
        self.num_heads, self.head_size = num_heads, head_size
        cfg = _DCPConfig(interleave_size, num_heads, head_size, max_tokens, max_blocks_per_req)
        _check(_lib.attn_mpi_dcp_plan_create(_comm(comm), ctypes.byref(cfg), ctypes.byref(self._h)),
               "attn_mpi_dcp_plan_create")

    def forward(self, q: Any, kv_cache: Any, query_start_loc: Any, seq_lens: Any, block_table: Any, *,
                causal: Any = True, softmax_scale: Optional[float] = None, softcap: float = 0.0,
                sinks: Any = None, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None) -> Any:
        """q [num_tokens, H, D] (same on every rank); kv_cache this rank's [2, blocks, block_size, Hkv, D];
        seq_lens GLOBAL int32 [num_reqs]; block_table this rank's int32 [num_reqs, max_blocks].
        Returns out [num_tokens, H, D] (q's dtype) and, with return_lse, lse float32 [H, num_tokens]."""
        shp = _arrays.shape_of(q, "q")
        o = out if out is not None else _arrays.empty(q, shp, _arrays.dtype_of(q, "q"))
        lse = _arrays.empty(q, (self.num_heads, shp[0] if shp else 0), np.float32) if return_lse else None
        qsl = np.ascontiguousarray(_arrays.index_array(query_start_loc, "query_start_loc"), np.int32)
        sl = np.ascontiguousarray(_arrays.index_array(seq_lens, "seq_lens"), np.int32)
        bt = np.ascontiguousarray(_arrays.index_array(block_table, "block_table"), np.int32)
        c = _Args()
        p = c.p(self.num_heads, softmax_scale=softmax_scale, causal=causal, softcap=softcap, sinks=sinks)
        _check(_lib.attn_mpi_dcp_forward(_c_ctx(ctx), self._handle(), c.t(q, "q"), c.t(kv_cache, "kv_cache"),
                                         c.t(qsl, "query_start_loc"), c.t(sl, "seq_lens"), c.t(bt, "block_table"), p,
                                         c.t(o, "out", True), c.t(lse, "lse", True), ctypes.byref(self.stats)),
               "attn_mpi_dcp_forward")
        return (o, lse) if return_lse else o


class RingPlan(_Plan):
    """Ring attention (attn_mpi_ring_plan) over zig-zag shards of a length-seq_len sequence."""
    _free = "attn_mpi_ring_plan_free"

    def __init__(self, comm: Any, *, batch: int, seq_len: int, num_heads: int, num_kv_heads: int, head_size: int,
                 head_size_v: Optional[int] = None, kv_dtype: Any = np.float32):
        super().__init__()
        self.num_heads = num_heads
        self.head_size_v = head_size if head_size_v is None else head_size_v
        self.batch = batch
        (_, l0), (_, l1) = zigzag_chunks(seq_len, comm.Get_size(), comm.Get_rank())
        self.seq_local = l0 + l1
        cfg = _RingConfig(batch, seq_len, num_heads, num_kv_heads, head_size, self.head_size_v,
                          _dtype_code(kv_dtype, "kv_dtype"))
        _check(_lib.attn_mpi_ring_plan_create(_comm(comm), ctypes.byref(cfg), ctypes.byref(self._h)),
               "attn_mpi_ring_plan_create")

    def forward(self, q: Any, k: Any, v: Any, *, causal: Any = True, softmax_scale: Optional[float] = None,
                softcap: float = 0.0, sinks: Any = None, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None) -> Any:
        """q [batch, seq_local, H, D], k/v [batch, seq_local, Hkv, D(v)]: this rank's zig-zag rows (chunk
        rank, then chunk 2P−1−rank). Returns out (q's dtype) [, lse float32 [batch, H, seq_local]]."""
        shp = _arrays.shape_of(q, "q")
        o = out if out is not None else _arrays.empty(q, tuple(shp[:3]) + (self.head_size_v,), _arrays.dtype_of(q, "q"))
        lse = _arrays.empty(q, (self.batch, self.num_heads, self.seq_local), np.float32) if return_lse else None
        c = _Args()
        p = c.p(self.num_heads, softmax_scale=softmax_scale, causal=causal, softcap=softcap, sinks=sinks)
        _check(_lib.attn_mpi_ring_forward(_c_ctx(ctx), self._handle(), c.t(q, "q"), c.t(k, "k"), c.t(v, "v"), p,
                                          c.t(o, "out", True), c.t(lse, "lse", True), ctypes.byref(self.stats)),
               "attn_mpi_ring_forward")
        return (o, lse) if return_lse else o

    def forward_paged(self, q: Any, kv_cache: Any, block_table: Any, *, causal: Any = True,
                      softmax_scale: Optional[float] = None, softcap: float = 0.0, sinks: Any = None,
                      out: Any = None, return_lse: bool = False, ctx: Optional[Context] = None) -> Any:
        """q [seq_local, H, D]; kv_cache this rank's cache holding its shard through block_table (int32)."""
        shp = _arrays.shape_of(q, "q")
        o = out if out is not None else _arrays.empty(q, shp, _arrays.dtype_of(q, "q"))
        lse = _arrays.empty(q, (self.num_heads, self.seq_local), np.float32) if return_lse else None
        bt = np.ascontiguousarray(_arrays.index_array(block_table, "block_table"), np.int32)
        c = _Args()
        p = c.p(self.num_heads, softmax_scale=softmax_scale, causal=causal, softcap=softcap, sinks=sinks)
        _check(_lib.attn_mpi_ring_forward_paged(_c_ctx(ctx), self._handle(), c.t(q, "q"), c.t(kv_cache, "kv_cache"),
                                                c.t(bt, "block_table"), p, c.t(o, "out", True), c.t(lse, "lse", True),
                                                ctypes.byref(self.stats)), "attn_mpi_ring_forward_paged")
        return (o, lse) if return_lse else o


class UlyssesPlan(_Plan):
    """Ulysses (attn_mpi_ulysses_plan): rank r holds rows [r·seq_local, (r+1)·seq_local) of every sequence."""
    _free = "attn_mpi_ulysses_plan_free"

    def __init__(self, comm: Any, *, batch: int, seq_local: int, num_heads: int, num_kv_heads: int,
                 head_size: int, head_size_v: Optional[int] = None, dtype: Any = np.float32, kv_dtype: Any = None):
        super().__init__()
        self.batch, self.seq_local, self.num_heads = batch, seq_local, num_heads
        self.head_size_v = head_size if head_size_v is None else head_size_v
        cfg = _UlyssesConfig(batch, seq_local, num_heads, num_kv_heads, head_size, self.head_size_v,
                             _dtype_code(dtype, "dtype"), _dtype_code(dtype if kv_dtype is None else kv_dtype, "kv_dtype"))
        _check(_lib.attn_mpi_ulysses_plan_create(_comm(comm), ctypes.byref(cfg), ctypes.byref(self._h)),
               "attn_mpi_ulysses_plan_create")

    def _run(self, name: str, q: Any, k: Any, v: Any, extra: Sequence[Any], lse_shape: Tuple[int, ...],
             out: Any, return_lse: bool, ctx: Optional[Context], kw: dict, ring: Any = None) -> Any:
        shp = _arrays.shape_of(q, "q")
        o = out if out is not None else _arrays.empty(q, tuple(shp[:-1]) + (self.head_size_v,), _arrays.dtype_of(q, "q"))
        lse = _arrays.empty(q, lse_shape, np.float32) if return_lse else None
        c = _Args()
        p = c.p(self.num_heads, **kw)
        head = [self._handle()] if ring is None else [self._handle(), ring._handle()]
        _check(getattr(_lib, name)(_c_ctx(ctx), *head, c.t(q, "q"), c.t(k, "k"), c.t(v, "v"),
                                   *[c.t(e, n) for e, n in extra], p, c.t(o, "out", True), c.t(lse, "lse", True),
                                   ctypes.byref(self.stats)), name)
        return (o, lse) if return_lse else o

    def forward(self, q: Any, k: Any, v: Any, *, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None, **kw: Any) -> Any:
        """Dense BSND attention of the global sequence; kw as attn.attention (causal, window_size, softcap,
        alibi_slopes, sinks, mask, key_padding_mask, additive_mask, softmax_scale). Bitwise equal to one
        process."""
        return self._run("attn_mpi_ulysses_forward", q, k, v, [], (self.batch, self.num_heads, self.seq_local),
                         out, return_lse, ctx, kw)

    def forward_varlen(self, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *, out: Any = None,
                       return_lse: bool = False, ctx: Optional[Context] = None, **kw: Any) -> Any:
        """Packed documents: q [seq_local, H, D] this rank's rows; cu_seqlens over the GLOBAL rows."""
        cq = (np.ascontiguousarray(_arrays.index_array(cu_seqlens_q, "cu_seqlens_q"), np.int32), "cu_seqlens_q")
        ck = (np.ascontiguousarray(_arrays.index_array(cu_seqlens_k, "cu_seqlens_k"), np.int32), "cu_seqlens_k")
        return self._run("attn_mpi_ulysses_forward_varlen", q, k, v, [cq, ck], (self.num_heads, self.seq_local),
                         out, return_lse, ctx, kw)


def usp_forward(ulysses: UlyssesPlan, ring: RingPlan, q: Any, k: Any, v: Any, *, out: Any = None,
                return_lse: bool = False, ctx: Optional[Context] = None, **kw: Any) -> Any:
    """USP: Ulysses inside ring (attn_mpi_usp_forward); kw: causal, softmax_scale, softcap, sinks."""
    return ulysses._run("attn_mpi_usp_forward", q, k, v, [], (ulysses.batch, ulysses.num_heads, ulysses.seq_local),
                        out, return_lse, ctx, kw, ring=ring)
