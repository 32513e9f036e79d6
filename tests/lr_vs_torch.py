# Checks fsdp's learning-rate schedules against PyTorch's own schedulers, step by step, in two
# halves that may run on two machines (PyTorch where it is installed, fsdp where it is built):
#   python3 tests/lr_vs_torch.py torch > rates.txt          # needs torch: its rates, 200 steps
#   python3 tests/lr_vs_torch.py compare rates.txt ./fsdp   # runs fsdp train --json, compares
import json
import struct
import subprocess
import sys
import warnings

STEPS = 200
# (kind, lr, warm-up steps, min lr, step size, gamma): fsdp's flags and PyTorch's arguments
CASES = [
    ("cosine", 0.001, 0, 0.0, 0, 0.0),
    ("cosine", 0.001, 10, 1e-4, 0, 0.0),
    ("cosine", 0.001, 199, 0.0, 0, 0.0),
    ("linear", 0.05, 0, 0.0, 0, 0.0),
    ("linear", 0.05, 20, 0.005, 0, 0.0),
    ("step", 0.05, 0, 0.0, 30, 0.5),
    ("step", 0.001, 10, 0.0, 7, 0.1),
    ("constant", 0.05, 10, 0.0, 0, 0.0),
]


def f32(x):  # fp32, as fsdp reads --lr and --min-lr and hands Adam the rate
    return struct.unpack("f", struct.pack("f", x))[0]


def torch_rates(kind, lr, warmup, min_lr, step_size, gamma):
    # the rate optimizer.step() uses at each step, scheduler.step() after it
    import torch

    sched = torch.optim.lr_scheduler
    lr, min_lr, rest = f32(lr), f32(min_lr), STEPS - warmup
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    warm = None
    if warmup and kind != "constant":
        warm = sched.LambdaLR(opt, lambda s: (s + 1) / warmup)
    main = None
    if kind == "cosine":
        main = sched.CosineAnnealingLR(opt, T_max=rest, eta_min=min_lr)
    elif kind == "linear":
        main = sched.LinearLR(opt, start_factor=1.0, end_factor=min_lr / lr, total_iters=rest)
    elif kind == "step":
        main = sched.StepLR(opt, step_size=step_size, gamma=gamma)
    if warm:
        main = sched.SequentialLR(opt, [warm, main], milestones=[warmup])
    elif warmup:  # constant after the warm-up
        main = sched.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    rates = []
    for _ in range(STEPS):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        if main:
            main.step()
    return rates


def fsdp_flags(kind, lr, warmup, min_lr, step_size, gamma):
    flags = ["--lr", repr(lr), "--lr-schedule", kind]
    if warmup:
        flags += ["--warmup-steps", str(warmup)]
    if kind in ("cosine", "linear"):
        flags += ["--min-lr", repr(min_lr)]
    if kind == "step":
        flags += ["--step-size", str(step_size), "--gamma", repr(gamma)]
    return flags


def main():
    if sys.argv[1:2] == ["torch"]:
        import torch

        warnings.filterwarnings("ignore")  # SequentialLR's step(0) is a deprecated call
        print("torch", torch.__version__)
        for case in CASES:
            print(" ".join(repr(r) for r in torch_rates(*case)))
        return 0
    lines = open(sys.argv[2]).read().splitlines()
    print("against", lines[0])
    bad = 0
    for case, line in zip(CASES, lines[1:]):
        flags = fsdp_flags(*case)
        out = subprocess.run([sys.argv[3], "train", "--steps", str(STEPS), "--json"] + flags,
                             check=True, capture_output=True, text=True).stdout
        ours = [f32(json.loads(l)["lr"]) for l in out.splitlines() if l.startswith('{"step"')]
        torch = [f32(float(r)) for r in line.split()]
        same = sum(o == t for o, t in zip(ours, torch))
        bad += same != STEPS
        print("%-78s %d/%d steps the same fp32 rate" % (" ".join(flags), same, STEPS))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
