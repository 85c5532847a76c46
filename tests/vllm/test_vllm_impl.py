"""attn.vllm.backend's impl on vLLM's cache tensors without an engine: decoder, encoder-only and
cross (encoder-decoder) requests through do_kv_cache_update + forward on vLLM-shaped per-layer caches in
the token-major (LBNHC) and head-major (LBHNC) layouts, against attn's float64 oracle on gathered keys.
Each runs through the compiled extension attn._ext, the package's one binding; two runs give the same bits.
Needs vLLM (skipped otherwise); a few seconds."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("vllm") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("vLLM is not importable here: `make test-vllm` runs this file in its venv",
                allow_module_level=True)

import torch  # noqa: E402

from attn import ops  # noqa: E402
from attn.vllm import backend as vb  # noqa: E402

H, HK, D, BS, NB = 4, 2, 16, 8, 12


@pytest.fixture(params=["ext"])
def binding(request):
    """The plugin's binding: attn._ext, the only one."""
    return request.param


def _cache(layout):
    """vLLM's per-layer logical [B, H, N, C] view of a cache allocated in `layout`'s physical order."""
    if layout == "LBNHC":  # physical [B, N, H, C]
        return torch.zeros(NB, BS, HK, 2 * D).permute(0, 2, 1, 3)
    return torch.zeros(NB, HK, BS, 2 * D)  # LBHNC: physical = logical


def _meta(reqs, kind, num_tokens, slot_mapping):
    enc = kind == "encoder_only"  # as the builder: no cache, zero blocks of size 1
    plan = ops.Plan(reqs, num_blocks=0 if enc else NB, block_size=1 if enc else BS, num_heads=H,
                    num_kv_heads=HK, head_size=D, max_blocks_per_req=NB)
    ws = plan._workspace
    return vb.AttnMetadata(
        num_actual_tokens=num_tokens, max_query_len=0, max_seq_len=0, query_start_loc=None, seq_lens=None,
        block_table=None, slot_mapping=slot_mapping, causal=kind == "decoder", kind=kind,
        attn_state=plan.attn_state, num_decodes=plan.num_decodes, num_decode_tokens=plan.num_decode_tokens,
        num_prefills=plan.num_prefills, plan=plan,
        token_src=None if plan.identity_order else torch.from_numpy(plan.token_src.astype(np.int64)),
        workspace=ws.ctypes.data if ws.size else None, workspace_size=int(ws.size))


def _ref(q, k, v, causal, window=(-1, -1)):
    """float64 oracle (attn_ref_forward_varlen) for one sequence: q [Tq, H, D], k/v [Tk, HK, D]."""
    return ops.attention_varlen(q.numpy(), k.numpy(), v.numpy(), [0, q.shape[0]], [0, k.shape[0]],
                                softmax_scale=0.25, causal=causal, window_size=window, reference=True)


