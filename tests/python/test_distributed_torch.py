"""attn.distributed on a torch.distributed process group (gloo, CPU), run with torch.multiprocessing: 3
processes, every case on the 3-rank group and on a 2-rank group of global ranks 1 and 2 (one spawn: starting
torch in each process is most of the test's time). Ring (also paged and with empty shards), DCP, Ulysses
(dense with a mask, varlen) and USP against one process within the MPI tier's tolerance (tests/mpi/
test_distributed.py; Ulysses bitwise), bitwise the same in two runs with fresh plans, and a bad argument / an
option given on one rank only / a plan config refused on one rank raised on every rank. Skipped without torch;
`make test-vllm` runs it with the vLLM venv's torch."""
import os
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import attn  # noqa: E402
import attn.distributed as ad  # noqa: E402

ATOL = 2e-5  # float32 partial states merged in another order than one process: the MPI tier's bound


def rnd(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def zigzag_rows(S, world, rank):
    (s0, l0), (s1, l1) = ad.zigzag_chunks(S, world, rank)
    return np.r_[s0:s0 + l0, s1:s1 + l1]


def ring_cases(group, rank, world, res):
    B, S, H, HKV, D = 2, 45, 4, 2, 32
    q, k, v = rnd((B, S, H, D), 1), rnd((B, S, HKV, D), 2), rnd((B, S, HKV, D), 3)
    rows = zigzag_rows(S, world, rank)
    lq, lk, lv = (np.ascontiguousarray(x[:, rows]) for x in (q, k, v))
    ref, ref_lse = attn.attention(q, k, v, causal=True, return_lse=True)
    plan = ad.RingPlan(group, batch=B, seq_len=S, num_heads=H, num_kv_heads=HKV, head_size=D)
    out, lse = plan.forward(torch.from_numpy(lq), torch.from_numpy(lk), torch.from_numpy(lv), causal=True,
                            return_lse=True)
    assert isinstance(out, torch.Tensor) and plan.stats.num_messages == world - 1
    np.testing.assert_allclose(out.numpy(), ref[:, rows], atol=ATOL, rtol=0)
    np.testing.assert_allclose(lse.numpy(), ref_lse[:, :, rows], atol=ATOL, rtol=0)
    res["ring"], res["ring_lse"] = out.numpy(), lse.numpy()
    # soft-cap and sinks, not causal, head_size_v != head_size
    sinks, v2 = rnd((H,), 4), rnd((B, S, HKV, 16), 5)
    ref2 = attn.attention(q, k, v2, softcap=3.0, sinks=sinks)
    plan2 = ad.RingPlan(group, batch=B, seq_len=S, num_heads=H, num_kv_heads=HKV, head_size=D, head_size_v=16)
    res["ring_sinks"] = plan2.forward(lq, lk, np.ascontiguousarray(v2[:, rows]), causal=False, softcap=3.0,
                                      sinks=sinks)
    np.testing.assert_allclose(res["ring_sinks"], ref2[:, rows], atol=ATOL, rtol=0)
    # the paged entry: the rank's shard in its own cache, bitwise equal to the dense entry
    BS = 8
    nb = -(-len(rows) // BS) + 1
    cache = np.zeros((2, nb, BS, HKV, D), np.float32)
    bt = np.arange(nb, dtype=np.int32)[::-1].copy()
    slots = bt[np.arange(len(rows)) // BS].astype(np.int64) * BS + np.arange(len(rows)) % BS
    attn.reshape_and_cache(lk[0], lv[0], cache, slots)
    plan1 = ad.RingPlan(group, batch=1, seq_len=S, num_heads=H, num_kv_heads=HKV, head_size=D)
    paged = plan1.forward_paged(lq[0], cache, bt, causal=True)
    assert np.array_equal(paged, plan1.forward(lq[:1], lk[:1], lv[:1], causal=True)[0])
    # S = 1: only rank 0 holds a row (chunk 2·world − 1); the others' empty views get arbitrary strides here
    rows = zigzag_rows(1, world, rank)
    assert len(rows) == (rank == 0)
    q3, k3 = rnd((1, 1, 2, 16), 6), rnd((1, 1, 1, 16), 7)
    lq3, lk3 = (x[:, rows] if len(rows) else np.lib.stride_tricks.as_strided(
        x, (1, 0) + x.shape[2:], (0, 4096, 0, 12)) for x in (q3, k3))
    plan3 = ad.RingPlan(group, batch=1, seq_len=1, num_heads=2, num_kv_heads=1, head_size=16)
    out3 = plan3.forward(lq3, lk3, lk3, causal=True)
    np.testing.assert_allclose(out3, attn.attention(q3, k3, k3, causal=True)[:, rows], atol=ATOL, rtol=0)


def dcp_case(group, rank, world, res):
    H, HKV, D, BS, I = 4, 2, 32, 16, 2
    seq = np.array([40, 9], np.int32)
    q, sinks = rnd((3, H, D), 8), rnd((H,), 9)
    qsl = np.array([0, 2, 3], np.int32)  # a speculative request (2 rows) and a decode
    nb = sum(-(-int(L) // BS) for L in seq)
    gcache, lcache = np.zeros((2, nb, BS, HKV, D), np.float32), np.zeros((2, nb, BS, HKV, D), np.float32)
    gbt, lbt = np.zeros((2, 4), np.int32), np.zeros((2, 4), np.int32)
    gnext = lnext = 0
    for r, L in enumerate(int(x) for x in seq):
        kk, vv = rnd((L, HKV, D), 10 + r), rnd((L, HKV, D), 20 + r)
        for j in range(-(-L // BS)):
            gbt[r, j], gnext = gnext, gnext + 1
        for j in range(-(-ad.dcp_local_len(L, world, I, rank) // BS)):
            lbt[r, j], lnext = lnext, lnext + 1
        attn.reshape_and_cache(kk, vv, gcache, gbt[r, np.arange(L) // BS].astype(np.int64) * BS + np.arange(L) % BS)
        attn.reshape_and_cache(kk, vv, lcache, ad.dcp_slot_mapping(rank, world, I, BS, 0, L, lbt[r]))
    ref, ref_lse = attn.paged_attention(q, gcache, qsl, seq, gbt, causal=True, softcap=4.0, sinks=sinks,
                                        return_lse=True)
    plan = ad.DCPPlan(group, interleave_size=I, num_heads=H, head_size=D, max_tokens=4, max_blocks_per_req=4)
    out, lse = plan.forward(q, lcache, qsl, seq, lbt, causal=True, softcap=4.0, sinks=sinks, return_lse=True)
    np.testing.assert_allclose(out, ref, atol=ATOL, rtol=0)
    np.testing.assert_allclose(lse, ref_lse, atol=ATOL, rtol=0)
    res["dcp"], res["dcp_lse"] = out, lse


def ulysses_cases(group, rank, world, res, grids):
    B, SL, H, D = 1, 4, 2 * world, 16
    S = SL * world
    q, k, v = rnd((B, S, H, D), 30), rnd((B, S, H, D), 31), rnd((B, S, H, D), 32)
    mask = np.random.default_rng(33).uniform(size=(B, H, S, S)) > 0.3
    kw = dict(mask=mask, window_size=(4, 2), alibi_slopes=rnd((H,), 34), sinks=rnd((H,), 35))
    ref, ref_lse = attn.attention(q, k, v, return_lse=True, **kw)
    sl = slice(rank * SL, (rank + 1) * SL)
    plan = ad.UlyssesPlan(group, batch=B, seq_local=SL, num_heads=H, num_kv_heads=H, head_size=D)
    out, lse = plan.forward(q[:, sl], k[:, sl], v[:, sl], return_lse=True, **kw)
    assert np.array_equal(out, ref[:, sl]) and np.array_equal(lse, ref_lse[:, :, sl])
    cu = np.array([0, 3, 3, S], np.int32)  # packed documents, one of them empty
    refv = attn.attention_varlen(q[0], k[0], v[0], cu, cu, causal=True)
    plan1 = ad.UlyssesPlan(group, batch=1, seq_local=SL, num_heads=H, num_kv_heads=H, head_size=D)
    res["ulysses_varlen"] = plan1.forward_varlen(q[0, sl], k[0, sl], v[0, sl], cu, cu, causal=True)
    assert np.array_equal(res["ulysses_varlen"], refv[sl])
    # USP on each U x R grid of the ranks: Ulysses groups of U consecutive ranks, ring groups of stride U
    R0 = 2
    for U, (ugroups, rgroups) in grids.items():
        R = world // U
        ur, rr, Su = rank % U, rank // U, 2 * R * U * R0
        qg, kg = rnd((B, Su, H, D), 40 + U), rnd((B, Su, H, D), 50 + U)
        rows = zigzag_rows(Su, R, rr).reshape(U, -1)[ur]
        ring = ad.RingPlan(rgroups[ur], batch=B, seq_len=Su, num_heads=H // U, num_kv_heads=H // U, head_size=D)
        uly = ad.UlyssesPlan(ugroups[rr], batch=B, seq_local=len(rows), num_heads=H, num_kv_heads=H, head_size=D)
        res[f"usp{U}"] = ad.usp_forward(uly, ring, qg[:, rows], kg[:, rows], kg[:, rows], causal=True)
        np.testing.assert_allclose(res[f"usp{U}"], attn.attention(qg, kg, kg, causal=True)[:, rows], atol=ATOL,
                                   rtol=0)


def error_cases(group, rank, world):
    plan = ad.UlyssesPlan(group, batch=1, seq_local=4, num_heads=2 * world, num_kv_heads=world, head_size=8)
    q, kv = rnd((1, 4, 2 * world, 8), 1), rnd((1, 4 + (rank == 0), world, 8), 2)  # rank 0: a wrong k length
    with pytest.raises(attn.AttnInvalidArgumentError, match=r"k: shape\[1\]" if rank == 0 else "rank 0"):
        plan.forward(q, kv, kv)
    kv = rnd((1, 4, world, 8), 2)
    with pytest.raises(attn.AttnInvalidArgumentError, match=re.escape("params.softcap")):
        plan.forward(q, kv, kv, softcap=5.0 if rank == world - 1 else 0.0)
    nh, nkv = (2 * world + 1, 1) if rank == 0 else (2 * world, world)  # rank 0: heads not divisible by world
    with pytest.raises(attn.AttnInvalidArgumentError, match="divisible by" if rank == 0 else "rank 0 rejected"):
        ad.UlyssesPlan(group, batch=1, seq_local=4, num_heads=nh, num_kv_heads=nkv, head_size=8)
    np.testing.assert_array_equal(plan.forward(q, kv, kv), plan.forward(q, kv, kv))  # the group still works


def grid(members, U):
    """(Ulysses groups, ring groups) of a U x R grid over the global ranks `members` (every process calls)."""
    R = len(members) // U
    return ([dist.new_group(members[g * U:(g + 1) * U]) for g in range(R)],
            [dist.new_group(members[i::U]) for i in range(U)])


def worker(rank, init):
    """3 processes: every case on the whole group and on a group of the global ranks 1 and 2 (group ranks 0 and
    1), twice with fresh plans; the two runs must give the same bits."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=3)
    try:
        groups = {3: (dist.group.WORLD, [0, 1, 2]), 2: (dist.new_group([1, 2]), [1, 2])}
        grids = {n: {U: grid(m, U) for U in (1, n)} for n, (_, m) in groups.items()}
        for world, (group, members) in groups.items():
            if rank not in members:
                continue
            r = members.index(rank)
            runs = []
            for run in range(2):
                res = {}
                ring_cases(group, r, world, res)
                dcp_case(group, r, world, res)
                ulysses_cases(group, r, world, res, grids[world])
                runs.append(res)
            assert sorted(runs[0]) == sorted(runs[1]) and len(runs[0]) >= 8
            for name in runs[0]:
                assert np.array_equal(runs[0][name], runs[1][name]), (world, name)
            error_cases(group, r, world)
        dist.barrier()  # no process tears its connections down while another still uses the groups
    finally:
        dist.destroy_process_group()


def test_gloo_2_and_3_ranks_match_one_process_bitwise_repeat(tmp_path):
    mp.spawn(worker, args=(f"file://{tmp_path}/store",), nprocs=3)
