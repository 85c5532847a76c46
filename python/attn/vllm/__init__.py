"""attn inside vLLM: the CPU attention backend (:mod:`attn.vllm.backend`: AttnBackend, AttnMetadata,
AttnMetadataBuilder, AttnBackendImpl, which need torch and vLLM) and vLLM's cache-op calling conventions on
NumPy / DLPack arrays (:mod:`attn.vllm.ops`: reshape_and_cache, copy_blocks, swap_blocks, merge_attn_states).

    pip install attn[vllm]          # registers the entry point below; nothing else changes in user code
    llm = vllm.LLM("HuggingFaceTB/SmolLM2-135M-Instruct")   # every attention layer now runs in libattn

Registration: the ``vllm.general_plugins`` entry point ``attn = attn.vllm:register`` runs in every vLLM
process (``load_general_plugins``). vLLM's CpuPlatform always returns ``AttentionBackendEnum.CPU_ATTN.get_path()``
for non-MLA models, and ``get_path()`` honours overrides made with ``register_backend``, so :func:`register`
points CPU_ATTN (and CUSTOM, the name the backend reports) at :class:`AttnBackend`. ``ATTN_VLLM=0`` in the
environment (or vLLM's own ``VLLM_PLUGINS=""``) leaves vLLM's backend in place, which is how the comparisons in
``make run-vllm`` / tests/vllm run it. ``import attn`` imports none of this; the backend classes load (with torch
and vLLM) on first use.
"""

from __future__ import annotations

import logging
import os
from typing import Any

BACKEND_PATH = "attn.vllm.backend.AttnBackend"
_BACKEND_NAMES = ("AttnBackend", "AttnMetadata", "AttnMetadataBuilder", "AttnBackendImpl")


def register() -> None:
    """vllm.general_plugins entry point: makes attn the backend of vLLM's CPU platform in this process.
    Idempotent (vLLM may call it more than once). ATTN_VLLM=0 disables it."""
    logger = logging.getLogger("attn.vllm")
    if os.environ.get("ATTN_VLLM", "1").strip().lower() in ("0", "off", "false", "no"):
        logger.info("attn: ATTN_VLLM=0, vLLM keeps its own CPU attention backend")
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from .. import _capi

    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)
    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    logger.info("attn: libattn %s (%s) is vLLM's CPU attention backend", _capi.version(), _capi.library_path)


def __getattr__(name: str) -> Any:  # the backend classes, imported (with torch and vLLM) on first use
    if name in _BACKEND_NAMES:
        from . import backend

        return getattr(backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
