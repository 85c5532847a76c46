"""attn under vLLM's decode context parallel (DCP): `make test-vllm` (docs/CONTEXT_PARALLEL.md).

In-process checks (seconds):
  - dcp_local_lens and the DCP slot mapping attn registers for vLLM's CPU worker against literal loops over
    the token positions (vLLM's rule: position p lives on rank (p // I) % N at local index (p // (I·N))·I + p % I);
  - AttnBackendImpl.forward under DCP 2 and 3, the ranks as threads over a stand-in DCP group (all_gather through
    a barrier), each with its own cache shard written through that slot mapping: every rank's output equals the
    float64 oracle over the whole, unsharded sequence (decodes, a chunked prefill with context, a fresh prefill;
    interleave 1 and block_size).
End to end (one short prompt, ~2 minutes on 2 cores): a small random-weight Llama (attn_demo.tiny_llama) at
TP 1 in one process and at TP 2 + DCP 2 (two worker processes), chunked prefill on: greedy tokens identical,
and both ranks ran attn's DCP path on steps with sharded context.
Skipped, with the reason, without vLLM.
"""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("vLLM is not importable here: `make test-vllm` installs it into its own venv "
                "(scripts/vllm_env.sh) and runs this file there", allow_module_level=True)

import torch  # noqa: E402

from attn import ops  # noqa: E402
from attn.vllm import backend as vb  # noqa: E402


