"""ctypes declarations mirroring include/attn/attn.h (ABI mode: no compiler needed at install time).

Loading order for the shared library:
  1. the path in the environment variable ATTN_LIBRARY (``make test-python`` sets it to build/libattn.so);
  2. ``libattn.so`` installed inside this package by ``pip install .`` (scikit-build-core);
  3. otherwise ImportError with the commands that build it.

Entries that a given libattn does not export yet resolve to ``None`` (see :func:`has`), so the package
imports against an older library and the Python layer can say exactly which C entry is missing.
Every call that returns an attn_status goes through :func:`check`, which raises :class:`AttnError`
(or a subclass) carrying the C message from attn_last_error().
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t,
                    c_uint, c_void_p)
from typing import Any, Optional

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

STATE_PREFILL_NO_CACHE = 0
STATE_PREFILL_CACHE_HIT = 1
STATE_DECODE_ONLY = 2
STATE_CHUNKED_PREFILL = 3
STATE_SPEC_DECODING = 4

REQUEST_DECODER = 0
REQUEST_ENCODER_ONLY = 1
REQUEST_CROSS = 2

MAX_DIMS = 6


# ------------------------------------------------------------------------------------------------
# Structures
# ------------------------------------------------------------------------------------------------
class Tensor(Structure):
    """attn_tensor: a strided view; shape and strides in ELEMENTS."""

    _fields_ = [
        ("data", c_void_p),
        ("dtype", c_int),
        ("ndim", c_int32),
        ("shape", c_int64 * MAX_DIMS),
        ("strides", c_int64 * MAX_DIMS),
    ]


class Params(Structure):
    """attn_params, size-prefixed: struct_size = sizeof(Params), set by attn_params_init_sized, tells the
    library which fields this mirror knows (attn.h "Size-prefixed option structs": fields past it read as
    their defaults, so a newer libattn works with this mirror unchanged)."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("softmax_scale", c_float),
        ("causal", c_int32),
        ("window_left", c_int32),
        ("window_right", c_int32),
        ("softcap", c_float),
        ("alibi_slopes", POINTER(c_float)),
        ("sinks", POINTER(c_float)),
        ("mask", POINTER(Tensor)),
        ("key_padding_mask", POINTER(Tensor)),
        ("additive_mask", POINTER(Tensor)),
        ("k_scale", c_float),  # fp8 KV cache dequantization scales; attn_params_init: 1
        ("v_scale", c_float),
        ("k_scales", POINTER(c_float)),  # per-KV-head fp8 scales [num_kv_heads] or NULL
        ("v_scales", POINTER(c_float)),
    ]


class ParamsBuffer(Structure):
    """The attn_params of one call (attn_params_init_sized writes sizeof(Params) bytes, no more)."""

    _fields_ = [("p", Params)]


class PlanConfig(Structure):
    _fields_ = [
        ("struct_size", c_size_t),  # sizeof(PlanConfig), set by attn_plan_config_init_sized
        ("num_blocks", c_int32),
        ("block_size", c_int32),
        ("num_heads", c_int32),
        ("num_kv_heads", c_int32),
        ("head_size", c_int32),
        ("max_blocks_per_req", c_int32),
        ("num_speculative_tokens", c_int32),
        ("chunked_prefill_enabled", c_int32),
        ("spec_method_mtp", c_int32),
    ]


class PlanConfigBuffer(Structure):
    _fields_ = [("c", PlanConfig)]


class Request(Structure):
    _fields_ = [
        ("num_computed_tokens", c_int64),
        ("num_scheduled_tokens", c_int64),
        ("num_spec_tokens", c_int64),
        ("kind", c_int32),
        ("block_ids", POINTER(c_int32)),
        ("num_block_ids", c_int64),
        ("encoder_len", c_int64),
    ]


