"""Regression tests of the Python-package review: integer arguments never wrap into 32-bit C
fields, index arrays are range checked before narrowing, caches are never written before a failing check,
errors name the argument (no NumPy internals), allocated varlen outputs have defined tail rows, and the
paged flash-attn paths accept more queries than keys (rows before key 0 see nothing)."""

import warnings

import numpy as np
import pytest

import attn
import attn.vllm.ops
from attn import _arrays
from conftest import HAVE_TORCH, np_attend

BIG = 2**32


def _qkv(rng, b=1, sq=5, sk=9, h=2, hkv=2, d=16):
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    return q, k, v


# ------------------------------------------------------------------------------------------------
# 1. Python ints never wrap into int32 fields
# ------------------------------------------------------------------------------------------------
def test_window_beyond_int32_is_unbounded_and_below_minus_one_rejected(rng, ctx1):
    q, k, v = _qkv(rng)
    want, _ = np_attend(q[0], k[0], v[0], window=(-1, 0))
    for fn in (lambda w: attn.attention(q, k, v, window_size=w, ctx=ctx1),
               lambda w: attn.flash_attn_func(q, k, v, window_size=w, ctx=ctx1)):
        got = fn((BIG, 0))  # used to wrap to (0, 0)
        np.testing.assert_allclose(got[0], want, atol=2e-5)
        np.testing.assert_array_equal(fn((2**31 - 1, 0)), got)  # INT32_MAX is passed as is, same answer
        np.testing.assert_array_equal(fn((np.int64(BIG), 0)), got)
        for bad in ((-2, 0), (0, -BIG)):
            with pytest.raises(ValueError, match=r"window_size.*< -1"):
                fn(bad)
        with pytest.raises(TypeError, match="window_size"):
            fn((1.5, 0))
    p = attn.Params(num_heads=2, window_size=(BIG + 7, 3))
    assert p.args[2:4] == (-1, 3)  # attn_params.window_left, window_right


def test_causal_values_are_validated(rng, ctx1):
    q, k, v = _qkv(rng, sq=6, sk=6)
    plain = attn.attention(q, k, v, ctx=ctx1)
    causal = attn.attention(q, k, v, causal=True, ctx=ctx1)
    assert not np.array_equal(plain, causal)
    for bad in (BIG, -1, 3, BIG + 1):  # BIG used to wrap to 0 = no mask
        with pytest.raises(ValueError, match="causal"):
            attn.attention(q, k, v, causal=bad, ctx=ctx1)
        with pytest.raises(ValueError, match="causal"):
            attn.flash_attn_func(q, k, v, causal=bad, ctx=ctx1)
    with pytest.raises(TypeError, match="causal"):
        attn.attention(q, k, v, causal=1.5, ctx=ctx1)
    np.testing.assert_array_equal(attn.attention(q, k, v, causal=None, ctx=ctx1), plain)
    np.testing.assert_array_equal(attn.flash_attn_func(q, k, v, causal=None, ctx=ctx1), plain)
    np.testing.assert_array_equal(attn.attention(q, k, v, causal=1, ctx=ctx1), causal)
    np.testing.assert_array_equal(attn.attention(q, k, v, causal=np.int64(1), ctx=ctx1), causal)
    np.testing.assert_array_equal(attn.attention(q, k, v, causal=2, ctx=ctx1),
                                  attn.attention(q, k, v, causal="top_left", ctx=ctx1))


def test_num_threads_range():
    for bad in (BIG + 1, 0, -1, 1025):  # BIG + 1 used to wrap to 1
        with pytest.raises(ValueError, match=f"num_threads={bad}"):
            attn.Context(num_threads=bad)
    with pytest.raises(TypeError, match="num_threads"):
        attn.Context(num_threads=2.0)
    with attn.Context(num_threads=1024) as c:
        assert c.num_threads == 1024
        with pytest.raises(ValueError, match="num_threads"):
            c.num_threads = BIG + 2
        assert c.num_threads == 1024


