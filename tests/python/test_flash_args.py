"""The peers' argument sets, each against a NumPy float64 reference written here:

flash-attn: per-batch ALiBi slopes [batch, nheads] in flash_attn_varlen_func / flash_attn_with_kvcache,
cache_leftpad, rotary_cos/rotary_sin/rotary_interleaved, the qkv/kv-packed functions (dense and varlen);
vLLM: merge_attn_states with +inf LSE, prefill_tokens_with_context and output_scale, swap_blocks with
block_size_in_bytes."""

import inspect
import math

import numpy as np
import pytest

import attn
from attn.vllm import ops as vllm_ops
from conftest import HAVE_ML_DTYPES, needs_ml_dtypes, needs_torch


# ------------------------------------------------------------------------------------------------
# float64 references
# ------------------------------------------------------------------------------------------------
def ref_attend(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, scale=None):
    """q [sq, h, d], k [sk, hk, d], v [sk, hk, dv] -> out [sq, h, dv], lse [h, sq] (float64); positions
    bottom-right (query i at sk - sq + i); masked keys removed; a row without keys: out 0, lse -inf."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    sq, h, d = q.shape
    sk, hk = k.shape[:2]
    kk, vv = np.repeat(k, h // hk, axis=1), np.repeat(v, h // hk, axis=1)
    s = np.einsum("ihd,jhd->hij", q, kk) * (1.0 / math.sqrt(d) if scale is None else scale)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(sq)[:, None] + sk - sq
    j = np.arange(sk)[None, :]
    if alibi is not None:
        s = s - np.asarray(alibi, np.float64)[:, None, None] * np.abs(i - j)[None]
    keep = np.ones((sq, sk), bool)
    if causal:
        keep &= j <= i
    if window[0] >= 0:
        keep &= j >= i - window[0]
    if window[1] >= 0:
        keep &= j <= i + window[1]
    s = np.where(keep[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True) if sk else np.full((h, sq, 1), -np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(axis=-1)
    out = np.einsum("hij,jhd->ihd", p / np.where(den > 0, den, 1.0)[..., None], vv)
    lse = np.where(den > 0, np.log(np.where(den > 0, den, 1.0)) + m[..., 0], -np.inf)
    return out, lse


def ref_rotary(x, cos, sin, pos, interleaved):
    """flash-attn's apply_rotary_emb in float64: x [..., seqlen, nheads, headdim] with positions
    pos [..., seqlen]; feature pairs (2j, 2j+1) when interleaved, else (j, j + r/2), r = 2·cos.shape[1]."""
    x = np.asarray(x, np.float64).copy()
    half = cos.shape[1]
    c = np.asarray(cos, np.float64)[pos][..., None, :]
    s = np.asarray(sin, np.float64)[pos][..., None, :]
    if interleaved:
        a, b = x[..., 0:2 * half:2].copy(), x[..., 1:2 * half:2].copy()
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., :half].copy(), x[..., half:2 * half].copy()
        x[..., :half], x[..., half:2 * half] = a * c - b * s, b * c + a * s
    return x


def ref_merge(pa, la, sa, ls):
    """vLLM merge in float64 (+inf LSE = empty = -inf); both empty: out 0, lse -inf."""
    la = np.where(np.isposinf(la), -np.inf, la).astype(np.float64)
    ls = np.where(np.isposinf(ls), -np.inf, ls).astype(np.float64)
    mx = np.maximum(la, ls)
    empty = mx == -np.inf
    mx0 = np.where(empty, 0.0, mx)
    ea, eb = np.exp(la - mx0), np.exp(ls - mx0)
    den = np.where(empty, 1.0, ea + eb)
    wa, wb = (ea / den).T[..., None], (eb / den).T[..., None]
    out = np.where(empty.T[..., None], 0.0, wa * pa.astype(np.float64) + wb * sa.astype(np.float64))
    lse = np.where(empty, -np.inf, np.log(den) + mx0)
    return out, lse


def close(got, want, atol=2e-5):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=atol, rtol=1e-5)


def close_lse(got, want):
    got = np.asarray(got, np.float64)
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], atol=2e-5, rtol=1e-5)


def randn(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------------------------------------
# Packed q/k/v
# ------------------------------------------------------------------------------------------------
def test_packed_signatures_follow_flash_attn():
    common = ["dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
              "deterministic", "return_attn_probs"]
    for fn, head in ((attn.flash_attn_qkvpacked_func, ["qkv"]), (attn.flash_attn_kvpacked_func, ["q", "kv"]),
                     (attn.flash_attn_varlen_qkvpacked_func, ["qkv", "cu_seqlens", "max_seqlen"]),
                     (attn.flash_attn_varlen_kvpacked_func,
                      ["q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"])):
        p = inspect.signature(fn).parameters
        assert list(p)[:len(head) + len(common)] == head + common
        assert p["causal"].default is False and p["window_size"].default == (-1, -1)


def test_qkvpacked_and_kvpacked(rng, ctx1):
    b, s, h, hk, d = 2, 9, 4, 2, 32
    qkv = randn(rng, (b, s, 3, h, d))
    slopes = rng.random((b, h)).astype(np.float32)
    out, lse, probs = attn.flash_attn_qkvpacked_func(qkv, causal=True, window_size=(3, 0), softcap=4.0,
                                                     alibi_slopes=slopes, return_attn_probs=True, ctx=ctx1)
    assert probs is None and out.shape == (b, s, h, d) and lse.shape == (b, h, s)
    for i in range(b):
        want, wl = ref_attend(qkv[i, :, 0], qkv[i, :, 1], qkv[i, :, 2], causal=True, window=(3, 0),
                              softcap=4.0, alibi=slopes[i])
        close(out[i], want)
        close_lse(lse[i], wl)
    # the views give the same bits as separate arrays
    same = attn.flash_attn_func(qkv[:, :, 0].copy(), qkv[:, :, 1].copy(), qkv[:, :, 2].copy(), causal=True,
                                window_size=(3, 0), softcap=4.0, alibi_slopes=slopes, ctx=ctx1)
    np.testing.assert_array_equal(out, same)

    q = randn(rng, (b, 5, h, d))
    kv = randn(rng, (b, 11, 2, hk, d))
    out = attn.flash_attn_kvpacked_func(q, kv, causal=True, ctx=ctx1)
    for i in range(b):
        want, _ = ref_attend(q[i], kv[i, :, 0], kv[i, :, 1], causal=True)
        close(out[i], want)
    with pytest.raises(ValueError, match="qkv"):
        attn.flash_attn_qkvpacked_func(kv)


def test_varlen_packed(rng, ctx1):
    h, hk, d = 4, 1, 16
    cu = np.array([0, 3, 3, 10], np.int32)
    qkv = randn(rng, (12, 3, h, d))  # 2 rows past cu[-1]
    out, lse = attn.flash_attn_varlen_qkvpacked_func(qkv, cu, 7, causal=True, return_softmax_lse=True,
                                                     ctx=ctx1)
    assert out.shape == (12, h, d) and lse.shape == (h, 12)
    for a, e in zip(cu[:-1], cu[1:]):
        want, wl = ref_attend(qkv[a:e, 0], qkv[a:e, 1], qkv[a:e, 2], causal=True)
        close(out[a:e], want)
        close_lse(lse[:, a:e], wl)
    assert np.all(out[10:] == 0) and np.all(np.isneginf(lse[:, 10:]))

    cu_q = np.array([0, 2, 6], np.int32)
    cu_k = np.array([0, 7, 9], np.int32)
    q = randn(rng, (6, h, d))
    kv = randn(rng, (9, 2, hk, d))
    slopes = rng.random((2, h)).astype(np.float32)
    out = attn.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 4, 7, causal=True, alibi_slopes=slopes,
                                               ctx=ctx1)
    for i in range(2):
        want, _ = ref_attend(q[cu_q[i]:cu_q[i + 1]], kv[cu_k[i]:cu_k[i + 1], 0], kv[cu_k[i]:cu_k[i + 1], 1],
                             causal=True, alibi=slopes[i])
        close(out[cu_q[i]:cu_q[i + 1]], want)


# ------------------------------------------------------------------------------------------------
# Per-batch ALiBi slopes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (True, (2, 0)),
                                           (False, (1, 3))])
def test_varlen_per_batch_alibi(rng, ctx1, causal, window):
    h, hk, d = 4, 2, 32
    cu_q = np.array([0, 3, 3, 8, 9], np.int32)  # sequence 1 has no queries
    cu_k = np.array([0, 6, 10, 15, 15], np.int32)  # sequence 3 has no keys
    q, k, v = randn(rng, (9, h, d)), randn(rng, (15, hk, d)), randn(rng, (15, hk, d))
    slopes = rng.random((4, h)).astype(np.float32)
    out, lse = attn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, causal=causal, window_size=window,
                                           alibi_slopes=slopes, softcap=5.0, return_softmax_lse=True,
                                           ctx=ctx1)
    for i in range(4):
        qs, ks = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        want, wl = ref_attend(q[qs], k[ks], v[ks], causal=causal, window=window, softcap=5.0,
                              alibi=slopes[i])
        close(out[qs], want)
        close_lse(lse[:, qs], wl)
    # paged: the same keys in blocks of 4 of one [2, num_blocks, ...] cache
    bs, nb = 4, 12
    kv = np.full((2, nb, bs, hk, d), np.nan, np.float32)
    table = np.zeros((4, 4), np.int32)
    free = list(rng.permutation(nb))
    for i in range(4):
        n = cu_k[i + 1] - cu_k[i]
        for j in range((n + bs - 1) // bs):
            blk = free.pop()
            table[i, j] = blk
            rows = slice(cu_k[i] + j * bs, min(cu_k[i] + (j + 1) * bs, cu_k[i + 1]))
            m = rows.stop - rows.start
            kv[0, blk, :m], kv[1, blk, :m] = k[rows], v[rows]
    out2, lse2 = attn.flash_attn_varlen_func(q, kv[0], kv[1], cu_q, cu_k, causal=causal, window_size=window,
                                             alibi_slopes=slopes, softcap=5.0, block_table=table,
                                             return_softmax_lse=True, ctx=ctx1)
    close(out2, np.asarray(out, np.float64))
    close_lse(lse2, np.asarray(lse, np.float64))
    with pytest.raises(ValueError, match="alibi_slopes"):
        attn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, alibi_slopes=slopes[:3])


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_per_batch_alibi(rng, ctx1, paged):
    b, sc, h, hk, d, sq = 3, 16, 4, 2, 32, 2
    seqlens = np.array([3, 0, 9], np.int32)
    hist_k, hist_v = randn(rng, (b, sc, hk, d)), randn(rng, (b, sc, hk, d))
    q, kn, vn = randn(rng, (b, sq, h, d)), randn(rng, (b, sq, hk, d)), randn(rng, (b, sq, hk, d))
    slopes = rng.random((b, h)).astype(np.float32)
    if paged:
        bs = 4
        kv = np.zeros((2, b * sc // bs, bs, hk, d), np.float32)
        table = rng.permutation(b * sc // bs).astype(np.int32).reshape(b, sc // bs)
        for i in range(b):
            kv[0][table[i]] = hist_k[i].reshape(-1, bs, hk, d)
            kv[1][table[i]] = hist_v[i].reshape(-1, bs, hk, d)
        extra = dict(block_table=table)
    else:
        kv = np.stack([hist_k, hist_v])
        extra = {}
    out, lse = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, vn, cache_seqlens=seqlens, causal=True,
                                            alibi_slopes=slopes, return_softmax_lse=True, ctx=ctx1, **extra)
    for i in range(b):
        n = seqlens[i]
        keys = np.concatenate([hist_k[i, :n], kn[i]])
        vals = np.concatenate([hist_v[i, :n], vn[i]])
        want, wl = ref_attend(q[i], keys, vals, causal=True, alibi=slopes[i])
        close(out[i], want)
        close_lse(lse[i], wl)


# ------------------------------------------------------------------------------------------------
# cache_leftpad
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("causal,window,per_batch", [(True, (-1, -1), True), (False, (-1, -1), False),
                                                     (True, (3, 0), False)])
def test_kvcache_leftpad(rng, ctx1, paged, causal, window, per_batch):
    b, sc, h, hk, d, sq, sn = 3, 16, 4, 2, 32, 3, 2
    seqlens = np.array([7, 4, 12], np.int32)  # counts the left padding, as flash-attn's cache_seqlens
    leftpad = np.array([2, 4, 0], np.int32)  # sequence 1: only the appended keys remain
    hist_k, hist_v = randn(rng, (b, sc, hk, d)), randn(rng, (b, sc, hk, d))
    for i in range(b):  # padding that must never be read
        hist_k[i, :leftpad[i]] = np.nan
        hist_v[i, :leftpad[i]] = np.nan
    q, kn, vn = randn(rng, (b, sq, h, d)), randn(rng, (b, sn, hk, d)), randn(rng, (b, sn, hk, d))
    slopes = rng.random((b, h)).astype(np.float32) if per_batch else rng.random(h).astype(np.float32)
    if paged:
        bs = 4
        kv = np.zeros((2, b * sc // bs, bs, hk, d), np.float32)
        table = rng.permutation(b * sc // bs).astype(np.int32).reshape(b, sc // bs)
        for i in range(b):
            kv[0][table[i]] = hist_k[i].reshape(-1, bs, hk, d)
            kv[1][table[i]] = hist_v[i].reshape(-1, bs, hk, d)
        extra = dict(block_table=table)
    else:
        kv = np.stack([hist_k, hist_v])
        extra = {}
    out, lse = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, vn, cache_seqlens=seqlens,
                                            cache_leftpad=leftpad, causal=causal, window_size=window,
                                            alibi_slopes=slopes, return_softmax_lse=True, ctx=ctx1, **extra)
    assert not np.isnan(out).any()
    for i in range(b):
        n, lp = seqlens[i], leftpad[i]
        cache_k = kv[0][table[i]].reshape(sc, hk, d) if paged else kv[0, i]
        np.testing.assert_array_equal(cache_k[n:n + sn], kn[i])  # written at absolute positions
        keys = np.concatenate([hist_k[i, lp:n], kn[i]])
        vals = np.concatenate([hist_v[i, lp:n], vn[i]])
        want, wl = ref_attend(q[i], keys, vals, causal=causal, window=window,
                              alibi=slopes[i] if per_batch else slopes)
        close(out[i], want)
        close_lse(lse[i], wl)


def test_kvcache_leftpad_checks(rng, ctx1):
    kc = np.zeros((2, 8, 1, 16), np.float32)
    q = randn(rng, (2, 1, 1, 16))
    before = kc.copy()
    k1 = randn(rng, (2, 1, 1, 16))
    with pytest.raises(ValueError, match="cache_leftpad"):
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), k1, k1, cache_seqlens=np.array([3, 2], np.int32),
                                     cache_leftpad=np.array([4, 0], np.int32), ctx=ctx1)
    with pytest.raises(ValueError, match="cache_leftpad"):
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), cache_seqlens=2,
                                     cache_leftpad=np.array([0, 0, 0], np.int32), ctx=ctx1)
    np.testing.assert_array_equal(kc, before)  # nothing written
    # every key padded away: out 0, lse -inf
    out, lse = attn.flash_attn_with_kvcache(q, kc, kc.copy(), cache_seqlens=np.array([3, 5], np.int32),
                                            cache_leftpad=np.array([3, 1], np.int32),
                                            return_softmax_lse=True, ctx=ctx1)
    assert np.all(out[0] == 0) and np.all(np.isneginf(lse[0])) and np.all(np.isfinite(lse[1]))


# ------------------------------------------------------------------------------------------------
# Rotary embedding
# ------------------------------------------------------------------------------------------------
ROTARY_CASES = [
    # interleaved, rotary_dim, causal, window, paged, leftpad, dtype
    (True, 32, True, (-1, -1), False, False, "float32"),
    (False, 32, True, (-1, -1), False, False, "float32"),
    (True, 16, False, (-1, -1), False, False, "float32"),  # partial rotary; queries all at cache_seqlens
    (False, 16, False, (2, 1), True, False, "float32"),  # local: queries at consecutive positions
    (False, 32, True, (-1, -1), True, True, "float32"),
    (True, 16, True, (-1, -1), False, True, "float16"),
]


@pytest.mark.parametrize("interleaved,rdim,causal,window,paged,use_leftpad,dtype", ROTARY_CASES)
def test_kvcache_rotary(rng, ctx1, interleaved, rdim, causal, window, paged, use_leftpad, dtype):
    b, sc, h, hk, d, sq, sn = 3, 16, 4, 2, 32, 3, 3
    dt = np.dtype(dtype)
    seqlens = np.array([5, 0, 10], np.int32)
    leftpad = np.array([1, 0, 4], np.int32) if use_leftpad else None
    hist_k, hist_v = randn(rng, (b, sc, hk, d), dt), randn(rng, (b, sc, hk, d), dt)
    q, kn, vn = randn(rng, (b, sq, h, d), dt), randn(rng, (b, sn, hk, d), dt), randn(rng, (b, sn, hk, d), dt)
    kn_before = kn.copy()
    angle = rng.random((sc, rdim // 2)) * 2 * np.pi
    cos, sin = np.cos(angle).astype(dt), np.sin(angle).astype(dt)
    if paged:
        bs = 4
        kv = np.zeros((2, b * sc // bs, bs, hk, d), dt)
        table = rng.permutation(b * sc // bs).astype(np.int32).reshape(b, sc // bs)
        for i in range(b):
            kv[0][table[i]] = hist_k[i].reshape(-1, bs, hk, d)
            kv[1][table[i]] = hist_v[i].reshape(-1, bs, hk, d)
        extra = dict(block_table=table)
    else:
        kv = np.stack([hist_k, hist_v])
        extra = {}
    out = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, vn, rotary_cos=cos, rotary_sin=sin,
                                       cache_seqlens=seqlens, cache_leftpad=leftpad, causal=causal,
                                       window_size=window, rotary_interleaved=interleaved, ctx=ctx1, **extra)
    np.testing.assert_array_equal(kn, kn_before)  # k itself is not modified
    local = window != (-1, -1)
    tol = 2e-5 if dt == np.float32 else 3e-3
    for i in range(b):
        n = seqlens[i]
        kpos = n + np.arange(sn)
        qpos = n + (np.arange(sq) if causal or local else np.zeros(sq, np.int64))
        k_ro = ref_rotary(kn[i], cos, sin, kpos, interleaved)
        q_ro = ref_rotary(q[i], cos, sin, qpos, interleaved)
        cache_k = kv[0][table[i]].reshape(sc, hk, d) if paged else kv[0, i]
        np.testing.assert_allclose(cache_k[n:n + sn].astype(np.float64), k_ro, atol=tol * 5, rtol=tol)
        np.testing.assert_array_equal(cache_k[n:n + sn, :, rdim:], kn[i, :, :, rdim:])  # pass-through
        # the reference attends with the rounded (stored) rotated values, as flash-attn's own test does
        k_ro, q_ro = k_ro.astype(dt), q_ro.astype(dt)
        lp = 0 if leftpad is None else leftpad[i]
        keys = np.concatenate([hist_k[i, lp:n], k_ro])
        vals = np.concatenate([hist_v[i, lp:n], vn[i]])
        want, _ = ref_attend(q_ro, keys, vals, causal=causal, window=window)
        close(out[i], want, atol=tol * 10 if dt != np.float32 else tol)


def test_kvcache_rotary_checks(rng, ctx1):
    kc = np.zeros((1, 8, 1, 16), np.float32)
    q, k1 = randn(rng, (1, 1, 1, 16)), randn(rng, (1, 2, 1, 16))
    cos = np.ones((8, 4), np.float32)
    with pytest.raises(ValueError, match="new k and v"):
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), rotary_cos=cos, rotary_sin=cos, ctx=ctx1)
    with pytest.raises(ValueError, match="together"):
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), k1, k1, rotary_cos=cos, cache_seqlens=0, ctx=ctx1)
    with pytest.raises(ValueError, match="rotary_cos"):  # rotary_dim > headdim
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), k1, k1, rotary_cos=np.ones((8, 9), np.float32),
                                     rotary_sin=np.ones((8, 9), np.float32), cache_seqlens=0, ctx=ctx1)
    with pytest.raises(ValueError, match="seqlen_ro"):  # positions 6, 7 need 8 rows of cos
        attn.flash_attn_with_kvcache(q, kc, kc.copy(), k1, k1, rotary_cos=cos[:7], rotary_sin=cos[:7],
                                     cache_seqlens=6, ctx=ctx1)
    assert np.all(kc == 0)  # nothing written by any failed call


@needs_torch
def test_torch_tensors_through_new_arguments(ctx1):
    import torch

    g = torch.Generator().manual_seed(3)
    b, sc, h, d = 2, 8, 2, 16
    kv = torch.randn((2, b, sc, h, d), generator=g)
    hist = kv.numpy().copy()
    q, kn = torch.randn((b, 1, h, d), generator=g), torch.randn((b, 1, h, d), generator=g)
    angle = torch.arange(sc * 4.0).reshape(sc, 4) * 0.1
    cos, sin = torch.cos(angle), torch.sin(angle)
    slopes = torch.rand((b, h), generator=g)
    seqlens, leftpad = np.array([2, 3], np.int32), np.array([1, 0], np.int32)
    out, lse = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, kn, rotary_cos=cos, rotary_sin=sin,
                                            cache_seqlens=torch.from_numpy(seqlens),
                                            cache_leftpad=torch.from_numpy(leftpad), alibi_slopes=slopes,
                                            causal=True, return_softmax_lse=True, ctx=ctx1)
    assert isinstance(out, torch.Tensor) and isinstance(lse, torch.Tensor) and lse.shape == (b, h, 1)
    for i in range(b):
        n, lp = seqlens[i], leftpad[i]
        k_ro = ref_rotary(kn[i].numpy(), cos.numpy(), sin.numpy(), np.array([n]), True)
        q_ro = ref_rotary(q[i].numpy(), cos.numpy(), sin.numpy(), np.array([n]), True)
        keys = np.concatenate([hist[0, i, lp:n], k_ro])
        vals = np.concatenate([hist[1, i, lp:n], kn[i].numpy()])
        want, wl = ref_attend(q_ro, keys, vals, causal=True, alibi=slopes[i].numpy())
        close(out[i].numpy(), want)
        close_lse(lse[i].numpy(), wl)
    qkv = torch.randn((b, 5, 3, h, d), generator=g)
    o = attn.flash_attn_qkvpacked_func(qkv, causal=True, ctx=ctx1)
    want, _ = ref_attend(qkv[0, :, 0].numpy(), qkv[0, :, 1].numpy(), qkv[0, :, 2].numpy(), causal=True)
    assert isinstance(o, torch.Tensor)
    close(o[0].numpy(), want)


# ------------------------------------------------------------------------------------------------
# vLLM: merge_attn_states, swap_blocks
# ------------------------------------------------------------------------------------------------
def _states(rng, t=6, h=3, d=16):
    pa, sa = randn(rng, (t, h, d)), randn(rng, (t, h, d))
    la, ls = randn(rng, (h, t)) * 3, randn(rng, (h, t)) * 3
    la[:, 0] = np.inf  # prefix empty (FA2 style)
    ls[:, 1] = np.inf  # suffix empty
    la[:, 2] = ls[:, 2] = np.inf  # both empty
    la[0, 3], ls[1, 3] = -np.inf, np.inf  # mixed forms
    return pa, la, sa, ls


def test_merge_positive_inf_lse_is_empty(rng, ctx1):
    pa, la, sa, ls = _states(rng)
    out, olse = np.full_like(pa, np.nan), np.full_like(la, np.nan)
    assert vllm_ops.merge_attn_states(out, pa, la, sa, ls, olse, ctx=ctx1) is out
    want, wl = ref_merge(pa, la, sa, ls)
    assert not np.isnan(out).any()
    close(out, want)
    close_lse(olse, wl)
    np.testing.assert_array_equal(out[0], sa[0])  # one side empty: exactly the other side
    np.testing.assert_array_equal(out[1], pa[1])
    assert np.all(out[2] == 0) and np.all(np.isneginf(olse[:, 2]))
    # the C API one to one, ctypes path included
    o2, l2 = attn.merge_attn_states(pa, la, sa, ls, return_lse=True, ctx=ctx1)
    np.testing.assert_array_equal(o2, out)
    np.testing.assert_array_equal(l2, olse)


@pytest.mark.parametrize("tokens", [0, 4, 6, 100])
def test_merge_prefill_tokens_with_context(rng, ctx1, tokens):
    pa, la, sa, ls = _states(rng)
    out, olse = np.full_like(pa, np.nan), np.full_like(la, np.nan)
    vllm_ops.merge_attn_states(out, pa, la, sa, ls, olse, prefill_tokens_with_context=tokens, ctx=ctx1)
    n = min(tokens, pa.shape[0])
    want, wl = ref_merge(pa, la, sa, ls)
    close(out[:n], want[:n])
    close_lse(olse[:, :n], wl[:, :n])
    np.testing.assert_array_equal(out[n:], sa[n:])
    np.testing.assert_array_equal(olse[:, n:], np.where(np.isposinf(ls[:, n:]), -np.inf, ls[:, n:]))
    with pytest.raises(ValueError, match="prefill_tokens_with_context"):
        vllm_ops.merge_attn_states(out, pa, la, sa, ls, prefill_tokens_with_context=-1)


@needs_ml_dtypes
@pytest.mark.parametrize("tokens", [None, 3])
def test_merge_output_scale_fp8(rng, ctx1, tokens):
    import ml_dtypes

    pa, la, sa, ls = _states(rng)
    pa *= 300  # some values clamp at the e4m3 maximum 448
    scale = np.array(0.5, np.float32)
    out = np.zeros(pa.shape, ml_dtypes.float8_e4m3fn)
    olse = np.full_like(la, np.nan)
    vllm_ops.merge_attn_states(out, pa, la, sa, ls, olse, prefill_tokens_with_context=tokens,
                               output_scale=scale, ctx=ctx1)
    n = pa.shape[0] if tokens is None else tokens
    want, wl = ref_merge(pa, la, sa, ls)
    want[n:] = sa[n:]
    want = np.clip(want / 0.5, -448, 448)
    got = out.astype(np.float64)
    # one e4m3 rounding (3 mantissa bits: half an ulp is 2^-4 relative) of values that agree in float32
    np.testing.assert_allclose(got, want, rtol=2 ** -4 + 1e-6, atol=2 ** -9)
    assert np.any(np.abs(got) == 448)
    close_lse(olse[:, :n], wl[:, :n])
    with pytest.raises(TypeError, match="float8"):
        vllm_ops.merge_attn_states(np.zeros_like(pa), pa, la, sa, ls, output_scale=scale)


def test_swap_blocks_block_size_in_bytes(rng, ctx1):
    # newer vLLM: raw regions of consecutive blocks (an int8 offload region and a float32 cache)
    src = rng.integers(-100, 100, (6, 96)).astype(np.int8)
    dst = np.zeros((4, 96), np.int8)
    vllm_ops.swap_blocks(src, dst, 96, np.array([[5, 0], [2, 3]], np.int64))
    np.testing.assert_array_equal(dst[0], src[5])
    np.testing.assert_array_equal(dst[3], src[2])
    assert np.all(dst[1:3] == 0)
    cache = randn(rng, (5, 4, 2, 8))  # [num_blocks, block_size, heads, head_size] float32
    host = np.zeros((3, 4, 2, 8), np.float32)
    nbytes = cache[0].nbytes
    vllm_ops.swap_blocks(cache, host, block_size_in_bytes=nbytes, block_mapping=[[4, 1]])
    np.testing.assert_array_equal(host[1], cache[4])
    # half-block granularity: block ids count block_size_in_bytes units
    host2 = np.zeros_like(host)
    vllm_ops.swap_blocks(cache, host2, nbytes // 2, np.array([[9, 0]]))
    np.testing.assert_array_equal(host2[0, :2], cache[4, 2:])
    # ids are checked against each tensor before anything is written
    before = dst.copy()
    with pytest.raises(ValueError, match=r"entry \[1\]\[1\] = 4"):
        vllm_ops.swap_blocks(src, dst, 96, np.array([[0, 1], [1, 4]]))
    np.testing.assert_array_equal(dst, before)
    with pytest.raises(ValueError, match=r"entry \[0\]\[0\] = 6"):
        vllm_ops.swap_blocks(src, dst, 96, np.array([[6, 0]]))
    with pytest.raises(TypeError, match="block_size_in_bytes"):
        vllm_ops.swap_blocks(src, dst, 96.0, np.array([[0, 0]]))
    # the older three-argument form is unchanged
    k = randn(rng, (4, 2, 1, 8))
    kd = np.zeros_like(k)
    vllm_ops.swap_blocks(k, kd, np.array([[3, 0]]), ctx=ctx1)
    np.testing.assert_array_equal(kd[0], k[3])


def test_swap_blocks_refuses_objects_and_misshaped_mappings(ctx1):
    # an object array's bytes are pointers: never copied over; a mapping that is not [num_pairs, 2] is named
    src, dst = np.arange(32, dtype=np.uint8), np.zeros(32, np.uint8)
    d = np.empty(4, object)
    d[:] = [1, 2, 3, 4]
    with pytest.raises(TypeError, match="dst: dtype object"):
        vllm_ops.swap_blocks(src, d, 8, [[1, 0]])
    assert list(d) == [1, 2, 3, 4]
    for bad in ([[1, 0, 2], [3, 0, 1]], [1, 0, 2, 3], [[[1, 0], [2, 3]]], [1, 0, 2]):
        with pytest.raises(ValueError, match="block_mapping"):
            vllm_ops.swap_blocks(src, dst, 8, bad)
    assert not dst.any()
    vllm_ops.swap_blocks(src, dst, 8, np.zeros((0,), np.int64))  # no pairs
    vllm_ops.swap_blocks(src, dst, 8, [[3, 1]])
    np.testing.assert_array_equal(dst[8:16], src[24:32])


@pytest.mark.skipif(not HAVE_ML_DTYPES, reason="ml_dtypes is not installed")
def test_merge_bf16_positive_inf(rng, ctx1):
    import ml_dtypes

    pa, la, sa, ls = _states(rng)
    pb, sb = pa.astype(ml_dtypes.bfloat16), sa.astype(ml_dtypes.bfloat16)
    out = np.zeros_like(pb)
    vllm_ops.merge_attn_states(out, pb, la, sb, ls, ctx=ctx1)
    want, _ = ref_merge(pb.astype(np.float32), la, sb.astype(np.float32), ls)
    np.testing.assert_allclose(out.astype(np.float64), want, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_empty_cache_dimension(paged):
    """A k_cache whose block size (or, without a block table, sequence length) is 0: a ValueError naming
    k_cache, raised before any arithmetic on it (no NumPy division warning)."""
    import warnings

    q = np.zeros((2, 1, 2, 64), np.float32)
    kc = np.zeros((2, 0, 2, 64), np.float32)
    kw = dict(cache_seqlens=np.zeros(2, np.int32))
    if paged:
        kw["block_table"] = np.zeros((2, 1), np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"k_cache: shape\[1\]=0"):
            attn.flash_attn_with_kvcache(q, kc, np.zeros_like(kc), **kw)


@pytest.mark.parametrize("separate", [False, True])
def test_kvcache_negative_block_id_message(separate):
    """A negative block id is refused with the interval written out, from libattn (the caches are halves of one
    tensor) and from the wrapper's own check (two separate caches, copied before libattn sees the ids)."""
    q = np.zeros((1, 1, 2, 16), np.float32)
    kv = np.zeros((2, 4, 8, 1, 16), np.float32)
    kc, vc = (kv[0].copy(), kv[1].copy()) if separate else (kv[0], kv[1])
    bt = np.array([[0, -1]], np.int32)
    with pytest.raises(ValueError, match=r"block_table: entry \[0\]\[1\] = -1 < 0, expected in \[0, num_blocks=4\)"):
        attn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=np.array([12], np.int32), block_table=bt)


