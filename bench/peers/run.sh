#!/usr/bin/env bash
# attn vs vLLM CPU / torch SDPA / NumPy in one process window. One command:
#
#   bench/peers/run.sh            # full bench (~10 min): writes bench/peers/results/peers.{csv,md,png}
#                                 # and the summary between the markers of README.md
#   bench/peers/run.sh --quick    # a few small cases, 2 rounds (development): build-peers/peers-quick/
#   bench/peers/run.sh --only "decode b8,prefill" --rounds 7 ...   (see bench_peers.py --help)
#
# On demand it installs the peers into their own venv ($ATTN_PEERS_VENV, default
# ~/.cache/attn/peers-venv; setup_env.sh, skipped when done), builds attn (Release) and the ceilings helper
# in build-peers/ (never ./build; override with ATTN_PEERS_BUILD), and runs bench_peers.py with
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset for that process only.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${ATTN_PEERS_VENV:-$HOME/.cache/attn/peers-venv}
BUILD=${ATTN_PEERS_BUILD:-$REPO/build-peers}
export ATTN_PEERS_VENV="$VENV"

"$HERE/setup_env.sh"

echo "[run] building attn (Release) in $BUILD"
# Python3_EXECUTABLE: the compiled binding attn._ext (when the tree has it) is built for the venv's Python.
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$VENV/bin/python" >/dev/null
cmake --build "$BUILD" -j "${ATTN_PEERS_JOBS:-2}" --target attn >/dev/null
TARGETS=$(cmake --build "$BUILD" --target help 2>/dev/null || true)
if [[ "$TARGETS" == *attn_pyext* ]]; then
    cmake --build "$BUILD" -j "${ATTN_PEERS_JOBS:-2}" --target attn_pyext >/dev/null ||
        echo "[run] warning: attn._ext did not build; the attn rows cannot run"
fi
CEIL="$BUILD/libpeers_ceilings.so"
if [ ! -f "$CEIL" ] || [ "$HERE/ceilings.c" -nt "$CEIL" ] || [ "$REPO/bench/bench_peak.c" -nt "$CEIL" ]; then
    echo "[run] building $CEIL"
    ${CC:-cc} -O3 -march=native -fPIC -shared -pthread -Wall -Wextra \
        "$REPO/bench/bench_peak.c" "$HERE/ceilings.c" -o "$CEIL"
fi

EXTRA=()
case " $* " in
    *" --quick "*|*" --out "*|*" --only "*) ;;
    *) EXTRA=(--readme "$REPO/README.md") ;;  # full default run: refresh README's summary
esac

cd "$REPO"
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    ATTN_LIBRARY="$BUILD/libattn.so" ATTN_PEERS_CEILINGS="$CEIL" PYTHONUNBUFFERED=1 \
    "$VENV/bin/python" "$HERE/bench_peers.py" "${EXTRA[@]}" "$@"
