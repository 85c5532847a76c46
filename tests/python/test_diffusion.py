"""Diffusion entries (attn.diffusion): padded, packed, piecewise, kv-prefix, prescaled, quantized, formats."""

import numpy as np
import pytest

import attn
from attn import diffusion as D
from conftest import needs_ml_dtypes, np_attend


def _qkv(rng, b=2, s=12, h=4, d=32):
    return tuple(rng.standard_normal((b, s, h, d)).astype(np.float32) for _ in range(3))


def test_forward_padded_matches_oracle_and_compaction(rng, ctx1):
    q, k, v = _qkv(rng)
    kpm = np.ones((2, 12), bool)
    kpm[0, 9:] = False
    kpm[1, [1, 4]] = False
    out, lse = D.forward_padded(q, k, v, kpm, causal=True, return_lse=True, ctx=ctx1)
    ref = D.forward_padded(q, k, v, kpm, causal=True, reference=True)
    np.testing.assert_allclose(out, ref, atol=2e-5)
    for b in range(2):
        idx = np.nonzero(kpm[b])[0]
        want, _ = np_attend(q[b, idx], k[b, idx], v[b, idx], causal=True)  # compacted index space
        np.testing.assert_allclose(out[b, idx], want, atol=2e-5)
        assert np.all(out[b, ~kpm[b]] == 0) and np.all(lse[b][:, ~kpm[b]] == -np.inf)


def test_forward_packed_and_kv_prefix(rng, ctx1):
    q, k, v = _qkv(rng, b=1, s=10)
    cu = np.array([0, 4, 10], np.int32)
    out = D.forward_packed(q, k, v, cu, cu, causal=True, ctx=ctx1)
    want = attn.attention_varlen(q[0], k[0], v[0], cu, cu, causal=True, ctx=ctx1)
    np.testing.assert_array_equal(out[0], want)
    o = D.forward_kv_prefix(q, k, v, 6, ctx=ctx1)
    np.testing.assert_array_equal(o, attn.attention(q, k[:, :6], v[:, :6], ctx=ctx1))


def test_forward_piecewise(rng, ctx1):
    q, k, v = _qkv(rng, b=1, s=16)
    spans = [(2, 6), (10, 13)]
    out = D.forward_piecewise(q, k, v, spans, ctx=ctx1)
    ref = D.forward_piecewise(q, k, v, spans, reference=True)
    keep = np.tril(np.ones((16, 16), bool))
    for a, e in spans:
        keep[a:e, :e] = True
    want, _ = np_attend(q[0], k[0], v[0], keep=keep)
    np.testing.assert_allclose(out[0], want, atol=2e-5)
    np.testing.assert_allclose(ref[0], want, atol=1e-6)
    with pytest.raises(attn.AttnInvalidArgumentError, match="spans"):
        D.forward_piecewise(q, k, v, [(6, 8), (2, 4)], ctx=ctx1)


def test_forward_prescaled_exact(rng, ctx1):
    q, k, v = _qkv(rng)
    np.testing.assert_array_equal(D.forward_prescaled(q, k, v, 3, ctx=ctx1), attn.attention(q, k, v, ctx=ctx1))


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "mxfp8", "mxfp4"])
def test_forward_quant(rng, ctx1, fmt):
    q, k, v = _qkv(rng, d=64)
    out = D.forward_quant(q, k, v, fmt, ctx=ctx1)
    ref = D.forward_quant(q, k, v, fmt, reference=True)
    exact = attn.attention(q, k, v, ctx=ctx1)
    if D.quant_kernels(ctx1) in ("avx512bf16", "amx"):  # P rounded to bf16: 4e-3·max|v| + 4e-3·|out| (DIFFUSION.md §5)
        np.testing.assert_allclose(out, ref, atol=1e-4 + 4e-3 * np.abs(v).max(), rtol=4e-3)
    else:  # float32 P: the fake-quantization result within float32 tolerance
        np.testing.assert_allclose(out, ref, atol=1e-4)
    err = np.abs(out - exact).max()
    assert 0 < err < (1.0 if fmt == "mxfp4" else 0.15)  # lossy, but bounded
    with pytest.raises(attn.AttnUnsupportedError, match="causal"):
        D.forward_quant(q, k, v, fmt, causal=True, ctx=ctx1)


