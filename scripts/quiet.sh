#!/usr/bin/env bash
# quiet.sh LABEL LOG CMD...: runs CMD with its output in LOG instead of the terminal (the main job prints no
# build or apt noise unless asked: `make run V=1` shows everything). While CMD runs, a one-line progress bar
# on a terminal follows CMake's "[ NN%]" lines (elapsed time otherwise); elsewhere (a pipe, a CI log) a line
# says the step is running once it has taken 5 s, then one every 30 s; on success one line says how long it
# took if that was more than a second; on failure the last 60 lines of LOG are printed and the exit status is
# CMD's.
set -uo pipefail
label=$1 log=$2
shift 2
if [ "${V:-0}" != "0" ]; then exec "$@"; fi
mkdir -p "$(dirname "$log")"
t0=$(date +%s.%N)
tty=0
[ -t 2 ] && tty=1
pct=""
next_note=5
"$@" >"$log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  if [ $tty = 0 ]; then
    el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
    if [ "$el" -ge "$next_note" ]; then
      p=$(grep -o '^\[ *[0-9]*%\]' "$log" 2>/dev/null | tail -1 | tr -dc '0-9')
      echo "$label: running for ${el}s${p:+, ${p}%} (log: $log)" >&2
      next_note=$((next_note == 5 ? 30 : next_note + 30))
    fi
  else
    p=$(grep -o '^\[ *[0-9]*%\]' "$log" 2>/dev/null | tail -1 | tr -dc '0-9')
    el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}')
    if [ -n "$p" ]; then
      n=$((p * 28 / 100))
      bar=$(printf '%*s' "$n" '' | tr ' ' '#')$(printf '%*s' $((28 - n)) '' | tr ' ' '-')
      printf '\r\033[2K%s [%s] %3s%% %ss' "$label" "$bar" "$p" "$el" >&2
    else
      printf '\r\033[2K%s ... %ss' "$label" "$el" >&2
    fi
  fi
  sleep 0.2
done
wait "$pid"
rc=$?
[ $tty = 1 ] && printf '\r\033[2K' >&2
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
if [ $rc -ne 0 ]; then
  echo "$label: FAILED (exit $rc) after ${dt}s; last lines of $log:" >&2
  tail -n 60 "$log" >&2
  exit $rc
fi
awk -v d="$dt" 'BEGIN{exit !(d > 1.0)}' && echo "$label: done in ${dt}s (log: $log)" >&2
exit 0
