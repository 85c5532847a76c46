"""The compiled binding attn._ext (python/attn/_ext.c), the package's only binding.

Every hot entry runs twice in one process, once with a spy on the extension (counting its calls and the
NotImplemented answers of the entries that still have a general path) and once without: outputs must be
bitwise identical, bad inputs must raise the family's exception with the message naming the argument and
leave caches untouched, and valid inputs must take the hot entries. When the plain CMake build made the
extension (a file next to ATTN_LIBRARY), it must be the module in use.
"""

import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import attn
from attn import _binding
from attn.vllm import ops as vllm_ops
from conftest import HAVE_ML_DTYPES, HAVE_TORCH, ROOT, DLPackOnly, set_ext

EXT = _binding.ext
needs_ext = pytest.mark.skipif(EXT is None, reason=f"attn._ext not loaded ({_binding.reason})")
H, HKV, D, BS = 9, 3, 64, 16


def _built_extension():
    lib = os.environ.get("ATTN_LIBRARY")
    if os.environ.get("ATTN_EXTENSION"):
        return os.environ["ATTN_EXTENSION"]
    if lib:
        found = glob.glob(os.path.join(os.path.dirname(os.path.abspath(lib)), "python", "attn", "_ext*.so"))
        return found[0] if found else None
    return None


def test_extension_is_used_when_built():
    """make test (plain CMake build with Python headers) must test the extension, not the fallback."""
    built = _built_extension()
    if built is None and _binding.path is None:
        pytest.skip("no attn._ext was built next to ATTN_LIBRARY (no Python development headers?)")
    assert _binding.name == "ext", _binding.reason
    assert attn.info()["binding"] == "ext" and attn.info()["extension"] == _binding.path
    assert sys.modules["attn._ext"] is EXT


