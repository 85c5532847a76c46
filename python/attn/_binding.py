"""Hands the compiled extension attn._ext (the package's only binding, loaded by attn._capi) the Python objects
its C code uses: NumPy's ndarray type and allocator, the torch-aware allocator of outputs, the exception
factory, the dtype tables and attn._arrays' helpers for arguments it cannot view directly (lists, detached
torch tensors, errors that name the argument). :data:`name` is "ext", :data:`path` the module's file."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _arrays, _capi

_torch_dtypes: Optional[dict] = None


def _alloc_like(like: Any, shape: tuple, dtype: np.dtype) -> Any:
    """_arrays.empty with the torch dtype table cached (outputs the extension allocates): a zero-filled torch
    tensor on the CPU when ``like`` is one and torch has the dtype, else a zero-filled NumPy array."""
    global _torch_dtypes
    if type(like).__module__.split(".")[0] == "torch":
        if _torch_dtypes is None:
            import torch

            _torch_dtypes = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
                             np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}
            if _arrays._mld is not None:
                _torch_dtypes[np.dtype(_arrays._mld.bfloat16)] = torch.bfloat16
            _torch_dtypes["empty"] = torch.zeros
        tdt = _torch_dtypes.get(dtype)
        if tdt is not None:
            return _torch_dtypes["empty"](shape, dtype=tdt, device="cpu")
    return np.zeros(shape, dtype=dtype)


def _init(mod: Any) -> None:
    special, view = {}, {}
    for dt, code in _arrays.NP_TO_ATTN.items():
        try:
            memoryview(np.zeros(1, dt))
        except (TypeError, ValueError, BufferError):  # ml_dtypes: no PEP 3118 format
            special[dt] = code
            view[code] = np.dtype(f"u{dt.itemsize}")
    # outputs attn allocates are zero-filled (LSE: -inf), so rows outside every sequence (q rows past
    # query_start_loc[-1] / cu_seqlens_q[-1]) come back as out 0, lse -inf, never as leftover memory
    mod._init(np.ndarray, np.zeros, _alloc_like, _capi.make_error, dict(_arrays.ATTN_TO_NP), view, special,
              _arrays.as_view, _arrays.refuse)


ext = _capi.ext
_init(ext)
name, path, reason = "ext", _capi.extension_path, ""
