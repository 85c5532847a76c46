"""attn.distributed without a communicator: the sharding helpers (the values the C suites of libattn_mpi pin),
optional imports (mpi4py only for an MPI communicator, torch only for a ProcessGroup), and no ctypes anywhere
in the package: the compiled extension attn._ext is its only path into the libraries. The collectives
themselves: tests/mpi/test_distributed.py (mpirun) and tests/python/test_distributed_torch.py (gloo)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import attn
import attn.distributed as ad


def test_package_has_no_ctypes():
    pkg = os.path.dirname(os.path.abspath(attn.__file__))
    users = [os.path.join(d, f) for d, _, files in os.walk(pkg) for f in files if f.endswith(".py")
             and "ctypes" in open(os.path.join(d, f), encoding="utf-8").read()]
    assert users == []


def test_import_needs_neither_mpi4py_nor_torch():
    code = ("import sys, attn.distributed as ad\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('mpi4py', 'torch'))))\n"
            "try:\n    ad.RingPlan(object(), batch=1, seq_len=4, num_heads=1, num_kv_heads=1, head_size=8)\n"
            "except TypeError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first == "" and "comm: expected an mpi4py communicator or a torch.distributed ProcessGroup" in second


def test_zigzag_chunks():
    assert ad.zigzag_chunks(45, 2, 0) == ((0, 11), (33, 12))
    assert ad.zigzag_chunks(45, 2, 1) == ((11, 11), (22, 11))
    assert ad.zigzag_chunks(1, 2, 1) == ((0, 0), (0, 0))
    rows = sorted(r for k in range(3) for s, n in ad.zigzag_chunks(50, 3, k) for r in range(s, s + n))
    assert rows == list(range(50))
    with pytest.raises(attn.AttnInvalidArgumentError, match="rank=2, expected 0..1"):
        ad.zigzag_chunks(8, 2, 2)


def test_dcp_local_len_and_slot_mapping():
    assert [ad.dcp_local_len(5, 2, 1, r) for r in (0, 1)] == [3, 2]  # vllm-ascend's worked example
    for L, P, I in ((40, 2, 2), (9, 3, 4), (100, 4, 16), (0, 2, 1)):
        assert sum(ad.dcp_local_len(L, P, I, r) for r in range(P)) == L
    assert ad.dcp_local_len(-1, 2, 1, 0) == 0 and ad.dcp_local_len(5, 2, 1, 2) == 0
    # positions 0..9, interleave 2 over 2 ranks: rank 1 owns 2, 3, 6, 7 -> local tokens 0..3 in blocks [7, 5]
    slots = ad.dcp_slot_mapping(1, 2, 2, 2, 0, 10, [7, 5])
    np.testing.assert_array_equal(slots, [-1, -1, 14, 15, -1, -1, 10, 11, -1, -1])
    with pytest.raises(attn.AttnInvalidArgumentError, match="needs block 1 >= num_block_ids=1"):
        ad.dcp_slot_mapping(1, 2, 2, 2, 0, 10, [7])
    with pytest.raises(attn.AttnInvalidArgumentError, match="< 0"):
        ad.dcp_slot_mapping(1, 2, 2, 2, 0, 10, [7, -1])
