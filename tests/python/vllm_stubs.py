"""Just enough of ``torch`` and ``vllm`` for ``import attn.vllm.backend`` without either (neither is a
dependency of the test suite): the plugin's builder and impl then run on NumPy-backed tensors, through the
same attn._ext / ctypes calls as in vLLM. :func:`install` puts the fake modules into ``sys.modules``, so
call it only in a process of its own (a subprocess of the test), never in the pytest process: the fake
``torch`` would shadow the real one for every later test.

The fake ``torch.Tensor`` is an ``ndarray`` subclass with the few tensor methods the plugin calls (numpy, cpu,
data_ptr, stride in elements, numel, dim, as_strided, index_select, index_copy_, detach, float).
:func:`common_attn_metadata` builds vLLM's CommonAttentionMetadata fields for a batch as vLLM's GPU model
runner fills them (CPU copies of query_start_loc / seq_lens, an int32 block table of the batch's rows,
int64 slot_mapping)."""

from __future__ import annotations

import enum
import sys
import types
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np


class Tensor(np.ndarray):
    """A CPU torch tensor, as far as attn.vllm.backend uses one."""


    def numpy(self) -> np.ndarray:
        return self.view(np.ndarray)

    def cpu(self) -> "Tensor":
        return self

    def data_ptr(self) -> int:
        return self.__array_interface__["data"][0]

    @property
    def stride_calls(self) -> int:
        """How often stride() ran on this object (a test counts per-layer work through it)."""
        return self.__dict__.get("_stride_calls", 0)

    def stride(self, dim: Any = None) -> Any:
        self.__dict__["_stride_calls"] = self.stride_calls + 1
        s = tuple(b // self.itemsize for b in self.strides)
        return s if dim is None else s[dim]

    def numel(self) -> int:
        return int(self.size)

    def dim(self) -> int:
        return self.ndim

    def as_strided(self, shape: Any, strides: Any) -> "Tensor":
        b = tuple(int(s) * self.itemsize for s in strides)
        return np.lib.stride_tricks.as_strided(self, tuple(shape), b).view(Tensor)

    def index_select(self, dim: int, index: Any) -> "Tensor":
        return np.ascontiguousarray(np.take(self, np.asarray(index), axis=dim)).view(Tensor)

    def index_copy_(self, dim: int, index: Any, src: Any) -> "Tensor":
        assert dim == 0
        self[np.asarray(index)] = src
        return self

    def detach(self) -> "Tensor":
        return self

    def float(self) -> "Tensor":
        return self.astype(np.float32).view(Tensor)


def tensor(a: Any, dtype: Any = None) -> Tensor:
    return np.ascontiguousarray(np.asarray(a, dtype=dtype)).view(Tensor)


def _torch() -> types.ModuleType:
    t = types.ModuleType("torch")
    t.Tensor = Tensor
    t.float32, t.float16, t.int32, t.int64, t.uint8 = (np.dtype(d) for d in ("float32", "float16", "int32", "int64",
                                                                            "uint8"))
    t.int8 = np.dtype("int8")
    try:
        import ml_dtypes

        t.bfloat16 = np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        t.bfloat16 = object()
    t.from_numpy = lambda a: a.view(Tensor)
    t.empty_like = lambda a: np.empty_like(a).view(Tensor)
    t.zeros = lambda shape, dtype=np.float32, device=None: np.zeros(shape, dtype).view(Tensor)
    t.tensor = tensor
    t.get_num_threads = lambda: 1
    t.device = type("device", (), {})
    t.nn = types.SimpleNamespace(Module=object)
    return t


_M = TypeVar("_M")


class AttentionType:
    DECODER = "decoder"
    ENCODER = "encoder"
    ENCODER_ONLY = "encoder_only"
    ENCODER_DECODER = "encoder_decoder"


class AttentionBackend:
    pass


class AttentionImpl(Generic[_M]):
    pass


class AttentionLayer:
    pass


class AttentionMetadataBuilder(Generic[_M]):
    def __init__(self, kv_cache_spec: Any, layer_names: Any, vllm_config: Any, device: Any) -> None:
        self.kv_cache_spec, self.layer_names, self.vllm_config, self.device = (kv_cache_spec, layer_names,
                                                                              vllm_config, device)

    def _init_reorder_batch_threshold(self, threshold: int = 1, supports_spec_as_decode: bool = False) -> None:
        self.reorder_batch_threshold = threshold


@dataclass
class MultipleOf:
    base: int


@dataclass
class CommonAttentionMetadata:
    query_start_loc: Any
    query_start_loc_cpu: Any
    seq_lens: Any
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: Any
    slot_mapping: Any
    causal: bool = True


@dataclass
class AttentionSpec:
    block_size: int
    num_kv_heads: int
    head_size: int


class CrossAttentionSpec(AttentionSpec):
    pass


class EncoderOnlyAttentionSpec(AttentionSpec):
    pass


class KVCacheLayout(enum.Enum):
    NHD = "NHD"
    HND = "HND"
    LBNHC = "LBNHC"
    LBHNC = "LBHNC"
    BLNHC = "BLNHC"


def _vllm() -> dict:
    mods = {name: types.ModuleType(name) for name in (
        "vllm", "vllm.config", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.backend",
        "vllm.v1.attention.backends", "vllm.v1.attention.backends.utils", "vllm.v1.kv_cache_interface",
        "vllm.v1.kv_cache_layout")}
    mods["vllm.config"].VllmConfig = object
    b = mods["vllm.v1.attention.backend"]
    for cls in (AttentionBackend, AttentionImpl, AttentionLayer, AttentionMetadataBuilder, AttentionType,
                CommonAttentionMetadata, MultipleOf):
        setattr(b, cls.__name__, cls)
    mods["vllm.v1.attention.backends.utils"].get_num_attention_heads_from_layers = lambda cfg, names: None
    k = mods["vllm.v1.kv_cache_interface"]
    k.AttentionSpec, k.CrossAttentionSpec, k.EncoderOnlyAttentionSpec = (AttentionSpec, CrossAttentionSpec,
                                                                         EncoderOnlyAttentionSpec)
    mods["vllm.v1.kv_cache_layout"].KVCacheLayout = KVCacheLayout
    return mods


def install() -> None:
    """Fake torch and vllm in sys.modules (this process only)."""
    sys.modules["torch"] = _torch()
    sys.modules.update(_vllm())


def vllm_config(num_heads: int, chunked_prefill: bool = True, kv_caches: Any = None) -> Any:
    """The parts of VllmConfig the builder reads; kv_caches: {layer name: per-layer cache tensor}."""
    ns = types.SimpleNamespace
    ctx = {name: ns(kv_cache=kv) for name, kv in (kv_caches or {}).items()}
    return ns(parallel_config=None,
              model_config=ns(get_num_attention_heads=lambda parallel: num_heads),
              scheduler_config=ns(enable_chunked_prefill=chunked_prefill),
              compilation_config=ns(static_forward_context=ctx))


def common_attn_metadata(computed: Any, q_lens: Any, block_size: int, max_blocks: int, rng: Any,
                         num_blocks: int, causal: bool = True, padded_reqs: int = 0) -> CommonAttentionMetadata:
    """vLLM's per-step metadata for requests with ``computed`` cached and ``q_lens`` new tokens: distinct
    random blocks per request, a block table of ``max_blocks`` columns (unused entries 0) and
    ``padded_reqs`` extra rows past num_reqs (vLLM's persistent batch tensors are longer than the batch)."""
    computed, q_lens = np.asarray(computed, np.int64), np.asarray(q_lens, np.int64)
    n = len(q_lens)
    seq = computed + q_lens
    qsl = np.zeros(n + 1 + padded_reqs, np.int32)
    qsl[1:n + 1] = np.cumsum(q_lens)
    qsl[n + 1:] = qsl[n]
    bt = np.zeros((n + padded_reqs, max_blocks), np.int32)
    perm = rng.permutation(num_blocks).astype(np.int32)
    used, slots = 0, []
    for r in range(n):
        nb = -(-int(seq[r]) // block_size)
        bt[r, :nb] = perm[used:used + nb]
        used += nb
        pos = np.arange(computed[r], seq[r])
        slots.append(bt[r, pos // block_size].astype(np.int64) * block_size + pos % block_size)
    sl = np.zeros(n + padded_reqs, np.int32)
    sl[:n] = seq
    return CommonAttentionMetadata(
        query_start_loc=tensor(qsl), query_start_loc_cpu=tensor(qsl), seq_lens=tensor(sl), num_reqs=n,
        num_actual_tokens=int(q_lens.sum()), max_query_len=int(q_lens.max()), max_seq_len=int(seq.max()),
        block_table_tensor=tensor(bt), slot_mapping=tensor(np.concatenate(slots) if slots else np.zeros(0, np.int64)),
        causal=causal)
