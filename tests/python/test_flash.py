"""flash-attn calling conventions: flash_attn_func, flash_attn_varlen_func (incl. paged block_table) and
flash_attn_with_kvcache (contiguous and paged caches, appending k/v), against the NumPy reference."""

import inspect

import numpy as np
import pytest

import attn
from conftest import needs_ml_dtypes, np_attend, to_dtype, tol


def test_signatures_follow_flash_attn():
    p = inspect.signature(attn.flash_attn_func).parameters
    assert list(p)[:11] == ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "softcap",
                            "alibi_slopes", "deterministic", "return_attn_probs"]
    assert p["causal"].default is False and p["window_size"].default == (-1, -1) and p["softcap"].default == 0.0
    p = inspect.signature(attn.flash_attn_varlen_func).parameters
    assert list(p)[:7] == ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"]
    assert "block_table" in p
    p = inspect.signature(attn.flash_attn_with_kvcache).parameters
    assert list(p)[:10] == ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
                            "cache_batch_idx", "cache_leftpad"]
    assert p["return_softmax_lse"].default is False


@pytest.mark.parametrize("dtype", ["float32", "float16", pytest.param("bfloat16", marks=needs_ml_dtypes)])
def test_flash_attn_func(rng, ctx1, dtype):
    b, sq, sk, h, hkv, d = 2, 6, 19, 8, 2, 64
    q = to_dtype(rng.standard_normal((b, sq, h, d)), dtype)
    k = to_dtype(rng.standard_normal((b, sk, hkv, d)), dtype)
    v = to_dtype(rng.standard_normal((b, sk, hkv, d)), dtype)
    slopes = rng.random(h).astype(np.float32)
    out, lse = attn.flash_attn_func(q, k, v, causal=True, window_size=(4, 0), softcap=3.0,
                                    alibi_slopes=slopes, return_softmax_lse=True, ctx=ctx1)
    assert out.dtype == q.dtype and lse.shape == (b, h, sq)
    for i in range(b):
        n, nl = np_attend(q[i], k[i], v[i], causal=True, window=(4, 0), softcap=3.0, alibi=slopes)
        np.testing.assert_allclose(out[i].astype(np.float64), n, atol=tol(dtype))
        np.testing.assert_allclose(lse[i], nl, atol=tol(dtype) * 10, rtol=1e-3)
    res = attn.flash_attn_func(q, k, v, return_attn_probs=True, ctx=ctx1)
    assert len(res) == 3 and res[2] is None and res[1].shape == (b, h, sq)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        attn.flash_attn_func(q, k, v, dropout_p=0.1)


def test_flash_attn_func_per_batch_alibi_and_out(rng, ctx1):
    b, s, h, d = 3, 7, 4, 32
    q = rng.standard_normal((b, s, h, d)).astype(np.float32)
    k = rng.standard_normal((b, s, h, d)).astype(np.float32)
    slopes = rng.random((b, h)).astype(np.float32)
    out = np.empty_like(q)
    res = attn.flash_attn_func(q, k, k, causal=True, alibi_slopes=slopes, out=out, ctx=ctx1)
    assert res is out
    for i in range(b):
        n, _ = np_attend(q[i], k[i], k[i], causal=True, alibi=slopes[i])
        np.testing.assert_allclose(out[i], n, atol=2e-5)


def test_flash_attn_varlen_func(rng, ctx1):
    lq, lk = [4, 1, 11], [9, 6, 11]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = rng.standard_normal((cq[-1], 4, 32)).astype(np.float32)
    k = rng.standard_normal((ck[-1], 2, 32)).astype(np.float32)
    v = rng.standard_normal((ck[-1], 2, 32)).astype(np.float32)
    out, lse = attn.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                           return_softmax_lse=True, ctx=ctx1)
    assert lse.shape == (4, cq[-1])
    for i in range(3):
        n, nl = np_attend(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], causal=True)
        np.testing.assert_allclose(out[cq[i]:cq[i + 1]], n, atol=2e-5)
        np.testing.assert_allclose(lse[:, cq[i]:cq[i + 1]], nl, atol=2e-5, rtol=1e-5)


