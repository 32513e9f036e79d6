#!/usr/bin/env bash
# fsdp plan's own speed: the wall-clock time of one `./fsdp plan ARGS` (the whole command: the
# model, the representatives' accounting-only runs, the search for the largest batch or, under
# --search, for the fastest configurations, the report), RUNS times; prints the median. Targets:
# 405B parameters on 16,384 GPUs plans in under a second, and --search answers in under 10 s.
# With farm-bench (the machine's timer of whole processes, after a warm-up run) its median wall
# and cpu seconds; without it, a loop of `date`s.
# Usage: bench/bench_plan.sh RUNS ARGS...   (e.g. 5 --params 405e9 --seq 8192 --gpus 16384)
set -uo pipefail
runs=$1
shift
bin=${FSDP_BIN:-./fsdp}
if command -v farm-bench >/dev/null; then
    report=$(farm-bench -n "$runs" --timeout 600 -- "$bin" plan "$@" 2>&1)
    wall=$(awk '/^A wall s/ {print $4}' <<<"$report")
    cpu=$(awk '/^A cpu s/ {print $4}' <<<"$report")
    status=$(grep -o '^A exit [0-9]*' <<<"$report" | head -1)
    printf 'fsdp plan %s: median %s s wall, %s s cpu, of %d runs (farm-bench; %s)\n' "$*" \
        "$wall" "$cpu" "$runs" "${status:-A exit 0}"
    exit 0
fi
times=()
for ((i = 0; i < runs; i++)); do
    t0=$(date +%s.%N)
    "$bin" plan "$@" >/dev/null 2>&1
    status=$?
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc -l)")
    printf 'run %d: %.3f s (exit %d)\n' $((i + 1)) "${times[i]}" "$status"
done
printf '%s\n' "${times[@]}" | sort -g | awk -v args="$*" \
    '{t[NR] = $1} END {m = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2;
      printf "fsdp plan %s: median %.3f s of %d runs\n", args, m, NR}'
