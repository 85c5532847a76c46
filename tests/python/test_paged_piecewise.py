"""Piecewise spans over a paged KV cache (attn.diffusion.forward_paged_piecewise, vllm-omni
run_paged_piecewise_plan): bitwise equal to the dense piecewise path on the same keys, the homogeneous CFG
batch run one call per piece on strided slices (bitwise equal to the single call), rows with different
cached prefixes, and the float64 reference with the literal span mask."""

import numpy as np
import pytest

import attn
from attn import diffusion as D
from conftest import np_attend


def _paged(rng, k, v, seq_lens, block_size):
    """Writes row r's first seq_lens[r] keys of k/v [rows, S, Hk, D] into shuffled pages of a NaN-filled
    cache; returns (cache, block_table)."""
    rows, _, hk, d = k.shape
    need = [-(-int(s) // block_size) for s in seq_lens]
    width = max(need) + 1
    nb = sum(need) + 2
    cache = np.full((2, nb, block_size, hk, d), np.nan, np.float32)
    perm = rng.permutation(nb).astype(np.int32)
    bt = np.full((rows, width), 7777, np.int32)  # junk past each row's blocks (ignored)
    nxt = 0
    for r in range(rows):
        bt[r, :need[r]] = perm[nxt:nxt + need[r]]
        nxt += need[r]
        j = np.arange(int(seq_lens[r]))
        slots = bt[r, j // block_size].astype(np.int64) * block_size + j % block_size
        attn.reshape_and_cache(k[r], v[r], cache, slots)
    return cache, bt


def _keep(spans, qlen, s, offset=None):
    offset = s - qlen if offset is None else offset
    pos = offset + np.arange(qlen)
    lim = pos + 1
    for a, e in spans:
        lim = np.where((pos >= a) & (pos < e), e, lim)
    return np.arange(s)[None, :] < lim[:, None]


def test_cfg_batch_matches_dense_and_per_piece(rng, ctx1):
    rows, s, h, hk, d, bs = 2, 19, 4, 2, 32, 4  # two CFG rows, spans [(5, 10)]
    q = rng.standard_normal((rows, s, h, d)).astype(np.float32)
    k = rng.standard_normal((rows, s, hk, d)).astype(np.float32)
    v = rng.standard_normal((rows, s, hk, d)).astype(np.float32)
    seq = np.full(rows, s, np.int32)
    cache, bt = _paged(rng, k, v, seq, bs)
    spans = [(5, 10)]
    out, lse = D.forward_paged_piecewise(q, cache, seq, bt, spans, return_lse=True, ctx=ctx1)
    dense, dlse = D.forward_piecewise(q, k, v, spans, return_lse=True, ctx=ctx1)
    np.testing.assert_array_equal(out, dense)  # bitwise: same driver, keys through pages
    np.testing.assert_array_equal(lse, dlse)
    pieces, plse = D.forward_paged_piecewise(q, cache, seq, bt, spans, per_piece=True, return_lse=True, ctx=ctx1)
    np.testing.assert_array_equal(pieces, out)
    np.testing.assert_array_equal(plse, lse)
    assert D.paged_piecewise_segments(spans, 0, s) == [(0, 5, 5, "causal"), (5, 10, 10, "full"),
                                                      (10, 19, 19, "causal")]
    ref = D.forward_paged_piecewise(q, cache, seq, bt, spans, reference=True)
    for r in range(rows):
        want, _ = np_attend(q[r], k[r], v[r], keep=_keep(spans, s, s))
        np.testing.assert_allclose(out[r], want, atol=2e-5)
        np.testing.assert_allclose(ref[r], want, atol=1e-6)
    # a strided q (a slice of a bigger buffer) and a caller-owned out
    big = np.zeros((rows, s + 3, h, d), np.float32)
    big[:, 3:] = q
    o2 = np.empty_like(q)
    D.forward_paged_piecewise(big[:, 3:], cache, seq, bt, spans, out=o2, ctx=ctx1)
    np.testing.assert_array_equal(o2, out)


def test_rows_with_different_prefixes(rng, ctx1):
    rows, qlen, h, hk, d, bs = 3, 6, 2, 1, 64, 16
    seq = np.array([30, 17, 40], np.int32)  # each row: cached prefix + 6 new queries at its tail
    smax = int(seq.max())
    q = rng.standard_normal((rows, qlen, h, d)).astype(np.float32)
    k = rng.standard_normal((rows, smax, hk, d)).astype(np.float32)
    v = rng.standard_normal((rows, smax, hk, d)).astype(np.float32)
    cache, bt = _paged(rng, k, v, seq, bs)
    spans = [(2, 9), (12, 16)]
    out = D.forward_paged_piecewise(q, cache, seq, bt, spans, softcap=30.0, ctx=ctx1)
    for r in range(rows):
        sr = int(seq[r])
        dense = D.forward_piecewise(q[r:r + 1], k[r:r + 1, :sr], v[r:r + 1, :sr], spans, softcap=30.0, ctx=ctx1)
        np.testing.assert_array_equal(out[r], dense[0])
        want, _ = np_attend(q[r], k[r, :sr], v[r, :sr], softcap=30.0, keep=_keep(spans, qlen, sr))
        np.testing.assert_allclose(out[r], want, atol=2e-5)
    with pytest.raises(attn.AttnInvalidArgumentError, match="homogeneous"):
        D.forward_paged_piecewise(q, cache, seq, bt, spans, per_piece=True, ctx=ctx1)


def test_errors_name_the_argument(rng, ctx1):
    q = rng.standard_normal((2, 6, 2, 32)).astype(np.float32)
    k = rng.standard_normal((2, 10, 2, 32)).astype(np.float32)
    seq = np.array([10, 8], np.int32)
    cache, bt = _paged(rng, k, k, seq, 4)
    out = np.full_like(q, 7.0)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"spans\[0\]=\(3,9\).*seq_lens\[1\]=8"):
        D.forward_paged_piecewise(q, cache, seq, bt, [(3, 9)], out=out, ctx=ctx1)
    bad = bt.copy()
    bad[0, 1] = 999
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"block_table: entry \[0\]\[1\] = 999"):
        D.forward_paged_piecewise(q, cache, seq, bad, [(3, 5)], out=out, ctx=ctx1)
    with pytest.raises(attn.AttnUnsupportedError, match="causal"):
        D.forward_paged_piecewise(q, cache, seq, bt, [(3, 5)], causal=True, out=out, ctx=ctx1)
    assert np.all(out == 7.0)  # nothing written
