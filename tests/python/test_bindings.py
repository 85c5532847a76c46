"""The C API bindings (attn.attention, attention_varlen, merge_attn_states, paged ops, Plan, Context):
parity with attn's oracle and with an independent NumPy float64 reference, for every dtype and option,
strided views, out=/lse= buffers, and errors that carry the C message and write nothing."""

import os

import numpy as np
import pytest

import attn
from conftest import needs_ml_dtypes, np_attend, to_dtype, tol


def _qkv(rng, b, sq, sk, h, hkv, d, dv=None, dtype="float32"):
    dv = d if dv is None else dv
    q = rng.standard_normal((b, sq, h, d)).astype(np.float32)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((b, sk, hkv, dv)).astype(np.float32)
    return to_dtype(q, dtype), to_dtype(k, dtype), to_dtype(v, dtype)


def _np_dense(q, k, v, **kw):
    outs, lses = zip(*[np_attend(q[b], k[b], v[b], **kw) for b in range(q.shape[0])])
    return np.stack(outs), np.stack(lses)


OPTIONS = [
    dict(),
    dict(causal=True),
    dict(causal=True, window_size=(5, 0)),
    dict(window_size=(3, 2)),
    dict(softcap=2.5),
    dict(alibi=True),
    dict(sinks=True),
    dict(causal=True, softcap=5.0, alibi=True, softmax_scale=0.3),
]


def _kw(opts, h, rng):
    kw = dict(opts)
    ref = {}
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = ref["alibi"] = (0.5 ** np.arange(1, h + 1)).astype(np.float32)
    if kw.pop("sinks", False):
        kw["sinks"] = ref["sinks"] = rng.standard_normal(h).astype(np.float32)
    ref["causal"] = kw.get("causal", False)
    ref["window"] = kw.get("window_size", (-1, -1))
    ref["softcap"] = kw.get("softcap", 0.0)
    ref["scale"] = kw.get("softmax_scale")
    return kw, ref


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize("shape", [(2, 7, 13, 4, 2, 32), (1, 33, 33, 6, 6, 64), (2, 1, 70, 8, 1, 16)],
                         ids=["gqa", "mha", "mqa-decode"])
def test_dense_matches_numpy_and_oracle(rng, ctx1, shape, opts):
    b, sq, sk, h, hkv, d = shape
    q, k, v = _qkv(rng, b, sq, sk, h, hkv, d)
    kw, ref = _kw(opts, h, rng)
    out, lse = attn.attention(q, k, v, return_lse=True, ctx=ctx1, **kw)
    rout, rlse = attn.attention(q, k, v, return_lse=True, reference=True, **kw)
    nout, nlse = _np_dense(q, k, v, **ref)
    assert out.shape == (b, sq, h, d) and out.dtype == np.float32
    assert lse.shape == (b, h, sq) and lse.dtype == np.float32
    np.testing.assert_allclose(out, nout, atol=2e-5, rtol=0)
    np.testing.assert_allclose(rout, nout, atol=1e-6, rtol=0)
    fin = np.isfinite(nlse)
    assert np.array_equal(np.isfinite(lse), fin)
    np.testing.assert_allclose(lse[fin], nlse[fin], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "float16", pytest.param("bfloat16", marks=needs_ml_dtypes)])
def test_dense_dtypes(rng, ctx1, dtype):
    q, k, v = _qkv(rng, 2, 9, 17, 4, 2, 64, dtype=dtype)
    out = attn.attention(q, k, v, causal=True, ctx=ctx1)
    assert out.dtype == q.dtype
    nout, _ = _np_dense(q, k, v, causal=True)
    np.testing.assert_allclose(out.astype(np.float64), nout, atol=tol(dtype), rtol=0)
    ref = attn.attention(q, k, v, causal=True, reference=True)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), atol=tol(dtype), rtol=0)


