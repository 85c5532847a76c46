"""attn as a diffusers attention backend: small randomly initialised transformers built from
config (no weights to download) run once with diffusers' native SDPA backend and once with "attn" /
"attn_varlen"; outputs must agree within the stated tolerance (float32: 1e-4 relative to max |out|;
bfloat16: 3e-2). Covered: a Flux-style double+single block stack (joint image+text attention, text
padding mask through joint_attention_kwargs), an SD3-style joint block stack (through
attn.integrations.diffusers.use_dispatcher: diffusers' JointAttnProcessor2_0 bypasses the dispatcher),
a Wan-style video block (3D RoPE self-attention + cross attention to text), a QwenImage-style stack (the
model's own encoder_hidden_states_mask -> joint padding mask), and the backend functions themselves
(masks of every accepted shape, GQA, causal, LSE, the varlen route with holes). Every model test also
asserts that attn ran (a counter around attn.attention / attn.flash_attn_varlen_func).
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

import attn  # noqa: E402
import attn.integrations.diffusers as ad  # noqa: E402
from diffusers.models.attention_dispatch import attention_backend, dispatch_attention_fn  # noqa: E402

F32_TOL, BF16_TOL = 1e-4, 3e-2


@pytest.fixture
def calls(monkeypatch):
    n = {"dense": 0, "varlen": 0}
    dense, varlen = attn.attention, attn.flash_attn_varlen_func

    def c_dense(*a, **kw):
        n["dense"] += 1
        return dense(*a, **kw)

    def c_varlen(*a, **kw):
        n["varlen"] += 1
        return varlen(*a, **kw)

    monkeypatch.setattr(attn, "attention", c_dense)
    monkeypatch.setattr(attn, "flash_attn_varlen_func", c_varlen)
    return n


def _run(model, backend, kwargs):
    model.set_attention_backend(backend)
    with torch.no_grad():
        out = model(**kwargs, return_dict=False)[0]
    model.reset_attention_backend()
    return out.float()


def _rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-6)).item()


def _check(model, kwargs, calls, dtype, backends=("attn", "attn_varlen"), mask_kwarg=None):
    """native vs each backend; with mask_kwarg (a padded case, float32) also checks that dropping the
    mask changes the native output by far more than the tolerance, so the mask is really honoured."""
    model = model.to(dtype).eval()
    kwargs = {k: (v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v) for k, v in kwargs.items()}
    ref = _run(model, "native", kwargs)
    assert torch.isfinite(ref).all()
    tol = F32_TOL if dtype == torch.float32 else BF16_TOL
    if mask_kwarg is not None and dtype == torch.float32:
        unmasked = _run(model, "native", {k: v for k, v in kwargs.items() if k != mask_kwarg})
        assert _rel_err(unmasked, ref) > 100 * tol, "the padding mask has no effect on this model"
    errs = {}
    for b in backends:
        before = dict(calls)
        got = _run(model, b, kwargs)
        key = "dense" if b == "attn" else "varlen"
        assert calls[key] > before[key], f"backend {b} did not reach attn"
        errs[b] = _rel_err(got, ref)
        assert errs[b] < tol, f"{b} {dtype}: relative max error {errs[b]:.3g} >= {tol}"
    return errs


def test_registered():
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry

    assert AttentionBackendName("attn") in _AttentionBackendRegistry._backends
    assert AttentionBackendName("attn_varlen") in _AttentionBackendRegistry._backends
    assert "attn" in {m.value for m in AttentionBackendName.__members__.values()}
    assert ad.register() == ("attn", "attn_varlen")  # idempotent
    q = torch.randn(1, 3, 2, 8)
    with attention_backend("attn"):
        out = dispatch_attention_fn(q, q, q)
    ref = torch.nn.functional.scaled_dot_product_attention(*(q.transpose(1, 2),) * 3).transpose(1, 2)
    assert (out - ref).abs().max() < 1e-5


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------
def _text_mask(batch, s_txt, valid):
    m = torch.zeros(batch, s_txt, dtype=torch.bool)
    for b, n in enumerate(valid):
        m[b, :n] = True
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [False, True])
def test_flux_style(calls, dtype, padded):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(0)
    model = FluxTransformer2DModel(patch_size=1, in_channels=8, num_layers=2, num_single_layers=2,
                                   attention_head_dim=16, num_attention_heads=3, joint_attention_dim=24,
                                   pooled_projection_dim=16, axes_dims_rope=(4, 6, 6))
    B, s_img, s_txt = 2, 48, 12
    kw = dict(hidden_states=torch.randn(B, s_img, 8), encoder_hidden_states=torch.randn(B, s_txt, 24),
              pooled_projections=torch.randn(B, 16), timestep=torch.tensor([0.3, 0.7]),
              img_ids=torch.randn(s_img, 3), txt_ids=torch.zeros(s_txt, 3))
    if padded:  # joint sequence = [text, image]; padded text keys hidden from every query
        tm = _text_mask(B, s_txt, [12, 5])
        kw["joint_attention_kwargs"] = {"attention_mask": torch.cat([tm, torch.ones(B, s_img, dtype=torch.bool)], 1)}
    errs = _check(model, kw, calls, dtype, mask_kwarg="joint_attention_kwargs" if padded else None)
    print(f"\n[flux {dtype} padded={padded}] rel max err {errs}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [False, True])
def test_sd3_style(calls, dtype, padded):
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(1)
    model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=3,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                  caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
                                  pos_embed_max_size=16, qk_norm="rms_norm")
    assert ad.use_dispatcher(model) == 3
    B, s_txt = 2, 10
    kw = dict(hidden_states=torch.randn(B, 4, 8, 8), encoder_hidden_states=torch.randn(B, s_txt, 24),
              pooled_projections=torch.randn(B, 16), timestep=torch.tensor([10.0, 500.0]))
    if padded:  # SD3 joint sequence = [image (16 patches), text]
        tm = _text_mask(B, s_txt, [10, 3])
        kw["joint_attention_kwargs"] = {"attention_mask": torch.cat([torch.ones(B, 16, dtype=torch.bool), tm], 1)}
    errs = _check(model, kw, calls, dtype, mask_kwarg="joint_attention_kwargs" if padded else None)
    print(f"\n[sd3 {dtype} padded={padded}] rel max err {errs}")


def test_sd3_processor_matches_diffusers_own():
    """use_dispatcher's processor with the native backend equals diffusers' JointAttnProcessor2_0."""
    from diffusers import SD3Transformer2DModel

    torch.manual_seed(2)
    model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                  caption_projection_dim=32, pooled_projection_dim=16, out_channels=4,
                                  pos_embed_max_size=16).eval()
    kw = dict(hidden_states=torch.randn(1, 4, 8, 8), encoder_hidden_states=torch.randn(1, 7, 24),
              pooled_projections=torch.randn(1, 16), timestep=torch.tensor([100.0]))
    with torch.no_grad():
        own = model(**kw, return_dict=False)[0]
        ad.use_dispatcher(model)
        ours = model(**kw, return_dict=False)[0]
    assert (own - ours).abs().max() < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_wan_style_video(calls, dtype):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(3)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16,
                                  in_channels=4, out_channels=4, text_dim=24, freq_dim=32, ffn_dim=64,
                                  num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                  rope_max_seq_len=32)
    kw = dict(hidden_states=torch.randn(2, 4, 3, 8, 8), timestep=torch.tensor([100, 700]),
              encoder_hidden_states=torch.randn(2, 9, 24))
    errs = _check(model, kw, calls, dtype)
    print(f"\n[wan {dtype}] rel max err {errs}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qwenimage_style_text_mask(calls, dtype):
    """QwenImage builds the joint padding mask itself from encoder_hidden_states_mask."""
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(4)
    model = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=24,
                                        axes_dims_rope=(4, 6, 6))
    B, s_txt, h, w = 2, 10, 4, 4
    kw = dict(hidden_states=torch.randn(B, h * w, 16), encoder_hidden_states=torch.randn(B, s_txt, 24),
              encoder_hidden_states_mask=_text_mask(B, s_txt, [10, 4]), timestep=torch.tensor([0.2, 0.9]),
              img_shapes=[[(1, h, w)]] * B)
    errs = _check(model, kw, calls, dtype, mask_kwarg="encoder_hidden_states_mask")
    print(f"\n[qwenimage {dtype}] rel max err {errs}")


# ------------------------------------------------------------------------------------------------
# the backend functions directly
# ------------------------------------------------------------------------------------------------
def _sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    rep = q.shape[2] // k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.repeat_interleave(rep, 2).transpose(1, 2), v.repeat_interleave(rep, 2).transpose(1, 2)
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, is_causal=is_causal,
                                                            scale=scale).transpose(1, 2)


@pytest.mark.parametrize("kind", ["none", "kpm_bool", "kpm_float", "bool_4d", "float_3d", "bool_2d_sq_sk",
                                  "causal", "holes"])
def test_backend_masks(kind):
    torch.manual_seed(5)
    B, Sq, Sk, H, Hkv, D = 2, 9, 13, 4, 2, 16
    q, k, v = torch.randn(B, Sq, H, D), torch.randn(B, Sk, Hkv, D), torch.randn(B, Sk, Hkv, D)
    lens = torch.tensor([13, 6])
    kpm = torch.arange(Sk)[None] < lens[:, None]
    mask, ref_mask, causal = None, None, False
    if kind == "kpm_bool":
        mask, ref_mask = kpm, kpm[:, None, None]
    elif kind == "kpm_float":
        mask = torch.where(kpm, 0.0, float("-inf"))
        ref_mask = mask[:, None, None]
    elif kind == "bool_4d":
        mask = torch.rand(B, 1, Sq, Sk) > 0.4
        mask[..., 0] = True
        ref_mask = mask
    elif kind == "float_3d":  # right-aligned as torch SDPA: [1, Sq, Sk] broadcasts over batch and heads
        mask = torch.randn(1, Sq, Sk)
        ref_mask = mask
    elif kind == "bool_2d_sq_sk":
        mask = torch.rand(Sq, Sk) > 0.3
        mask[:, 0] = True
        ref_mask = mask
    elif kind == "causal":
        causal = True
        k, v = k[:, :Sq], v[:, :Sq]
    elif kind == "holes":
        mask = torch.rand(B, Sk) > 0.4
        mask[:, 0] = True
        ref_mask = mask[:, None, None]
    ref = _sdpa(q, k, v, ref_mask, causal, 0.2)
    out = ad.attn_backend(q, k, v, attn_mask=mask, is_causal=causal, scale=0.2)
    assert out.shape == ref.shape and (out - ref).abs().max() < 1e-5, kind
    if kind in ("none", "kpm_bool", "holes", "causal"):  # the varlen route takes per-key masks only
        out = ad.attn_varlen_backend(q, k, v, attn_mask=mask, is_causal=causal, scale=0.2)
        assert (out - ref).abs().max() < 1e-5, kind
    out, lse = ad.attn_backend(q, k, v, attn_mask=mask, is_causal=causal, scale=0.2, return_lse=True)
    assert lse.shape == (B, Sq, H)
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k.repeat_interleave(2, 2)) * 0.2
    if ref_mask is not None:
        m = ref_mask.expand(B, H, Sq, k.shape[1])
        logits = logits.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else logits + m
    if causal:
        logits = logits.masked_fill(~torch.ones(Sq, Sq, dtype=torch.bool).tril(), float("-inf"))
    assert (lse - torch.logsumexp(logits, -1).permute(0, 2, 1)).abs().max() < 1e-4


def test_backend_bad_inputs():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(NotImplementedError):
        ad.attn_backend(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError):
        ad.attn_backend(q[0], q[0], q[0])
    with pytest.raises(ValueError):  # 3 heads do not share 2 kv heads
        ad.attn_backend(torch.randn(1, 4, 3, 8), q, q)
    with pytest.raises(ValueError):  # the varlen route needs a bool mask (as diffusers' flash_varlen)
        ad.attn_varlen_backend(q, q, q, attn_mask=torch.zeros(1, 4))
