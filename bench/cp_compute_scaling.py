#!/usr/bin/env python3
"""Per-rank compute of ring prefill and DCP decode at P = 2, 3, 4, measured as CPU time, against the cost
model of docs/CONTEXT_PARALLEL.md (scripts/cp_cost_model.py) fitted at P = 2.

On a machine with fewer cores than ranks, `mpirun -np P` time-slices the ranks, so their wall times measure
the sharing; and Open MPI busy-waits, so a rank's process CPU time includes its waits. This script instead
runs, in ONE process and one thread, the libattn calls each rank r of a P-rank run makes (the same shapes,
chunks and skips as src/mpi/mpi_ring.c and mpi_dcp.c), one rank after the other, and reads each rank's
CPU time (time.process_time). It checks the model's COMPUTE terms only, not its communication terms:

    ring   per-rank compute = 2·N²·H·d / (P·F)              (the causal FLOPs shared evenly, zig-zag)
    DCP    per-rank compute = R·N·Hkv·d·2b / (P·M)          (the local KV read)

F and M are fitted to this script's own P = 2 figures (the slowest rank), and P = 3, 4 are predicted from
them. Shapes are the `attn run --workload cp` ones. Run:

    PYTHONPATH=python ATTN_LIBRARY=build/libattn.so python3 bench/cp_compute_scaling.py [--reps 3]
"""
import argparse
import time

import numpy as np

import attn

try:
    import ml_dtypes

    BF16 = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    BF16 = np.float32


def zigzag(n, world, rank):
    c = (rank, 2 * world - 1 - rank)
    return [(ci * n // (2 * world), (ci + 1) * n // (2 * world) - ci * n // (2 * world)) for ci in c]


def ring_rank_cpu(q, k, v, world, rank, ctx):
    """CPU seconds of rank `rank`'s attention calls over the P ring steps (causal, zig-zag chunks)."""
    n = q.shape[1]
    mine = zigzag(n, world, rank)
    qg = (rank, 2 * world - 1 - rank)
    t0 = time.process_time()
    for s in range(world):
        owner = (rank - s) % world
        theirs = zigzag(n, world, owner)
        kg = (owner, 2 * world - 1 - owner)
        for qc in range(2):
            q0, ql = mine[qc]
            for kc in range(2):
                k0, kl = theirs[kc]
                if ql == 0 or kl == 0 or kg[kc] > qg[qc]:
                    continue
                attn.attention(q[:, q0:q0 + ql], k[:, k0:k0 + kl], v[:, k0:k0 + kl], causal=kg[kc] == qg[qc],
                               return_lse=True, ctx=ctx)
    return time.process_time() - t0


def dcp_rank_cpu(reqs, ctx_len, h, hkv, d, bs, world, rank, ctx, rng):
    """CPU seconds of rank `rank`'s paged attention over its interleaved (I = 1) local keys."""
    local = [ctx_len // world + (1 if rank < ctx_len % world else 0)] * reqs
    blocks = [(n + bs - 1) // bs for n in local]
    cache = rng.uniform(-1, 1, size=(2, sum(blocks), bs, hkv, d)).astype(BF16)
    bt = np.zeros((reqs, max(blocks)), np.int32)
    nxt = 0
    for r, nb in enumerate(blocks):
        bt[r, :nb] = np.arange(nxt, nxt + nb)
        nxt += nb
    q = rng.uniform(-1, 1, size=(reqs, h, d)).astype(np.float32)
    qsl = np.arange(reqs + 1, dtype=np.int32)
    t0 = time.process_time()
    attn.paged_attention(q, cache, qsl, np.array(local, np.int32), bt, causal=False, return_lse=True, ctx=ctx)
    return time.process_time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq", type=int, default=8192, help="ring prefill tokens (the cp workload's S)")
    ap.add_argument("--ctx", type=int, default=8192, help="DCP keys per request (the cp workload's context)")
    ap.add_argument("--reps", type=int, default=3, help="repeats; the minimum CPU time is kept")
    a = ap.parse_args()
    ctx = attn.Context(num_threads=1)
    rng = np.random.default_rng(0)
    N, H, HKV, D = a.seq, 8, 2, 128
    q = rng.uniform(-1, 1, size=(1, N, H, D)).astype(np.float32)
    k = rng.uniform(-1, 1, size=(1, N, HKV, D)).astype(BF16)
    v = rng.uniform(-1, 1, size=(1, N, HKV, D)).astype(BF16)
    R, DH, DHKV, BS, b = 8, 32, 8, 128, 2
    ring, dcp = {}, {}
    for P in (2, 3, 4):
        ring[P] = [min(ring_rank_cpu(q, k, v, P, r, ctx) for _ in range(a.reps)) for r in range(P)]
        dcp[P] = [min(dcp_rank_cpu(R, a.ctx, DH, DHKV, D, BS, P, r, ctx, rng) for _ in range(a.reps))
                  for r in range(P)]
    flops = 2.0 * N * N * H * D  # causal: half of 4·N²·H·d
    F = flops / (2 * max(ring[2]))
    kv_bytes = R * a.ctx * DHKV * D * 2 * b
    M = kv_bytes / (2 * max(dcp[2]))
    print(f"fitted at P = 2 (slowest rank): F = {F / 1e9:.2f} GFLOP/s, M = {M / 1e9:.2f} GB/s")
    print("| mode | P | predicted s / rank | measured s / rank: slowest (all ranks) | measured / predicted |")
    print("|---|---|---|---|---|")
    for name, meas, pred in (("ring", ring, lambda P: flops / (P * F)), ("DCP", dcp, lambda P: kv_bytes / (P * M))):
        for P in (2, 3, 4):
            m = max(meas[P])
            alls = ", ".join(f"{x:.3f}" for x in meas[P])
            print(f"| {name} | {P} | {pred(P):.3f} | {m:.3f} ({alls}) | {m / pred(P):.2f} |")


if __name__ == "__main__":
    main()