@pytest.mark.parametrize("decode_first", [True, False])
@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
def test_decoder_chunked_and_decode(layout, decode_first, binding):
    """Two requests: a 5-token chunk over 9 cached keys and a decode over 20; keys written by
    do_kv_cache_update through scattered blocks; sliding window 6. decode_first=False: the batch is in
    another order than the plan's (prefill first), so the impl gathers / scatters rows (token_src)."""
    g = torch.Generator().manual_seed(0)
    kv = _cache(layout)
    impl = vb.AttnBackendImpl(H, D, 0.25, HK, None, 6, "auto")
    blocks = [[7, 2], [5, 0, 11]]
    ctx_len, q_len = [9, 20], [5, 1]
    keys = [torch.randn(c + n, HK, D, generator=g) for c, n in zip(ctx_len, q_len)]
    vals = [torch.randn(c + n, HK, D, generator=g) for c, n in zip(ctx_len, q_len)]

    def slots(r, pos):
        return [blocks[r][p // BS] * BS + p % BS for p in pos]

    # history first (one kv update for the cached tokens), then this step's tokens
    hist = [torch.tensor(slots(r, range(ctx_len[r]))) for r in range(2)]
    impl.do_kv_cache_update(None, torch.cat([keys[r][:ctx_len[r]] for r in range(2)]),
                            torch.cat([vals[r][:ctx_len[r]] for r in range(2)]), kv, torch.cat(hist))
    order = [1, 0] if decode_first else [0, 1]  # vLLM's order: decode first
    rows = {1: (20, 21), 0: (9, 14)}
    sm = torch.tensor(sum((slots(r, range(*rows[r])) for r in order), []))
    k_new = torch.cat([keys[r][rows[r][0]:] for r in order])
    v_new = torch.cat([vals[r][rows[r][0]:] for r in order])
    impl.do_kv_cache_update(None, k_new, v_new, kv, sm)
    all_reqs = {1: ops.PlanRequest(20, 1, blocks[1]), 0: ops.PlanRequest(9, 5, blocks[0])}
    q = torch.randn(6, H, D, generator=g)
    out = torch.full((6, H, D), float("nan"))
    meta = _meta([all_reqs[r] for r in order], "decoder", 6, sm)
    assert (meta.token_src is None) == decode_first
    impl.forward(None, q, k_new, v_new, kv, meta, out)
    d = slice(0, 1) if decode_first else slice(5, 6)  # the decode's row
    p = slice(1, 6) if decode_first else slice(0, 5)
    np.testing.assert_allclose(out[d].numpy(), _ref(q[d], keys[1], vals[1], True, (5, 0)), atol=2e-5)
    np.testing.assert_allclose(out[p].numpy(), _ref(q[p], keys[0], vals[0], True, (5, 0)), atol=2e-5)


def test_encoder_only_and_profiling_run(binding):
    g = torch.Generator().manual_seed(1)
    impl = vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "auto", attn_type="encoder_only")
    lens = [3, 7]
    q, k, v = (torch.randn(10, n, D, generator=g) for n in (H, HK, HK))
    out = torch.full((10, H, D), float("nan"))
    impl.do_kv_cache_update(None, k, v, torch.empty(0), torch.arange(10))  # no cache: a no-op
    assert impl.forward(None, q, k, v, torch.empty(0), None, out) is out  # profiling run: untouched
    assert torch.isnan(out).all()
    reqs = [ops.PlanRequest(0, n, (), kind="encoder_only") for n in lens]
    impl.forward(None, q, k, v, torch.empty(0), _meta(reqs, "encoder_only", 10, None), out)
    np.testing.assert_allclose(out[:3].numpy(), _ref(q[:3], k[:3], v[:3], False), atol=2e-5)
    np.testing.assert_allclose(out[3:].numpy(), _ref(q[3:], k[3:], v[3:], False), atol=2e-5)


@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
def test_cross_attention(layout, binding):
    """Encoder-decoder: the first step writes 11 encoder keys (cross slot mapping) and 2 decoder queries
    attend to all of them, non-causal."""
    g = torch.Generator().manual_seed(2)
    kv = _cache(layout)
    impl = vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "auto", attn_type="encoder_decoder")
    blocks = [3, 9]
    enc_k, enc_v = torch.randn(11, HK, D, generator=g), torch.randn(11, HK, D, generator=g)
    sm = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(11)])
    impl.do_kv_cache_update(None, enc_k, enc_v, kv, sm)
    q = torch.randn(2, H, D, generator=g)
    out = torch.full((2, H, D), float("nan"))
    meta = _meta([ops.PlanRequest(0, 2, blocks, kind="cross", encoder_len=11)], "cross", 2, sm)
    impl.forward(None, q, None, None, kv, meta, out)
    np.testing.assert_allclose(out.numpy(), _ref(q, enc_k, enc_v, False), atol=2e-5)


def test_bindings_give_the_same_bits(monkeypatch):
    """A bf16 decode + chunk step with ALiBi, soft-cap and sinks (every option the extension takes), twice
    through attn._ext: cache bytes and outputs bitwise equal."""
    g = torch.Generator().manual_seed(3)
    sinks = torch.randn(H, generator=g)
    reqs = [ops.PlanRequest(20, 1, [5, 0, 11]), ops.PlanRequest(9, 5, [7, 2])]
    sm = torch.tensor([11 * BS + 4] + [2 * BS + p for p in range(1, 6)])  # positions 20 and 9..13
    k = torch.randn(6, HK, D, generator=g).bfloat16()
    v = torch.randn(6, HK, D, generator=g).bfloat16()
    q = torch.randn(6, H, D, generator=g).bfloat16()
    hist = torch.randn(NB, BS, HK, 2 * D, generator=g).bfloat16()
    res = []
    for ext in (vb._EXT, vb._EXT):
        monkeypatch.setattr(vb, "_EXT", ext)
        impl = vb.AttnBackendImpl(H, D, 0.25, HK, [0.5, 0.25, 0.125, 0.0625], 6, "auto", logits_soft_cap=30.0,
                                  sinks=sinks)
        kv = hist.clone().permute(0, 2, 1, 3)
        out = torch.full((6, H, D), float("nan"), dtype=torch.bfloat16)
        impl.do_kv_cache_update(None, k, v, kv, sm)
        impl.forward(None, q, k, v, kv, _meta(reqs, "decoder", 6, sm), out)
        res.append((kv, out))
    assert not torch.isnan(res[0][1].float()).any()
    assert torch.equal(res[0][0], res[1][0]) and torch.equal(res[0][1], res[1][1])


