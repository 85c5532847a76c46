"""Per-KV-head fp8 scales (vLLM kv_scale_type "attn_head") through the Python entries: attn.reshape_and_cache,
vllm_ops.reshape_and_cache, attn.kv_events.reshape_and_cache_notify, attn.paged_attention, attn.Plan.forward and
attn.flash_attn_with_kvcache (k_descale / v_descale of shape [nheads_k] or [batch, nheads_k]); copy_blocks /
swap_blocks on vLLM's uint8 fp8 caches; the vLLM plugin's per-head path (tests/python/vllm_stubs.py).

Oracles: stored codes equal ml_dtypes' round-to-nearest-even cast of clip(x / scale[g], ±max) head by head (an
independent codec); attention equals attn's float64 oracle (reference=True) and the float64 NumPy reference on
decode(code)·scale[g]; a per-head array whose entries are all equal gives the scalar call's bits (C contract of
attn_params.k_scales / attn_cache_write_options.k_scales). Both bindings: per-head arrays always take the ctypes
path, so the ext run checks that the dispatch leaves the compiled extension for them.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attn
from attn import _binding, kv_events, ops
from attn.vllm import ops as vllm_ops

from conftest import ROOT, np_attend

ml_dtypes = pytest.importorskip("ml_dtypes")

FMT = {"fp8": ml_dtypes.float8_e4m3fn, "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
FMAX = {"fp8": 448.0, "fp8_e4m3": 448.0, "fp8_e5m2": 57344.0}
NB, BS, HK, D, H = 8, 4, 2, 16, 4
KS = np.array([0.02, 0.05], np.float32)  # one key scale per KV head
VS = np.array([0.004, 0.01], np.float32)


def _codes(x, scales, name):
    """Expected bytes of rows x [..., HK, D]: RNE of clip(x / scales[g]) per head g (float32 division)."""
    s = np.asarray(scales, np.float32).reshape(-1)
    s = np.broadcast_to(s, (HK,))[:, None]
    y = np.asarray(x, np.float32) / s
    c = np.clip(y, -FMAX[name], FMAX[name]).astype(FMT[name]).view(np.uint8).copy()
    c[np.isnan(y)] = 0x7F | (np.signbit(y[np.isnan(y)]).astype(np.uint8) << 7)
    return c


def _deq(codes, scales, name):
    """decode(codes [..., HK, D]) · scales[g] in float64."""
    s = np.broadcast_to(np.asarray(scales, np.float64).reshape(-1), (HK,))[:, None]
    return codes.view(FMT[name]).astype(np.float64) * s


def _rows(rng, n):
    k = (rng.standard_normal((n, HK, D)) * 3).astype(np.float32)
    v = (rng.standard_normal((n, HK, D)) * 0.5).astype(np.float32)
    return k, v


# ------------------------------------------------------------------------------------------------
# Writes
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fp8", "fp8_e5m2"])
def test_reshape_and_cache_per_head(name, rng, ctx1, binding):
    k, v = _rows(rng, 7)
    k[0, 1, :2] = [1e9, np.nan]  # saturates; NaN stays NaN
    slots = np.array([3, 0, -1, 9, 4, 22, 17], np.int64)
    ks, vs = (KS, VS) if name == "fp8" else (KS * 200, VS * 50)
    want = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)
    for t, s in enumerate(slots):
        if s >= 0:
            want[0, s // BS, s % BS] = _codes(k[t], ks, name)
            want[1, s // BS, s % BS] = _codes(v[t], vs, name)
    assert not np.array_equal(_codes(k, ks, name), _codes(k, ks[0], name))  # the heads really differ
    cache = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)
    attn.reshape_and_cache(k, v, cache, slots, kv_cache_dtype=name, k_scale=ks, v_scale=vs, ctx=ctx1)
    np.testing.assert_array_equal(cache, want)
    # an ml_dtypes float8 cache (no name), and scales as lists
    f8 = np.full((2, NB, BS, HK, D), 0x5A, np.uint8).view(FMT[name])
    attn.reshape_and_cache(k, v, f8, slots, k_scale=ks.tolist(), v_scale=vs.tolist(), ctx=ctx1)
    np.testing.assert_array_equal(f8.view(np.uint8), want)
    # vLLM's signature: the halves of one tensor, and two separate allocations
    shared = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)
    vllm_ops.reshape_and_cache(k, v, shared[0], shared[1], slots, name, ks, vs, ctx=ctx1)
    np.testing.assert_array_equal(shared, want)
    kc, vc = (np.full((NB, BS, HK, D), 0x5A, np.uint8) for _ in range(2))
    vllm_ops.reshape_and_cache_flash(k, v, kc, vc, slots, name, ks, vs, ctx=ctx1)
    np.testing.assert_array_equal(kc, want[0])
    np.testing.assert_array_equal(vc, want[1])
    # per-head keys, per-tensor values (each side independent)
    mixed = np.full((2, NB, BS, HK, D), 0x5A, np.uint8)
    attn.reshape_and_cache(k, v, mixed, slots, kv_cache_dtype=name, k_scale=ks, v_scale=float(vs[1]), ctx=ctx1)
    np.testing.assert_array_equal(mixed[0], want[0])
    np.testing.assert_array_equal(mixed[1, 0, 3], _codes(v[0], vs[1], name))


def test_equal_per_head_entries_write_the_scalar_bytes(rng, ctx1, binding):
    k, v = _rows(rng, 6)
    slots = np.arange(6) * 5
    a, b = (np.zeros((2, NB, BS, HK, D), np.uint8) for _ in range(2))
    attn.reshape_and_cache(k, v, a, slots, kv_cache_dtype="fp8", k_scale=0.03, v_scale=0.007, ctx=ctx1)
    attn.reshape_and_cache(k, v, b, slots, kv_cache_dtype="fp8", k_scale=np.full(HK, 0.03, np.float32),
                           v_scale=np.full(HK, 0.007), ctx=ctx1)
    np.testing.assert_array_equal(a, b)


def test_reshape_and_cache_notify_per_head(rng, ctx1):
    k, v = _rows(rng, 3)
    slots = np.array([1, 6, 11])
    cache = np.zeros((2, NB, BS, HK, D), np.uint8)
    events = []
    kv_events.reshape_and_cache_notify(k, v, cache, slots, events.append, layer_idx=4, kv_cache_dtype="fp8",
                                       k_scale=KS, v_scale=VS, ctx=ctx1)
    assert len(events) == 1 and events[0].layer_idx == 4
    for t, s in enumerate(slots):
        np.testing.assert_array_equal(cache[0, s // BS, s % BS], _codes(k[t], KS, "fp8"))
        np.testing.assert_array_equal(cache[1, s // BS, s % BS], _codes(v[t], VS, "fp8"))


def test_per_head_write_errors(rng, ctx1, binding):
    k, v = _rows(rng, 3)
    slots = np.array([0, 1, 2])
    cache = np.full((2, NB, BS, HK, D), 7, np.uint8)
    with pytest.raises(ValueError, match=r"k_scale: shape \[3\], expected .*\[num_kv_heads\] = \[2\]"):
        attn.reshape_and_cache(k, v, cache, slots, kv_cache_dtype="fp8", k_scale=[0.1, 0.2, 0.3], ctx=ctx1)
    with pytest.raises(ValueError, match=r"v_scale: shape \[2, 2\]"):
        vllm_ops.reshape_and_cache(k, v, cache[0], cache[1], slots, "fp8", 1.0, np.ones((2, 2)), ctx=ctx1)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(attn.AttnInvalidArgumentError, match=r"k_scales\[1\]="):
            attn.reshape_and_cache(k, v, cache, slots, kv_cache_dtype="fp8", k_scale=[0.5, bad], ctx=ctx1)
        with pytest.raises(attn.AttnInvalidArgumentError, match=r"v_scales\[0\]="):
            vllm_ops.reshape_and_cache(k, v, cache[0], cache[1], slots, "fp8_e5m2", 1.0, [bad, 1.0], ctx=ctx1)
    assert (cache == 7).all()
    # a float cache ignores the scales, per-head ones too ("auto"), as the C entry does
    fc = np.zeros((2, NB, BS, HK, D), np.float32)
    vllm_ops.reshape_and_cache(k, v, fc[0], fc[1], slots, "auto", [0.0, np.nan], [1.0, 2.0, 3.0], ctx=ctx1)
    np.testing.assert_array_equal(fc[0, 0, 1], k[1])


# ------------------------------------------------------------------------------------------------
# Reads
# ------------------------------------------------------------------------------------------------
def _step(rng, name, ks, vs):
    """Two requests (a decode over 13 cached keys, a 5-token chunk over 6) in a uint8 fp8 cache written with
    per-head scales; the float64 reference of their attention."""
    blocks = [[4, 1, 5, 0], [2, 3, 7]]
    lens, q_lens = [14, 11], [1, 5]
    cache = rng.integers(0, 256, (2, NB, BS, HK, D), dtype=np.uint8)  # garbage in unused slots
    for r in range(2):
        k, v = _rows(rng, lens[r])
        slots = np.array([blocks[r][p // BS] * BS + p % BS for p in range(lens[r])])
        attn.reshape_and_cache(k, v, cache, slots, kv_cache_dtype=name, k_scale=ks, v_scale=vs)
    q = rng.standard_normal((sum(q_lens), H, D)).astype(np.float32)
    bt = np.zeros((2, 4), np.int32)
    for r in range(2):
        bt[r, :len(blocks[r])] = blocks[r]
    qsl = np.array([0, 1, 6], np.int32)
    seq_lens = np.array(lens, np.int32)
    want = []
    for r in range(2):
        idx = [blocks[r][p // BS] * BS + p % BS for p in range(lens[r])]
        kk = _deq(cache[0].reshape(-1, HK, D)[idx], ks, name)
        vv = _deq(cache[1].reshape(-1, HK, D)[idx], vs, name)
        want.append(np_attend(q[qsl[r]:qsl[r + 1]], kk, vv, causal=True, scale=0.3)[0])
    return cache, q, qsl, seq_lens, bt, blocks, lens, q_lens, np.concatenate(want)


@pytest.mark.parametrize("name", ["fp8", "fp8_e5m2"])
def test_paged_attention_per_head(name, rng, ctx1, binding):
    ks, vs = (KS, VS) if name == "fp8" else (KS * 200, VS * 50)
    cache, q, qsl, seq_lens, bt, blocks, lens, q_lens, want = _step(rng, name, ks, vs)
    kw = dict(softmax_scale=0.3, kv_cache_dtype=name, k_scale=ks, v_scale=vs)
    out, lse = attn.paged_attention(q, cache, qsl, seq_lens, bt, return_lse=True, ctx=ctx1, **kw)
    ref, ref_lse = attn.paged_attention(q, cache, qsl, seq_lens, bt, return_lse=True, reference=True, **kw)
    np.testing.assert_allclose(ref, want, atol=1e-6)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-5, rtol=1e-6)
    # the per-tensor scale of head 0 gives another answer: the heads' scales are honoured
    one = attn.paged_attention(q, cache, qsl, seq_lens, bt, softmax_scale=0.3, kv_cache_dtype=name,
                               k_scale=float(ks[0]), v_scale=float(vs[0]), ctx=ctx1)
    assert np.abs(one - want).max() > 1e-3
    # an ml_dtypes view needs no name; torch-like scale containers (lists) are accepted
    out8 = attn.paged_attention(q, cache.view(FMT[name]), qsl, seq_lens, bt, softmax_scale=0.3,
                                k_scale=ks.tolist(), v_scale=vs, ctx=ctx1)
    np.testing.assert_array_equal(out8, out)
    # the plan path: the same bits, any thread count
    plan = attn.Plan([attn.PlanRequest(lens[r] - q_lens[r], q_lens[r], blocks[r]) for r in range(2)],
                     num_blocks=NB, block_size=BS, num_heads=H, num_kv_heads=HK, head_size=D,
                     max_blocks_per_req=4)
    for threads in (1, 2):
        with attn.Context(num_threads=threads) as c:
            got = plan.forward(q, cache, ctx=c, **kw)
        np.testing.assert_array_equal(got, out)


@pytest.mark.parametrize("reference", [False, True])
def test_equal_per_head_entries_read_the_scalar_bits(reference, rng, ctx1, binding):
    cache, q, qsl, seq_lens, bt, *_ = _step(rng, "fp8", np.float32(0.03), np.float32(0.008))
    a = attn.paged_attention(q, cache, qsl, seq_lens, bt, kv_cache_dtype="fp8", k_scale=0.03, v_scale=0.008,
                             return_lse=True, reference=reference, ctx=ctx1)
    b = attn.paged_attention(q, cache, qsl, seq_lens, bt, kv_cache_dtype="fp8", k_scale=np.full(HK, 0.03),
                             v_scale=np.full(HK, 0.008, np.float32), return_lse=True, reference=reference, ctx=ctx1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_per_head_read_errors(rng, ctx1, binding):
    cache, q, qsl, seq_lens, bt, *_ = _step(rng, "fp8", KS, VS)
    with pytest.raises(ValueError, match=r"k_scale: shape \[3\]"):
        attn.paged_attention(q, cache, qsl, seq_lens, bt, kv_cache_dtype="fp8", k_scale=np.ones(3), ctx=ctx1)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"params.v_scales\[1\]=0"):
        attn.paged_attention(q, cache, qsl, seq_lens, bt, kv_cache_dtype="fp8", k_scale=KS, v_scale=[1.0, 0.0],
                             ctx=ctx1)
    # a float cache ignores them (not read, as vLLM's "auto")
    fc = np.zeros((2, NB, BS, HK, D), np.float32)
    a = attn.paged_attention(q, fc, qsl, seq_lens, bt, k_scale=[0.0, -1.0], v_scale=[1.0, 2.0, 3.0], ctx=ctx1)
    np.testing.assert_array_equal(a, attn.paged_attention(q, fc, qsl, seq_lens, bt, ctx=ctx1))


# ------------------------------------------------------------------------------------------------
# flash_attn_with_kvcache: k_descale / v_descale per KV head
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fp8_e4m3", "fp8_e5m2"])
def test_flash_attn_with_kvcache_per_head_descale(name, rng, ctx1, binding):
    B, Sq, nb, bs = 2, 2, 8, 4
    ks, vs = (KS, VS) if name == "fp8_e4m3" else (KS * 200, VS * 50)
    kv = np.zeros((2, nb, bs, HK, D), FMT[name])
    bt = np.array([[3, 0, 6, 1], [2, 7, 4, 5]], np.int32)
    seqlens = np.array([5, 9], np.int32)
    for b in range(B):
        n = int(seqlens[b])
        kp, vp = _rows(rng, n)
        pos = np.arange(n)
        attn.reshape_and_cache(kp, vp, kv, bt[b][pos // bs] * bs + pos % bs, k_scale=ks, v_scale=vs, ctx=ctx1)
    kn = (rng.standard_normal((B, 2, HK, D)) * 2).astype(np.float32)
    vn = rng.standard_normal((B, 2, HK, D)).astype(np.float32)
    q = rng.standard_normal((B, Sq, H, D)).astype(np.float32)
    outs = []
    for kd, vd in ((ks, vs), (np.tile(ks, (B, 1)), np.tile(vs, (B, 1)))):  # [nheads_k]; fa3's [batch, nheads_k]
        c = kv.copy()
        outs.append((c, attn.flash_attn_with_kvcache(q, c[0], c[1], k=kn, v=vn, cache_seqlens=seqlens,
                                                     block_table=bt, softmax_scale=0.3, causal=True, k_descale=kd,
                                                     v_descale=vd, q_descale=np.ones((B, HK)), ctx=ctx1)))
    np.testing.assert_array_equal(outs[0][0].view(np.uint8), outs[1][0].view(np.uint8))
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    c, out = outs[0]
    codes = c.view(np.uint8)
    for b in range(B):
        for j in range(2):
            p = int(seqlens[b]) + j
            blk, off = bt[b][p // bs], p % bs
            np.testing.assert_array_equal(codes[0, blk, off], _codes(kn[b, j], ks, name))
            np.testing.assert_array_equal(codes[1, blk, off], _codes(vn[b, j], vs, name))
    qsl = np.array([0, Sq, 2 * Sq], np.int32)
    kw = dict(softmax_scale=0.3, k_scale=ks, v_scale=vs)
    same = attn.paged_attention(q.reshape(B * Sq, H, D), c, qsl, seqlens + 2, bt, ctx=ctx1, **kw)
    np.testing.assert_array_equal(same.reshape(out.shape), out)
    ref = attn.paged_attention(q.reshape(B * Sq, H, D), c, qsl, seqlens + 2, bt, reference=True, **kw)
    np.testing.assert_allclose(out, ref.reshape(out.shape), atol=2e-5, rtol=1e-5)
    # two separate allocations (not halves of one tensor): the same writes and bits
    kc, vc = kv[0].copy(), kv[1].copy()
    out2 = attn.flash_attn_with_kvcache(q, kc, vc, k=kn, v=vn, cache_seqlens=seqlens, block_table=bt,
                                        softmax_scale=0.3, causal=True, k_descale=ks, v_descale=vs, ctx=ctx1)
    np.testing.assert_array_equal(kc.view(np.uint8), codes[0])
    np.testing.assert_array_equal(vc.view(np.uint8), codes[1])
    np.testing.assert_array_equal(out2, out)


def test_flash_attn_with_kvcache_descale_errors(rng, ctx1, binding):
    B, nb, bs = 2, 8, 4
    kv = np.zeros((2, nb, bs, HK, D), ml_dtypes.float8_e4m3fn)
    bt = np.array([[3, 0, 6, 1], [2, 7, 4, 5]], np.int32)
    seqlens = np.array([5, 9], np.int32)
    kn = rng.standard_normal((B, 1, HK, D)).astype(np.float32)
    q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
    before = kv.view(np.uint8).copy()
    bad = [(dict(k_descale=np.array([[0.1, 0.2], [0.1, 0.3]])), "k_descale: row 1 differs"),
           (dict(v_descale=np.ones(HK + 1)), r"v_descale: shape \[3\]"),
           (dict(k_descale=np.ones((B, HK + 1))), r"k_descale: shape \[2, 3\]"),
           (dict(k_descale=np.ones((1, 1, HK))), r"k_descale: shape \[1, 1, 2\]"),
           (dict(v_descale=[0.5, 0.0]), "v_descale=0.0"),
           (dict(k_descale=[np.nan, 1.0]), "k_descale=nan"),
           (dict(q_descale=np.full((B, HK), 2.0)), "q_descale"),
           (dict(q_descale=[1.0, 0.5]), "q_descale")]
    for extra, msg in bad:
        with pytest.raises(ValueError, match=msg):
            attn.flash_attn_with_kvcache(q, kv[0], kv[1], k=kn, v=kn, cache_seqlens=seqlens, block_table=bt,
                                         causal=True, ctx=ctx1, **extra)
        np.testing.assert_array_equal(kv.view(np.uint8), before)


# ------------------------------------------------------------------------------------------------
# copy_blocks / swap_blocks on vLLM's uint8 fp8 caches
# ------------------------------------------------------------------------------------------------
def test_copy_and_swap_blocks_on_uint8_fp8_cache(rng, ctx1):
    cache, q, qsl, seq_lens, bt, blocks, lens, q_lens, want = _step(rng, "fp8", KS, VS)
    kw = dict(softmax_scale=0.3, kv_cache_dtype="fp8", k_scale=KS, v_scale=VS, ctx=ctx1)
    base = attn.paged_attention(q, cache, qsl, seq_lens, bt, **kw)
    # copy_blocks on one [2, ...] tensor: request 1's blocks 2, 3, 7 -> 6 and in place remapped
    c = cache.copy()
    attn.copy_blocks(c, np.array([[2, 6], [7, 2]]), ctx=ctx1)  # in order: block 2 is copied before it is replaced
    np.testing.assert_array_equal(c[:, 6], cache[:, 2])
    np.testing.assert_array_equal(c[:, 2], cache[:, 7])
    bt2 = bt.copy()
    bt2[1, :3] = [6, 3, 2]
    np.testing.assert_array_equal(attn.paged_attention(q, c, qsl, seq_lens, bt2, **kw), base)
    # vLLM's per-layer lists of key / value caches (the halves of one tensor)
    c2 = cache.copy()
    vllm_ops.copy_blocks([c2[0]], [c2[1]], np.array([[2, 6]]), ctx=ctx1)
    np.testing.assert_array_equal(c2[:, 6], cache[:, 2])
    # swap_blocks into another uint8 cache (a CPU offload buffer), then read there
    dst = np.zeros_like(cache)
    attn.swap_blocks(cache, dst, np.array([[b, b] for b in range(NB)]), ctx=ctx1)
    np.testing.assert_array_equal(dst, cache)
    np.testing.assert_array_equal(attn.paged_attention(q, dst, qsl, seq_lens, bt, **kw), base)
    dk, dv = np.zeros((NB, BS, HK, D), np.uint8), np.zeros((NB, BS, HK, D), np.uint8)
    vllm_ops.swap_blocks(cache[0], dk, np.array([[4, 0], [1, 1]]))
    vllm_ops.swap_blocks(cache[1], dv, np.array([[4, 0], [1, 1]]))
    np.testing.assert_array_equal(dk[0], cache[0, 4])
    np.testing.assert_array_equal(dv[1], cache[1, 1])
    assert not dk[2:].any()


# ------------------------------------------------------------------------------------------------
# The vLLM plugin (stubbed vLLM and torch, in a child process)
# ------------------------------------------------------------------------------------------------
HERE = os.path.dirname(os.path.abspath(__file__))

_PLUGIN = r'''
import json
import numpy as np
import vllm_stubs
vllm_stubs.install()
import attn
from attn.vllm import backend as vb
H, HK, D, BS, NBLK = 4, 2, 16, 8, 64
rng = np.random.default_rng(5)
spec = vllm_stubs.AttentionSpec(block_size=BS, num_kv_heads=HK, head_size=D)
# vLLM's uint8 fp8 cache, logical [num_blocks, num_kv_heads, block_size, 2 * head_size] (token-major memory)
kv = vllm_stubs.tensor(np.zeros((NBLK, BS, HK, 2 * D), np.uint8)).transpose(0, 2, 1, 3)
cfg = vllm_stubs.vllm_config(H, kv_caches={"layers.0.attn": kv})
b = vb.AttnMetadataBuilder(spec, ["layers.0.attn"], cfg, None)
computed, q_lens = [9, 4, 20], [1, 3, 1]
cm = vllm_stubs.common_attn_metadata(computed, q_lens, BS, 8, rng, NBLK)
n = cm.num_actual_tokens
impl = vb.AttnBackendImpl(H, D, 0.25, HK, kv_cache_dtype="fp8")


class Layer:  # vLLM's Attention layer, as far as the scales go (kv_scale_type "attn_head")
    layer_name = "model.layers.0.attn"
    _k_scale = vllm_stubs.tensor(np.array([0.02, 0.05], np.float32))
    _v_scale = vllm_stubs.tensor(np.array([0.004, 0.01], np.float32))
    _k_scale_float = _v_scale_float = 1.0  # not read when the tensors are per head
    _q_scale = vllm_stubs.tensor(np.array(3.0, np.float32))  # not read: queries arrive unquantized


layer = Layer()
ks, vs = layer._k_scale.numpy(), layer._v_scale.numpy()
bt = cm.block_table_tensor.numpy()
slots = np.concatenate([bt[r, np.arange(c + q) // BS].astype(np.int64) * BS + np.arange(c + q) % BS
                        for r, (c, q) in enumerate(zip(computed, q_lens))])
keys = vllm_stubs.tensor((rng.standard_normal((len(slots), HK, D)) * 3).astype(np.float32))
vals = vllm_stubs.tensor(rng.standard_normal((len(slots), HK, D)).astype(np.float32))
impl.do_kv_cache_update(layer, keys, vals, kv, vllm_stubs.tensor(slots))
cache = np.asarray(kv.numpy().transpose(0, 2, 1, 3))  # physical [num_blocks, block_size, kv heads, 2 * D]
got_cache = np.stack([cache[..., :D], cache[..., D:]])
want_cache = np.zeros((2, NBLK, BS, HK, D), np.uint8)
attn.reshape_and_cache(keys.numpy(), vals.numpy(), want_cache, slots, kv_cache_dtype="fp8", k_scale=ks, v_scale=vs)
assert np.array_equal(got_cache, want_cache), "per-head write differs from attn.reshape_and_cache"
scalar_cache = np.zeros_like(want_cache)
attn.reshape_and_cache(keys.numpy(), vals.numpy(), scalar_cache, slots, kv_cache_dtype="fp8", k_scale=1.0,
                       v_scale=1.0)
assert not np.array_equal(scalar_cache, want_cache)
meta = b.build(0, cm)
q = vllm_stubs.tensor(rng.standard_normal((n, H, D)).astype(np.float32))
outs = []
for _ in range(2):  # the layer's shared option block is reused: the second call must give the same bits
    out = vllm_stubs.tensor(np.full((n, H, D), np.nan, np.float32))
    impl.forward(layer, q, None, None, kv, meta, out)
    outs.append(out.numpy().copy())
want = attn.paged_attention(q.numpy(), want_cache, cm.query_start_loc_cpu.numpy()[:4], cm.seq_lens.numpy()[:3],
                            bt[:3], softmax_scale=0.25, kv_cache_dtype="fp8", k_scale=ks, v_scale=vs)
assert all(np.array_equal(o, want) for o in outs), "per-head forward differs from attn.paged_attention"
# then a per-tensor layer on the same impl: the per-head pointers are gone from the option block
class Scalar:
    _k_scale = vllm_stubs.tensor(np.array(1.0, np.float32))
    _v_scale = vllm_stubs.tensor(np.array(1.0, np.float32))
    _k_scale_float = _v_scale_float = 1.0


out = vllm_stubs.tensor(np.zeros((n, H, D), np.float32))
impl.forward(Scalar(), q, None, None, kv, meta, out)
want1 = attn.paged_attention(q.numpy(), want_cache, cm.query_start_loc_cpu.numpy()[:4], cm.seq_lens.numpy()[:3],
                             bt[:3], softmax_scale=0.25, kv_cache_dtype="fp8", k_scale=1.0, v_scale=1.0)
assert np.array_equal(out.numpy(), want1)
# the KV-stored notification path with per-head scales
events = []
impl.on_kv_stored = lambda name, ev: events.append(name)
impl.do_kv_cache_update(layer, keys[:2], vals[:2], kv, vllm_stubs.tensor(slots[:2]))
assert events == ["model.layers.0.attn"]
# a scale tensor that is neither per tensor nor per head is named
class Bad(Layer):
    _v_scale = vllm_stubs.tensor(np.ones(3, np.float32))


try:
    impl.forward(Bad(), q, None, None, kv, meta, out)
    err = None
except ValueError as e:
    err = str(e)
print(json.dumps({"error": err}))
'''


@pytest.fixture(params=["ext"])
def plugin_backend(request):
    if request.param == "ext" and _binding.ext is None:
        pytest.skip("attn._ext is not built")
    return request.param


def test_vllm_plugin_per_head_scales(plugin_backend):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.join(ROOT, "python")]))
    if not env.get("ATTN_LIBRARY") and attn.library_path:
        env["ATTN_LIBRARY"] = attn.library_path
    if _binding.path:
        env["ATTN_EXTENSION"] = _binding.path
    env.pop("ATTN_VLLM_MARKER", None)
    r = subprocess.run([sys.executable, "-c", _PLUGIN], env=env, capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["error"] and "layer._v_scale has 3 elements" in res["error"], res


def test_cache_leftpad_on_fp8_cache(rng, ctx1):
    """cache_leftpad on an fp8 cache (the left-padded keys are read by the paged entry, which dequantizes them):
    the new keys are stored with their scales, and the output is that of a float32 cache holding the dequantized
    values (one scale per KV head for keys, one per tensor for values) with the same padding."""
    kv = (rng.standard_normal((2, 8, 4, HK, D)) * 0.01).astype(ml_dtypes.float8_e4m3fn)
    bt = np.array([[3, 0, 6, 1], [2, 7, 4, 5]], np.int32)
    q = rng.standard_normal((2, 1, H, D)).astype(np.float32)
    kn = (rng.standard_normal((2, 1, HK, D)) * 0.01).astype(np.float32)
    seqlens, pad = np.array([5, 9], np.int32), np.array([1, 2], np.int32)
    out = attn.flash_attn_with_kvcache(q, kv[0], kv[1], k=kn, v=kn, cache_seqlens=seqlens, block_table=bt,
                                       cache_leftpad=pad, k_descale=KS, v_descale=0.5, causal=True, ctx=ctx1)
    for b in range(2):  # the new key at position cache_seqlens[b], stored as fp8(k / scale)
        p = int(seqlens[b])
        np.testing.assert_array_equal(kv[0, bt[b, p // 4], p % 4].view(np.uint8), _codes(kn[b, 0], KS, "fp8_e4m3"))
    kf = kv[0].astype(np.float32) * KS[None, None, :, None]
    vf = kv[1].astype(np.float32) * np.float32(0.5)
    want = attn.flash_attn_with_kvcache(q, kf, vf, cache_seqlens=seqlens + 1, block_table=bt, cache_leftpad=pad,
                                        causal=True, ctx=ctx1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-7)
