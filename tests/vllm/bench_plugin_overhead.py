#!/usr/bin/env python3
"""Per-layer host cost of the vLLM plugin's hot path (attn.vllm.backend): one ``do_kv_cache_update`` +
one ``forward`` on a decode step, torch CPU tensors shaped like SmolLM2-135M (9 query / 3 kv heads,
head_size 64), vLLM's per-layer cache in the token-major LBNHC layout, float32, 1 thread.

Not a test (pytest does not collect it); run it in the vLLM venv:

    ATTN_LIBRARY=build/libattn.so PYTHONPATH=python python tests/vllm/bench_plugin_overhead.py

For each (block size, decode batch) it prints min / median µs over --reps layers, each timed alone:
  layer   do_kv_cache_update + forward through the plugin;
  floor   the two attn._ext calls with their arguments prepared (the C work plus what any caller of the
          extension pays at least: the DLPack views of the tensors): layer − floor is what the plugin's
          Python adds per layer.
Speed lives here only, never in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from attn import _binding, ops

# min / median µs of one call: the timing loop of bench/bench_python_overhead.py (one loop for both benches)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "bench"))
from bench_python_overhead import _stats  # noqa: E402
from attn.vllm import backend as vb

H, HK, D = 9, 3, 64


def case(block_size: int, batch: int, ctx_len: int, reps: int) -> dict:
    g = torch.Generator().manual_seed(0)
    nbr = -(-(ctx_len + 1) // block_size)  # blocks per request
    nb = batch * nbr
    # vLLM's LBNHC allocation (physical [B, N, H, C]) seen as its logical [B, H, N, C] per-layer view
    kv = torch.randn(nb, block_size, HK, 2 * D, generator=g).permute(0, 2, 1, 3)
    impl = vb.AttnBackendImpl(H, D, 1 / 8, HK, None, None, "auto")
    reqs = [ops.PlanRequest(ctx_len, 1, list(range(r * nbr, (r + 1) * nbr))) for r in range(batch)]
    plan = ops.Plan(reqs, num_blocks=nb, block_size=block_size, num_heads=H, num_kv_heads=HK, head_size=D,
                    max_blocks_per_req=nbr)
    slots = torch.tensor([r * nbr * block_size + ctx_len for r in range(batch)], dtype=torch.int64)
    ws = plan._workspace
    meta = vb.AttnMetadata(
        num_actual_tokens=batch, max_query_len=1, max_seq_len=ctx_len + 1, query_start_loc=None,
        seq_lens=None, block_table=None, slot_mapping=slots, causal=True, kind="decoder",
        attn_state=plan.attn_state, num_decodes=plan.num_decodes, num_decode_tokens=plan.num_decode_tokens,
        num_prefills=plan.num_prefills, plan=plan, token_src=None,
        workspace=ws.ctypes.data if ws.size else None, workspace_size=int(ws.size))
    q = torch.randn(batch, H, D, generator=g)
    k = torch.randn(batch, HK, D, generator=g)
    v = torch.randn(batch, HK, D, generator=g)
    out = torch.empty(batch, H, D)

    def layer():
        impl.do_kv_cache_update(None, k, v, kv, slots)
        impl.forward(None, q, k, v, kv, meta, out)

    # the same two C calls, arguments prepared once
    sb, sh, sn, _ = kv.stride()
    view = kv.as_strided((2, nb, block_size, HK, D), (D, sb, sn, sh, 1))
    ext, cp, pp, wp, wn = ops._ext, vb._context()._ptr, plan._ptr, plan._ws_ptr, plan._ws_size

    def floor():  # attn._ext with the arguments prepared (tensors still go through DLPack)
        ext.reshape_and_cache(cp, k, v, view, slots, None, None, None)
        ext.forward_paged(cp, pp, H, q, view, None, None, 0.125, True, (-1, -1), 0.0, None, None, out, None, False,
                          wp, wn, None, None, None)

    layer()
    want = out.clone()
    out.zero_()
    floor()
    assert torch.equal(out, want), "plugin and direct calls disagree"
    return dict(block_size=block_size, batch=batch, ctx_len=ctx_len, layer=_stats(layer, reps),
                floor=_stats(floor, reps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--ctx-len", type=int, default=64, help="cached keys per request before the new one")
    ap.add_argument("--block-sizes", default="16,128")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    import os

    os.environ["ATTN_VLLM_THREADS"] = "1"
    rows = [case(bs, b, a.ctx_len, a.reps) for bs in map(int, a.block_sizes.split(","))
            for b in map(int, a.batches.split(","))]
    if a.json:
        print(json.dumps(dict(binding=_binding.name, rows=rows)))
        return
    print(f"vLLM plugin per-layer cost, {H}/{HK} heads, head_size {D}, {a.ctx_len}+1 keys per request, f32, "
          f"1 thread, {a.reps} reps; binding: {_binding.name}; µs min / median\n")
    print("| block size | decode batch | layer (plugin) | floor (ext direct) | plugin overhead |")
    print("|---|---|---|---|---|")
    for r in rows:
        (lm, ld), (fm, fd) = r["layer"], r["floor"]
        print(f"| {r['block_size']} | {r['batch']} | {lm:.1f} / {ld:.1f} | {fm:.1f} / {fd:.1f} | "
              f"{lm - fm:.1f} / {ld - fd:.1f} |")


if __name__ == "__main__":
    main()
