#!/usr/bin/env python3
"""PyTorch FSDP2 beside `fsdp train --backend cuda`, on the same GPU in one run.

For each config (vit-tiny at batch 512, vit-workshop at batch 128) this trains torchvision's
VisionTransformer configured as our model (image 28, patch 7, a 1-channel conv_proj, dropout
0) with FSDP2 at world size 1 (`fully_shard` on each encoder block, then on the root; bf16
parameters, fp32 reduction), Adam lr 1e-3 and cross-entropy, on FashionMNIST training images
normalised as the workshop does. It times --steps steps after --warmup untimed ones (CUDA
synchronised, median step time) and reads the peak device memory. Then it runs our binary
on the same config (`--json`, whose step lines carry `step_time_s` measured with CUDA events)
and prints one JSON line per config with both, the ratio ours/torch, and both peaks.

    python3 bench/torch_fsdp2_gpu.py --fsdp ./fsdp --data /usr/share/datasets/fashion-mnist

Needs torch with CUDA and torchvision; exits 0 with one line on stderr when either is missing
or there is no GPU, so a caller can skip it.
"""

import argparse
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


def load_images(data_dir, count):
    """The first `count` training images as float32 [count, 1, 28, 28] and int64 labels."""
    import torch
    with gzip.open(os.path.join(data_dir, "train-images-idx3-ubyte.gz")) as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051 or rows != 28 or cols != 28:
            raise SystemExit(f"torch_fsdp2_gpu: {data_dir}: not FashionMNIST images")
        n = min(n, count)
        pixels = torch.frombuffer(bytearray(f.read(n * 784)), dtype=torch.uint8)
    with gzip.open(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = torch.frombuffer(bytearray(f.read(n)), dtype=torch.uint8)
    images = (pixels.float().view(n, 1, 28, 28) / 255.0 - 0.5) / 0.5
    return images, labels.long()


def build_model(layers, heads, hidden, mlp):
    import torch
    import torchvision
    model = torchvision.models.VisionTransformer(
        image_size=28, patch_size=7, num_layers=layers, num_heads=heads, hidden_dim=hidden,
        mlp_dim=mlp, num_classes=10, dropout=0.0, attention_dropout=0.0)
    model.conv_proj = torch.nn.Conv2d(1, hidden, kernel_size=7, stride=7)
    return model


def fully_shard_like_fsdp2(model):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.encoder.layers:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def time_torch(name, args, images, labels):
    import torch
    layers, heads, hidden, mlp, batch = CONFIGS[name]
    torch.manual_seed(0)
    model = fully_shard_like_fsdp2(build_model(layers, heads, hidden, mlp).cuda())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    x_all, y_all = images.cuda(), labels.cuda()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        at = (step * batch) % (x_all.shape[0] - batch)
        x, y = x_all[at:at + batch], y_all[at:at + batch]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return statistics.median(times), peak, float(loss)


def time_ours(name, args):
    layers, heads, hidden, mlp, batch = CONFIGS[name]
    cmd = [args.fsdp, "train", "--backend", "cuda", "--model", name, "--ranks", "1",
           "--batch-size", str(batch), "--steps", str(args.warmup + args.steps),
           "--param-dtype", "bf16", "--reduce-dtype", "fp32", "--eval", "false", "--json",
           "--data", args.data]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    steps = [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"step"')]
    timed = [s["step_time_s"] for s in steps[args.warmup:]]
    peak = [json.loads(line) for line in out.stdout.splitlines() if '"peak_bytes"' in line]
    return {"step_s": statistics.median(timed) if timed else None,
            "peak_bytes": peak[-1].get("peak_bytes") if peak else None,
            "last_loss": steps[-1]["loss"] if steps else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fsdp", default="./fsdp")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--configs", default="vit-tiny,vit-workshop")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    try:
        import torch
        import torch.distributed as dist
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"torch_fsdp2_gpu: skipped: {e}", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("torch_fsdp2_gpu: skipped: no CUDA device", file=sys.stderr)
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    images, labels = load_images(args.data, 60000)
    device = torch.cuda.get_device_name(0)
    for name in args.configs.split(","):
        t_step, t_peak, t_loss = time_torch(name, args, images, labels)
        ours = time_ours(name, args)
        row = {"config": name, "batch": CONFIGS[name][4], "device": device,
               "torch_step_s": t_step, "torch_peak_bytes": t_peak, "torch_last_loss": t_loss,
               "ours": ours}
        if ours.get("step_s"):
            row["ratio_ours_over_torch"] = ours["step_s"] / t_step
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
