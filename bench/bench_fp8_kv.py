"""fp8 KV cache vs bf16 / f32 caches: attn_paged_attention (decode: q_len 1) and a chunked prefill
over a cached prefix, same keys and queries, one process, interleaved repetitions; prints min and median
milliseconds per call and the ratio of each cache dtype to bf16. Usage (from the repository root):

    ATTN_LIBRARY=build/libattn.so PYTHONPATH=python python3 bench/bench_fp8_kv.py [--threads N] [--reps N]

The machine is shared and noisy: only ratios measured within one run are meaningful.
"""

import argparse
import time

import numpy as np

import attn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--reqs", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=2048)
    args = ap.parse_args()
    import ml_dtypes

    rng = np.random.default_rng(0)
    H, HK, D, BS = 32, 8, 128, 16
    R, L = args.reqs, args.ctx
    nb = R * (L // BS + 1)
    kv32 = rng.standard_normal((2, nb, BS, HK, D)).astype(np.float32)
    caches = {"f32": (kv32, None), "bf16": (kv32.astype(ml_dtypes.bfloat16), None),
              "fp8_e4m3": (np.clip(kv32 / 0.01, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8), "fp8"),
              "fp8_e5m2": (np.clip(kv32 / 0.01, -57344, 57344).astype(ml_dtypes.float8_e5m2).view(np.uint8),
                           "fp8_e5m2")}
    bt = np.arange(nb, dtype=np.int32).reshape(R, -1)
    shapes = {"decode": 1, "prefill chunk 64": 64}
    ctx = attn.Context(num_threads=args.threads)
    print(f"attn {attn.info()['version']} isa {ctx.isa}, {args.threads} thread(s); {R} requests x {L} cached keys, "
          f"{H}/{HK} heads, head_size {D}, block_size {BS}")
    for name, q_len in shapes.items():
        q = rng.standard_normal((R * q_len, H, D)).astype(np.float32)
        qsl = np.arange(R + 1, dtype=np.int32) * q_len
        sl = np.full(R, L, np.int32)
        times = {k: [] for k in caches}
        for _ in range(args.reps):  # interleaved: load changes hit every dtype alike
            for k, (c, kvd) in caches.items():
                kw = dict(kv_cache_dtype=kvd, k_scale=0.01, v_scale=0.01) if kvd else {}
                t = time.perf_counter()
                attn.paged_attention(q, c, qsl, sl, bt, ctx=ctx, **kw)
                times[k].append(time.perf_counter() - t)
        base = min(times["bf16"])
        print(f"{name}:")
        for k, ts in times.items():
            print(f"  {k:9s} min {1e3 * min(ts):8.2f} ms  median {1e3 * np.median(ts):8.2f} ms  "
                  f"min / bf16 {min(ts) / base:5.2f}  cache {caches[k][0].itemsize * kv32.size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
