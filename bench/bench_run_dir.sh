#!/usr/bin/env bash
# What --run-dir adds to a job: its wall-clock and CPU (user + system) seconds without and with
# a run directory, interleaved, RUNS times each, then the medians and their ratios.
# Usage: bench/bench_run_dir.sh RUNS TRAIN_FLAGS...   (e.g. 5 --model toy --ranks 3 --steps 5000)
set -euo pipefail
# The run without one writes the same checkpoints and model (--checkpoint-dir, --save-full,
# which --run-dir turns on), so what is measured is the run directory's own: a metrics line
# appended and flushed every step, the loss all-reduced every step, config.json, curves.svg.
# CPU seconds are the steadier figure on a shared machine, where wall time waits for the others.
runs=$1
shift
bin=${FSDP_BIN:-./fsdp}
dir=$(mktemp -d /tmp/fsdp_bench_run_dir.XXXXXX)
trap 'rm -rf "$dir"' EXIT

seconds() { # runs fsdp train with the given flags; prints "wall cpu" seconds
    local TIMEFORMAT='%R %U %S' t
    t=$({ time "$bin" train "$@" >/dev/null; } 2>&1)
    read -r wall user sys <<<"$t"
    echo "$wall $(echo "$user + $sys" | bc -l)"
}

declare -a without with
for ((i = 0; i < runs; i++)); do
    without+=("$(seconds "$@" --checkpoint-dir "$dir/ck$i" --save-full "$dir/m$i.safetensors")")
    with+=("$(seconds "$@" --run-dir "$dir/run$i")")
    echo "run $((i + 1)): without ${without[i]} | with --run-dir ${with[i]}  (wall cpu, s)"
done
python3 - "${without[@]}" -- "${with[@]}" <<'PY'
import statistics as s, sys
args = sys.argv[1:]
cut = args.index("--")
without = [tuple(map(float, a.split())) for a in args[:cut]]
with_ = [tuple(map(float, a.split())) for a in args[cut + 1:]]
for k, name in enumerate(("wall", "cpu")):
    a, b = s.median(r[k] for r in without), s.median(r[k] for r in with_)
    print(f"median {name}: without {a:.3f} s, with --run-dir {b:.3f} s: x{b / a:.3f}")
PY