# ------------------------------------------------------------------------------------------------
# 2. Index arrays: range checked before narrowing
# ------------------------------------------------------------------------------------------------
def test_index_array_range_checks():
    np.testing.assert_array_equal(_arrays.index_array(np.array([0, 5], np.int64), "x"), [0, 5])
    np.testing.assert_array_equal(_arrays.index_array(np.array([7], np.uint64), "x", np.int64), [7])
    np.testing.assert_array_equal(_arrays.index_array([0, 2**31 - 1], "x"), [0, 2**31 - 1])
    with pytest.raises(ValueError, match=r"cu_seqlens_q: entry 1 = 4294967299 does not fit int32"):
        _arrays.index_array(np.array([0, BIG + 3], np.int64), "cu_seqlens_q")
    with pytest.raises(ValueError, match=r"block_table: entry \[1, 0\] = -4294967296"):
        _arrays.index_array(np.array([[0], [-BIG]], np.int64), "block_table")
    with pytest.raises(ValueError, match=r"slot_mapping: entry 0 = 18446744073709551615"):
        _arrays.index_array(np.array([2**64 - 1], np.uint64), "slot_mapping", np.int64)
    with pytest.raises(ValueError, match="seq_lens"):
        _arrays.index_array([1, BIG], "seq_lens")
    with pytest.raises(ValueError, match="seq_lens"):
        _arrays.index_array([2**70], "seq_lens", np.int64)


def test_wide_cu_seqlens_and_cache_seqlens_rejected(rng, ctx1):
    q = rng.standard_normal((3, 2, 16)).astype(np.float32)
    cu_bad = np.array([0, BIG + 3], np.int64)  # used to become [0, 3]
    with pytest.raises(ValueError, match="cu_seqlens_k: entry 1 = 4294967299"):
        attn.flash_attn_varlen_func(q, q, q, np.array([0, 3], np.int64), cu_bad, ctx=ctx1)
    with pytest.raises(ValueError, match="cu_seqlens_q: entry 1 = 4294967299"):
        attn.attention_varlen(q, q, q, cu_bad, np.array([0, 3]), ctx=ctx1)
    kc = np.zeros((1, 8, 2, 16), np.float32)
    vc = np.zeros_like(kc)
    qq = rng.standard_normal((1, 1, 2, 16)).astype(np.float32)
    kn = np.ones((1, 1, 2, 16), np.float32)
    for cs in (np.array([BIG + 2], np.int64), BIG + 2):  # used to become 2
        with pytest.raises(ValueError, match="cache_seqlens"):
            attn.flash_attn_with_kvcache(qq, kc, vc, kn, kn, cache_seqlens=cs, ctx=ctx1)
    assert not kc.any() and not vc.any()


