#!/usr/bin/env bash
# bundle.sh OUT FSDP CUDA_LIB TEST_GPU NCCL_CHECK: `make gpu-bundle`'s work. Fills OUT with what a bare
# GPU machine (driver, CUDA, NCCL and PyTorch; no -dev packages, no network) needs to run gpu/run.sh.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: gpu/bundle.sh OUT FSDP CUDA_LIB TEST_GPU NCCL_CHECK" >&2; exit 2; }
out=$1; bins=("$2" "$3" "$4" "$5")
src=$(cd "$(dirname "$0")/.." && pwd)
data=${FSDP_DATA:-/usr/share/datasets/fashion-mnist}
text=${FSDP_TEXT:-/usr/share/games/fortunes}
limit=$((64 * 1024 * 1024))

rm -rf "$out"
mkdir -p "$out/data/fashion-mnist"
# The programs, without their DWARF (the symbol tables stay, for backtraces): fsdp, the backend it
# opens from its own folder, the GPU tests and the NCCL check that test_gpu launches.
for b in "${bins[@]}"; do
    if command -v strip >/dev/null; then strip --strip-debug -o "$out/$(basename "$b")" "$b"
    else cp "$b" "$out/"; fi
done
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
    [ -r "$data/$f" ] || { echo "gpu/bundle.sh: $data/$f: missing (set FSDP_DATA)" >&2; exit 1; }
    cp "$data/$f" "$out/data/fashion-mnist/"
done
# The language models' default text, its text files only (fsdp leaves the rest out anyway).
[ -d "$text" ] || { echo "gpu/bundle.sh: $text: missing (set FSDP_TEXT to a folder)" >&2; exit 1; }
mkdir -p "$out/data/text"
find "$text" -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$out/data/text/" \;
cp "$src/gpu/run.sh" "$src/gpu/fsdp-env.sh" "$src/bench/torch_fsdp2_gpu.py" \
    "$src/bench/torch_llama_gpu.py" "$src/bench/gemm_rate_gpu.py" "$src/tests/hf_vs_transformers.py" \
    "$out/"

# Every shared library the programs need, as ldd resolves it here, but for the C runtime (glibc,
# libstdc++, libgcc_s: any Linux has them) and CUDA's and NCCL's (the GPU machine's own, matching its
# driver). Packed with gzip (OpenBLAS alone is 36 MB); run.sh unpacks them outside the bundle.
skip='^(linux-vdso|ld-linux[^ ]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libnccl|libcublas|libcublasLt|libcudart|libcuda)\.so'
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT
for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" { print $1, $3 }' | sort -u |
while read -r name path; do
    if [[ $name =~ $skip ]]; then continue; fi
    [ -r "$path" ] || { echo "gpu/bundle.sh: $name: not found by ldd" >&2; exit 1; }
    cp -L "$path" "$libs/$name"
done
tar -C "$libs" -czf "$out/lib.tar.gz" .

size=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $out: $(du -sh "$out" | cut -f1), libraries: $(cd "$libs" && echo *)"
if [ "$size" -gt "$limit" ]; then
    echo "gpu/bundle.sh: $out is $size bytes, over 64 MiB" >&2; exit 1
fi
