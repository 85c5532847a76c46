"""Bad arguments straight into the compiled binding attn._ext (python/attn/_ext.c) and through the public
wrappers: every call returns a result or raises an ordinary Python exception. Never SystemError (a C function that returned with an exception set, or
set one and returned a result), never a crash or an out-of-bounds read.

  - per-head arrays (alibi_slopes, sinks) are checked against q's heads, which libattn reads, whatever the
    num_heads argument of attn._ext.forward_paged says; per-KV-head fp8 scales against the cache's kv heads;
  - a failing truth value (NumPy arrays, objects whose __bool__ raises) of want_lse propagates;
  - DLPack tensors crafted here with ctypes (a DLManagedTensor in a "dltensor" capsule): data = NULL (legal only
    without elements), strides = NULL with sizes whose product overflows int64, negative sizes;
  - a seeded random-argument driver over every entry (wrong dtypes, negative / zero strides, empty and huge
    views, overlapping outputs, raising __bool__ / __dlpack__, bad scalars).

The ctx / plan / workspace handles stay valid throughout: they are raw addresses the package itself passes,
not arguments a caller of attn's public API hands over.

Under AddressSanitizer the same tests also show that nothing is read or written out of bounds: a sanitizer build
of libattn (cmake -DATTN_SANITIZE="address;undefined"), the extension compiled by hand next to it with the same
-fsanitize flags (CMake builds none under sanitizers), and python run with the runtimes preloaded:
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" PYTHONMALLOC=malloc (so that
the extension's PyMem scratch is checked too) ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 (huge views ask for huge outputs: MemoryError, as in a
plain build) ATTN_LIBRARY=<that build>/libattn.so."""

import ctypes
import math
import time

import numpy as np
import pytest

import attn
from attn import _binding, flash
from conftest import DLPackOnly

EXT = _binding.ext
needs_ext = pytest.mark.skipif(EXT is None, reason=f"attn._ext not loaded ({_binding.reason})")
H, HKV, D, BS, NB = 4, 2, 16, 8, 4


# ------------------------------------------------------------------------------------------------
# DLPack tensors crafted by hand (dlpack.h's DLTensor, which attn._ext reads)
# ------------------------------------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")  # a capsule keeps the pointer: module lifetime
_DL_CODES = {np.dtype(np.float32): (2, 32), np.dtype(np.float16): (2, 16), np.dtype(np.int32): (0, 32),
             np.dtype(np.int64): (0, 64), np.dtype(np.uint8): (1, 8), np.dtype(np.bool_): (6, 8)}


class Crafted:
    """A DLPack producer of one hand-written DLTensor. ``data``: "own" (a zeroed buffer with the elements of
    ``shape``, or 64 bytes when that is not allocatable), None (NULL) or an int address; ``strides`` None
    means NULL (compact row-major). The capsule has no destructor: this object owns every byte."""

    def __init__(self, shape, dtype=np.float32, data="own", strides=None, byte_offset=0, ndim=None,
                 device_type=1, lanes=1, code_bits=None, shape_null=False):
        dt = np.dtype(dtype)
        n = len(shape)
        if data == "own":
            count = math.prod(shape) if all(s >= 0 for s in shape) else 0
            small = 0 < count * dt.itemsize <= 1 << 20
            self._buf = np.zeros(count, dt) if small else np.zeros(64, np.uint8)
            addr = self._buf.ctypes.data
        else:
            addr = data
        # 8 entries whatever ndim says (a lying ndim up to 8 reads this object's memory only)
        self._shape = (ctypes.c_int64 * 8)(*(tuple(shape) + (1,) * (8 - n)))
        self._strides = None if strides is None else (ctypes.c_int64 * 8)(*(tuple(strides) + (1,) * (8 - n)))
        m = self._m = _DLManaged()
        t = m.dl_tensor
        t.data = addr
        t.device.device_type, t.device.device_id = device_type, 0
        t.ndim = n if ndim is None else ndim
        t.dtype.code, t.dtype.bits = code_bits or _DL_CODES[dt]
        t.dtype.lanes = lanes
        t.shape = None if shape_null else ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = None if strides is None else ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = byte_offset

    def __dlpack__(self, *args, **kwargs):
        return _capsule_new(ctypes.addressof(self._m), _CAPSULE_NAME, None)

    def __dlpack_device__(self):
        return (self._m.dl_tensor.device.device_type, 0)


