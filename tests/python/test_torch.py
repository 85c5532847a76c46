"""DLPack producers: torch CPU tensors in and out, without copies (skipped when torch is absent)."""

import numpy as np
import pytest

import attn
import attn_demo.backend
import attn.vllm.ops
from conftest import HAVE_TORCH, np_attend

pytestmark = [pytest.mark.torch, pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")]
if HAVE_TORCH:
    import torch


def test_torch_float32_views_and_outputs(ctx1):
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 9, 3, 4, 32, generator=g)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # non-contiguous views
    out = attn.flash_attn_func(q, k, v, causal=True, ctx=ctx1)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (2, 9, 4, 32)
    for b in range(2):
        want, _ = np_attend(q[b].numpy(), k[b].numpy(), v[b].numpy(), causal=True)
        np.testing.assert_allclose(out[b].numpy(), want, atol=2e-5)
    # out= is a torch tensor written in place; lse comes back as torch
    buf = torch.full((2, 9, 4, 32), 5.0)
    res, lse = attn.flash_attn_func(q, k, v, causal=True, out=buf, return_softmax_lse=True, ctx=ctx1)
    assert res is buf and torch.equal(buf, out) and isinstance(lse, torch.Tensor) and lse.shape == (2, 4, 9)


def test_torch_requires_grad_is_viewed_not_copied(ctx1):
    q = torch.randn(1, 4, 2, 16, requires_grad=True)
    out = attn.flash_attn_func(q, q, q, ctx=ctx1)
    want = attn.flash_attn_func(q.detach().numpy(), q.detach().numpy(), q.detach().numpy(), ctx=ctx1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_torch_bfloat16_and_float16(ctx1):
    pytest.importorskip("ml_dtypes")
    g = torch.Generator().manual_seed(1)
    for dt, tol in ((torch.bfloat16, 3e-2), (torch.float16, 4e-3)):
        q = torch.randn(2, 5, 4, 64, generator=g).to(dt)
        k = torch.randn(2, 11, 2, 64, generator=g).to(dt)
        out = attn.flash_attn_func(q, k, k, causal=True, ctx=ctx1)
        assert out.dtype == dt
        for b in range(2):
            want, _ = np_attend(q[b].float().numpy(), k[b].float().numpy(), k[b].float().numpy(), causal=True)
            np.testing.assert_allclose(out[b].float().numpy(), want, atol=tol)


def test_torch_paged_cache_in_place(ctx1):
    kv = torch.zeros(2, 8, 4, 2, 16)
    key = torch.randn(5, 2, 16)
    value = torch.randn(5, 2, 16)
    slots = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int64) + 8
    attn.vllm.ops.reshape_and_cache(key, value, kv[0], kv[1], slots, ctx=ctx1)
    assert torch.equal(kv[0, 2], key[:4]) and torch.equal(kv[1, 3, 0], value[4])
    q = torch.randn(5, 4, 16)
    out = attn.paged_attention(q, kv, torch.tensor([0, 5], dtype=torch.int32), torch.tensor([5], dtype=torch.int32),
                               torch.tensor([[2, 3]], dtype=torch.int32), ctx=ctx1)
    assert isinstance(out, torch.Tensor)
    want, _ = np_attend(q.numpy(), key.numpy(), value.numpy(), causal=True)
    np.testing.assert_allclose(out.numpy(), want, atol=2e-5)
    attn_demo.backend.AttnBackend.copy_blocks([kv], torch.tensor([[2, 6]]))
    assert torch.equal(kv[:, 6], kv[:, 2])


def test_torch_errors():
    with pytest.raises(TypeError, match="float64"):
        attn.flash_attn_func(torch.zeros(1, 2, 1, 8, dtype=torch.float64), torch.zeros(1, 2, 1, 8),
                             torch.zeros(1, 2, 1, 8))


def test_torch_empty_tensor_without_data(ctx1):
    # torch gives an empty tensor a NULL data pointer; its view is an empty array, and an empty write is a no-op
    e = torch.zeros(0, 3)
    assert e.data_ptr() == 0
    a = attn._arrays.as_numpy(e, "e")
    assert a.shape == (0, 3) and a.dtype == np.float32
    kv = torch.full((2, 4, 4, 2, 16), 7.0)
    attn.vllm.ops.reshape_and_cache(torch.zeros(0, 2, 16), torch.zeros(0, 2, 16), kv[0], kv[1],
                                    torch.zeros(0, dtype=torch.int64), ctx=ctx1)
    assert torch.equal(kv, torch.full((2, 4, 4, 2, 16), 7.0))


