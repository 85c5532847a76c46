"""attn as a Hugging Face transformers attention implementation.

    import attn.integrations.transformers            # registers "attn" (import side effect)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="attn")

Registers :func:`attn_attention_forward` in ``transformers.AttentionInterface`` and, for the masks, the
boolean ``sdpa_mask`` in ``transformers.masking_utils.AttentionMaskInterface`` under the same name, so a
model built with ``attn_implementation="attn"`` gets exactly the masks of ``"sdpa"`` and every attention
call runs in libattn (``attn.attention``, layout BNSD, on the torch CPU tensors in place: no copy of q, k,
v or the mask, no ``repeat_kv``; the output is written straight into the ``[batch, seq, heads, head_size]``
tensor the model reshapes). :func:`register` does the same under another name.

Semantics source: transformers ``integrations/sdpa_attention.py::sdpa_attention_forward`` (the template;
its signature is the AttentionInterface contract) and ``eager_attention_forward`` of the Gemma2 / GPT-OSS
models for soft-cap and sinks, which sdpa lacks:

- q [batch, num_heads, seq_q, head_size], k/v [batch, num_kv_heads, seq_k, head_size(_v)] (any strides,
  last dim contiguous), float32 / float16 / bfloat16; GQA/MQA natively (num_heads % num_kv_heads == 0);
- ``attention_mask``: the model's 4D mask [batch, 1, seq_q, >= seq_k] (bool keep-mask from ``sdpa_mask``:
  causal, left/right padding, sliding window and packed sequences are all in it; a float mask is
  additive), or None;
- mask None: ``is_causal`` (else ``module.is_causal``, default True) with seq_q > 1 means torch SDPA's
  top-left causal (``causal="top_left"``; identical to bottom-right when seq_q == seq_k, and what sdpa
  does for a prefill into an empty static cache); seq_q == 1 attends to every key;
- ``sliding_window``: carried by the mask (sdpa_mask returns None only while the window cannot hide a
  key), so it needs no separate argument, as in sdpa;
- ``softcap``: logits ``softcap * tanh(s / softcap)`` before the mask (Gemma2 ``attn_logit_softcapping``);
- ``s_aux``: per-head attention sinks [num_heads] (GPT-OSS), a logit in the denominator only;
- ``position_bias`` (T5-style): an additive bias broadcast to [batch, num_heads, seq_q, seq_k], added
  after soft-cap together with the mask (bool mask AND-ed, float mask summed);
- ``scaling``: softmax scale (None: 1/sqrt(head_size)); ``dropout`` must be 0 (inference only; a
  training module with dropout > 0 raises NotImplementedError).

Returns ``(out, None)``, out [batch, seq_q, num_heads, head_size_v] contiguous, q's dtype. Forward only:
tensors that require grad are read through detached views (attn warns once) and no gradient flows.
Errors: shape/dtype problems raise attn's AttnInvalidArgumentError (a ValueError) naming the argument.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

try:
    import torch
except ImportError as _e:  # a hint instead of a bare ModuleNotFoundError
    raise ImportError(f"{__name__} needs torch: pip install \".[transformers]\" from the attn checkout") from _e

import attn

NAME = "attn"

__all__ = ["NAME", "attn_attention_forward", "register", "is_registered"]


def attn_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                           value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                           dropout: float = 0.0, scaling: Optional[float] = None,
                           is_causal: Optional[bool] = None, sliding_window: Optional[int] = None,
                           softcap: Optional[float] = None, s_aux: Optional[torch.Tensor] = None,
                           position_bias: Optional[torch.Tensor] = None, cache: Any = None,
                           **kwargs: Any) -> Tuple[torch.Tensor, None]:
    """The AttentionInterface function (see the module docstring for shapes and semantics)."""
    if cache is not None:  # continuous batching: the paged cache is updated first, as sdpa does
        from transformers.generation.continuous_batching.cache import PagedAttentionCache

        if isinstance(cache, PagedAttentionCache):
            key, value = cache.update(key_states=key, value_states=value, layer_idx=module.layer_idx,
                                      kwargs=kwargs)
    if dropout and getattr(module, "training", False):
        raise NotImplementedError(f"attn: dropout={dropout} in training mode; attn is inference only "
                                  "(call model.eval())")
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ValueError(f"attn: query/key/value must be [batch, heads, seq, head_size]; got shapes "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    batch, num_heads, seq_q, _ = query.shape
    seq_k = key.shape[2]
    if key.dtype != query.dtype or value.dtype != query.dtype:
        raise ValueError(f"attn: query/key/value dtypes differ ({query.dtype}, {key.dtype}, {value.dtype})")

    mask = attention_mask
    if mask is not None and mask.ndim == 4 and mask.shape[-1] > seq_k:
        mask = mask[..., :seq_k]  # eager/sdpa convention: the mask may cover a longer (static) cache
    causal: Any = False
    if mask is None:
        is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        if is_causal and seq_q > 1:
            causal = "top_left"  # torch SDPA's is_causal (bottom-right would differ only if seq_k > seq_q)
    additive = None
    if position_bias is not None:
        additive = position_bias
        if mask is not None and mask.dtype != torch.bool:
            additive, mask = position_bias + mask, None
    sinks = None
    if s_aux is not None:
        sinks = s_aux.detach().to(torch.float32).reshape(-1)
        if sinks.numel() != num_heads:
            raise ValueError(f"attn: s_aux has {sinks.numel()} entries, expected num_heads={num_heads}")
    out = torch.empty((batch, seq_q, num_heads, value.shape[-1]), dtype=query.dtype, device=query.device)
    attn.attention(query, key, value, layout="BNSD", softmax_scale=scaling, causal=causal,
                   softcap=float(softcap) if softcap else 0.0, sinks=sinks, mask=mask,
                   additive_mask=additive, out=out.transpose(1, 2))
    return out, None


def register(name: str = NAME) -> str:
    """Registers attn under ``name`` in transformers' AttentionInterface (the function above) and
    AttentionMaskInterface (``sdpa_mask``: boolean [batch, 1, seq_q, seq_k], None when no key is hidden).
    Idempotent. Returns the name to pass as ``attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attn_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


def is_registered(name: str = NAME) -> bool:
    from transformers import AttentionInterface

    return AttentionInterface._global_mapping.get(name) is attn_attention_forward


register()
