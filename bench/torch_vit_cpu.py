#!/usr/bin/python3
"""PyTorch peer for the CPU ViT speed benchmark.

Trains torchvision's VisionTransformer configured as vit-tiny (image 28, patch 7, 10 layers,
2 heads, hidden 128, MLP 128, 1-channel conv_proj, dropout 0) with Adam (lr 1e-3) and
CrossEntropyLoss on real FashionMNIST training images, the first batches of a seeded
permutation, normalised as the workshop does ((p/255 - 0.5)/0.5). For each thread count it
times --steps steps after --warmup untimed ones, --repeats times (a fresh model each time),
and prints one JSON line per thread count on stdout; notes go to stderr.

    /usr/bin/python3 bench/torch_vit_cpu.py --threads 1,2 --steps 50 --repeats 5

Debian's python3-torch is a fair peer only when libblas.so.3 points at OpenBLAS (it is about
10x slower on the reference BLAS), so the alternative in use is checked, reported and warned
about. Two pools of threads share the CPUs: torch's OpenMP team and OpenBLAS's own pthread
pool. Left alone, both spin while idle and fight (2 threads ran 3x slower than 1 on a 2-CPU
VM), so OpenBLAS gets as many threads as torch and OpenMP waits passively
(OMP_WAIT_POLICY=PASSIVE unless already set); both are reported. Exits 0 with one line on
stderr when torch is not importable, so callers can skip it.
"""

import argparse
import gzip
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import time

IMAGES = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"
DEBIAN_PYTHON = "/usr/bin/python3"

# Read by libgomp when torch loads, so it must be set before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def import_torch():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        return True
    except ImportError as e:
        # Debian's torch lives in /usr/lib/python3/dist-packages: a pyenv or venv python
        # first on PATH does not see it, so hand over to the system python once.
        if (os.path.exists(DEBIAN_PYTHON) and not os.environ.get("TORCH_VIT_REEXEC")
                and os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON)):
            os.environ["TORCH_VIT_REEXEC"] = "1"
            os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
        print(f"torch_vit_cpu: skipped: cannot import torch/torchvision ({e}); "
              "install python3-torch python3-torchvision", file=sys.stderr)
        return False


def blas_alternative():
    """The Value line of libblas.so.3's alternative, or a note saying why it is unknown."""
    try:
        out = subprocess.run(
            ["update-alternatives", "--query", "libblas.so.3-x86_64-linux-gnu"],
            capture_output=True, text=True, check=False).stdout
    except OSError as e:
        return f"unknown ({e.strerror})"
    for line in out.splitlines():
        if line.startswith("Value:"):
            return line.split(":", 1)[1].strip()
    return "unknown (no libblas.so.3 alternative)"


def set_blas_threads(n):
    """Makes OpenBLAS's own thread pool match torch's thread count (Debian's torch calls BLAS
    through libblas.so.3 and does not size that pool itself, so it would otherwise run with
    one thread per CPU under every torch thread). Returns the count now in effect, or None."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")  # the copy libblas.so.3 already loaded
        lib.openblas_set_num_threads(int(n))
        return int(lib.openblas_get_num_threads())
    except (OSError, AttributeError):
        return None


def deb_version(package):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                             capture_output=True, text=True, check=False).stdout
        return out.strip() or None
    except OSError:
        return None


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def read_idx(path, magic_want):
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        if magic != magic_want:
            sys.exit(f"torch_vit_cpu: {path}: bad IDX magic {magic}")
        ndim = magic & 0xFF
        dims = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return dims, f.read()


def load_batches(torch, batch, count, seed):
    """The first `count` batches of a seeded permutation of the training set."""
    (n, rows, cols), pixels = read_idx(IMAGES, 2051)
    (nl,), labels = read_idx(LABELS, 2049)
    if nl != n or batch * count > n:
        sys.exit(f"torch_vit_cpu: need {batch * count} images, the training set has {n}")
    pixels = torch.frombuffer(bytearray(pixels), dtype=torch.uint8).reshape(n, 1, rows, cols)
    labels = torch.frombuffer(bytearray(labels), dtype=torch.uint8).to(torch.int64)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    batches = []
    for i in range(count):
        idx = perm[i * batch:(i + 1) * batch]
        x = (pixels[idx].to(torch.float32) / 255.0 - 0.5) / 0.5
        batches.append((x.contiguous(), labels[idx].contiguous()))
    return batches


def make_model(torch, torchvision, seed):
    torch.manual_seed(seed)
    model = torchvision.models.VisionTransformer(
        image_size=28, patch_size=7, num_layers=10, num_heads=2, hidden_dim=128, mlp_dim=128,
        num_classes=10, dropout=0.0, attention_dropout=0.0)
    model.conv_proj = torch.nn.Conv2d(1, 128, kernel_size=7, stride=7)
    model.train()
    return model


def run_once(torch, torchvision, batches, warmup, steps, lr, seed):
    """Images per second over `steps` timed steps, and the last loss."""
    model = make_model(torch, torchvision, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for i in range(warmup):
        step(*batches[i])
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        loss = step(*batches[i])
    elapsed = time.perf_counter() - t0
    return steps * batches[0][0].shape[0] / elapsed, float(loss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    ap.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        sys.exit(f"torch_vit_cpu: --threads wants integers like 1,2, not '{args.threads}'")
    if (args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.repeats < 1 or not threads
            or min(threads) < 1):
        sys.exit("torch_vit_cpu: --batch, --steps, --repeats and --threads must be positive")

    if not import_torch():
        return 0
    blas = blas_alternative()
    print(f"torch_vit_cpu: libblas.so.3 -> {blas}", file=sys.stderr)
    if "openblas" not in blas.lower():
        print("torch_vit_cpu: WARNING: libblas.so.3 is not OpenBLAS; Debian's torch is about 10x "
              "slower on the reference BLAS, so these figures are not a fair peer "
              "(apt-get install libopenblas0-pthread)", file=sys.stderr)
    import torch
    import torchvision

    ncpu = os.cpu_count() or 1
    if max(threads) > ncpu:
        print(f"torch_vit_cpu: WARNING: {max(threads)} threads on {ncpu} CPUs", file=sys.stderr)
    batches = load_batches(torch, args.batch, args.warmup + args.steps, args.seed)
    for t in threads:
        torch.set_num_threads(t)
        blas_threads = set_blas_threads(t)
        rates, last_loss = [], None
        for _ in range(args.repeats):
            rate, last_loss = run_once(torch, torchvision, batches, args.warmup, args.steps,
                                       args.lr, args.seed)
            rates.append(round(rate, 2))
        print(json.dumps({
            "impl": "torch", "torch": torch.__version__, "torch_deb": deb_version("python3-torch"),
            "threads": t, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
            "images_per_s_median": round(statistics.median(rates), 2),
            "images_per_s_all": rates, "last_loss": round(last_loss, 4), "blas": blas,
            "blas_threads": blas_threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "cpu": cpu_name(), "ncpu": ncpu,
        }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