def test_torch_exchange_table_reads_views_as_dlpack_does(ctx1):
    # a torch with DLPack's C exchange table is read through it; strided views, offsets and dtypes come out
    # bit for bit as the NumPy views of the same memory
    torch.zeros(1) + 0  # (torch imported: the extension finds the table at its first torch argument)
    attn.flash_attn_func(torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), torch.zeros(1, 1, 1, 8), ctx=ctx1)
    assert attn._capi.ext.torch_exchange() == hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
    g = torch.Generator().manual_seed(2)
    base = torch.randn(3, 12, 6, 64, generator=g)
    q, k = base[1:, 2:7, ::2], base[:2, 3:, 1::2]  # heads 2 apart, rows from an offset
    v = base[:2, :-3, 3:].transpose(1, 2).contiguous().transpose(1, 2)  # heads outermost in memory
    out = attn.flash_attn_func(q, k, v, causal=True, ctx=ctx1)
    want = attn.flash_attn_func(q.numpy(), k.numpy(), v.numpy(), causal=True, ctx=ctx1)
    np.testing.assert_array_equal(out.numpy(), want)


def test_torch_allocated_outputs_are_zero_filled_torch_tensors(ctx1):
    # q rows past query_start_loc[-1] are written by no call: an allocated out is 0 there and its LSE -inf
    qsl, sl, bt = (torch.tensor(x, dtype=torch.int32) for x in ([0, 1], [5], [[0, 1]]))
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        q, kv = torch.randn(3, 4, 64).to(dt), torch.randn(2, 2, 16, 2, 64).to(dt)
        for _ in range(3):  # (fresh allocations may reuse memory the last call filled)
            out, lse = attn.paged_attention(q, kv, qsl, sl, bt, ctx=ctx1, return_lse=True)
            assert isinstance(out, torch.Tensor) and out.dtype == dt and out.shape == q.shape
            assert out.is_contiguous() and lse.dtype == torch.float32 and lse.shape == (4, 3)
            assert torch.all(out[1:] == 0) and torch.all(lse[:, 1:] == -torch.inf) and torch.all(out[0] != 0)
            out.fill_(7.0)


def test_torch_views_release_their_tensors(ctx1):
    # each call's views of torch tensors are released when it returns: 20 fresh 64 MiB caches, each read once
    # and dropped, leave no 64 MiB behind
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    q = torch.randn(1, 4, 64)
    meta = (torch.tensor([0, 1], dtype=torch.int32), torch.tensor([16], dtype=torch.int32),
            torch.tensor([[0]], dtype=torch.int32))
    before = rss()
    for _ in range(20):
        kv = torch.ones(2, 2048, 16, 4, 64)
        attn.paged_attention(q, kv, *meta, ctx=ctx1)
        del kv
    assert rss() - before < 512 << 20


def test_torch_negated_views_are_read_as_their_values(ctx1):
    # a real tensor with the negative bit (x.conj().imag of a complex x, torch._neg_view) stores the negation of
    # its values, and DLPack exports the stored memory: attn reads the values, and refuses to write through one
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 5, 2, 32, generator=g) for _ in range(3))
    qn = torch.complex(torch.zeros_like(q), -q).conj().imag  # values q, memory -q
    assert qn.is_neg() and torch.equal(qn, q)
    want = attn.flash_attn_func(q, k, v, causal=True, ctx=ctx1)
    assert torch.equal(attn.flash_attn_func(qn, k, v, causal=True, ctx=ctx1), want)
    assert torch.equal(attn.flash_attn_func(q, torch._neg_view(-k), v, causal=True, ctx=ctx1), want)
    with pytest.raises(attn.AttnInvalidArgumentError, match="out: a negated torch view"):
        attn.flash_attn_func(q, k, v, out=torch._neg_view(torch.zeros(1, 5, 2, 32)), ctx=ctx1)


def test_torch_empty_views_are_taken_as_numpy_views_of_them(ctx1):
    # an empty tensor's strides are whatever its producer says (torch 16s, NumPy's view of it 0s): attn takes the
    # same view of both, so a call that NumPy's arrays pass does not fail on torch's strides
    kc, cs = torch.randn(2, 5, 1, 16), torch.tensor([1, 2], dtype=torch.int32)
    out = attn.flash_attn_with_kvcache(torch.zeros(2, 0, 1, 16), kc, kc.clone(), cache_seqlens=cs, ctx=ctx1)
    assert isinstance(out, torch.Tensor) and out.shape == (2, 0, 1, 16)
    bt = torch.zeros(0, 2, dtype=torch.int32).as_strided((0, 2), (0, 0))
    out = attn.paged_attention(torch.zeros(0, 1, 16), torch.zeros(2, 1, 4, 1, 16), torch.zeros(1, dtype=torch.int32),
                               torch.zeros(0, dtype=torch.int32), bt, ctx=ctx1)
    assert out.shape == (0, 1, 16)