class _DLPackRaises:
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("this producer refuses")

    def __dlpack_device__(self):
        return (1, 0)


class _DLPackNotCapsule:
    def __dlpack__(self, *args, **kwargs):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


class _BoolRaises:
    def __bool__(self):
        raise RuntimeError("no truth value")


# ------------------------------------------------------------------------------------------------
# One valid call of every extension entry
# ------------------------------------------------------------------------------------------------
def _inputs(rng):
    f = np.float32
    x = {
        "q3": rng.standard_normal((3, H, D)).astype(f),
        "kv": rng.standard_normal((2, NB, BS, HKV, D)).astype(f),
        "qsl": np.array([0, 1, 3], np.int32), "sl": np.array([5, 2], np.int32),
        "bt": np.array([[0, 1], [2, 3]], np.int32),
        "oa": rng.standard_normal((3, H, D)).astype(f), "ob": rng.standard_normal((3, H, D)).astype(f),
        "la": rng.standard_normal((H, 3)).astype(f), "lb": rng.standard_normal((H, 3)).astype(f),
        "q4": rng.standard_normal((1, 3, H, D)).astype(f), "k4": rng.standard_normal((1, 5, HKV, D)).astype(f),
        "v4": rng.standard_normal((1, 5, HKV, D)).astype(f),
        "k3": rng.standard_normal((5, HKV, D)).astype(f), "v3": rng.standard_normal((5, HKV, D)).astype(f),
        "cuq": np.array([0, 3], np.int32), "cuk": np.array([0, 5], np.int32),
        "qk": rng.standard_normal((1, 1, H, D)).astype(f),
        "kvc": rng.standard_normal((2, 1, BS, HKV, D)).astype(f),  # kvcache: halves [1, BS, HKV, D]
        "cuq2": np.array([0, 1, 3], np.int32), "cuk2": np.array([0, 5, 7], np.int32),
        "slopes": np.array([0.5, 0.25, 0.125, 0.0625], f),
        "slots": np.array([3, 17, -1], np.int64),
    }
    x["kv8"] = (x["kv"] * 16).astype(np.int8).view(np.uint8)  # fp8 e4m3 codes of small values
    x["kvw"], x["kvw8"] = np.zeros_like(x["kv"]), np.zeros_like(x["kv8"])
    x["plan"] = attn.Plan([attn.PlanRequest(4, 1, [0]), attn.PlanRequest(0, 2, [2])], num_blocks=NB,
                          block_size=BS, num_heads=H, num_kv_heads=HKV, head_size=D, max_blocks_per_req=2)
    return x


