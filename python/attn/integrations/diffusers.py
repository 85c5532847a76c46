"""attn as a diffusers attention backend.

    import attn.integrations.diffusers               # registers the backends (import side effect)
    transformer.set_attention_backend("attn")        # or: with attention_backend("attn"): ...

diffusers routes every attention call of its transformers through ``dispatch_attention_fn``
(``diffusers.models.attention_dispatch``), which looks the active backend up in
``_AttentionBackendRegistry`` by an ``AttentionBackendName`` member. This module adds two members and
registers a function for each (same constraints as the native backend: ``_check_device``,
``_check_shape``):

- ``"attn"`` -- :func:`attn_backend`: ``attn.attention`` on the torch tensors in place (layout BSND, no
  copy, GQA without repeating K/V). The mask follows diffusers' native (torch SDPA) backend: a
  ``[batch, seq_k]`` mask is a per-key mask (bool: key padding through ``params.key_padding_mask``, the
  text padding of joint image+text attention and of cross attention; float: additive, viewed as
  ``[batch, 1, 1, seq_k]``); any other mask is SDPA's ``attn_mask`` (broadcast right-aligned to
  ``[batch, heads, seq_q, seq_k]``; bool keeps, float adds). ``is_causal`` is SDPA's top-left causal.
- ``"attn_varlen"`` -- :func:`attn_varlen_backend`: the packed route of diffusers' ``flash_varlen``
  backend: the mask is reduced to ``[batch, seq_k]`` (``_normalize_attn_mask``), sequence lengths and
  ``cu_seqlens`` are derived from it, the valid keys are packed (one gather; holes anywhere are handled,
  where flash_varlen takes the first ``len`` keys of each row) and ``attn.flash_attn_varlen_func`` runs
  on the packed tensors. ``is_causal`` is flash-attn's bottom-right causal within each sequence, as for
  flash_varlen.

SD3-style models (``JointAttnProcessor2_0`` calls torch SDPA itself, bypassing the dispatcher): call
:func:`use_dispatcher` on the model first (one line), then ``set_attention_backend`` as above.

Shapes: query [batch, seq_q, num_heads, head_size], key/value [batch, seq_k, num_kv_heads, head_size(_v)]
(any strides, last dim contiguous), float32 / float16 / bfloat16; output [batch, seq_q, num_heads,
head_size_v] in query's dtype; with ``return_lse`` also lse float32 [batch, seq_q, num_heads] (natural
log; the layout diffusers' flash backends return). A query row that sees no key gets 0 (SDPA gives NaN).
``dropout_p`` must be 0 and context parallelism is not supported (NotImplementedError); forward only.
Semantics source: ``diffusers/models/attention_dispatch.py`` (``_native_attention``,
``_flash_varlen_attention``, ``_normalize_attn_mask``), torch ``scaled_dot_product_attention``.
"""

from __future__ import annotations

from typing import Any, Optional

try:
    import torch
except ImportError as _e:  # a hint instead of a bare ModuleNotFoundError
    raise ImportError(f"{__name__} needs torch: pip install \".[diffusers]\" from the attn checkout") from _e

import attn

NAME = "attn"
VARLEN_NAME = "attn_varlen"

__all__ = ["NAME", "VARLEN_NAME", "attn_backend", "attn_varlen_backend", "register", "backend_names",
           "JointAttnDispatchProcessor", "use_dispatcher"]


def _check_common(dropout_p: float, _parallel_config: Any, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor) -> None:
    if dropout_p:
        raise NotImplementedError(f"attn: dropout_p={dropout_p}; attn is inference only")
    if _parallel_config is not None:
        raise NotImplementedError("attn: context parallelism (_parallel_config) is not supported")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.ndim != 4:
            raise ValueError(f"attn: {name} must be [batch, seq, heads, head_size], got shape {tuple(t.shape)}")


def _lse_bsh(lse: torch.Tensor) -> torch.Tensor:
    return lse.permute(0, 2, 1)  # [batch, heads, seq_q] -> [batch, seq_q, heads]


