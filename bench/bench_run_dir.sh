#!/usr/bin/env bash
# What --run-dir adds to a job: its wall-clock time without and with a run directory,
# interleaved, RUNS times each, then both medians and their ratio.
# Usage: bench/bench_run_dir.sh RUNS TRAIN_FLAGS...   (e.g. 5 --model toy --ranks 3 --steps 5000)
set -euo pipefail
# The run without one writes the same checkpoints and model (--checkpoint-dir, --save-full,
# which --run-dir turns on), so what is measured is the run directory's own: a metrics line
# appended and flushed every step, the loss all-reduced every step, config.json, curves.svg.
runs=$1
shift
bin=${FSDP_BIN:-./fsdp}
dir=$(mktemp -d /tmp/fsdp_bench_run_dir.XXXXXX)
trap 'rm -rf "$dir"' EXIT

seconds() { # runs fsdp train with the given flags, prints its wall-clock seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$bin" train "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

declare -a without with
for ((i = 0; i < runs; i++)); do
    without+=("$(seconds "$@" --checkpoint-dir "$dir/ck$i" --save-full "$dir/m$i.safetensors")")
    with+=("$(seconds "$@" --run-dir "$dir/run$i")")
    printf 'run %d: without %.3f s | with --run-dir %.3f s\n' $((i + 1)) "${without[i]}" "${with[i]}"
done
python3 - "${without[*]}" "${with[*]}" <<'PY'
import statistics as s, sys
without, with_ = ([float(x) for x in a.split()] for a in sys.argv[1:3])
a, b = s.median(without), s.median(with_)
print(f"median: without {a:.3f} s, with --run-dir {b:.3f} s: x{b/a:.3f}")
PY