def test_uint64_slot_mapping_rejected_not_skipped(rng, ctx1):
    key = rng.standard_normal((1, 2, 16)).astype(np.float32)
    kv = np.zeros((2, 4, 4, 2, 16), np.float32)
    sm = np.array([2**64 - 1], np.uint64)  # used to become -1 (a pad slot: silently skipped)
    with pytest.raises(ValueError, match="slot_mapping: entry 0 = 18446744073709551615"):
        attn.reshape_and_cache(key, key, kv, sm, ctx=ctx1)
    with pytest.raises(ValueError, match="slot_mapping: entry 0 = 18446744073709551615"):
        attn.vllm.ops.reshape_and_cache(key, key, kv[0], kv[1], sm, ctx=ctx1)
    k2, v2 = np.zeros((4, 4, 2, 16), np.float32), np.zeros((4, 4, 2, 16), np.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        attn.vllm.ops.reshape_and_cache(key, key, k2, v2, sm, ctx=ctx1)
    assert not kv.any() and not k2.any() and not v2.any()
    attn.reshape_and_cache(key, key, kv, np.array([5], np.uint64), ctx=ctx1)  # in range: written
    np.testing.assert_array_equal(kv[0, 1, 1], key[0])


# ------------------------------------------------------------------------------------------------
# 3. flash_attn_with_kvcache: nothing written before a failing check
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shared", [True, False])
def test_kvcache_bad_seqlens_write_nothing(rng, ctx1, shared):
    if shared:
        kv = np.zeros((2, 2, 8, 1, 16), np.float32)
        kc, vc = kv[0], kv[1]
    else:
        kc, vc = np.zeros((2, 8, 1, 16), np.float32), np.zeros((2, 8, 1, 16), np.float32)
    q = rng.standard_normal((2, 1, 2, 16)).astype(np.float32)
    kn = np.ones((2, 2, 1, 16), np.float32)
    cases = [(np.array([3, -1], np.int32), r"cache_seqlens: entry 1 = -1 is negative"),
             (np.array([-8, 0], np.int32), r"cache_seqlens: entry 0 = -8 is negative"),
             (np.array([7, 0], np.int32), r"cache_seqlens: entry 0 = 7 \+ seqlen_new=2 exceeds .* 8")]
    for cs, msg in cases:
        with pytest.raises(ValueError, match=msg):
            attn.flash_attn_with_kvcache(q, kc, vc, kn, kn, cache_seqlens=cs, ctx=ctx1)
        assert not kc.any() and not vc.any()
    # paged: a bad block id, a too-narrow table, a bad option: nothing written either
    bt = np.array([[0], [5]], np.int32)
    with pytest.raises(ValueError, match=r"block_table: entry \[1\]\[0\] = 5"):
        attn.flash_attn_with_kvcache(q, kc, vc, kn, kn, cache_seqlens=1, block_table=bt, ctx=ctx1)
    with pytest.raises(ValueError, match="window_size"):
        attn.flash_attn_with_kvcache(q, kc, vc, kn, kn, cache_seqlens=1, window_size=(-3, 0), ctx=ctx1)
    with pytest.raises(ValueError, match="alibi_slopes"):
        attn.flash_attn_with_kvcache(q, kc, vc, kn, kn, cache_seqlens=1, alibi_slopes=np.ones(5, np.float32),
                                     ctx=ctx1)
    assert not kc.any() and not vc.any()


# ------------------------------------------------------------------------------------------------
# 4. vllm_ops.reshape_and_cache with separate caches
# ------------------------------------------------------------------------------------------------
def test_vllm_reshape_and_cache_separate_caches_validates_value_first(rng, ctx1):
    kc, vc = np.zeros((4, 4, 2, 16), np.float32), np.zeros((4, 4, 2, 16), np.float32)
    key = rng.standard_normal((3, 2, 16)).astype(np.float32)
    sm = np.array([0, 5, 9], np.int64)
    cases = [(key, key[:, :1], vc, ValueError, r"value: shape \[3, 1, 16\]"),
             (key, key[:2], vc, ValueError, "value: 2 tokens"),
             (key, key.astype(np.float16), vc, TypeError, "value: dtype float16 differs from key"),
             (key, key, vc[:2], ValueError, "value_cache: shape"),
             (key, key, vc.astype(np.float16), ValueError, "value_cache: .*dtype float16"),
             (key, key, vc[..., :8], ValueError, r"value: shape \[3, 2, 16\], expected \[num_tokens, 2, 8\]"),
             (key.astype(np.float64), key, vc, TypeError, "key: dtype float64")]
    for k, v, vcache, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            attn.vllm.ops.reshape_and_cache(k, v, kc, vcache, sm, ctx=ctx1)
        assert not kc.any() and not vc.any()
    attn.vllm.ops.reshape_and_cache(key, 2 * key, kc, vc, sm, ctx=ctx1)
    np.testing.assert_array_equal(kc[2, 1], key[2])
    np.testing.assert_array_equal(vc[1, 1], 2 * key[1])


# ------------------------------------------------------------------------------------------------
# 5. Errors name the argument, expected and actual shape
# ------------------------------------------------------------------------------------------------
def _bad_calls(rng):
    q = rng.standard_normal((2, 1, 2, 16)).astype(np.float32)
    kc, vc = np.zeros((2, 8, 1, 16), np.float32), np.zeros((2, 8, 1, 16), np.float32)
    kn = np.ones((3, 1, 1, 16), np.float32)
    qv = rng.standard_normal((4, 2, 16)).astype(np.float32)
    pk = np.zeros((4, 4, 1, 16), np.float32)
    cq, ck = np.array([0, 2, 4], np.int32), np.array([0, 3, 6], np.int32)
    bt2 = np.array([[0, 1], [2, 3]], np.int32)
    q1, k1, _ = _qkv(rng, b=1, h=4, hkv=4)
    q3, k3, _ = _qkv(rng, b=3, h=4, hkv=4)
    fk = attn.flash_attn_with_kvcache
    fv = attn.flash_attn_varlen_func
    return {
        "kvcache_k_wrong_batch": (lambda: fk(q, kc, vc, kn, kn, cache_seqlens=1), ValueError,
                                  r"k: shape \[3, 1, 1, 16\], expected \[2, 1, 1, 16\]"),
        "kvcache_out_wrong_shape": (lambda: fk(q, kc, vc, cache_seqlens=1, out=np.empty((2, 2, 2, 16), np.float32)),
                                    ValueError, r"out: shape \[2, 2, 2, 16\], expected \[2, 1, 2, 16\]"),
        "kvcache_1d_block_table": (lambda: fk(q, kc, vc, cache_seqlens=1, block_table=np.array([0, 1], np.int32)),
                                   ValueError, r"block_table: shape \[2\], expected \[2, \*\]"),
        "kvcache_block_table_rows": (lambda: fk(q, kc, vc, cache_seqlens=1, block_table=np.zeros((3, 1), np.int32)),
                                     ValueError, r"block_table: shape \[3, 1\], expected \[2, \*\]"),
        "kvcache_cache_smaller_than_batch": (lambda: fk(q, kc[:1], vc[:1], cache_seqlens=1), ValueError,
                                             "k_cache: batch_cache=1 < batch=2"),
        "kvcache_batch_idx_out_of_range": (lambda: fk(q, kc, vc, cache_seqlens=1,
                                                      cache_batch_idx=np.array([0, 2], np.int32)),
                                           ValueError, "cache_batch_idx: entry 1 = 2 is not a row"),
        "kvcache_batch_idx_length": (lambda: fk(q, kc, vc, cache_seqlens=1, cache_batch_idx=np.array([0], np.int32)),
                                     ValueError, r"cache_batch_idx: shape \[1\], expected \[2\]"),
        "kvcache_cache_seqlens_length": (lambda: fk(q, kc, vc, cache_seqlens=np.array([1, 1, 1], np.int32)),
                                         ValueError, r"cache_seqlens: shape \[3\], expected \[2\]"),
        "kvcache_v_cache_shape": (lambda: fk(q, kc, vc[:, :4], cache_seqlens=1), ValueError,
                                  r"v_cache: shape \[2, 4, 1, 16\] does not match k_cache"),
        "varlen_seqused_k_length": (lambda: fv(qv, pk, pk, cq, ck, block_table=bt2,
                                               seqused_k=np.array([3], np.int32)),
                                    ValueError, r"seqused_k: shape \[1\], expected \[2\]"),
        "varlen_block_table_rows": (lambda: fv(qv, pk, pk, cq, ck, block_table=bt2[:1]), ValueError,
                                    r"block_table: shape \[1, 2\], expected \[2, \*\]"),
        "varlen_1d_block_table": (lambda: fv(qv, pk, pk, cq, ck, block_table=bt2[0]), ValueError,
                                  r"block_table: shape \[2\], expected \[2, \*\]"),
        "varlen_cu_seqlens_k_length": (lambda: fv(qv, pk, pk, cq, ck[:2], block_table=bt2), ValueError,
                                       r"cu_seqlens_k: shape \[2\], expected \[3\]"),
        "varlen_paged_out_shape": (lambda: fv(qv, pk, pk, cq, ck, block_table=bt2,
                                              out=np.empty((4, 2, 8), np.float32)),
                                   ValueError, r"out: shape \[4, 2, 8\], expected \[4, 2, 16\]"),
        "alibi_2d_too_many_rows": (lambda: attn.flash_attn_func(q1, k1, k1, alibi_slopes=np.ones((3, 4), np.float32)),
                                   ValueError, r"alibi_slopes: shape \[3, 4\], expected \[1, 4\]"),
        "alibi_2d_too_few_rows": (lambda: attn.flash_attn_func(q3, k3, k3, alibi_slopes=np.ones((1, 4), np.float32)),
                                  ValueError, r"alibi_slopes: shape \[1, 4\], expected \[3, 4\]"),
        "float64_q": (lambda: attn.flash_attn_func(q1.astype(np.float64), k1, k1), TypeError,
                      r"q: dtype float64 .*expected float32, float16 or bfloat16\)$"),
    }


@pytest.mark.parametrize("case", sorted(_bad_calls(np.random.default_rng(0))))
def test_errors_name_the_argument(case):
    fn, exc, msg = _bad_calls(np.random.default_rng(0))[case]
    with pytest.raises(exc, match=msg) as info:
        fn()
    text = str(info.value)
    assert "reshape" not in text and "index" not in text.lower() and "int32" not in text


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_meta_device_tensor_is_rejected_clearly():
    import torch

    q = torch.empty((1, 2, 2, 16), device="meta")
    k = torch.zeros((1, 2, 2, 16))
    with pytest.raises(ValueError, match=r"q: tensor must be on the CPU .*'meta'"):
        attn.flash_attn_func(q, k, k)
    with pytest.raises(ValueError, match=r"k: tensor must be on the CPU"):
        attn.attention(k, q, k)


# ------------------------------------------------------------------------------------------------
# 6. Defined outputs, forward-only warning, documented copies
# ------------------------------------------------------------------------------------------------
def test_varlen_allocated_output_tail_rows_are_zero(rng, ctx1):
    q = rng.standard_normal((7, 2, 16)).astype(np.float32) * 50  # rows 5, 6 are past cu_seqlens_q[-1]
    k = rng.standard_normal((6, 2, 16)).astype(np.float32)
    cq, ck = np.array([0, 2, 5], np.int32), np.array([0, 3, 6], np.int32)
    for _ in range(3):  # fresh np.empty memory is often recycled garbage: check several times
        out, lse = attn.flash_attn_varlen_func(q, k, k, cq, ck, return_softmax_lse=True, ctx=ctx1)
        assert np.all(out[5:] == 0) and np.all(lse[:, 5:] == -np.inf)
        want, _ = np_attend(q[2:5], k[3:6], k[3:6])
        np.testing.assert_allclose(out[2:5], want, atol=2e-5)
        pk = k.reshape(3, 2, 2, 16)  # paged: 3 blocks of 2
        out, lse = attn.flash_attn_varlen_func(q, pk, pk, cq, ck, block_table=np.array([[0, 1], [1, 2]], np.int32),
                                               return_softmax_lse=True, ctx=ctx1)
        assert np.all(out[5:] == 0) and np.all(lse[:, 5:] == -np.inf)
    mine = np.full((7, 2, 16), 3.0, np.float32)  # a caller's out keeps its tail
    attn.flash_attn_varlen_func(q, k, k, cq, ck, out=mine, ctx=ctx1)
    assert np.all(mine[5:] == 3.0)


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_requires_grad_warns_once(monkeypatch, ctx1):
    import torch

    monkeypatch.setattr(_arrays, "_grad_warned", False)
    q = torch.randn(1, 3, 2, 16, requires_grad=True)
    with pytest.warns(UserWarning, match="no gradients are tracked") as rec:
        attn.flash_attn_func(q, q, q, ctx=ctx1)
    assert len(rec) == 1 and rec[0].filename == __file__  # points at the caller, once per call site
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attn.flash_attn_func(q, q, q, ctx=ctx1)


def test_docstrings_state_copies_and_tails():
    # two allocations with equal strides are read in place (test_flash.py); only differing strides copy
    doc = " ".join(attn.flash_attn_with_kvcache.__doc__.split())
    assert "or two allocations, as long as their strides are equal" in doc and "strides differ are attended through a COPY" in doc
    assert "strides differ: a COPY" in " ".join(attn.flash_attn_varlen_func.__doc__.split())
    assert "past cu_seqlens_q[-1] are zero" in attn.flash_attn_varlen_func.__doc__


# ------------------------------------------------------------------------------------------------
# More queries than keys on the paged paths (rows before key 0: out 0, lse -inf)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_paged_more_queries_than_keys(rng, ctx1, causal):
    nb, bs, hkv, h, d = 8, 4, 1, 2, 16
    kv = rng.standard_normal((2, nb, bs, hkv, d)).astype(np.float32)
    lq, lk = [5, 3, 2], [3, 0, 6]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    bt = np.array([[6, 0], [0, 0], [2, 5]], np.int32)
    q = rng.standard_normal((cq[-1], h, d)).astype(np.float32)
    separate = (kv[0].copy(), kv[1].copy())
    for kc, vc in ((kv[0], kv[1]), separate):
        out, lse = attn.flash_attn_varlen_func(q, kc, vc, cq, ck, causal=causal, block_table=bt,
                                               return_softmax_lse=True, ctx=ctx1)
        for i, n in enumerate(lk):
            keys = kv[:, bt[i]].reshape(2, -1, hkv, d)[:, :n]
            want, wl = np_attend(q[cq[i]:cq[i + 1]], keys[0], keys[1], causal=causal)
            np.testing.assert_allclose(out[cq[i]:cq[i + 1]], want, atol=2e-5)
            np.testing.assert_allclose(lse[:, cq[i]:cq[i + 1]], wl, atol=2e-5, rtol=1e-5)
        if causal:
            assert np.all(out[:2] == 0) and np.all(lse[:, :2] == -np.inf)  # 5 queries, 3 keys
        assert np.all(out[5:8] == 0) and np.all(lse[:, 5:8] == -np.inf)  # no keys at all
        none = attn.flash_attn_varlen_func(q, kc, vc, cq, np.zeros(4, np.int32), causal=causal,
                                           block_table=bt, ctx=ctx1)  # no request has a key
        assert np.all(none == 0)


@pytest.mark.parametrize("paged", [True, False])
def test_kvcache_more_queries_than_keys(rng, ctx1, paged):
    b, h, hkv, d, sq = 2, 2, 1, 16, 4
    cache_seqlens = np.array([1, 0], np.int32)
    hist = rng.standard_normal((2, b, 8, hkv, d)).astype(np.float32)
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    kn = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    vn = rng.standard_normal((b, 1, hkv, d)).astype(np.float32)
    if paged:
        kv = np.zeros((2, 4, 4, hkv, d), np.float32)
        bt = np.array([[3, 1], [0, 2]], np.int32)
        for i in range(b):
            kv[:, bt[i, 0], :1] = hist[:, i, :1]
    else:
        kv = np.zeros((2, b, 8, hkv, d), np.float32)
        kv[:, :, :1] = hist[:, :, :1]
        bt = None
    kc, vc = kv[0], kv[1]
    out, lse = attn.flash_attn_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=cache_seqlens, block_table=bt,
                                            causal=True, return_softmax_lse=True, ctx=ctx1)
    for i, n in enumerate(cache_seqlens):
        keys = np.concatenate([hist[0, i, :n], kn[i]])
        vals = np.concatenate([hist[1, i, :n], vn[i]])
        want, wl = np_attend(q[i], keys, vals, causal=True)
        np.testing.assert_allclose(out[i], want, atol=2e-5)
        np.testing.assert_allclose(lse[i], wl, atol=2e-5, rtol=1e-5)
        assert np.all(out[i, :sq - n - 1] == 0) and np.all(lse[i, :, :sq - n - 1] == -np.inf)