def attn_backend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False,
                 return_lse: bool = False, _parallel_config: Any = None) -> Any:
    """The "attn" backend (see the module docstring)."""
    _check_common(dropout_p, _parallel_config, query, key, value)
    batch, seq_k = query.shape[0], key.shape[1]
    mask = kpm = None
    if attn_mask is not None:
        if attn_mask.ndim == 2 and tuple(attn_mask.shape) == (batch, seq_k):
            if attn_mask.dtype == torch.bool:
                kpm = attn_mask
            else:
                mask = attn_mask[:, None, None, :]
        else:
            mask = attn_mask
    r = attn.attention(query, key, value, layout="BSND", softmax_scale=scale,
                       causal="top_left" if is_causal else False, mask=mask, key_padding_mask=kpm,
                       return_lse=return_lse)
    if return_lse:
        return r[0], _lse_bsh(r[1])
    return r


def attn_varlen_backend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                        is_causal: bool = False, scale: Optional[float] = None,
                        window_size: tuple = (-1, -1), return_lse: bool = False,
                        _parallel_config: Any = None) -> Any:
    """The "attn_varlen" backend (see the module docstring)."""
    from diffusers.models.attention_dispatch import _normalize_attn_mask

    _check_common(dropout_p, _parallel_config, query, key, value)
    batch, seq_q, num_heads, head_size = query.shape
    seq_k = key.shape[1]
    if attn_mask is None:
        seqlens_k = torch.full((batch,), seq_k, dtype=torch.int32)
        k_packed, v_packed = key.reshape(batch * seq_k, *key.shape[2:]), value.reshape(batch * seq_k, *value.shape[2:])
    else:
        keep = _normalize_attn_mask(attn_mask, batch, seq_k)  # bool [batch, seq_k]; raises for float masks
        seqlens_k = keep.sum(dim=1, dtype=torch.int32)
        k_packed, v_packed = key[keep], value[keep]  # the valid keys of each row, in order (one gather)
    cu_q = torch.arange(batch + 1, dtype=torch.int32) * seq_q
    cu_k = torch.zeros(batch + 1, dtype=torch.int32)
    cu_k[1:] = torch.cumsum(seqlens_k, 0)
    out = torch.empty((batch, seq_q, num_heads, value.shape[-1]), dtype=query.dtype)
    r = attn.flash_attn_varlen_func(query.reshape(batch * seq_q, num_heads, head_size), k_packed, v_packed,
                                    cu_q, cu_k, seq_q, int(seqlens_k.max()) if batch else 0,
                                    softmax_scale=scale, causal=bool(is_causal),
                                    window_size=tuple(window_size), return_softmax_lse=return_lse,
                                    out=out.view(batch * seq_q, num_heads, -1))
    if return_lse:
        lse = r[1]  # [num_heads, total_q]
        return out, lse.reshape(num_heads, batch, seq_q).permute(1, 2, 0)
    return out


def _add_backend_name(name: str) -> Any:
    """The AttentionBackendName member for ``name``, added to the (closed) Enum if missing: diffusers looks
    backends up by member (``AttentionBackendName(name)``, ``__members__`` in set_attention_backend)."""
    from diffusers.models.attention_dispatch import AttentionBackendName as E

    if name in E._value2member_map_:
        return E(name)
    member = str.__new__(E, name)
    member._name_ = name.upper()
    member._value_ = name
    if hasattr(E, "_add_member_"):  # Python >= 3.13
        E._add_member_(member._name_, member)
    else:
        E._member_map_[member._name_] = member
        E._member_names_.append(member._name_)
        type.__setattr__(E, member._name_, member)
    E._value2member_map_[name] = member
    return member


