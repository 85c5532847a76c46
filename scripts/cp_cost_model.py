#!/usr/bin/env python3
"""Cost model of context parallelism (docs/CONTEXT_PARALLEL.md): per-layer step time of ring
prefill, DCP decode and Ulysses for P ranks and N tokens, and the rank count where communication stops
hiding behind compute. Inputs are the figures `mpirun -np 2 attn run --workload cp` measures (pass them as
flags); everything this prints for P > 4 ranks or N > 8192 tokens is a PROJECTION of those figures.

  python3 scripts/cp_cost_model.py --beta 1.4e9 --alpha 20e-6 --flops 13.5e9 --mem 1.66e9

(--mem: the DCP row's KV bytes read per rank over its compute time, 8·4096·8·128·2·2 B / 81 ms.)
"""
import argparse


def ring(N, P, a):
    """Causal ring attention over zig-zag shards: P steps, each max(compute, transfer of one K/V shard)."""
    comp = 2.0 * N * N * a.heads * a.d / (P * P * a.flops)          # balanced causal share of one step
    comm = a.alpha + 2.0 * a.b * N * a.kv_heads * a.d / (P * a.beta)  # K and V of one shard
    return P * max(comp, comm), comp, comm


def ring_crossover(N, a):
    """P at which one step's shard transfer takes as long as its compute: N·H·β / (b·Hkv·F)."""
    return N * a.heads * a.beta / (a.b * a.kv_heads * a.flops)


def dcp(N, P, a):
    """Decode of R requests of N keys: read the local KV (memory bound), then all-gather the partial states."""
    comp = a.reqs * N * a.kv_heads * a.d * 2 * a.b / (P * a.mem)
    state = a.reqs * a.heads * (a.d + 1) * 4
    comm = (P - 1) * (a.alpha + state / a.beta)  # ring all-gather: P−1 steps of one state
    return comp + comm, comp, comm


def dcp_crossover(N, a):
    P = 1
    while P < 1 << 20:
        _, c, m = dcp(N, P, a)
        if m >= c:
            return P
        P += 1
    return P


def ulysses(N, P, a):
    comp = 4.0 * N * N * a.heads * a.d / (P * a.flops)
    sent = (P - 1) / P * (N / P) * a.d * a.b * (2 * a.heads + 2 * a.kv_heads)
    comm = 4 * (P - 1) * a.alpha + sent / a.beta
    return comp + comm, comp, comm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--beta", type=float, default=1.4e9, help="MPI bytes/s between two ranks (measured)")
    ap.add_argument("--alpha", type=float, default=20e-6, help="MPI message latency, s (measured)")
    ap.add_argument("--flops", type=float, default=13.5e9, help="attention FLOP/s per rank (measured)")
    ap.add_argument("--mem", type=float, default=1.66e9, help="decode KV read bytes/s per rank (measured)")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", dest="kv_heads", type=int, default=8)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--b", type=int, default=2, help="bytes per K/V element (bf16)")
    ap.add_argument("--reqs", type=int, default=8, help="decode requests per step")
    a = ap.parse_args()
    print(f"inputs: beta {a.beta/1e9:.2f} GB/s, alpha {a.alpha*1e6:.1f} us, F {a.flops/1e9:.1f} GFLOP/s/rank, "
          f"M {a.mem/1e9:.2f} GB/s/rank; layer H={a.heads}/{a.kv_heads} d={a.d} b={a.b}; DCP {a.reqs} requests")
    Ns = [128 * 1024, 1024 * 1024, 10 * 1024 * 1024]
    Ps = [8, 32, 128, 512]
    print("\nring prefill, one layer: step time s (compute per step / transfer per step, ms); crossover P*")
    for N in Ns:
        cells = []
        for P in Ps:
            t, c, m = ring(N, P, a)
            cells.append(f"P={P}: {t:.3g} s ({c*1e3:.3g}/{m*1e3:.3g}{'' if c >= m else ' EXPOSED'})")
        print(f"  N={N:>8}: " + "; ".join(cells) + f"; P* = {ring_crossover(N, a):.0f}")
    print("\nDCP decode, one layer: step time ms (KV read / all-gather, ms); crossover P*")
    for N in Ns:
        cells = []
        for P in Ps:
            t, c, m = dcp(N, P, a)
            cells.append(f"P={P}: {t*1e3:.3g} ({c*1e3:.3g}/{m*1e3:.3g})")
        print(f"  N={N:>8}: " + "; ".join(cells) + f"; P* = {dcp_crossover(N, a)}")
    print("\nUlysses (non-causal, P <= num_kv_heads), one layer: step time s (compute / all-to-alls, s)")
    for N in Ns:
        cells = []
        for P in [2, 4, 8]:
            t, c, m = ulysses(N, P, a)
            cells.append(f"P={P}: {t:.3g} ({c:.3g}/{m:.3g})")
        print(f"  N={N:>8}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
