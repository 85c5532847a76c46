"""The demo engine's attention glue over attn's serving API (attn.Plan, reshape_and_cache), shaped like
vllm-ascend's AscendAttentionBackend so that wiring it into a vLLM-style engine is mechanical (vLLM itself
uses attn.vllm, the package's one vLLM backend):

    backend = AttnBackend
    kv_cache = np.zeros(backend.get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size))
    builder = backend.get_builder_cls()(AttnSpec(...))          # once
    impl = backend.get_impl_cls()(num_heads, head_size, scale, num_kv_heads, ...)   # per layer
    per step:  meta = builder.build(0, CommonAttentionMetadata(...))   # plans the step once
    per layer: impl.forward(layer, query, key, value, kv_cache[layer], meta, output)

``build`` turns the step's vLLM metadata (query_start_loc, seq_lens, block_table, slot_mapping) into an
attn.Plan (decode-first order, batch state, split-KV work partition, workspace); ``forward`` writes the
step's keys/values with reshape_and_cache and runs attn_forward_paged with that plan. Results are
bitwise independent of thread count and of the rest of the batch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence

import numpy as np

from attn import _arrays, ops
from attn.ops import Array, Context


class AttnState(enum.IntEnum):
    """Batch state of one step (values of vllm-ascend's AscendAttentionState and of attn_state)."""

    PrefillNoCache = 0
    PrefillCacheHit = 1
    DecodeOnly = 2
    ChunkedPrefill = 3
    SpecDecoding = 4


@dataclass
class AttnSpec:
    """The KV-cache spec the builder needs (vLLM AttentionSpec + model constants)."""

    num_blocks: int
    block_size: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    max_blocks_per_req: Optional[int] = None  # default: num_blocks
    num_speculative_tokens: int = 0
    chunked_prefill_enabled: bool = True


@dataclass
class CommonAttentionMetadata:
    """The per-step scheduler output the builder reads (the fields of vLLM's CommonAttentionMetadata).

    query_start_loc int32 [num_reqs + 1]; seq_lens int32 [num_reqs] (cached + new tokens);
    block_table_tensor int32 [num_reqs, max_blocks]; slot_mapping int64 [num_actual_tokens].
    causal=False marks an encoder-only (pooling) batch: non-causal over each request's own tokens."""

    query_start_loc: Array
    seq_lens: Array
    block_table_tensor: Array
    slot_mapping: Array
    num_reqs: Optional[int] = None
    num_actual_tokens: Optional[int] = None
    max_query_len: Optional[int] = None
    causal: bool = True


@dataclass
class AttnMetadata:
    """Per-step metadata shared by every layer (vllm-ascend's AscendMetadata, plus the attn.Plan)."""

    attn_state: AttnState
    num_actual_tokens: int
    num_decode_tokens: int
    num_decodes: int
    num_prefills: int
    query_start_loc: np.ndarray            # int32 [num_reqs + 1], input (engine) order
    seq_lens: np.ndarray                   # int32 [num_reqs]
    seq_lens_list: List[int]
    max_query_len: int
    block_tables: np.ndarray               # int32 [num_reqs, max_blocks]
    slot_mapping: np.ndarray               # int64 [num_actual_tokens]
    causal: bool
    plan: ops.Plan
    token_src: Optional[np.ndarray] = None  # int32 [num_tokens]: plan row t = input row token_src[t]
    extra: dict = field(default_factory=dict)


class AttnMetadataBuilder:
    """Builds AttnMetadata (and the attn.Plan) once per engine step."""

    reorder_batch_threshold: int = 1

    def __init__(self, kv_cache_spec: AttnSpec, layer_names: Sequence[str] = (), vllm_config: Any = None,
                 device: Any = "cpu"):
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = list(layer_names)
        self.device = device
        self.decode_threshold = 1 + kv_cache_spec.num_speculative_tokens
        AttnMetadataBuilder.reorder_batch_threshold = self.decode_threshold

    def reorder_batch(self, input_batch: Any, scheduler_output: Any) -> bool:
        return False  # the plan orders decode-first itself (token_src maps the rows)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> AttnMetadata:
        """Plans the step: per request q_len = query_start_loc[r+1] - query_start_loc[r],
        num_computed = seq_lens[r] - q_len, blocks = block_table[r, :ceil(seq_lens[r] / block_size)]."""
        spec = self.kv_cache_spec
        cm = common_attn_metadata
        qsl = np.asarray(_arrays.index_array(cm.query_start_loc, "query_start_loc"), dtype=np.int32)
        num_reqs = len(qsl) - 1 if cm.num_reqs is None else int(cm.num_reqs)
        qsl = qsl[:num_reqs + 1]
        seq_lens = np.asarray(_arrays.index_array(cm.seq_lens, "seq_lens"), dtype=np.int32)[:num_reqs]
        bt = np.asarray(_arrays.index_array(cm.block_table_tensor, "block_table"),
                        dtype=np.int32)[:num_reqs]
        num_tokens = int(qsl[-1]) if cm.num_actual_tokens is None else int(cm.num_actual_tokens)
        slot_mapping = _arrays.index_array(cm.slot_mapping, "slot_mapping", np.int64)[:num_tokens]
        q_lens = np.diff(qsl)
        reqs = []
        for r in range(num_reqs):
            if cm.causal:
                nblk = -(-int(seq_lens[r]) // spec.block_size)
                reqs.append(ops.PlanRequest(int(seq_lens[r]) - int(q_lens[r]), int(q_lens[r]),
                                            bt[r, :nblk]))
            else:
                reqs.append(ops.PlanRequest(0, int(q_lens[r]), (), kind="encoder_only"))
        plan = ops.Plan(reqs, num_blocks=spec.num_blocks, block_size=spec.block_size,
                        num_heads=spec.num_heads, num_kv_heads=spec.num_kv_heads,
                        head_size=spec.head_size,
                        max_blocks_per_req=spec.max_blocks_per_req or spec.num_blocks,
                        num_speculative_tokens=spec.num_speculative_tokens,
                        chunked_prefill_enabled=spec.chunked_prefill_enabled)
        return AttnMetadata(
            attn_state=AttnState(plan.attn_state), num_actual_tokens=num_tokens,
            num_decode_tokens=plan.num_decode_tokens, num_decodes=plan.num_decodes,
            num_prefills=plan.num_prefills, query_start_loc=qsl, seq_lens=seq_lens,
            seq_lens_list=seq_lens.tolist(),
            max_query_len=(int(cm.max_query_len) if cm.max_query_len is not None
                           else int(q_lens.max()) if num_reqs else 0),
            block_tables=bt, slot_mapping=slot_mapping, causal=bool(cm.causal), plan=plan,
            token_src=None if plan.identity_order else plan.token_src)


class AttnBackendImpl:
    """Per-layer attention (vllm-ascend's AscendAttentionBackendImpl)."""

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: Optional[int] = None,
                 alibi_slopes: Optional[Sequence[float]] = None, sliding_window: Optional[int] = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: Optional[float] = None,
                 attn_type: str = "decoder", kv_sharing_target_layer_name: Optional[str] = None,
                 sinks: Optional[Array] = None, ctx: Optional[Context] = None, **kwargs: Any):
        if kv_cache_dtype not in ("auto", None):
            raise NotImplementedError(f"kv_cache_dtype={kv_cache_dtype!r}: use 'auto'")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
        self.num_queries_per_kv = self.num_heads // self.num_kv_heads
        self.alibi_slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float32)
        self.sliding_window = sliding_window
        # vLLM/HF sliding_window = W keys including the current one -> attn window (W - 1, 0).
        self.window_size = (-1, -1) if sliding_window is None else (int(sliding_window) - 1, 0)
        self.logits_soft_cap = logits_soft_cap or 0.0
        self.attn_type = attn_type
        self.sinks = sinks
        self.ctx = ctx

    def reshape_and_cache(self, key: Array, value: Array, kv_cache: Array,
                          attn_metadata: AttnMetadata) -> None:
        n = attn_metadata.num_actual_tokens
        ops.reshape_and_cache(_arrays.as_numpy(key)[:n], _arrays.as_numpy(value)[:n], kv_cache,
                              attn_metadata.slot_mapping[:n], ctx=self.ctx)

    def forward(self, layer: Any, query: Array, key: Optional[Array], value: Optional[Array],
                kv_cache: Array, attn_metadata: Optional[AttnMetadata],
                output: Optional[Array] = None, output_scale: Any = None,
                output_block_scale: Any = None) -> Array:
        """query [num_tokens, num_heads, head_size]; key/value [num_tokens, num_kv_heads, head_size]
        (written into the cache first; None to skip); kv_cache [2, num_blocks, block_size, num_kv_heads,
        head_size]; output [num_tokens, num_heads * head_size] or [num_tokens, num_heads, head_size]
        (allocated if None). Returns output."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported")
        meta = attn_metadata
        write_cache = key is not None and value is not None and meta is not None and meta.causal
        ext = ops._ext
        if meta is not None and output is not None and meta.causal and meta.token_src is None:
            # The compiled path (attn._ext): no NumPy conversion of torch tensors, one C call each for the
            # cache write and the attention, straight into the caller's output when it can be viewed
            n = meta.num_actual_tokens
            ctxp = ops._ctx_ptr(self.ctx)
            if write_cache:
                k_, v_ = (key, value) if key.shape[0] == n else (key[:n], value[:n])
                sm = meta.slot_mapping if meta.slot_mapping.shape[0] == n else meta.slot_mapping[:n]
                ext.reshape_and_cache(ctxp, k_, v_, kv_cache, sm, None, None, None)
                write_cache = False  # written
            o3 = _rows_view(output, n, self.num_heads, self.head_size)
            if o3 is not None:
                plan = meta.plan
                q_ = query if query.shape[0] == n else query[:n]
                ext.forward_paged(ctxp, plan._ptr, plan.num_heads, q_, kv_cache, None, None, self.scale, True,
                                  self.window_size, self.logits_soft_cap, self.alibi_slopes, self.sinks, o3, None,
                                  False, plan._ws_ptr, plan._ws_size, None, None, None)
                return output
        qa = _arrays.as_numpy(query)
        num_tokens = qa.shape[0]
        if output is None:
            output = _arrays.empty(query, (num_tokens, self.num_heads * self.head_size), qa.dtype)
        oa = _arrays.as_numpy(output)
        if attn_metadata is None:  # profiling run
            oa[...] = 0
            return output
        n = attn_metadata.num_actual_tokens
        encoder = not meta.causal
        if write_cache:
            self.reshape_and_cache(key, value, kv_cache, meta)
        kw = dict(softmax_scale=self.scale, causal=True, window_size=self.window_size,
                  softcap=self.logits_soft_cap, alibi_slopes=self.alibi_slopes, sinks=self.sinks,
                  ctx=self.ctx)
        ka = None if key is None or not encoder else _arrays.as_numpy(key)[:n]
        va = None if value is None or not encoder else _arrays.as_numpy(value)[:n]
        src = meta.token_src
        if src is None:
            o3 = oa[:n].reshape(n, self.num_heads, self.head_size)
            if np.shares_memory(o3, oa):  # write straight into the caller's buffer
                meta.plan.forward(qa[:n], kv_cache, key=ka, value=va, out=o3, **kw)
                return output
            res = meta.plan.forward(qa[:n], kv_cache, key=ka, value=va, **kw)
        else:  # the plan ordered requests decode-first: gather rows in plan order, scatter back
            res_plan = meta.plan.forward(qa[src], kv_cache, key=None if ka is None else ka[src],
                                         value=None if va is None else va[src], **kw)
            res = np.empty_like(res_plan)
            res[src] = res_plan
        oa[:n] = res.reshape(oa[:n].shape)
        return output


def _rows_view(output: Array, n: int, num_heads: int, head_size: int) -> Optional[Array]:
    """output[:n] viewed as [n, num_heads, head_size] without a copy (NumPy or torch), or None."""
    try:
        if isinstance(output, np.ndarray):
            v = output[:n].view()
            v.shape = (n, num_heads, head_size)  # AttributeError if that needs a copy
            return v
        return output[:n].view(n, num_heads, head_size)  # torch: RuntimeError if not viewable
    except (AttributeError, RuntimeError, ValueError, TypeError):
        return None


class AttnBackend:
    """Static entry points of the backend (vllm-ascend's AscendAttentionBackend)."""

    accept_output_buffer: bool = True

    @staticmethod
    def get_name() -> str:
        return "ATTN_CPU"

    @staticmethod
    def get_impl_cls() -> type:
        return AttnBackendImpl

    @staticmethod
    def get_builder_cls() -> type:
        return AttnMetadataBuilder

    @staticmethod
    def get_metadata_cls() -> type:
        return AttnMetadata

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int,
                           head_size: int) -> tuple:
        """[2, num_blocks, block_size, num_kv_heads, head_size]; index 0 = key, 1 = value."""
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def swap_blocks(src_kv_cache: Array, dst_kv_cache: Array, src_to_dst: Array) -> None:
        """dst_kv_cache[:, d] = src_kv_cache[:, s] for each (s, d) row of src_to_dst [num_pairs, 2]."""
        ops.swap_blocks(src_kv_cache, dst_kv_cache, src_to_dst)

    @staticmethod
    def copy_blocks(kv_caches: Sequence[Array], src_to_dists: Array) -> None:
        """kv_cache[:, d] = kv_cache[:, s] in every layer's cache, for each (s, d) row of src_to_dists."""
        for kv_cache in kv_caches:
            ops.copy_blocks(kv_cache, src_to_dists)

    @staticmethod
    def get_supported_block_size() -> List[int]:
        """The block sizes vllm-ascend's API advertises as preferred: those attn is tuned and benchmarked for.
        Every block size >= 1 works (attn_plan_config.block_size; the vLLM plugin declares MultipleOf(1))."""
        return [16, 32, 64, 128]
