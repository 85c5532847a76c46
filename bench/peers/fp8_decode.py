"""fp8 KV cache decode against vLLM CPU's, and against each library's bf16 cache, in one process window.

Decode (one query token per request) over a paged cache filled from the same bf16 keys and values: attn's
planned forward on a [2, num_blocks, block_size, num_kv_heads, head_size] cache (bf16, and uint8 codes read as
fp8 e4m3 with kv_cache_dtype "fp8") and vLLM's cpu_attention_with_kv_cache on its own cache layout (bf16, and
its "fp8" uint8 cache), both written by their own cache ops with scale 1.0. Cold K/V: every call reads the next
of several cache copies (at least --cold-mb of K/V per rotation). Systems take turns within each round; the
table gives min and median milliseconds over rounds and the ratios asked for: fp8 ÷ bf16 time of each library
and attn ÷ vLLM time of each cache dtype (< 1: attn faster). Outputs are compared with a float64 reference on
the values each cache holds (bf16, or the keys and values rounded to E4M3): the last column; the run stops where
any but vLLM's fp8 output is off by more than 2 % of the largest output (vLLM's fp8 attention rounds more than its
cache: 11–30 % here). A second table times one 2048-token chunk's cache write into each cache with each library's
own cache op, in ns per cached element. Run under bench/peers' venv (torch, vLLM), from the repository root:

    ATTN_LIBRARY=build-peers/libattn.so PYTHONPATH=python ~/.cache/attn/peers-venv/bin/python \\
        bench/peers/fp8_decode.py [--threads 1,2] [--rounds 5]

Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the calling shell (they slow torch here).
"""
import argparse
import math
import os
import platform
import statistics
import sys
import time

# Caches on 2 MiB pages, as bench_peers.py's default (torch's allocator reads this at its first allocation);
# torch before attn, so that one OpenMP runtime serves vLLM's kernels and libattn.
if "--pages=4k" not in sys.argv:
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
import torch  # noqa: E402

import attn  # noqa: E402