class PlanInfo(Structure):
    _fields_ = [
        ("num_reqs", c_int64),
        ("num_tokens", c_int64),
        ("num_decodes", c_int64),
        ("num_decode_tokens", c_int64),
        ("num_prefills", c_int64),
        ("num_prefill_tokens", c_int64),
        ("attn_state", c_int32),
        ("decode_threshold", c_int32),
        ("max_query_len", c_int64),
        ("max_seq_len", c_int64),
        ("query_start_loc", POINTER(c_int32)),
        ("seq_lens", POINTER(c_int32)),
        ("slot_mapping", POINTER(c_int64)),
        ("max_blocks_per_req", c_int64),
        ("block_table", POINTER(c_int32)),
        ("kinds", POINTER(c_int32)),
        ("req_order", POINTER(c_int32)),
        ("token_src", POINTER(c_int32)),
        ("num_work_blocks", c_int64),
        ("num_split_items", c_int64),
        ("workspace_size", c_size_t),
    ]


class Span(Structure):
    """attn_span: global key positions [start, end) of a full-attention span."""

    _fields_ = [("start", c_int64), ("end", c_int64)]


class QueryRange(Structure):
    """attn_query_range: local query rows [local_start, local_end) at global_start + (i - local_start)."""

    _fields_ = [("local_start", c_int64), ("local_end", c_int64), ("global_start", c_int64)]


class KVBlockRows(Structure):
    """attn_kv_block_rows: rows [row_start, row_end) of block block_idx hold tokens token_start.. ."""

    _fields_ = [("block_idx", c_int64), ("row_start", c_int64), ("row_end", c_int64), ("token_start", c_int64)]


class KVStored(Structure):
    """attn_kv_stored: what one cache write stored (valid during the callback only)."""

    _fields_ = [
        ("layer_idx", c_int32),
        ("kv_cache", POINTER(Tensor)),
        ("slot_mapping", POINTER(Tensor)),
        ("num_tokens", c_int64),
        ("num_written", c_int64),
        ("num_runs", c_int64),
        ("block_size", c_int64),
    ]


# attn_kv_stored_fn: void (*)(void *user, const attn_kv_stored *event)
KV_STORED_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, POINTER(KVStored))


class KVNotify(Structure):
    """attn_kv_notify: the callback, its user pointer and the layer id."""

    _fields_ = [("on_stored", KV_STORED_FN), ("user", ctypes.c_void_p), ("layer_idx", c_int32)]