# ------------------------------------------------------------------------------------------------
# Bad array inputs raise the library's exception family with the C message style
# ("<argument>: <what is wrong>"), before any C call and without writing anything
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, writable, exc, msg", [
    (lambda: np.zeros((2, 3), np.complex64), False, TypeError, r"^ATTN_STATUS_INVALID_ARGUMENT: x: dtype complex64"),
    (lambda: np.zeros((2, 3), np.uint16), False, TypeError, r"x: dtype uint16 is not supported"),
    (lambda: np.zeros((1,) * 7, np.float32), False, ValueError, r"x: ndim=7 > 6"),
    (lambda: np.zeros((2, 3), np.float32)[:, ::-1], False, ValueError, r"x: stride\[1\]=-4 bytes is negative"),
    (lambda: [[0.0, 1.0], [2.0, 3.0]], True, TypeError, r"x: expected a writable array .* got list"),
    (lambda: np.zeros((2, 3), np.float32).view(np.ndarray), True, None, None),
])
def test_bad_arrays_one_exception_family(make, writable, exc, msg):
    x = make()
    if exc is None:
        _arrays.tensor(x, "x", writable)  # the control: a writable array is fine
        return
    with pytest.raises(attn.AttnError, match=msg) as info:
        _arrays.tensor(x, "x", writable)
    assert isinstance(info.value, attn.AttnInvalidArgumentError) and isinstance(info.value, exc)
    assert info.value.status_name == "ATTN_STATUS_INVALID_ARGUMENT"
    assert info.value.message.startswith("x: ")