def test_dense_head_size_v_and_bnsd_layout(rng, ctx1):
    q, k, v = _qkv(rng, 2, 5, 11, 4, 2, 32, dv=48)
    out = attn.attention(q, k, v, ctx=ctx1)
    assert out.shape == (2, 5, 4, 48)
    # BNSD: the same data transposed (non-contiguous views, no copies)
    qt, kt, vt = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    out_t, lse_t = attn.attention(qt, kt, vt, layout="BNSD", return_lse=True, ctx=ctx1)
    assert out_t.shape == (2, 4, 5, 48)
    np.testing.assert_array_equal(out_t.transpose(0, 2, 1, 3), out)
    _, lse = attn.attention(q, k, v, return_lse=True, ctx=ctx1)
    np.testing.assert_array_equal(lse_t, lse)


def test_strided_views_of_fused_qkv(rng, ctx1):
    """q, k, v as views into one fused [b, s, 3, h, d] buffer (strides honoured, nothing copied)."""
    b, s, h, d = 2, 12, 4, 32
    qkv = rng.standard_normal((b, s, 3, h, d)).astype(np.float32)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    assert not q.flags.c_contiguous
    out = attn.attention(q, k, v, causal=True, ctx=ctx1)
    want = attn.attention(*(np.ascontiguousarray(x) for x in (q, k, v)), causal=True, ctx=ctx1)
    np.testing.assert_array_equal(out, want)
    # every other key row (stride 2 on the sequence axis)
    out2 = attn.attention(q, k[:, ::2], v[:, ::2], ctx=ctx1)
    nout, _ = _np_dense(q, k[:, ::2], v[:, ::2])
    np.testing.assert_allclose(out2, nout, atol=2e-5)


def test_out_and_lse_buffers_are_written_in_place(rng, ctx1):
    q, k, v = _qkv(rng, 1, 6, 6, 2, 2, 16)
    big = np.full((1, 6, 2, 40), 7.0, dtype=np.float32)
    out = big[..., 4:20]  # a strided view into a larger buffer
    lse = np.empty((1, 2, 6), dtype=np.float32)
    res = attn.attention(q, k, v, out=out, lse=lse, ctx=ctx1)
    assert res[0] is out and res[1] is lse
    want, want_lse = attn.attention(q, k, v, return_lse=True, ctx=ctx1)
    np.testing.assert_array_equal(big[..., 4:20], want)
    np.testing.assert_array_equal(lse, want_lse)
    assert np.all(big[..., :4] == 7.0) and np.all(big[..., 20:] == 7.0)  # nothing outside the view


def test_masks_dense(rng, ctx1):
    b, s, h, d = 2, 10, 4, 16
    q, k, v = _qkv(rng, b, s, s, h, h, d)
    kpm = np.ones((b, s), dtype=bool)
    kpm[0, 7:] = False
    kpm[1, 2] = False
    out = attn.attention(q, k, v, key_padding_mask=kpm, ctx=ctx1)
    mask = rng.random((s, s)) < 0.7
    out_m = attn.attention(q, k, v, mask=mask, ctx=ctx1)
    for i in range(b):
        n, _ = np_attend(q[i], k[i], v[i], keep=np.broadcast_to(kpm[i], (s, s)))
        np.testing.assert_allclose(out[i], n, atol=2e-5)
        n, _ = np_attend(q[i], k[i], v[i], keep=mask)
        np.testing.assert_allclose(out_m[i], n, atol=2e-5)


def test_fully_masked_rows_give_zero_and_minus_inf(ctx1):
    q = np.ones((1, 3, 1, 8), np.float32)
    k = np.ones((1, 5, 1, 8), np.float32)
    out, lse = attn.attention(q, k, k, window_size=(0, 0), causal=True,
                              key_padding_mask=np.zeros((1, 5), bool), return_lse=True, ctx=ctx1)
    assert np.all(out == 0) and np.all(lse == -np.inf)


