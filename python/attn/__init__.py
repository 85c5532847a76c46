"""attn: exact, fast attention for LLM serving and diffusion on CPUs (Python bindings of libattn).

Three layers, all over the same C entries (include/attn/attn.h), all zero-copy on NumPy arrays
(bfloat16/float8 via ml_dtypes) and DLPack producers (torch CPU tensors):

- ``attn.attention``, ``attn.attention_varlen``, ``attn.paged_attention``, ``attn.merge_attn_states``,
  ``attn.reshape_and_cache``, ``attn.copy_blocks``, ``attn.swap_blocks``, ``attn.Plan`` (one per engine
  step) and ``attn.Context`` -- the C API one to one (``reference=True`` runs the float64 oracle);
- ``attn.flash``: flash-attn calling conventions (``flash_attn_func``, ``flash_attn_varlen_func``,
  ``flash_attn_with_kvcache``, the ``*_qkvpacked_func`` / ``*_kvpacked_func`` variants);
- ``attn.vllm``: the vLLM plugin (``attn.vllm.backend``: AttnBackend, AttnMetadataBuilder, AttnBackendImpl)
  and vLLM's cache ops (``attn.vllm.ops``); imported on demand, never by ``import attn``.

Errors from C raise :class:`AttnError` subclasses (``AttnInvalidArgumentError`` is also a ValueError)
whose message is the C message naming the bad argument. The real-model demo is a separate package of the
source tree (``python -m attn_demo``); ``import attn`` loads the library API only (no demo, vLLM or torch).
"""

from ._capi import (  # noqa: F401
    AttnError,
    AttnInvalidArgumentError,
    AttnOutOfMemoryError,
    AttnOverflowError,
    AttnUnsupportedError,
    cpu_features,
    has,
    isa_available,
    isa_names,
    isa_opt_in_names,
    last_error,
    library_path,
)
from ._capi import version as library_version  # noqa: F401
from .ops import (  # noqa: F401
    Context,
    Params,
    Plan,
    PlanRequest,
    attention,
    attention_varlen,
    copy_blocks,
    default_context,
    info,
    merge_attn_states,
    paged_attention,
    reshape_and_cache,
    set_num_threads,
    swap_blocks,
)
from . import diffusion  # noqa: F401,E402
from . import kv_events  # noqa: F401,E402
from .kv_events import KVStored, reshape_and_cache_notify  # noqa: F401,E402
from .flash import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "0.1.0"

__all__ = [
    "AttnError", "AttnInvalidArgumentError", "AttnUnsupportedError", "AttnOutOfMemoryError",
    "AttnOverflowError", "Context", "Params", "Plan", "PlanRequest", "attention", "attention_varlen",
    "paged_attention", "merge_attn_states", "reshape_and_cache", "copy_blocks", "swap_blocks",
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func",
    "default_context",
    "set_num_threads", "info", "library_version", "library_path", "has", "isa_names", "isa_opt_in_names",
    "isa_available",
    "cpu_features", "last_error", "__version__", "diffusion",
]
__all__ += ["kv_events", "KVStored", "reshape_and_cache_notify"]
