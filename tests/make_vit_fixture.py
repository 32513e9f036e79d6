#!/usr/bin/python3
"""Writes tests/fixtures/vit_small.safetensors: the PyTorch reference state the C ViT is
checked against (in the spirit of llm.c's test_gpt2).

A small torchvision VisionTransformer configured as the workshop does (1-channel 7x7
patches on 28x28 FashionMNIST), its parameters, one batch of 4 real test images, the
logits, the loss, every gradient, then the losses and parameters of 3 Adam steps.

Run by hand from the repository root (never by `make test`: CI has no PyTorch):

    /usr/bin/python3 tests/make_vit_fixture.py

It uses Debian's python3-torch / python3-torchvision (so /usr/bin/python3, not a pyenv
python) and writes the safetensors file by hand (struct + json), no safetensors package.
"""

import gzip
import json
import os
import struct
import sys

try:
    import torch
    import torchvision
except ImportError as e:
    sys.exit(f"make_vit_fixture: {e}: needs Debian's python3-torch and python3-torchvision; "
             "run it with /usr/bin/python3")

IMAGES = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
LABELS = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "vit_small.safetensors")

CONFIG = dict(image=28, patch=7, layers=2, heads=2, hidden=16, mlp=32, classes=10, channels=1)
BATCH = 4  # test images 0..BATCH-1
LR = 1e-2
STEPS = 3

DTYPES = {torch.float32: "F32", torch.int32: "I32", torch.int64: "I64", torch.uint8: "U8",
          torch.float16: "F16", torch.bfloat16: "BF16"}


def read_idx_images(path, count):
    with gzip.open(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051:
            sys.exit(f"{path}: bad IDX magic {magic}")
        data = f.read(count * rows * cols)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(count, rows, cols)


def read_idx_labels(path, count):
    with gzip.open(path, "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic != 2049:
            sys.exit(f"{path}: bad IDX magic {magic}")
        data = f.read(count)
    return torch.tensor(list(data), dtype=torch.int64)


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, tensor), tiled contiguously in this order."""
    header = {"__metadata__": metadata}
    blobs = []
    offset = 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    js = json.dumps(header, separators=(",", ":")).encode("utf-8")
    js += b" " * (-len(js) % 8)  # the spec allows trailing spaces; keeps the data 8-aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    assert sys.byteorder == "little"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.VisionTransformer(
        image_size=CONFIG["image"], patch_size=CONFIG["patch"], num_layers=CONFIG["layers"],
        num_heads=CONFIG["heads"], hidden_dim=CONFIG["hidden"], mlp_dim=CONFIG["mlp"],
        num_classes=CONFIG["classes"], dropout=0.0, attention_dropout=0.0)
    model.conv_proj = torch.nn.Conv2d(1, CONFIG["hidden"], kernel_size=CONFIG["patch"],
                                      stride=CONFIG["patch"])

    # torchvision zero-inits heads.head, the class token and the attention biases, and sets
    # LayerNorms to ones/zeros: give all of them non-trivial values so a C implementation
    # that drops a bias, swaps weight and bias or forgets the class token cannot match.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "class_token":
                p.normal_(0.0, 0.5)
            elif name == "encoder.pos_embedding":
                p.normal_(0.0, 0.5)
            elif name == "heads.head.weight":
                p.normal_(0.0, 0.2)
            elif ".ln" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
    model.train()  # dropout is 0, so train and eval compute the same thing

    pixels = read_idx_images(IMAGES, BATCH)
    labels = read_idx_labels(LABELS, BATCH)
    # ToTensor then Normalize(0.5, 0.5), as the workshop does.
    images = ((pixels.to(torch.float32) / 255.0 - 0.5) / 0.5).reshape(BATCH, 1, 28, 28)

    keys = list(model.state_dict().keys())
    params = dict(model.named_parameters())
    assert keys == list(params.keys()), "state_dict has buffers: store them too"
    initial = {k: params[k].detach().clone() for k in keys}

    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    logits = model(images)
    loss = loss_fn(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    ref_logits = logits.detach().clone()
    ref_loss = loss.detach().clone().reshape(1)
    grads = {k: params[k].grad.detach().clone() for k in keys}
    losses = [loss.item()]
    optimizer.step()
    for _ in range(STEPS - 1):
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    final = {k: params[k].detach().clone() for k in keys}

    tensors = [(k, initial[k]) for k in keys]
    tensors += [("input.pixels", pixels), ("input.labels", labels.to(torch.int32)),
                ("input.images", images)]
    tensors += [("ref.logits", ref_logits), ("ref.loss", ref_loss)]
    tensors += [("grad." + k, grads[k]) for k in keys]
    tensors += [("ref.losses", torch.tensor(losses, dtype=torch.float32))]
    tensors += [("step3." + k, final[k]) for k in keys]

    metadata = {k: str(v) for k, v in CONFIG.items()}
    metadata.update({
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "optimizer": "Adam", "lr": repr(LR), "betas": "0.9,0.999", "eps": "1e-08",
        "weight_decay": "0", "steps": str(STEPS), "loss": "CrossEntropyLoss(mean)",
        "seed": "0", "images": f"{os.path.basename(IMAGES)}[0:{BATCH}]",
        "normalize": "(p/255-0.5)/0.5", "layer_norm_eps": "1e-06", "gelu": "exact (erf)",
    })
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_safetensors(OUT, tensors, metadata)
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes, {len(tensors)} tensors)")
    print(f"labels {labels.tolist()}  loss {ref_loss.item():.6f}  losses {losses}")


if __name__ == "__main__":
    main()
