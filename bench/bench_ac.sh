#!/usr/bin/env bash
# Activation checkpointing's memory saving and step-time cost: the same training job with and
# without --activation-checkpointing, interleaved, RUNS times each; prints per run the
# accounted peak of rank 0 and the median wall-clock step time, then the medians and ratios.
# Usage: bench/bench_ac.sh MODEL RANKS BATCH STEPS [RUNS]   (e.g. vit-tiny 4 64 10 3)
set -euo pipefail
model=$1 ranks=$2 batch=$3 steps=$4 runs=${5:-3}
bin=${FSDP_BIN:-./fsdp}

one_run() { # prints "peak_bytes median_step_wall_s"
    "$bin" train --model "$model" --ranks "$ranks" --batch-size "$batch" --steps "$steps" \
        --eval false --json "$@" 2>/dev/null |
        python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
walls = [r["wall_s"] for r in rows if "wall_s" in r][1:]  # the first step warms up
peak = [r for r in rows if "peak_bytes" in r][0]["rank_peaks"][0]
print(peak, statistics.median(walls))'
}

declare -a off_peak off_time on_peak on_time
for ((i = 0; i < runs; i++)); do
    read -r p t < <(one_run)
    off_peak+=("$p") off_time+=("$t")
    read -r p t < <(one_run --activation-checkpointing)
    on_peak+=("$p") on_time+=("$t")
    echo "run $((i + 1)): off peak ${off_peak[i]} B step ${off_time[i]} s | on peak ${on_peak[i]} B step ${on_time[i]} s"
done
python3 - "${off_peak[*]}" "${off_time[*]}" "${on_peak[*]}" "${on_time[*]}" <<'PY'
import statistics as s, sys
op, ot, np_, nt = ([float(x) for x in a.split()] for a in sys.argv[1:5])
mop, mot, mnp, mnt = s.median(op), s.median(ot), s.median(np_), s.median(nt)
print(f"median: off peak {mop/2**20:.2f} MiB, step {mot*1e3:.1f} ms; "
      f"on peak {mnp/2**20:.2f} MiB, step {mnt*1e3:.1f} ms")
print(f"checkpointing: peak x{mnp/mop:.3f} ({(1-mnp/mop)*100:.1f}% less), step time x{mnt/mot:.3f}")
PY
