#!/usr/bin/env bash
# Installs what `make test-arm64` needs: Debian's aarch64 cross compiler (its libc, libgomp and
# libstdc++ come as *-arm64-cross dependencies), qemu-user-static (qemu-aarch64-static runs the tests), and
# the arm64 builds of the two libraries the tests and the CLI link (cmocka, cJSON) through dpkg multiarch.
# Idempotent and quiet: a no-op when everything is there. Run as root (or with sudo available).
set -euo pipefail

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo

HOST_PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static cmake)
ARM64_PKGS=(libcmocka-dev:arm64 libcjson-dev:arm64)

missing=()
for p in "${HOST_PKGS[@]}" "${ARM64_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
