"""attn.vllm.backend as a disaggregated-prefill KV producer: with AttnBackendImpl.on_kv_stored
set, each layer's do_kv_cache_update notifies right after that layer's K/V are in vLLM's cache; a producer
copies the written blocks out per layer, and the copies equal the cache; the layer id comes from vLLM's
layer name. Needs vLLM (skipped otherwise); about a second."""

from __future__ import annotations

import importlib.util
import types

import numpy as np
import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("vLLM is not importable here: `make test-vllm` runs this file in its venv",
                allow_module_level=True)

import torch  # noqa: E402

from attn.vllm import backend as vb  # noqa: E402

H, HK, D, BS, NB = 4, 2, 16, 8, 12


def test_producer_gets_each_layer_as_it_is_stored():
    g = torch.Generator().manual_seed(3)
    layers = 3
    caches = [torch.zeros(NB, BS, HK, 2 * D).permute(0, 2, 1, 3) for _ in range(layers)]  # LBNHC
    impls = [vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "auto") for _ in range(layers)]
    sent, calls = {}, []

    def producer(layer_name, ev):
        calls.append((layer_name, ev.layer_idx))
        c = caches[ev.layer_idx]  # vLLM's [B, H, N, C] view: token rows of block b are c[b, :, row]
        sent[ev.layer_idx] = {int(b): c[b].clone() for b in ev.block_ids}

    slots = torch.tensor([3 * BS + 6, 3 * BS + 7, 9 * BS, 9 * BS + 1, -1, 0])
    keys = [torch.randn(6, HK, D, generator=g) for _ in range(layers)]
    vals = [torch.randn(6, HK, D, generator=g) for _ in range(layers)]
    try:
        vb.AttnBackendImpl.on_kv_stored = staticmethod(producer)
        for i in range(layers):
            layer = types.SimpleNamespace(layer_name=f"model.layers.{i}.self_attn.attn")
            impls[i].do_kv_cache_update(layer, keys[i], vals[i], caches[i], slots)
            assert [c[1] for c in calls] == list(range(i + 1))  # layer i notified before layer i+1 runs
    finally:
        vb.AttnBackendImpl.on_kv_stored = None
    assert calls == [(f"model.layers.{i}.self_attn.attn", i) for i in range(layers)]
    for i in range(layers):
        assert sorted(sent[i]) == [0, 3, 9]
        for b, data in sent[i].items():
            assert torch.equal(data, caches[i][b])
        # the copied rows hold the keys / values written (key: first D channels, value: the rest)
        for t, s in enumerate(slots.tolist()):
            if s >= 0:
                row = sent[i][s // BS][:, s % BS]
                np.testing.assert_array_equal(row[:, :D].numpy(), keys[i][t].numpy())
                np.testing.assert_array_equal(row[:, D:].numpy(), vals[i][t].numpy())