def test_child_process_uses_the_extension():
    """ATTN_PY_BACKEND is gone: there is one binding, whatever the environment says."""
    env = dict(os.environ, ATTN_PY_BACKEND="ctypes", PYTHONPATH=os.path.join(ROOT, "python"))
    if not env.get("ATTN_LIBRARY") and attn.library_path:
        env["ATTN_LIBRARY"] = attn.library_path
    if _binding.path:  # (an installed package tested against the source tree: name the module)
        env["ATTN_EXTENSION"] = _binding.path
    r = subprocess.run([sys.executable, "-c", "import attn; print(attn.info()['binding'])"], env=env,
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ext"


def test_missing_extension_is_an_import_error_that_says_why(tmp_path):
    """A libattn with no attn._ext next to it: import attn fails, naming the extension as the only binding
    (a build without Python headers has no Python package)."""
    if not attn.library_path or glob.glob(os.path.join(ROOT, "python", "attn", "_ext*.so")):
        pytest.skip("needs a libattn file and a source tree without a built module")
    import shutil

    lib = tmp_path / "libattn.so"
    shutil.copy(os.path.realpath(attn.library_path), lib)
    env = dict(os.environ, ATTN_LIBRARY=str(lib), PYTHONPATH=os.path.join(ROOT, "python"))
    env.pop("ATTN_EXTENSION", None)
    r = subprocess.run([sys.executable, "-c", "import attn"], env=env, capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "only binding" in r.stderr


# ------------------------------------------------------------------------------------------------
# Switching the binding inside one process, and a spy on the fast paths
# ------------------------------------------------------------------------------------------------
class _Spy:
    """Wraps attn._ext: counts calls per entry and how many answered NotImplemented (fell back)."""

    def __init__(self, ext):
        self._ext = ext
        self.calls, self.fallbacks = {}, {}

    def __getattr__(self, name):
        fn = getattr(self._ext, name)

        def wrapped(*args):
            self.calls[name] = self.calls.get(name, 0) + 1
            r = fn(*args)
            if r is NotImplemented:
                self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
            return r
        return wrapped


def _both(monkeypatch, make_call):
    """Runs make_call() (which builds fresh inputs and returns (result, arrays to compare)) through the
    extension with a spy on it and again without. Returns (spied_arrays, plain_arrays, spy)."""
    spy = _Spy(EXT)
    set_ext(monkeypatch, spy)
    got_ext = make_call()
    set_ext(monkeypatch, EXT)
    got_ct = make_call()
    return got_ext, got_ct, spy


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(np.uint8).reshape(-1) if a.dtype.itemsize else a


def _assert_same(xs, ys):
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys):
        if x is None or y is None:
            assert x is None and y is None
            continue
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(_bits(x), _bits(y))


def _dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


DTYPES = ["float32", "float16", pytest.param("bfloat16", marks=pytest.mark.skipif(
    not HAVE_ML_DTYPES, reason="ml_dtypes is not installed"))]


def _decode_inputs(dt, seed=7, keys=16, with_new=True):
    rng = np.random.default_rng(seed)
    nb = 4
    kv = rng.standard_normal((2, nb, BS, HKV, D)).astype(np.float32).astype(dt)
    q = rng.standard_normal((1, H, D)).astype(np.float32).astype(dt)
    key = rng.standard_normal((1, HKV, D)).astype(np.float32).astype(dt)
    bt = np.array([[2, 0, 3, 1]], np.int32)
    qsl, sl = np.array([0, 1], np.int32), np.array([keys], np.int32)
    pos = keys - 1
    slot = np.array([bt[0, pos // BS] * BS + pos % BS], np.int64)
    return dict(kv=kv, q=q, key=key, bt=bt, qsl=qsl, sl=sl, slot=slot)


# ------------------------------------------------------------------------------------------------
# Bitwise parity on valid inputs, fast path taken
# ------------------------------------------------------------------------------------------------
OPTIONS = [dict(), dict(softmax_scale=0.3, window_size=(5, 0), softcap=20.0),
           dict(alibi_slopes=np.linspace(0.1, 0.9, H).astype(np.float32), causal=False),
           dict(sinks=np.linspace(-1, 1, H).astype(np.float32), window_size=[2**40, 0])]


@needs_ext
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_paged_attention_and_plan_parity(monkeypatch, ctx1, dt, opt):
    dt = _dtype(dt)
    kw = OPTIONS[opt]

    def call():
        x = _decode_inputs(dt, keys=37)
        attn.reshape_and_cache(x["key"], x["key"], x["kv"], x["slot"], ctx=ctx1)
        o1, l1 = attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"], return_lse=True, ctx=ctx1,
                                      **kw)
        o2 = np.zeros_like(x["q"])
        attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"], out=o2, ctx=ctx1, **kw)
        plan = attn.Plan([attn.PlanRequest(36, 1, x["bt"][0])], num_blocks=4, block_size=BS, num_heads=H,
                         num_kv_heads=HKV, head_size=D, max_blocks_per_req=4)
        o3, l3 = plan.forward(x["q"], x["kv"], return_lse=True, ctx=ctx1, **{k: v for k, v in kw.items()
                                                                            if k != "causal"})
        return [x["kv"], o1, l1, o2, o3, l3]

    e, c, spy = _both(monkeypatch, call)
    _assert_same(e, c)
    assert spy.calls.get("paged_attention") == 2 and spy.calls.get("forward_paged") == 1
    assert spy.calls.get("reshape_and_cache") == 1 and not spy.fallbacks, spy.fallbacks


@needs_ext
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("new", [True, False])
def test_kvcache_parity(monkeypatch, ctx1, dt, paged, new):
    dt = _dtype(dt)

    def call():
        rng = np.random.default_rng(3)
        b, sq = 3, 2
        q = rng.standard_normal((b, sq, H, D)).astype(np.float32).astype(dt)
        kn = rng.standard_normal((b, 2, HKV, D)).astype(np.float32).astype(dt) if new else None
        vn = rng.standard_normal((b, 2, HKV, D)).astype(np.float32).astype(dt) if new else None
        if paged:
            kv = rng.standard_normal((2, 8, BS, HKV, D)).astype(np.float32).astype(dt)
            bt = np.array([[7, 1, 0], [2, 3, 4], [5, 6, 0]], np.int32)
            cs = np.array([17, 3, 30], np.int32)
            extra = dict(block_table=bt)
        else:
            kv = rng.standard_normal((2, 4, 40, HKV, D)).astype(np.float32).astype(dt)
            cs = 11
            extra = dict(cache_batch_idx=np.array([3, 0, 2], np.int32))
        o, l = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, vn, cache_seqlens=cs, causal=True,
                                            return_softmax_lse=True, ctx=ctx1, **extra)
        o2 = np.zeros_like(q)
        r = attn.flash_attn_with_kvcache(q, kv[0], kv[1], cache_seqlens=cs, out=o2, window_size=(4, 0),
                                         ctx=ctx1, **extra)
        assert r is o2
        return [kv, o, l, o2]

    e, c, spy = _both(monkeypatch, call)
    _assert_same(e, c)
    assert spy.calls.get("kvcache") == 2 and not spy.fallbacks, spy.fallbacks


@needs_ext
@pytest.mark.parametrize("dt", DTYPES)
def test_dense_varlen_merge_vllm_parity(monkeypatch, ctx1, dt):
    dt = _dtype(dt)

    def call():
        rng = np.random.default_rng(5)
        q = rng.standard_normal((2, 5, H, D)).astype(np.float32).astype(dt)
        k = rng.standard_normal((2, 7, HKV, D)).astype(np.float32).astype(dt)
        v = rng.standard_normal((2, 7, HKV, 32)).astype(np.float32).astype(dt)
        res = list(attn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True, ctx=ctx1))
        res.append(attn.flash_attn_func(q, k, v, window_size=(2, 1), ctx=ctx1))
        res.append(attn.attention(q, k, v, softcap=5.0, ctx=ctx1))
        qv = rng.standard_normal((9, H, D)).astype(np.float32).astype(dt)
        kvv = rng.standard_normal((11, HKV, D)).astype(np.float32).astype(dt)
        cq, ck = np.array([0, 3, 7], np.int32), np.array([0, 5, 11], np.int32)
        o, l = attn.flash_attn_varlen_func(qv, kvv, kvv, cq, ck, causal=True, return_softmax_lse=True, ctx=ctx1)
        res += [o, l, attn.attention_varlen(qv, kvv, kvv, cq, ck, ctx=ctx1)[:7]]  # (rows 7, 8: np.empty)
        pkv = rng.standard_normal((2, 5, 4, HKV, D)).astype(np.float32).astype(dt)  # paged: 5 blocks of 4
        bt = np.array([[4, 1, 0], [2, 3, 0]], np.int32)
        res += list(attn.flash_attn_varlen_func(qv, pkv[0], pkv[1], cq, np.array([0, 9, 14], np.int32),
                                                causal=True, block_table=bt, return_softmax_lse=True, ctx=ctx1))
        po = np.full((9, H, D), 3.0, np.float32).astype(dt)
        attn.flash_attn_varlen_func(qv, pkv[0], pkv[1], cq, ck, block_table=bt, out=po, ctx=ctx1,
                                    seqused_k=np.array([2, 12], np.int32), window_size=(3, 0))
        res.append(po)
        la = rng.standard_normal((H, 9)).astype(np.float32)
        lb = rng.standard_normal((H, 9)).astype(np.float32)
        ob = rng.standard_normal((9, H, D)).astype(np.float32).astype(dt)
        m, ml = attn.merge_attn_states(qv, la, ob, lb, return_lse=True, ctx=ctx1)
        out, out_lse = np.zeros_like(qv), np.zeros_like(la)
        vllm_ops.merge_attn_states(out, qv, la, ob, lb, out_lse, ctx=ctx1)
        kc = np.zeros((2, 4, BS, HKV, D), dt)
        vllm_ops.reshape_and_cache(kvv, 2 * kvv, kc[0], kc[1], np.arange(11, dtype=np.int64) * 3, ctx=ctx1)
        vllm_ops.reshape_and_cache_flash(kvv, kvv, kc[0], kc[1], np.arange(11, dtype=np.int64) + 20, ctx=ctx1)
        return res + [m, ml, out, out_lse, kc]

    e, c, spy = _both(monkeypatch, call)
    _assert_same(e, c)
    assert spy.calls == {"forward": 3, "varlen": 2, "varlen_paged": 2, "merge_attn_states": 2,
                         "vllm_reshape_and_cache": 2}
    assert not spy.fallbacks, spy.fallbacks


@needs_ext
def test_backend_forward_parity(monkeypatch, ctx1):
    from attn_demo import backend as B

    def call():
        rng = np.random.default_rng(11)
        spec = B.AttnSpec(num_blocks=8, block_size=BS, num_heads=H, num_kv_heads=HKV, head_size=D)
        kv = np.zeros((2, 8, BS, HKV, D), np.float32)
        impl = B.AttnBackendImpl(H, D, 0.125, HKV, ctx=ctx1)
        meta = B.AttnMetadataBuilder(spec).build(0, B.CommonAttentionMetadata(
            query_start_loc=np.array([0, 1, 4], np.int32), seq_lens=np.array([20, 3], np.int32),
            block_table_tensor=np.array([[0, 1], [2, 3]], np.int32),
            slot_mapping=np.array([19, 32, 33, 34], np.int64)))
        q = rng.standard_normal((4, H, D)).astype(np.float32)
        k = rng.standard_normal((4, HKV, D)).astype(np.float32)
        out = impl.forward(None, q, k, k, kv, meta)
        given = np.zeros((4, H * D), np.float32)
        r = impl.forward(None, q, 2 * k, k, kv, meta, given)  # the compiled path of forward()
        assert r is given
        return [kv, out, given]

    e, c, spy = _both(monkeypatch, call)
    _assert_same(e, c)
    assert spy.calls.get("reshape_and_cache") == 2 and spy.calls.get("forward_paged") == 2
    assert not spy.fallbacks


@needs_ext
def test_dlpack_capsules_take_the_fast_path(monkeypatch, ctx1):
    x = _decode_inputs(np.float32, keys=20)
    want = attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx1)
    spy = _Spy(EXT)
    set_ext(monkeypatch, spy)
    out = np.zeros_like(x["q"])
    r = attn.paged_attention(DLPackOnly(x["q"]), DLPackOnly(x["kv"]), DLPackOnly(x["qsl"]),
                             DLPackOnly(x["sl"]), DLPackOnly(x["bt"]), out=DLPackOnly(out), ctx=ctx1)
    assert isinstance(r, DLPackOnly) and not spy.fallbacks
    np.testing.assert_array_equal(out, want)
    # a non-contiguous view through DLPack (strides in elements)
    big = np.zeros((1, 2 * H, D), np.float32)
    big[:, ::2] = x["q"]
    r2 = attn.paged_attention(DLPackOnly(big[:, ::2]), x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx1)
    np.testing.assert_array_equal(r2, want)
    assert not spy.fallbacks


