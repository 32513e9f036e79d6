#!/usr/bin/env bash
# run.sh STAGE... DIR: the GPU checks from a copied bundle (make gpu-bundle), logs under DIR. Stage 1: CUDA
# kernel and one-GPU training tests; 2: the NCCL suite; 3: compute-sanitizer and the FSDP2 benchmark;
# 4: GPU traces, their replay, each phase's measured time beside the simulator's modelled one, and
# the cost model's efficiencies fitted to the traces (fsdp plan --calibrate), and the bf16 rates
# of a training step's products (gemm_rate_gpu.py).
set -u
usage() {
    cat <<'USAGE'
usage: run.sh STAGE... DIR    (any order; DIR is created and gets one log per step; several
                              stages run in the order given, under one time budget)
  1  every CUDA kernel test and the one-GPU training tests (test_gpu without nccl/*), then
     fsdp train --backend cuda --ranks 1 --model vit-tiny --steps 20
  2  the NCCL suite (test_gpu --filter 'nccl/*')
  3  compute-sanitizer memcheck and racecheck on a 2-layer vit-tiny, then the FSDP2 benchmark
     (torch_fsdp2_gpu.py)
  4  --trace-out of vit-tiny (batch 512) and vit-workshop (batch 128) on the GPU and in the
     simulator (the GPU's profile: h200-nvlink on an H200, else h100-nvlink), the GPU trace
     replayed (fsdp viz --trace), each phase's measured seconds beside the modelled ones (fsdp
     viz --times --against), then the profile fitted to both GPU traces (fsdp plan --calibrate),
     then bf16 GEMM and flash attention rates on a Llama 3 8B block's shapes (gemm_rate_gpu.py)
  5  the language models: a llama-125m bf16 step at seq 1,024 against the simulator's loss; the
     --save-hf folders loaded by transformers (hf_vs_transformers.py, its names and shapes kept in
     DIR/hf_shapes.json); Hugging Face's LlamaForCausalLM under FSDP2 beside ours
     (torch_llama_gpu.py)
  6  the forms no GPU has run yet (issues 36, 37): the bf16/fp16 and long-sequence flash kernel
     tests, and only if they pass, with FSDP_CUDA_UNVERIFIED=1: a vit-tiny and a llama-125m bf16
     run beside the simulator's, the FSDP2 benchmark's vit-workshop rows, the Llama benchmark at
     seq 1,024 (flip kernels/cuda/table.cu's limits once these pass)
All the stages given end within RUN_BUDGET seconds (default 540, under a 10-minute device call):
a step gets at most what is left, and one with under 15 s left is skipped (summary.log names it,
and the exit status is 1). With no GPU it says so in one line, after checking that the bundle
loads, and exits 0.
       run.sh libs    unpacks the bundle's libraries and prints their folder
USAGE
}
stages=()
dir=''
for a in "$@"; do
    case $a in
        1|2|3|4|5|6|libs) stages+=("$a") ;;
        -h|--help) usage; exit 0 ;;
        *) dir=$a ;;
    esac
done
[ $# -eq 0 ] && { usage; exit 0; }
here=$(cd "$(dirname "$0")" && pwd)
cd "$here" || exit 1

# The bundled libraries, unpacked once per lib.tar.gz into /tmp (the bundle stays as copied, small
# enough to carry again).
sum=$(cksum < lib.tar.gz | cut -d' ' -f1)
libdir=${TMPDIR:-/tmp}/fsdp-bundle-lib-$sum
if [ ! -e "$libdir/.unpacked" ]; then
    if ! { mkdir -p "$libdir" && tar -C "$libdir" -xzf lib.tar.gz && touch "$libdir/.unpacked"; }; then
        echo "run.sh: could not unpack lib.tar.gz into $libdir" >&2; exit 1
    fi
fi
case " ${stages[*]} " in *" libs "*) echo "$libdir"; exit 0 ;; esac
if [ ${#stages[@]} -eq 0 ] || [ -z "$dir" ]; then usage >&2; exit 2; fi
case ${RUN_BUDGET:-540} in ''|*[!0-9]*) echo "run.sh: RUN_BUDGET must be whole seconds, not '$RUN_BUDGET'" >&2; exit 2 ;; esac
deadline=$(( $(date +%s) + ${RUN_BUDGET:-540} ))
mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || exit 1

gpus=$(nvidia-smi -L 2>&1) && echo "$gpus" | grep -q '^GPU' || gpus=

# The machine's CUDA and NCCL: the folders of PyTorch's nvidia-* wheels that hold libnccl,
# libcublasLt and libcudart, then CUDA's own; then whatever the machine already had.
wheels=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
dirs = []
for r in roots:
    for pat in ("libnccl.so.2", "libcublasLt.so.*", "libcudart.so.*"):
        for f in sorted(glob.glob(os.path.join(r, "**", pat), recursive=True)):
            if os.path.dirname(f) not in dirs:
                dirs.append(os.path.dirname(f))
print(":".join(dirs))
PY
)
cuda=$wheels
for d in /usr/local/cuda/lib64 /usr/local/nvidia/lib64; do [ -d "$d" ] && cuda=$cuda${cuda:+:}$d; done
machine=${LD_LIBRARY_PATH:-}
export FSDP_BUNDLE_LD_LIBRARY_PATH=$libdir${cuda:+:$cuda}${machine:+:$machine}
export LD_LIBRARY_PATH=$FSDP_BUNDLE_LD_LIBRARY_PATH
export FSDP_DATA=$here/data/fashion-mnist FSDP_TEXT=$here/data/text FSDP_BIN=./fsdp FSDP_NCCL_CHECK=./nccl_check
export PYTHONUNBUFFERED=1

if [ -z "$gpus" ]; then
    plan=$(./fsdp train --backend auto --ranks 1 --print-plan 2>&1 | head -1)
    case $plan in
        "backend: sim (auto: "*) echo "run.sh: no GPU here (nvidia-smi -L lists none); stage ${stages[*]} not run; the bundle loads: $plan"; exit 0 ;;
        *) echo "run.sh: no GPU here, and the bundle does not load: $plan" >&2; exit 1 ;;
    esac
fi
echo "$gpus"

{
    echo "stages ${stages[*]}, $(date -u +%FT%TZ), $(uname -srm), budget ${RUN_BUDGET:-540} s"
    echo "$gpus"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for b in fsdp libfsdp_cuda.so test_gpu nccl_check; do echo "== ldd $b"; ldd "./$b"; done
} > "$dir/env.log" 2>&1

failed=0
# step NAME SECONDS CMD...: CMD with its output in DIR/NAME.log, killed after SECONDS or at the
# budget's end, whichever is first (skipped when under 15 s are left); prints the rc, the time and
# the log's last lines, and returns the rc.
step() {
    local name=$1 secs=$2 t0 rc left
    shift 2
    t0=$(date +%s)
    left=$(( deadline - t0 ))
    if [ $left -lt 15 ]; then
        echo "== $name: skipped, ${left} s of the budget left" | tee -a "$dir/summary.log"
        failed=1
        return 1
    fi
    [ "$secs" -gt $left ] && secs=$left
    echo "== $name: $*" | tee "$dir/$name.log"
    timeout --kill-after=10 "$secs" "$@" >> "$dir/$name.log" 2>&1
    rc=$?
    echo "== $name: rc=$rc$([ $rc -eq 124 ] && echo ' (timed out)') in $(( $(date +%s) - t0 )) s, log $dir/$name.log" |
        tee -a "$dir/summary.log"
    tail -n +2 "$dir/$name.log" | tail -n 12
    [ $rc -eq 0 ] || failed=1
    return $rc
}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
short=(./fsdp train --backend cuda --ranks 1 --model vit-tiny --layers 2 --steps 2 --eval false)

run_stage() {
case $1 in
    1)
        step test_gpu 420 ./test_gpu --jobs 1 --verbose --filter '!(nccl)/*'
        step train_vit_tiny 90 ./fsdp train --backend cuda --ranks 1 --model vit-tiny --steps 20 ;;
    2)
        step test_nccl 500 ./test_gpu --jobs 1 --verbose --filter 'nccl/*' ;;
    3)
        step memcheck 120 "$sanitizer" --tool memcheck --error-exitcode 1 "${short[@]}"
        step racecheck 120 "$sanitizer" --tool racecheck --error-exitcode 1 "${short[@]}"
        # PyTorch with the machine's own libraries; our binary through fsdp-env.sh with the bundle's.
        step fsdp2_bench 270 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
            python3 torch_fsdp2_gpu.py --fsdp ./fsdp-env.sh --data "$FSDP_DATA" ;;
    4)
        # the same job on the GPU (measured) and in the simulator (modelled), a few steps so the
        # last is warm; the simulator computes on the CPU, hence its fewer steps
        profile=h100-nvlink
        case $gpus in *H200*) profile=h200-nvlink ;; esac
        for job in "vit-tiny 512" "vit-workshop 128"; do
            set -- $job
            run=(--model "$1" --batch-size "$2" --ranks 1)
            step "trace_gpu_$1" 120 ./fsdp train --backend cuda "${run[@]}" --steps 6 --eval false \
                --trace-out "$dir/gpu-$1.json"
            step "trace_sim_$1" 240 ./fsdp viz "${run[@]}" --profile "$profile" --steps 2 --times \
                --trace-out "$dir/sim-$1.json"
            step "replay_$1" 60 ./fsdp viz --trace "$dir/gpu-$1.json" --events 1-30
            step "times_$1" 60 ./fsdp viz --trace "$dir/gpu-$1.json" --times --against "$dir/sim-$1.json"
        done
        step calibrate 60 ./fsdp plan --calibrate "$dir/gpu-vit-tiny.json" \
            --calibrate "$dir/gpu-vit-workshop.json" --profile "$profile"
        # what the GPU sustains in bf16 on a Llama 3 8B block's products and attention: the
        # Hopper profiles' gemm_eff and attn_eff, which no fp32 trace above can set
        step gemm_rates 120 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
            python3 gemm_rate_gpu.py --seconds 15 --out "$dir/gemm_rates.json" ;;
    5)
        lm=(--model llama-125m --ranks 1 --batch-size 2 --param-dtype bf16 --steps 2 --print-every 1)
        step lm_gpu 120 ./fsdp train --backend cuda "${lm[@]}"
        step lm_sim 240 ./fsdp train "${lm[@]}"
        step hf_load 120 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
            python3 hf_vs_transformers.py --fsdp ./fsdp-env.sh --fixture "$dir/hf_shapes.json"
        step llama_bench 400 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
            python3 torch_llama_gpu.py --fsdp ./fsdp-env.sh --text "$FSDP_TEXT" ;;
    6)
        if step unverified_tests 200 ./test_gpu --jobs 1 --verbose \
            --filter '@(cuda_dtypes|cuda_llama_ops)/*'; then
            export FSDP_CUDA_UNVERIFIED=1
            vit=(--model vit-tiny --ranks 1 --param-dtype bf16 --steps 3 --print-every 1 --eval false)
            step bf16_vit_gpu 60 ./fsdp train --backend cuda "${vit[@]}"
            step bf16_vit_sim 120 ./fsdp train "${vit[@]}"
            step bf16_fsdp2_bench 200 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
                python3 torch_fsdp2_gpu.py --fsdp ./fsdp-env.sh --data "$FSDP_DATA" --configs vit-workshop
            # issue 37's, after issue 36's above
            step bf16_llama_gpu 90 ./fsdp train --backend cuda --model llama-125m --ranks 1 \
                --batch-size 4 --param-dtype bf16 --steps 3 --print-every 1
            step llama_bench_1024 150 env LD_LIBRARY_PATH="$cuda${machine:+:$machine}" \
                python3 torch_llama_gpu.py --fsdp ./fsdp-env.sh --text "$FSDP_TEXT" --seqs 1024
        fi ;;
esac
}

for stage in "${stages[@]}"; do
    echo "== stage $stage, $(( deadline - $(date +%s) )) s of the budget left" | tee -a "$dir/summary.log"
    run_stage "$stage"
done
exit $failed
