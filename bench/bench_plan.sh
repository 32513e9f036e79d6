#!/usr/bin/env bash
# fsdp plan's own speed: the wall-clock time of one `./fsdp plan ARGS` (the whole command: the
# model, the representatives' accounting-only runs, the search for the largest batch, the
# report), RUNS times; prints each time and the median. Target: 70B parameters on 1,024 GPUs
# in under a second.
# Usage: bench/bench_plan.sh RUNS ARGS...   (e.g. 5 --params 70e9 --gpus 1024)
set -uo pipefail
runs=$1
shift
bin=${FSDP_BIN:-./fsdp}
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