def test_read_only_output_and_lists(rng):
    out = np.zeros((2, 3), np.float32)
    out.setflags(write=False)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"out: array is read-only") as info:
        _arrays.tensor(out, "out", writable=True)
    assert isinstance(info.value, ValueError) and info.value.message == "out: array is read-only"
    # lists are converted for inputs (Python floats become float64, which attn names like any bad dtype), and
    # index lists give the same family on bad values
    assert _arrays.tensor([[np.float32(1.0), np.float32(2.0)]], "q").shape == (1, 2)
    with pytest.raises(attn.AttnError, match=r"^ATTN_STATUS_INVALID_ARGUMENT: q: dtype float64") as info:
        _arrays.tensor([[1.0, 2.0]], "q")
    assert isinstance(info.value, TypeError)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"cu_seqlens_q: entry 1 = 4294967299 does not fit int32"):
        _arrays.index_array([0, BIG + 3], "cu_seqlens_q")
    with pytest.raises(attn.AttnError, match=r"seq_lens: expected integers, got float at entry 1"):
        _arrays.index_array([1, 2.5, 2**70], "seq_lens")
    with pytest.raises(attn.AttnError, match=r"block_table: expected an integer array, got dtype float32"):
        _arrays.index_array(np.zeros(3, np.float32), "block_table")


def test_bad_inputs_end_to_end_are_attn_errors(rng):
    """Through the public functions: wrong dtypes, read-only caches and non-contiguous rows all raise
    attn.AttnError subclasses (from the array checks or from the C validation) and leave the cache as it was."""
    from attn import ops as attn_ops

    q, k, v = _qkv(rng)
    with pytest.raises(attn.AttnError, match=r"q: .*(dtype|float64)"):
        attn.flash_attn_func(q.astype(np.float64), k, v)
    with pytest.raises(attn.AttnError, match=r"strides\[3\]=2.*contiguous"):
        attn.flash_attn_func(np.repeat(q, 2, axis=3)[..., ::2], k, v)
    cache = np.zeros((2, 2, 4, 2, 16), np.float32)
    cache.setflags(write=False)
    key = rng.standard_normal((3, 2, 16)).astype(np.float32)
    with pytest.raises(attn.AttnError, match=r"kv_cache"):
        attn_ops.reshape_and_cache(key, key, cache, np.array([0, 1, 2], np.int64))
    assert not cache.any()
