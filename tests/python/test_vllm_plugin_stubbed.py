"""attn.vllm_backend (the vLLM plugin) without vLLM or torch: each test runs a child Python that installs the
fake modules of tests/python/vllm_stubs.py (NumPy-backed tensors), imports the plugin and drives its metadata
builder and impl the way vLLM's model runner does. The child keeps the fakes out of this process.

  - AttnBackendImpl.forward formats its "used" marker line once per process: after the first layer, no
    layer reads the cache's strides again (the fake tensor counts its stride() calls), and the marker
    file has one line; the layers' outputs equal attn.paged_attention on the same cache.
Both bindings: the compiled extension and ctypes (ATTN_PY_BACKEND=ctypes in the child)."""

import json
import os
import subprocess
import sys

import pytest

import attn
from attn import _binding
from conftest import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))

_PRELUDE = r'''
import json, os, sys
import vllm_stubs
vllm_stubs.install()
import numpy as np
import attn
from attn import ops
from attn import vllm_backend as vb
H, HK, D, BS = 4, 2, 16, 8


def builder(kind="decoder", num_blocks=64, chunked=True):
    spec_cls = {"decoder": vllm_stubs.AttentionSpec, "cross": vllm_stubs.CrossAttentionSpec,
                "encoder_only": vllm_stubs.EncoderOnlyAttentionSpec}[kind]
    spec = spec_cls(block_size=BS, num_kv_heads=HK, head_size=D)
    kv = vllm_stubs.tensor(np.zeros((num_blocks, BS, HK, 2 * D), np.float32)).transpose(0, 2, 1, 3)
    cfg = vllm_stubs.vllm_config(H, chunked_prefill=chunked, kv_caches={"layers.0.attn": kv})
    return vb.AttnMetadataBuilder(spec, ["layers.0.attn"], cfg, None), kv
'''


def _run(code: str, backend: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.join(ROOT, "python")]))
    if not env.get("ATTN_LIBRARY") and attn.library_path:
        env["ATTN_LIBRARY"] = attn.library_path
    if _binding.path:
        env["ATTN_EXTENSION"] = _binding.path
    env["ATTN_PY_BACKEND"] = backend
    env.pop("ATTN_VLLM_MARKER", None)
    r = subprocess.run([sys.executable, "-c", _PRELUDE + code], env=env, capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(params=["ext", "ctypes"])
def backend(request):
    if request.param == "ext" and _binding.ext is None:
        pytest.skip("attn._ext is not built")
    return request.param


_FORWARD = r'''
marker = os.path.join(sys.argv[1] if len(sys.argv) > 1 else os.environ["MARKER_DIR"], "marker")
os.environ["ATTN_VLLM_MARKER"] = marker
rng = np.random.default_rng(3)
b, kv = builder()
computed, q_lens = [9, 4, 20], [1, 1, 1]
cm = vllm_stubs.common_attn_metadata(computed, q_lens, BS, 8, rng, 64)
n = cm.num_actual_tokens
impl = vb.AttnBackendImpl(H, D, 0.25, HK)
keys = vllm_stubs.tensor(rng.standard_normal((64 * BS, HK, D)).astype(np.float32))
vals = vllm_stubs.tensor(rng.standard_normal((64 * BS, HK, D)).astype(np.float32))
# the cached context of every request, written through the impl (one call, all slots)
bt = cm.block_table_tensor.numpy()
slots = np.concatenate([bt[r, np.arange(c + q) // BS].astype(np.int64) * BS + np.arange(c + q) % BS
                        for r, (c, q) in enumerate(zip(computed, q_lens))])
impl.do_kv_cache_update(None, keys[:len(slots)], vals[:len(slots)], kv, vllm_stubs.tensor(slots))
meta = b.build(0, cm)
q = vllm_stubs.tensor(rng.standard_normal((n, H, D)).astype(np.float32))
outs, stride_calls = [], []
for layer in range(6):
    out = vllm_stubs.tensor(np.full((n, H, D), np.nan, np.float32))
    impl.forward(None, q, None, None, kv, meta, out)
    outs.append(out.numpy().copy())
    stride_calls.append(kv.stride_calls)
cache = np.asarray(kv.numpy().transpose(0, 2, 1, 3))  # physical [num_blocks, block_size, kv heads, 2 * D]
attn_cache = np.stack([cache[..., :D], cache[..., D:]])
want = attn.paged_attention(q.numpy(), attn_cache, cm.query_start_loc_cpu.numpy()[:4], cm.seq_lens.numpy()[:3],
                            bt[:3], softmax_scale=0.25)
assert all(np.array_equal(o, want) for o in outs), "forward differs from attn.paged_attention"
with open(marker) as f:
    lines = f.read().splitlines()
print(json.dumps({"stride_calls": stride_calls, "lines": lines}))
'''


def test_forward_formats_the_marker_once_and_matches_paged_attention(backend, tmp_path):
    code = _FORWARD.replace('sys.argv[1] if len(sys.argv) > 1 else os.environ["MARKER_DIR"]', repr(str(tmp_path)))
    r = _run(code, backend)
    calls = r["stride_calls"]
    # the first layer reads the cache's strides (its view, its marker line); no later layer does
    assert calls[1:] == [calls[0]] * 5, calls
    assert len(r["lines"]) == 1 and f"binding={backend}" in r["lines"][0], r["lines"]
    assert "kind=decoder" in r["lines"][0] and "kv_cache=[64, 2, 8, 32]/[512, 32, 64, 1]" in r["lines"][0]