def _calls(x, ctx):
    """{entry: (function, argument list, index of want_lse or None)} of valid calls (the public wrappers'
    argument order; "_fp8": with the kv_cache_dtype name, k_scale, v_scale of a uint8 fp8 cache)."""
    c, p, e4m3 = ctx._ptr, x["plan"], "fp8_e4m3"
    return {
        "paged_attention": (EXT.paged_attention, [c, x["q3"], x["kv"], x["qsl"], x["sl"], x["bt"], None, True,
                                                  None, 0.0, None, None, None, None, False, None, None, None,
                                                  False], 14),
        "paged_attention_fp8": (EXT.paged_attention, [c, x["q3"], x["kv8"], x["qsl"], x["sl"], x["bt"], None,
                                                      True, None, 0.0, None, None, None, None, False, e4m3, 1.0,
                                                      1.0, False], 14),
        "forward_paged": (EXT.forward_paged, [c, p._ptr, H, x["q3"], x["kv"], None, None, None, True, None, 0.0,
                                              None, None, None, None, False, p._ws_ptr, p._ws_size, None, None,
                                              None], 15),
        "forward_paged_fp8": (EXT.forward_paged, [c, p._ptr, H, x["q3"], x["kv8"], None, None, None, True, None,
                                                  0.0, None, None, None, None, False, p._ws_ptr, p._ws_size, e4m3,
                                                  1.0, 1.0], 15),
        "merge_attn_states": (EXT.merge_attn_states, [c, x["oa"], x["la"], x["ob"], x["lb"], None, None,
                                                      False], 7),
        "forward": (EXT.forward, [c, 0, x["q4"], x["k4"], x["v4"], False, None, True, None, 0.0, None, None, None,
                                  None, False, None, None, None, False], 14),
        "varlen": (EXT.varlen, [c, x["q3"], x["k3"], x["v3"], x["cuq"], x["cuk"], False, None, True, None, 0.0,
                                None, None, None, None, False, False], 15),
        "kvcache": (EXT.kvcache, [c, x["qk"], x["kvc"][0], x["kvc"][1], None, None, 3, None, None, None, True,
                                  None, 0.0, None, None, None, False, None, None, None], 16),
        "varlen_paged": (EXT.varlen_paged, [c, x["q3"], x["kv"][0], x["kv"][1], x["cuq2"], x["cuk2"], x["bt"],
                                            None, None, True, None, 0.0, None, None, None, False], 15),
        "reshape_and_cache": (EXT.reshape_and_cache, [c, x["k3"][:3], x["v3"][:3], x["kvw"], x["slots"], None,
                                                      None, None], None),
        "reshape_and_cache_fp8": (EXT.reshape_and_cache, [c, x["k3"][:3], x["v3"][:3], x["kvw8"], x["slots"],
                                                          e4m3, 1.0, 1.0], None),
        "vllm_reshape_and_cache": (EXT.vllm_reshape_and_cache, [c, x["k3"][:3], x["v3"][:3], x["kvw"][0],
                                                                x["kvw"][1], x["slots"], None, None, None], None),
        "plan_step": (_plan_step, [attn.ops._plan_config(NB, BS, H, HKV, D, 2), 0, x["qsl"], x["sl"], x["bt"], 1],
                      None),
    }


def _plan_step(*args):
    """attn._ext.plan_step, its plan freed (the call returns the new handle first)."""
    res = EXT.plan_step(*args)
    EXT.attn_plan_free(res[0])
    return res


ENTRIES = ["paged_attention", "forward_paged", "merge_attn_states", "forward", "varlen", "kvcache", "varlen_paged"]
ALL_ENTRIES = ENTRIES + ["paged_attention_fp8", "forward_paged_fp8", "reshape_and_cache", "reshape_and_cache_fp8",
                         "vllm_reshape_and_cache", "plan_step"]


@needs_ext
@pytest.mark.parametrize("entry", ALL_ENTRIES)
def test_each_entry_takes_the_fast_path_on_its_valid_call(entry, rng, ctx1):
    """The base calls the other tests mutate are valid and run in the extension (not NotImplemented)."""
    x = _inputs(rng)  # (keeps the plan alive: the calls hold its address only)
    fn, args, _ = _calls(x, ctx1)[entry]
    assert fn(*args) is not NotImplemented


# ------------------------------------------------------------------------------------------------
# want_lse whose truth value raises
# ------------------------------------------------------------------------------------------------
@needs_ext
@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("flag", [np.zeros(2), _BoolRaises()], ids=["ndarray", "bool_raises"])
def test_want_lse_truth_value_error_propagates(entry, flag, rng, ctx1):
    """The failed PyObject_IsTrue used to be ignored: SystemError ("returned a result with an exception
    set") or a stale exception later. Now the truth value's own error is raised, and a following valid
    call is unaffected."""
    x = _inputs(rng)  # (keeps the plan alive: the calls hold its address only)
    fn, args, i = _calls(x, ctx1)[entry]
    bad = list(args)
    bad[i] = flag
    with pytest.raises(ValueError if isinstance(flag, np.ndarray) else RuntimeError,
                       match="truth value" if isinstance(flag, np.ndarray) else "no truth value"):
        fn(*bad)
    assert fn(*args) is not NotImplemented


@needs_ext
@pytest.mark.parametrize("entry,ref", [("paged_attention", 18), ("forward", 18), ("varlen", 16)])
def test_two_raising_truth_values_raise_once(entry, ref, rng, ctx1):
    """want_lse and reference whose truth values both raise: the second was asked while the first one's
    exception was pending (SystemError "returned a result with an exception set"). Now the first error
    is raised and the second flag is not read."""
    x = _inputs(rng)
    fn, args, i = _calls(x, ctx1)[entry]
    bad = list(args)
    bad[i], bad[ref] = _BoolRaises(), _BoolRaises()
    with pytest.raises(RuntimeError, match="no truth value"):
        fn(*bad)
    assert fn(*args) is not NotImplemented


