"""attn.vllm.backend (the vLLM plugin) without vLLM or torch: each test runs a child Python that installs the
fake modules of tests/python/vllm_stubs.py (NumPy-backed tensors), imports the plugin and drives its metadata
builder and impl the way vLLM's model runner does. The child keeps the fakes out of this process.

  - AttnMetadataBuilder.build gives the plan the per-request construction gives (ops.Plan of one PlanRequest
    per request, the builder's former loop, kept here as the reference), for decode, mixed (reordered),
    chunked, cross and encoder-only batches, with vLLM's padded persistent-batch tensors, and the same error
    for a block table too narrow for its sequences; it makes no Python object per request (it runs every
    engine step: the per-request loop cost ~0.1-0.6 ms a step, see bench/bench_vllm_build.py);
  - AttnBackendImpl.forward formats its "used" marker line once per process: after the first layer, no
    layer reads the cache's strides again (the fake tensor counts its stride() calls), and the marker
    file has one line; the layers' outputs equal attn.paged_attention on the same cache.
Through the one binding, the compiled extension attn._ext."""

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
from attn.vllm import backend as vb
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
    env.pop("ATTN_VLLM_MARKER", None)
    r = subprocess.run([sys.executable, "-c", _PRELUDE + code], env=env, capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(params=["ext"])
def backend(request):
    if request.param == "ext" and _binding.ext is None:
        pytest.skip("attn._ext is not built")
    return request.param


_BUILD = r'''
def reference_plan(b, cm):
    """The builder's former construction: one PlanRequest per request, then ops.Plan."""
    n = int(cm.num_reqs)
    qsl = cm.query_start_loc_cpu[:n + 1].numpy()
    seq = cm.seq_lens[:n].numpy()
    q_lens = np.diff(qsl)
    bt = cm.block_table_tensor[:n].numpy()
    reqs, used_max, bs = [], -1, b.block_size
    for r in range(n):
        q_len, seq_len = int(q_lens[r]), int(seq[r])
        if b.kind == "encoder_only":
            reqs.append(ops.PlanRequest(0, q_len, (), kind="encoder_only"))
            continue
        ids = bt[r, :-(-seq_len // bs)]
        if ids.size:
            used_max = max(used_max, int(ids.max()))
        if b.kind == "cross":
            reqs.append(ops.PlanRequest(0, q_len, ids, kind="cross", encoder_len=seq_len))
        else:
            reqs.append(ops.PlanRequest(seq_len - q_len, q_len, ids))
    num_blocks = 0 if b.kind == "encoder_only" else b._kv_num_blocks(used_max)
    return ops.Plan(reqs, num_blocks=num_blocks, block_size=1 if b.kind == "encoder_only" else bs,
                    num_heads=b.num_heads, num_kv_heads=b.num_kv_heads, head_size=b.head_size,
                    max_blocks_per_req=max(1, bt.shape[1]), num_speculative_tokens=b.num_speculative_tokens,
                    chunked_prefill_enabled=b.chunked_prefill)


FIELDS = ("num_reqs", "num_tokens", "num_decodes", "num_decode_tokens", "num_prefills", "num_prefill_tokens",
          "attn_state", "decode_threshold", "max_query_len", "max_seq_len", "num_work_blocks", "num_split_items",
          "workspace_size", "identity_order", "num_heads", "num_kv_heads", "head_size")
ARRAYS = ("query_start_loc", "seq_lens", "slot_mapping", "block_table", "kinds", "req_order", "token_src")
rng = np.random.default_rng(7)
cases = [("decoder", [9, 4, 20], [1, 1, 1], True), ("decoder", [0, 9, 6, 30], [7, 1, 4, 1], True),
         ("decoder", [0, 0], [5, 3], True), ("decoder", [12, 0, 3], [5, 3, 2], False),
         ("decoder", [20] * 12, [1] * 12, True), ("cross", [3, 5], [2, 1], True),
         ("encoder_only", [0, 0, 0], [4, 1, 6], True), ("decoder", [], [], True)]
# build() runs once per step: no Python object (nor loop iteration) per request. Counted: PlanRequest objects
# made during build() (the former loop made one per request).
made = [0]
_init = ops.PlanRequest.__init__


def counting_init(self, *a, **k):
    made[0] += 1
    _init(self, *a, **k)


ops.PlanRequest.__init__ = counting_init
checked, per_request_objects = [], 0
for kind, computed, q_lens, chunked in cases:
    b, _ = builder(kind, chunked=chunked)
    if q_lens:
        cm = vllm_stubs.common_attn_metadata(computed, q_lens, BS, 8, rng, 64, padded_reqs=3)
    else:
        cm = vllm_stubs.common_attn_metadata([1], [1], BS, 8, rng, 64, padded_reqs=3)
        cm.num_reqs = cm.num_actual_tokens = 0
    made[0] = 0
    meta = b.build(0, cm)
    per_request_objects += made[0]
    ref = reference_plan(b, cm)
    got = meta.plan
    for f in FIELDS:
        assert getattr(got, f) == getattr(ref, f), (kind, computed, f, getattr(got, f), getattr(ref, f))
    for f in ARRAYS:
        g, w = getattr(got, f), getattr(ref, f)
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), (kind, computed, f, g, w)
    assert meta.workspace_size == ref.workspace_size and (meta.workspace or 0) == got._ws_ptr
    assert (meta.token_src is None) == ref.identity_order
    if meta.token_src is not None:
        assert np.array_equal(meta.token_src, ref.token_src.astype(np.int64))
    checked.append([kind, meta.attn_state, meta.num_decodes, meta.num_prefills])
# a block table too narrow for a sequence: the same error both ways
b, _ = builder()
cm = vllm_stubs.common_attn_metadata([30, 2], [1, 1], BS, 8, rng, 64)
cm.block_table_tensor = cm.block_table_tensor[:, :2]
errors = []
for f in (lambda: b.build(0, cm), lambda: reference_plan(b, cm)):
    try:
        f()
        errors.append(None)
    except attn.AttnError as e:
        errors.append([type(e).__name__, str(e)])
assert errors[0] is not None and errors[0] == errors[1], errors
print(json.dumps({"checked": checked, "error": errors[0], "per_request_objects": per_request_objects}))
'''


def test_builder_plan_equals_the_per_request_construction(backend):
    r = _run(_BUILD, backend)
    assert len(r["checked"]) == 8
    assert [c[0] for c in r["checked"]][-3:] == ["cross", "encoder_only", "decoder"]
    assert r["checked"][0] == ["decoder", 2, 3, 0]  # DECODE_ONLY, three decodes
    assert "num_block_ids" in r["error"][1]
    assert r["per_request_objects"] == 0  # the former per-request loop made 29 PlanRequest objects here


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
