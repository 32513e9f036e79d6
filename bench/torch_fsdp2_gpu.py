#!/usr/bin/env python3
"""PyTorch FSDP2 beside `fsdp train --backend cuda`, on the same GPU in one run, like with like.

For each config (vit-tiny at batch 512, vit-workshop at batch 128) this trains torchvision's
VisionTransformer configured as our model (image 28, patch 7, a 1-channel conv_proj, dropout
0) with FSDP2 at world size 1 (`fully_shard` on each encoder block, then on the root), Adam
lr 1e-3 and cross-entropy, on FashionMNIST training images, and runs our binary on the same
config. It prints one table: a row per precision setting, each side's img/s (batch over the
median wall time of --steps steps after --warmup untimed ones), the ratio ours/PyTorch measured
in this run, and each side's peak device memory counted the same way.

    python3 bench/torch_fsdp2_gpu.py --fsdp ./fsdp --data /usr/share/datasets/fashion-mnist

Rows, the same work on both sides:
  fp32, TF32 off   fp32 everywhere; ours: `--param-dtype fp32` (cuBLASLt at CUBLAS_COMPUTE_32F).
  fp32, TF32 on    fp32 tensors, matrix products on TF32 tensor cores; ours: `--tf32`
                   (CUBLAS_COMPUTE_32F_FAST_TF32), PyTorch: fp32_precision / allow_tf32.
  bf16             FSDP2's MixedPrecisionPolicy(bf16 params, fp32 reduce) computes in bf16; ours:
                   `--param-dtype bf16 --reduce-dtype fp32`, which computes in bf16 where the
                   CUDA table offers bf16 (kernels/cuda/table.cu's dtypes) and otherwise in fp32
                   on each unit's cast copy (not the same work: say so beside the figure).

Each row also prints the model FLOP/s and MFU of each side: 6 x parameters x tokens an image
(forward and backward of every matrix product, as PaLM counts it) plus attention's 12 x layers x
tokens^2 x hidden, over the GPU's dense peak for the row's dtype (fp32 without tensor cores, TF32,
bf16: the datasheet's, for the GPUs listed in PEAK_TFLOPS; --peak-tflops F,T,B sets them).

Peak memory, both sides: the most bytes allocated on the device at once for parameters, grads,
optimizer state, activations (the staged batch among them) and collective buffers, without the
data set (host memory on both sides: each step gathers its batch on the host, normalises it and
copies it over, as ours does) and without cuBLAS workspaces. Ours: `peak_bytes` of `--json`, its
device's accounting of every allocation (the 32 MiB cuBLASLt workspace is cudaMalloc'd outside
it), over the whole run, set-up included (fsdp train has no reset between steps: if set-up
peaked higher, ours reads high). PyTorch: torch.cuda.max_memory_allocated() over the timed steps,
less what is still allocated once the model, optimizer and step tensors are freed (its cuBLAS
workspaces, which its caching allocator holds and counts); that figure is printed as "excluded".

Needs torch with CUDA and torchvision; exits 0 with one line on stderr when either is missing
or there is no GPU, so a caller can skip it.
"""

import argparse
import gc
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import time

CONFIGS = {
    # name: (layers, heads, hidden, mlp, batch)
    "vit-tiny": (10, 2, 128, 128, 512),
    "vit-workshop": (12, 8, 3840, 768, 128),
}

# name: (label, TF32 on, FSDP2 param dtype or None for fp32, our flags, the peak it is held to)
ROWS = {
    "fp32": ("fp32, TF32 off", False, None, ["--param-dtype", "fp32"], "fp32"),
    "tf32": ("fp32, TF32 on", True, None, ["--param-dtype", "fp32", "--tf32"], "tf32"),
    "bf16": ("bf16 params+compute", False, "bf16", ["--param-dtype", "bf16"], "bf16"),
}

# Dense peaks in TFLOP/s from NVIDIA's datasheets (SXM parts; without sparsity): fp32 on the CUDA
# cores, TF32 and bf16 on the tensor cores. The H200 has the H100's SM and clocks.
PEAK_TFLOPS = {
    "H100": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
    "H200": {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4},
    "A100": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
}


def model_flops_per_image(layers, hidden, mlp, tokens=17, classes=10, patch=7):
    """6 x parameters x tokens (every matrix product forward and backward) plus attention's
    q.k^T and p.v: 2 products of tokens^2 x hidden a layer, 3 passes, 2 flops a multiply-add."""
    block = 4 * hidden * hidden + 4 * hidden + 2 * hidden * mlp + mlp + hidden + 4 * hidden
    embed = hidden * patch * patch + hidden + hidden + tokens * hidden
    params = layers * block + embed + 2 * hidden + classes * hidden + classes
    return 6 * params * tokens + 12 * layers * tokens * tokens * hidden