def test_public_entries_raise_the_truth_value_error(rng, ctx1):
    """Every public entry with a return_lse-like flag raises NumPy's ValueError for an array flag."""
    x = _inputs(rng)
    z = np.zeros(2)
    calls = [
        lambda: attn.paged_attention(x["q3"], x["kv"], x["qsl"], x["sl"], x["bt"], return_lse=z, ctx=ctx1),
        lambda: x["plan"].forward(x["q3"], x["kv"], return_lse=z, ctx=ctx1),
        lambda: attn.merge_attn_states(x["oa"], x["la"], x["ob"], x["lb"], return_lse=z, ctx=ctx1),
        lambda: attn.attention(x["q4"], x["k4"], x["v4"], return_lse=z, ctx=ctx1),
        lambda: attn.attention_varlen(x["q3"], x["k3"], x["v3"], x["cuq"], x["cuk"], return_lse=z, ctx=ctx1),
        lambda: flash.flash_attn_func(x["q4"], x["k4"], x["v4"], return_softmax_lse=z, ctx=ctx1),
        lambda: flash.flash_attn_varlen_func(x["q3"], x["k3"], x["v3"], x["cuq"], x["cuk"], return_attn_probs=z,
                                             ctx=ctx1),
        lambda: flash.flash_attn_with_kvcache(x["qk"], x["kvc"][0], x["kvc"][1], cache_seqlens=3,
                                              return_softmax_lse=z, ctx=ctx1),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="truth value"):
            call()


# ------------------------------------------------------------------------------------------------
# Per-head arrays against q's heads
# ------------------------------------------------------------------------------------------------
@needs_ext
def test_forward_paged_per_head_arrays_follow_q_not_num_heads(rng, ctx1):
    """A 4-head plan and q, num_heads=1 and a 1-entry ALiBi array: the extension checked the array against
    num_heads and libattn read 4 slopes from it (a heap out-of-bounds read). Now an array sized for a
    num_heads other than q's heads is never handed to libattn: a ValueError naming the arguments."""
    x = _inputs(rng)
    p = x["plan"]
    one = np.ones(1, np.float32)
    for al, si, name in ((one, None, "alibi_slopes"), (None, one, "sinks")):
        with pytest.raises(ValueError, match=f"num_heads=1 is not q's {H} heads.*{name}"):
            EXT.forward_paged(ctx1._ptr, p._ptr, 1, x["q3"], x["kv"], None, None, None, True, None, 0.0, al, si,
                              None, None, False, p._ws_ptr, p._ws_size, None, None, None)
    # num_heads that disagrees with q (no arrays): libattn checks q against the plan itself
    assert EXT.forward_paged(ctx1._ptr, p._ptr, 1, x["q3"], x["kv"], None, None, None, True, None, 0.0, None,
                             None, None, None, False, p._ws_ptr, p._ws_size, None, None, None) is not NotImplemented
    with pytest.raises(ValueError, match="alibi_slopes"):
        p.forward(x["q3"], x["kv"], alibi_slopes=one, ctx=ctx1)
    # per-KV-head fp8 scales of the wrong length: refused before libattn reads one per kv head
    with pytest.raises(ValueError, match="k_scale"):
        EXT.forward_paged(ctx1._ptr, p._ptr, H, x["q3"], x["kv8"], None, None, None, True, None, 0.0, None, None,
                          None, None, False, p._ws_ptr, p._ws_size, "fp8_e4m3", one, None)
    # the right length for q's heads runs and equals paged_attention
    got = EXT.forward_paged(ctx1._ptr, p._ptr, H, x["q3"], x["kv"], None, None, None, True, None, 0.0,
                            x["slopes"], None, None, None, False, p._ws_ptr, p._ws_size, None, None, None)
    assert got is not NotImplemented
    ref = attn.paged_attention(x["q3"], x["kv"], x["qsl"], np.array([5, 2], np.int32),
                               np.array([[0, 0], [2, 0]], np.int32), alibi_slopes=x["slopes"], ctx=ctx1)
    np.testing.assert_array_equal(got, ref)