@needs_ext
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_parity(monkeypatch, ctx1):
    import torch

    def call():
        x = _decode_inputs(np.float32, keys=30)
        t = {k: torch.from_numpy(v) for k, v in x.items()}
        attn.reshape_and_cache(t["key"], t["key"], t["kv"], t["slot"], ctx=ctx1)
        o, lse = attn.paged_attention(t["q"], t["kv"], t["qsl"], t["sl"], t["bt"], return_lse=True, ctx=ctx1)
        assert isinstance(o, torch.Tensor) and isinstance(lse, torch.Tensor)
        q4, k4 = t["q"].view(1, 1, H, D), t["key"].view(1, 1, HKV, D)
        o2, l2 = attn.flash_attn_with_kvcache(q4, t["kv"][0], t["kv"][1], k4, k4, cache_seqlens=30,
                                              block_table=t["bt"], return_softmax_lse=True, ctx=ctx1)
        assert isinstance(o2, torch.Tensor) and isinstance(l2, torch.Tensor)
        o3 = attn.flash_attn_func(q4, k4, k4, ctx=ctx1)
        return [x["kv"], o.numpy(), lse.numpy(), o2.numpy(), l2.numpy(), o3.numpy()]

    e, c, spy = _both(monkeypatch, call)
    _assert_same(e, c)
    assert spy.calls and not spy.fallbacks, spy.fallbacks


