"""Which binding runs the hot entries: the compiled extension ``attn._ext`` (python/attn/_ext.c) or ctypes.

The extension takes NumPy arrays and DLPack producers straight into attn_tensor views in C, releases the
GIL around the libattn call and costs microseconds per call; ctypes (python/attn/_capi.py) stays the
general path: every fast entry returns NotImplemented for inputs outside its plain valid case and the
wrapper then runs the ctypes code, so errors and messages are those of the ctypes path.

Where the extension is looked for, in order:
  1. the file named by ATTN_EXTENSION;
  2. with ATTN_LIBRARY set: ``python/attn/_ext*.so`` under that library's directory (the plain CMake
     build: ``build/libattn.so`` and ``build/python/attn/_ext.cpython-*.so``);
     otherwise ``attn/_ext*.so`` inside the package (``pip install .`` puts it next to libattn.so).
The module must come from the same build as the library (it checks the version numbers match).
ATTN_PY_BACKEND=ctypes forces the ctypes binding, =ext requires the extension (a warning if it is missing);
unset: the extension when found, else ctypes with a one-line warning. ``import attn`` never fails for lack
of the extension. :data:`name` says which one is in use ("ext" or "ctypes"), :data:`path` where it came from.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from typing import Any, Optional

import numpy as np

from . import _arrays, _capi

_ENTRIES = ("attn_version_number", "attn_paged_attention", "attn_forward_paged", "attn_reshape_and_cache", "attn_forward",
            "attn_forward_varlen", "attn_merge_attn_states", "attn_last_error", "attn_clear_error",
            "attn_params_init_sized")
_OPTIONAL_ENTRIES = ("attn_reshape_and_cache_scaled",)  # fp8 KV cache writes


def _candidates() -> list:
    """The module built with the libattn ctypes loaded: ATTN_EXTENSION if set; with ATTN_LIBRARY (which
    overrides the package's libattn) the module of that build only, never the package's own, which was
    compiled against another attn.h; without it, the package's module."""
    out = []
    env = os.environ.get("ATTN_EXTENSION")
    if env:
        out.append(env)
    lib = os.environ.get("ATTN_LIBRARY")
    d = (os.path.join(os.path.dirname(os.path.abspath(lib)), "python", "attn") if lib
         else os.path.dirname(os.path.abspath(__file__)))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        out.append(os.path.join(d, "_ext" + suffix))
    return out


def _load_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("attn._ext", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    entries = {}
    for n in _ENTRIES:
        f = _capi._functions.get(n)
        if f is None:
            raise ImportError(f"{n} is not exported by {_capi.library_path}")
        entries[n] = ctypes.cast(f, ctypes.c_void_p).value
    for n in _OPTIONAL_ENTRIES:  # newer entries: the extension falls back to ctypes without them
        f = _capi._functions.get(n)
        if f is not None:
            entries[n] = ctypes.cast(f, ctypes.c_void_p).value
    special, view = {}, {}
    for dt, code in _arrays.NP_TO_ATTN.items():
        try:
            memoryview(np.zeros(1, dt))
        except (TypeError, ValueError, BufferError):  # ml_dtypes: no PEP 3118 format
            special[dt] = code
            view[code] = np.dtype(f"u{dt.itemsize}")
    np_dtypes = dict(_arrays.ATTN_TO_NP)
    # outputs attn allocates are zero-filled (LSE: -inf), so rows outside every sequence (q rows past
    # query_start_loc[-1] / cu_seqlens_q[-1]) come back as out 0, lse -inf, never as leftover memory
    mod._init(entries, np.ndarray, np.zeros, _alloc_like, _capi.make_error, np_dtypes, view, special)


def _select() -> tuple:
    want = os.environ.get("ATTN_PY_BACKEND", "").strip().lower()
    if want == "ctypes":
        return None, "ctypes", None, "ATTN_PY_BACKEND=ctypes"
    if want not in ("", "ext"):
        warnings.warn(f"attn: ATTN_PY_BACKEND={want!r} is not 'ext' or 'ctypes'; ignored", RuntimeWarning)
    errors = []
    for path in _candidates():
        if not os.path.exists(path):
            continue
        try:
            mod = _load_module(path)
            _init(mod)
            sys.modules["attn._ext"] = mod
            return mod, "ext", path, ""
        except Exception as e:  # noqa: BLE001 - a stale or foreign build: say so, use ctypes
            errors.append(f"{path}: {e}")
    why = "; ".join(errors) if errors else "not built (no Python development headers at build time?)"
    warnings.warn(f"attn: compiled extension attn._ext unavailable ({why}); using the slower ctypes binding",
                  RuntimeWarning, stacklevel=3)
    return None, "ctypes", None, why


ext: Optional[Any]
ext, name, path, reason = _select()
