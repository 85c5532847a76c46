"""attn.distributed — context parallelism across processes, on MPI or on torch.distributed.

The one implementation of decode context parallel (DCP), ring attention (zig-zag, causal), Ulysses and USP for
Python, written over a small transport (non-blocking send/receive pairs, an allreduce of a few int64, allgather,
all-to-all) on either an mpi4py communicator or a torch.distributed ProcessGroup (gloo, CPU tensors). Local
attention and the merges of partial states are attn's single-process calls (attention, attention_varlen,
paged_attention, merge_attn_states). Inputs are NumPy arrays or torch CPU tensors (no copies of the inputs);
mpi4py is imported only for an MPI communicator, torch only for a ProcessGroup:

    plan = attn.distributed.RingPlan(comm, batch=1, seq_len=S, num_heads=8, num_kv_heads=2, head_size=128)
    out = plan.forward(q, k, v, causal=True)    # q/k/v: this rank's zig-zag rows; comm: MPI.COMM_WORLD,
                                                # torch.distributed.group.WORLD or a dist.new_group(...)
    DCPPlan      decode context parallel on the paged cache (interleaved KV shards, merge in rank order)
    RingPlan     ring attention (PCP) with zig-zag shards; forward_paged reads the rank's own cache
    UlyssesPlan  all-to-all sequence <-> head shards around attention (masks, windows, ALiBi) / varlen
    usp_forward  Ulysses inside ring (two communicators)

Every call is collective over the plan's communicator. Bad arguments raise the package's exception family on
EVERY rank (the others' message names the failing rank), and so do options that differ between ranks (the
message names the option): one allreduce agrees on them before any data moves. A plan closed on one rank only
cannot be agreed on: that rank raises at once and the others wait, as with any collective one rank skips.
Merges run in a fixed order, so the bits never depend on message timing. docs/CONTEXT_PARALLEL.md.
"""
from __future__ import annotations

import dataclasses
import hashlib
import operator
import time
from typing import Any, Optional, Tuple

import numpy as np

from . import _arrays, _capi, ops
from .ops import Context, Params

__all__ = ["DCPPlan", "RingPlan", "UlyssesPlan", "usp_forward", "dcp_local_len", "dcp_slot_mapping",
           "zigzag_chunks", "Stats"]

_INVALID, _MAX_SEQ, _MAX_HEADS = _capi.STATUS_INVALID_ARGUMENT, 2**31 - 1, 4096
_FLOATS = {dt for dt, c in _arrays.NP_TO_ATTN.items() if c in (_capi.DTYPE_F32, _capi.DTYPE_F16, _capi.DTYPE_BF16)}


def _err(msg: str, fn: str, status: int = _INVALID) -> _capi.AttnError:
    return _capi.make_error(status, msg, fn)


@dataclasses.dataclass
class Stats:
    """Counters of the last call: bytes this rank sent / received, messages, and seconds in compute, in
    waiting for communication (not hidden behind compute) and in total."""
    bytes_sent: int = 0
    bytes_received: int = 0
    num_messages: int = 0
    compute_seconds: float = 0.0
    wait_seconds: float = 0.0
    total_seconds: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# ---- transports: the operations the algorithms use -------------------------------------------------------
