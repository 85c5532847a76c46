"""attn inside model libraries, each a one-line switch:

- :mod:`attn.integrations.transformers` -- Hugging Face transformers: ``import attn.integrations.transformers``
  registers ``"attn"`` as an attention implementation, then ``from_pretrained(..., attn_implementation="attn")``;
- :mod:`attn.integrations.diffusers` -- diffusers' attention dispatcher: ``import attn.integrations.diffusers``
  registers the backends ``"attn"`` and ``"attn_varlen"``, then ``model.set_attention_backend("attn")``
  (or ``with attention_backend("attn"):``).

The submodules import torch and their library; ``import attn`` itself never does.
"""