def test_forward_paged_checks_q_heads_before_reading_plan_sized_slopes(rng, ctx1):
    """q with more heads than the plan, ALiBi sized for the plan (what Plan.forward validates): libattn
    checked q's heads only after reading a slope per q head. The slopes past the plan's 4 are NaN here, so
    the old order reported a slope; now the head count is reported and nothing past the plan's heads is read."""
    x = _inputs(rng)
    buf = np.array([0.5, 0.25, 0.125, 0.0625] + [np.nan] * 4, np.float32)
    q8 = rng.standard_normal((3, 2 * H, D)).astype(np.float32)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"q: shape\[1\]=8, expected plan num_heads=4"):
        x["plan"].forward(q8, x["kv"], alibi_slopes=buf[:H], ctx=ctx1)


# ------------------------------------------------------------------------------------------------
# Crafted DLPack tensors
# ------------------------------------------------------------------------------------------------
def test_dlpack_null_data_with_elements_is_a_value_error_naming_the_argument(rng, ctx1):
    x = _inputs(rng)
    with pytest.raises(ValueError, match=r"\bq: (DLPack tensor has data=NULL but 192 elements|data is NULL)"):
        attn.paged_attention(Crafted((3, H, D), data=None), x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx1)
    # index arrays the extension reads itself (the sequence lengths of the paged varlen call)
    with pytest.raises(ValueError, match=r"\bcu_seqlens_k: DLPack tensor has data=NULL but 3 elements"):
        flash.flash_attn_varlen_func(x["q3"], x["kv"][0], x["kv"][1], x["cuq2"],
                                     Crafted((3,), np.int32, data=None), block_table=x["bt"], ctx=ctx1)
    with pytest.raises(ValueError, match=r"\bcache_seqlens: DLPack tensor has data=NULL but 1 elements"):
        flash.flash_attn_with_kvcache(x["qk"], x["kvc"][0], x["kvc"][1], cache_seqlens=Crafted((1,), np.int32,
                                                                                                data=None), ctx=ctx1)


def test_dlpack_null_data_without_elements_is_accepted(rng, ctx1):
    """An empty tensor may have no memory at all: no address is formed from its NULL pointer."""
    x = _inputs(rng)
    out = attn.paged_attention(Crafted((0, H, D), data=None), x["kv"], np.zeros(1, np.int32),
                               np.zeros(0, np.int32), np.zeros((0, 1), np.int32), ctx=ctx1)
    assert np.asarray(out).shape == (0, H, D)
    if EXT is not None:
        c = ctx1._ptr
        r = EXT.paged_attention(c, Crafted((0, H, D), data=None), x["kv"], np.zeros(1, np.int32),
                                np.zeros(0, np.int32), np.zeros((0, 1), np.int32), None, True, None, 0.0, None, None,
                                None, None, False, None, None, None, False)
        assert r is not NotImplemented and r.shape == (0, H, D)


@pytest.mark.parametrize("entry", ["paged_attention", "kvcache"])
def test_dlpack_default_strides_that_overflow_are_refused(entry, rng, ctx1):
    """strides = NULL with sizes whose product overflows int64: the default strides were computed with a
    signed overflow (and the paged kvcache path then sized its scratch from the wrapped numbers). Now the
    view is refused: an OverflowError naming the argument."""
    x = _inputs(rng)
    huge = Crafted((1 << 40, 1 << 40, 1, 4))
    with pytest.raises(OverflowError, match=r"\bq: DLPack tensor shape \[1099511627776, 1099511627776, 1, 4\]"):
        if entry == "paged_attention":
            attn.paged_attention(huge, x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx1)
        else:
            flash.flash_attn_with_kvcache(huge, x["kvc"][0], x["kvc"][1], cache_seqlens=3, ctx=ctx1)
    fn, args, _ = _calls(x, ctx1)[entry]
    args[1] = huge
    with pytest.raises(OverflowError, match=r"\bq: DLPack tensor shape"):
        fn(*args)