def test_kvcache_paged_more_sequences_than_blocks(rng, ctx1):
    """Sequences may share blocks: a paged cache with fewer blocks than sequences is valid (the row check of
    cache_batch_idx is for the non-paged layout only), and gives attn.paged_attention's bits."""
    kv = rng.standard_normal((2, 2, 4, 1, 8)).astype(np.float32)
    q = rng.standard_normal((3, 1, 2, 8)).astype(np.float32)
    bt = np.array([[0, 1], [1, 0], [0, 0]], np.int32)
    sl = np.array([5, 3, 2], np.int32)
    got = attn.flash_attn_with_kvcache(q, kv[0], kv[1], cache_seqlens=sl, block_table=bt, ctx=ctx1)
    want = attn.paged_attention(q.reshape(3, 2, 8), kv, np.arange(4, dtype=np.int32), sl, bt, causal=False,
                                ctx=ctx1)
    np.testing.assert_array_equal(got.reshape(3, 2, 8), want)


def test_kvcache_separate_caches_equal_joined_with_leftpad_and_batch_slopes(rng, ctx1):
    """Eight sequences with cache_leftpad, per-batch ALiBi and new keys: two separately allocated caches (read
    through a joined copy, written back) give the bits and the cache contents of the two halves of one tensor.
    (Under AddressSanitizer with PYTHONMALLOC=malloc this also covers the extension's scratch sizing.)"""
    b, sc, hk, d = 8, 16, 2, 8
    both = rng.standard_normal((2, b, sc, hk, d)).astype(np.float32)
    kc, vc = both[0].copy(), both[1].copy()
    q = rng.standard_normal((b, 2, 4, d)).astype(np.float32)
    kn = rng.standard_normal((b, 2, hk, d)).astype(np.float32)
    cs = rng.integers(3, 12, b).astype(np.int32)
    kw = dict(cache_seqlens=cs, cache_leftpad=cs // 3, alibi_slopes=rng.random((b, 4)).astype(np.float32) * 0.1,
              causal=True, return_softmax_lse=True, ctx=ctx1)
    o1, l1 = attn.flash_attn_with_kvcache(q, both[0], both[1], kn, 2 * kn, **kw)
    o2, l2 = attn.flash_attn_with_kvcache(q, kc, vc, kn, 2 * kn, **kw)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(kc, both[0])
    np.testing.assert_array_equal(vc, both[1])