def test_varlen_matches_numpy(rng, ctx1):
    lq, lk = [3, 0, 9, 1], [5, 4, 9, 12]
    cq = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    ck = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    h, hkv, d = 6, 3, 32
    q = rng.standard_normal((cq[-1], h, d)).astype(np.float32)
    k = rng.standard_normal((ck[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((ck[-1], hkv, d)).astype(np.float32)
    for kw in (dict(), dict(causal=True), dict(causal=True, window_size=(2, 0), softcap=3.0)):
        out, lse = attn.attention_varlen(q, k, v, cq, ck, return_lse=True, ctx=ctx1, **kw)
        rout, rlse = attn.attention_varlen(q, k, v, list(cq), list(ck), return_lse=True, reference=True, **kw)
        assert lse.shape == (h, cq[-1])
        for i in range(len(lq)):
            n, nl = np_attend(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]],
                              causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)),
                              softcap=kw.get("softcap", 0.0))
            np.testing.assert_allclose(out[cq[i]:cq[i + 1]], n, atol=2e-5)
            np.testing.assert_allclose(rout[cq[i]:cq[i + 1]], n, atol=1e-6)
            np.testing.assert_allclose(lse[:, cq[i]:cq[i + 1]], nl, atol=2e-5, rtol=1e-5)


def test_merge_attn_states_matches_formula(rng, ctx1):
    t, h, d = 5, 3, 16
    oa = rng.standard_normal((t, h, d)).astype(np.float32)
    ob = rng.standard_normal((t, h, d)).astype(np.float32)
    la = rng.standard_normal((h, t)).astype(np.float32)
    lb = rng.standard_normal((h, t)).astype(np.float32)
    la[0, 0] = lb[0, 0] = -np.inf
    out, lse = attn.merge_attn_states(oa, la, ob, lb, return_lse=True, ctx=ctx1)
    with np.errstate(invalid="ignore"):
        want_lse = np.logaddexp(la.astype(np.float64), lb)
        wa = np.exp(la - want_lse).T[..., None]
        wb = np.exp(lb - want_lse).T[..., None]
    want = np.nan_to_num(wa * oa + wb * ob)
    np.testing.assert_allclose(out, want, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=1e-5)
    assert np.all(out[0, 0] == 0) and lse[0, 0] == -np.inf
    # merging two halves of the keys equals attention over all of them
    q = rng.standard_normal((1, t, h, d)).astype(np.float32)
    k = rng.standard_normal((1, 20, h, d)).astype(np.float32)
    o1, l1 = attn.attention(q, k[:, :8], k[:, :8], return_lse=True, ctx=ctx1)
    o2, l2 = attn.attention(q, k[:, 8:], k[:, 8:], return_lse=True, ctx=ctx1)
    om = attn.merge_attn_states(o1[0], l1[0], o2[0], l2[0], out=o1[0], ctx=ctx1)  # in place (alias)
    full = attn.attention(q, k, k, ctx=ctx1)
    np.testing.assert_allclose(om, full[0], atol=2e-6)


