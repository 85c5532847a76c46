"""Hands the compiled extension attn._ext (the package's only binding, loaded by attn._capi) the Python objects
its C code uses: NumPy's ndarray type and allocator, the torch-aware allocator of outputs, the exception
factory, the dtype tables and attn._arrays' helpers for arguments it cannot view directly (lists, detached
torch tensors, errors that name the argument). :data:`name` is "ext", :data:`path` the module's file."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _arrays, _capi


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
    mod._init(np.ndarray, np.zeros, _arrays.empty, _capi.make_error, dict(_arrays.ATTN_TO_NP), view, special,
              _arrays.as_view, _arrays.refuse)


ext = _capi.ext
_init(ext)
name, path, reason = "ext", _capi.extension_path, ""