def common_args(p):
    """The flags every GPU benchmark here takes: our binary, timing, JSON, the GPU's peaks."""
    p.add_argument("--fsdp", default="./fsdp")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", action="store_true", help="also one JSON line per row")
    p.add_argument("--peak-tflops", default="",
                   help="F,T,B: the GPU's dense fp32, TF32 and bf16 peaks (default: by its name)")


def one_rank_or_skip(name, port, needs):
    """torch with a CUDA device and the modules `needs`, in a process group of one on NCCL; None
    (one line on stderr) when any is missing, so a caller can skip."""
    import importlib
    try:
        import torch
        import torch.distributed as dist
        for module in needs:
            importlib.import_module(module)
    except ImportError as e:
        print(f"{name}: skipped: {e}", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print(f"{name}: skipped: no CUDA device", file=sys.stderr)
        return None
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    return torch


def gpu_peaks(name, override):
    if override:
        f, t, b = (float(x) for x in override.split(","))
        return {"fp32": f, "tf32": t, "bf16": b}
    for key, peaks in PEAK_TFLOPS.items():
        if key in name:
            return peaks
    return None


def load_images(data_dir):
    """Training pixels as uint8 [n, 784] and labels as int64, kept on the host."""
    import torch
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051 or rows != 28 or cols != 28:
            raise SystemExit(f"torch_fsdp2_gpu: {data_dir}: not FashionMNIST images")
        pixels = torch.frombuffer(bytearray(f.read(n * 784)), dtype=torch.uint8).view(n, 784)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8)
    return pixels, labels.long()


def set_tf32(on):
    """TF32 for fp32 matmuls and convolutions, on or off. PyTorch >= 2.9 has fp32_precision and
    raises when legacy and new settings disagree, so there only the new API is used."""
    import torch
    mode = "tf32" if on else "ieee"
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = mode
        said = f"matmul.fp32_precision={torch.backends.cuda.matmul.fp32_precision}"
        conv = getattr(torch.backends.cudnn, "conv", None)
        if conv is not None and hasattr(conv, "fp32_precision"):
            conv.fp32_precision = mode
            said += f", cudnn.conv.fp32_precision={conv.fp32_precision}"
        return said
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")
    return f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, " \
           f"cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}"


def build_model(layers, heads, hidden, mlp):
    import torch
    import torchvision
    model = torchvision.models.VisionTransformer(
        image_size=28, patch_size=7, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        mlp_dim=mlp, num_classes=10, dropout=0.0, attention_dropout=0.0)
    model.conv_proj = torch.nn.Conv2d(1, hidden, kernel_size=7, stride=7)
    return model


def fully_shard_like_fsdp2(model, param_dtype):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mp = MixedPrecisionPolicy()  # fp32 throughout
    if param_dtype == "bf16":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.encoder.layers:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def timed_steps(step, warmup, steps):
    """Runs step(i) warmup + steps times, each between device syncs: the wall times of the last
    `steps` and the last step's return; the device's peak memory counts from the first timed one
    (Adam's state and every cuBLAS workspace exist by then)."""
    import torch
    times, last = [], None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        last = step(i)
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times, last


def time_torch(name, row, args, pixels, labels):
    """(img/s, peak bytes without data set and workspaces, the bytes so excluded, last loss)."""
    import torch
    _, tf32, param_dtype, _, _ = ROWS[row]
    layers, heads, hidden, mlp, batch = CONFIGS[name]
    set_tf32(tf32)
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialised on the GPU: vit-workshop's 0.8B on the CPU is slow
        model = fully_shard_like_fsdp2(build_model(layers, heads, hidden, mlp), param_dtype)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    perm = torch.randperm(pixels.shape[0], generator=torch.Generator().manual_seed(0))

    def step(i):
        # the batch staged as ours stages it (models/vit.c stage_batch): gathered and normalised
        # on the host, then copied to the device, inside the timed step
        at = (i * batch) % (pixels.shape[0] - batch)
        idx = perm[at:at + batch]
        x = ((pixels[idx].float() / 255.0 - 0.5) / 0.5).view(batch, 1, 28, 28).cuda()
        loss = loss_fn(model(x), labels[idx].cuda())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)  # ours reads its loss back every step under --json; so does this

    times, last = timed_steps(step, args.warmup, args.steps)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    gc.collect()
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated()  # cuBLAS workspaces (allocated, never freed)
    torch.cuda.empty_cache()  # hand the cache back before our binary wants the GPU
    return batch / statistics.median(times), peak - kept, kept, last


def time_ours(name, row, args):
    layers, heads, hidden, mlp, batch = CONFIGS[name]
    cmd = [args.fsdp, "train", "--backend", "cuda", "--model", name, "--ranks", "1",
           "--batch-size", str(batch), "--steps", str(args.warmup + args.steps),
           "--reduce-dtype", "fp32", "--eval", "false", "--json", "--data", args.data]
    cmd += ROWS[row][3]
    res = run_ours(cmd, args.warmup)
    if "error" in res:
        return res
    timed, peak, last = res["timed"], res["peak"], res["last"]
    return {"img_s": batch / statistics.median(timed), "peak_bytes": peak, "last_loss": last}


