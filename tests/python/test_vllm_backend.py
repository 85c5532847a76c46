"""vLLM-style ops (attn.vllm_ops) and the vllm-ascend-shaped backend (attn.backend)."""

import math

import numpy as np
import pytest

import attn
from attn_demo import backend as B
from attn.vllm import ops as vllm_ops
from conftest import np_attend


def test_vllm_reshape_and_cache_separate_and_shared_caches(rng, ctx1):
    k = rng.standard_normal((3, 2, 8)).astype(np.float32)
    v = rng.standard_normal((3, 2, 8)).astype(np.float32)
    slots = np.array([5, -1, 0])
    shared = np.zeros((2, 4, 2, 2, 8), np.float32)  # one vLLM tensor: halves are k_cache, v_cache
    vllm_ops.reshape_and_cache(k, v, shared[0], shared[1], slots, "auto", ctx=ctx1)
    kc, vc = np.zeros((4, 2, 2, 8), np.float32), np.zeros((4, 2, 2, 8), np.float32)  # two allocations
    vllm_ops.reshape_and_cache_flash(k, v, kc, vc, slots, ctx=ctx1)
    for cache_k, cache_v in ((shared[0], shared[1]), (kc, vc)):
        np.testing.assert_array_equal(cache_k[2, 1], k[0])
        np.testing.assert_array_equal(cache_v[0, 0], v[2])
        assert np.count_nonzero(cache_k.any(axis=(-1, -2))) == 2
    with pytest.raises(attn.AttnInvalidArgumentError, match="slot_mapping"):
        vllm_ops.reshape_and_cache(k, v, kc, vc, np.array([0, 1, 8]), ctx=ctx1)
    with pytest.raises(TypeError, match="kv_cache_dtype"):  # fp8 codes need a uint8 / float8 cache
        vllm_ops.reshape_and_cache(k, v, kc, vc, slots, "fp8")
    with pytest.raises(NotImplementedError, match="kv_cache_dtype"):
        vllm_ops.reshape_and_cache(k, v, kc, vc, slots, "int8")


@pytest.mark.parametrize("order", ["k below v", "v below k"])
def test_vllm_reshape_and_cache_two_allocations_one_write(rng, ctx1, order):
    """Two cache allocations with equal strides are written through one view over both (each row converted
    once): the bytes equal the one-tensor write, for uint8 fp8 caches with distinct k / v scales and for f32."""
    k = rng.standard_normal((5, 2, 16)).astype(np.float32)
    v = rng.standard_normal((5, 2, 16)).astype(np.float32)
    slots = np.array([7, -1, 0, 13, 2])
    for dt, kv_dtype, scales in ((np.uint8, "fp8", (0.5, 2.0)), (np.float32, "auto", (1.0, 1.0))):
        joint = np.zeros((2, 4, 4, 2, 16), dt)
        vllm_ops.reshape_and_cache(k, v, joint[0], joint[1], slots, kv_dtype, *scales, ctx=ctx1)
        pair = np.zeros((2, 4, 4, 2, 16), dt)
        kc, vc = (pair[0], pair[1]) if order == "k below v" else (pair[1], pair[0])
        vllm_ops.reshape_and_cache(k, v, kc, vc, slots, kv_dtype, *scales, ctx=ctx1)
        np.testing.assert_array_equal(kc, joint[0])
        np.testing.assert_array_equal(vc, joint[1])
        assert kc.any() and vc.any()


def test_vllm_copy_swap_merge(rng, ctx1):
    layers = [rng.standard_normal((2, 5, 2, 1, 4)).astype(np.float32) for _ in range(2)]
    before = [c.copy() for c in layers]
    vllm_ops.copy_blocks([c[0] for c in layers], [c[1] for c in layers], np.array([[1, 4]]), ctx=ctx1)
    for c, b in zip(layers, before):
        np.testing.assert_array_equal(c[:, 4], b[:, 1])
        np.testing.assert_array_equal(c[:, :4], b[:, :4])
    src = rng.standard_normal((5, 2, 1, 4)).astype(np.float32)  # one key cache
    dst = np.zeros((3, 2, 1, 4), np.float32)
    vllm_ops.swap_blocks(src, dst, np.array([[4, 0], [2, 2]]), ctx=ctx1)
    np.testing.assert_array_equal(dst[0], src[4])
    np.testing.assert_array_equal(dst[2], src[2])
    assert np.all(dst[1] == 0)
    oa, ob = (rng.standard_normal((3, 2, 4)).astype(np.float32) for _ in range(2))
    la, lb = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    out, lse = np.empty_like(oa), np.empty_like(la)
    assert vllm_ops.merge_attn_states(out, oa, la, ob, lb, lse, ctx=ctx1) is out
    np.testing.assert_allclose(lse, np.logaddexp(la, lb), atol=1e-6)
    w = np.exp(la - lse).T[..., None]
    np.testing.assert_allclose(out, w * oa + (1 - w) * ob, atol=1e-5)


def test_backend_static_api():
    assert B.AttnBackend.get_kv_cache_shape(10, 16, 2, 64) == (2, 10, 16, 2, 64)
    assert B.AttnBackend.get_impl_cls() is B.AttnBackendImpl
    assert B.AttnBackend.get_builder_cls() is B.AttnMetadataBuilder
    assert 16 in B.AttnBackend.get_supported_block_size()
    assert B.AttnState.DecodeOnly == 2 and B.AttnState.ChunkedPrefill == 3


