"""The C side of the package: attn.h's constants, the exception family and the compiled extension attn._ext,
the one path from Python to libattn (python/attn/_ext.c).

The extension links libattn (its RPATH finds the library beside it: ``build/python/attn/_ext*.so`` ->
``build/libattn.so.N`` in a CMake build, ``attn/`` in a wheel). Where it is looked for, in order:
  1. the file named by ATTN_EXTENSION;
  2. with ATTN_LIBRARY set: ``python/attn/_ext*.so`` under that library's directory (the plain CMake build);
  3. otherwise ``attn/_ext*.so`` inside the package (``pip install .``).
A build without Python development headers has no extension and therefore no Python package: ``import attn``
then raises ImportError saying so. Every entry is ``_ext.<C name>``; a failing status raises
:class:`AttnError` (or a subclass) carrying the C message from attn_last_error().
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

# ------------------------------------------------------------------------------------------------
# Enumerations (values pinned in attn.h)
# ------------------------------------------------------------------------------------------------
STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_OUT_OF_MEMORY = 3
STATUS_OVERFLOW = 4
STATUS_WORKSPACE_TOO_SMALL = 5
STATUS_INTERNAL = 6

DTYPE_F32 = 0
DTYPE_F16 = 1
DTYPE_BF16 = 2
DTYPE_I32 = 3
DTYPE_I64 = 4
DTYPE_BOOL = 5
DTYPE_FP8_E4M3 = 6
DTYPE_FP8_E5M2 = 7
DTYPE_FP4_E2M1 = 8
DTYPE_E8M0 = 9
DTYPE_U8 = 10

CAUSAL_NONE = 0
CAUSAL_BOTTOM_RIGHT = 1
CAUSAL_TOP_LEFT = 2

LAYOUT_BSND = 0
LAYOUT_BNSD = 1


REQUEST_DECODER = 0
REQUEST_ENCODER_ONLY = 1
REQUEST_CROSS = 2

MAX_DIMS = 6


QUANT_FP8_E4M3 = 0
QUANT_FP8_E5M2 = 1
QUANT_MXFP8 = 2
QUANT_MXFP4 = 3
HADAMARD_SEED = 425500


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------
class AttnError(RuntimeError):
    """A libattn call failed. ``status`` is the attn_status value, ``status_name`` its name and
    ``message`` the C message (attn_last_error), which names the bad argument and its value."""

    def __init__(self, status: int, message: str, function: str = ""):
        self.status = status
        self.status_name = status_string(status)
        self.message = message
        self.function = function
        where = f"{function}: " if function else ""
        super().__init__(f"{where}{self.status_name}: {message}")


class AttnInvalidArgumentError(AttnError, ValueError):
    """ATTN_STATUS_INVALID_ARGUMENT (also a ValueError)."""


class AttnUnsupportedError(AttnError, NotImplementedError):
    """ATTN_STATUS_UNSUPPORTED (also a NotImplementedError)."""


class AttnOutOfMemoryError(AttnError, MemoryError):
    """ATTN_STATUS_OUT_OF_MEMORY (also a MemoryError)."""


class AttnOverflowError(AttnError, OverflowError):
    """ATTN_STATUS_OVERFLOW (also an OverflowError)."""


_ERROR_CLASSES = {
    STATUS_INVALID_ARGUMENT: AttnInvalidArgumentError,
    STATUS_UNSUPPORTED: AttnUnsupportedError,
    STATUS_OUT_OF_MEMORY: AttnOutOfMemoryError,
    STATUS_OVERFLOW: AttnOverflowError,
}


# ------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------
def _candidates() -> list:
    """The extension of the libattn build to use: ATTN_EXTENSION if set; with ATTN_LIBRARY the module of that
    build only (never the package's own, compiled against another attn.h); without it, the package's module."""
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


def _load() -> tuple:
    errors = []
    for path in _candidates():
        if not os.path.exists(path):
            continue
        try:
            spec = importlib.util.spec_from_file_location("attn._ext", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except ImportError as e:
            errors.append(f"{path}: {e}")
            continue
        sys.modules["attn._ext"] = mod
        return mod, path
    raise ImportError(
        "attn: the compiled extension attn._ext was not found (" + ("; ".join(errors) or "tried: " + ", ".join(
            _candidates())) + "). It is the package's only binding and needs the Python development headers at "
        "build time. Install with `pip install .` from the repository root, or build with `cmake -S . -B build "
        "&& cmake --build build` and set ATTN_LIBRARY=$PWD/build/libattn.so (plus PYTHONPATH=$PWD/python).")


ext, extension_path = _load()
library_path: str = os.path.normpath(ext.library_path())


# The C entries the binding reaches: its attn_* functions, and those its hot functions call (attn_forward,
# attn_ref_forward through ext.forward, ...)
ENTRIES = tuple(sorted({n for n in dir(ext) if n.startswith("attn_")} | {
    "attn_forward", "attn_ref_forward", "attn_forward_varlen", "attn_ref_forward_varlen", "attn_merge_attn_states",
    "attn_reshape_and_cache", "attn_reshape_and_cache_scaled", "attn_reshape_and_cache_ex", "attn_forward_paged",
    "attn_paged_attention", "attn_ref_paged_attention"}))


def has(name: str) -> bool:
    """True if the binding reaches the C entry ``name`` (e.g. "attn_paged_attention")."""
    return name in ENTRIES


def call(name: str, *args: Any) -> Any:
    """Calls the C entry ``name`` through the extension; a non-OK status raises the AttnError subclass with
    the C message."""
    return getattr(ext, name)(*args)


def status_string(status: int) -> str:
    """Static name of an attn_status value, e.g. "ATTN_STATUS_INVALID_ARGUMENT"."""
    return ext.attn_status_string(int(status))


def last_error() -> str:
    """The thread-local message of the last failing call on this thread ("" if none)."""
    return ext.attn_last_error() or ""


def make_error(status: int, message: str, function: str = "") -> AttnError:
    """The exception a failing C call raises for ``status`` with the C ``message`` (attn._ext builds every
    error through it)."""
    return _ERROR_CLASSES.get(status, AttnError)(status, message, function)


def version() -> str:
    """Run-time version string of the loaded libattn, e.g. "0.1.0"."""
    return ext.attn_version_string()


def isa_names() -> list:
    """Kernel tables compiled into the library, most portable first."""
    return [ext.attn_isa_name(i) for i in range(ext.attn_isa_count())]


def isa_opt_in_names() -> list:
    """Opt-in kernel tables compiled in (e.g. "avx512bf16"): never chosen by default, selected by name
    (``attn.Context(isa=...)`` or ATTN_ISA); their arithmetic differs from the default tables' within the
    tolerance in docs/SEMANTICS.md §7."""
    out = []
    while (name := ext.attn_isa_opt_in_name(len(out))) is not None:  # NULL past the end
        out.append(name)
    return out


def isa_available(name: str) -> bool:
    return ext.attn_isa_available(name)


def cpu_features() -> str:
    return ext.attn_cpu_features()


_DTYPE_NAMES = {d: ext.attn_dtype_name(d) for d in range(DTYPE_U8 + 1)}  # attn_dtype_name: "f32", "bf16", ...
_KIND_NAMES = {REQUEST_DECODER: "decoder", REQUEST_ENCODER_ONLY: "encoder_only", REQUEST_CROSS: "cross"}


def capabilities() -> dict:
    """What the serving entries of the loaded libattn support (attn_capabilities_get), as a dict:
    head_size_min/max, block_size_min/max, max_decode_threshold (ints), dtypes / kv_cache_dtypes (sets of
    attn dtype names: "f32", "f16", "bf16", ...), request_kinds (set of "decoder", "encoder_only",
    "cross") and sliding_window, softcap, alibi, sinks, lse (bools)."""
    (hmin, hmax, dts, kvdts, bmin, bmax, kinds, window, softcap, alibi, sinks, lse,
     max_dt) = ext.attn_capabilities_get()

    def bits(mask: int, names: dict) -> set:
        return {n for v, n in names.items() if mask & (1 << v)}

    return dict(head_size_min=hmin, head_size_max=hmax, dtypes=bits(dts, _DTYPE_NAMES),
                kv_cache_dtypes=bits(kvdts, _DTYPE_NAMES), block_size_min=bmin, block_size_max=bmax,
                request_kinds=bits(kinds, _KIND_NAMES), sliding_window=bool(window), softcap=bool(softcap),
                alibi=bool(alibi), sinks=bool(sinks), lse=bool(lse), max_decode_threshold=max_dt)