def test_flash_attn_varlen_func_paged(rng, ctx1):
    nb, bs, hkv, d = 16, 8, 2, 32
    kv = rng.standard_normal((2, nb, bs, hkv, d)).astype(np.float32)
    lq, lk = [3, 1], [20, 9]
    bt = np.array([[5, 2, 11], [7, 0, 0]], np.int32)
    cq = np.array([0, 3, 4], np.int32)
    ck = np.array([0, 20, 29], np.int32)
    q = rng.standard_normal((4, 4, d)).astype(np.float32)
    out = attn.flash_attn_varlen_func(q, kv[0], kv[1], cq, ck, 3, 20, causal=True, block_table=bt, ctx=ctx1)
    for i, (a, n) in enumerate(zip(lq, lk)):
        keys = kv[:, bt[i]].reshape(2, -1, hkv, d)[:, :n]
        want, _ = np_attend(q[cq[i]:cq[i + 1]], keys[0], keys[1], causal=True)
        np.testing.assert_allclose(out[cq[i]:cq[i + 1]], want, atol=2e-5)


def test_flash_attn_with_kvcache_appends_and_attends(rng, ctx1):
    b, sc, hkv, h, d = 3, 32, 2, 4, 32
    k_cache = np.zeros((b, sc, hkv, d), np.float32)
    v_cache = np.zeros((b, sc, hkv, d), np.float32)
    cache_seqlens = np.array([5, 0, 17], np.int32)
    hist_k = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    hist_v = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    for i, n in enumerate(cache_seqlens):
        k_cache[i, :n], v_cache[i, :n] = hist_k[i, :n], hist_v[i, :n]
    q = rng.standard_normal((b, 2, h, d)).astype(np.float32)
    k_new = rng.standard_normal((b, 2, hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((b, 2, hkv, d)).astype(np.float32)
    out, lse = attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cache_seqlens,
                                            causal=True, return_softmax_lse=True, ctx=ctx1)
    assert lse.shape == (b, h, 2)
    for i, n in enumerate(cache_seqlens):
        np.testing.assert_array_equal(k_cache[i, n:n + 2], k_new[i])
        np.testing.assert_array_equal(v_cache[i, n:n + 2], v_new[i])
        assert np.all(k_cache[i, n + 2:] == 0)
        want, wl = np_attend(q[i], k_cache[i, :n + 2], v_cache[i, :n + 2], causal=True)
        np.testing.assert_allclose(out[i], want, atol=2e-5)
        np.testing.assert_allclose(lse[i], wl, atol=2e-5, rtol=1e-5)
    # no new k/v, an int cache_seqlens and cache_batch_idx
    out2 = attn.flash_attn_with_kvcache(q[:2], k_cache, v_cache, cache_seqlens=4,
                                        cache_batch_idx=np.array([2, 0], np.int32), ctx=ctx1)
    for i, row in enumerate([2, 0]):
        want, _ = np_attend(q[i], k_cache[row, :4], v_cache[row, :4])
        np.testing.assert_allclose(out2[i], want, atol=2e-5)
    with pytest.raises(ValueError, match="rotary"):  # rotary needs new k/v (tests/python/test_flash_args.py)
        attn.flash_attn_with_kvcache(q, k_cache, v_cache, rotary_cos=np.ones(1), rotary_sin=np.ones(1))


def test_flash_attn_with_kvcache_paged_vllm_cache(rng, ctx1):
    """The vLLM allocation: one kv_cache [2, num_blocks, block_size, H, D]; k_cache/v_cache are its halves
    (zero-copy path), decode one token per sequence with a block table."""
    nb, bs, hkv, h, d = 12, 4, 1, 2, 16
    kv = np.zeros((2, nb, bs, hkv, d), np.float32)
    bt = np.array([[3, 9, 1], [4, 0, 0]], np.int32)
    seqlens = np.array([9, 2], np.int32)
    hist = rng.standard_normal((2, 2, 12, hkv, d)).astype(np.float32)
    for i, n in enumerate(seqlens):
        for p in range(n):
            kv[:, bt[i, p // bs], p % bs] = hist[:, i, p]
    q = rng.standard_normal((2, 1, h, d)).astype(np.float32)
    kn = rng.standard_normal((2, 1, hkv, d)).astype(np.float32)
    vn = rng.standard_normal((2, 1, hkv, d)).astype(np.float32)
    out = attn.flash_attn_with_kvcache(q, kv[0], kv[1], kn, vn, cache_seqlens=seqlens, block_table=bt,
                                       causal=True, ctx=ctx1)
    for i, n in enumerate(seqlens):
        p = int(n)
        np.testing.assert_array_equal(kv[0, bt[i, p // bs], p % bs], kn[i, 0])
        np.testing.assert_array_equal(kv[1, bt[i, p // bs], p % bs], vn[i, 0])
        keys = np.concatenate([hist[0, i, :n], kn[i]])
        vals = np.concatenate([hist[1, i, :n], vn[i]])
        want, _ = np_attend(q[i], keys, vals, causal=True)
        np.testing.assert_allclose(out[i], want, atol=2e-5)


def test_separate_cache_allocations_read_in_place(rng, ctx1):
    """k_cache and v_cache from two allocations, in either address order (v below k needs a negative kv_cache
    stride), give the joint cache's bits, appended rows land in the caller's caches, and neither cache is copied:
    the call allocates far less than one cache (a copy of both took 2 × the cache per call)."""
    import tracemalloc
    b, sc, hkv, d = 2, 256, 2, 32
    k1 = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    v1 = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    q = rng.standard_normal((b, 3, 4, d)).astype(np.float32)
    kn = rng.standard_normal((b, 3, hkv, d)).astype(np.float32)
    vn = rng.standard_normal((b, 3, hkv, d)).astype(np.float32)
    joint = np.stack([k1, v1])
    want = attn.flash_attn_with_kvcache(q, joint[0], joint[1], kn, vn, cache_seqlens=11, causal=True, ctx=ctx1)
    for order in ("k below v", "v below k"):
        pair = np.stack([k1, v1]) if order == "k below v" else np.stack([v1, k1])
        kc, vc = (pair[0], pair[1]) if order == "k below v" else (pair[1], pair[0])
        tracemalloc.start()
        got = attn.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=11, causal=True, ctx=ctx1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        np.testing.assert_array_equal(got, want, err_msg=order)
        np.testing.assert_array_equal(kc, joint[0], err_msg=order)  # the new rows at 11..13, the rest as before
        np.testing.assert_array_equal(vc, joint[1], err_msg=order)
        assert peak < k1.nbytes // 8, (order, peak, k1.nbytes)


def test_separate_caches_off_element_alignment_are_copied(rng, ctx1):
    """Two f16 caches each at an odd byte offset (np.frombuffer views of byte blobs): libattn wants element-aligned
    data, so these two allocations still go through the aligned copy and give the aligned call's bits."""
    h, hk, d, nb, bs = 4, 2, 16, 12, 8
    shape, n = (nb, bs, hk, d), nb * bs * hk * d
    rawk, rawv = np.zeros(2 * n + 2, np.uint8), np.zeros(2 * n + 2, np.uint8)
    kc = np.frombuffer(rawk.data, np.float16, n, offset=1).reshape(shape)
    vc = np.frombuffer(rawv.data, np.float16, n, offset=1).reshape(shape)
    kc[...] = rng.standard_normal(shape)
    vc[...] = rng.standard_normal(shape)
    q = rng.standard_normal((2, 1, h, d)).astype(np.float16)
    bt = np.array([[3, 1, 7, 0], [5, 2, 9, 11]], np.int32)
    cs = np.array([17, 9], np.int32)
    want = attn.flash_attn_with_kvcache(q, kc.copy(), vc.copy(), cache_seqlens=cs, block_table=bt, ctx=ctx1)
    got = attn.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=cs, block_table=bt, ctx=ctx1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("where", ["k_cache", "v_cache"])
def test_kvcache_out_in_a_cache_is_refused_before_the_write(rng, ctx1, where):
    """With new k / v, an `out` that lies in a cache is refused before the rows are appended: a refused call writes
    nothing (the attention step would refuse it only after the write)."""
    b, sc, hkv, d = 2, 64, 4, 32
    k_cache = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    v_cache = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    q = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    k_new = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    cache = k_cache if where == "k_cache" else v_cache
    out = cache.reshape(-1)[-b * hkv * d:].reshape(b, 1, hkv, d)
    k0, v0 = k_cache.copy(), v_cache.copy()
    with pytest.raises(attn.AttnInvalidArgumentError, match=f"out: overlaps {where} in memory"):
        attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=np.array([10, 20], np.int32),
                                     out=out, ctx=ctx1)
    np.testing.assert_array_equal(k_cache, k0)
    np.testing.assert_array_equal(v_cache, v0)
    # the same out outside the caches: accepted, and the rows are appended
    attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=np.array([10, 20], np.int32),
                                 out=np.empty_like(out), ctx=ctx1)
    np.testing.assert_array_equal(k_cache[0, 10], k_new[0, 0])


def test_kvcache_out_over_the_block_table_writes_nothing(ctx1):
    """`out` sharing memory with block_table (an array only the kvcache call reads) is refused before the new rows
    are appended: the attention step's own check ran only after the write."""
    q = np.ones((2, 1, 2, 8), np.float32)
    k_cache, v_cache, k = np.zeros((4, 4, 1, 8), np.float32), np.zeros((4, 4, 1, 8), np.float32), np.ones((2, 1, 1, 8),
                                                                                                           np.float32)
    buf = np.zeros(36, np.float32)
    bt = buf[:4].view(np.int32).reshape(2, 2)
    bt[:] = [[0, 1], [2, 3]]
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: overlaps block_table in memory"):
        attn.flash_attn_with_kvcache(q, k_cache, v_cache, k, k.copy(), cache_seqlens=np.array([1, 5], np.int32),
                                     block_table=bt, out=buf[3:35].reshape(2, 1, 2, 8), ctx=ctx1)
    assert not k_cache.any() and not v_cache.any()


def test_kvcache_out_meeting_an_input_writes_nothing(rng, ctx1):
    """`out` on q or on the new k with an append, and `out` in a k_cache that is copied for the call (a strided view
    whose strides differ from v_cache's) without one: refused, and no cache changes."""
    b, sc, hkv, d = 2, 16, 2, 8
    big = rng.standard_normal((b, sc, hkv, 2 * d)).astype(np.float32)
    k_strided = big[..., :d]  # strides differ from v_cache's: the extension copies the caches for the call
    v_cache = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    k_cache = rng.standard_normal((b, sc, hkv, d)).astype(np.float32)
    q = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    k_new = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    v_new = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    before = [x.copy() for x in (k_cache, v_cache, big)]
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: overlaps q in memory"):
        attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=5, out=q, ctx=ctx1)
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: overlaps k in memory"):
        attn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=5, out=k_new, ctx=ctx1)
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: overlaps k_cache in memory"):
        attn.flash_attn_with_kvcache(q, k_strided, v_cache, cache_seqlens=5, out=k_strided[:, 10:11], ctx=ctx1)
    for x, x0 in zip((k_cache, v_cache, big), before):
        np.testing.assert_array_equal(x, x0)
