"""attn_demo: the real-model demo and its runners, kept outside the library package.

``python -m attn_demo`` (``make run``) runs the main job: all-MiniLM-L6-v2 embeddings and SmolLM2-135M greedy
generation through the paged KV cache, every attention call in attn (``demo.py``). ``attn_demo.models`` holds the
NumPy models and the small continuous-batching engine; ``attn_demo.vllm_run`` serves SmolLM2 through real vLLM
(``make run-vllm``). ``import attn`` never imports any of it.
"""

import os as _os

# The demo's NumPy models multiply matrices of at most a few dozen rows: OpenBLAS's thread pool gains nothing
# there and, on a machine whose cores are busy, its spinning threads made the SmolLM2 run 4-7x slower. One BLAS
# thread unless the caller chose otherwise (this must happen before NumPy is first imported).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