CASES = [(8, 4096), (1, 16384), (8, 16384)]
HQ, HKV, D, BS = 32, 8, 128, 128


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="calls per sample (min taken)")
    ap.add_argument("--cold-mb", type=int, default=256)
    ap.add_argument("--pages", choices=["huge", "4k"], default="huge", help="write --pages=4k for 4 KiB pages")
    args = ap.parse_args()
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    current_platform.import_kernels()
    ops = torch.ops._C
    model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                 platform.machine())
    print(f"# {model}, {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}; attn {attn.info()['version']}, torch {torch.__version__}; "
          f"{HQ}/{HKV} heads x {D}, block_size {BS}, {args.pages} pages, {time.strftime('%Y-%m-%d %H:%M')}")
    print("| case | threads | attn bf16 | attn fp8 | vLLM bf16 | vLLM fp8 | attn fp8 ÷ bf16 | vLLM fp8 ÷ bf16 | "
          "attn ÷ vLLM bf16 | attn ÷ vLLM fp8 | max error ÷ max output, same order |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    scale = 1.0 / math.sqrt(D)
    for B, L in CASES:
        g = torch.Generator().manual_seed(B * L)
        nblk = L // BS
        copies = max(1, min(8, math.ceil(args.cold_mb * 2**20 / (2 * B * L * HKV * D))))  # fp8 bytes
        nb = copies * B * nblk
        perm = torch.randperm(nb, generator=g).to(torch.int32)
        tables = [perm[c * B * nblk:(c + 1) * B * nblk].reshape(B, nblk).contiguous() for c in range(copies)]
        q = torch.randn(B, HQ, D, generator=g).to(torch.bfloat16)
        qsl = torch.arange(B + 1, dtype=torch.int32)
        seq_lens = torch.full((B,), L, dtype=torch.int32)
        caches = {dt: _caches(nb, dt, _get_attn_isa) for dt in ("bf16", "fp8")}
        ref_kv = []  # request 0 of copy 0: the bf16 keys / values, for the check
        for c in range(copies):
            for b in range(B):
                k = torch.randn(L, HKV, D, generator=g).to(torch.bfloat16)
                v = torch.randn(L, HKV, D, generator=g).to(torch.bfloat16)
                if c == 0 and b == 0:
                    ref_kv = (k, v)
                pos = torch.arange(L, dtype=torch.int64)
                slots = (tables[c][b].to(torch.int64)[pos // BS] * BS + pos % BS).contiguous()
                for dt, (a_kv, v_k, v_v, isa, kvd) in caches.items():
                    attn.reshape_and_cache(k, v, a_kv, slots, kv_cache_dtype=kvd if dt == "fp8" else "auto")
                    ops.cpu_attn_reshape_and_cache(k, v, v_k, v_v, slots, isa, 1.0, 1.0, kvd)
        plans = [attn.Plan([attn.PlanRequest(L - 1, 1, tables[c][b].numpy()) for b in range(B)], num_blocks=nb,
                           block_size=BS, num_heads=HQ, num_kv_heads=HKV, head_size=D, max_blocks_per_req=nblk)
                 for c in range(copies)]
        out = torch.empty(B, HQ, D, dtype=torch.bfloat16)
        for nt in [int(t) for t in args.threads.split(",")]:
            torch.set_num_threads(nt)
            ctx = attn.Context(num_threads=nt)
            md = {dt: ops.get_scheduler_metadata(B, HQ, HKV, D, seq_lens, torch.bfloat16, qsl, True, -1,
                                                 caches[dt][3], True, None, caches[dt][4]) for dt in caches}

            def call(system: str, dt: str, c: int) -> torch.Tensor:
                a_kv, v_k, v_v, isa, kvd = caches[dt]
                if system == "attn":
                    plans[c].forward(q, a_kv, softmax_scale=scale, out=out, ctx=ctx,
                                     kv_cache_dtype="fp8" if dt == "fp8" else "auto")
                else:
                    ops.cpu_attention_with_kv_cache(q, v_k, v_v, out, qsl, seq_lens, scale, True, None, -1,
                                                    tables[c], 0.0, md[dt], None, None, 1.0, 1.0, kvd)
                return out

            systems = [(s, dt) for dt in ("bf16", "fp8") for s in ("attn", "vllm")]
            errs = {}
            for s, dt in systems:  # the check: request 0 of copy 0 against float64 on the cache's values
                k, v = ref_kv
                if dt == "fp8":
                    k, v = (torch.from_numpy(x.float().numpy().clip(-448, 448)).to(torch.float8_e4m3fn).double()
                            for x in (k, v))
                o = call(s, dt, 0)[0].double()
                kk, vv = k.double().transpose(0, 1), v.double().transpose(0, 1)  # [HKV, L, D]
                qq = q[0].double().view(HKV, HQ // HKV, D)
                p = torch.softmax(qq @ kk.transpose(1, 2) * scale, -1)
                want = (p @ vv).reshape(HQ, D)
                errs[(s, dt)] = float((o - want).abs().max() / want.abs().max())
                if errs[(s, dt)] > 2e-2 and (s, dt) != ("vllm", "fp8"):
                    raise SystemExit(f"{s} {dt} b{B} ctx{L}: relative error {errs[(s, dt)]:.3g}")
            times = {sd: [] for sd in systems}
            for _ in range(args.rounds):
                for sd in systems:
                    best = float("inf")
                    for r in range(args.reps):
                        c = (len(times[sd]) * args.reps + r) % copies
                        t0 = time.perf_counter()
                        call(*sd, c)
                        best = min(best, time.perf_counter() - t0)
                    times[sd].append(best * 1e3)
            mn = {sd: min(t) for sd, t in times.items()}
            med = {sd: statistics.median(t) for sd, t in times.items()}
            cell = {sd: f"{mn[sd]:.3g} / {med[sd]:.3g} ms" for sd in systems}
            print(f"| decode b{B} ctx{L // 1024}k | {nt} | {cell[('attn', 'bf16')]} | {cell[('attn', 'fp8')]} | "
                  f"{cell[('vllm', 'bf16')]} | {cell[('vllm', 'fp8')]} | "
                  f"{mn[('attn', 'fp8')] / mn[('attn', 'bf16')]:.2f} | {mn[('vllm', 'fp8')] / mn[('vllm', 'bf16')]:.2f} | "
                  f"{mn[('attn', 'bf16')] / mn[('vllm', 'bf16')]:.2f} | {mn[('attn', 'fp8')] / mn[('vllm', 'fp8')]:.2f} | "
                  + " · ".join(f"{errs[sd]:.2g}" for sd in systems) + f" | load {os.getloadavg()[0]:.2f}", flush=True)
    cache_writes(ops, _get_attn_isa, args)


def _caches(nb: int, dt: str, _get_attn_isa) -> tuple:
    """Empty caches of nb blocks for dtype dt ("bf16" or "fp8"): attn's [2, num_blocks, block_size, num_kv_heads,
    head_size] and vLLM's key and value halves, with vLLM's attention ISA and kv_cache_dtype for them."""
    tdt = torch.bfloat16 if dt == "bf16" else torch.uint8
    kvd = "auto" if dt == "bf16" else "fp8"
    v_k, v_v = torch.zeros(nb, HKV, 2 * BS, D, dtype=tdt).chunk(2, dim=2)
    return torch.zeros(2, nb, BS, HKV, D, dtype=tdt), v_k, v_v, _get_attn_isa(torch.bfloat16, BS, D, kvd), kvd


def cache_writes(ops, _get_attn_isa, args) -> None:
    """One prefill chunk's cache write (keys and values of one layer, bf16 rows) into each library's bf16 and fp8
    cache with its own cache op (attn.reshape_and_cache, vLLM's cpu_attn_reshape_and_cache), scale 1.0, slots
    spread over a shuffled block table: ns per cached element (K and V), min / median over rounds."""
    tokens = 2048
    g = torch.Generator().manual_seed(7)
    nb = 4 * tokens // BS
    k = torch.randn(tokens, HKV, D, generator=g).to(torch.bfloat16)
    v = torch.randn(tokens, HKV, D, generator=g).to(torch.bfloat16)
    blocks = torch.randperm(nb, generator=g)[:tokens // BS].to(torch.int64)
    pos = torch.arange(tokens, dtype=torch.int64)
    slots = (blocks[pos // BS] * BS + pos % BS).contiguous()
    elems = 2 * tokens * HKV * D
    print(f"\n| cache write, {tokens} tokens x {HKV}x{D} (bf16 rows) | threads | attn bf16 | attn fp8 | vLLM bf16 | "
          "vLLM fp8 | attn ÷ vLLM bf16 | attn ÷ vLLM fp8 |")
    print("|---|---|---|---|---|---|---|---|")
    for nt in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(nt)
        ctx = attn.Context(num_threads=nt)
        calls = {}
        for dt in ("bf16", "fp8"):
            a_kv, v_k, v_v, isa, kvd = _caches(nb, dt, _get_attn_isa)
            calls[("attn", dt)] = (lambda a_kv=a_kv, kvd=kvd:
                                   attn.reshape_and_cache(k, v, a_kv, slots, kv_cache_dtype=kvd, ctx=ctx))
            calls[("vllm", dt)] = (lambda v_k=v_k, v_v=v_v, isa=isa, kvd=kvd:
                                   ops.cpu_attn_reshape_and_cache(k, v, v_k, v_v, slots, isa, 1.0, 1.0, kvd))
        times = {sd: [] for sd in calls}
        for _ in range(args.rounds):
            for sd, fn in calls.items():
                best = float("inf")
                for _r in range(args.reps):
                    t0 = time.perf_counter()
                    fn()
                    best = min(best, time.perf_counter() - t0)
                times[sd].append(best * 1e9 / elems)
        mn = {sd: min(t) for sd, t in times.items()}
        cell = {sd: f"{mn[sd]:.3g} / {statistics.median(times[sd]):.3g} ns" for sd in calls}
        print(f"| per element | {nt} | {cell[('attn', 'bf16')]} | {cell[('attn', 'fp8')]} | {cell[('vllm', 'bf16')]} | "
              f"{cell[('vllm', 'fp8')]} | {mn[('attn', 'bf16')] / mn[('vllm', 'bf16')]:.2f} | "
              f"{mn[('attn', 'fp8')] / mn[('vllm', 'fp8')]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
