#!/usr/bin/env bash
# Installs everything the build, the tests and the demo need on a fresh Debian machine (idempotent, quick
# when already done). Debian packages: compiler toolchain extras, cmocka, cJSON. PyPI: see python deps below.
set -euo pipefail

APT_PKGS=(cmake pkg-config libcmocka-dev libcjson-dev libomp-dev)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ "${ATTN_SKIP_PYTHON:-0}" != "1" ] && [ -f scripts/python-deps.sh ]; then
  bash scripts/python-deps.sh
fi
