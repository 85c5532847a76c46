"""The parts of the vLLM plugin that need no vLLM: the capability query it declares its features
from, and vLLM's cache-op calling convention with k_scale / v_scale. The end-to-end tests with real vLLM
live in tests/vllm (``make test-vllm``)."""

import numpy as np
import pytest

import attn
from attn import _capi
from attn.vllm import ops as vllm_ops


def test_capabilities_query():
    c = _capi.capabilities()
    assert c["head_size_min"] == 1 and c["head_size_max"] == 256
    assert c["dtypes"] == {"f32", "f16", "bf16"}
    assert c["kv_cache_dtypes"] == {"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2"}  # fp8 KV caches included
    assert c["block_size_min"] == 1 and c["block_size_max"] == 2**31 - 1
    assert c["request_kinds"] == {"decoder", "encoder_only", "cross"}
    assert c["sliding_window"] and c["softcap"] and c["alibi"] and c["sinks"] and c["lse"]
    assert c["max_decode_threshold"] == 16


def test_capabilities_struct_matches_the_library():
    """The binding reads every field the library fills: one more byte comes back zeroed (the library called
    directly, through ctypes here, with 4-byte fields as the binding's tuple has)."""
    import ctypes

    n = 4 * len(_capi.ext.attn_capabilities_get())
    buf = (ctypes.c_ubyte * (n + 8))(*([0xCD] * (n + 8)))
    lib = ctypes.CDLL(attn.library_path)
    lib.attn_capabilities_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert lib.attn_capabilities_get(buf, n + 8) == 0
    assert list(buf[n:]) == [0] * 8  # the library's struct ends where the binding's fields end


@pytest.mark.parametrize("op", [vllm_ops.reshape_and_cache, vllm_ops.reshape_and_cache_flash])
def test_reshape_and_cache_accepts_and_ignores_scales_for_auto(op, rng):
    """vLLM passes k_scale / v_scale on every call (tensors, typically 1.0); with kv_cache_dtype "auto"
    they are ignored, like vLLM's own op: the cache equals the unscaled write."""
    import importlib.util

    k = rng.standard_normal((5, 2, 8)).astype(np.float32)
    v = rng.standard_normal((5, 2, 8)).astype(np.float32)
    slots = np.array([3, 0, -1, 9, 4], dtype=np.int64)
    want = np.zeros((2, 4, 4, 2, 8), np.float32)
    vllm_ops.reshape_and_cache(k, v, want[0], want[1], slots, "auto")
    scales = [(None, None), (1.0, 1.0), (np.float32(0.5), np.float32(2.0)),
              (np.array([0.25], np.float32), np.array([4.0], np.float32))]
    if importlib.util.find_spec("torch") is not None:
        import torch

        scales.append((torch.tensor(0.5), torch.tensor(3.0)))
    for ks, vs in scales:
        got = np.zeros_like(want)
        op(k, v, got[0], got[1], slots, "auto", ks, vs)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(NotImplementedError, match="fp8_ds_mla"):  # fp8 / fp8_e4m3 / fp8_e5m2: test_fp8_kv_cache.py
        op(k, v, want[0], want[1], slots, "fp8_ds_mla", 1.0, 1.0)