def test_declared_features_come_from_the_library():
    caps = vb.CAPS
    assert vb.AttnBackend.get_supported_head_sizes() == list(range(caps["head_size_min"],
                                                                   caps["head_size_max"] + 1))
    assert vb.AttnBackend.supported_kv_cache_dtypes == ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3",
                                                        "fp8_e5m2"]
    assert set(vb.AttnBackend.supported_dtypes) == {torch.float32, torch.float16, torch.bfloat16}
    for t in ("decoder", "encoder", "encoder_only", "encoder_decoder"):
        assert vb.AttnBackend.supports_attn_type(t)
    assert vb.AttnBackend.supports_sink() and vb.AttnBackend.supports_sliding_window()
    assert vb.AttnBackend.get_supported_kernel_block_sizes()[0].base == 1
    assert vb.AttnBackend.supported_kv_cache_layouts()[0].name == "LBNHC"
    with pytest.raises(NotImplementedError, match="fp8_ds_mla"):
        vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "fp8_ds_mla")


class _Layer:
    """The attributes of vLLM's Attention layer the impl reads: the per-tensor fp8 KV scales."""

    def __init__(self, k_scale, v_scale):
        self._k_scale_float, self._v_scale_float = k_scale, v_scale


_FP8 = {"fp8": (torch.float8_e4m3fn, 448.0), "fp8_e4m3": (torch.float8_e4m3fn, 448.0),
        "fp8_e5m2": (torch.float8_e5m2, 57344.0)}


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
@pytest.mark.parametrize("layout", ["LBNHC", "LBHNC"])
def test_fp8_kv_cache(kv_cache_dtype, layout, binding):
    """kv_cache_dtype fp8 on vLLM's uint8 per-layer cache with the layer's k/v scales: do_kv_cache_update
    stores clamp(x / scale) cast to fp8 (torch's RNE cast: the same bytes), forward reads the fp8 pages and
    equals the float64 oracle on the dequantized keys (decode(code)·scale) within 2e-5 (f32 queries)."""
    g = torch.Generator().manual_seed(5)
    f8, fmax = _FP8[kv_cache_dtype]
    ks, vs = (0.02, 0.01) if kv_cache_dtype != "fp8_e5m2" else (2.0, 0.25)
    layer = _Layer(ks, vs)
    if layout == "LBNHC":
        kv = torch.zeros(NB, BS, HK, 2 * D, dtype=torch.uint8).permute(0, 2, 1, 3)
    else:
        kv = torch.zeros(NB, HK, BS, 2 * D, dtype=torch.uint8)
    impl = vb.AttnBackendImpl(H, D, 0.25, HK, None, None, kv_cache_dtype)
    blocks, ctx_len = [5, 0, 11], 20
    keys = torch.randn(ctx_len + 1, HK, D, generator=g) * 2
    vals = torch.randn(ctx_len + 1, HK, D, generator=g)
    slots = torch.tensor([blocks[p // BS] * BS + p % BS for p in range(ctx_len + 1)])
    impl.do_kv_cache_update(layer, keys[:ctx_len], vals[:ctx_len], kv, slots[:ctx_len])
    impl.do_kv_cache_update(layer, keys[ctx_len:], vals[ctx_len:], kv, slots[ctx_len:])
    for p in (0, 7, ctx_len):  # stored bytes: fp8(clamp(x / scale))
        b, r = blocks[p // BS], p % BS
        want_k = (keys[p] / ks).clamp(-fmax, fmax).to(f8).view(torch.uint8)
        want_v = (vals[p] / vs).clamp(-fmax, fmax).to(f8).view(torch.uint8)
        assert torch.equal(kv[b, :, r, :D], want_k) and torch.equal(kv[b, :, r, D:], want_v)
    q = torch.randn(1, H, D, generator=g)
    out = torch.full((1, H, D), float("nan"))
    meta = _meta([ops.PlanRequest(ctx_len, 1, blocks)], "decoder", 1, slots[ctx_len:])
    impl.forward(layer, q, keys[ctx_len:], vals[ctx_len:], kv, meta, out)
    rows = torch.stack([kv[blocks[p // BS], :, p % BS] for p in range(ctx_len + 1)])  # [T, HK, 2D] uint8
    dk = rows[..., :D].contiguous().view(f8).double() * ks
    dv = rows[..., D:].contiguous().view(f8).double() * vs
    np.testing.assert_allclose(out.numpy(), _ref(q, dk.float(), dv.float(), True), atol=2e-5)
    # the scales reach the kernel: other scales give another answer
    out2 = torch.full((1, H, D), float("nan"))
    impl.forward(_Layer(ks * 2, vs), q, keys[ctx_len:], vals[ctx_len:], kv, meta, out2)
    assert (out2 - out).abs().max() > 1e-3
    # a disaggregated-prefill producer (on_kv_stored) on the fp8 cache: the same bytes, one call per write
    kv2, calls = torch.zeros_like(kv), []
    impl.on_kv_stored = lambda name, ev: calls.append((name, ev.num_written, ev.block_ids.tolist()))
    impl.do_kv_cache_update(layer, keys[:ctx_len], vals[:ctx_len], kv2, slots[:ctx_len])
    impl.do_kv_cache_update(layer, keys[ctx_len:], vals[ctx_len:], kv2, slots[ctx_len:])
    impl.on_kv_stored = None
    assert torch.equal(kv2, kv)
    assert [c[1] for c in calls] == [ctx_len, 1] and calls[0][2] == sorted(blocks)


def _smaps_flags(addr):
    """VmFlags of the mapping holding addr (/proc/self/smaps), or None."""
    inside = False
    with open("/proc/self/smaps") as f:
        for ln in f:
            head = ln.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and ln.startswith("VmFlags:"):
                return ln.split()[1:]
    return None


def _thp_advice_taken():
    """1 where this kernel marks an advised anonymous mapping "hg" (THP not "never")."""
    import mmap
    m = mmap.mmap(-1, 4 << 20)
    try:
        m.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, AttributeError):
        return False
    import ctypes
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    taken = "hg" in (_smaps_flags(addr) or [])
    return taken


def test_fresh_cache_moves_to_huge_pages(monkeypatch):
    """vLLM's torch.zeros cache sits on base pages; the first update of a layer moves its all-zero 2 MiB pages
    onto transparent huge pages (advised "hg", released to refault as zeros), the written rows read back, and
    ATTN_KV_HUGE_PAGES=0 (read at import) leaves the pages alone."""
    nb = 4096  # 4096 blocks × 8 × 2 × 32 floats = 8 MiB
    kv = torch.zeros(nb, BS, HK, 2 * D).permute(0, 2, 1, 3)
    impl = vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "auto")
    monkeypatch.setitem(vb._HUGE_PAGES, "released", 0)
    g = torch.Generator().manual_seed(3)
    key, value = torch.randn(3, HK, D, generator=g), torch.randn(3, HK, D, generator=g)
    impl.do_kv_cache_update(None, key, value, kv, torch.tensor([5, 9000, 30000]))
    mid = kv.data_ptr() + (4 << 20)
    flags = _smaps_flags(mid)
    print(f"released {vb._HUGE_PAGES['released']} bytes, VmFlags {flags}")
    if vb._HUGE_PAGES["on"] and _thp_advice_taken():
        assert "hg" in flags and vb._HUGE_PAGES["released"] >= 4 << 20
    for t, slot in enumerate([5, 9000, 30000]):
        b, r = divmod(slot, BS)
        torch.testing.assert_close(kv[b, :, r, :D], key[t], rtol=0, atol=0)
        torch.testing.assert_close(kv[b, :, r, D:], value[t], rtol=0, atol=0)
    rest = kv.clone()
    for slot in [5, 9000, 30000]:
        b, r = divmod(slot, BS)
        rest[b, :, r] = 0
    assert not rest.any()
    monkeypatch.setitem(vb._HUGE_PAGES, "on", False)
    other = torch.zeros(nb, BS, HK, 2 * D).permute(0, 2, 1, 3)
    monkeypatch.setitem(vb._HUGE_PAGES, "released", 0)
    vb.AttnBackendImpl(H, D, 0.25, HK, None, None, "auto").do_kv_cache_update(None, key, value, other,
                                                                               torch.tensor([1, 2, 3]))
    assert vb._HUGE_PAGES["released"] == 0
