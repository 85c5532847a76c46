#!/usr/bin/env bash
# `make test-arm64`: cross-builds attn for aarch64 (cmake/toolchain-aarch64.cmake) and runs every C
# ctest under qemu-user, twice: QEMU_CPU=cortex-a57 (Armv8.0: HWCAP without fp16/bf16/sve, the plain neon table)
# and QEMU_CPU=max (every feature qemu emulates, BF16/I8MM/SVE included: neon's bf16 variant runs). Every suite
# compares each usable table (generic and neon, and neon's variants in tests/kernels) itself, as on x86; the
# CLI and install tests run their binaries through the same emulator (CMAKE_CROSSCOMPILING_EMULATOR).
# Sizing: ATTN_TEST_SMALL=1 (the sanitizer tier's smaller shapes) and ATTN_TEST_EMULATED=1 (th_test_emulated:
# the heaviest conformance suites shrink further, every entry, dtype, option and partition split kept; the
# driver-path matrix runs the fastest table only, as under the sanitizers), since qemu TCG runs a test 10-30x
# slower than natively. OMP_WAIT_POLICY=passive: emulated spin-waiting of idle OpenMP threads only burns the
# two shared cores (results do not depend on it). Not run: pytest (needs an aarch64 Python).
# Install step: scripts/arm64_env.sh (apt, idempotent). Env: ARM64_BUILD (default build-arm64), JOBS.
set -euo pipefail
BUILD=${ARM64_BUILD:-build-arm64}
JOBS=${JOBS:-2}
t0=$(date +%s)
bash scripts/arm64_env.sh
t1=$(date +%s)
echo "test-arm64: install check (scripts/arm64_env.sh) $((t1 - t0)) s"
cmake -S . -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$JOBS" >/dev/null
t2=$(date +%s)
echo "test-arm64: cross build ($BUILD) $((t2 - t1)) s"
for cpu in cortex-a57 max; do
  s=$(date +%s)
  (cd "$BUILD" && QEMU_CPU=$cpu ATTN_TEST_SMALL=1 ATTN_TEST_EMULATED=1 OMP_WAIT_POLICY=passive \
     ctest --output-on-failure -j "$JOBS")
  # which neon variant ran, and why not the other (printed by tests/kernels/test_kernel_bits.c)
  sed -n 's/^.*kernel bits: cpu features/  cpu features/p' "$BUILD/Testing/Temporary/LastTest.log" | head -1
  echo "test-arm64: every ctest under qemu -cpu $cpu $(( $(date +%s) - s )) s"
done
echo "test-arm64: total $(( $(date +%s) - t0 )) s"
