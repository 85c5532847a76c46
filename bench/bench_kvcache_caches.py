#!/usr/bin/env python3
"""flash_attn_with_kvcache on one kv_cache tensor vs on two allocations (flash-attn's usual k_cache / v_cache).

A paged decode: --batch requests × --ctx keys, 32 query / 8 kv heads × 128, block_size 16, one new query token,
float32 (and bfloat16 with ml_dtypes), K/V blocks in order. Three layouts of the same keys and values:
  joint      k_cache, v_cache = kv[0], kv[1] of one [2, num_blocks, 16, 8, 128] array;
  v below k  two allocations, the value cache at the lower address (a negative kv_cache stride in libattn);
  k below v  two allocations, the key cache at the lower address.
Min and median ms over --reps calls (the layouts take turns within each repeat), and each layout's time ÷ the
joint one measured in the same run (1.0 = the two allocations are read in place, as one tensor is).

    python3 bench/bench_kvcache_caches.py [--batch 1] [--ctx 16384] [--reps 9] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=0, help="attn threads (0: the context's default)")
    a = ap.parse_args()
    import attn

    ctx = attn.Context()
    if a.threads:
        ctx.num_threads = a.threads
    h, hkv, d, bs = 32, 8, 128, 16
    nbr = (a.ctx + bs - 1) // bs
    nb = a.batch * nbr
    dtypes = [np.float32]
    try:
        import ml_dtypes

        dtypes.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    bt = np.arange(nb, dtype=np.int32).reshape(a.batch, nbr)
    seqlens = np.full(a.batch, a.ctx, np.int32)
    print(f"# batch {a.batch}, ctx {a.ctx}, {h}/{hkv} heads x {d}, block_size {bs}, threads "
          f"{ctx.num_threads}, load {os.getloadavg()[0]:.2f}")
    print("| dtype | layout | min ms | median ms | ÷ joint (min) |")
    print("|---|---|---|---|---|")
    for dt in dtypes:
        q = rng.standard_normal((a.batch, 1, h, d)).astype(np.float32).astype(dt)
        kv = rng.standard_normal((2, nb, bs, hkv, d), dtype=np.float32).astype(dt)
        layouts = {"joint": (kv[0], kv[1])}
        hi, lo = kv[0].copy(), kv[1].copy()  # allocated in this order: the later one usually lies lower
        if lo.ctypes.data > hi.ctypes.data:
            hi, lo = lo, hi
        k_lo, v_hi = np.empty_like(kv[0]), np.empty_like(kv[1])
        if k_lo.ctypes.data > v_hi.ctypes.data:
            k_lo, v_hi = v_hi, k_lo
        hi[...], lo[...] = kv[0], kv[1]
        k_lo[...], v_hi[...] = kv[0], kv[1]
        layouts["v below k"] = (hi, lo)
        layouts["k below v"] = (k_lo, v_hi)
        times = {name: [] for name in layouts}
        ref = None
        for r in range(a.reps + 1):
            for name, (kc, vc) in layouts.items():
                t = time.perf_counter()
                out = attn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens, block_table=bt, ctx=ctx)
                dt_s = time.perf_counter() - t
                if r == 0:  # warm-up, and every layout gives the joint one's bits
                    ref = out if ref is None else ref
                    assert np.array_equal(np.asarray(out), np.asarray(ref)), name
                else:
                    times[name].append(dt_s * 1e3)
        j = min(times["joint"])
        for name, ts in times.items():
            print(f"| {np.dtype(dt).name} | {name} | {min(ts):.2f} | {np.median(ts):.2f} | {min(ts) / j:.2f} |")


if __name__ == "__main__":
    main()
