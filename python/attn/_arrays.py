"""NumPy / DLPack arrays -> attn_tensor views, without copies.

Any input is first turned into a NumPy view of the same memory:
  - ``numpy.ndarray`` as is (bfloat16 / float8 through ``ml_dtypes`` dtypes);
  - any DLPack producer (``__dlpack__``: torch CPU tensors, JAX, CuPy-on-host, ...) by reading the
    DLTensor of its capsule directly, so bfloat16 / float8 tensors (which ``numpy.from_dlpack`` rejects)
    work too. The capsule stays referenced by the view, so the producer's memory lives as long as it.
Then :func:`tensor` describes the view as an attn_tensor: shape, strides in ELEMENTS (NumPy strides are
bytes), dtype. Negative or non-element-multiple strides are rejected here with a clear message; all
other checks (ranks, matching dims, contiguous last dimension, ...) are libattn's, with its messages.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import warnings
from typing import Any, Optional, Sequence, Tuple

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


def np_dtype(attn_dtype: int) -> np.dtype:
    """NumPy dtype of an attn dtype (bf16/fp8 need ml_dtypes)."""
    if attn_dtype not in ATTN_TO_NP:
        raise _type_error(f"attn dtype {_capi.dtype_name(attn_dtype)} has no NumPy dtype here"
                        + ("" if _mld is not None else " (pip install ml_dtypes)"))
    return ATTN_TO_NP[attn_dtype]


def attn_dtype(dtype: Any) -> int:
    """attn dtype of a NumPy dtype (or anything np.dtype accepts)."""
    d = np.dtype(dtype)
    if d not in NP_TO_ATTN:
        raise _type_error(f"dtype {d} is not supported by attn (supported: "
                        + ", ".join(sorted(str(k) for k in NP_TO_ATTN)) + ")")
    return NP_TO_ATTN[d]


# DLPack (code, bits) -> NumPy dtype. Codes: dlpack.h DLDataTypeCode.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6
_DL_F8_E4M3FN, _DL_F8_E5M2 = 10, 12


def _dl_to_np(code: int, bits: int) -> np.dtype:
    simple = {(_DL_FLOAT, 32): np.float32, (_DL_FLOAT, 16): np.float16, (_DL_FLOAT, 64): np.float64,
              (_DL_INT, 32): np.int32, (_DL_INT, 64): np.int64, (_DL_INT, 8): np.int8,
              (_DL_INT, 16): np.int16, (_DL_UINT, 8): np.uint8, (_DL_BOOL, 8): np.bool_}
    if (code, bits) in simple:
        return np.dtype(simple[(code, bits)])
    if _mld is not None:
        special = {(_DL_BFLOAT, 16): _mld.bfloat16, (_DL_F8_E4M3FN, 8): _mld.float8_e4m3fn,
                   (_DL_F8_E5M2, 8): _mld.float8_e5m2}
        if (code, bits) in special:
            return np.dtype(special[(code, bits)])
    raise _type_error(f"DLPack dtype (code={code}, bits={bits}) is not supported"
                    + ("" if _mld is not None else " (bfloat16/float8 need: pip install ml_dtypes)"))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_DL_CPU, _DL_CUDA_HOST = 1, 3


class _DLPackView:
    """Owns an unconsumed DLPack capsule (its destructor calls the producer's deleter) and exposes the
    memory through __array_interface__ so NumPy can view it without a copy."""

    def __init__(self, capsule: Any, producer: Any, name: str = "tensor"):
        self._capsule = capsule
        self._producer = producer
        t = _DLTensor.from_address(_capsule_get(capsule, b"dltensor"))
        if t.device.device_type not in (_DL_CPU, _DL_CUDA_HOST):
            raise _invalid(f"attn runs on the CPU; got a DLPack tensor on device type "
                             f"{t.device.device_type}")
        if t.dtype.lanes != 1:
            raise _type_error(f"DLPack vector dtypes (lanes={t.dtype.lanes}) are not supported")
        self.dtype = _dl_to_np(t.dtype.code, t.dtype.bits)
        ndim = t.ndim
        if ndim < 0 or (ndim and not t.shape):
            raise _invalid(f"{name}: DLPack tensor with ndim={ndim}" + (" and no shape" if ndim > 0 else ""))
        shape = tuple(int(t.shape[i]) for i in range(ndim))
        item = self.dtype.itemsize
        if any(n < 0 for n in shape):
            raise _invalid(f"{name}: DLPack tensor shape {list(shape)} has a negative size")
        # NumPy refuses these views too, but without naming the argument
        if math.prod(max(n, 1) for n in shape) * item > sys.maxsize:
            raise _capi.AttnOverflowError(_capi.STATUS_OVERFLOW, f"{name}: DLPack tensor shape {list(shape)} of "
                                          f"{item}-byte elements is larger than the address space")
        numel = math.prod(shape)
        if not t.data and numel:
            raise _invalid(f"{name}: DLPack tensor has data=NULL but {numel} elements")
        if t.strides:
            strides = tuple(int(t.strides[i]) * item for i in range(ndim))
        else:
            strides = tuple(int(s) * item for s in _contiguous_strides(shape))
        ptr = (t.data or 0) + int(t.byte_offset)
        self.__array_interface__ = {"shape": shape, "typestr": f"|V{item}", "data": (ptr, False),
                                    "strides": strides, "version": 3}


def _contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(out))


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
        view = _DLPackView(x.__dlpack__(), x, name)
        return np.asarray(view).view(view.dtype)
    return np.asarray(x)


# ------------------------------------------------------------------------------------------------
# attn_tensor
# ------------------------------------------------------------------------------------------------
class TensorRef:
    """An attn_tensor struct plus the objects that keep its memory alive."""

    __slots__ = ("t", "array", "owner")

    def __init__(self, t: _capi.Tensor, array: np.ndarray, owner: Any):
        self.t = t
        self.array = array
        self.owner = owner

    @property
    def ptr(self) -> Any:
        return ctypes.byref(self.t)


def tensor(x: Any, name: str, writable: bool = False) -> TensorRef:
    """Describes ``x`` (NumPy array or DLPack producer) as an attn_tensor without copying.
    ``name`` is used in error messages (the C side names arguments the same way)."""
    if writable and not isinstance(x, np.ndarray) and not hasattr(x, "__dlpack__"):
        raise _type_error(f"{name}: expected a writable array (NumPy or DLPack), got {type(x).__name__}: "
                          "the result would be written into a temporary copy")
    a = as_numpy(x, name)
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
    t = _capi.Tensor()
    t.data = a.__array_interface__["data"][0]
    t.dtype = NP_TO_ATTN[a.dtype]
    t.ndim = a.ndim
    item = a.itemsize
    for i, (n, s) in enumerate(zip(a.shape, a.strides)):
        t.shape[i] = n
        if n <= 1 and (i == a.ndim - 1 or s < 0 or s % item):
            s = item if i == a.ndim - 1 else 0  # a size-1 dimension's stride is never used
        if s < 0 or s % item:
            raise _invalid(f"{name}: stride[{i}]={s} bytes is negative or not a multiple of the "
                             f"element size {item}")
        t.strides[i] = s // item
    return TensorRef(t, a, x)


def opt_tensor(x: Any, name: str, writable: bool = False) -> Optional[TensorRef]:
    return None if x is None else tensor(x, name, writable)


def ptr(ref: Optional[TensorRef]) -> Any:
    """ctypes pointer argument for an optional tensor (NULL for None)."""
    return None if ref is None else ref.ptr


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


def empty(like: Any, shape: Sequence[int], dtype: np.dtype) -> Any:
    """A new zero-filled array of ``shape`` and NumPy ``dtype`` (an output attn allocates: rows no call writes,
    e.g. q rows past the last sequence, are 0, never leftover memory); a torch tensor when ``like`` is one (so
    functions return the caller's array type), else a NumPy array."""
    shape = tuple(int(s) for s in shape)
    if is_torch(like):
        import torch

        tdt = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
               np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}.get(np.dtype(dtype))
        if tdt is None and _mld is not None and np.dtype(dtype) == np.dtype(_mld.bfloat16):
            tdt = torch.bfloat16
        if tdt is not None:
            return torch.zeros(shape, dtype=tdt, device="cpu")
    return np.zeros(shape, dtype=dtype)


def dtype_of(x: Any, name: str = "tensor") -> np.dtype:
    """NumPy dtype of an array or DLPack producer (no copy)."""
    return as_numpy(x, name).dtype


def shape_of(x: Any, name: str = "tensor") -> Tuple[int, ...]:
    return tuple(int(s) for s in as_numpy(x, name).shape)
