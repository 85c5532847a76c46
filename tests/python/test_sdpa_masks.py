"""torch SDPA / diffusers-style masks through the Python API: a float ``mask`` is additive
(params.additive_mask), a bool one keeps keys, both broadcast over any size-1 dimension of
[batch, num_heads, seq_q, seq_k]; -inf hides a key, large finite negatives stay finite; the padded
self-attention route accepts them; bad masks raise the library's errors naming the argument."""

import numpy as np
import pytest

import attn
from attn import diffusion as D
from conftest import needs_ml_dtypes, needs_torch


def sdpa_ref(q, k, v, *, bias=None, keep=None, causal=False, scale=None):
    """float64 torch-SDPA semantics, BSND: q [B, Sq, H, D], k/v [B, Sk, Hk, D]; bias/keep broadcastable to
    [B, H, Sq, Sk]. A row with no visible key gives out 0 and LSE -inf (attn's convention)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    kk, vv = np.repeat(k, h // hk, axis=2), np.repeat(v, h // hk, axis=2)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    vis = np.ones(s.shape, bool)
    if causal:
        vis &= (np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq)[None, None]
    if keep is not None:
        vis &= np.broadcast_to(np.asarray(keep, bool), s.shape)
    if bias is not None:
        bb = np.broadcast_to(np.asarray(bias, np.float64), s.shape)
        vis &= bb != -np.inf
        s = s + np.where(vis, bb, 0.0)
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", np.divide(p, den, out=np.zeros_like(p), where=den > 0), vv)
    with np.errstate(divide="ignore"):
        lse = np.where(den[..., 0] > 0, np.log(den[..., 0]) + m[..., 0], -np.inf)
    return out, lse


def _qkv(rng, b=2, sq=9, sk=13, h=4, hk=2, d=32, dtype=np.float32):
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hk, d)).astype(dtype)
    return q, k, v


def _bias(rng, shape, p_ninf=0.2, dtype=np.float32):
    x = rng.uniform(-3, 3, shape)
    x[rng.random(shape) < p_ninf] = -np.inf
    return x.astype(dtype)


@pytest.mark.parametrize("shape", [(2, 1, 1, 13), (9, 13), (13,), (2, 4, 9, 13), (1, 4, 1, 1), (4, 9, 1),
                                   (2, 1, 9, 13)])
def test_float_mask_is_additive_and_broadcasts(rng, ctx1, shape):
    q, k, v = _qkv(rng)
    bias = _bias(rng, shape)
    out, lse = attn.attention(q, k, v, mask=bias, return_lse=True, ctx=ctx1)
    want, want_lse = sdpa_ref(q, k, v, bias=bias)
    np.testing.assert_allclose(out, want, atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=3e-5, rtol=1e-5)
    ref = attn.attention(q, k, v, mask=bias, reference=True)
    np.testing.assert_allclose(out, ref, atol=3e-5, rtol=1e-5)
    # the explicit keyword gives the same bits
    out2 = attn.attention(q, k, v, additive_mask=bias, ctx=ctx1)
    assert np.array_equal(out, out2)


def test_bool_mask_broadcasts_over_seq_q(rng, ctx1):
    q, k, v = _qkv(rng)
    keep = rng.random((2, 1, 1, 13)) < 0.6  # the usual [B, 1, 1, Sk] padding mask
    keep[1, 0, 0, :] = False
    out, lse = attn.attention(q, k, v, mask=keep, causal=True, return_lse=True, ctx=ctx1)
    want, want_lse = sdpa_ref(q, k, v, keep=keep, causal=True)
    np.testing.assert_allclose(out, want, atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=3e-5, rtol=1e-5)
    assert np.all(out[1] == 0) and np.all(lse[1] == -np.inf)
    # a float 0 / -inf mask is the same mask, bit for bit
    bias = np.where(keep, 0.0, -np.inf).astype(np.float32)
    out_f, lse_f = attn.attention(q, k, v, mask=bias, causal=True, return_lse=True, ctx=ctx1)
    assert np.array_equal(out, out_f) and np.array_equal(lse, lse_f)
    # stride-0 broadcast views are read in place
    full = np.broadcast_to(keep, (2, 4, 9, 13))
    assert np.array_equal(attn.attention(q, k, v, mask=full, causal=True, ctx=ctx1), out)


def test_bool_and_additive_together(rng, ctx1):
    q, k, v = _qkv(rng, dtype=np.float16)
    keep = rng.random((9, 13)) < 0.7
    bias = _bias(rng, (2, 1, 9, 13), dtype=np.float16)
    out = attn.attention(q, k, v, mask=keep, additive_mask=bias, ctx=ctx1)
    want, _ = sdpa_ref(q, k, v, keep=keep, bias=bias)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=3e-3, rtol=3e-3)
    with pytest.raises(ValueError, match="additive"):
        attn.attention(q, k, v, mask=bias, additive_mask=bias, ctx=ctx1)


@needs_ml_dtypes
def test_bf16_mask(rng, ctx1):
    import ml_dtypes

    q, k, v = _qkv(rng)
    bias = _bias(rng, (2, 1, 1, 13)).astype(ml_dtypes.bfloat16)
    out = attn.attention(q, k, v, mask=bias, ctx=ctx1)
    want, _ = sdpa_ref(q, k, v, bias=bias.astype(np.float64))
    np.testing.assert_allclose(out, want, atol=3e-5, rtol=1e-5)


def test_neg_inf_rows_and_large_finite_negatives(rng, ctx1):
    q, k, v = _qkv(rng, b=1, sq=5, sk=11)
    bias = np.zeros((5, 11), np.float32)
    bias[0] = -np.inf                                  # sees nothing: out 0, LSE -inf
    bias[1] = -1e30                                    # all huge but finite: the uniform average
    bias[2, ::2] = -1e30                               # mixed: those keys get weight 0
    bias[3] = np.finfo(np.float32).min                 # finfo.min (HF's mask value): finite too
    bias[4, 1:] = -np.inf
    bias[4, 0] = -1e30                                 # one finite key left among -inf ones
    out, lse = attn.attention(q, k, v, mask=bias, return_lse=True, ctx=ctx1)
    assert np.all(np.isfinite(out)) and not np.any(np.isnan(lse))
    assert np.all(out[0, 0] == 0) and np.all(lse[0, :, 0] == -np.inf)
    vv = np.repeat(v[0].astype(np.float64), 2, axis=1)  # [Sk, H, D]
    np.testing.assert_allclose(out[0, 1], vv.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(out[0, 3], vv.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(out[0, 4], vv[0], atol=1e-6)
    assert np.all(np.isfinite(lse[0, :, 1:]))
    want, want_lse = sdpa_ref(q, k, v, bias=bias)
    np.testing.assert_allclose(out[0, :3], want[0, :3], atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(lse[0, :, 1], want_lse[0, :, 1], rtol=1e-5)


def test_padded_route_with_masks(rng, ctx1):
    q, k, v = _qkv(rng, b=2, sq=12, sk=12, h=4, hk=4)
    kpm = rng.random((2, 12)) < 0.7
    kpm[0, 0] = True
    bias = _bias(rng, (2, 1, 1, 12), p_ninf=0.1)   # diffusers: attention_mask over the tokens
    keep = rng.random((12, 12)) < 0.8
    out, lse = D.forward_padded(q, k, v, kpm, mask=bias, return_lse=True, ctx=ctx1)
    want, want_lse = sdpa_ref(q, k, v, bias=bias, keep=kpm[:, None, :, None] & kpm[:, None, None, :])
    np.testing.assert_allclose(out, want, atol=3e-5, rtol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=3e-5, rtol=1e-5)
    assert np.all(out[~kpm] == 0)
    out2 = D.forward_padded(q, k, v, kpm, mask=keep, additive_mask=bias, ctx=ctx1)
    want2, _ = sdpa_ref(q, k, v, bias=bias, keep=kpm[:, None, :, None] & kpm[:, None, None, :] & keep)
    np.testing.assert_allclose(out2, want2, atol=3e-5, rtol=1e-5)
    ref2 = D.forward_padded(q, k, v, kpm, mask=keep, additive_mask=bias, reference=True)
    np.testing.assert_allclose(out2, ref2, atol=3e-5, rtol=1e-5)


def test_prescaled_with_additive_mask(rng, ctx1):
    q, k, v = _qkv(rng)
    bias = _bias(rng, (2, 1, 1, 13))
    out = D.forward_prescaled(q, k, v, 2, mask=bias, ctx=ctx1)
    want, _ = sdpa_ref(q, k, v, bias=bias)
    np.testing.assert_allclose(out, want, atol=3e-5, rtol=1e-5)


def test_bad_masks_raise_naming_the_argument(rng, ctx1):
    q, k, v = _qkv(rng)
    out = np.full((2, 9, 4, 32), 7.0, np.float32)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"params.additive_mask: shape\[2\]=3, expected seq_q=9"):
        attn.attention(q, k, v, mask=np.zeros((2, 1, 3, 13), np.float32), out=out, ctx=ctx1)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"params.mask: shape\[0\]=3, expected batch=2"):
        attn.attention(q, k, v, mask=np.ones((3, 1, 1, 13), bool), out=out, ctx=ctx1)
    with pytest.raises(attn.AttnInvalidArgumentError, match="params.additive_mask: ndim=5"):
        attn.attention(q, k, v, mask=np.zeros((1, 2, 1, 9, 13), np.float32), out=out, ctx=ctx1)
    assert np.all(out == 7.0)  # nothing written
    with pytest.raises(attn.AttnUnsupportedError, match="params.additive_mask"):
        D.forward_piecewise(q, k, v, [(0, 4)], mask=np.zeros((13,), np.float32), ctx=ctx1)
    with pytest.raises(attn.AttnUnsupportedError, match="params.additive_mask"):
        D.forward_kv_prefix(q, k, v, 5, mask=np.zeros((13,), np.float32), ctx=ctx1)


@needs_torch
@pytest.mark.parametrize("kind", ["float", "bool"])
def test_matches_torch_sdpa(rng, ctx1, kind):
    import torch

    q, k, v = _qkv(rng, b=2, sq=7, sk=10, h=2, hk=2)
    if kind == "float":
        m = _bias(rng, (2, 1, 1, 10), p_ninf=0.2)
        m[:, :, :, 0] = 0.0  # torch gives NaN for a row that sees nothing; attn gives 0 (documented)
    else:
        m = rng.random((2, 1, 7, 10)) < 0.7
        m[:, :, :, 0] = True
    tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1, 3))) for x in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(m))
    out = attn.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                         mask=torch.from_numpy(m), ctx=ctx1)
    np.testing.assert_allclose(np.asarray(out), want.numpy().transpose(0, 2, 1, 3), atol=3e-5, rtol=1e-5)
