#!/usr/bin/python3
"""bench_vs_torch: vit-tiny's training speed on the CPU, fsdp against PyTorch, interleaved.

Each of --rounds rounds runs build/bench_vit once (1 rank x batch, N ranks x batch/N, then the
model's GEMMs alone through OpenBLAS) and then bench/torch_vit_cpu.py once (torchvision's same
model at each thread count), so a machine whose speed drifts moves both sides alike. Prints
every round's figures, then the medians, the ratios taken round by round (fsdp 1 rank against
PyTorch's best thread count, N ranks against 1 rank) and the model's FLOP rate beside OpenBLAS's
at the model's own shapes (operands in cache, and each Linear on its own buffers).

    /usr/bin/python3 bench/bench_vs_torch.py --bench build/bench_vit --rounds 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def run(cmd):
    """The command's JSON lines; its stderr passes through. Exits on a failed command."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"bench_vs_torch: {' '.join(cmd)} exited {proc.returncode}")
    return json_lines(proc.stdout)


def one_round(args):
    """{'fsdp': {ranks: line}, 'gemm': line, 'torch': {threads: line}} for one round."""
    fsdp = run([args.bench, "--batch", str(args.batch), "--ranks", str(args.ranks),
                "--steps", str(args.steps), "--repeats", "1"])
    torch = run([sys.executable, os.path.join(HERE, "torch_vit_cpu.py"), "--batch",
                 str(args.batch), "--threads", args.threads, "--repeats", "1"])
    return {"fsdp": {j["ranks"]: j for j in fsdp if j["impl"] == "fsdp"},
            "gemm": next(j for j in fsdp if j["impl"] == "openblas_sgemm"),
            "torch": {j["threads"]: j for j in torch}}


def median(values):
    return statistics.median(values)


def summarize(rounds, ranks):
    rate = lambda r, n: r["fsdp"][n]["images_per_s_median"]  # noqa: E731
    one = [rate(r, 1) for r in rounds]
    many = [rate(r, ranks) for r in rounds] if ranks > 1 else one
    if not rounds[0]["torch"]:
        print("bench_vs_torch: PyTorch skipped (see above); fsdp alone:")
    torch_threads = sorted(rounds[0]["torch"])
    torch = {t: [r["torch"][t]["images_per_s_median"] for r in rounds] for t in torch_threads}
    gemm1 = [r["gemm"]["gflops_1_thread"] for r in rounds]
    gemmp = [r["gemm"]["gflops_pool"] for r in rounds]
    gemmo = [r["gemm"]["gflops_pool_own_buffers"] for r in rounds]
    mflop = rounds[0]["fsdp"][1]["mflop_per_image"]
    fmt = lambda xs: ", ".join(f"{x:.0f}" for x in xs)  # noqa: E731
    print(f"\nmedians of {len(rounds)} interleaved rounds (images/s; each round's figures after "
          "the colon):")
    print(f"  fsdp 1 rank x {rounds[0]['fsdp'][1]['batch_per_rank']}: {median(one):.0f}: "
          f"{fmt(one)}")
    if ranks > 1:
        pairs = [m / o for m, o in zip(many, one)]
        print(f"  fsdp {ranks} ranks x {rounds[0]['fsdp'][ranks]['batch_per_rank']}: "
              f"{median(many):.0f}: {fmt(many)}; {median(pairs):.3f}x 1 rank (median of the "
              "rounds' ratios)")
    best = None
    for t in torch_threads:
        print(f"  PyTorch {t} thread{'s' if t > 1 else ''}: {median(torch[t]):.0f}: "
              f"{fmt(torch[t])}")
        if best is None or median(torch[t]) > median(torch[best]):
            best = t
    if best is not None:
        pairs = [o / p for o, p in zip(one, torch[best])]
        print(f"  fsdp 1 rank / PyTorch's best ({best} thread{'s' if best > 1 else ''}): "
              f"{median(pairs):.2f}x (median of the rounds' ratios; {median(one) / median(torch[best]):.2f}x "
              "of the medians)")
    model = [o * mflop / 1e3 for o in one]
    ref = max(median(gemm1), median(gemmp))
    print(f"  the model: {mflop:.1f} MFLOP an image; at 1 rank {median(model):.1f} GFLOP/s "
          f"against OpenBLAS's sgemm at the model's GEMM shapes, timed in the same rounds: "
          f"{median(gemm1):.1f} GFLOP/s on 1 thread, {median(gemmp):.1f} on the pool of "
          f"{rounds[0]['gemm']['pool_threads']} ({rounds[0]['gemm']['openblas']} kernels): "
          f"{100 * median(model) / ref:.0f}% of the better")
    print(f"  the same GEMMs on the pool with every Linear on its own buffers, as a step holds "
          f"them (its operands out of cache when it runs again): {median(gemmo):.1f} GFLOP/s; "
          f"the model at {100 * median(model) / median(gemmo):.0f}% of that")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="build/bench_vit")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit("bench_vs_torch: --rounds must be positive")
    rounds = []
    for i in range(args.rounds):
        r = one_round(args)
        rounds.append(r)
        line = " ".join(f"fsdp{n}={j['images_per_s_median']:.0f}" for n, j in r["fsdp"].items())
        line += f" gemm1={r['gemm']['gflops_1_thread']:.0f} gemm_pool={r['gemm']['gflops_pool']:.0f}"
        line += f" gemm_own={r['gemm']['gflops_pool_own_buffers']:.0f}"
        line += "".join(f" torch{t}={j['images_per_s_median']:.0f}" for t, j in r["torch"].items())
        print(f"round {i + 1}: {line}", flush=True)
    summarize(rounds, args.ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