def _step(rng, computed, q_lens, *, h=4, hkv=2, d=32, bs=8, nb=32):
    seq_lens = np.array([c + n for c, n in zip(computed, q_lens)], np.int32)
    perm = rng.permutation(nb).astype(np.int32)
    bt = np.zeros((len(q_lens), -(-int(seq_lens.max()) // bs)), np.int32)
    used = 0
    for r, s in enumerate(seq_lens):
        n = -(-int(s) // bs)
        bt[r, :n] = perm[used:used + n]
        used += n
    kv = np.zeros(B.AttnBackend.get_kv_cache_shape(nb, bs, hkv, d), np.float32)
    hist = [(rng.standard_normal((s, hkv, d)).astype(np.float32), rng.standard_normal((s, hkv, d)).astype(np.float32))
            for s in seq_lens]
    for r, c in enumerate(computed):  # cached context
        pos = np.arange(c)
        attn.reshape_and_cache(hist[r][0][:c], hist[r][1][:c], kv, bt[r, pos // bs].astype(np.int64) * bs + pos % bs)
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    slots = np.concatenate([bt[r, np.arange(c, c + n) // bs].astype(np.int64) * bs + np.arange(c, c + n) % bs
                            for r, (c, n) in enumerate(zip(computed, q_lens))])
    key = np.concatenate([hist[r][0][c:] for r, c in enumerate(computed)])
    val = np.concatenate([hist[r][1][c:] for r, c in enumerate(computed)])
    q = rng.standard_normal((qsl[-1], h, d)).astype(np.float32)
    spec = B.AttnSpec(num_blocks=nb, block_size=bs, num_heads=h, num_kv_heads=hkv, head_size=d)
    cm = B.CommonAttentionMetadata(qsl, seq_lens, bt, slots)
    return spec, cm, kv, q, key, val, hist, qsl


@pytest.mark.parametrize("computed,q_lens,state", [
    ([0, 0], [5, 3], B.AttnState.PrefillNoCache),
    ([9, 4, 20], [1, 1, 1], B.AttnState.DecodeOnly),
    ([0, 9, 6, 30], [7, 1, 4, 1], B.AttnState.ChunkedPrefill),  # reordered decode-first by the plan
])
def test_backend_build_and_forward(rng, ctx1, computed, q_lens, state):
    spec, cm, kv, q, key, val, hist, qsl = _step(rng, computed, q_lens)
    builder = B.AttnMetadataBuilder(spec)
    meta = builder.build(0, cm)
    assert meta.attn_state == state
    assert meta.num_decodes == sum(1 for c, n in zip(computed, q_lens) if c > 0 and n == 1)
    impl = B.AttnBackendImpl(spec.num_heads, spec.head_size, 1 / math.sqrt(spec.head_size), spec.num_kv_heads,
                             ctx=ctx1)
    out = np.full((q.shape[0], spec.num_heads * spec.head_size), np.nan, np.float32)
    assert impl.forward(None, q, key, val, kv, meta, out) is out
    o3 = out.reshape(q.shape)
    for r, (c, n) in enumerate(zip(computed, q_lens)):
        want, _ = np_attend(q[qsl[r]:qsl[r + 1]], hist[r][0], hist[r][1], causal=True)
        np.testing.assert_allclose(o3[qsl[r]:qsl[r + 1]], want, atol=2e-5)
    # the same step through the plan-less op is bitwise equal
    plain = attn.paged_attention(q, kv, qsl, cm.seq_lens, cm.block_table_tensor, ctx=ctx1)
    np.testing.assert_array_equal(o3, plain)


def test_backend_options_and_profiling_run(rng, ctx1):
    spec, cm, kv, q, key, val, hist, qsl = _step(rng, [0, 12], [6, 1])
    meta = B.AttnMetadataBuilder(spec).build(0, cm)
    slopes = [0.5, 0.25, 0.125, 0.0625]
    impl = B.AttnBackendImpl(4, 32, 0.2, 2, alibi_slopes=slopes, sliding_window=4, logits_soft_cap=7.0, ctx=ctx1)
    out = impl.forward(None, q, key, val, kv, meta)  # output allocated
    o3 = out.reshape(q.shape)
    for r in range(2):
        want, _ = np_attend(q[qsl[r]:qsl[r + 1]], hist[r][0], hist[r][1], causal=True, window=(3, 0),
                            softcap=7.0, alibi=slopes, scale=0.2)
        np.testing.assert_allclose(o3[qsl[r]:qsl[r + 1]], want, atol=2e-5)
    zero = np.ones((q.shape[0], 128), np.float32)
    impl.forward(None, q, key, val, kv, None, zero)
    assert np.all(zero == 0)


def test_backend_encoder_only(rng, ctx1):
    """causal=False: a pooling (encoder-only) batch, non-causal over each request's own tokens."""
    h, d = 4, 16
    q_lens = [5, 3]
    qsl = np.array([0, 5, 8], np.int32)
    q = rng.standard_normal((8, h, d)).astype(np.float32)
    k = rng.standard_normal((8, h, d)).astype(np.float32)
    v = rng.standard_normal((8, h, d)).astype(np.float32)
    spec = B.AttnSpec(num_blocks=4, block_size=8, num_heads=h, num_kv_heads=h, head_size=d)
    cm = B.CommonAttentionMetadata(qsl, np.array(q_lens, np.int32), np.zeros((2, 1), np.int32),
                                   np.full(8, -1, np.int64), causal=False)
    meta = B.AttnMetadataBuilder(spec).build(0, cm)
    kv = np.zeros(B.AttnBackend.get_kv_cache_shape(4, 8, h, d), np.float32)
    out = B.AttnBackendImpl(h, d, 0.25, h, ctx=ctx1).forward(None, q, k, v, kv, meta).reshape(8, h, d)
    for r in range(2):
        s = slice(qsl[r], qsl[r + 1])
        want, _ = np_attend(q[s], k[s], v[s], scale=0.25)
        np.testing.assert_allclose(out[s], want, atol=2e-5)
    assert np.all(kv == 0)  # encoder-only batches write no cache