@needs_ext
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_requires_grad_defers_to_the_warning_path(monkeypatch, ctx1):
    import torch

    monkeypatch.setattr(attn._arrays, "_grad_warned", False)
    spy = _Spy(EXT)
    set_ext(monkeypatch, spy)
    q = torch.randn(1, 3, 2, 16, requires_grad=True)
    with pytest.warns(UserWarning, match="no gradients are tracked"):
        out = attn.flash_attn_func(q, q, q, ctx=ctx1)
    assert not spy.fallbacks and spy.calls.get("forward") and isinstance(out, torch.Tensor)


# ------------------------------------------------------------------------------------------------
# Bad inputs: same exception, same message, nothing written
# ------------------------------------------------------------------------------------------------
def _bad_cases():
    def paged(**over):
        def f(ctx):
            x = _decode_inputs(np.float32)
            x.update(over)
            attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"], ctx=ctx,
                                 **x.get("kw", {}))
            return x["kv"]
        return f

    def rac(key=None, slot=None, kv=None):
        def f(ctx):
            x = _decode_inputs(np.float32)
            c = x["kv"] if kv is None else kv
            attn.reshape_and_cache(x["key"] if key is None else key, x["key"], c,
                                   x["slot"] if slot is None else slot, ctx=ctx)
            return c
        return f

    def kvc(**kw):
        def f(ctx):
            rng = np.random.default_rng(1)
            q = rng.standard_normal((2, 1, H, D)).astype(np.float32)
            kv = np.zeros((2, 4, BS, HKV, D), np.float32)
            kn = np.ones((2, 1, HKV, D), np.float32)
            args = dict(cache_seqlens=np.array([3, 5], np.int32), block_table=np.array([[0], [1]], np.int32))
            args.update(kw)
            attn.flash_attn_with_kvcache(q, kv[0], kv[1], args.pop("k", kn), args.pop("v", kn), ctx=ctx, **args)
            return kv
        return f

    bt_bad = np.array([[9, 0, 0, 0]], np.int32)
    ro = np.zeros((2, 4, BS, HKV, D), np.float32)
    ro.flags.writeable = False
    return {
        "paged_block_id_out_of_range_C": paged(bt=bt_bad),
        "paged_q_heads_C": paged(q=np.zeros((1, 4, D), np.float32)),
        "paged_q_float64": paged(q=np.zeros((1, H, D), np.float64)),
        "paged_seq_lens_int64_too_wide": paged(sl=np.array([2**33], np.int64)),
        "paged_window_below_minus_one": paged(kw=dict(window_size=(-2, 0))),
        "paged_causal_bad": paged(kw=dict(causal=7)),
        "paged_alibi_wrong_length": paged(kw=dict(alibi_slopes=np.ones(4, np.float32))),
        "rac_slot_out_of_range_C": rac(slot=np.array([10_000], np.int64)),
        "rac_uint64_slot": rac(slot=np.array([2**64 - 1], np.uint64)),
        "rac_key_shape_C": rac(key=np.zeros((1, HKV, 8), np.float32)),
        "rac_read_only_cache": rac(kv=ro),
        "kvcache_negative_seqlen": kvc(cache_seqlens=np.array([-1, 0], np.int32)),
        "kvcache_over_capacity": kvc(cache_seqlens=np.array([BS, 0], np.int32)),
        "kvcache_bad_block": kvc(block_table=np.array([[0], [7]], np.int32)),
        "kvcache_k_wrong_heads": kvc(k=np.ones((2, 1, 1, D), np.float32)),
        "kvcache_bad_window": kvc(window_size=(-5, 0)),
        "kvcache_causal_bad": kvc(causal=3),
        "flash_func_gqa_C": lambda ctx: attn.flash_attn_func(np.zeros((1, 2, 5, D), np.float32),
                                                             np.zeros((1, 3, 2, D), np.float32),
                                                             np.zeros((1, 3, 2, D), np.float32), ctx=ctx),
        "varlen_cu_decreasing_C": lambda ctx: attn.flash_attn_varlen_func(
            np.zeros((4, 2, D), np.float32), np.zeros((4, 2, D), np.float32), np.zeros((4, 2, D), np.float32),
            np.array([0, 3, 2], np.int32), np.array([0, 2, 4], np.int32), ctx=ctx),
        "varlen_paged_bad_block_C": lambda ctx: attn.flash_attn_varlen_func(
            np.zeros((4, 2, D), np.float32), *np.zeros((2, 3, 4, 1, D), np.float32),
            np.array([0, 2, 4], np.int32), np.array([0, 3, 6], np.int32),
            block_table=np.array([[0, 1], [5, 1]], np.int32), ctx=ctx),
        "varlen_paged_table_too_narrow_C": lambda ctx: attn.flash_attn_varlen_func(
            np.zeros((4, 2, D), np.float32), *np.zeros((2, 3, 4, 1, D), np.float32),
            np.array([0, 2, 4], np.int32), np.array([0, 3, 9], np.int32),
            block_table=np.array([[0], [2]], np.int32), ctx=ctx),
        "varlen_paged_q_len_gt_C": lambda ctx: attn.flash_attn_varlen_func(
            np.zeros((4, 2, D), np.float32), *np.zeros((2, 3, 4, 1, D), np.float32),
            np.array([0, 2, 5], np.int32), np.array([0, 3, 6], np.int32),
            block_table=np.array([[0, 1], [2, 1]], np.int32), ctx=ctx),
        "merge_lse_shape_C": lambda ctx: attn.merge_attn_states(
            np.zeros((3, 2, D), np.float32), np.zeros((2, 4), np.float32), np.zeros((3, 2, D), np.float32),
            np.zeros((2, 3), np.float32), ctx=ctx),
    }