def test_dlpack_malformed_tensors_raise_naming_the_argument(rng, ctx1):
    x = _inputs(rng)
    cases = [
        (Crafted((3, -1, D)), ValueError, "q: DLPack tensor shape"),
        (Crafted((3, H, D), shape_null=True), ValueError, "q: DLPack tensor with ndim=3 and no shape"),
        (Crafted((1 << 62, 1 << 62, D), strides=(0, 0, 1)), OverflowError, "q: DLPack tensor shape"),
    ]
    for t, exc, msg in cases:
        with pytest.raises(exc, match=r"\b" + msg):
            attn.paged_attention(t, x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx1)
        with pytest.raises(exc, match=r"\b" + msg):
            EXT.paged_attention(ctx1._ptr, t, x["kv"], x["qsl"], x["sl"], x["bt"], None, True, None, 0.0,
                                None, None, None, None, False, None, None, None, False)


# ------------------------------------------------------------------------------------------------
# Random arguments
# ------------------------------------------------------------------------------------------------
def _mutants(a, rng):
    """Bad or unusual variants of the array argument ``a``."""
    out = [
        a.astype(np.float64), a.astype(np.int8), a.astype(np.uint16), a.astype(np.bool_), a.astype(np.complex64),
        a.astype(np.float32), a.astype(np.int32), a.astype(np.int64), a[::-1], np.flip(a, -1), a.reshape(-1),
        a.reshape(-1)[:1], a[..., :0], a[:0], np.broadcast_to(a[:1], a.shape),
        np.lib.stride_tricks.as_strided(a, a.shape, (0,) * a.ndim), np.expand_dims(a, 0), a[(None,) * 7],
        np.asarray(a, order="F"), a.copy(), a.tolist(), a.view(np.uint8) if a.dtype.itemsize > 1 else a,
        DLPackOnly(a), DLPackOnly(a[::-1]), _DLPackRaises(), _DLPackNotCapsule(), _BoolRaises(), None, 3, "x",
        Crafted(a.shape, a.dtype, data=None), Crafted(a.shape[:-1] + (0,), a.dtype, data=None),
        Crafted((1 << 40, 1 << 40) + a.shape[2:], a.dtype), Crafted(a.shape, a.dtype, ndim=-1),
        Crafted(a.shape, a.dtype, ndim=7), Crafted(a.shape, a.dtype, device_type=2),
        Crafted(a.shape, a.dtype, lanes=2), Crafted(a.shape, a.dtype, code_bits=(2, 64)),
        Crafted(a.shape, a.dtype, shape_null=True), Crafted(a.shape, a.dtype, strides=(1 << 62,) * a.ndim),
        Crafted(a.shape, a.dtype, strides=(0,) * a.ndim), Crafted(tuple(-s for s in a.shape), a.dtype),
    ]
    if a.dtype.kind == "f" and a.ndim:  # 2^40 rows or columns through a stride-0 view (never read: refused)
        out.append(np.lib.stride_tricks.as_strided(a, (1 << 40,) + a.shape[1:], (0,) + a.strides[1:]))
        out.append(np.lib.stride_tricks.as_strided(a, a.shape[:-1] + (1 << 40,), a.strides[:-1] + (0,)))
    if a.flags.writeable:
        ro = a.copy()
        ro.flags.writeable = False
        out.append(ro)
    return out


_SCALARS = [None, True, False, 0, 1, 2, 3, -1, -2, 1 << 40, 10 ** 30, -(10 ** 30), 0.0, -0.0, 1.5, -1.0,
            float("nan"), float("inf"), float("-inf"), np.float32(0.5), np.int64(1), np.zeros(2), _BoolRaises(),
            "yes", b"x", (1,), (-1, -1), (-2, 0), (1 << 40, 0), (0, 1 << 40), [3, 0], (1, 2, 3), ("a", 0),
            (0.5, 1), object()]


def _random_args(args, rng, arrays):
    bad = list(args)
    for _ in range(int(rng.integers(1, 4))):
        i = int(rng.integers(1, len(bad)))  # never the ctx handle (argument 0)
        orig = args[i]
        if isinstance(orig, np.ndarray):
            pool = _mutants(orig, rng)
        elif orig is None and rng.random() < 0.5:  # an optional array: out, lse, key, alibi ...
            pool = arrays
        else:
            pool = _SCALARS
        bad[i] = pool[int(rng.integers(len(pool)))]
    return bad


# plan, workspace address and size: trusted handles, never mutated
_HANDLES = {"forward_paged": (1, 16, 17), "forward_paged_fp8": (1, 16, 17)}


