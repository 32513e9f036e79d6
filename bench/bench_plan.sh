#!/usr/bin/env bash
# fsdp plan's own speed: the wall-clock time of one `./fsdp plan ARGS` (the whole command: the
# model, the representatives' accounting-only runs, the search for the largest batch or, under
# --search, for the fastest configurations, the report), RUNS times after one untimed warm-up;
# prints the medians of wall and cpu (user + system) seconds. Targets: 405B parameters on 16,384
# GPUs plans in under a second, and --search answers in under 10 s.
# Usage: bench/bench_plan.sh RUNS ARGS...   (e.g. 5 --params 405e9 --seq 8192 --gpus 16384)
set -uo pipefail
runs=$1
shift
bin=${FSDP_BIN:-./fsdp}
"$bin" plan "$@" >/dev/null 2>&1 # the warm-up: the binary and its libraries in the page cache
walls=() cpus=()
times=$(mktemp)
trap 'rm -f "$times"' EXIT
TIMEFORMAT='%R %U %S'
for ((i = 0; i < runs; i++)); do
    { time "$bin" plan "$@" >/dev/null 2>&1; } 2>"$times"
    status=$? # the command's: `time` passes it on
    read -r wall user sys <"$times"
    walls+=("$wall")
    cpus+=("$(echo "$user + $sys" | bc -l)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{t[NR] = $1} END {
    printf "%.3f", NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }'; }
printf 'fsdp plan %s: median %s s wall, %s s cpu, of %d runs (exit %d)\n' "$*" \
    "$(median "${walls[@]}")" "$(median "${cpus[@]}")" "$runs" "$status"