@needs_ext
@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_bad_inputs_raise_the_same(monkeypatch, ctx1, case):
    fn = _bad_cases()[case]
    results = []
    spy = _Spy(EXT)
    for ext in (spy, EXT):
        set_ext(monkeypatch, ext)
        with pytest.raises(Exception) as info:
            fn(ctx1)
        results.append((type(info.value), str(info.value), getattr(info.value, "message", None)))
    set_ext(monkeypatch, EXT)
    assert results[0] == results[1]
    assert spy.calls, "the extension was not consulted"
    if case.endswith("_C"):  # libattn found it: raised by the extension itself, an AttnError
        assert issubclass(results[0][0], attn.AttnError) and not spy.fallbacks
    else:  # a Python-level check, made by the extension's helpers (or by the general path it deferred to)
        assert issubclass(results[0][0], Exception)


@needs_ext
def test_failed_calls_write_nothing(monkeypatch, ctx1):
    x = _decode_inputs(np.float32)
    before = x["kv"].copy()
    with pytest.raises(attn.AttnInvalidArgumentError, match="slot_mapping"):
        attn.reshape_and_cache(x["key"], x["key"], x["kv"], np.array([9999], np.int64), ctx=ctx1)
    out = np.full_like(x["q"], 7.0)
    with pytest.raises(attn.AttnInvalidArgumentError, match="block_table"):
        attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], np.array([[99, 0, 0, 0]], np.int32), out=out,
                             ctx=ctx1)
    np.testing.assert_array_equal(x["kv"], before)
    assert np.all(out == 7.0)
    err = attn.last_error()
    assert "block_table" in err