class CacheWriteOptions(Structure):
    """attn_cache_write_options: fp8 scales (per tensor or per KV head) and the KV-stored callback of
    attn_reshape_and_cache_ex; struct_size set by attn_cache_write_options_init_sized."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("k_scale", c_float),
        ("v_scale", c_float),
        ("k_scales", POINTER(c_float)),
        ("v_scales", POINTER(c_float)),
        ("notify", POINTER(KVNotify)),
    ]


class QuantParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),  # sizeof(QuantParams), set by attn_quant_params_init_sized
        ("format", c_int32),
        ("rotate", c_int32),
        ("rotation_seed", ctypes.c_uint32),
        ("q_block_rows", c_int32),
        ("kv_block_rows", c_int32),
    ]


class QuantParamsBuffer(Structure):
    _fields_ = [("q", QuantParams)]


QUANT_FP8_E4M3 = 0
QUANT_FP8_E5M2 = 1
QUANT_MXFP8 = 2
QUANT_MXFP4 = 3
HADAMARD_SEED = 425500


class PlanInfoBuffer(Structure):
    _fields_ = [("i", PlanInfo), ("_spare", ctypes.c_char * 256)]


class Capabilities(Structure):
    """attn_capabilities: what the serving entries of this libattn support (attn_capabilities_get)."""

    _fields_ = [
        ("head_size_min", c_int32),
        ("head_size_max", c_int32),
        ("dtypes", ctypes.c_uint32),
        ("kv_cache_dtypes", ctypes.c_uint32),
        ("block_size_min", c_int32),
        ("block_size_max", c_int32),
        ("request_kinds", ctypes.c_uint32),
        ("sliding_window", c_int32),
        ("softcap", c_int32),
        ("alibi", c_int32),
        ("sinks", c_int32),
        ("lse", c_int32),
        ("max_decode_threshold", c_int32),
    ]


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
    env = os.environ.get("ATTN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    names = {"darwin": ["libattn.dylib"], "win32": ["attn.dll", "libattn.dll"]}.get(
        sys.platform, ["libattn.so"])
    return [os.path.join(here, n) for n in names]


def _load() -> ctypes.CDLL:
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path)
            except OSError as e:  # pragma: no cover - broken install
                raise ImportError(f"attn: cannot load {path}: {e}") from e
        tried.append(path)
    raise ImportError(
        "attn: libattn shared library not found (tried: " + ", ".join(tried) + "). Either install the "
        "package with `pip install .` from the repository root (builds libattn with CMake), or build it "
        "with `cmake -S . -B build && cmake --build build` and set ATTN_LIBRARY=$PWD/build/libattn.so "
        "(plus PYTHONPATH=$PWD/python).")


lib = _load()
library_path: str = getattr(lib, "_name", "")

_T = POINTER(Tensor)
_P = POINTER(Params)
_CTX = c_void_p
_PLAN = c_void_p

# name -> (restype, argtypes). attn_status is a C enum: c_int.
_SIGNATURES = {
    "attn_version_number": (c_uint, []),
    "attn_version_string": (c_char_p, []),
    "attn_status_string": (c_char_p, [c_int]),
    "attn_last_error": (c_char_p, []),
    "attn_clear_error": (None, []),
    "attn_dtype_size": (c_size_t, [c_int]),
    "attn_dtype_name": (c_char_p, [c_int]),
    "attn_ctx_create": (c_int, [POINTER(c_void_p)]),
    "attn_ctx_destroy": (None, [_CTX]),
    "attn_ctx_set_num_threads": (c_int, [_CTX, c_int32]),
    "attn_ctx_num_threads": (c_int32, [_CTX]),
    "attn_ctx_set_isa": (c_int, [_CTX, c_char_p]),
    "attn_ctx_isa": (c_char_p, [_CTX]),
    "attn_isa_count": (c_int32, []),
    "attn_isa_name": (c_char_p, [c_int32]),
    "attn_isa_opt_in_name": (c_char_p, [c_int32]),
    "attn_isa_available": (c_int, [c_char_p]),
    "attn_cpu_features": (c_char_p, []),
    "attn_params_init": (None, [_P]),
    "attn_params_init_sized": (None, [_P, c_size_t]),
    "attn_params_copy": (c_int, [_P, _P]),
    # dense / varlen / merge
    "attn_forward": (c_int, [_CTX, c_int, _T, _T, _T, _P, _T, _T]),
    "attn_forward_varlen": (c_int, [_CTX, _T, _T, _T, _T, _T, _P, _T, _T]),
    "attn_merge_attn_states": (c_int, [_CTX, _T, _T, _T, _T, _T, _T]),
    "attn_ref_forward": (c_int, [c_int, _T, _T, _T, _P, _T, _T]),
    "attn_ref_forward_varlen": (c_int, [_T, _T, _T, _T, _T, _P, _T, _T]),
    # serving
    "attn_reshape_and_cache": (c_int, [_CTX, _T, _T, _T, _T]),
    "attn_reshape_and_cache_scaled": (c_int, [_CTX, _T, _T, _T, _T, c_float, c_float]),
    "attn_reshape_and_cache_notify": (c_int, [_CTX, _T, _T, _T, _T, POINTER(KVNotify)]),
    "attn_reshape_and_cache_scaled_notify": (c_int, [_CTX, _T, _T, _T, _T, c_float, c_float, POINTER(KVNotify)]),
    "attn_cache_write_options_init_sized": (None, [POINTER(CacheWriteOptions), c_size_t]),
    "attn_reshape_and_cache_ex": (c_int, [_CTX, _T, _T, _T, _T, POINTER(CacheWriteOptions)]),
    "attn_kv_stored_next": (c_int, [POINTER(KVStored), POINTER(c_int64), POINTER(KVBlockRows)]),
    "attn_copy_blocks": (c_int, [_CTX, _T, _T]),
    "attn_swap_blocks": (c_int, [_CTX, _T, _T, _T]),
    "attn_plan_config_init": (None, [POINTER(PlanConfig)]),
    "attn_plan_config_init_sized": (None, [POINTER(PlanConfig), c_size_t]),
    "attn_plan_create": (c_int, [POINTER(PlanConfig), POINTER(Request), c_int64, POINTER(_PLAN)]),
    "attn_plan_free": (None, [_PLAN]),
    "attn_plan_workspace_size": (c_size_t, [_PLAN]),
    "attn_plan_get_info": (c_int, [_PLAN, POINTER(PlanInfo)]),
    "attn_forward_paged": (c_int, [_CTX, _PLAN, _T, _T, _T, _T, _P, _T, _T, c_void_p, c_size_t]),
    "attn_paged_attention": (c_int, [_CTX, _T, _T, _T, _T, _T, _P, _T, _T]),
    "attn_ref_paged_attention": (c_int, [_T, _T, _T, _T, _T, _P, _T, _T]),
    "attn_capabilities_get": (c_int, [POINTER(Capabilities), c_size_t]),
    # diffusion
    "attn_forward_padded_workspace_size": (c_int, [c_int64, c_int64, POINTER(c_size_t)]),
    "attn_forward_padded": (c_int, [_CTX, c_int, _T, _T, _T, _T, _P, _T, _T, c_void_p, c_size_t]),
    "attn_ref_forward_padded": (c_int, [c_int, _T, _T, _T, _T, _P, _T, _T, c_void_p, c_size_t]),
    "attn_forward_packed": (c_int, [_CTX, _T, _T, _T, _T, _T, _P, _T, _T]),
    "attn_forward_piecewise": (c_int, [_CTX, c_int, _T, _T, _T, POINTER(Span), c_int64,
                                       POINTER(QueryRange), c_int64, _P, _T, _T]),
    "attn_ref_forward_piecewise": (c_int, [c_int, _T, _T, _T, POINTER(Span), c_int64,
                                           POINTER(QueryRange), c_int64, _P, _T, _T]),
    "attn_forward_paged_piecewise": (c_int, [_CTX, _T, _T, _T, _T, POINTER(Span), c_int64,
                                             POINTER(QueryRange), c_int64, _P, _T, _T]),
    "attn_ref_forward_paged_piecewise": (c_int, [_T, _T, _T, _T, POINTER(Span), c_int64,
                                                 POINTER(QueryRange), c_int64, _P, _T, _T]),
    "attn_forward_kv_prefix": (c_int, [_CTX, c_int, _T, _T, _T, c_int64, _P, _T, _T]),
    "attn_forward_prescaled_workspace_size": (c_int, [_T, _T, _T, POINTER(c_size_t)]),
    "attn_forward_prescaled": (c_int, [_CTX, c_int, _T, _T, _T, c_int32, _P, _T, _T, c_void_p,
                                       c_size_t]),
    "attn_fp8_from_float": (ctypes.c_uint8, [c_int, c_float]),
    "attn_fp8_to_float": (c_float, [c_int, ctypes.c_uint8]),
    "attn_fp4_e2m1_from_float": (ctypes.c_uint8, [c_float]),
    "attn_fp4_e2m1_to_float": (c_float, [ctypes.c_uint8]),
    "attn_e8m0_to_float": (c_float, [ctypes.c_uint8]),
    "attn_quantize_fp8": (c_int, [c_int, c_void_p, c_int64, c_float, c_void_p]),
    "attn_dequantize_fp8": (c_int, [c_int, c_void_p, c_int64, c_float, c_void_p]),
    "attn_quantize_mx": (c_int, [c_int, c_void_p, c_int64, c_void_p, c_void_p]),
    "attn_dequantize_mx": (c_int, [c_int, c_void_p, c_void_p, c_int64, c_void_p]),
    "attn_hadamard_signs": (c_int, [c_int64, ctypes.c_uint32, c_void_p]),
    "attn_hadamard_rotate": (c_int, [c_void_p, c_int64, c_int64, ctypes.c_uint32, c_void_p]),
    "attn_quant_params_init": (None, [POINTER(QuantParams), c_int]),
    "attn_quant_params_init_sized": (None, [POINTER(QuantParams), c_size_t, c_int]),
    "attn_forward_quant_workspace_size": (c_int, [c_int, _T, _T, _T, POINTER(c_size_t)]),
    "attn_forward_quant": (c_int, [_CTX, c_int, _T, _T, _T, POINTER(QuantParams), _P, _T, _T,
                                   c_void_p, c_size_t]),
    "attn_ref_forward_quant": (c_int, [c_int, _T, _T, _T, POINTER(QuantParams), _P, _T, _T]),
    "attn_forward_quant_kernels": (c_char_p, [_CTX]),
}

def _checked_int(base: Any, bits: int, signed: bool) -> Any:
    """A ctypes integer argument type that refuses a Python int outside its range (ctypes itself wraps it
    around silently: 2**64 + 3 would reach C as 3) and a non-integer (a float would be truncated)."""
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)

    class _Checked(base):  # type: ignore[misc, valid-type]
        @classmethod
        def from_param(cls, v: Any) -> Any:
            if isinstance(v, ctypes._SimpleCData):  # already a C value (c_int64(...), ...)
                return v
            if not hasattr(v, "__index__"):
                raise TypeError(f"expected an integer, got {type(v).__name__}")
            i = v.__index__()
            if not lo <= i <= hi:
                raise OverflowError(f"{i} is outside [{lo}, {hi}] ({base.__name__})")
            return base(i)

    _Checked.__name__ = f"checked_{base.__name__}"
    return _Checked


_CHECKED = {c_int64: _checked_int(c_int64, 64, True), c_int32: _checked_int(c_int32, 32, True),
            c_size_t: _checked_int(c_size_t, 8 * ctypes.sizeof(c_size_t), False)}

_functions: dict = {}
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name, None)
    if _fn is not None:
        _fn.restype = _res
        _fn.argtypes = [_CHECKED.get(a, a) for a in _args]
    _functions[_name] = _fn


def has(name: str) -> bool:
    """True if the loaded libattn exports the C entry ``name`` (e.g. "attn_paged_attention")."""
    return _functions.get(name) is not None


def fn(name: str) -> Any:
    """The ctypes function ``name``; raises NotImplementedError naming the entry if it is missing."""
    f = _functions.get(name)
    if f is None:
        raise NotImplementedError(
            f"{name} is not exported by the loaded libattn ({library_path}); rebuild libattn")
    return f


def _s(b: Optional[bytes]) -> str:
    return "" if b is None else b.decode("utf-8", "replace")


def status_string(status: int) -> str:
    """Static name of an attn_status value, e.g. "ATTN_STATUS_INVALID_ARGUMENT"."""
    return _s(fn("attn_status_string")(int(status)))


def last_error() -> str:
    """The thread-local message of the last failing call on this thread ("" if none)."""
    return _s(fn("attn_last_error")())


def clear_error() -> None:
    fn("attn_clear_error")()


def check(status: int, function: str = "") -> None:
    """Raises the AttnError subclass for a non-OK status, with the C message."""
    if status != STATUS_OK:
        cls = _ERROR_CLASSES.get(status, AttnError)
        raise cls(status, last_error(), function)


def make_error(status: int, message: str, function: str = "") -> AttnError:
    """The exception :func:`check` raises for ``status`` with the C ``message`` (used by attn._ext, so both
    bindings raise the same class with the same text)."""
    return _ERROR_CLASSES.get(status, AttnError)(status, message, function)


def call(name: str, *args: Any) -> None:
    """Calls the C entry ``name`` and raises on a non-OK status (clearing the error first, so the
    message always belongs to this call)."""
    f = fn(name)
    fn("attn_clear_error")()
    try:
        status = f(*args)
    except ctypes.ArgumentError as e:  # an integer argument out of its C range (or not an integer)
        raise make_error(STATUS_OVERFLOW if "OverflowError" in str(e) else STATUS_INVALID_ARGUMENT,
                         f"{name}: {e}", name) from None
    check(status, name)


def dtype_size(dtype: int) -> int:
    return int(fn("attn_dtype_size")(dtype))


def dtype_name(dtype: int) -> str:
    return _s(fn("attn_dtype_name")(dtype))


def version() -> str:
    """Run-time version string of the loaded libattn, e.g. "0.1.0"."""
    return _s(fn("attn_version_string")())


def version_number() -> int:
    return int(fn("attn_version_number")())


def isa_names() -> list:
    """Kernel tables compiled into the library, most portable first."""
    return [_s(fn("attn_isa_name")(i)) for i in range(int(fn("attn_isa_count")()))]


def isa_opt_in_names() -> list:
    """Opt-in kernel tables compiled in (e.g. "avx512bf16"): never chosen by default, selected by name
    (``attn.Context(isa=...)`` or ATTN_ISA); their arithmetic differs from the default tables' within the
    tolerance in docs/SEMANTICS.md §7."""
    out, f = [], fn("attn_isa_opt_in_name")
    while (name := f(len(out))) is not None:  # NULL past the end
        out.append(_s(name))
    return out


def isa_available(name: str) -> bool:
    return bool(fn("attn_isa_available")(name.encode()))


def cpu_features() -> str:
    return _s(fn("attn_cpu_features")())


_DTYPE_NAMES = {DTYPE_F32: "f32", DTYPE_F16: "f16", DTYPE_BF16: "bf16", DTYPE_I32: "i32", DTYPE_I64: "i64",
                DTYPE_BOOL: "bool", DTYPE_FP8_E4M3: "fp8_e4m3", DTYPE_FP8_E5M2: "fp8_e5m2",
                DTYPE_FP4_E2M1: "fp4_e2m1", DTYPE_E8M0: "e8m0", DTYPE_U8: "u8"}
_KIND_NAMES = {REQUEST_DECODER: "decoder", REQUEST_ENCODER_ONLY: "encoder_only", REQUEST_CROSS: "cross"}


def capabilities() -> dict:
    """What the serving entries of the loaded libattn support (attn_capabilities_get), as a dict:
    head_size_min/max, block_size_min/max, max_decode_threshold (ints), dtypes / kv_cache_dtypes (sets of
    attn dtype names: "f32", "f16", "bf16", ...), request_kinds (set of "decoder", "encoder_only",
    "cross") and sliding_window, softcap, alibi, sinks, lse (bools)."""
    c = Capabilities()
    call("attn_capabilities_get", ctypes.byref(c), ctypes.sizeof(c))

    def bits(mask: int, names: dict) -> set:
        return {n for v, n in names.items() if mask & (1 << v)}

    return dict(head_size_min=c.head_size_min, head_size_max=c.head_size_max,
                dtypes=bits(c.dtypes, _DTYPE_NAMES), kv_cache_dtypes=bits(c.kv_cache_dtypes, _DTYPE_NAMES),
                block_size_min=c.block_size_min, block_size_max=c.block_size_max,
                request_kinds=bits(c.request_kinds, _KIND_NAMES), sliding_window=bool(c.sliding_window),
                softcap=bool(c.softcap), alibi=bool(c.alibi), sinks=bool(c.sinks), lse=bool(c.lse),
                max_decode_threshold=c.max_decode_threshold)


def new_params() -> ParamsBuffer:
    """attn_params initialised with attn_params_init_sized(p, sizeof(Params)): struct_size = this mirror's size."""
    buf = ParamsBuffer()
    fn("attn_params_init_sized")(ctypes.byref(buf.p), ctypes.sizeof(Params))
    return buf


def new_plan_config() -> PlanConfigBuffer:
    buf = PlanConfigBuffer()
    fn("attn_plan_config_init_sized")(ctypes.byref(buf.c), ctypes.sizeof(PlanConfig))
    return buf


def new_cache_write_options() -> CacheWriteOptions:
    """attn_cache_write_options initialised with attn_cache_write_options_init_sized (scales 1, no callback)."""
    o = CacheWriteOptions()
    fn("attn_cache_write_options_init_sized")(ctypes.byref(o), ctypes.sizeof(CacheWriteOptions))
    return o