# ------------------------------------------------------------------------------------------------
# The sharding rule
# ------------------------------------------------------------------------------------------------
def _owner(p, world, interleave):
    return (p // interleave) % world


@pytest.mark.parametrize("world,interleave", [(2, 1), (2, 4), (3, 1), (4, 2)])
def test_dcp_local_lens_count_the_owned_positions(world, interleave):
    lens = np.arange(0, 40)
    for rank in range(world):
        want = [sum(_owner(p, world, interleave) == rank for p in range(n)) for n in lens]
        assert vb.dcp_local_lens(lens, world, rank, interleave).tolist() == want
    assert (sum(vb.dcp_local_lens(lens, world, r, interleave) for r in range(world)) == lens).all()


@pytest.mark.parametrize("world,interleave,block_size", [(2, 1, 4), (2, 4, 4), (3, 2, 8)])
def test_cp_slot_mapping_matches_the_rule(world, interleave, block_size):
    rng = np.random.default_rng(7)
    q_lens = [3, 1, 9, 5]
    qsl = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    starts = [0, 17, 4, 30]  # each request's first scheduled position
    positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, q_lens)]).astype(np.int64)
    width = 8
    bt = rng.permutation(64)[:4 * width].reshape(4, width).astype(np.int32)
    num_tokens, max_num_tokens = int(qsl[-1]) + 2, int(qsl[-1]) + 6
    for rank in range(world):
        sm = torch.full((max_num_tokens,), 12345, dtype=torch.int64)
        vb._cp_slot_mapping(num_tokens, max_num_tokens, torch.from_numpy(qsl), torch.from_numpy(positions),
                            torch.from_numpy(bt), width, sm, block_size, world, rank, interleave, -1, 1024)
        want = []
        for r in range(4):
            for p in range(starts[r], starts[r] + q_lens[r]):
                if _owner(p, world, interleave) != rank:
                    want.append(-1)
                    continue
                local = sum(_owner(x, world, interleave) == rank for x in range(p))  # index among its tokens
                want.append(int(bt[r, local // block_size]) * block_size + local % block_size)
        got = sm.tolist()
        assert got[:int(qsl[-1])] == want, f"rank {rank}"
        assert got[int(qsl[-1]):num_tokens] == [12345] * (num_tokens - int(qsl[-1]))  # untouched
        assert got[num_tokens:] == [-1] * (max_num_tokens - num_tokens)


# ------------------------------------------------------------------------------------------------
# The impl under DCP, ranks as threads
# ------------------------------------------------------------------------------------------------
class _Group:
    """A stand-in for vLLM's DCP GroupCoordinator: all_gather(t, dim) of `world` threads."""

    def __init__(self, world):
        self.world = world
        self.barrier = threading.Barrier(world)
        self.slots = [None] * world

    def rank_view(self, rank):
        group = self

        class View:
            world_size, rank_in_group = group.world, rank

            @staticmethod
            def all_gather(t, dim=0):
                group.slots[rank] = t.clone()
                group.barrier.wait()
                res = torch.cat(list(group.slots), dim=dim)
                group.barrier.wait()
                return res

        return View()


H, HK, D, BS, NB = 2, 1, 16, 4, 48


def _rounded(a, dtype):
    """a (float32) rounded to dtype and back: the values a run in dtype sees, for the float64 oracle."""
    return torch.from_numpy(a).to(dtype).float().numpy()


def _run_dcp(world, interleave, reqs, causal=True, dtype=torch.float32):
    """reqs: [(context_len, q_len)]. Returns (outputs per rank [n, H, D] as float32, oracle [n, H·world, D])."""
    rng = np.random.default_rng(11 + world * 10 + interleave)
    n = sum(q for _, q in reqs)
    total_heads = H * world
    q_full = _rounded(rng.standard_normal((n, total_heads, D)).astype(np.float32), dtype)
    seqs = [_rounded(rng.standard_normal((2, c + q, HK, D)).astype(np.float32), dtype)
            for c, q in reqs]  # K and V per request
    width = 6
    bt = rng.permutation(NB)[:len(reqs) * width].reshape(len(reqs), width).astype(np.int32)
    qsl = np.concatenate([[0], np.cumsum([q for _, q in reqs])]).astype(np.int32)
    seq_lens = np.array([c + q for c, q in reqs], np.int32)
    group = _Group(world)
    outs = [None] * world
    errors = []

    def rank_main(rank):
        _local.ctx = ops.Context(num_threads=1)  # one attn context per rank (a process each in vLLM)
        try:
            impl = vb.AttnBackendImpl(num_heads=H, head_size=D, scale=0.25, num_kv_heads=HK)
            impl.dcp_world_size, impl.dcp_rank = world, rank
            kv = torch.zeros((NB, HK, BS, 2 * D), dtype=dtype)
            # the whole sequences (context and the step's tokens) through the DCP slot mapping of this rank
            positions = np.concatenate([np.arange(len(s[0])) for s in seqs]).astype(np.int64)
            all_qsl = np.concatenate([[0], np.cumsum(seq_lens)]).astype(np.int32)
            sm = torch.empty(len(positions), dtype=torch.int64)
            vb._cp_slot_mapping(len(positions), len(positions), torch.from_numpy(all_qsl),
                                torch.from_numpy(positions), torch.from_numpy(bt), width, sm, BS, world, rank,
                                interleave)
            keys = torch.from_numpy(np.concatenate([s[0] for s in seqs])).to(dtype)
            vals = torch.from_numpy(np.concatenate([s[1] for s in seqs])).to(dtype)
            impl.do_kv_cache_update(None, keys, vals, kv, sm)
            new_k = torch.from_numpy(np.concatenate([s[0][c:] for s, (c, _) in zip(seqs, reqs)])).to(dtype)
            new_v = torch.from_numpy(np.concatenate([s[1][c:] for s, (c, _) in zip(seqs, reqs)])).to(dtype)
            context = seq_lens - np.diff(qsl)
            meta = vb.AttnMetadata(
                num_actual_tokens=n, max_query_len=int(np.diff(qsl).max()), max_seq_len=int(seq_lens.max()),
                query_start_loc=torch.from_numpy(qsl), seq_lens=torch.from_numpy(seq_lens),
                block_table=torch.from_numpy(bt), slot_mapping=sm, causal=causal, kind="decoder", attn_state=-1,
                num_decodes=0, num_decode_tokens=0, num_prefills=len(reqs), plan=None, token_src=None,
                workspace=None, workspace_size=0, dcp_world_size=world,
                dcp_local_context_lens=torch.from_numpy(vb.dcp_local_lens(context, world, rank, interleave)
                                                        .astype(np.int32)),
                dcp_has_context=bool(context.max() > 0))
            q = torch.from_numpy(q_full[:, rank * H:(rank + 1) * H].copy()).to(dtype)
            out = torch.full((n, H, D), 7.0, dtype=dtype)
            _local.group = group.rank_view(rank)  # what get_dcp_group() returns in this thread (dcp_group)
            assert impl.forward(None, q, new_k, new_v, kv, meta, out) is out
            outs[rank] = out.float().numpy()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            group.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    ref = np.concatenate([
        ops.attention_varlen(q_full[qsl[i]:qsl[i + 1]], s[0], s[1], [0, qsl[i + 1] - qsl[i]], [0, len(s[0])],
                             softmax_scale=0.25, causal=causal, reference=True)
        for i, s in enumerate(seqs)])
    return outs, ref


_local = threading.local()


@pytest.fixture
def dcp_group(monkeypatch):
    """get_dcp_group() and the impl's attn context per thread: the thread's rank."""
    import vllm.distributed.parallel_state as ps

    monkeypatch.setattr(ps, "get_dcp_group", lambda: _local.group)
    monkeypatch.setattr(vb, "_context", lambda: _local.ctx)


@pytest.mark.parametrize("world,interleave", [(2, 1), (2, BS), (3, 1), (3, 2)])
def test_forward_under_dcp_equals_the_unsharded_oracle(dcp_group, world, interleave):
    # decodes with context, a chunked prefill with context, a fresh prefill, a context shorter than the ranks
    reqs = [(9, 1), (1, 1), (13, 5), (0, 6), (2, 3)]
    outs, ref = _run_dcp(world, interleave, reqs)
    for rank, out in enumerate(outs):
        err = float(np.abs(out - ref[:, rank * H:(rank + 1) * H]).max())
        assert err < 2e-5, f"rank {rank}: max |out - oracle| = {err}"


def test_forward_under_dcp_bf16(dcp_group):
    """A 16-bit model: the partial states travel with their float32 LSEs packed behind them as raw bytes."""
    outs, ref = _run_dcp(2, 1, [(9, 1), (13, 5), (0, 3)], dtype=torch.bfloat16)
    for rank, out in enumerate(outs):
        err = float(np.abs(out - ref[:, rank * H:(rank + 1) * H]).max())
        assert err < 2e-2, f"rank {rank}: max |out - oracle| = {err}"


def test_forward_under_dcp_without_context_skips_the_collectives(dcp_group):
    outs, ref = _run_dcp(2, 1, [(0, 4), (0, 7)])
    for rank, out in enumerate(outs):
        assert float(np.abs(out - ref[:, rank * H:(rank + 1) * H]).max()) < 2e-5


def test_dcp_refuses_position_dependent_options(monkeypatch):
    import vllm.distributed.parallel_state as ps

    # what vLLM's AttentionImpl.__new__ reads: this process is rank 0 of a DCP group of 2
    monkeypatch.setattr(ps, "get_dcp_world_size_and_rank", lambda enabled=True: (2, 0) if enabled else (1, 0))
    with pytest.raises(NotImplementedError, match="sliding_window under decode context parallel"):
        vb.AttnBackendImpl(num_heads=H, head_size=D, scale=0.25, num_kv_heads=HK, sliding_window=8)
    with pytest.raises(NotImplementedError, match="alibi_slopes, sinks under decode context parallel"):
        vb.AttnBackendImpl(num_heads=H, head_size=D, scale=0.25, num_kv_heads=HK, alibi_slopes=[0.5, 0.25],
                           sinks=torch.zeros(H))
    impl = vb.AttnBackendImpl(num_heads=H, head_size=D, scale=0.25, num_kv_heads=HK)
    assert (impl.dcp_world_size, impl.dcp_rank, impl.need_to_return_lse_for_decode) == (2, 0, True)
    assert vb.AttnBackendImpl.can_return_lse_for_decode and vb.AttnBackendImpl.supports_dcp
    assert not vb.AttnBackend.supports_pcp()


# ------------------------------------------------------------------------------------------------
# End to end: TP 1 vs TP 2 + DCP 2
# ------------------------------------------------------------------------------------------------
def test_tp2_dcp2_greedy_tokens_identical_to_one_rank():
    from attn_demo import vllm_run as vr
    from attn_demo.tiny_llama import tiny_llama_checkpoint

    model = tiny_llama_checkpoint()
    # ~70 tokens with a 32-token budget: the prompt is prefilled in chunks that read earlier chunks' keys
    job = [dict(prompts=[vr.chat(vr.PROMPTS[0], vr.SYSTEM)], max_tokens=8, ignore_eos=True)]
    one = vr.run_engine(vr.cp_spec(model, job, max_num_batched_tokens=32), "attn")
    dcp = vr.run_engine(vr.cp_spec(model, job, tp=2, dcp=2, max_num_batched_tokens=32), "attn")
    assert one["attn_ran"] and dcp["attn_ran"]
    assert "dcp=2 rank=0" in dcp["attn_marker"] and "dcp=2 rank=1" in dcp["attn_marker"], dcp["attn_marker"]
    steps = dcp["attn_steps"]
    for rank in (0, 1):  # both ranks merged sharded context into a prefill chunk and into decodes
        assert any(f"rank={rank} " in s and "context=1" in s and "prefills=1" in s for s in steps), steps
        assert any(f"rank={rank} " in s and "context=1" in s and "decodes=1" in s for s in steps), steps
    a, b = one["jobs"][0]["tokens"][0], dcp["jobs"][0]["tokens"][0]
    print(f"\n[vllm cp] TP 1 {a}\n[vllm cp] TP 2 + DCP 2 {b}")
    assert len(a) == 8 and a == b