def run_ours(cmd, warmup):
    """Runs `fsdp train ... --json`: the wall times of its steps after `warmup`, its peak bytes,
    its last loss; or {"error": its last line}."""
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": " ".join((out.stderr or out.stdout).strip().splitlines()[-1:])}
    lines = out.stdout.splitlines()
    steps = [json.loads(line) for line in lines if line.startswith('{"step"')]
    # wall_s: host clock around one step that ends with its loss read back, as the torch sides'
    timed = [s["wall_s"] for s in steps[warmup:]]
    peak = [json.loads(line) for line in lines if line.startswith('{"peak_bytes"')]
    if not timed or not peak:
        return {"error": "no step or peak_bytes lines in --json output"}
    return {"timed": timed, "peak": peak[-1]["peak_bytes"], "last": steps[-1]["loss"]}


def mib(b):
    return f"{b / 2**20:.1f}" if b is not None else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_args(p)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--configs", default="vit-tiny,vit-workshop")
    p.add_argument("--rows", default="fp32,tf32,bf16", help="of " + ",".join(ROWS))
    p.add_argument("--steps", type=int, default=10)
    args = p.parse_args()
    for r in args.rows.split(","):
        if r not in ROWS:
            raise SystemExit(f"torch_fsdp2_gpu: --rows: unknown row '{r}' (of {','.join(ROWS)})")
    torch = one_rank_or_skip("torch_fsdp2_gpu", 29511, ["torchvision"])
    if torch is None:
        return 0
    import torch.distributed as dist
    pixels, labels = load_images(args.data)
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; world size 1; "
          f"img/s = batch / median wall time of {args.steps} steps after {args.warmup} warm-up")
    print("# ratio = ours img/s / PyTorch img/s, both measured in this run (>1: ours faster)")
    print("# peak MiB: device bytes allocated at once for params, grads, optimizer state, "
          "activations (batch included) and comm buffers; data set and cuBLAS workspaces excluded "
          "on both sides (PyTorch: max_memory_allocated over timed steps less 'excluded')")
    print("# TF32 off: " + set_tf32(False) + "; ours: CUBLAS_COMPUTE_32F unless --tf32")
    peaks = gpu_peaks(torch.cuda.get_device_name(0), args.peak_tflops)
    print("# MFU: model FLOP/s (6 x params x tokens + attention) over the dense peak for the "
          "row's dtype: " + (", ".join(f"{k} {v:g} TFLOP/s" for k, v in peaks.items())
                             if peaks else "unknown GPU (give --peak-tflops)"))
    head = (f"{'config':<13} {'batch':>5}  {'dtype / TF32':<20} {'torch img/s':>11} "
            f"{'ours img/s':>10} {'ours/torch':>10} {'torch TF/s':>10} {'ours TF/s':>9} "
            f"{'torch MFU':>9} {'ours MFU':>8} {'torch MiB':>9} {'ours MiB':>9} "
            f"{'excluded':>8}  note")
    print(head)
    print("-" * len(head))
    for name in args.configs.split(","):
        layers, _, hidden, mlp, batch = CONFIGS[name]
        flops = model_flops_per_image(layers, hidden, mlp)
        for r in args.rows.split(","):
            label, _, _, _, peak_key = ROWS[r]
            t_ips, t_peak, t_kept, t_loss = time_torch(name, r, args, pixels, labels)
            ours = time_ours(name, r, args)
            o_ips, o_peak = ours.get("img_s"), ours.get("peak_bytes")
            ratio = f"{o_ips / t_ips:.3f}" if o_ips else "-"
            t_tf, o_tf = t_ips * flops / 1e12, (o_ips * flops / 1e12 if o_ips else None)
            peak = peaks[peak_key] if peaks else None
            t_mfu = f"{100 * t_tf / peak:.1f}%" if peak else "-"
            o_mfu = f"{100 * o_tf / peak:.1f}%" if peak and o_tf else "-"
            note = ours.get("error", "")
            print(f"{name:<13} {batch:>5}  {label:<20} {t_ips:>11.1f} "
                  f"{(f'{o_ips:.1f}' if o_ips else '-'):>10} {ratio:>10} {t_tf:>10.1f} "
                  f"{(f'{o_tf:.1f}' if o_tf else '-'):>9} {t_mfu:>9} {o_mfu:>8} "
                  f"{mib(t_peak):>9} {mib(o_peak):>9} {mib(t_kept):>8}  {note}", flush=True)
            if args.json:
                print(json.dumps({"config": name, "batch": batch, "row": r, "label": label,
                                  "torch_img_s": t_ips, "torch_peak_bytes": t_peak,
                                  "torch_excluded_bytes": t_kept, "torch_last_loss": t_loss,
                                  "model_flops_per_image": flops, "peak_tflops": peak,
                                  "ours": ours or None,
                                  "ratio_ours_over_torch": o_ips / t_ips if o_ips else None}),
                      flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