# ------------------------------------------------------------------------------------------------
# Paged KV cache
# ------------------------------------------------------------------------------------------------
def _paged_setup(rng, seq_lens, q_lens, h=6, hkv=2, d=32, bs=4, nb=32, dtype=np.float32):
    kv = np.zeros((2, nb, bs, hkv, d), dtype=dtype)
    perm = rng.permutation(nb).astype(np.int32)
    max_blocks = max(-(-s // bs) for s in seq_lens) + 1
    bt = np.zeros((len(seq_lens), max_blocks), np.int32)
    used = 0
    for r, s in enumerate(seq_lens):
        n = -(-s // bs)
        bt[r, :n] = perm[used:used + n]
        used += n
    keys = [rng.standard_normal((s, hkv, d)).astype(np.float32) for s in seq_lens]
    vals = [rng.standard_normal((s, hkv, d)).astype(np.float32) for s in seq_lens]
    slots = np.concatenate([bt[r, np.arange(s) // bs].astype(np.int64) * bs + np.arange(s) % bs
                            for r, s in enumerate(seq_lens)])
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = rng.standard_normal((qsl[-1], h, d)).astype(np.float32)
    return kv, bt, np.concatenate(keys), np.concatenate(vals), slots, qsl, q, keys, vals


def test_reshape_and_cache_and_paged_attention(rng, ctx1):
    seq_lens, q_lens = [5, 9, 1, 13], [5, 2, 1, 1]
    kv, bt, k, v, slots, qsl, q, keys, vals = _paged_setup(rng, seq_lens, q_lens)
    attn.reshape_and_cache(k, v, kv, slots, ctx=ctx1)
    bs = kv.shape[2]
    for t, s in enumerate(slots):
        np.testing.assert_array_equal(kv[0, s // bs, s % bs], k[t])
        np.testing.assert_array_equal(kv[1, s // bs, s % bs], v[t])
    sl = np.array(seq_lens, np.int32)
    out, lse = attn.paged_attention(q, kv, qsl, sl, bt, return_lse=True, ctx=ctx1)
    rout = attn.paged_attention(q, kv, qsl, sl, bt, reference=True)
    for r in range(len(seq_lens)):
        n, nl = np_attend(q[qsl[r]:qsl[r + 1]], keys[r], vals[r], causal=True)
        np.testing.assert_allclose(out[qsl[r]:qsl[r + 1]], n, atol=2e-5)
        np.testing.assert_allclose(rout[qsl[r]:qsl[r + 1]], n, atol=1e-6)
        np.testing.assert_allclose(lse[:, qsl[r]:qsl[r + 1]], nl, atol=2e-5, rtol=1e-5)
    # bitwise equal to varlen over the same keys (attn.h promise)
    ck = np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)
    vout = attn.attention_varlen(q, k, v, qsl, ck, causal=True, ctx=ctx1)
    np.testing.assert_array_equal(out, vout)


def test_reshape_and_cache_pad_slot_and_bad_slot(rng, ctx1):
    kv = np.zeros((2, 4, 2, 1, 8), np.float32)
    k = np.ones((3, 1, 8), np.float32)
    attn.reshape_and_cache(k, 2 * k, kv, np.array([0, -1, 7]), ctx=ctx1)
    assert np.all(kv[0, 0, 0] == 1) and np.all(kv[1, 3, 1] == 2) and kv.sum() == 2 * 8 * 3
    before = kv.copy()
    with pytest.raises(attn.AttnInvalidArgumentError, match="slot_mapping: entry 1 = 8 >= "):
        attn.reshape_and_cache(k, k, kv, np.array([1, 8, 2]), ctx=ctx1)
    np.testing.assert_array_equal(kv, before)  # nothing written


def test_copy_and_swap_blocks(rng, ctx1):
    kv = rng.standard_normal((2, 6, 4, 2, 8)).astype(np.float32)
    before = kv.copy()
    attn.copy_blocks(kv, np.array([[0, 3], [3, 5]]), ctx=ctx1)  # in order: 5 gets the copied 0
    np.testing.assert_array_equal(kv[:, 3], before[:, 0])
    np.testing.assert_array_equal(kv[:, 5], before[:, 0])
    np.testing.assert_array_equal(kv[:, [0, 1, 2, 4]], before[:, [0, 1, 2, 4]])
    host = np.zeros((2, 3, 4, 2, 8), np.float32)
    attn.swap_blocks(kv, host, [[1, 2], [4, 0]], ctx=ctx1)
    np.testing.assert_array_equal(host[:, 2], kv[:, 1])
    np.testing.assert_array_equal(host[:, 0], kv[:, 4])
    assert np.all(host[:, 1] == 0)
    with pytest.raises(attn.AttnInvalidArgumentError, match="block_mapping"):
        attn.swap_blocks(kv, host, [[1, 3]], ctx=ctx1)


def test_plan_orders_decode_first_and_matches_plan_less(rng, ctx1):
    seq_lens, q_lens = [7, 20, 3, 600], [7, 1, 3, 1]  # fresh, decode, fresh, long decode (split-KV)
    kv, bt, k, v, slots, qsl, q, keys, vals = _paged_setup(rng, seq_lens, q_lens, bs=16, nb=64)
    attn.reshape_and_cache(k, v, kv, slots, ctx=ctx1)
    reqs = [attn.PlanRequest(s - n, n, bt[r, :-(-s // 16)]) for r, (s, n) in enumerate(zip(seq_lens, q_lens))]
    plan = attn.Plan(reqs, num_blocks=64, block_size=16, num_heads=6, num_kv_heads=2, head_size=32,
                     max_blocks_per_req=bt.shape[1])
    assert plan.num_decodes == 2 and plan.num_prefills == 2
    assert plan.req_order.tolist() == [1, 3, 0, 2]
    assert plan.attn_state == 3  # ChunkedPrefill (mixed batch)
    np.testing.assert_array_equal(plan.seq_lens, np.array(seq_lens)[plan.req_order])
    out_plan = plan.forward(q[plan.token_src], kv, ctx=ctx1)
    out = attn.paged_attention(q, kv, qsl, np.array(seq_lens, np.int32), bt, ctx=ctx1)
    np.testing.assert_array_equal(out_plan, out[plan.token_src])
    with attn.Context(num_threads=2) as c2:  # bitwise independent of the thread count
        np.testing.assert_array_equal(plan.forward(q[plan.token_src], kv, ctx=c2), out_plan)


def test_plan_of_an_engine_step_equals_the_per_request_plan():
    # the metadata builder's one-call plan (vLLM's padded arrays as they are): a table whose rows are strided,
    # num_blocks 0 (not known yet: the largest block id used + 1), decoder and cross requests
    seq_lens, q_lens = np.array([7, 20, 3, 600, 0], np.int32), np.array([7, 1, 3, 1, 0], np.int32)
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    table = np.arange(2 * 5 * 40, dtype=np.int32).reshape(5, 80)[:, ::2]  # [5, 40], rows strided
    n = 4  # (row 4: vLLM's padding, never read)
    for kind in ("decoder", "cross"):
        cfg = attn.ops._plan_config(0, 16, 6, 2, 32, 1)
        got = attn.Plan._of_step(cfg, kind, qsl, seq_lens, table, n)
        ids = [table[r, :-(-int(seq_lens[r]) // 16)] for r in range(n)]
        reqs = [attn.PlanRequest(0 if kind == "cross" else s - q, q, ids[r], kind=kind,
                                 encoder_len=s if kind == "cross" else 0)
                for r, (s, q) in enumerate(zip(seq_lens[:n].tolist(), q_lens[:n].tolist()))]
        want = attn.Plan(reqs, num_blocks=max(int(i.max()) for i in ids) + 1, block_size=16, num_heads=6,
                         num_kv_heads=2, head_size=32, max_blocks_per_req=40)
        for f in ("num_reqs", "num_tokens", "num_decodes", "num_prefills", "attn_state", "max_seq_len",
                  "workspace_size", "num_split_items", "identity_order"):
            assert getattr(got, f) == getattr(want, f), (kind, f)
        for f in ("query_start_loc", "seq_lens", "slot_mapping", "block_table", "req_order", "token_src"):
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f"{kind} {f}")
    with pytest.raises(attn.AttnInvalidArgumentError, match="num_blocks=-5"):  # as the per-request plan
        attn.Plan._of_step(attn.ops._plan_config(-5, 16, 6, 2, 32, 1), "decoder", qsl, seq_lens, table, n)
    with pytest.raises(ValueError, match="num_reqs=6 exceeds"):
        attn.Plan._of_step(cfg, "decoder", qsl, seq_lens, table, 6)
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"requests\[1\]"):  # a block table too narrow
        attn.Plan._of_step(cfg, "decoder", qsl, seq_lens, table[:, :1], n)


def test_plan_errors_name_the_request():
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"requests\[0\]"):
        attn.Plan([attn.PlanRequest(0, 4, [99])], num_blocks=8, block_size=16, num_heads=2, num_kv_heads=1,
                  head_size=16, max_blocks_per_req=4)


# ------------------------------------------------------------------------------------------------
# Errors, context, info
# ------------------------------------------------------------------------------------------------
def test_errors_carry_the_c_message_and_write_nothing(rng, ctx1):
    q, k, v = _qkv(rng, 1, 4, 4, 4, 3, 16)  # 4 heads over 3 kv heads: invalid
    out = np.full((1, 4, 4, 16), 3.0, np.float32)
    with pytest.raises(attn.AttnInvalidArgumentError) as e:
        attn.attention(q, k, v, out=out, ctx=ctx1)
    assert "k: shape[2]=3 does not divide num_heads=4" in str(e.value) and e.value.status == 1
    assert e.value.status_name == "ATTN_STATUS_INVALID_ARGUMENT"
    assert e.value.message == attn.last_error()
    assert isinstance(e.value, ValueError)
    assert np.all(out == 3.0)
    with pytest.raises(attn.AttnInvalidArgumentError, match="cu_seqlens_q: entry"):
        attn.attention_varlen(q[0], k[0, :, :1], v[0, :, :1], [0, 3, 2], [0, 2, 4], ctx=ctx1)
    with pytest.raises(attn.AttnUnsupportedError) as e:  # a valid combination the entry refuses
        attn.diffusion.forward_kv_prefix(q, q, q, 2, causal=True, out=out, ctx=ctx1)
    assert e.value.status_name == "ATTN_STATUS_UNSUPPORTED" and isinstance(e.value, NotImplementedError)
    assert np.all(out == 3.0)
    with pytest.raises(TypeError, match="dtype float64"):
        attn.attention(q.astype(np.float64), k, v, ctx=ctx1)
    with pytest.raises(ValueError, match="alibi_slopes"):
        attn.attention(q, k[:, :, :2], v[:, :, :2], alibi_slopes=np.ones(3, np.float32), ctx=ctx1)


def test_context_threads_isa_and_determinism(rng):
    q, k, v = _qkv(rng, 2, 100, 700, 4, 2, 64)
    outs = []
    for n in (1, 2, 3):
        with attn.Context(num_threads=n) as c:
            assert c.num_threads == n
            outs.append(attn.attention(q, k, v, causal=True, ctx=c))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    with attn.Context() as c:
        c.isa = "generic"
        assert c.isa == "generic"
        g = attn.attention(q, k, v, causal=True, ctx=c)
        np.testing.assert_allclose(g, outs[0], atol=1e-5)
        with pytest.raises(attn.AttnInvalidArgumentError, match="isa"):
            c.isa = "no-such-isa"
        with pytest.raises(attn.AttnInvalidArgumentError, match="num_threads"):
            c.num_threads = 0


@needs_ml_dtypes
def test_opt_in_isa_avx512bf16(rng):
    """The opt-in avx512bf16 table (docs/SEMANTICS.md §7): listed apart, never the default, reachable by name;
    bf16 decode within its stated tolerance of float64 and bitwise the same for 1 and 2 threads."""
    names = attn.isa_opt_in_names()
    assert not set(names) & set(attn.isa_names())
    if not os.environ.get("ATTN_ISA"):
        assert attn.Context().isa not in names
    if "avx512bf16" not in names or not attn.isa_available("avx512bf16"):
        pytest.skip("avx512bf16: not compiled into this build, or this CPU lacks AVX512-BF16")
    q, k, v = _qkv(rng, 2, 1, 900, 8, 2, 128, dtype="bfloat16")  # decode: 1 token x GQA 4
    outs = []
    for n in (1, 2):
        with attn.Context(num_threads=n, isa="avx512bf16") as c:
            assert c.isa == "avx512bf16"
            outs.append(attn.attention(q, k, v, causal=True, ctx=c))
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
    for b in range(2):
        ref, _ = np_attend(q[b], k[b], v[b], causal=True)
        vmax = np.max(np.abs(v[b].astype(np.float64)))
        err = np.abs(outs[0][b].astype(np.float64) - ref)
        assert np.all(err <= 2e-2 * vmax + 2e-2 * np.abs(ref)), float(err.max())


def test_info():
    i = attn.info()
    assert i["version"] == attn.__version__ and "generic" in i["isas"]
    assert i["entries"]["attn_forward"] and i["entries"]["attn_paged_attention"]
