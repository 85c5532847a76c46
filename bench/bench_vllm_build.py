#!/usr/bin/env python3
"""Per-step host cost of the vLLM plugin's metadata builder (attn.vllm.backend.AttnMetadataBuilder.build),
without vLLM: the fake torch / vllm modules of tests/python/vllm_stubs.py (NumPy-backed tensors) stand in, so
the numbers are the builder's own Python + libattn's attn_plan_create, not vLLM's tensor overheads.

For each batch (9 query / 3 kv heads, head_size 64, block_size 16, a 64-column block table with vLLM's padded
persistent-batch rows) it prints min / median µs over --reps calls, each timed alone, of
  build()        the builder as it is;
  per-request    the same plan built the builder's former way in the same process (one ops.PlanRequest per
                 request, then ops.Plan): what build() cost before it took the batch as arrays.

    ATTN_LIBRARY=build/libattn.so PYTHONPATH=python python3 bench/bench_vllm_build.py [--reps 3000]

Speed lives here only (tests/python/test_vllm_plugin_stubbed.py checks that both give the same plan).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import vllm_stubs  # noqa: E402
from bench_python_overhead import _stats  # noqa: E402  (the same timing loop)

vllm_stubs.install()

import numpy as np  # noqa: E402

from attn import ops  # noqa: E402
from attn.vllm import backend as vb  # noqa: E402

H, HK, D, BS, WIDTH = 9, 3, 64, 16, 64


def per_request(b, cm):
    """The builder's former construction of the step's plan."""
    n = int(cm.num_reqs)
    qsl = cm.query_start_loc_cpu[:n + 1].numpy()
    seq = cm.seq_lens[:n].cpu().numpy()
    q_lens = np.diff(qsl)
    bt = cm.block_table_tensor[:n].cpu().numpy()
    reqs, used_max = [], -1
    for r in range(n):
        q_len, seq_len = int(q_lens[r]), int(seq[r])
        ids = bt[r, :-(-seq_len // b.block_size)]
        if ids.size:
            used_max = max(used_max, int(ids.max()))
        reqs.append(ops.PlanRequest(seq_len - q_len, q_len, ids))
    return ops.Plan(reqs, num_blocks=b._kv_num_blocks(used_max), block_size=b.block_size, num_heads=b.num_heads,
                    num_kv_heads=b.num_kv_heads, head_size=b.head_size, max_blocks_per_req=max(1, bt.shape[1]),
                    num_speculative_tokens=b.num_speculative_tokens, chunked_prefill_enabled=b.chunked_prefill)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3000)
    args = ap.parse_args()
    os.environ.setdefault("ATTN_VLLM_THREADS", "1")
    rng = np.random.default_rng(0)
    print("| batch | build() min / median µs | per-request min / median µs |")
    print("|---|---|---|")
    for label, computed, q_lens, nb in [("8 decodes", [100] * 8, [1] * 8, 512),
                                        ("64 decodes", [300] * 64, [1] * 64, 4096),
                                        ("4 decodes + 2 prefills", [50, 60, 70, 80, 0, 20], [1, 1, 1, 1, 40, 10],
                                         512)]:
        spec = vllm_stubs.AttentionSpec(block_size=BS, num_kv_heads=HK, head_size=D)
        kv = vllm_stubs.tensor(np.zeros((nb, BS, HK, 2 * D), np.float32)).transpose(0, 2, 1, 3)
        cfg = vllm_stubs.vllm_config(H, kv_caches={"layers.0.attn": kv})
        b = vb.AttnMetadataBuilder(spec, ["layers.0.attn"], cfg, None)
        cm = vllm_stubs.common_attn_metadata(computed, q_lens, BS, WIDTH, rng, nb, padded_reqs=8)
        new = _stats(lambda: b.build(0, cm), args.reps, warmup=100)
        old = _stats(lambda: per_request(b, cm), args.reps, warmup=100)
        print(f"| {label} | {new[0]:.1f} / {new[1]:.1f} | {old[0]:.1f} / {old[1]:.1f} |")


if __name__ == "__main__":
    main()