class _MPI:
    """An mpi4py communicator, duplicated per plan once the ranks agreed on its config."""

    def __init__(self, comm: Any):
        from mpi4py import MPI  # only needed for an MPI communicator
        if comm == MPI.COMM_NULL:
            raise _err("comm: MPI_COMM_NULL", "attn.distributed")
        self.MPI, self.comm, self.rank, self.size = MPI, comm, comm.Get_rank(), comm.Get_size()
        self.allgather, self.alltoall = (lambda a, out: self.comm.Allgather(a, out)), \
            (lambda a, out: self.comm.Alltoall(a, out))

    def dup(self) -> None:
        self.comm = self.comm.Dup()

    def close(self) -> None:
        if not self.MPI.Is_finalized():
            self.comm.Free()

    def allreduce_max(self, a: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        self.comm.Allreduce(a, out, op=self.MPI.MAX)
        return out

    def exchange(self, send: np.ndarray, dst: int, recv: np.ndarray, src: int, tag: int) -> list:
        return ([self.comm.Irecv(recv, src, tag)] if recv.size else []) + \
               ([self.comm.Isend(send, dst, tag)] if send.size else [])

    def wait(self, reqs: list) -> None:
        self.MPI.Request.Waitall(reqs)


class _Torch:
    """A torch.distributed ProcessGroup (gloo): NumPy buffers travel as torch.from_numpy views (no copies)."""

    def __init__(self, group: Any):
        import torch
        import torch.distributed as dist  # only needed for a ProcessGroup
        self.f, self.d, self.g = torch.from_numpy, dist, group
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        if self.rank < 0:
            raise _err("comm: this process is not a member of the ProcessGroup", "attn.distributed")
        self.dup = self.close = (lambda: None)

    def allreduce_max(self, a: np.ndarray) -> np.ndarray:
        x = self.f(a.copy())
        self.d.all_reduce(x, op=self.d.ReduceOp.MAX, group=self.g)
        return x.numpy()

    def allgather(self, a: np.ndarray, out: np.ndarray) -> None:
        self.d.all_gather(list(self.f(out).unbind(0)), self.f(a), group=self.g)

    def alltoall(self, a: np.ndarray, out: np.ndarray) -> None:
        self.d.all_to_all_single(self.f(out), self.f(a), group=self.g)

    def exchange(self, send: np.ndarray, dst: int, recv: np.ndarray, src: int, tag: int) -> list:
        g = self.d.get_global_rank  # isend / irecv name ranks of the default group
        return ([self.d.irecv(self.f(recv), g(self.g, src), self.g, tag)] if recv.size else []) + \
               ([self.d.isend(self.f(send), g(self.g, dst), self.g, tag)] if send.size else [])

    def wait(self, reqs: list) -> None:
        for w in reqs:
            w.wait()


def _transport(comm: Any) -> Any:
    kind = {"mpi4py": _MPI, "torch": _Torch}.get(type(comm).__module__.split(".")[0])
    if kind is None:
        raise TypeError(f"comm: expected an mpi4py communicator or a torch.distributed ProcessGroup, got "
                        f"{type(comm).__name__}")
    return kind(comm)


# ---- agreement -------------------------------------------------------------------------------------------
def _digest(x: Any) -> int:
    """A 56-bit hash, the same in every process (None -> 0); arrays hash dtype, shape and contents."""
    if x is None:
        return 0
    b = repr((x.dtype.name, x.shape)).encode() + np.ascontiguousarray(x).tobytes() if hasattr(x, "dtype") else \
        repr(x).encode()
    return int.from_bytes(hashlib.blake2b(b, digest_size=7).digest(), "little") | 1


def _agree(tp: Any, fn: str, verb: str, exc: Optional[BaseException], facts: Optional[list], n: int) -> None:
    """ONE allreduce(MAX) over [lowest failing rank and its status, highest failing rank, each fact, its
    negation] (facts: n (name, int, shown) that must be equal on every rank). Raises on every rank: this
    rank's own error, else one naming the failing rank(s), else one naming the first fact that differs."""
    st = getattr(exc, "status", _capi.STATUS_UNSUPPORTED if isinstance(exc, NotImplementedError) else _INVALID)
    vals = [int(v) for _, v, _ in facts] if exc is None else [0] * n
    a = np.array([(_MAX_SEQ - tp.rank) * 64 + st if exc else -1, tp.rank if exc else -1]
                 + vals + [-v for v in vals], np.int64)
    r = tp.allreduce_max(a)
    if exc is not None:
        if isinstance(exc, _capi.AttnError):
            raise exc
        wrap = _arrays._type_error if isinstance(exc, TypeError) else (lambda m: _err(m, fn, st))
        raise wrap(str(exc)) from exc
    if r[0] >= 0:
        lo, hi, s = _MAX_SEQ - int(r[0]) // 64, int(r[1]), int(r[0]) % 64
        who = f"rank {lo}" if lo == hi else f"ranks {lo}..{hi} (lowest and highest failing)"
        raise _err(f"{who} {verb}: {_capi.status_string(s)} (that rank's exception names the cause)", fn, s)
    for i, (name, v, shown) in enumerate(facts):
        if r[2 + i] != -r[2 + n + i]:
            raise _err(f"{name} differs between ranks (this rank {shown}): every rank must pass the same value", fn)


def _collective(tp: Any, fn: str, n: int, local: Any, verb: str = "rejected its arguments") -> Any:
    """Runs local() -> (facts, result) on this rank, agrees on its outcome with every rank, returns result."""
    try:
        facts, res = local()
        exc = None
    except Exception as e:  # noqa: BLE001 - re-raised by _agree after the other ranks heard of it
        facts, res, exc = None, None, e
    _agree(tp, fn, verb, exc, facts, n)
    return res


def _param_facts(p: Params) -> list:
    """The attn_params options that must be the same on every rank (10 facts)."""
    a = p.args
    bits = (lambda x: int(np.float32(x).view(np.int32)) if x else 0)  # -0 counts as +0 (off / default)
    given = (lambda x: "None" if x is None else "given")
    shape = (lambda m: None if m is None else (m.dtype.name, m.shape))
    return [("params.causal", a[1], a[1]), ("params.window_left", a[2], a[2]), ("params.window_right", a[3], a[3]),
            ("params.softmax_scale", bits(a[0]), a[0]), ("params.softcap", bits(a[4]), a[4]),
            ("params.alibi_slopes (None or not, values)", _digest(a[5]), given(a[5])),
            ("params.sinks (None or not, values)", _digest(a[6]), given(a[6]))] + \
        [(f"params.{m} (None or not, dtype, shape)", _digest(shape(x)), shape(x))
         for m, x in zip(("mask", "key_padding_mask", "additive_mask"), a[7:10])]


# ---- argument checks -------------------------------------------------------------------------------------
def _view(x: Any, name: str, dims: list, dtypes: Any = None, writable: bool = False, fn: str = "") -> np.ndarray:
    """x as a checked NumPy view: dims [(what, size or None = any)], dtype in dtypes. Empty views pass with
    any strides (none of their elements is addressed)."""
    a = _arrays.tensor(x, name, writable)
    if a.ndim != len(dims):
        raise _err(f"{name}: ndim={a.ndim}, expected {len(dims)} ([{', '.join(w for w, _ in dims)}])", fn)
    for i, ((what, n), have) in enumerate(zip(dims, a.shape)):
        if n is not None and have != n:
            raise _err(f"{name}: shape[{i}]={have}, expected {what}={n}", fn)
    if dtypes is not None and a.dtype not in dtypes:
        raise _arrays._type_error(f"{name}: dtype {a.dtype}, expected {' or '.join(sorted(map(str, dtypes)))}")
    return a


def _index(x: Any, name: str, dims: list, fn: str) -> np.ndarray:
    return _view(np.ascontiguousarray(_arrays.index_array(x, name), np.int32), name, dims, fn=fn)


def _int(v: Any, name: str, lo: int, hi: int, fn: str) -> int:
    try:
        v = operator.index(v)
    except TypeError:
        raise _arrays._type_error(f"{name}={v!r}: expected an integer") from None
    if not lo <= v <= hi:
        raise _err(f"{name}={v}, expected {lo}..{hi}", fn)
    return v


def _config(fn: str, **spec: Any) -> Tuple[list, dict]:
    c = {k: _int(v, "config." + k, lo, hi, fn) for k, (v, lo, hi) in spec.items()}
    if "num_kv_heads" in c and c["num_heads"] % c["num_kv_heads"]:
        raise _err(f"config.num_kv_heads={c['num_kv_heads']} does not divide num_heads={c['num_heads']}", fn)
    return [("config." + k, v, v) for k, v in c.items()], c


def _float_dtype(dt: Any, name: str) -> np.dtype:
    try:
        d = _arrays.ATTN_TO_NP.get(dt) if isinstance(dt, int) else np.dtype(dt)
    except Exception:  # noqa: BLE001 - any non-dtype
        d = None
    if d not in _FLOATS:
        raise _arrays._type_error(f"{name}={dt!r}: expected float32, float16 or bfloat16")
    return d


def _outputs(q: Any, out: Any, want_lse: bool, out_shape: tuple, lse_shape: tuple, dtype: np.dtype,
             fn: str) -> tuple:
    """(out, its view, lse or None, its view or None): allocated like q when not given, checked."""
    o = out if out is not None else _arrays.empty(q, out_shape, dtype)
    ov = _view(o, "out", [("out", n) for n in out_shape], {dtype}, True, fn)
    lse = _arrays.empty(q, lse_shape, np.float32) if want_lse else None
    return o, ov, lse, None if lse is None else _arrays.as_numpy(lse, "lse")


# ---- sharding --------------------------------------------------------------------------------------------
def dcp_local_len(seq_len: Any, world: int, interleave: int, rank: int) -> Any:
    """Keys of a length-seq_len request that `rank` holds under DCP (vllm-ascend's get_dcp_local_seq_lens);
    seq_len may be an integer array (then an int64 array)."""
    if world < 1 or interleave < 1 or not 0 <= rank < world:
        return 0
    rounds, rem = np.divmod(np.maximum(np.asarray(seq_len, np.int64), 0), interleave * world)
    n = rounds * interleave + np.clip(rem - rank * interleave, 0, interleave)
    return int(n) if n.ndim == 0 else n


def dcp_slot_mapping(rank: int, world: int, interleave: int, block_size: int, first_pos: int,
                     num_tokens: int, block_ids: Any) -> np.ndarray:
    """int64 [num_tokens]: this rank's cache slot of positions first_pos.., −1 where another rank owns it."""
    fn = "dcp_slot_mapping"
    world = _int(world, "world", 1, 1 << 20, fn)
    rank, interleave = _int(rank, "rank", 0, world - 1, fn), _int(interleave, "interleave", 1, _MAX_SEQ, fn)
    block_size = _int(block_size, "block_size", 1, _MAX_SEQ, fn)
    first_pos = _int(first_pos, "first_pos", 0, _MAX_SEQ, fn)
    num_tokens = _int(num_tokens, "num_tokens", 0, _MAX_SEQ - first_pos, fn)
    ids = np.asarray(_arrays.index_array(block_ids, "block_ids"), np.int64).reshape(-1)
    p = first_pos + np.arange(num_tokens, dtype=np.int64)
    mine = (p // interleave) % world == rank
    local = ((p // (interleave * world)) * interleave + p % interleave)[mine]
    blk = local // block_size
    if blk.size and blk[-1] >= ids.size:
        raise _err(f"block_ids: local token {local[-1]} needs block {blk[-1]} >= num_block_ids={ids.size}", fn)
    if blk.size and (ids[blk] < 0).any():
        raise _err(f"block_ids: entry {blk[ids[blk] < 0][0]} = {ids[blk][ids[blk] < 0][0]} < 0", fn)
    out = np.full(num_tokens, -1, np.int64)
    out[mine] = ids[blk] * block_size + local % block_size
    return out


def zigzag_chunks(seq_len: int, world: int, rank: int) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """((start, len) of chunk `rank`, (start, len) of chunk 2·world−1−rank): this rank's zig-zag rows."""
    fn = "zigzag_chunks"
    seq_len, world = _int(seq_len, "seq_len", 0, _MAX_SEQ, fn), _int(world, "world", 1, 1 << 20, fn)
    rank, n = _int(rank, "rank", 0, world - 1, fn), 2 * world
    (a, b), (c, d) = ((i * seq_len // n, (i + 1) * seq_len // n) for i in (rank, n - 1 - rank))
    return (a, b - a), (c, d - c)


# ---- plans -----------------------------------------------------------------------------------------------
class _Plan:
    _tp: Any = None

    def _create(self, comm: Any, nfacts: int, check: Any) -> Any:
        tp = _transport(comm)  # a TypeError here: nothing to agree over
        self.rank, self.world, self.stats = tp.rank, tp.size, Stats()
        res = _collective(tp, type(self).__name__, nfacts, check, "rejected the config")
        tp.dup()
        self._tp = tp
        return res

    def _handle(self) -> Any:
        if self._tp is None:
            raise _err("plan: closed (close() was called on this rank; the other ranks wait in the collective)",
                       type(self).__name__)
        return self._tp

    def close(self) -> None:
        if self._tp is not None:
            self._tp.close()
            self._tp = None

    def __del__(self) -> None:  # pragma: no cover - collected at exit
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a) -> None:
        self.close()


class DCPPlan(_Plan):
    """Decode context parallel: queries replicated, KV interleaved over the ranks; every rank computes its
    shard's partial state (out, LSE) with attn.paged_attention, one allgather, a left fold in rank order."""

    def __init__(self, comm: Any, *, interleave_size: int, num_heads: int, head_size: int, max_tokens: int,
                 max_blocks_per_req: int):
        c = self._create(comm, 5, lambda: _config(
            "DCPPlan", interleave_size=(interleave_size, 1, _MAX_SEQ), num_heads=(num_heads, 1, _MAX_HEADS),
            head_size=(head_size, 1, 256), max_tokens=(max_tokens, 1, 1 << 24),
            max_blocks_per_req=(max_blocks_per_req, 1, 1 << 24)))
        self.__dict__.update(c)

    def forward(self, q: Any, kv_cache: Any, query_start_loc: Any, seq_lens: Any, block_table: Any, *,
                causal: Any = True, softmax_scale: Optional[float] = None, softcap: float = 0.0,
                sinks: Any = None, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None) -> Any:
        """q [num_tokens, H, D] (same on every rank); kv_cache this rank's [2, blocks, block_size, Hkv, D];
        seq_lens GLOBAL int32 [num_reqs]; block_table this rank's int32 [num_reqs, max_blocks].
        Returns out [num_tokens, H, D] (q's dtype) and, with return_lse, lse float32 [H, num_tokens]."""
        tp, fn, t0 = self._handle(), "DCPPlan.forward", time.perf_counter()
        H, D, P = self.num_heads, self.head_size, self.world

        def local() -> tuple:
            qa = _view(q, "q", [("num_tokens", None), ("config.num_heads", H), ("config.head_size", D)], _FLOATS, fn=fn)
            T = qa.shape[0]
            if T > self.max_tokens:
                raise _err(f"q: shape[0]={T} > config.max_tokens={self.max_tokens}", fn)
            cache = _arrays.tensor(kv_cache, "kv_cache")
            if cache.ndim != 5 or cache.shape[0] != 2 or cache.shape[4] != D:
                raise _err(f"kv_cache: shape {list(cache.shape)}, expected [2, num_blocks, block_size, "
                           f"num_kv_heads, head_size={D}]", fn)
            qsl = _index(query_start_loc, "query_start_loc", [("num_reqs + 1", None)], fn)
            R = qsl.shape[0] - 1
            if R < 0:
                raise _err("query_start_loc: shape[0]=0, expected num_reqs + 1 >= 1", fn)
            sl = _index(seq_lens, "seq_lens", [("num_reqs", R)], fn)
            bt = _index(block_table, "block_table", [("num_reqs", R), ("max_blocks", None)], fn)
            if bt.shape[1] > self.max_blocks_per_req:
                raise _err(f"block_table: shape[1]={bt.shape[1]} > config.max_blocks_per_req="
                           f"{self.max_blocks_per_req}", fn)
            qlen = np.diff(qsl)
            if qsl[0] != 0 or qsl[-1] != T or (qlen < 0).any() or (qlen > 16).any() or (sl < qlen).any():
                raise _err(f"query_start_loc / seq_lens: {qsl.tolist()} / {sl.tolist()}: expected 0 .. num_tokens="
                           f"{T}, decode q_len 0..16 per request, seq_lens >= q_len (cached + new keys)", fn)
            prm = Params(num_heads=H, softmax_scale=softmax_scale, causal=causal, softcap=softcap, sinks=sinks)
            if prm.args[1] == _capi.CAUSAL_TOP_LEFT:
                raise _err("params.causal=2: DCP supports none and bottom_right", fn, _capi.STATUS_UNSUPPORTED)
            res = _outputs(q, out, return_lse, (T, H, D), (H, T), qa.dtype, fn)
            # one pseudo-request per query row over the local keys it sees (causal: a prefix of them)
            req = np.repeat(np.arange(R), qlen)
            vis = sl[req] - (qlen[req] - (np.arange(T) - qsl[req]) - 1 if prm.args[1] else 0)
            state = np.zeros(T * H * (D + 1), np.float32)
            state[T * H * D:] = -np.inf
            if T:
                ops.paged_attention(qa.astype(np.float32), cache, np.arange(T + 1, dtype=np.int32),
                                    dcp_local_len(vis, P, self.interleave_size, self.rank).astype(np.int32),
                                    bt[req], causal=prm.args[1], softmax_scale=softmax_scale, softcap=softcap,
                                    sinks=prm.args[6] if self.rank == 0 else None, ctx=ctx,  # the sink joins once
                                    out=state[:T * H * D].reshape(T, H, D), lse=state[T * H * D:].reshape(H, T))
            facts = [("num_tokens (q.shape[0])", T, T), ("num_reqs", R, R), ("sum of seq_lens", sl.sum(), sl.sum()),
                     ("query_start_loc / seq_lens (entries)", _digest(np.concatenate([qsl, sl])), "entries"),
                     ("q.dtype", _digest(qa.dtype.name), qa.dtype), ("kv_cache.dtype", _digest(cache.dtype.name),
                                                                      cache.dtype),
                     ("kv_cache num_kv_heads (shape[3])", cache.shape[3], cache.shape[3])] + _param_facts(prm)
            return facts, (T, state) + res

        T, state, o, ov, lse, lv = _collective(tp, fn, 17, local, "rejected its arguments or failed in its local "
                                               "compute")
        t1 = time.perf_counter()
        n = state.size
        states = np.empty((P, n), np.float32)
        if n and P > 1:
            tp.allgather(state, states)
        else:
            states[self.rank] = state
        t2 = time.perf_counter()
        acc, acc_lse = states[0, :T * H * D].reshape(T, H, D).copy(), states[0, T * H * D:].reshape(H, T).copy()
        for r in range(1, P if T else 1):  # fixed fold: acc = merge(acc, state_r), r = 1..P-1
            ops.merge_attn_states(acc, acc_lse, states[r, :T * H * D].reshape(T, H, D),
                                  states[r, T * H * D:].reshape(H, T), out=acc, lse_out=acc_lse, ctx=ctx)
        ov[...] = acc
        if lv is not None:
            lv[...] = acc_lse
        t3 = time.perf_counter()
        self.stats = Stats(n * 4 * (P - 1), n * 4 * (P - 1), int(P > 1), (t1 - t0) + (t3 - t2), t2 - t1, t3 - t0)
        return (o, lse) if return_lse else o


class RingPlan(_Plan):
    """Ring attention over zig-zag shards of a length-seq_len sequence: each K/V shard travels once around
    the ring (send to rank r+1, receive from r−1, double-buffered) while the shard in hand is computed."""

    def __init__(self, comm: Any, *, batch: int, seq_len: int, num_heads: int, num_kv_heads: int, head_size: int,
                 head_size_v: Optional[int] = None, kv_dtype: Any = np.float32):
        def check() -> tuple:
            facts, c = _config("RingPlan", batch=(batch, 1, 1 << 24), seq_len=(seq_len, 0, _MAX_SEQ),
                               num_heads=(num_heads, 1, _MAX_HEADS), num_kv_heads=(num_kv_heads, 1, _MAX_HEADS),
                               head_size=(head_size, 1, 256),
                               head_size_v=(head_size if head_size_v is None else head_size_v, 1, 256))
            dt = _float_dtype(kv_dtype, "config.kv_dtype")
            return facts + [("config.kv_dtype", _digest(dt.name), dt)], (c, dt)

        c, self.kv_dtype = self._create(comm, 7, check)
        self.__dict__.update(c)
        (_, l0), (_, l1) = zigzag_chunks(self.seq_len, self.world, self.rank)
        self.seq_local = l0 + l1

    def _chunks(self, owner: int) -> list:
        """[(row offset in the owner's shard, rows, global chunk index)] of the owner's two chunks."""
        (_, l0), (_, l1) = zigzag_chunks(self.seq_len, self.world, owner)
        return [(0, l0, owner), (l0, l1, 2 * self.world - 1 - owner)]

    def _kv(self, buf: Optional[np.ndarray], owner: int) -> Any:
        """(k [B, S_o, Hkv, Dk], v [B, S_o, Hkv, Dv], their bytes) of the owner's shard in a ring buffer (None:
        the bytes only)."""
        shp = (self.batch, sum(n for _, n, _ in self._chunks(owner)), self.num_kv_heads)
        nk, nv = (int(np.prod(shp)) * d for d in (self.head_size, self.head_size_v))
        if buf is None:
            return (nk + nv) * self.kv_dtype.itemsize
        flat = buf.view(self.kv_dtype)
        return flat[:nk].reshape(shp + (self.head_size,)), flat[nk:nk + nv].reshape(shp + (self.head_size_v,)), \
            (nk + nv) * self.kv_dtype.itemsize

    def forward(self, q: Any, k: Any, v: Any, *, causal: Any = True, softmax_scale: Optional[float] = None,
                softcap: float = 0.0, sinks: Any = None, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None) -> Any:
        """q [batch, seq_local, H, D], k/v [batch, seq_local, Hkv, D(v)]: this rank's zig-zag rows (chunk
        rank, then chunk 2P−1−rank). Returns out (q's dtype) [, lse float32 [batch, H, seq_local]]."""
        def local() -> tuple:
            dims = (lambda h, d: [("config.batch", self.batch), ("seq_local", self.seq_local), h, d])
            qa = _view(q, "q", dims(("config.num_heads", self.num_heads), ("config.head_size", self.head_size)),
                       _FLOATS, fn=fn)
            return (qa,) + tuple(_view(x, n, dims(("config.num_kv_heads", self.num_kv_heads), (f"config.{d}",
                                 getattr(self, d))), {self.kv_dtype}, fn=fn)
                                 for x, n, d in ((k, "k", "head_size"), (v, "v", "head_size_v")))

        fn = "RingPlan.forward"
        return self._run(fn, local, q, out, return_lse, 4, ctx, causal, softmax_scale, softcap, sinks)

    def forward_paged(self, q: Any, kv_cache: Any, block_table: Any, *, causal: Any = True,
                      softmax_scale: Optional[float] = None, softcap: float = 0.0, sinks: Any = None,
                      out: Any = None, return_lse: bool = False, ctx: Optional[Context] = None) -> Any:
        """q [seq_local, H, D]; kv_cache this rank's cache holding its shard through block_table (int32).
        Returns out [seq_local, H, D] [, lse float32 [H, seq_local]]; bitwise equal to forward."""
        def local() -> tuple:
            D, SL = self.head_size, self.seq_local
            if self.batch != 1 or self.head_size_v != D:
                raise _err(f"plan: config.batch={self.batch}, head_size_v={self.head_size_v}: the paged entry needs "
                           f"batch 1 and head_size_v == head_size", fn)
            qa = _view(q, "q", [("seq_local", SL), ("config.num_heads", self.num_heads), ("config.head_size", D)],
                       _FLOATS, fn=fn)
            cache = _view(kv_cache, "kv_cache", [("2", 2), ("num_blocks", None), ("block_size", None),
                                                 ("config.num_kv_heads", self.num_kv_heads), ("config.head_size", D)],
                          {self.kv_dtype}, fn=fn)
            bt, bs, nb = _index(block_table, "block_table", [("blocks", None)], fn), cache.shape[2], cache.shape[1]
            need = -(-SL // bs) if bs else 1
            if bt.shape[0] < need or ((bt[:need] < 0) | (bt[:need] >= nb)).any():
                raise _err(f"block_table: {bt[:need].tolist()}: expected ceil(seq_local={SL} / block_size={bs}) = "
                           f"{need} block ids in [0, num_blocks={nb})", fn)
            blocks, offs = bt[np.arange(SL) // bs], np.arange(SL) % bs
            return qa[None], cache[0, blocks, offs][None], cache[1, blocks, offs][None]

        fn = "RingPlan.forward_paged"
        return self._run(fn, local, q, out, return_lse, 3, ctx, causal, softmax_scale, softcap, sinks)

    def _run(self, fn: str, views: Any, q: Any, out: Any, return_lse: bool, ndim: int, ctx: Optional[Context],
             causal: Any, softmax_scale: Any, softcap: Any, sinks: Any) -> Any:
        tp, t0, B, SL, H = self._handle(), time.perf_counter(), self.batch, self.seq_local, self.num_heads

        def local() -> tuple:
            qa, ka, va = views()
            prm = Params(num_heads=H, softmax_scale=softmax_scale, causal=causal, softcap=softcap, sinks=sinks)
            res = _outputs(q, out, return_lse, (B, SL, H, self.head_size_v)[4 - ndim:], (B, H, SL)[4 - ndim:],
                           qa.dtype, fn)
            most = max(self._kv(None, i) for i in range(self.world))
            bufs = [np.empty(most // self.kv_dtype.itemsize, self.kv_dtype).view(np.uint8) for _ in range(2)]
            kmine, vmine, _ = self._kv(bufs[0], self.rank)
            kmine[...], vmine[...] = ka, va  # this rank's shard, packed: what it sends at step 0
            facts = [("q.dtype", _digest(qa.dtype.name), qa.dtype)] + _param_facts(prm)
            return facts, (qa.astype(np.float32), bufs, prm.args[6], prm.args[1] != 0) + res

        qf, bufs, sinks, causal, o, ov, lse, lv = _collective(tp, fn, 11, local)
        acc, acc_lse, st, exc = self._ring(tp, qf, bufs, sinks, causal, ctx, softmax_scale=softmax_scale,
                                           softcap=softcap)
        _agree(tp, fn, "failed in its local compute", exc, [], 0)
        ov.reshape(acc.shape)[...] = acc  # (a view: ndim 3 adds a leading 1)
        if lv is not None:
            lv.reshape(acc_lse.shape)[...] = acc_lse
        st.total_seconds = time.perf_counter() - t0
        st.compute_seconds, self.stats = st.total_seconds - st.wait_seconds, st
        return (o, lse) if return_lse else o

    def _ring(self, tp: Any, qf: np.ndarray, bufs: list, sinks: Any, causal: bool, ctx: Optional[Context],
              **opts: Any) -> tuple:
        """The P steps: at step s this rank holds the shard of rank (r−s) mod P in bufs[s & 1], passes it on,
        and folds each visible (query chunk, key chunk) pair into the accumulator in step order: a key chunk
        above the diagonal is skipped, the diagonal runs causal, one below runs unmasked; the sink joins the
        denominator once, with the diagonal at step 0."""
        P, r, B = self.world, self.rank, self.batch
        acc = np.zeros((B, self.seq_local, self.num_heads, self.head_size_v), np.float32)
        acc_lse = np.full((B, self.num_heads, self.seq_local), -np.inf, np.float32)
        st, exc = Stats(), None
        for s in range(P):
            owner, reqs = (r - s) % P, []
            k, v, nbytes = self._kv(bufs[s & 1], owner)
            if s < P - 1:
                nxt = self._kv(None, (r - s - 1) % P)
                reqs = tp.exchange(bufs[s & 1][:nbytes], (r + 1) % P, bufs[(s + 1) & 1][:nxt], (r - 1) % P, s)
                st.bytes_sent, st.bytes_received, st.num_messages = st.bytes_sent + nbytes, st.bytes_received + nxt, \
                    st.num_messages + 1
            for qo, lq, qg in self._chunks(r):
                for ko, lk, kg in self._chunks(owner):
                    if exc is not None or not lq or not lk or (causal and kg > qg):
                        continue
                    try:
                        po, pl = ops.attention(qf[:, qo:qo + lq], k[:, ko:ko + lk], v[:, ko:ko + lk],
                                               causal=causal and kg == qg, sinks=sinks if s == 0 and kg == qg else None,
                                               return_lse=True, ctx=ctx, **opts)
                        for b in range(B):
                            ao, al = acc[b, qo:qo + lq], acc_lse[b, :, qo:qo + lq]
                            ops.merge_attn_states(ao, al, po[b], pl[b], out=ao, lse_out=al, ctx=ctx)
                    except Exception as e:  # noqa: BLE001 - agreed on after the ring (the others keep going)
                        exc = e
            t = time.perf_counter()
            tp.wait(reqs)
            st.wait_seconds += time.perf_counter() - t
        return acc, acc_lse, st, exc


class UlyssesPlan(_Plan):
    """Ulysses: rank r holds rows [r·seq_local, (r+1)·seq_local) of every sequence; an all-to-all turns them
    into heads [r·H/P, (r+1)·H/P) of the whole sequence, attention runs there, another all-to-all returns."""

    def __init__(self, comm: Any, *, batch: int, seq_local: int, num_heads: int, num_kv_heads: int,
                 head_size: int, head_size_v: Optional[int] = None, dtype: Any = np.float32, kv_dtype: Any = None):
        def check() -> tuple:
            facts, c = _config("UlyssesPlan", batch=(batch, 1, 1 << 24), seq_local=(seq_local, 0, _MAX_SEQ),
                               num_heads=(num_heads, 1, _MAX_HEADS), num_kv_heads=(num_kv_heads, 1, _MAX_HEADS),
                               head_size=(head_size, 1, 256),
                               head_size_v=(head_size if head_size_v is None else head_size_v, 1, 256))
            if c["num_heads"] % self.world or c["num_kv_heads"] % self.world:
                raise _err(f"config.num_heads={c['num_heads']} / num_kv_heads={c['num_kv_heads']}: both must be "
                           f"divisible by the {self.world} ranks", "UlyssesPlan")
            dts = [_float_dtype(d, n) for d, n in ((dtype, "config.dtype"),
                                                   (dtype if kv_dtype is None else kv_dtype, "config.kv_dtype"))]
            return facts + [(f"config.{n}", _digest(d.name), d) for n, d in zip(("dtype", "kv_dtype"), dts)], (c, dts)

        c, (self.dtype, self.kv_dtype) = self._create(comm, 8, check)
        self.__dict__.update(c)

    def _a2a(self, tp: Any, parts: list, st: Stats) -> list:
        """One all-to-all: block j of each part [P, ...] goes to rank j; returns the parts received, block i
        from rank i (every rank's blocks have the same shapes)."""
        P = self.world
        flat = [np.ascontiguousarray(x).reshape(P, -1).view(np.uint8) for x in parts]
        send = np.concatenate(flat, axis=1)
        recv = np.empty_like(send)
        t = time.perf_counter()
        if send.size:
            tp.alltoall(send, recv)
        st.wait_seconds += time.perf_counter() - t
        st.bytes_sent += send.nbytes // P * (P - 1)
        st.bytes_received, st.num_messages = st.bytes_sent, st.num_messages + 1
        ends = np.cumsum([0] + [f.shape[1] for f in flat])
        return [recv[:, a:b].copy().view(x.dtype).reshape(x.shape) for x, a, b in zip(parts, ends, ends[1:])]

    def _run(self, mode: str, q: Any, k: Any, v: Any, cu: tuple, out: Any, return_lse: bool,
             ctx: Optional[Context], kw: dict, ring: Optional[RingPlan] = None) -> Any:
        tp, t0, fn = self._handle(), time.perf_counter(), f"UlyssesPlan.{mode}"
        B, SL, H, HK, P, r = self.batch, self.seq_local, self.num_heads, self.num_kv_heads, self.world, self.rank
        S, HL, nd = SL * P, H // P, 3 if mode == "varlen" else 4

        def local() -> tuple:
            if nd == 3 and B != 1:
                raise _err(f"plan: config.batch={B}, the varlen entry needs 1", fn)
            dims = (lambda h, d: [("config.batch", B), ("config.seq_local", SL), h, (f"config.{d}", getattr(self, d))
                                  ][4 - nd:])
            xs = [_view(x, n, dims(h, d), {dt}, fn=fn) for x, n, h, d, dt in (
                (q, "q", ("config.num_heads", H), "head_size", self.dtype),
                (k, "k", ("config.num_kv_heads", HK), "head_size", self.kv_dtype),
                (v, "v", ("config.num_kv_heads", HK), "head_size_v", self.kv_dtype))]
            res = _outputs(q, out, return_lse, (B, SL, H, self.head_size_v)[4 - nd:], (B, H, SL)[4 - nd:],
                           self.dtype, fn)
            allowed = {"dense": None, "varlen": {"causal", "softmax_scale", "window_size", "softcap", "alibi_slopes",
                                                 "sinks"}, "usp": {"causal", "softmax_scale", "softcap", "sinks"}}[mode]
            extra = sorted(set(kw) - allowed) if allowed else []
            if extra:
                raise _err(f"params {extra}: not supported by the {mode} entry", fn, _capi.STATUS_UNSUPPORTED)
            prm = Params(num_heads=H, **kw)
            a = prm.args
            # masks and cu_seqlens are checked by the local attention call: their shapes and entries are agreed
            # facts, so a bad one fails that call on every rank alike
            cus = [_index(c, n, [("num_docs + 1", None)], fn) for c, n in zip(cu, ("cu_seqlens_q", "cu_seqlens_k"))]
            # this rank's heads: per-head options and masks with a head dimension, as views
            h = slice(r * HL, (r + 1) * HL)
            lkw = dict(kw, alibi_slopes=None if a[5] is None else a[5][h], sinks=None if a[6] is None else a[6][h])
            if mode == "dense":
                cut = (lambda m: m if m.ndim < 3 or m.shape[-3] == 1 else m[(slice(None),) * (m.ndim - 3) + (h,)])
                lkw.update(mask=None if a[7] is None else cut(a[7]), key_padding_mask=a[8],
                           additive_mask=None if a[9] is None else cut(a[9]))
            lkw = {n: x for n, x in lkw.items() if n in kw or x is not None}
            facts = [("the entry called (dense, varlen or USP)", _digest(mode), mode)] + \
                [(f"{n} (entries)", _digest(cus[i] if cus else None), "entries")
                 for i, n in enumerate(("cu_seqlens_q", "cu_seqlens_k"))] + \
                _param_facts(prm)
            return facts, ([x if nd == 4 else x[None] for x in xs], res, lkw, cus)

        xs, (o, ov, lse, lv), lkw, cus = _collective(tp, fn, 13, local)
        st = Stats()
        # sequence shards [B, SL, HX, DX] -> blocks [P, B, SL, HX/P, DX] -> head shards [B, S, HX/P, DX]
        blocks = [x.reshape((B, SL, P, x.shape[-2] // P, x.shape[-1])).transpose(2, 0, 1, 3, 4) for x in xs]
        fq, fk, fv = (y.transpose(1, 0, 2, 3, 4).reshape(B, S, y.shape[3], y.shape[4])
                      for y in self._a2a(tp, blocks, st))
        exc, fo, fl = None, None, None
        try:
            if mode == "dense":
                fo, fl = ops.attention(fq, fk, fv, return_lse=True, ctx=ctx, **lkw)
            elif mode == "varlen":
                fo, fl = ops.attention_varlen(fq[0], fk[0], fv[0], *cus, return_lse=True, ctx=ctx, **lkw)
                fo, fl = fo[None], fl[None]
            else:  # USP: the ring validates and agrees on its own communicator
                fo, fl = ring.forward(fq, fk, fv, return_lse=True, ctx=ctx, **lkw)
                rs = ring.stats
                st.bytes_sent, st.bytes_received = st.bytes_sent + rs.bytes_sent, st.bytes_received + rs.bytes_received
                st.num_messages, st.wait_seconds = st.num_messages + rs.num_messages, st.wait_seconds + rs.wait_seconds
        except Exception as e:  # noqa: BLE001 - agreed on below, before anything moves back
            exc = e
        _agree(tp, fn, "failed in its local compute", exc, [], 0)
        fo, fl = _arrays.as_numpy(fo, "out"), _arrays.as_numpy(fl, "lse")
        # head shards back: out [B, S, HL, DV] -> [P, B, SL, HL, DV]; lse [B, HL, S] -> [P, B, HL, SL]
        parts = [fo.reshape(B, P, SL, HL, self.head_size_v).transpose(1, 0, 2, 3, 4)] + \
            ([fl.reshape(B, HL, P, SL).transpose(2, 0, 1, 3)] if lv is not None else [])
        got = self._a2a(tp, parts, st)
        ov[...] = got[0].transpose(1, 2, 0, 3, 4).reshape(ov.shape)
        if lv is not None:
            lv[...] = got[1].transpose(1, 0, 2, 3).reshape(lv.shape)
        st.total_seconds = time.perf_counter() - t0
        st.compute_seconds = st.total_seconds - st.wait_seconds
        self.stats = st
        return (o, lse) if return_lse else o

    def forward(self, q: Any, k: Any, v: Any, *, out: Any = None, return_lse: bool = False,
                ctx: Optional[Context] = None, **kw: Any) -> Any:
        """Dense BSND attention of the global sequence; kw as attn.attention (causal, window_size, softcap,
        alibi_slopes, sinks, mask, key_padding_mask, additive_mask, softmax_scale). Bitwise equal to one
        process. Returns out [batch, seq_local, H, Dv] [, lse float32 [batch, H, seq_local]]."""
        return self._run("dense", q, k, v, (), out, return_lse, ctx, kw)

    def forward_varlen(self, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *, out: Any = None,
                       return_lse: bool = False, ctx: Optional[Context] = None, **kw: Any) -> Any:
        """Packed documents: q [seq_local, H, D] this rank's rows; cu_seqlens over the GLOBAL rows."""
        return self._run("varlen", q, k, v, (cu_seqlens_q, cu_seqlens_k), out, return_lse, ctx, kw)


def usp_forward(ulysses: UlyssesPlan, ring: RingPlan, q: Any, k: Any, v: Any, *, out: Any = None,
                return_lse: bool = False, ctx: Optional[Context] = None, **kw: Any) -> Any:
    """USP: Ulysses inside ring (the ring plan spans the ring group, with num_heads = H/U and seq_len the
    global length); kw: causal, softmax_scale, softcap, sinks."""
    return ulysses._run("usp", q, k, v, (), out, return_lse, ctx, kw, ring=ring)
