#!/usr/bin/env bash
# --backend mpi against the simulator on this machine: the same vit-tiny job (RANKS ranks,
# global batch GLOBAL) as rank threads of one process and as RANKS processes under mpirun,
# interleaved, RUNS times each; per run the median wall-clock step time of rank 0 (the first
# step warms up and is left out), then the medians, images/s and the ratio mpi/sim.
# Usage: bench/bench_mpi.sh RANKS GLOBAL STEPS [RUNS]   (e.g. 2 64 40 5)
set -euo pipefail
ranks=$1 global=$2 steps=$3 runs=${4:-5}
bin=${FSDP_BIN:-./fsdp}
batch=$((global / ranks))
job=(train --model vit-tiny --ranks "$ranks" --batch-size "$batch" --steps "$steps" --eval false
    --json)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # containers run as root

median_step() { # reads --json lines, prints the median step wall time in seconds
    python3 -c '
import json, statistics, sys
walls = [json.loads(l)["wall_s"] for l in sys.stdin if l.startswith("{\"step\"")][1:]
print(statistics.median(walls))'
}

declare -a sim mpi
for ((i = 0; i < runs; i++)); do
    sim+=("$("$bin" "${job[@]}" 2>/dev/null | median_step)")
    mpi+=("$(mpirun -q --oversubscribe --bind-to none -np "$ranks" "$bin" "${job[@]}" \
        --backend mpi 2>/dev/null | median_step)")
    echo "run $((i + 1)): sim step ${sim[i]} s | mpi step ${mpi[i]} s"
done
python3 - "$global" "${sim[*]}" "${mpi[*]}" <<'PY'
import statistics as s, sys
g = int(sys.argv[1])
sim, mpi = ([float(x) for x in a.split()] for a in sys.argv[2:4])
ms, mm = s.median(sim), s.median(mpi)
print(f"median step: sim {ms*1e3:.1f} ms ({g/ms:.0f} img/s), mpi {mm*1e3:.1f} ms ({g/mm:.0f} img/s)")
print(f"mpi/sim step time x{mm/ms:.3f} (target <= 1.15)")
PY
