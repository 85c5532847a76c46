#!/usr/bin/env bash
# The ThreadSanitizer environment of `make test-tsan`, from Debian packages: clang 14, its
# sanitizer runtimes (libclang-rt-14-dev) and LLVM's OpenMP runtime with Archer (libomp-14-dev:
# libomp.so plus libarcher.so, the OMPT tool that tells TSan about OpenMP's barriers, tasks and reductions, so
# an OpenMP region does not read as a race). Idempotent and quiet: a no-op when everything is installed.
# Prints the path of libarcher.so on the last line of stdout.
set -euo pipefail
PKGS=(clang-14 libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi
ARCHER=/usr/lib/llvm-14/lib/libarcher.so
if [ ! -f "$ARCHER" ]; then
  echo "tsan_env: $ARCHER missing after installing libomp-14-dev" >&2
  exit 1
fi
echo "$ARCHER"
