"""NumPy / DLPack arrays -> attn_tensor views, without copies.

Any input is first turned into a NumPy view of the same memory:
  - ``numpy.ndarray`` as is (bfloat16 / float8 through ``ml_dtypes`` dtypes);
  - any DLPack producer (``__dlpack__``: torch CPU tensors, JAX, CuPy-on-host, ...) through the DLTensor of
    its capsule, read by attn._ext (dlpack_interface), so bfloat16 / float8 tensors (which
    ``numpy.from_dlpack`` rejects) work too. The capsule stays referenced by the view, so the producer's
    memory lives as long as it.
Then :func:`tensor` describes the view as an attn_tensor: shape, strides in ELEMENTS (NumPy strides are
bytes), dtype. Negative or non-element-multiple strides are rejected here with a clear message; all
other checks (ranks, matching dims, contiguous last dimension, ...) are libattn's, with its messages.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any, Sequence, Tuple

import numpy as np

from . import _capi

try:  # optional: bfloat16 / float8 NumPy dtypes
    import ml_dtypes as _mld
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    _mld = None


# ------------------------------------------------------------------------------------------------
# dtype tables
# ------------------------------------------------------------------------------------------------
# Errors: every bad array argument raises the library's exception family, like a failing C call: an
# AttnInvalidArgumentError (a ValueError) whose message names the argument ("q: array is read-only"), or for a
# wrong type / dtype AttnTypeError (the same class, also a TypeError), so `except attn.AttnError` catches both.
class AttnTypeError(_capi.AttnInvalidArgumentError, TypeError):
    """ATTN_STATUS_INVALID_ARGUMENT for an argument of the wrong type or dtype (also a TypeError)."""


def _invalid(message: str) -> "_capi.AttnInvalidArgumentError":
    return _capi.AttnInvalidArgumentError(_capi.STATUS_INVALID_ARGUMENT, message)


def _type_error(message: str) -> AttnTypeError:
    return AttnTypeError(_capi.STATUS_INVALID_ARGUMENT, message)


def _np_to_attn() -> dict:
    table = {
        np.dtype(np.float32): _capi.DTYPE_F32,
        np.dtype(np.float16): _capi.DTYPE_F16,
        np.dtype(np.int32): _capi.DTYPE_I32,
        np.dtype(np.int64): _capi.DTYPE_I64,
        np.dtype(np.bool_): _capi.DTYPE_BOOL,
        np.dtype(np.uint8): _capi.DTYPE_U8,
    }
    if _mld is not None:
        table[np.dtype(_mld.bfloat16)] = _capi.DTYPE_BF16
        table[np.dtype(_mld.float8_e4m3fn)] = _capi.DTYPE_FP8_E4M3
        table[np.dtype(_mld.float8_e5m2)] = _capi.DTYPE_FP8_E5M2
        if hasattr(_mld, "float8_e8m0fnu"):
            table[np.dtype(_mld.float8_e8m0fnu)] = _capi.DTYPE_E8M0
    return table


NP_TO_ATTN = _np_to_attn()
ATTN_TO_NP = {v: k for k, v in NP_TO_ATTN.items()}


class _DLPackView:
    """Owns an unconsumed DLPack capsule (its destructor calls the producer's deleter) and shows its memory to
    NumPy without a copy: attn._ext.dlpack_interface reads the DLTensor and names ``name`` in its errors."""

    def __init__(self, capsule: Any, producer: Any, name: str = "tensor"):
        self._capsule = capsule
        self._producer = producer
        self.__array_interface__, self.dtype = _capi.ext.dlpack_interface(capsule, name)


class _RawBytes:
    """uint8 [nbytes] at an address, kept alive by ``owner`` (raw_bytes)."""

    def __init__(self, addr: int, nbytes: int, owner: Any):
        self._owner = owner
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (addr, False), "version": 3}


def raw_bytes(addr: int, nbytes: int, owner: Any) -> np.ndarray:
    """A writable uint8 [nbytes] view of the memory at ``addr`` (owned by ``owner``, which it keeps alive)."""
    return np.asarray(_RawBytes(addr, nbytes, owner))


def is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


_grad_warned = False
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _warn_grad_once() -> None:
    global _grad_warned
    if not _grad_warned:
        _grad_warned = True
        level, f = 2, sys._getframe(1)  # point at the first frame outside the attn package
        while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
            level, f = level + 1, f.f_back
        warnings.warn("attn computes the forward pass only: tensors with requires_grad=True are read "
                      "through a detached view and no gradients are tracked (warned once)",
                      UserWarning, stacklevel=level)


def as_numpy(x: Any, name: str = "tensor") -> np.ndarray:
    """A NumPy view of ``x`` sharing its memory: ndarrays as is, DLPack producers through their capsule,
    anything else through np.asarray (which may copy: e.g. Python lists). Torch tensors must be on the
    CPU; ones with requires_grad are read through a detached view (forward only: a warning, once)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        if is_torch(x):
            dev = getattr(x, "device", None)
            if dev is not None and getattr(dev, "type", "cpu") != "cpu":
                raise _invalid(f"{name}: tensor must be on the CPU (attn is a CPU library), got device "
                                 f"{str(dev)!r}")
            if getattr(x, "requires_grad", False):
                _warn_grad_once()
                x = x.detach()  # a view; DLPack refuses tensors that require grad
            if x.is_neg():
                x = x.resolve_neg()  # a copy holding the values: DLPack would export their negation
        view = _DLPackView(x.__dlpack__(), x, name)
        return np.asarray(view).view(view.dtype)
    return np.asarray(x)


# ------------------------------------------------------------------------------------------------
# Arguments the extension cannot view directly
# ------------------------------------------------------------------------------------------------
def _check_view(a: np.ndarray, name: str, writable: bool) -> None:
    """Raises the family's error for an array that is no attn_tensor: dtype, rank, read-only, strides."""
    if a.dtype not in NP_TO_ATTN:
        if a.dtype.kind in "fc":  # a float argument (q, k, v, caches, out): name the float dtypes only
            raise _type_error(f"{name}: dtype {a.dtype} is not supported by attn (expected float32, "
                              "float16 or bfloat16)")
        raise _type_error(f"{name}: dtype {a.dtype} is not supported by attn (supported: "
                          + ", ".join(sorted(str(k) for k in NP_TO_ATTN)) + ")")
    if a.ndim > _capi.MAX_DIMS:
        raise _invalid(f"{name}: ndim={a.ndim} > {_capi.MAX_DIMS}")
    if writable and not a.flags.writeable:
        raise _invalid(f"{name}: array is read-only")
    item = a.itemsize
    for i, (n, s) in enumerate(zip(a.shape, a.strides)):
        if n <= 1 and (i == a.ndim - 1 or s < 0 or s % item):
            continue  # a size-1 dimension's stride is never used
        if s < 0 or s % item:
            raise _invalid(f"{name}: stride[{i}]={s} bytes is negative or not a multiple of the "
                           f"element size {item}")


def as_view(x: Any, name: str, writable: bool = False) -> np.ndarray:
    """What attn._ext views when it cannot view ``x`` itself: a NumPy array of the same memory (lists and
    scalars through np.asarray, torch tensors that require grad through a detached view), checked; the error
    names the argument."""
    if writable and not isinstance(x, np.ndarray) and not hasattr(x, "__dlpack__"):
        raise _type_error(f"{name}: expected a writable array (NumPy or DLPack), got {type(x).__name__}: "
                          "the result would be written into a temporary copy")
    if writable and is_torch(x) and x.is_neg():
        raise _invalid(f"{name}: a negated torch view (is_neg(), e.g. x.conj().imag) cannot be written through: "
                       "its memory holds the negation of its values")
    a = as_numpy(x, name)
    _check_view(a, name, writable)
    return a


def refuse(a: np.ndarray, name: str, writable: bool = False) -> None:
    """Raises why attn._ext cannot describe ``a`` as an attn_tensor."""
    _check_view(a, name, writable)
    raise _invalid(f"{name}: shape {list(a.shape)} with strides {list(a.strides)} does not fit an attn_tensor "
                   "(sizes or extent beyond int64)")


def tensor(x: Any, name: str, writable: bool = False) -> np.ndarray:
    """``x`` checked as the extension would take it (the error names ``name``), as a NumPy view."""
    return as_view(x, name, writable)


def index_array(x: Any, name: str, dtype: Any = np.int32) -> np.ndarray:
    """Small integer metadata (cu_seqlens, seq_lens, block tables, slot mappings): array-likes of any
    integer dtype become a NumPy view (or a converted copy when the dtype differs). Values are range
    checked before narrowing: one that does not fit ``dtype`` (e.g. int64 2**32 + 3 for an int32
    argument, uint64 2**64 - 1 for an int64 one) raises ValueError naming the argument, entry and value,
    instead of wrapping around."""
    dt = np.dtype(dtype)
    if isinstance(x, (list, tuple, range, int, np.integer)):
        try:
            a = np.asarray(x)
        except (OverflowError, ValueError) as e:
            raise _invalid(f"{name}: {e}") from None
        if a.size == 0:
            return np.asarray(x, dtype=dt).reshape(a.shape)
        if a.dtype == object:  # Python ints beyond 64 bits
            flat = a.reshape(-1)
            lim = np.iinfo(dt)
            for i, val in enumerate(flat):
                if not isinstance(val, (int, np.integer)) or isinstance(val, bool):
                    raise _type_error(f"{name}: expected integers, got {type(val).__name__} at entry {i}")
                if not lim.min <= int(val) <= lim.max:
                    raise _invalid(f"{name}: entry {i} = {int(val)} does not fit {dt.name}")
            return flat.astype(dt).reshape(a.shape)
    else:
        a = as_numpy(x, name)
    if a.dtype in (np.dtype(np.int32), np.dtype(np.int64)) and a.dtype == dt:
        return a
    if not np.issubdtype(a.dtype, np.integer) and a.dtype != np.bool_:
        raise _type_error(f"{name}: expected an integer array, got dtype {a.dtype}")
    if a.size and a.dtype != np.bool_:
        src, lim = np.iinfo(a.dtype), np.iinfo(dt)
        if src.min < lim.min or src.max > lim.max:  # narrowing (or unsigned -> signed): check the values
            flat = a.reshape(-1)
            bad = np.nonzero((flat > lim.max) | (flat < lim.min))[0] if src.min < 0 else \
                np.nonzero(flat > np.uint64(lim.max))[0]
            if bad.size:
                i = int(bad[0])
                idx = np.unravel_index(i, a.shape)
                where = idx[0] if a.ndim == 1 else list(int(j) for j in idx)
                raise _invalid(f"{name}: entry {where} = {int(flat[i])} does not fit {dt.name} "
                                 f"(range [{lim.min}, {lim.max}])")
    return a.astype(dt)


_torch_dtypes: dict = {}  # NumPy dtype -> torch dtype, filled on the first torch output


def empty(like: Any, shape: Sequence[int], dtype: np.dtype) -> Any:
    """A new zero-filled array of ``shape`` and NumPy ``dtype`` (an output attn allocates: rows no call writes,
    e.g. q rows past the last sequence, are 0, never leftover memory); a torch tensor when ``like`` is one (so
    functions return the caller's array type) and torch has the dtype, else a NumPy array. attn._ext allocates
    its outputs through it."""
    if is_torch(like):
        if not _torch_dtypes:
            import torch

            _torch_dtypes.update({np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                                  np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64})
            if _mld is not None:
                _torch_dtypes[np.dtype(_mld.bfloat16)] = torch.bfloat16
            _torch_dtypes["zeros"] = torch.zeros
        tdt = _torch_dtypes.get(np.dtype(dtype))
        if tdt is not None:
            return _torch_dtypes["zeros"](shape, dtype=tdt, device="cpu")
    return np.zeros(shape, dtype=dtype)


def dtype_of(x: Any, name: str = "tensor") -> np.dtype:
    """NumPy dtype of an array or DLPack producer (no copy)."""
    return as_numpy(x, name).dtype


def shape_of(x: Any, name: str = "tensor") -> Tuple[int, ...]:
    return tuple(int(s) for s in as_numpy(x, name).shape)
