"""attn as vLLM's CPU attention backend (registered by attn.vllm.register), shaped like vllm-ascend's
AscendAttentionBackend: backend / metadata builder / impl.

One engine step:
  - :meth:`AttnMetadataBuilder.build` (once per step and KV-cache group) turns vLLM's
    CommonAttentionMetadata into one :class:`attn.ops.Plan` (decode-first order, batch state, split-KV work
    partition, workspace). vLLM already orders the batch decode-first because the builder sets
    ``reorder_batch_threshold`` (1 + speculative tokens), so the plan order equals vLLM's and no row is
    moved; if they ever differ the impl gathers/scatters rows through ``token_src``.
  - per layer, :meth:`AttnBackendImpl.do_kv_cache_update` is one ``attn_reshape_and_cache`` call and
    :meth:`AttnBackendImpl.forward` one ``attn_forward_paged`` call on that plan, through the compiled
    extension ``attn._ext`` (the entries attn.Plan.forward / attn.reshape_and_cache use: torch tensors go
    in as DLPack views, no copies, the GIL released around the C call); the options and the cache view are
    built once per layer, the plan's handles once per step, so a layer costs the two C calls and a few
    microseconds of Python (per-tensor or per-KV-head fp8 scales alike; the KV-stored callback goes through
    attn_reshape_and_cache_ex).

KV cache: vLLM allocates each layer as a logical ``[num_blocks, num_kv_heads, block_size, head_size +
head_size_v]`` view (any of its KVCacheLayout stride orders); attn stores each token's key in the first
``head_size`` elements of the last dimension and its value in the rest, and reads the same bytes as its own
``[2, num_blocks, block_size, num_kv_heads, head_size]`` view with strides
``(head_size, s_block, s_token, s_head, 1)`` — no copy, for every layout. The backend asks for the
token-major LBNHC layout (a token's kv heads side by side, attn's own order); head-major LBHNC decodes as
fast (see supported_kv_cache_layouts).

What the backend declares (head sizes, dtypes, KV-cache dtypes, block sizes, attention types, sliding
window, sinks) comes from the C library's ``attn_capabilities_get``, not from a list kept here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import numpy as np
try:
    import torch
except ImportError as _e:  # a hint instead of a bare ModuleNotFoundError
    raise ImportError(f"{__name__} needs torch: pip install \".[vllm]\" from the attn checkout") from _e

from vllm.config import VllmConfig
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl, AttentionLayer,
                                       AttentionMetadataBuilder, AttentionType,
                                       CommonAttentionMetadata, MultipleOf)
from vllm.v1.kv_cache_interface import AttentionSpec, CrossAttentionSpec, EncoderOnlyAttentionSpec
from vllm.v1.kv_cache_layout import KVCacheLayout

from .. import _capi, kv_events, ops

# The compiled extension (python/attn/_ext.c).
_EXT = ops._ext

logger = logging.getLogger("attn.vllm")


# vLLM allocates its KV caches with torch.zeros, on base pages unless torch's THP_MEM_ALLOC_ENABLE=1 is set. The
# first time a layer's cache reaches the backend, before attn writes to it, its all-zero 2 MiB pages are moved
# onto transparent huge pages (attn_kv_cache_to_huge_pages: released, they refault as zero-filled huge pages):
# decode jumps from block to block, and base pages cost TLB misses there. ATTN_KV_HUGE_PAGES=0 turns it off; so
# does a KV connector (kv_transfer_config), which may write the cache from another thread meanwhile.
_HUGE_PAGES = {"on": os.environ.get("ATTN_KV_HUGE_PAGES", "1") != "0", "released": 0}


def _to_huge_pages(kv_cache: torch.Tensor) -> None:
    if not _HUGE_PAGES["on"] or str(kv_cache.device).split(":")[0] != "cpu" or kv_cache.numel() == 0:
        return
    try:
        released = _EXT.attn_kv_cache_to_huge_pages(kv_cache)
    except (_capi.AttnError, TypeError, ValueError) as e:  # a view it cannot take: the cache stays as it is
        logger.debug("attn: KV cache left on its pages (%s)", e)
        return
    before = _HUGE_PAGES["released"]
    _HUGE_PAGES["released"] = before + released
    if released and before == 0:
        logger.info("attn: KV cache moved onto transparent huge pages as layers first use it "
                    "(ATTN_KV_HUGE_PAGES=0 keeps vLLM's pages)")


# ------------------------------------------------------------------------------------------------
# Capabilities (attn_capabilities_get) in vLLM's vocabulary
# ------------------------------------------------------------------------------------------------
CAPS = _capi.capabilities()

_TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# vLLM CacheDType names of each attn cache dtype ("auto" = the model dtype, always one of `dtypes`).
_CACHE_DTYPE_NAMES = {"f16": ["float16"], "bf16": ["bfloat16"], "fp8_e4m3": ["fp8", "fp8_e4m3"],
                      "fp8_e5m2": ["fp8_e5m2"]}
# vLLM attention type -> the attn request kind it runs as.
_ATTN_TYPE_KIND = {AttentionType.DECODER: "decoder", AttentionType.ENCODER_ONLY: "encoder_only",
                   AttentionType.ENCODER: "encoder_only", AttentionType.ENCODER_DECODER: "cross"}
_ENCODER_TYPES = (AttentionType.ENCODER_ONLY, AttentionType.ENCODER)


def supported_kv_cache_dtypes() -> List[str]:
    names = ["auto"]
    for d in sorted(CAPS["kv_cache_dtypes"]):
        names += _CACHE_DTYPE_NAMES.get(d, [])
    return names


_ATTN_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8)


def _layer_scales(layer: Any) -> Tuple[float, float]:
    """vLLM's per-tensor fp8 KV scales of an Attention layer (_k_scale_float / _v_scale_float; 1.0 when the
    checkpoint has none, as vLLM defaults them). Read per call: calculate_kv_scales may update them."""
    return (float(getattr(layer, "_k_scale_float", 1.0)), float(getattr(layer, "_v_scale_float", 1.0)))


def _layer_kv_scales(layer: Any, num_kv_heads: int) -> Tuple[Any, Any]:
    """The fp8 KV scales of an Attention layer as attn takes them: per tensor (floats, _layer_scales), or per KV
    head when the layer's _k_scale / _v_scale tensor has num_kv_heads > 1 elements (vLLM kv_scale_type
    "attn_head"): then a contiguous float32 [num_kv_heads] copy of that tensor (attn_params.k_scales /
    attn_cache_write_options.k_scales). Read per call, as _layer_scales. A scale tensor of another size raises
    ValueError naming it."""
    ks, vs = _layer_scales(layer)
    res = []
    for name, s in (("_k_scale", ks), ("_v_scale", vs)):
        t = getattr(layer, name, None)
        n = 1 if t is None or not hasattr(t, "numel") else int(t.numel())
        if n == 1:
            res.append(s)
        elif n == num_kv_heads:
            res.append(np.ascontiguousarray(t.detach().float().cpu().numpy().reshape(-1), dtype=np.float32))
        else:
            raise ValueError(f"attn: layer.{name} has {n} elements, expected 1 (one scale per tensor) or "
                             f"num_kv_heads={num_kv_heads} (kv_scale_type 'attn_head': one per KV head)")
    return res[0], res[1]


# fp8 query dtypes of this torch (none in an old one): vLLM quantizes queries (Attention.query_quant with
# layer._q_scale) only for a backend whose impl sets supports_quant_query_input, which this one does not, so a
# float8 query means something else went wrong: forward refuses it by name instead of misreading the bytes.
_FP8_QUERY_DTYPES = frozenset(d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None))
                              if d is not None)


_ctx_cache: Dict[int, ops.Context] = {}
_marked: Dict[Tuple[int, str], bool] = {}  # (pid, marker path) already written
_steps_seen: set = set()


def _note_step(marker: str, kind: str, plan: ops.Plan, same_order: bool) -> None:
    """With ATTN_VLLM_MARKER set (`marker`): one line per new kind of step (kind, attn_state, has decodes, has
    prefills, plan order = vLLM's order), so tests can show that e.g. a mixed decode + prefill step ran."""
    key = (marker, kind, plan.attn_state, plan.num_decodes > 0, plan.num_prefills > 0, same_order)
    if key not in _steps_seen:
        _steps_seen.add(key)
        with open(marker + ".steps", "a") as f:
            f.write(f"kind={kind} state={plan.attn_state} decodes={plan.num_decodes} "
                    f"prefills={plan.num_prefills} same_order={int(same_order)}\n")


# The marker path this process has written its line to (None: none yet). AttnBackendImpl.forward compares the
# step's marker with it before it formats anything, so only a process's first layer pays for the line's text.
_marker_path: Optional[str] = None


def _forget_marker_after_fork() -> None:
    global _marker_path
    _marker_path = None  # a forked child writes its own line (its own pid)


os.register_at_fork(after_in_child=_forget_marker_after_fork)


def _mark_used(what: str) -> None:
    """Appends one line per process to $ATTN_VLLM_MARKER the first time attn runs a layer (tests and
    `make run-vllm` use it to prove which backend ran, and through which binding)."""
    global _marker_path
    path = os.environ.get("ATTN_VLLM_MARKER")
    key = (os.getpid(), path or "")
    if path and not _marked.get(key):
        _marked[key] = True
        with open(path, "a") as f:
            f.write(f"pid={key[0]} {what} binding=ext "
                    f"libattn={_capi.library_path}\n")
    if path:
        _marker_path = path


def _context() -> ops.Context:
    """One attn context per process, with torch's thread count (vLLM binds its OpenMP threads) unless
    ATTN_VLLM_THREADS says otherwise. Results do not depend on it."""
    pid = os.getpid()
    ctx = _ctx_cache.get(pid)
    if ctx is None:
        n = int(os.environ.get("ATTN_VLLM_THREADS", "0") or 0) or torch.get_num_threads()
        ctx = _ctx_cache[pid] = ops.Context(num_threads=max(1, n))
    return ctx


def _ctx_ptr() -> int:
    """The process's context handle as an int for attn._ext (looked up once per step by the builder)."""
    return _context()._ptr


# ------------------------------------------------------------------------------------------------
# Decode context parallel (DCP): vLLM's --decode-context-parallel-size N reuses N tensor-parallel ranks that
# hold the same KV heads and stores each request's token at position p only on rank (p // I) % N
# (I = cp_kv_cache_interleave_size), at that rank's local index (p // (I·N))·I + p % I, addressed through
# the request's block table with the physical block_size. So a rank's first L_r local tokens are its share
# of a request's first L global tokens, and the request's cached context is the union of the N shares.
# ------------------------------------------------------------------------------------------------
def _dcp_world_size_and_rank(kv_cache_spec: Any) -> Tuple[int, int]:
    """(world size, rank) of this process's DCP group for a cache group vLLM shards (spec.dcp_sharded),
    else (1, 0); (1, 0) also for a vLLM without DCP."""
    try:
        from vllm.distributed.parallel_state import get_dcp_world_size_and_rank
    except ImportError:
        return 1, 0
    return get_dcp_world_size_and_rank(bool(getattr(kv_cache_spec, "dcp_sharded", False)))


def dcp_local_lens(lens: np.ndarray, world_size: int, rank: int, interleave: int) -> np.ndarray:
    """How many of the first lens[r] tokens of each request DCP rank `rank` stores (vLLM's
    get_dcp_local_seq_lens): whole rounds of world_size·interleave tokens give it `interleave` each, the
    remainder fills ranks 0, 1, ... `interleave` tokens at a time."""
    lens = np.asarray(lens, np.int64)
    base = lens // interleave // world_size * interleave
    rem = lens - base * world_size
    return base + np.clip(rem - rank * interleave, 0, interleave)


def _note_dcp_step(world_size: int, rank: int, interleave: int, has_context: bool, num_decodes: int,
                   num_prefills: int) -> None:
    """_note_step for a DCP step (no attn plan): one line per new kind of step."""
    key = (os.environ["ATTN_VLLM_MARKER"], "dcp", rank, has_context, num_decodes > 0, num_prefills > 0)
    if key not in _steps_seen:
        _steps_seen.add(key)
        with open(os.environ["ATTN_VLLM_MARKER"] + ".steps", "a") as f:
            f.write(f"kind=decoder dcp={world_size} rank={rank} interleave={interleave} context={int(has_context)} "
                    f"decodes={num_decodes} prefills={num_prefills} pid={os.getpid()}\n")


# vLLM's CPU platform replaces its Triton slot-mapping kernel with a C++ one that refuses context parallel
# ("AssertionError: Context Parallelism is not supported on CPU."). Under DCP the impl registers this
# implementation of the same kernel in its place (vLLM's own kernel-override registry,
# vllm.triton_utils.dispatcher.register_kernels); without CP it calls the C++ kernel it replaced.
_SLOT_MAPPING_KERNEL = "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel"
_slot_mapping_fallback: List[Any] = []  # [the implementation registered before ours] once registered


def _cp_slot_mapping(num_tokens: int, max_num_tokens: int, query_start_loc_ptr: torch.Tensor,
                     positions_ptr: torch.Tensor, block_table_ptr: torch.Tensor, block_table_stride: int,
                     slot_mapping_ptr: torch.Tensor, KV_CACHE_BLOCK_SIZE: int, TOTAL_CP_WORLD_SIZE: int = 1,
                     TOTAL_CP_RANK: int = 0, CP_KV_CACHE_INTERLEAVE_SIZE: int = 1, PAD_ID: int = -1,
                     BLOCK_SIZE: int = 1024) -> None:
    """vLLM's ComputeSlotMappingKernel (vllm/v1/worker/block_table.py) in torch: slot of the token at position p
    of request r = block_table[r, p // (block_size·N)]·block_size + local offset on its rank, PAD_ID where the
    token belongs to another rank, and PAD_ID for the rows num_tokens .. max_num_tokens."""
    if TOTAL_CP_WORLD_SIZE == 1 and _slot_mapping_fallback:
        return _slot_mapping_fallback[0](num_tokens, max_num_tokens, query_start_loc_ptr, positions_ptr,
                                         block_table_ptr, block_table_stride, slot_mapping_ptr, KV_CACHE_BLOCK_SIZE,
                                         TOTAL_CP_WORLD_SIZE, TOTAL_CP_RANK, CP_KV_CACHE_INTERLEAVE_SIZE, PAD_ID,
                                         BLOCK_SIZE)
    qsl = query_start_loc_ptr.to(torch.int64)
    num_reqs = int(qsl.numel()) - 1
    if num_reqs > 0:
        start, end = int(qsl[0]), int(qsl[-1])
        idx = torch.arange(start, end, dtype=torch.int64)
        req = torch.searchsorted(qsl[1:].contiguous(), idx, right=True)
        pos = positions_ptr[start:end].to(torch.int64)
        n, il = int(TOTAL_CP_WORLD_SIZE), int(CP_KV_CACHE_INTERLEAVE_SIZE)
        vbs = int(KV_CACHE_BLOCK_SIZE) * n
        vblk = pos // vbs
        voff = pos - vblk * vbs
        local = (voff // il) % n == int(TOTAL_CP_RANK)
        loff = voff // (n * il) * il + voff % il
        flat = block_table_ptr.reshape(-1)
        blk = flat[torch.where(local, req * int(block_table_stride) + vblk, 0)].to(torch.int64)
        slot_mapping_ptr[start:end] = torch.where(local, blk * int(KV_CACHE_BLOCK_SIZE) + loff,
                                                  torch.full_like(loff, int(PAD_ID)))
    if max_num_tokens > num_tokens:
        slot_mapping_ptr[num_tokens:max_num_tokens] = int(PAD_ID)


def _register_cp_slot_mapping() -> bool:
    """Puts _cp_slot_mapping in place of vLLM's CPU slot-mapping kernel (once per process). Only where vLLM
    runs that kernel's C++ stand-in (no Triton): a real Triton kernel supports CP itself. Returns whether
    ours is registered."""
    if _slot_mapping_fallback:
        return True
    try:
        from vllm.triton_utils import HAS_TRITON
        from vllm.triton_utils import dispatcher
    except ImportError:
        return False
    if HAS_TRITON:
        return False
    prev = dispatcher._registry.get(_SLOT_MAPPING_KERNEL)
    if prev is None:
        return False
    _slot_mapping_fallback.append(prev[1])
    dispatcher.register_kernels({_SLOT_MAPPING_KERNEL: _cp_slot_mapping})
    logger.info("attn: DCP slot mapping registered for vLLM's CPU worker (%s)", _SLOT_MAPPING_KERNEL)
    return True


# ------------------------------------------------------------------------------------------------
# Backend
# ------------------------------------------------------------------------------------------------
class AttnBackend(AttentionBackend):
    """Static description of the backend (vllm-ascend's AscendAttentionBackend), from attn_capabilities_get."""

    accept_output_buffer: bool = True
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[List[torch.dtype]] = [_TORCH_DTYPES[d] for d in ("f16", "bf16", "f32")
                                                     if d in CAPS["dtypes"]]
    supported_kv_cache_dtypes: ClassVar[List[str]] = supported_kv_cache_dtypes()

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"  # must be an AttentionBackendEnum member; register() maps it to this class

    @staticmethod
    def get_impl_cls() -> type:
        return AttnBackendImpl

    @staticmethod
    def get_builder_cls() -> type:
        return AttnMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> List[Any]:
        return [MultipleOf(CAPS["block_size_min"])]

    @classmethod
    def get_supported_head_sizes(cls) -> List[int]:
        return list(range(CAPS["head_size_min"], CAPS["head_size_max"] + 1))

    @classmethod
    def supported_kv_cache_layouts(cls) -> Tuple[KVCacheLayout, ...]:
        # Any stride order works (the view takes the strides as they are). attn's decode path reads a token's
        # kv heads together where they sit side by side (attn's own [block, token, head] order), so token-major
        # layouts come first; a head-major LBHNC cache decodes as fast (SmolLM2's heads, 9/3 x 64, block 128,
        # 8 x 4k keys, bf16, 1 thread: 1.59-1.62 vs 1.61-1.72 ms; docs/SERVING.md).
        token_major = (KVCacheLayout.LBNHC, KVCacheLayout.BLNHC)
        return token_major + tuple(l for l in KVCacheLayout if l not in token_major)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        kind = _ATTN_TYPE_KIND.get(attn_type)
        return kind is not None and kind in CAPS["request_kinds"]

    @classmethod
    def supports_sink(cls) -> bool:
        return CAPS["sinks"]

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return CAPS["sliding_window"]

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True  # a non-causal decoder batch (causal=False) runs with causal off

    @classmethod
    def supports_batch_invariance(cls) -> bool:
        return True  # a request's bits never depend on the batch or thread count (docs/SERVING.md)

    @classmethod
    def is_mla(cls) -> bool:
        return False


# ------------------------------------------------------------------------------------------------
# Metadata and its builder
# ------------------------------------------------------------------------------------------------
@dataclass
class AttnMetadata:
    """Per-step metadata shared by every layer of a KV-cache group (vllm-ascend's AscendMetadata + the plan)."""

    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    # vLLM's tensors as the builder got them (engine order; as vLLM's own CPU builder, not cut to the step:
    # the first num_reqs + 1 / num_reqs / num_reqs rows / num_actual_tokens entries are the step's)
    query_start_loc: torch.Tensor        # int32 [num_reqs + 1]
    seq_lens: torch.Tensor               # int32 [num_reqs]
    block_table: torch.Tensor            # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor           # int64 [num_actual_tokens] (CrossAttentionBuilder replaces it)
    causal: bool
    kind: str                            # "decoder" | "encoder_only" | "cross"
    attn_state: int                      # attn_state of the step
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    plan: Optional[ops.Plan]             # None under decode context parallel (the DCP fields below)
    token_src: Optional[torch.Tensor]    # int64 [num_tokens]: plan row t = input row token_src[t]
    workspace: Any                       # void* of the plan's workspace (None when empty)
    workspace_size: int
    # Per-step constants of the hot path, filled in __post_init__ (once per step, not per layer).
    marker: Optional[str] = None         # $ATTN_VLLM_MARKER (None: read at construction; "": no marker lines)
    ctx_ptr: int = 0                     # the process's attn_ctx, plan handle and workspace as ints for
    plan_ptr: int = 0                    # attn._ext
    ws_ptr: int = 0
    # Decode context parallel (vLLM --decode-context-parallel-size N > 1; AttnBackendImpl._forward_dcp): this
    # rank's share of each request's cached context (the keys before this step's tokens), int32 [num_reqs],
    # and whether any request of the step has context at all (from the global lengths, so that every rank of
    # the DCP group takes the same branch and joins the same collectives).
    dcp_world_size: int = 1
    dcp_local_context_lens: Optional[torch.Tensor] = None
    dcp_has_context: bool = False

    def __post_init__(self) -> None:  # (the builder passes marker and ctx_ptr: its step reads no environment)
        self.marker = os.environ.get("ATTN_VLLM_MARKER") if self.marker is None else self.marker or None
        self.ctx_ptr = self.ctx_ptr or _ctx_ptr()
        self.plan_ptr = 0 if self.plan is None else self.plan._ptr
        self.ws_ptr = int(self.workspace or 0)


class AttnMetadataBuilder(AttentionMetadataBuilder[AttnMetadata]):
    """Builds one attn plan per engine step (vllm-ascend's AscendAttentionMetadataBuilder)."""

    reorder_batch_threshold: int = 1

    def __init__(self, kv_cache_spec: AttentionSpec, layer_names: List[str], vllm_config: VllmConfig,
                 device: torch.device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # Decodes (q_len <= 1 + num_speculative_tokens, with context) first: vLLM reorders its batch the
        # same way the plan orders requests (decode, short extend, long extend, fresh prefill).
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.reorder_batch_threshold = min(int(self.reorder_batch_threshold or 1),
                                           CAPS["max_decode_threshold"])
        self.num_speculative_tokens = self.reorder_batch_threshold - 1
        from vllm.v1.attention.backends.utils import get_num_attention_heads_from_layers

        parallel = vllm_config.parallel_config
        self.num_heads = (get_num_attention_heads_from_layers(vllm_config, layer_names)
                          or vllm_config.model_config.get_num_attention_heads(parallel))
        self.num_kv_heads = kv_cache_spec.num_kv_heads
        self.head_size = kv_cache_spec.head_size
        head_size_v = getattr(kv_cache_spec, "head_size_v", self.head_size)
        if head_size_v != self.head_size:
            raise NotImplementedError(f"attn: head_size_v={head_size_v} != head_size={self.head_size} "
                                      "(the paged cache stores equal key and value head sizes)")
        self.block_size = kv_cache_spec.block_size
        self.kind = ("cross" if isinstance(kv_cache_spec, CrossAttentionSpec) else
                     "encoder_only" if isinstance(kv_cache_spec, EncoderOnlyAttentionSpec) else "decoder")
        self.chunked_prefill = bool(vllm_config.scheduler_config.enable_chunked_prefill)
        if getattr(vllm_config, "kv_transfer_config", None) is not None:
            _HUGE_PAGES["on"] = False  # a connector may write caches from another thread: leave them as they are
        self._num_blocks: Optional[int] = None
        self._marker = os.environ.get("ATTN_VLLM_MARKER") or ""  # (set before the engine starts)
        self._ctx = (os.getpid(), 0)  # (pid, this process's context handle): looked up again after a fork
        self._plan_config: Optional[Tuple[int, Any]] = None  # (num_blocks, config)
        self.dcp_world_size, self.dcp_rank = _dcp_world_size_and_rank(kv_cache_spec)
        self.cp_interleave = int(getattr(parallel, "cp_kv_cache_interleave_size", 1) or 1)
        if self.dcp_world_size > 1 and self.kind == "cross":
            raise NotImplementedError("attn: cross-attention under decode context parallel "
                                      f"(decode_context_parallel_size={self.dcp_world_size}) is not supported")

    def _kv_num_blocks(self, used_max_block: int) -> int:
        """Blocks of this group's caches (read once from a bound layer cache), or the used maximum + 1."""
        if self._num_blocks is None:
            ctx = self.vllm_config.compilation_config.static_forward_context
            for name in self.layer_names:
                kv = getattr(ctx.get(name), "kv_cache", None)
                if isinstance(kv, torch.Tensor) and kv.dim() == 4:
                    self._num_blocks = int(kv.shape[0])
                    break
        if self._num_blocks is None or self._num_blocks <= used_max_block:
            return used_max_block + 1
        return self._num_blocks

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AttnMetadata:
        cm = common_attn_metadata
        if isinstance(cm.causal, torch.Tensor):
            raise NotImplementedError("attn: per-request (dynamic) causal masks are not supported")
        num_reqs, num_tokens = int(cm.num_reqs), int(cm.num_actual_tokens)
        kind, bt_t, seq_lens_t = self.kind, cm.block_table_tensor, cm.seq_lens
        if self.dcp_world_size > 1 and kind == "decoder":
            qsl = cm.query_start_loc_cpu[:num_reqs + 1].numpy().astype(np.int64)
            seq_lens_t, bt_t = seq_lens_t[:num_reqs], bt_t[:num_reqs]
            return self._build_dcp(cm, num_reqs, num_tokens, seq_lens_t, seq_lens_t.cpu().numpy().astype(np.int64),
                                   qsl[1:] - qsl[:-1], bt_t)
        # One C call makes the step's plan from vLLM's tensors as they are (attn._ext.plan_step: request r's
        # blocks are the first ceil(seq_len / block_size) of its block table row, the plan's width the table's; no
        # Python object or NumPy pass per request: this runs every engine step). An encoder-only request reads no
        # block (its impl's empty cache view has block_size 1).
        num_blocks = self._num_blocks or (0 if kind == "encoder_only" else self._kv_num_blocks(-1))  # (0: unbound)
        if self._plan_config is None or self._plan_config[0] != num_blocks:  # the engine's constants: built once
            self._plan_config = (num_blocks, ops._plan_config(
                num_blocks=num_blocks, block_size=1 if kind == "encoder_only" else self.block_size,
                num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_size=self.head_size,
                max_blocks_per_req=1, num_speculative_tokens=self.num_speculative_tokens,
                chunked_prefill_enabled=self.chunked_prefill))
        plan = ops.Plan._of_step(self._plan_config[1], kind, cm.query_start_loc_cpu, seq_lens_t, bt_t, num_reqs)
        token_src = None if plan.identity_order else torch.from_numpy(plan.token_src.astype(np.int64))
        if self._ctx[0] != os.getpid() or not self._ctx[1]:
            self._ctx = (os.getpid(), _ctx_ptr())
        meta = AttnMetadata(
            num_actual_tokens=num_tokens, max_query_len=int(cm.max_query_len),
            max_seq_len=int(cm.max_seq_len), query_start_loc=cm.query_start_loc, seq_lens=seq_lens_t,
            block_table=bt_t, slot_mapping=cm.slot_mapping,
            causal=bool(cm.causal) and kind == "decoder", kind=kind, attn_state=plan.attn_state,
            num_decodes=plan.num_decodes, num_decode_tokens=plan.num_decode_tokens,
            num_prefills=plan.num_prefills, plan=plan, token_src=token_src,
            workspace=plan._ws_ptr or None, workspace_size=plan._ws_size,  # (the plan took the address once)
            marker=self._marker, ctx_ptr=self._ctx[1])
        if meta.marker is not None:
            _note_step(meta.marker, kind, plan, token_src is None)
        return meta

    def _build_dcp(self, cm: CommonAttentionMetadata, num_reqs: int, num_tokens: int, seq_lens_t: torch.Tensor,
                   seq_lens: np.ndarray, q_lens: np.ndarray, bt_t: torch.Tensor) -> AttnMetadata:
        """The step under decode context parallel: no attn plan (the impl runs plan-less paged attention over
        this rank's shard and varlen attention over the step's own tokens), only the local context lengths."""
        context = seq_lens - q_lens  # global: the keys cached before this step
        if num_reqs and context.min() < 0:
            raise ValueError(f"attn: seq_lens {seq_lens.tolist()} shorter than the query lengths {q_lens.tolist()}")
        local = dcp_local_lens(context, self.dcp_world_size, self.dcp_rank, self.cp_interleave)
        thr = self.reorder_batch_threshold
        num_decodes = int(np.argmax(q_lens > thr)) if (q_lens > thr).any() else num_reqs
        has_context = bool(num_reqs and context.max() > 0)
        if os.environ.get("ATTN_VLLM_MARKER"):
            _note_dcp_step(self.dcp_world_size, self.dcp_rank, self.cp_interleave, has_context, num_decodes,
                           num_reqs - num_decodes)
        return AttnMetadata(
            num_actual_tokens=num_tokens, max_query_len=int(cm.max_query_len), max_seq_len=int(cm.max_seq_len),
            query_start_loc=cm.query_start_loc_cpu[:num_reqs + 1].to(torch.int32),
            seq_lens=seq_lens_t, block_table=bt_t.to(torch.int32), slot_mapping=cm.slot_mapping[:num_tokens],
            causal=bool(cm.causal), kind="decoder", attn_state=-1, num_decodes=num_decodes,
            num_decode_tokens=int(q_lens[:num_decodes].sum()), num_prefills=num_reqs - num_decodes, plan=None,
            token_src=None, workspace=None, workspace_size=0, dcp_world_size=self.dcp_world_size,
            dcp_local_context_lens=torch.from_numpy(local.astype(np.int32)), dcp_has_context=has_context)


# ------------------------------------------------------------------------------------------------
# Impl (one per layer)
# ------------------------------------------------------------------------------------------------
class AttnBackendImpl(AttentionImpl[AttnMetadata]):
    """Per-layer attention (vllm-ascend's AscendAttentionBackendImpl): attn_reshape_and_cache +
    attn_forward_paged on the step's plan."""

    # Decode context parallel: each rank attends over its shard of the cache and the shards' partial states
    # are merged by their LSEs (_forward_dcp), so vLLM's start-up check (need_to_return_lse_for_decode =
    # dcp_world_size > 1 and can_return_lse_for_decode) accepts the impl. Prefill context parallel is not
    # supported (supports_pcp stays False: vLLM then refuses PCP with this backend at start-up).
    can_return_lse_for_decode: bool = True
    supports_dcp: bool = True
    supports_pcp: bool = False

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: Optional[int] = None,
                 alibi_slopes: Optional[List[float]] = None, sliding_window: Optional[int] = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: Optional[float] = None,
                 attn_type: str = AttentionType.DECODER,
                 kv_sharing_target_layer_name: Optional[str] = None,
                 sinks: Optional[torch.Tensor] = None) -> None:
        if kv_cache_dtype not in AttnBackend.supported_kv_cache_dtypes:
            raise NotImplementedError(f"attn: kv_cache_dtype={kv_cache_dtype!r} is not supported (supported: "
                                      f"{AttnBackend.supported_kv_cache_dtypes})")
        if not AttnBackend.supports_attn_type(attn_type):
            raise NotImplementedError(f"attn: attention type {attn_type!r} is not supported")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        self.num_queries_per_kv = self.num_heads // self.num_kv_heads
        self.alibi_slopes = alibi_slopes
        self.sliding_window = sliding_window
        self.kv_cache_dtype = kv_cache_dtype
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks
        self.is_encoder = attn_type in _ENCODER_TYPES
        self.dcp_world_size = int(getattr(self, "dcp_world_size", 1))  # set by vLLM's AttentionImpl.__new__
        self.dcp_rank = int(getattr(self, "dcp_rank", 0))
        if self.dcp_world_size > 1 and not self.is_encoder:
            unsupported = [name for name, v in (("sliding_window", sliding_window), ("alibi_slopes", alibi_slopes),
                                                ("sinks", sinks)) if v is not None]
            if unsupported:  # each depends on global key positions / counts a rank's shard does not have
                raise NotImplementedError(f"attn: {', '.join(unsupported)} under decode context parallel "
                                          f"(decode_context_parallel_size={self.dcp_world_size}) is not supported")
            _register_cp_slot_mapping()
        # fp8 KV cache (kv_cache_dtype "fp8" / "fp8_e4m3" / "fp8_e5m2"): vLLM allocates it as uint8; attn reads
        # it as this fp8 format with the layer's per-tensor _k_scale_float / _v_scale_float, or per KV head with
        # its _k_scale / _v_scale tensors when they hold num_kv_heads values (kv_scale_type "attn_head",
        # _layer_kv_scales: the write and the read then take the general entries). Encoder attention has no cache: its
        # rows stay in the model dtype. layer._q_scale is not read: vLLM quantizes queries only for an impl
        # with supports_quant_query_input, which this one leaves unset (forward refuses a float8 query).
        self.fp8_code = None if self.is_encoder else ops.KV_CACHE_DTYPES.get(kv_cache_dtype)
        self._cache_dtype = None if self.fp8_code is None else kv_cache_dtype  # the name attn._ext takes
        self._kv_key: Any = None
        self._kv_tensor: Optional[torch.Tensor] = None  # (keeps the cache's storage alive, as vLLM does)
        self._kv_src: Optional[torch.Tensor] = None
        self._dummy_cache: Optional[torch.Tensor] = None
        self._dummy_tensor: Optional[torch.Tensor] = None
        self._ext_args: Optional[Tuple[tuple, tuple]] = None

    # -- per-layer constants, built once ------------------------------------------------------------
    def process_weights_after_loading(self, act_dtype: torch.dtype) -> None:
        self._ext_args = None  # sinks are weights: rebuild the options from the loaded values

    def _ext_options(self) -> Tuple[tuple, tuple]:
        """(causal, non-causal) option arguments of attn._ext.forward_paged (softmax_scale, causal,
        window_size, softcap, alibi_slopes, sinks); the per-head
        vectors as contiguous float32 arrays (what the extension takes)."""
        if self._ext_args is None:
            w = self.sliding_window
            alibi = (None if self.alibi_slopes is None else
                     np.ascontiguousarray(np.asarray(self.alibi_slopes, dtype=np.float32).reshape(-1)))
            sinks = (None if self.sinks is None else
                     np.ascontiguousarray(self.sinks.detach().float().cpu().numpy().reshape(-1)))
            tail = (self.logits_soft_cap, alibi, sinks)
            causal = (self.scale, True, (-1, -1) if w is None else (w - 1, 0)) + tail
            bidir = (self.scale, False, (-1, -1) if w is None else (w - 1, w - 1)) + tail
            self._ext_args = (causal, bidir)
        return self._ext_args

    def _kv_view(self, kv_cache: torch.Tensor) -> Any:
        """attn's [2, num_blocks, block_size, num_kv_heads, head_size] view of vLLM's per-layer
        [num_blocks, num_kv_heads, block_size, 2·head_size] cache (key = first half of the last dim).
        Rebuilt when vLLM hands over another cache; the same tensor object at the same address (every step)
        is recognised without re-reading its shape and strides (~1 µs a call)."""
        if kv_cache is self._kv_src and kv_cache.data_ptr() == self._kv_key[0]:
            return self._kv_tensor
        key = (kv_cache.data_ptr(), tuple(kv_cache.shape), tuple(kv_cache.stride()), kv_cache.dtype)
        if key != self._kv_key:
            nb, nh, bs, c = kv_cache.shape
            if c != 2 * self.head_size or kv_cache.stride(3) != 1:
                raise ValueError(f"attn: kv_cache shape {list(kv_cache.shape)} strides "
                                 f"{list(kv_cache.stride())}: expected [num_blocks, num_kv_heads, "
                                 f"block_size, 2·{self.head_size}] with a contiguous last dimension")
            sb, sh, sn, _ = kv_cache.stride()
            shape, strides = (2, nb, bs, nh, self.head_size), (self.head_size, sb, sn, sh, 1)
            if kv_cache.dtype not in _ATTN_DTYPES:
                raise TypeError(f"attn: tensor dtype {kv_cache.dtype} is not supported")
            _to_huge_pages(kv_cache)  # a cache not seen before: nothing written by attn yet
            # the view as a torch tensor (same storage, no copy) for attn._ext's DLPack path
            self._kv_tensor = kv_cache.as_strided(shape, strides)
            if self.fp8_code is not None:  # vLLM's uint8 fp8 cache, read as its fp8 format
                if kv_cache.dtype != torch.uint8:
                    raise TypeError(f"attn: kv_cache_dtype={self.kv_cache_dtype!r} expects vLLM's uint8 cache, "
                                    f"got {kv_cache.dtype}")
            self._kv_key = key
        self._kv_src = kv_cache
        return self._kv_tensor

    # -- per step and layer ---------------------------------------------------------------------------
    def do_kv_cache_update(self, layer: torch.nn.Module, key: torch.Tensor, value: torch.Tensor,
                           kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """key/value [num_tokens, num_kv_heads, head_size] -> their slots (attn_reshape_and_cache; rows past
        slot_mapping's length and slots < 0 are skipped). Encoder attention has no cache."""
        if self.is_encoder or slot_mapping is None or kv_cache.numel() == 0:
            return
        kv = self._kv_view(kv_cache)
        if self.on_kv_stored is not None:  # disaggregated prefill: the KV producer's per-layer hook
            return self._kv_cache_update_notify(layer, key, value, kv, slot_mapping)
        # fp8: stored = fp8(x / scale), saturating, per tensor or per KV head
        ks, vs = (None, None) if self.fp8_code is None else _layer_kv_scales(layer, self.num_kv_heads)
        _EXT.reshape_and_cache(_ctx_ptr(), key, value, self._kv_tensor, slot_mapping, self._cache_dtype, ks, vs)

    # Disaggregated prefill (vllm-ascend records reshape_cache_event when is_kv_producer): a KV
    # producer sets ``on_kv_stored`` (on the class, or on one layer's impl) to callable(layer_name,
    # attn.kv_events.KVStored); do_kv_cache_update then stores through attn_reshape_and_cache_notify and the
    # callable runs right after this layer's K/V are in the cache (event.runs / event.block_ids name vLLM's
    # block ids), before the layer's attention, so the layer's transfer can start at once.
    on_kv_stored: Optional[Any] = None

    def _kv_cache_update_notify(self, layer: Any, key: torch.Tensor, value: torch.Tensor, kv: Any,
                                slot_mapping: torch.Tensor) -> None:
        name = getattr(layer, "layer_name", None) or ""
        idx = next((int(p) for p in name.split(".") if p.isdigit()), 0)  # "model.layers.3.attn" -> 3
        hook = self.on_kv_stored

        def on_event(*event: Any) -> None:  # called by attn._ext with the GIL, after the write
            hook(name, kv_events._event_of(*event))

        ks, vs = (1.0, 1.0) if getattr(self, "fp8_code", None) is None else _layer_kv_scales(layer, self.num_kv_heads)
        _EXT.reshape_and_cache(_ctx_ptr(), key, value, kv, slot_mapping, self._cache_dtype, ks, vs, on_event, idx)

    def forward(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: Optional[AttnMetadata], output: torch.Tensor,
                output_scale: Optional[torch.Tensor] = None,
                output_block_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
        """query [num_tokens, num_heads, head_size]; key/value [num_tokens, num_kv_heads, head_size] (read
        here only by encoder attention: the cache already holds this step's keys); output [num_tokens,
        num_heads, head_size] written in place. attn_metadata None = vLLM's profiling run: no-op."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("attn: fused output quantization is not supported")
        if query.dtype in _FP8_QUERY_DTYPES:
            raise NotImplementedError(f"attn: query dtype {query.dtype}: quantized queries (vLLM query_quant with "
                                      "layer._q_scale) are not supported; this backend does not set "
                                      "supports_quant_query_input, so queries should arrive in the model dtype")
        if attn_metadata is None:
            return output
        meta = attn_metadata
        n = meta.num_actual_tokens
        if meta.marker is not None and meta.marker != _marker_path:  # the text is formatted once per process
            _mark_used(f"attn_type={self.attn_type} kind={meta.kind} "
                       + (f"dcp={meta.dcp_world_size} rank={self.dcp_rank} " if meta.dcp_world_size > 1 else "")
                       + f"dtype={query.dtype} "
                       f"kv_cache={list(kv_cache.shape)}/{list(kv_cache.stride())}")
        if meta.dcp_world_size > 1 and not self.is_encoder:
            return self._forward_dcp(layer, query, key, value, kv_cache, meta, output)
        causal = meta.causal and not self.is_encoder
        q = query if query.shape[0] == n else query[:n]
        out = output if output.shape[0] == n else output[:n]
        k = v = None
        if self.is_encoder:
            k, v = key[:n], value[:n]
            kvt = self._encoder_cache(k)
        else:
            self._kv_view(kv_cache)
            kvt = self._kv_tensor
        src = meta.token_src
        if src is not None:  # plan order differs from vLLM's: gather rows, run, scatter back
            q = q.index_select(0, src)
            if k is not None:
                k, v = k.index_select(0, src), v.index_select(0, src)
            res = torch.empty_like(q)
        else:
            res = out
        # attn._ext.forward_paged, as attn.Plan.forward: q / res / cache as DLPack views, the step's handles
        # from the metadata; an fp8 cache is dequantized inside attn with the layer's scales
        ks, vs = (None, None) if self.fp8_code is None else _layer_kv_scales(layer, self.num_kv_heads)
        _EXT.forward_paged(meta.ctx_ptr, meta.plan_ptr, meta.plan.num_heads, q, kvt, k, v,
                           *self._ext_options()[0 if causal else 1], res, None, False, meta.ws_ptr,
                           meta.workspace_size, None if self.is_encoder else self._cache_dtype, ks, vs)
        if src is not None:
            out.index_copy_(0, src, res)
        return output

    def _forward_dcp(self, layer: AttentionLayer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     kv_cache: torch.Tensor, meta: AttnMetadata, output: torch.Tensor) -> torch.Tensor:
        """One layer under decode context parallel, as vLLM's FlashAttentionImpl._forward_with_dcp:
          1. context: the queries of all N ranks of the DCP group (all-gathered along the heads: rank j's
             heads are j·H .. j·H + H - 1) attend, non-causally, to this rank's shard of every request's cached
             context (plan-less paged attention over dcp_local_context_lens keys) -> out and LSE [N·H, n];
          2. the shards' partial states (out and LSE packed into one all-gather) of this rank's H heads are merged
             by their LSEs in rank order (attn_merge_attn_states), so every rank computes the same merge;
          3. the step's own tokens (key / value, which vLLM stored on one rank only) attend to each other
             causally (varlen attention) and are merged last.
        A step without cached context anywhere (all fresh prefills; decided from the global lengths, so all
        ranks agree) is step 3 alone, without collectives."""
        from vllm.distributed.parallel_state import get_dcp_group

        n, h = meta.num_actual_tokens, self.num_heads
        q, k, v, out = query[:n], key[:n], value[:n], output[:n]
        ctx = _context()
        qsl = meta.query_start_loc
        if not meta.dcp_has_context:
            ops.attention_varlen(q, k, v, qsl, qsl, softmax_scale=self.scale, causal=meta.causal,
                                 softcap=self.logits_soft_cap, out=out, ctx=ctx)
            return output
        group = get_dcp_group()
        world, rank = self.dcp_world_size, self.dcp_rank
        q_all = group.all_gather(q.contiguous(), dim=1)  # [n, N·H, head_size]
        part = torch.empty_like(q_all)
        part_lse = torch.empty((world * h, n), dtype=torch.float32)
        self._kv_view(kv_cache)
        ks, vs = (None, None) if self.fp8_code is None else _layer_kv_scales(layer, self.num_kv_heads)
        ops.paged_attention(q_all, self._kv_tensor, qsl, meta.dcp_local_context_lens, meta.block_table,
                            softmax_scale=self.scale, causal=False, softcap=self.logits_soft_cap, out=part,
                            lse=part_lse, kv_cache_dtype=self._cache_dtype, k_scale=ks, v_scale=vs, ctx=ctx)
        # every rank's partial state of this rank's heads, in one all-gather: each head's float32 LSE rides
        # behind its output row as raw bytes (reinterpreted, not converted: the merge reads the exact LSE)
        d = part.shape[-1]
        packed = torch.cat((part, part_lse.t().contiguous().view(part.dtype).view(n, world * h, -1)), dim=-1)
        states = group.all_gather(packed, dim=0).view(world, n, world * h, -1)[:, :, rank * h:(rank + 1) * h]

        def state(j: int) -> Tuple[torch.Tensor, torch.Tensor]:  # rank j's (out [n, H, D], lse [H, n])
            lse = states[j, :, :, d:].contiguous().view(torch.float32).view(n, h)
            return states[j, :, :, :d].contiguous(), lse.t().contiguous()

        acc, acc_lse = state(0)
        for j in range(1, world):
            nxt_lse = torch.empty_like(acc_lse)
            o_j, lse_j = state(j)
            ops.merge_attn_states(acc, acc_lse, o_j, lse_j, out=acc, lse_out=nxt_lse, ctx=ctx)
            acc_lse = nxt_lse
        own = torch.empty_like(q)
        own_lse = torch.empty((h, n), dtype=torch.float32)
        ops.attention_varlen(q, k, v, qsl, qsl, softmax_scale=self.scale, causal=meta.causal,
                             softcap=self.logits_soft_cap, out=own, lse=own_lse, ctx=ctx)
        ops.merge_attn_states(acc, acc_lse, own, own_lse, out=out, ctx=ctx)
        return output

    def _encoder_cache(self, key: torch.Tensor) -> Any:
        """Encoder attention reads its own rows, not a cache; attn_forward_paged still takes a cache view
        of the rows' dtype and the layer's geometry: an empty one (zero blocks), built once."""
        if self._dummy_cache is None or self._dummy_cache.dtype != key.dtype:
            self._dummy_cache = torch.zeros((2, 1, 1, self.num_kv_heads, self.head_size), dtype=key.dtype)
            shape, strides = (2, 0, 1, self.num_kv_heads, self.head_size), tuple(self._dummy_cache.stride())
            self._dummy_tensor = self._dummy_cache.as_strided(shape, strides)
        return self._dummy_tensor
