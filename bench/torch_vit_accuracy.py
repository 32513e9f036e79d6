#!/usr/bin/python3
"""PyTorch peer for the vit-tiny accuracy target.

Trains torchvision's VisionTransformer as vit-tiny exactly as `./fsdp train --model vit-tiny
--ranks 4 --batch-size 64 --epochs 3` does on one process: global batch 256, Adam lr 1e-3,
CrossEntropyLoss, a fresh seeded shuffle each epoch with the last partial batch dropped,
inputs normalised as the workshop does, and evaluation on the test split after every epoch.
Prints one JSON line per epoch: {"impl":"torch","epoch":e,"test_accuracy":...}.

    /usr/bin/python3 bench/torch_vit_accuracy.py --epochs 3 --seed 0

Exits 0 with one line on stderr when torch is not importable.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_vit_cpu as peer  # noqa: E402  (shares the data reading and the model)

TEST_IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
TEST_LABELS = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"


def load_split(torch, images, labels):
    (n, rows, cols), pixels = peer.read_idx(images, 2051)
    (nl,), lab = peer.read_idx(labels, 2049)
    if nl != n:
        sys.exit(f"torch_vit_accuracy: {labels} has {nl} labels for {n} images")
    x = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(n, 1, rows, cols)
    x = (x.to(torch.float32) / 255.0 - 0.5) / 0.5
    y = torch.frombuffer(bytearray(lab), dtype=torch.uint8).to(torch.int64)
    return x, y


def evaluate(torch, model, x, y, batch=1000):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    model.train()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.epochs < 1 or args.batch < 1 or args.threads < 1:
        sys.exit("torch_vit_accuracy: --epochs, --batch and --threads must be positive")
    if not peer.import_torch():
        return 0
    import torch
    import torchvision

    torch.set_num_threads(args.threads)
    peer.set_blas_threads(args.threads)
    x, y = load_split(torch, peer.IMAGES, peer.LABELS)
    tx, ty = load_split(torch, TEST_IMAGES, TEST_LABELS)
    model = peer.make_model(torch, torchvision, args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = x.shape[0] // args.batch
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(args.seed + epoch))
        for s in range(steps):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
        print(json.dumps({"impl": "torch", "epoch": epoch + 1, "steps": steps * (epoch + 1),
                          "last_loss": round(float(loss), 4),
                          "test_accuracy": evaluate(torch, model, tx, ty),
                          "train_s": round(time.perf_counter() - t0, 1), "seed": args.seed}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
