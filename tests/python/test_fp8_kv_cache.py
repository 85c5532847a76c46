"""fp8 KV cache through the Python entries: vllm_ops.reshape_and_cache(_flash) with kv_cache_dtype
"fp8" / "fp8_e4m3" / "fp8_e5m2" and per-tensor k_scale / v_scale on vLLM's uint8 caches (and ml_dtypes float8
caches), attn.paged_attention and attn.Plan.forward reading the fp8 pages, through both bindings.

Oracles: the stored codes equal ml_dtypes' round-to-nearest-even cast of clip(x / scale, ±max) (saturation as
vLLM's kernels; an independent codec); attention equals the float64 NumPy reference (conftest.np_attend) on the
dequantized keys decode(code)·scale within 2e-5 (f32 queries; the fast path multiplies the finished dot product
by softmax_scale·k_scale rounded once to float32). Bad scales raise AttnInvalidArgumentError with the cache untouched.
"""

import importlib.util

import numpy as np
import pytest

import attn
from attn import ops
from attn.vllm import ops as vllm_ops

from conftest import HAVE_TORCH, np_attend, set_ext

ml_dtypes = pytest.importorskip("ml_dtypes")

FMT = {"fp8": ml_dtypes.float8_e4m3fn, "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
FMAX = {"fp8": 448.0, "fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
NB, BS, HK, D, H = 8, 4, 2, 16, 4


def _codes(x, scale, name):
    """Expected stored bytes: RNE of clip(x / scale) in float32 (ml_dtypes); NaN as S.1111111 (0x7F|sign, the
    code vLLM's __nv_cvt_float_to_fp8 gives for both formats; ml_dtypes writes 0x7E for E5M2)."""
    y = np.asarray(x, np.float32) / np.float32(scale)
    c = np.clip(y, -FMAX[name], FMAX[name]).astype(FMT[name]).view(np.uint8).copy()
    c[np.isnan(y)] = 0x7F | (np.signbit(y[np.isnan(y)]).astype(np.uint8) << 7)
    return c


def _deq(codes, scale, name):
    return codes.view(FMT[name]).astype(np.float64) * float(scale)


@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("op", [vllm_ops.reshape_and_cache, vllm_ops.reshape_and_cache_flash])
def test_reshape_and_cache_quantizes(name, op, rng, ctx1, binding):
    k = (rng.standard_normal((7, HK, D)) * 3).astype(np.float32)
    v = (rng.standard_normal((7, HK, D)) * 0.5).astype(np.float32)
    k[0, 0, :3] = [1e9, -np.inf, np.nan]  # saturates, saturates, stays NaN
    slots = np.array([3, 0, -1, 9, 4, 22, 17], dtype=np.int64)
    ks, vs = (0.01, np.float32(0.004)) if name != "fp8_e5m2" else (np.array([2.0], np.float32), 0.125)
    want = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)
    for t, s in enumerate(slots):
        if s >= 0:
            want[0, s // BS, s % BS] = _codes(k[t], float(np.asarray(ks).reshape(-1)[0]), name)
            want[1, s // BS, s % BS] = _codes(v[t], float(vs), name)
    shared = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)  # one vLLM tensor: halves are k_cache, v_cache
    op(k, v, shared[0], shared[1], slots, name, ks, vs, ctx=ctx1)
    np.testing.assert_array_equal(shared, want)
    kc, vc = (np.full((NB, BS, HK, D), 0x5A, np.uint8) for _ in range(2))  # two allocations
    op(k, v, kc, vc, slots, name, ks, vs, ctx=ctx1)
    np.testing.assert_array_equal(kc, want[0])
    np.testing.assert_array_equal(vc, want[1])
    assert _deq(want[0, 0, 3, 0, :2], 1.0, name).tolist() == [FMAX[name], -FMAX[name]]
    # an ml_dtypes float8 cache holds the same codes (no kv_cache_dtype needed)
    f8 = np.full((2, NB, BS, HK, D), 0x5A, np.uint8).view(FMT[name])
    attn.reshape_and_cache(k, v, f8, slots, k_scale=ks, v_scale=vs, ctx=ctx1)
    np.testing.assert_array_equal(f8.view(np.uint8), want)


def test_bad_scales_and_dtypes(rng, ctx1, binding):
    k = rng.standard_normal((3, HK, D)).astype(np.float32)
    slots = np.array([0, 1, 2])
    cache = np.full((2, NB, BS, HK, D), 7, np.uint8)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(attn.AttnInvalidArgumentError, match="k_scale="):
            vllm_ops.reshape_and_cache(k, k, cache[0], cache[1], slots, "fp8", bad, 1.0, ctx=ctx1)
        with pytest.raises(attn.AttnInvalidArgumentError, match="v_scale="):
            attn.reshape_and_cache(k, k, cache, slots, kv_cache_dtype="fp8_e5m2", k_scale=1.0, v_scale=bad,
                                   ctx=ctx1)
        assert (cache == 7).all()
    with pytest.raises(TypeError, match="kv_cache_dtype"):  # a float cache cannot hold fp8 codes
        vllm_ops.reshape_and_cache(k, k, np.zeros((NB, BS, HK, D), np.float32),
                                   np.zeros((NB, BS, HK, D), np.float32), slots, "fp8")
    with pytest.raises(NotImplementedError, match="fp8_ds_mla"):
        vllm_ops.reshape_and_cache(k, k, cache[0], cache[1], slots, "fp8_ds_mla")
    with pytest.raises(attn.AttnInvalidArgumentError, match="key: dtype fp8_e4m3"):  # fp8 rows are not keys
        attn.reshape_and_cache(k.astype(ml_dtypes.float8_e4m3fn), k.astype(ml_dtypes.float8_e4m3fn), cache,
                               slots, kv_cache_dtype="fp8")
    assert (cache == 7).all()
    # "auto" ignores the scales, even bad ones (vLLM)
    fc = np.zeros((2, NB, BS, HK, D), np.float32)
    vllm_ops.reshape_and_cache(k, k, fc[0], fc[1], slots, "auto", 0.0, float("nan"), ctx=ctx1)
    np.testing.assert_array_equal(fc[0, 0, 1], k[1])


def _step(rng, name, ks, vs):
    """Two requests (a decode over 13 cached keys, a 5-token chunk over 6) written into a uint8 fp8 cache."""
    blocks = [[4, 1, 5, 0], [2, 3, 7]]
    lens, q_lens = [14, 11], [1, 5]
    cache = rng.integers(0, 256, (2, NB, BS, HK, D), dtype=np.uint8)  # garbage in unused slots
    keys = [(rng.standard_normal((n, HK, D))).astype(np.float32) for n in lens]
    vals = [(rng.standard_normal((n, HK, D))).astype(np.float32) for n in lens]
    for r in range(2):
        slots = np.array([blocks[r][p // BS] * BS + p % BS for p in range(lens[r])])
        vllm_ops.reshape_and_cache(keys[r], vals[r], cache[0], cache[1], slots, name, ks, vs)
    q = rng.standard_normal((sum(q_lens), H, D)).astype(np.float32)
    bt = np.zeros((2, 4), np.int32)
    for r in range(2):
        bt[r, :len(blocks[r])] = blocks[r]
    qsl = np.array([0, 1, 6], np.int32)
    seq_lens = np.array(lens, np.int32)
    want = []
    for r in range(2):  # float64 reference on the dequantized keys of each request
        idx = [blocks[r][p // BS] * BS + p % BS for p in range(lens[r])]
        kk = _deq(cache[0].reshape(-1, HK, D)[idx], ks, name)
        vv = _deq(cache[1].reshape(-1, HK, D)[idx], vs, name)
        want.append(np_attend(q[qsl[r]:qsl[r + 1]], kk, vv, causal=True, scale=0.3)[0])
    return cache, q, qsl, seq_lens, bt, blocks, lens, q_lens, np.concatenate(want)


@pytest.mark.parametrize("name", ["fp8", "fp8_e5m2"])
def test_paged_attention_reads_fp8_pages(name, rng, ctx1, binding):
    ks, vs = (0.02, 0.005) if name == "fp8" else (4.0, 0.5)
    cache, q, qsl, seq_lens, bt, blocks, lens, q_lens, want = _step(rng, name, ks, vs)
    out = attn.paged_attention(q, cache, qsl, seq_lens, bt, softmax_scale=0.3, kv_cache_dtype=name,
                               k_scale=ks, v_scale=vs, ctx=ctx1)
    np.testing.assert_allclose(out, want, atol=2e-5, rtol=1e-5)
    ref = attn.paged_attention(q, cache, qsl, seq_lens, bt, softmax_scale=0.3, kv_cache_dtype=name, k_scale=ks,
                               v_scale=vs, reference=True)
    np.testing.assert_allclose(ref, want, atol=1e-6)
    # an ml_dtypes float8 view of the same bytes needs no name
    out8 = attn.paged_attention(q, cache.view(FMT[name]), qsl, seq_lens, bt, softmax_scale=0.3, k_scale=ks,
                                v_scale=vs, ctx=ctx1)
    np.testing.assert_array_equal(out8, out)
    # the plan path: the same bits, any thread count
    plan = attn.Plan([attn.PlanRequest(lens[r] - q_lens[r], q_lens[r], blocks[r]) for r in range(2)],
                     num_blocks=NB, block_size=BS, num_heads=H, num_kv_heads=HK, head_size=D,
                     max_blocks_per_req=4)
    assert plan.identity_order
    for threads in (1, 2):
        with attn.Context(num_threads=threads) as c:
            got = plan.forward(q, cache, softmax_scale=0.3, kv_cache_dtype=name, k_scale=ks, v_scale=vs, ctx=c)
        np.testing.assert_array_equal(got, out)
    # the scales matter: without them the answer is another one
    off = attn.paged_attention(q, cache, qsl, seq_lens, bt, softmax_scale=0.3, kv_cache_dtype=name, ctx=ctx1)
    assert np.abs(off - want).max() > 1e-2
    with pytest.raises(attn.AttnInvalidArgumentError, match="params.v_scale=0"):
        attn.paged_attention(q, cache, qsl, seq_lens, bt, kv_cache_dtype=name, k_scale=ks, v_scale=0.0)


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_uint8_cache(rng, ctx1):
    import torch

    cache, q, qsl, seq_lens, bt, _, _, _, want = _step(rng, "fp8", 0.02, 0.005)
    tc = torch.from_numpy(cache.copy())
    k = torch.randn(2, HK, D)
    vllm_ops.reshape_and_cache(k, k, tc[0], tc[1], torch.tensor([26, -1]), "fp8", torch.tensor(0.02),
                               torch.tensor([0.005]), ctx=ctx1)  # slot 26: block 6, which no request uses
    np.testing.assert_array_equal(tc[0, 6, 2].numpy(), _codes(k[0].numpy(), 0.02, "fp8"))
    np.testing.assert_array_equal(tc[1, 6, 2].numpy(), _codes(k[0].numpy(), 0.005, "fp8"))
    out = attn.paged_attention(torch.from_numpy(q), tc, torch.from_numpy(qsl), torch.from_numpy(seq_lens),
                               torch.from_numpy(bt), softmax_scale=0.3, kv_cache_dtype="fp8", k_scale=0.02,
                               v_scale=torch.tensor(0.005), ctx=ctx1)
    np.testing.assert_allclose(out.numpy(), want, atol=2e-5, rtol=1e-5)


def test_bindings_give_the_same_bits(rng, monkeypatch):
    if ops._ext is None or importlib.util.find_spec("attn._ext") is None:
        pytest.skip("attn._ext is not built")
    cache, q, qsl, seq_lens, bt, _, _, _, _ = _step(rng, "fp8_e4m3", 0.03, 0.01)
    res = []
    for ext in (ops._ext, ops._ext):  # the one binding, twice: the same bits
        set_ext(monkeypatch, ext)
        c = cache.copy()
        k = np.linspace(-5, 5, 2 * HK * D, dtype=np.float32).reshape(2, HK, D)
        vllm_ops.reshape_and_cache(k, k, c[0], c[1], np.array([23, 20]), "fp8_e4m3", 0.03, 0.01)
        res.append((c, attn.paged_attention(q, c, qsl, seq_lens, bt, kv_cache_dtype="fp8_e4m3", k_scale=0.03,
                                            v_scale=0.01, return_lse=True)))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    np.testing.assert_array_equal(res[0][1][0], res[1][1][0])
    np.testing.assert_array_equal(res[0][1][1], res[1][1][1])


@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_flash_attn_with_kvcache_descale(name, rng, ctx1, binding):
    """flash-attn 3's k_descale / v_descale on an fp8 paged cache: the appended rows are stored as
    fp8(k / k_descale), attention reads decode(code)·descale (float64 reference), bitwise what paged_attention
    gives with k_scale / v_scale; per-(batch, head) values must all be equal; bad values leave the cache as it
    was."""
    B, Sq, nb, bs = 2, 2, 8, 4
    ks, vs = (0.02, 0.005) if name == "fp8_e4m3" else (4.0, 0.5)
    kv = np.zeros((2, nb, bs, HK, D), FMT[name])  # one tensor: k_cache / v_cache are its halves
    bt = np.array([[3, 0, 6, 1], [2, 7, 4, 5]], np.int32)
    seqlens = np.array([5, 9], np.int32)
    for b in range(B):  # the prefixes, through the cache write with the scales
        n = int(seqlens[b])
        kp = (rng.standard_normal((n, HK, D)) * 2).astype(np.float32)
        vp = rng.standard_normal((n, HK, D)).astype(np.float32)
        pos = np.arange(n)
        attn.reshape_and_cache(kp, vp, kv, bt[b][pos // bs] * bs + pos % bs, k_scale=ks, v_scale=vs, ctx=ctx1)
    kn = (rng.standard_normal((B, 2, HK, D)) * 2).astype(np.float32)
    vn = rng.standard_normal((B, 2, HK, D)).astype(np.float32)
    q = rng.standard_normal((B, Sq, H, D)).astype(np.float32)
    out = attn.flash_attn_with_kvcache(q, kv[0], kv[1], k=kn, v=vn, cache_seqlens=seqlens, block_table=bt,
                                       softmax_scale=0.3, causal=True, k_descale=np.full((B, HK), ks, np.float32),
                                       v_descale=vs, ctx=ctx1)
    codes = kv.view(np.uint8)
    for b in range(B):
        for j in range(2):
            p = int(seqlens[b]) + j
            blk, off = bt[b][p // bs], p % bs
            np.testing.assert_array_equal(codes[0, blk, off], _codes(kn[b, j], ks, name))
            np.testing.assert_array_equal(codes[1, blk, off], _codes(vn[b, j], vs, name))
        n = int(seqlens[b]) + 2
        pos = np.arange(n)
        rows = bt[b][pos // bs], pos % bs
        want = np_attend(q[b], _deq(codes[0][rows], ks, name), _deq(codes[1][rows], vs, name), causal=True,
                         scale=0.3)[0]
        np.testing.assert_allclose(out[b], want, atol=2e-5, rtol=1e-5)
    qsl = np.array([0, Sq, 2 * Sq], np.int32)
    same = attn.paged_attention(q.reshape(B * Sq, H, D), kv, qsl, seqlens + 2, bt, softmax_scale=0.3, k_scale=ks,
                                v_scale=vs, ctx=ctx1)
    np.testing.assert_array_equal(same.reshape(out.shape), out)
    before = codes.copy()
    bad = [dict(k_descale=np.array([[ks, ks], [ks, 2 * ks]], np.float32)), dict(v_descale=0.0),
           dict(k_descale=float("nan")), dict(q_descale=2.0), dict(k_descale=np.zeros(0))]
    for extra in bad:
        name_ = next(iter(extra))
        with pytest.raises(ValueError, match=name_):
            attn.flash_attn_with_kvcache(q, kv[0], kv[1], k=kn * 3, v=vn, cache_seqlens=seqlens, block_table=bt,
                                         causal=True, ctx=ctx1, **extra)
        np.testing.assert_array_equal(kv.view(np.uint8), before)
    # a float cache ignores the descales (vLLM's "auto"): the same bits as without them
    fkv = _deq(codes, 1.0, name).astype(np.float32)
    a = attn.flash_attn_with_kvcache(q, fkv[0], fkv[1], cache_seqlens=seqlens + 2, block_table=bt, causal=True,
                                     k_descale=3.0, v_descale=[[0.5, 0.5], [0.5, 0.5]], ctx=ctx1)
    b_ = attn.flash_attn_with_kvcache(q, fkv[0], fkv[1], cache_seqlens=seqlens + 2, block_table=bt, causal=True,
                                      ctx=ctx1)
    np.testing.assert_array_equal(a, b_)
