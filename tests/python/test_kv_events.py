"""Disaggregated prefill (attn.kv_events.reshape_and_cache_notify): a KV producer copies each
layer's blocks out as soon as that layer's cache write completes; the copies equal the cache, one call per
layer in order, runs split at pads and block boundaries, no call when the write is rejected."""

import numpy as np
import pytest

import attn
from attn import kv_events


def test_producer_copies_blocks_as_layers_complete(rng, ctx1):
    layers, nb, bs, hk, d = 3, 10, 4, 2, 16
    slots = np.array([5, 6, 7, 8, 9, -1, 20, 21, 22, 23, 24, 0], np.int64)
    caches = [np.full((2, nb, bs, hk, d), np.nan, np.float32) for _ in range(layers)]
    keys = [rng.standard_normal((len(slots) + 1, hk, d)).astype(np.float32) for _ in range(layers)]
    vals = [rng.standard_normal((len(slots) + 1, hk, d)).astype(np.float32) for _ in range(layers)]
    sent, events, done = {}, [], []

    def producer(ev):
        # "transfer": copy the written blocks out now, while later layers have not run yet
        events.append(ev)
        assert len(done) == ev.layer_idx  # synchronous: this layer's write call has not returned yet
        sent[ev.layer_idx] = {int(b): caches[ev.layer_idx][:, b].copy() for b in ev.block_ids}

    for layer in range(layers):
        kv_events.reshape_and_cache_notify(keys[layer], vals[layer], caches[layer], slots, producer,
                                           layer_idx=layer, ctx=ctx1)
        done.append(layer)
    assert [e.layer_idx for e in events] == list(range(layers))
    for e in events:
        assert e.num_tokens == len(slots) and e.num_written == len(slots) - 1 and e.block_size == bs
        # 5-7 (block 1) | 8-9 (block 2) | 20-23 (block 5) | 24 (block 6) | 0 (block 0)
        assert e.runs.tolist() == [[1, 1, 4, 0], [2, 0, 2, 3], [5, 0, 4, 6], [6, 0, 1, 10], [0, 0, 1, 11]]
        assert e.block_ids.tolist() == [0, 1, 2, 5, 6]
        for blk, data in sent[e.layer_idx].items():
            np.testing.assert_array_equal(data, caches[e.layer_idx][:, blk])  # the copies equal the cache
        for blk, r0, r1, t0 in e.runs:  # and the runs name the right tokens
            np.testing.assert_array_equal(caches[e.layer_idx][0, blk, r0:r1], keys[e.layer_idx][t0:t0 + r1 - r0])
            np.testing.assert_array_equal(caches[e.layer_idx][1, blk, r0:r1], vals[e.layer_idx][t0:t0 + r1 - r0])


def test_no_call_on_rejected_write_and_errors_propagate(rng, ctx1):
    cache = np.zeros((2, 4, 4, 1, 8), np.float32)
    k = rng.standard_normal((3, 1, 8)).astype(np.float32)
    calls = []
    with pytest.raises(attn.AttnInvalidArgumentError, match="slot_mapping: entry 1 = 99"):
        kv_events.reshape_and_cache_notify(k, k, cache, [0, 99, 1], calls.append, ctx=ctx1)
    assert calls == [] and np.all(cache == 0)
    with pytest.raises(TypeError):
        kv_events.reshape_and_cache_notify(k, k, cache, [0, 1, 2], "not callable", ctx=ctx1)

    def boom(ev):
        raise RuntimeError(f"transfer failed for layer {ev.layer_idx}")

    with pytest.raises(RuntimeError, match="layer 4"):
        kv_events.reshape_and_cache_notify(k, k, cache, [0, 1, 2], boom, layer_idx=4, ctx=ctx1)
    np.testing.assert_array_equal(cache[0, 0, :3], k)  # the write itself happened
    kv_events.reshape_and_cache_notify(k, k, cache, [-1, -1, -1], calls.append, ctx=ctx1)
    assert len(calls) == 1 and calls[0].num_written == 0 and calls[0].runs.shape == (0, 4)


def test_fp8_cache_notifies_after_the_scaled_write(rng, ctx1):
    """An fp8 cache (vLLM's uint8 cache + kv_cache_dtype, per-tensor scales): the notifying write stores what
    attn.reshape_and_cache stores with the same scales, the event sees the stored codes; a bad scale writes
    nothing and makes no call."""
    cache = np.full((2, 6, 4, 2, 16), 0x5A, np.uint8)
    ref = cache.copy()
    k = (rng.standard_normal((5, 2, 16)) * 30).astype(np.float32)
    v = rng.standard_normal((5, 2, 16)).astype(np.float32)
    slots = np.array([2, 3, 4, -1, 17], np.int64)
    seen = []
    with pytest.raises(attn.AttnInvalidArgumentError, match="k_scale="):
        kv_events.reshape_and_cache_notify(k, v, cache, slots, seen.append, kv_cache_dtype="fp8", k_scale=0.0,
                                           v_scale=0.5, ctx=ctx1)
    assert seen == [] and np.array_equal(cache, ref)

    def grab(ev):
        seen.append((ev.num_written, ev.block_ids.tolist(), cache.copy()))

    kv_events.reshape_and_cache_notify(k, v, cache, slots, grab, layer_idx=1, kv_cache_dtype="fp8", k_scale=0.25,
                                       v_scale=0.5, ctx=ctx1)
    attn.reshape_and_cache(k, v, ref, slots, kv_cache_dtype="fp8", k_scale=0.25, v_scale=0.5, ctx=ctx1)
    np.testing.assert_array_equal(cache, ref)
    assert len(seen) == 1 and seen[0][0] == 4 and seen[0][1] == [0, 1, 4]
    np.testing.assert_array_equal(seen[0][2], ref)  # the codes were all there when the callback ran
    assert not np.array_equal(ref, np.full_like(ref, 0x5A))
