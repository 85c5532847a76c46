#!/usr/bin/env bash
# `make insns-arm64`: executed instructions per kernel tile, neon (aarch64, qemu-aarch64 -cpu
# cortex-a57) vs avx2 (x86-64, qemu-x86_64 -cpu max), counted by a qemu TCG plugin (scripts/arm64_insns/
# insncount.c) — an instruction count, not a time: qemu runs no pipeline model, so this says nothing about
# cycles, only how many instructions each table issues for the same tile. One tile = 64 keys, D = Dv = 128,
# bf16 K/V for the *_kv kernels; per tile = (count at 2·R calls − count at R calls) / R, so start-up and
# set-up cancel out (scripts/arm64_insns/tile_insns.c drives one kernel). Needs qemu-user (the dynamic qemu:
# plugins), the arm64 build (ARM64_BUILD, default build-arm64) and an x86 build (X86_BUILD, default build).
set -euo pipefail
ARM64_BUILD=${ARM64_BUILD:-build-arm64}
X86_BUILD=${X86_BUILD:-build}
R=${R:-10}
bash scripts/arm64_env.sh
if ! command -v qemu-aarch64 >/dev/null || ! command -v qemu-x86_64 >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends qemu-user >/dev/null
fi
for b in "$ARM64_BUILD" "$X86_BUILD"; do
  [ -f "$b/libattn.a" ] || { echo "arm64_insn_count: $b/libattn.a missing (make build / make test-arm64 first)" >&2; exit 2; }
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
D=scripts/arm64_insns
cc -O2 -shared -fPIC -o "$W/libinsncount.so" $D/insncount.c
FLAGS=(-O2 -std=c11 -DATTN_STATIC_DEFINE -Isrc -Iinclude)
aarch64-linux-gnu-gcc "${FLAGS[@]}" $D/tile_insns.c "$ARM64_BUILD/libattn.a" -lm -fopenmp -o "$W/tile_a64"
cc "${FLAGS[@]}" $D/tile_insns.c "$X86_BUILD/libattn.a" -lm -fopenmp -o "$W/tile_x86"
A=(qemu-aarch64 -cpu cortex-a57 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib
   -plugin "$W/libinsncount.so" -d plugin "$W/tile_a64")
X=(qemu-x86_64 -cpu max -plugin "$W/libinsncount.so" -d plugin "$W/tile_x86")
count() { "$@" 2>&1 | sed -n 's/^insncount: total \([0-9]*\).*/\1/p'; }
per_tile() { local a b; a=$(count "$@" "$R"); b=$(count "$@" $((2 * R))); echo $(((b - a) / R)); }
printf '%-14s %5s %10s %10s %7s\n' kernel rows neon avx2 ratio
for c in "qk_tile 32" "qk_tile 16" "qk_tile 4" "qk_tile 1" "qk_tile_kv 4" "qk_tile_kv 1" "softmax_tile 32" \
         "softmax_tile 4" "pv_tile 32" "pv_tile 4" "pv_rows_kv 4" "pv_rows_kv 1"; do
  set -- $c
  n=$(per_tile "${A[@]}" neon "$1" "$2")
  x=$(per_tile "${X[@]}" avx2 "$1" "$2")
  printf '%-14s %5s %10s %10s %7s\n' "$1" "$2" "$n" "$x" "$(awk -v n="$n" -v x="$x" 'BEGIN { printf "%.2f", n / x }')"
done
