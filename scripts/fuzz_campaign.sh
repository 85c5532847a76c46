#!/usr/bin/env bash
# Fuzz campaign (issue 11): builds the libFuzzer target with clang + ASan + UBSan (+ float-cast-overflow) and
# runs it from the in-tree seed corpus for RUNS executions (default 10,000,000) or SECONDS seconds, on a scratch
# copy of the corpus, then prints executions, coverage (cov / ft) and findings (crash-* files).
#   scripts/fuzz_campaign.sh [RUNS] [SECONDS]      e.g. scripts/fuzz_campaign.sh 10000000 0
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10000000}
SECS=${2:-0}
B=${FUZZ_BUILD:-build-fuzz}
CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Debug -DATTN_OPENMP=OFF -DATTN_FUZZ=ON \
  -DATTN_SANITIZE="address;undefined;float-cast-overflow" >/dev/null
cmake --build "$B" -j "${JOBS:-2}" --target fuzz_entries >/dev/null
work=$(mktemp -d)
cp tests/fuzz/corpus/* "$work/"
args=(-runs="$RUNS" -max_len=1024 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$work/")
[ "$SECS" != 0 ] && args+=(-max_total_time="$SECS")
set +e
"$B/tests/fuzz_entries" "${args[@]}" "$work" 2>"$work/log.txt"
rc=$?
set -e
execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log.txt" | grep -o '[0-9]*$' || echo "?")
cov=$(grep -E '^#[0-9]+' "$work/log.txt" | tail -1 | grep -o 'cov: [0-9]* ft: [0-9]*' || echo "?")
findings=$(ls "$work"/crash-* "$work"/timeout-* "$work"/leak-* 2>/dev/null | wc -l)
echo "fuzz_entries: rc=$rc executions=$execs $cov findings=$findings (work dir $work)"