def _check_call(fn, args):
    t0 = time.perf_counter()
    try:
        fn(*args)
    except SystemError as e:  # a C function that returned with (or without) an exception set wrongly
        raise AssertionError(f"SystemError from {fn.__name__}: {e!r}") from e
    except Exception:  # noqa: BLE001 - any ordinary exception is an acceptable answer to a bad call
        pass
    assert time.perf_counter() - t0 < 5.0, f"{fn.__name__} took {time.perf_counter() - t0:.1f} s"


@needs_ext
@pytest.mark.parametrize("seed", [1, 2])
def test_random_arguments_into_the_extension(seed, ctx1):
    """~1.5 s per seed: random mutations of the valid calls, straight into attn._ext. Every call returns
    (NotImplemented counts) or raises an ordinary exception."""
    rng = np.random.default_rng(seed)
    x = _inputs(rng)
    calls = _calls(x, ctx1)
    arrays = [x["q3"], x["oa"].copy(), x["la"].copy(), x["slopes"], x["kv"], x["q3"][:, :1], np.ones(1, np.float32),
              x["kv"][0], Crafted((3, H, D), data=None)]
    deadline = time.perf_counter() + 1.5
    n = 0
    while n < 3000 and time.perf_counter() < deadline:
        entry = ALL_ENTRIES[n % len(ALL_ENTRIES)]
        fn, args, _ = calls[entry]
        bad = _random_args(args, rng, arrays)
        for i in _HANDLES.get(entry, ()):
            bad[i] = args[i]
        _check_call(fn, bad)
        n += 1
    assert n >= 100


@pytest.mark.parametrize("seed", [3])
def test_random_arguments_through_the_public_wrappers(seed, ctx1):
    """The same mutations through the public functions: whatever the extension declines, the ctypes path
    answers with an ordinary exception (or a result)."""
    rng = np.random.default_rng(seed)
    x = _inputs(rng)
    p = x["plan"]
    pub = {
        "paged_attention": lambda q, kv, qsl, sl, bt, al, out: attn.paged_attention(
            q, kv, qsl, sl, bt, alibi_slopes=al, out=out, ctx=ctx1),
        "forward_paged": lambda q, kv, al, out: p.forward(q, kv, alibi_slopes=al, out=out, ctx=ctx1),
        "merge": lambda oa, la, ob, lb, out: attn.merge_attn_states(oa, la, ob, lb, out=out, ctx=ctx1),
        "attention": lambda q, k, v, al, out: attn.attention(q, k, v, alibi_slopes=al, out=out, ctx=ctx1),
        "varlen": lambda q, k, v, cq, ck: attn.attention_varlen(q, k, v, cq, ck, ctx=ctx1),
        "kvcache": lambda q, kc, vc, cs: flash.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=cs, ctx=ctx1),
        "varlen_paged": lambda q, kc, vc, cq, ck, bt: flash.flash_attn_varlen_func(
            q, kc, vc, cq, ck, block_table=bt, ctx=ctx1),
    }
    base = {
        "paged_attention": [x["q3"], x["kv"], x["qsl"], x["sl"], x["bt"], None, None],
        "forward_paged": [x["q3"], x["kv"], None, None],
        "merge": [x["oa"], x["la"], x["ob"], x["lb"], None],
        "attention": [x["q4"], x["k4"], x["v4"], None, None],
        "varlen": [x["q3"], x["k3"], x["v3"], x["cuq"], x["cuk"]],
        "kvcache": [x["qk"], x["kvc"][0], x["kvc"][1], 3],
        "varlen_paged": [x["q3"], x["kv"][0], x["kv"][1], x["cuq2"], x["cuk2"], x["bt"]],
    }
    arrays = [x["q3"], x["slopes"], np.ones(1, np.float32), x["oa"].copy(), Crafted((3, H, D), data=None)]
    names = list(pub)
    deadline = time.perf_counter() + 2.0
    n = 0
    while n < 2000 and time.perf_counter() < deadline:
        name = names[n % len(names)]
        args = [None] + base[name]  # (slot 0 stands for the ctx the lambdas bind)
        bad = _random_args(args, rng, arrays)[1:]
        fn = pub[name]
        fn.__name__ = name
        _check_call(fn, bad)
        n += 1
    assert n >= 50
