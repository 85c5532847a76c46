"""attn.distributed under mpirun: every rank runs this pytest module and the collectives in
the same order. Ring and DCP within float tolerance of one process (attn.attention / attn.paged_attention),
Ulysses bitwise equal to one process, bad arguments raise on every rank; torch tensors when torch is
installed. Run: mpirun -np 2 python3 -m pytest -q tests/mpi/test_distributed.py (make test-mpi does)."""
import re

import numpy as np
import pytest

mpi4py = pytest.importorskip("mpi4py")
from mpi4py import MPI  # noqa: E402

import attn  # noqa: E402
import attn.distributed as ad  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, WORLD = COMM.Get_rank(), COMM.Get_size()


def rnd(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def test_ring_matches_one_process():
    B, S, H, HKV, D = 2, 45, 4, 2, 32
    q, k, v = rnd((B, S, H, D), 1), rnd((B, S, HKV, D), 2), rnd((B, S, HKV, D), 3)
    ref, ref_lse = attn.attention(q, k, v, causal=True, return_lse=True)
    (s0, l0), (s1, l1) = ad.zigzag_chunks(S, WORLD, RANK)
    rows = np.r_[s0:s0 + l0, s1:s1 + l1]
    plan = ad.RingPlan(COMM, batch=B, seq_len=S, num_heads=H, num_kv_heads=HKV, head_size=D)
    out, lse = plan.forward(np.ascontiguousarray(q[:, rows]), np.ascontiguousarray(k[:, rows]),
                            np.ascontiguousarray(v[:, rows]), causal=True, return_lse=True)
    again = plan.forward(np.ascontiguousarray(q[:, rows]), np.ascontiguousarray(k[:, rows]),
                         np.ascontiguousarray(v[:, rows]), causal=True)
    assert np.array_equal(out, again)  # bitwise repeat
    np.testing.assert_allclose(out, ref[:, rows], atol=2e-5, rtol=0)
    np.testing.assert_allclose(lse, ref_lse[:, :, rows], atol=2e-5, rtol=0)
    assert plan.stats.num_messages == WORLD - 1
    plan.close()


@pytest.mark.parametrize("S", [1, WORLD + 1])
def test_ring_empty_shard(S):
    # S < 2·WORLD: some ranks hold zero rows; NumPy gives those empty arrays zero strides
    B, H, HKV, D = 1, 2, 1, 16
    q, k, v = rnd((B, S, H, D), 31), rnd((B, S, HKV, D), 32), rnd((B, S, HKV, D), 33)
    ref, ref_lse = attn.attention(q, k, v, causal=True, return_lse=True)
    (s0, l0), (s1, l1) = ad.zigzag_chunks(S, WORLD, RANK)
    rows = np.r_[s0:s0 + l0, s1:s1 + l1]
    plan = ad.RingPlan(COMM, batch=B, seq_len=S, num_heads=H, num_kv_heads=HKV, head_size=D)
    lq, lk, lv = (np.ascontiguousarray(x[:, rows]) for x in (q, k, v))
    out, lse = plan.forward(lq, lk, lv, causal=True, return_lse=True)
    assert out.shape == (B, len(rows), H, D)
    np.testing.assert_allclose(out, ref[:, rows], atol=2e-5, rtol=0)
    np.testing.assert_allclose(lse, ref_lse[:, :, rows], atol=2e-5, rtol=0)
    plan.close()


@pytest.mark.parametrize("option", ["window_size", "softcap", "softmax_scale"])
def test_ulysses_option_on_one_rank_fails_everywhere(option):
    B, SL, H, D = 1, 3, 2 * WORLD, 16
    plan = ad.UlyssesPlan(COMM, batch=B, seq_local=SL, num_heads=H, num_kv_heads=H, head_size=D)
    q, kv = rnd((B, SL, H, D), 40 + RANK), rnd((B, SL, H, D), 50 + RANK)
    value = {"window_size": (2, 0), "softcap": 5.0, "softmax_scale": 0.5}[option]
    kw = {option: value} if RANK == WORLD - 1 else {}
    if WORLD == 1:
        plan.forward(q, kv, kv, **kw)
    else:
        name = {"window_size": "params.window_left", "softcap": "params.softcap",
                "softmax_scale": "params.softmax_scale"}[option]
        with pytest.raises(attn.AttnInvalidArgumentError, match=re.escape(name)):
            plan.forward(q, kv, kv, **kw)
    plan.close()


def test_ulysses_bitwise_with_mask():
    B, SL, H, D = 1, 6, 2 * WORLD, 16
    S = SL * WORLD
    q, k, v = rnd((B, S, H, D), 4), rnd((B, S, H, D), 5), rnd((B, S, H, D), 6)
    mask = np.random.default_rng(7).uniform(size=(B, H, S, S)) > 0.3
    ref = attn.attention(q, k, v, mask=mask, window_size=(4, 2))
    sl = slice(RANK * SL, (RANK + 1) * SL)
    plan = ad.UlyssesPlan(COMM, batch=B, seq_local=SL, num_heads=H, num_kv_heads=H, head_size=D)
    out = plan.forward(np.ascontiguousarray(q[:, sl]), np.ascontiguousarray(k[:, sl]),
                       np.ascontiguousarray(v[:, sl]), mask=mask, window_size=(4, 2))
    assert np.array_equal(out, ref[:, sl])
    plan.close()


def test_dcp_matches_one_process():
    H, HKV, D, BS, I = 4, 2, 32, 16, 2
    seq = np.array([40, 9], dtype=np.int32)
    T = 2
    q = rnd((T, H, D), 8)
    k_all = [rnd((L, HKV, D), 10 + r) for r, L in enumerate(seq)]
    v_all = [rnd((L, HKV, D), 20 + r) for r, L in enumerate(seq)]
    # one process: one cache with every token
    nb = sum((int(L) + BS - 1) // BS for L in seq)
    gcache = np.zeros((2, nb, BS, HKV, D), np.float32)
    gbt = np.zeros((2, 4), np.int32)
    lcache = np.zeros((2, nb, BS, HKV, D), np.float32)
    lbt = np.zeros((2, 4), np.int32)
    gnext = lnext = 0
    for r, L in enumerate(seq):
        L = int(L)
        for j in range((L + BS - 1) // BS):
            gbt[r, j] = gnext
            gnext += 1
        nloc = ad.dcp_local_len(L, WORLD, I, RANK)
        for j in range((nloc + BS - 1) // BS):
            lbt[r, j] = lnext
            lnext += 1
        gslots = np.array([gbt[r, p // BS] * BS + p % BS for p in range(L)], np.int64)
        lslots = ad.dcp_slot_mapping(RANK, WORLD, I, BS, 0, L, lbt[r])
        assert (lslots >= 0).sum() == nloc
        attn.reshape_and_cache(k_all[r], v_all[r], gcache, gslots)
        attn.reshape_and_cache(k_all[r], v_all[r], lcache, lslots)
    qsl = np.array([0, 1, 2], np.int32)
    ref = attn.paged_attention(q, gcache, qsl, seq, gbt, causal=True)
    plan = ad.DCPPlan(COMM, interleave_size=I, num_heads=H, head_size=D, max_tokens=4, max_blocks_per_req=4)
    out = plan.forward(q, lcache, qsl, seq, lbt, causal=True)
    np.testing.assert_allclose(out, ref, atol=2e-5, rtol=0)
    assert np.array_equal(out, plan.forward(q, lcache, qsl, seq, lbt, causal=True))
    plan.close()


def test_bad_argument_fails_on_every_rank():
    plan = ad.UlyssesPlan(COMM, batch=1, seq_local=4, num_heads=2 * WORLD, num_kv_heads=WORLD, head_size=8)
    q = rnd((1, 4, 2 * WORLD, 8), 1)
    kv = rnd((1, 4 + (RANK == 0), WORLD, 8), 2)  # rank 0 passes a wrong k length
    with pytest.raises(attn.AttnInvalidArgumentError) as e:
        plan.forward(q, kv, kv)
    if RANK == 0:
        assert "k: shape[1]" in str(e.value)
    plan.close()


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    B, SL, H, D = 1, 4, 2 * WORLD, 16
    S = SL * WORLD
    q, k, v = (torch.from_numpy(rnd((B, S, H, D), s)) for s in (1, 2, 3))
    ref = attn.attention(q.numpy(), k.numpy(), v.numpy(), causal=True)
    sl = slice(RANK * SL, (RANK + 1) * SL)
    plan = ad.UlyssesPlan(COMM, batch=B, seq_local=SL, num_heads=H, num_kv_heads=H, head_size=D)
    out = plan.forward(q[:, sl].contiguous(), k[:, sl].contiguous(), v[:, sl].contiguous(), causal=True)
    assert isinstance(out, torch.Tensor)
    assert np.array_equal(out.numpy(), ref[:, sl])


def test_closed_plan_raises():
    # closed on every rank (closing on one rank only would leave the others waiting in the collective)
    plan = ad.RingPlan(COMM, batch=1, seq_len=8, num_heads=2, num_kv_heads=1, head_size=16)
    (_, l0), (_, l1) = ad.zigzag_chunks(8, WORLD, RANK)
    q, kv = rnd((1, l0 + l1, 2, 16), 60), rnd((1, l0 + l1, 1, 16), 61)
    plan.close()
    with pytest.raises(attn.AttnInvalidArgumentError, match="plan: closed"):
        plan.forward(q, kv, kv)
