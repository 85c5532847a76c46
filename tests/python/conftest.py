"""pytest setup for the attn Python package.

Which `attn` is tested: with ATTN_LIBRARY set (``make test-python`` sets it and PYTHONPATH=python) the source
tree's package and that library; otherwise an installed package (``pip install .``); otherwise the source tree
with the first libattn.so found in build/. Tests needing torch or the model packages skip cleanly without them.
"""

import importlib.util
import os
import sys

# One OpenBLAS thread (unless set): the suite's NumPy products are small, and on a loaded machine OpenBLAS's
# spinning pool slowed the real-model tests several times over. Results do not depend on it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _select_attn():
    if os.environ.get("ATTN_LIBRARY"):
        sys.path.insert(0, os.path.join(ROOT, "python"))
        return
    if importlib.util.find_spec("attn") is not None:
        return
    for d in ("build", "build-release"):
        lib = os.path.join(ROOT, d, "libattn.so")
        if os.path.exists(lib):
            os.environ["ATTN_LIBRARY"] = lib
            break
    sys.path.insert(0, os.path.join(ROOT, "python"))


_select_attn()
# the real-model demo package (python/attn_demo) is not part of an installed attn: the source tree's copy, after
# whatever attn was selected above
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.append(os.path.join(ROOT, "python"))

import attn  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
needs_ml_dtypes = pytest.mark.skipif(not HAVE_ML_DTYPES, reason="ml_dtypes is not installed")


def pytest_report_header(config):
    info = attn.info()
    return (f"attn {info['version']} from {attn.__file__}; libattn {info['library']}; isa {info['isa']}, "
            f"{info['num_threads']} threads; torch: {HAVE_TORCH}; ml_dtypes: {HAVE_ML_DTYPES}")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def ctx1():
    """A one-thread context (results are bitwise independent of the thread count; one thread keeps the
    suite fast and steady on a loaded 2-core CI machine)."""
    with attn.Context(num_threads=1) as c:
        yield c


# ------------------------------------------------------------------------------------------------
# An independent NumPy float64 reference of docs/SEMANTICS.md §1-§3, one sequence at a time.
# ------------------------------------------------------------------------------------------------
def np_attend(q, k, v, *, causal=False, window=(-1, -1), softcap=0.0, alibi=None, sinks=None, scale=None,
              keep=None, top_left=False):
    """q [Sq, H, D], k [Sk, Hkv, D], v [Sk, Hkv, Dv] (any float dtype) -> (out [Sq, H, Dv] float64,
    lse [H, Sq] float64). keep: optional bool [Sq, Sk] or [H, Sq, Sk] (True = attend)."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    sq, h, d = q.shape
    sk, hkv, _ = k.shape
    g = h // hkv
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    s = np.einsum("qhd,khd->hqk", q, kk) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    pos = np.arange(sq) + (0 if top_left else sk - sq)
    j = np.arange(sk)
    if alibi is not None:
        s = s - np.asarray(alibi, np.float64)[:, None, None] * np.abs(pos[:, None] - j[None, :])[None]
    vis = np.ones((sq, sk), dtype=bool)
    if causal:
        vis &= j[None, :] <= pos[:, None]
    if window[0] >= 0:
        vis &= j[None, :] >= pos[:, None] - window[0]
    if window[1] >= 0:
        vis &= j[None, :] <= pos[:, None] + window[1]
    vis = np.broadcast_to(vis, (h, sq, sk))
    if keep is not None:
        vis = vis & np.broadcast_to(np.asarray(keep, bool), (h, sq, sk))
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True, initial=-np.inf)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float64)[:, None, None])
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(axis=-1, keepdims=True)
    if sinks is not None:
        den = den + np.exp(np.asarray(sinks, np.float64)[:, None, None] - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.einsum("hqk,khd->qhd", np.where(den > 0, p / den, 0.0), vv)
        lse = np.where(den[..., 0] > 0, np.log(den[..., 0]) + m[..., 0], -np.inf)
    return out, lse


TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def tol(dtype):
    return TOL[np.dtype(dtype).name]


def to_dtype(x, name):
    if name == "bfloat16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16)
    return x.astype(name)


def set_ext(monkeypatch, value):
    """Every module that bound attn._ext at import (ops, flash, vllm_ops) sees ``value`` (a spy on it)."""
    from attn import flash, ops
    from attn.vllm import ops as vllm_ops

    for mod in (ops, flash, vllm_ops):
        monkeypatch.setattr(mod, "_ext", value)


@pytest.fixture(params=["ext"])
def binding(request):
    """The binding a test runs through: the compiled extension, the only one."""
    return request.param


class DLPackOnly:
    """A DLPack producer that is not an ndarray: exercises the capsule path of attn._ext without torch."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()