@pytest.mark.parametrize("kw, err, match", [
    (dict(q_block_rows=2**40), OverflowError, "q_block_rows"),
    (dict(kv_block_rows=2**31), OverflowError, "kv_block_rows"),
    (dict(rotation_seed=-1), OverflowError, "rotation_seed"),
    (dict(rotation_seed=2**32), OverflowError, "rotation_seed"),
    (dict(q_block_rows=1.5), TypeError, "q_block_rows"),
    (dict(q_block_rows=True), TypeError, "q_block_rows"),
    (dict(kv_block_rows=0), attn.AttnInvalidArgumentError, "kv_block_rows"),
])
def test_forward_quant_bad_params_named(rng, ctx1, kw, err, match):
    q, k, v = _qkv(rng, d=64)
    out = np.full_like(q, 7.0)
    with pytest.raises(err, match=match):
        D.forward_quant(q, k, v, "fp8_e4m3", out=out, ctx=ctx1, **kw)
    assert (out == 7.0).all()  # nothing written


def test_forward_quant_shape_error_names_the_entry(rng, ctx1):
    q, k, v = _qkv(rng, d=64)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"^attn_forward_quant: .*q: ndim=3"):
        D.forward_quant(q[0], k, v, "fp8_e4m3", ctx=ctx1)


def test_forward_quant_mxfp4_worst_rounding(ctx1):
    """The worst case of MXFP4's P as bytes per 32-key block (DIFFUSION.md §5): one dominant key per block and
    31 keys whose P sits just under half a byte unit, all rounding the same way, V all ones. The output stays
    within the stated bound max|v|/8 (plus the bf16 kernels' 4e-3·max|v| + 4e-3·|out|) of the oracle."""
    q = np.zeros((1, 1, 1, 32), np.float32)
    q[..., 0] = 1
    k = np.zeros((1, 64, 1, 32), np.float32)
    k[..., 0] = 2
    k[0, ::32, 0, 0] = 4
    v = np.ones((1, 64, 1, 32), np.float32)
    scale = float(np.log(128 / 0.49) / 2)  # the small keys' P: 0.49 of the unit 2^-7 of the block's P = 1
    out = D.forward_quant(q, k, v, "mxfp4", rotate=False, softmax_scale=scale, ctx=ctx1)
    ref = D.forward_quant(q, k, v, "mxfp4", rotate=False, softmax_scale=scale, reference=True)
    np.testing.assert_allclose(out, ref, atol=1 / 8 + 4e-3 + 1e-4, rtol=4e-3)


@needs_ml_dtypes
def test_formats_match_ml_dtypes():
    import ml_dtypes

    x = np.array([0.0, 1.0, -2.5, 448.0, 1000.0, 3e-3, -0.3125], np.float32)
    codes = D.quantize_fp8(x, 1.0, "e4m3")
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(D.dequantize_fp8(codes, 2.0), want.view(ml_dtypes.float8_e4m3fn).astype(np.float32) * 2)
    assert D.fp8_from_float(1.0) == 0x38 and D.fp8_to_float(0x38) == 1.0
    assert D.fp4_e2m1_to_float(D.fp4_e2m1_from_float(3.0)) == 3.0 and D.e8m0_to_float(127) == 1.0
    e, s = D.quantize_mx(np.linspace(-1, 1, 70), "e2m1")
    assert e.size == 35 and s.size == 3
    back = D.dequantize_mx(e, s, 70, "e2m1")
    assert np.abs(back - np.linspace(-1, 1, 70)).max() <= 0.25


def test_hadamard_rotation_is_orthogonal(rng):
    x = rng.standard_normal((5, 64)).astype(np.float32)
    y = D.hadamard_rotate(x)
    s = D.hadamard_signs(64)
    assert set(np.unique(s)) <= {-1, 1}
    np.testing.assert_allclose(x @ x.T, y @ y.T, atol=1e-4)