@pytest.mark.parametrize("nbytes", [64, 8192])
def test_swap_blocks_bytes_in_pair_order(rng, nbytes):
    """The byte form copies pairs in order (small blocks go through gathered chunks of 1024 pairs): a dst block
    named twice takes its last pair's source, across chunks too, and in one buffer a pair reads what an earlier
    pair wrote. Compared with the copy loop, pair by pair."""
    def reference(src, dst, bm):
        sb, db = src.reshape(-1, nbytes), dst.reshape(-1, nbytes)
        for s_id, d_id in bm.tolist():
            db[d_id] = sb[s_id]
    nb = 3000
    bm = rng.integers(0, nb, (2500, 2)).astype(np.int64)  # repeated dst ids, within and across chunks
    assert len(np.unique(bm[:, 1])) < len(bm)
    src = rng.integers(0, 255, (nb, nbytes), dtype=np.uint8)
    dst, want = np.zeros((nb, nbytes), np.uint8), np.zeros((nb, nbytes), np.uint8)
    vllm_ops.swap_blocks(src, dst, nbytes, bm)
    reference(src, want, bm)
    np.testing.assert_array_equal(dst, want)
    # one buffer: chained pairs (0 -> 1, 1 -> 2, ...) move block 0 along the chain, as the loop does
    buf, want = src.copy(), src.copy()
    chain = np.array([[i, i + 1] for i in range(5)], np.int64)
    vllm_ops.swap_blocks(buf, buf, nbytes, chain)
    reference(want, want, chain)
    np.testing.assert_array_equal(buf, want)
    assert np.array_equal(buf[5], src[0])
