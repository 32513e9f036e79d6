#!/usr/bin/env bash
# Two fsdp binaries planning the same job, interleaved run by run (A, B, A, B, ...) so that
# whatever else the machine is doing falls on both alike; prints each one's median.
# Usage: bench/bench_plan_ab.sh A_BIN B_BIN RUNS ARGS...
#   (e.g. /tmp/before/fsdp ./fsdp 7 --params 70e9 --gpus 1024 --param-dtype bf16)
set -uo pipefail
a_bin=$1 b_bin=$2 runs=$3
shift 3
a=() b=()
for ((i = 0; i < runs; i++)); do
    t0=$(date +%s.%N)
    "$a_bin" plan "$@" >/dev/null 2>&1
    t1=$(date +%s.%N)
    "$b_bin" plan "$@" >/dev/null 2>&1
    t2=$(date +%s.%N)
    a+=("$(echo "$t1 - $t0" | bc -l)")
    b+=("$(echo "$t2 - $t1" | bc -l)")
done
median() {
    printf '%s\n' "$@" | sort -g |
        awk '{t[NR] = $1} END {printf "%.3f", NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2}'
}
echo "fsdp plan $*: A $a_bin median $(median "${a[@]}") s, B $b_bin median $(median "${b[@]}") s, $runs runs each"
