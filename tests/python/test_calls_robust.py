"""Robustness of the Python calls (findings of a newcomer trial, 2026-12-01).

Threads (the GIL is released around every C call): one Context shared by several threads refuses a call made
while another thread's call uses it (AttnInvalidArgumentError naming ctx, nothing written) instead of sharing
the C scratch, and every call that runs returns the reference bits; one Plan shared by threads with their own
Contexts gives the reference bits (a forward that finds the plan's workspace in use takes a temporary one);
the per-thread default contexts never collide. Also: allocated outputs hold no leftover rows, self-overlapping
outputs are refused, integers beyond the C range and non-integers are refused, softmax_scale=0.0 is a zero
scale, bad argument types are named."""

import threading

import numpy as np
import pytest

import attn


def _run(threads, fn):
    errors = []

    def wrap(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_shared_context_refuses_instead_of_corrupting(rng, binding):
    q = rng.standard_normal((2, 37, 8, 64), dtype=np.float32)
    k = rng.standard_normal((2, 250, 2, 64), dtype=np.float32)
    with attn.Context(num_threads=2) as c0:
        ref = attn.flash_attn_func(q, k, k, causal=True, ctx=c0)
    ctx = attn.Context(num_threads=2)
    stats = {"ok": 0, "busy": 0}
    lock = threading.Lock()

    def work(_):
        out = np.empty_like(ref)
        for _ in range(150):
            out.fill(7.0)
            try:
                attn.flash_attn_func(q, k, k, causal=True, ctx=ctx, out=out)
            except attn.AttnInvalidArgumentError as e:
                assert "ctx: is in use by a call on another thread" in str(e)
                assert np.all(out == 7.0)  # nothing written
                with lock:
                    stats["busy"] += 1
                continue
            np.testing.assert_array_equal(out, ref)
            with lock:
                stats["ok"] += 1

    _run(4, work)
    assert stats["ok"] + stats["busy"] == 600 and stats["ok"] > 0
    ctx.close()


def test_shared_plan_own_contexts(rng, binding):
    H, Hk, D, bs, nb = 8, 2, 64, 16, 400
    kv = rng.standard_normal((2, nb, bs, Hk, D), dtype=np.float32)
    plan = attn.Plan([attn.PlanRequest(2000, 1, list(range(126))), attn.PlanRequest(3000, 1, list(range(126, 314)))],
                     num_blocks=nb, block_size=bs, num_heads=H, num_kv_heads=Hk, head_size=D, max_blocks_per_req=200)
    assert plan.workspace_size > 0  # split-KV partial states go through the workspace
    qs = [rng.standard_normal((2, H, D), dtype=np.float32) for _ in range(4)]
    with attn.Context(num_threads=2) as c0:
        refs = [plan.forward(q, kv, ctx=c0) for q in qs]

    def work(t):
        with attn.Context(num_threads=2) as c:
            for _ in range(60):
                np.testing.assert_array_equal(plan.forward(qs[t], kv, ctx=c), refs[t])

    _run(4, work)

    def work_default(t):  # the per-thread default contexts
        for _ in range(40):
            np.testing.assert_array_equal(plan.forward(qs[t], kv), refs[t])

    _run(4, work_default)


@pytest.mark.parametrize("entry", ["varlen", "paged"])
def test_allocated_outputs_have_no_leftover_rows(entry, rng, binding):
    """q rows past the last sequence (query_start_loc[-1] / cu_seqlens_q[-1] < num_tokens) belong to no
    sequence: in outputs attn allocates they are out 0, lse -inf (as flash_attn_varlen_func), never leftover
    memory (the allocation was np.empty)."""
    for _ in range(3):  # fresh allocations may reuse freed garbage: fill the heap with it first
        junk = np.full((64, 4, 32), 7e37, np.float32)
        del junk
    q = rng.standard_normal((64, 4, 32), dtype=np.float32)
    if entry == "varlen":
        k = rng.standard_normal((5, 2, 32), dtype=np.float32)
        out, lse = attn.attention_varlen(q, k, k, np.array([0, 3], np.int32), np.array([0, 5], np.int32),
                                         return_lse=True)
    else:
        kv = rng.standard_normal((2, 4, 4, 2, 32), dtype=np.float32)
        out, lse = attn.paged_attention(q, kv, np.array([0, 3], np.int32), np.array([5], np.int32),
                                        np.array([[1, 2]], np.int32), return_lse=True)
    assert np.all(out[3:] == 0) and np.all(np.isneginf(lse[:, 3:]))
    assert np.all(np.isfinite(out[:3])) and np.all(np.isfinite(lse[:, :3]))


def test_output_that_overlaps_itself_is_refused(rng, binding):
    """A broadcast (stride-0) out view would hold one batch's result for all of them: refused, naming out."""
    q = rng.standard_normal((2, 5, 8, 64), dtype=np.float32)
    k = rng.standard_normal((2, 5, 8, 64), dtype=np.float32)
    base = np.full((1, 5, 8, 64), 3.0, np.float32)
    out = np.lib.stride_tricks.as_strided(base, (2, 5, 8, 64), (0,) + base.strides[1:])
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: its elements overlap in memory"):
        attn.flash_attn_func(q, k, k, out=out)
    assert np.all(base == 3.0)


def test_cache_whose_rows_meet_is_not_written(rng, binding):
    """A cache view whose token stride is 0 (every slot one row) or whose key and value halves meet cannot hold
    what is written: refused before anything is written, naming kv_cache; halves that are one cache (strides[0]
    0, as vLLM's separate key / value caches are written) keep the value."""
    key = rng.standard_normal((3, 2, 16), dtype=np.float32)
    value = rng.standard_normal((3, 2, 16), dtype=np.float32)
    slots = np.array([0, 1, 2], np.int64)
    base = np.full((2, 4, 1, 2, 16), 7.0, np.float32)
    e = base.itemsize
    rows_meet = np.lib.stride_tricks.as_strided(base, (2, 4, 4, 2, 16), base.strides[:2] + (0, 16 * e, e))
    halves_meet = np.lib.stride_tricks.as_strided(base, (2, 1, 4, 2, 16), (e, 128 * e, 32 * e, 16 * e, e))
    for cache in (rows_meet, halves_meet):
        with pytest.raises(attn.AttnInvalidArgumentError, match="kv_cache: its elements overlap in memory"):
            attn.reshape_and_cache(key, value, cache, slots)
        assert np.all(base == 7.0)
    one = np.zeros((4, 4, 2, 16), np.float32)
    attn.reshape_and_cache(key, value, np.lib.stride_tricks.as_strided(one, (2,) + one.shape, (0,) + one.strides),
                           slots)
    assert np.array_equal(one[0, :3], value)


def test_integers_beyond_c_range_are_refused(rng, binding):
    """ctypes wraps a Python int around silently (2**64 + 3 would reach C as 3) and truncates floats: every
    integer argument is range-checked instead (the family's OverflowError / TypeError, naming it)."""
    with pytest.raises(OverflowError, match="num_computed_tokens"):
        attn.PlanRequest(2 ** 64 + 3, 1, [0])
    with pytest.raises(TypeError, match="block_ids"):
        attn.PlanRequest(0, 3, [0.7])
    with pytest.raises(TypeError, match="num_scheduled_tokens"):
        attn.PlanRequest(0, 1.5, [0])
    with pytest.raises(OverflowError, match="head_size"):
        attn.Plan([attn.PlanRequest(0, 3, [0])], num_blocks=4, block_size=4, num_heads=2, num_kv_heads=1,
                  head_size=2 ** 32 + 32, max_blocks_per_req=1)
    q = rng.standard_normal((1, 4, 2, 16), dtype=np.float32)
    for bad in (2 ** 64 + 3, 2 ** 64):
        with pytest.raises(OverflowError):
            attn.diffusion.forward_kv_prefix(q, q, q, bad)
    assert np.isfinite(attn.diffusion.forward_kv_prefix(q, q, q, 3)).all()


def test_softmax_scale_zero_is_a_zero_scale(rng, binding):
    """flash-attn / SDPA read softmax_scale=0.0 literally: every logit 0, so each row averages the values of
    its visible keys (None is the default 1/sqrt(d))."""
    q = rng.standard_normal((1, 6, 2, 16), dtype=np.float32)
    k = rng.standard_normal((1, 6, 2, 16), dtype=np.float32)
    v = rng.standard_normal((1, 6, 2, 16), dtype=np.float32)
    out = attn.flash_attn_func(q, k, v, softmax_scale=0.0, causal=True)
    want = np.cumsum(v[0], axis=0) / np.arange(1, 7)[:, None, None]  # row i: mean of v[0..i]
    np.testing.assert_allclose(out[0], want, rtol=1e-6, atol=1e-6)
    default = attn.flash_attn_func(q, k, v, causal=True)
    assert np.abs(default - out).max() > 1e-2


def test_floats_beyond_float32_are_refused(rng):
    """A finite float argument beyond float32's range (its C conversion would be undefined) is a ValueError
    naming it, on every kind of entry; nothing is written. inf and NaN still reach libattn, which names them."""
    q = rng.standard_normal((1, 4, 2, 16), dtype=np.float32)
    out = np.full_like(q, 7.0)
    with pytest.raises(ValueError, match=r"softmax_scale=1e\+39 is beyond float32"):
        attn.flash_attn_func(q, q, q, softmax_scale=1e39, out=out)
    with pytest.raises(ValueError, match="softcap=-1e.300 is beyond float32"):
        attn.attention(q, q, q, softcap=-1e300, out=out)
    with pytest.raises(ValueError, match="softmax_scale=1e.39 is beyond float32"):
        attn.diffusion.forward_quant(q, q, q, "fp8_e4m3", softmax_scale=1e39, out=out)
    assert (out == 7.0).all()
    with pytest.raises(attn.AttnInvalidArgumentError, match="softmax_scale=inf is not finite"):
        attn.flash_attn_func(q, q, q, softmax_scale=float("inf"), out=out)
    attn.flash_attn_func(q, q, q, softmax_scale=3.4e38)  # the largest magnitudes in range are taken


def test_bad_argument_types_are_named(rng):
    q = rng.standard_normal((1, 4, 2, 16), dtype=np.float32)
    with pytest.raises(TypeError, match="ctx: expected an attn.Context"):
        attn.flash_attn_func(q, q, q, ctx=5)
    with pytest.raises(ValueError, match="format='e9m9'"):
        attn.diffusion.quantize_fp8(np.ones(4, np.float32), 1.0, "e9m9")
    with pytest.raises(TypeError, match="spans: "):
        attn.diffusion.forward_piecewise(q, q, q, spans="ab")
    with pytest.raises(TypeError, match=r"spans: entry 0 = \(1, 'x'\)"):
        attn.diffusion.forward_piecewise(q, q, q, spans=[(1, "x")])
