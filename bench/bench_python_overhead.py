#!/usr/bin/env python3
"""Per-call overhead of the Python package above the C call, at a 1-request, 16-key decode.

Shape (the small-model decode): 9 query heads / 3 kv heads, head_size 64, block_size 16, 16 keys (the last
one new), float32, one thread. For each hot entry it measures, min and median over --reps calls, each call
timed alone:
  C       the same libattn entries on the same shape from C (bench/bench_calls, built with the library);
  ext     the Python call through the compiled extension attn._ext (the package's only binding);
and prints a markdown table: overhead = ext - C (min - min, median - median) and the ratio.

    python3 bench/bench_python_overhead.py [--build build] [--reps 3000] [--threads 1] [--torch]

The C and Python numbers come from separate processes run back to back on the same machine; on a loaded
machine rerun and compare minima. Speed lives here only (never in timed tests).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H, HKV, D, BS, L = 9, 3, 64, 16, 16

# entry -> C baseline: a bench_calls entry or a sum of them
C_OF = {
    "paged_attention": ["paged_attention"],
    "paged_attention (out allocated)": ["paged_attention"],
    "Plan.forward": ["paged_plan"],
    "backend forward (cache + plan)": ["reshape_and_cache", "paged_plan"],
    "reshape_and_cache": ["reshape_and_cache"],
    "vllm_ops.reshape_and_cache": ["reshape_and_cache"],
    "flash_attn_with_kvcache": ["kvcache"],
    "flash_attn_func": ["flash_attn_func"],
    "flash_attn_varlen_func": ["varlen"],
    "flash_attn_varlen_func (paged)": ["paged_attention"],
    "vllm_ops.merge_attn_states": ["merge"],
}


def _stats(f, reps: int, warmup: int = 200) -> tuple:
    """(min, median) µs of reps calls of f, each timed alone, after `warmup` untimed calls, GC off."""
    for _ in range(warmup):
        f()
    ts = [0.0] * reps
    pc = time.perf_counter
    gc.disable()
    try:
        for i in range(reps):
            t0 = pc()
            f()
            ts[i] = pc() - t0
    finally:
        gc.enable()
    ts.sort()
    return ts[0] * 1e6, ts[reps // 2] * 1e6


def python_times(reps: int, threads: int, use_torch: bool = False) -> dict:
    """{entry: (min_us, median_us)} of the Python calls with the binding this process loaded (inputs and
    outputs as torch CPU tensors sharing the NumPy arrays' memory with use_torch)."""
    import numpy as np

    import attn
    import attn.vllm.ops
    from attn_demo import backend as B

    rng = np.random.default_rng(0)
    ctx = attn.Context(num_threads=threads)
    nb = (L + BS - 1) // BS
    kv = rng.standard_normal((2, nb, BS, HKV, D)).astype(np.float32)
    q = rng.standard_normal((1, H, D)).astype(np.float32)
    out = np.empty_like(q)
    q4, out4 = q.reshape(1, 1, H, D), out.reshape(1, 1, H, D)
    key = rng.standard_normal((1, HKV, D)).astype(np.float32)
    key4 = key.reshape(1, 1, HKV, D)
    qsl, sl = np.array([0, 1], np.int32), np.array([L], np.int32)
    bt = np.arange(nb, dtype=np.int32).reshape(1, nb)
    slot = np.array([L - 1], np.int64)
    k3 = rng.standard_normal((L, HKV, D)).astype(np.float32)
    v3 = rng.standard_normal((L, HKV, D)).astype(np.float32)
    k4, v4 = k3.reshape(1, L, HKV, D), v3.reshape(1, L, HKV, D)
    cu_q, cu_k = np.array([0, 1], np.int32), np.array([0, L], np.int32)
    lse_a = rng.standard_normal((H, 1)).astype(np.float32)
    lse_b = rng.standard_normal((H, 1)).astype(np.float32)
    lse_o = np.empty_like(lse_a)
    out2 = np.empty((1, H * D), np.float32)
    if use_torch:
        import torch

        torch.set_num_threads(threads)
        kv, q, out, key, qsl, sl, bt, slot, k3, v3, cu_q, cu_k, lse_a, lse_b, lse_o, out2 = (
            torch.from_numpy(a) for a in (kv, q, out, key, qsl, sl, bt, slot, k3, v3, cu_q, cu_k, lse_a, lse_b,
                                          lse_o, out2))
        q4, out4, key4 = q.view(1, 1, H, D), out.view(1, 1, H, D), key.view(1, 1, HKV, D)
        k4, v4 = k3.view(1, L, HKV, D), v3.view(1, L, HKV, D)
    plan = attn.Plan([attn.PlanRequest(L - 1, 1, np.arange(nb))], num_blocks=nb, block_size=BS, num_heads=H,
                     num_kv_heads=HKV, head_size=D, max_blocks_per_req=nb)
    spec = B.AttnSpec(num_blocks=nb, block_size=BS, num_heads=H, num_kv_heads=HKV, head_size=D)
    meta = B.AttnMetadataBuilder(spec).build(0, B.CommonAttentionMetadata(
        query_start_loc=qsl, seq_lens=sl, block_table_tensor=bt, slot_mapping=slot))
    impl = B.AttnBackendImpl(H, D, 1 / 8, HKV, ctx=ctx)
    calls = {
        "paged_attention": lambda: attn.paged_attention(q, kv, qsl, sl, bt, out=out, ctx=ctx),
        "paged_attention (out allocated)": lambda: attn.paged_attention(q, kv, qsl, sl, bt, ctx=ctx),
        "Plan.forward": lambda: plan.forward(q, kv, out=out, ctx=ctx),
        "backend forward (cache + plan)": lambda: impl.forward(None, q, key, key, kv, meta, out2),
        "reshape_and_cache": lambda: attn.reshape_and_cache(key, key, kv, slot, ctx=ctx),
        "vllm_ops.reshape_and_cache": lambda: attn.vllm.ops.reshape_and_cache(key, key, kv[0], kv[1], slot,
                                                                               ctx=ctx),
        "flash_attn_with_kvcache": lambda: attn.flash_attn_with_kvcache(
            q4, kv[0], kv[1], key4, key4, cache_seqlens=L - 1, block_table=bt, out=out4, ctx=ctx),
        "flash_attn_func": lambda: attn.flash_attn_func(q4, k4, v4, out=out4, ctx=ctx),
        "flash_attn_varlen_func": lambda: attn.flash_attn_varlen_func(q, k3, v3, cu_q, cu_k, 1, L, out=out,
                                                                      ctx=ctx),
        "flash_attn_varlen_func (paged)": lambda: attn.flash_attn_varlen_func(
            q, kv[0], kv[1], cu_q, cu_k, 1, L, block_table=bt, out=out, ctx=ctx),
        "vllm_ops.merge_attn_states": lambda: attn.vllm.ops.merge_attn_states(out, q, lse_a, q, lse_b, lse_o,
                                                                              ctx=ctx),
    }
    return {"binding": attn._binding.name, "times": {n: _stats(f, reps) for n, f in calls.items()}}


def c_times(build: str, reps: int, threads: int) -> dict:
    exe = os.path.join(build, "bench", "bench_calls")
    if not os.path.exists(exe):
        sys.exit(f"bench_python_overhead: {exe} not found (cmake --build {build} --target bench_calls)")
    res = subprocess.run([exe, "--reps", str(reps), "--threads", str(threads)], check=True,
                         capture_output=True, text=True)
    out = {}
    for line in res.stdout.splitlines():
        d = json.loads(line)
        out[d["entry"]] = (d["min_us"], d["median_us"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--torch", action="store_true", help="torch CPU tensors in and out (DLPack path)")
    ap.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("ATTN_LIBRARY", os.path.join(build, "libattn.so"))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    if a.emit_json:
        print(json.dumps(python_times(a.reps, a.threads, a.torch)))
        return
    c = c_times(build, a.reps, a.threads)
    ext = python_times(a.reps, a.threads, a.torch)
    print(f"Python per-call overhead, {H}/{HKV} heads, head_size {D}, block_size {BS}, {L} keys, 1 request, "
          f"float32, {a.threads} thread(s), {a.reps} reps, {'torch tensors' if a.torch else 'NumPy arrays'}; "
          f"binding: {ext['binding']}; µs min / median\n")
    print("| entry | C call | Python (ext) | overhead (ext − C) | ext / C |")
    print("|---|---|---|---|---|")
    for name, parts in C_OF.items():
        cmin = sum(c[p][0] for p in parts)
        cmed = sum(c[p][1] for p in parts)
        emin, emed = ext["times"][name]
        print(f"| {name} | {cmin:.2f} / {cmed:.2f} | {emin:.2f} / {emed:.2f} | {emin - cmin:.2f} / "
              f"{emed - cmed:.2f} | {emin / cmin:.2f} |")


if __name__ == "__main__":
    main()