def register() -> tuple:
    """Adds and registers the backends "attn" and "attn_varlen" in diffusers' attention dispatcher.
    Idempotent. Returns the two names (for ``set_attention_backend`` / ``attention_backend``)."""
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry, _check_device, _check_shape

    for name, fn in ((NAME, attn_backend), (VARLEN_NAME, attn_varlen_backend)):
        member = _add_backend_name(name)
        _AttentionBackendRegistry.register(member, constraints=[_check_device, _check_shape])(fn)
    return NAME, VARLEN_NAME


def backend_names() -> tuple:
    return NAME, VARLEN_NAME


# ------------------------------------------------------------------------------------------------
# SD3-style joint attention through the dispatcher
# ------------------------------------------------------------------------------------------------
class JointAttnDispatchProcessor:
    """SD3-style joint attention (image tokens then text tokens in one sequence) through
    ``dispatch_attention_fn``, so ``set_attention_backend`` reaches it. diffusers' own
    ``JointAttnProcessor2_0`` (SD3Transformer2DModel, SD3.5) calls ``F.scaled_dot_product_attention``
    directly and ignores the backend; this processor computes the same projections and norms (q/k/v of
    the image stream and add_q/k/v of the text stream, per-head norms, output projections) and hands
    attention to the active backend. ``attention_mask`` (optional, via ``joint_attention_kwargs``): a
    mask for the joint sequence, e.g. bool [batch, seq_img + seq_txt] with False on padded text tokens.
    Install it with :func:`use_dispatcher`."""

    _attention_backend = None
    _parallel_config = None

    def __call__(self, attn_module: Any, hidden_states: torch.Tensor,
                 encoder_hidden_states: Optional[torch.Tensor] = None,
                 attention_mask: Optional[torch.Tensor] = None, *args: Any, **kwargs: Any) -> Any:
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        batch, seq_img = hidden_states.shape[0], hidden_states.shape[1]
        heads = attn_module.heads

        def split(x: torch.Tensor) -> torch.Tensor:  # [B, S, H*D] -> [B, S, H, D] (a view)
            return x.view(batch, x.shape[1], heads, x.shape[-1] // heads)

        def normed(norm: Any, x: torch.Tensor) -> torch.Tensor:
            return x if norm is None else norm(x)  # RMS/LayerNorm over head_size: layout-independent

        q = normed(attn_module.norm_q, split(attn_module.to_q(hidden_states)))
        k = normed(attn_module.norm_k, split(attn_module.to_k(hidden_states)))
        v = split(attn_module.to_v(hidden_states))
        if encoder_hidden_states is not None:
            eq = normed(attn_module.norm_added_q, split(attn_module.add_q_proj(encoder_hidden_states)))
            ek = normed(attn_module.norm_added_k, split(attn_module.add_k_proj(encoder_hidden_states)))
            ev = split(attn_module.add_v_proj(encoder_hidden_states))
            q, k, v = torch.cat([q, eq], 1), torch.cat([k, ek], 1), torch.cat([v, ev], 1)
        out = dispatch_attention_fn(q, k, v, attn_mask=attention_mask, backend=self._attention_backend,
                                    parallel_config=self._parallel_config)
        out = out.flatten(2, 3).to(q.dtype)
        text = None
        if encoder_hidden_states is not None:
            out, text = out[:, :seq_img], out[:, seq_img:]
            if not attn_module.context_pre_only:
                text = attn_module.to_add_out(text)
        out = attn_module.to_out[1](attn_module.to_out[0](out))
        return out if text is None else (out, text)


def use_dispatcher(model: torch.nn.Module) -> int:
    """Replaces every ``JointAttnProcessor2_0`` of ``model`` (SD3-style transformers) with
    :class:`JointAttnDispatchProcessor`, so that ``model.set_attention_backend(...)`` applies to them.
    Returns how many processors were replaced."""
    from diffusers.models.attention_processor import JointAttnProcessor2_0

    n = 0
    for module in model.modules():
        if isinstance(getattr(module, "processor", None), JointAttnProcessor2_0):
            module.set_processor(JointAttnDispatchProcessor())
            n += 1
    return n


register()