@needs_ext
def test_closed_context_and_freed_plan_fall_back_to_python_errors():
    c = attn.Context(num_threads=1)
    c.close()
    x = _decode_inputs(np.float32)
    with pytest.raises(ValueError, match="Context is closed"):
        attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"], ctx=c)
    plan = attn.Plan([attn.PlanRequest(15, 1, [0])], num_blocks=4, block_size=BS, num_heads=H,
                     num_kv_heads=HKV, head_size=D, max_blocks_per_req=4)
    plan.free()
    with pytest.raises(ValueError, match="Plan is freed"):
        plan.forward(x["q"], x["kv"])


@needs_ext
def test_threads_share_nothing_per_call():
    """The extension keeps no per-call state outside the call (and releases the GIL in it): threads with
    their own default contexts get the single-thread answer."""
    import threading

    x = _decode_inputs(np.float32, keys=50)
    want = attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"])
    bad = []

    def work():
        attn.set_num_threads(1)
        for _ in range(30):
            got = attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], x["bt"])
            if not np.array_equal(got, want):
                bad.append(got)
            try:
                attn.paged_attention(x["q"], x["kv"], x["qsl"], x["sl"], np.array([[77, 0, 0, 0]], np.int32))
            except attn.AttnInvalidArgumentError as e:
                if "block_table" not in str(e):
                    bad.append(str(e))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
