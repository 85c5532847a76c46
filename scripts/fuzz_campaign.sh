#!/usr/bin/env bash
# Fuzz campaign: builds the libFuzzer targets (tests/fuzz/tests.cmake: fuzz_dense, fuzz_varlen,
# fuzz_merge, fuzz_paged, fuzz_plan, fuzz_cache, fuzz_diffusion, fuzz_codec, fuzz_workload, and the differential
# and hidden-value targets fuzz_diff_dense, fuzz_diff_varlen, fuzz_diff_paged, fuzz_diff_piecewise, fuzz_diff_merge,
# fuzz_diff_quant, fuzz_diff_cache, fuzz_hidden: docs/ROBUSTNESS.md) with clang +
# ASan + UBSan (+ float-cast-overflow), OpenMP off, and runs each from its in-tree seed corpus
# (tests/fuzz/corpus/<target>/, copied to a scratch directory) for RUNS executions (default 10,000,000) or
# SECONDS seconds (0 = no time limit), JOBS targets at a time. Prints one line per target and writes the
# table (executions, exec/s, coverage cov/ft, corpus size, findings) between the campaign markers of
# docs/ROBUSTNESS.md (ATTN_FUZZ_DOC=0: only print).
#   scripts/fuzz_campaign.sh [RUNS] [SECONDS] [TARGET...]
#   e.g. nice -n 10 scripts/fuzz_campaign.sh 10000000 0            every target to 10M executions
#        scripts/fuzz_campaign.sh 0 60 dense workload               one minute each of two targets
#        scripts/fuzz_campaign.sh 100000 0 diff_dense diff_merge hidden  differential targets, 100k executions each
# The stop condition is always -runs (an execution count), never wall time: the run survives being paused.
# Environment: FUZZ_BUILD (build dir, default build-fuzz), FUZZ_TIMEOUT (wall-clock seconds per input, default
# 1500: a starved process on a loaded machine, or one paused with SIGSTOP for up to ~10 minutes while someone
# measures a benchmark, must not read as a finding; the work of one input is bounded by the harness, FZ_MAX_WORK in
# fuzz_entries.c, so a real hang still shows), FUZZ_OPT (optimisation of the instrumented build, default -O1:
# ~10x the executions per second of -O0; compiling the AVX-512 kernel files with ASan + UBSan + coverage takes a
# few minutes, once), FUZZ_KERNEL_OPT (appended for the AVX2/AVX-512 kernel files only, default -O0: at -O1
# with the sanitizers clang 14 takes tens of minutes per tile file on a loaded machine; empty: FUZZ_OPT), JOBS (parallel targets, default 2), FUZZ_WORK (scratch dir, default a mktemp dir; the
# per-target logs, grown corpora and any crash-*/leak-*/timeout-*/oom-* artifacts stay there), FUZZ_SKIP_BUILD=1
# (use the binaries in FUZZ_BUILD as they are), FUZZ_SUMMARY_ONLY=1 (only summarise the runs in FUZZ_WORK, also
# partial ones: a target still running or stopped reads its last status line; one stopped with SIGINT / SIGTERM reads
# rc=stopped, no finding).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10000000}
SECS=${2:-0}
shift $(( $# > 2 ? 2 : $# ))
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(dense varlen merge paged plan cache diffusion codec workload
  diff_dense diff_varlen diff_paged diff_piecewise diff_merge diff_quant diff_cache hidden)
B=${FUZZ_BUILD:-build-fuzz}
OPT=${FUZZ_OPT:--O1}
KOPT=${FUZZ_KERNEL_OPT--O0}
JOBS=${JOBS:-2}
WORK=${FUZZ_WORK:-$(mktemp -d /tmp/attn-fuzz.XXXXXX)}
mkdir -p "$WORK"

if [ "${FUZZ_SKIP_BUILD:-0}" != 1 ] && [ "${FUZZ_SUMMARY_ONLY:-0}" != 1 ]; then
  cmake -S . -B "$B" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="$OPT -g" \
    -DATTN_OPENMP=OFF -DATTN_FUZZ=ON -DATTN_SANITIZE="address;undefined;float-cast-overflow" \
    -DATTN_FUZZ_KERNEL_OPT="$KOPT" >/dev/null
  cmake --build "$B" -j "$JOBS" --target $(printf 'fuzz_%s ' "${TARGETS[@]}") >/dev/null
fi

run_one() { # target -> $WORK/<target>/{corpus,log.txt,rc}
  local t=$1 d="$WORK/$1"
  mkdir -p "$d/corpus"
  cp tests/fuzz/corpus/"$t"/* "$d/corpus/"
  local args=(-runs="$RUNS" -timeout="${FUZZ_TIMEOUT:-1500}" -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$d/"
              -max_len=512)
  [ "$RUNS" = 0 ] && args[0]=-runs=-1
  [ "$SECS" != 0 ] && args+=(-max_total_time="$SECS")
  if [ "$t" = workload ]; then args+=(-max_len=4096 -dict=tests/fuzz/workload.dict); fi
  local start=$SECONDS rc=0
  # the SIMD kernel files are built at -O0 (FUZZ_KERNEL_OPT): their always-inline register-blocked variants then
  # keep every vector in its own ASan-guarded stack slot, a frame of ~8 MiB for the decode Q·Kᵀ dispatcher, which
  # overflows the default 8 MiB stack on the first input; a larger stack for the targets only
  ulimit -s unlimited 2>/dev/null || ulimit -s 1048576 2>/dev/null || true
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$B/tests/fuzz_$t" "${args[@]}" "$d/corpus" >"$d/log.txt" 2>&1 || rc=$?
  echo "$rc $((SECONDS - start))" >"$d/rc"
}
export -f run_one
export WORK RUNS SECS B
# FUZZ_SUMMARY_ONLY=1: only (re)write the summary of the runs already in FUZZ_WORK
[ "${FUZZ_SUMMARY_ONLY:-0}" = 1 ] || printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}'

rows=""
total_findings=0
for t in "${TARGETS[@]}"; do
  d="$WORK/$t"
  rc=running secs=?
  [ -f "$d/rc" ] && read -r rc secs <"$d/rc"
  [ -f "$d/log.txt" ] || { echo "fuzz_$t: not started ($d)"; continue; }
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$d/log.txt" | grep -o '[0-9]*$' || true)
  eps=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$d/log.txt" | grep -o '[0-9]*$' || true)
  last=$(grep -E '^#[0-9]+' "$d/log.txt" | tail -1 || true)
  # a run still going (or killed) has no final stats: its last status line "#N ... exec/s: E" says how far it got
  [ -z "$execs" ] && execs=$(echo "$last" | grep -o '^#[0-9]*' | tr -d '#' || true)
  [ -z "$eps" ] && eps=$(echo "$last" | grep -o 'exec/s: [0-9]*' | grep -o '[0-9]*' || true)
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
  units=$( (ls "$d/corpus" 2>/dev/null || true) | wc -l)
  findings=$( (ls "$d"/crash-* "$d"/leak-* "$d"/timeout-* "$d"/oom-* 2>/dev/null || true) | wc -l)
  # a run stopped on purpose (SIGINT / SIGTERM: libFuzzer prints its final stats, "run interrupted", and exits 72)
  # is no finding; it reads as rc=stopped with the executions it reached
  [ "$rc" = 72 ] && grep -q 'libFuzzer: run interrupted' "$d/log.txt" && rc=stopped
  # libFuzzer exits 0 when it reached -runs / -max_total_time; anything else without an artifact is a finding too
  [ "$rc" != 0 ] && [ "$rc" != running ] && [ "$rc" != stopped ] && [ "$findings" = 0 ] && findings=1
  total_findings=$((total_findings + findings))
  echo "fuzz_$t: rc=$rc executions=${execs:-?} exec/s=${eps:-?} cov=${cov:-?} ft=${ft:-?} corpus=$units findings=$findings (${secs} s, $d)"
  rows+="| \`fuzz_$t\` | $(printf "%'d" "${execs:-0}") | ${eps:-?} | ${cov:-?} | ${ft:-?} | $units | $findings | $secs |"$'\n'
done

if [ "${ATTN_FUZZ_DOC:-1}" = 1 ] && grep -q '<!-- fuzz-campaign:begin -->' docs/ROBUSTNESS.md; then
  table="<!-- fuzz-campaign:begin -->"$'\n'
  table+="Last campaign: $(date -u '+%Y-%m-%d %H:%M UTC'), \`scripts/fuzz_campaign.sh $RUNS $SECS\`, clang $(clang --version | grep -o 'version [0-9.]*' | head -1 | cut -d' ' -f2), ASan + UBSan + float-cast-overflow, $OPT${KOPT:+ (SIMD kernel files $KOPT)}, OpenMP off, $JOBS targets at a time, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end (2 cores shared with other builds)."$'\n\n'
  table+="| target | executions | exec/s | cov | ft | corpus | findings | seconds |"$'\n'
  table+="|---|---|---|---|---|---|---|---|"$'\n'
  table+="$rows<!-- fuzz-campaign:end -->"
  python3 - "$table" <<'EOF'
import re, sys
p = "docs/ROBUSTNESS.md"
s = open(p).read()
s = re.sub(r"<!-- fuzz-campaign:begin -->.*?<!-- fuzz-campaign:end -->", lambda m: sys.argv[1], s, flags=re.S)
open(p, "w").write(s)
EOF
  echo "fuzz_campaign: figures written to docs/ROBUSTNESS.md"
fi
echo "fuzz_campaign: $total_findings finding(s); work dir $WORK"
[ "$total_findings" = 0 ]
