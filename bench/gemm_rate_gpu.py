#!/usr/bin/env python3
"""What a GPU sustains on a training step's matrix products, in bf16: the figure sim/cost.c's
gemm_eff and attn_eff want for a Hopper profile, measured on the shapes a step runs rather than
on the best shape of a sweep.

The shapes are one Llama 3 8B block's at 16,384 tokens (torchtitan's table 1: batch 2 x seq
8,192, the rows docs/plan.md holds the plan to): its seven Linears, each as a step runs it,
forward (x W^T), input gradient (dy W) and weight gradient (dy^T x), 21 products with the
operand layouts nn.Linear gives cuBLAS; and its attention, flash (SDPA's FLASH_ATTENTION
backend, what torchtitan's runs used), causal, 32 heads over 8 K,V heads of 128, forward and
backward.

    python3 bench/gemm_rate_gpu.py --seconds 20 --out DIR/gemm_rates.json
    python3 bench/gemm_rate_gpu.py --list     # the shapes and their FLOPs, no GPU needed

It prints a line per product (TFLOP/s over --each seconds of it alone, after a warm-up) and two
sustained rates: the 21 products back to back in a step's order, and attention's forward and
backward, each repeated for --seconds so the clock settles at the power limit; with the SM clock
and board power nvidia-smi reads at the end, and each rate's share of the bf16 dense peak
(torch_fsdp2_gpu.PEAK_TFLOPS). The sustained sequence's share is the gemm_eff of the GPU's
profile; attention's, its attn_eff.

Needs torch with CUDA; exits 0 with one line on stderr without them, so a caller can skip it.
"""

import argparse
import json
import subprocess
import sys

# Llama 3 8B (fsdp plan --model llama3-8b): hidden, K,V width, MLP, heads, K,V heads, head dim
HIDDEN, KV, MLP, HEADS, KV_HEADS, HEAD_DIM = 4096, 1024, 14336, 32, 8, 128
BATCH, SEQ = 2, 8192
TOKENS = BATCH * SEQ

# (name, in, out) of each Linear, in the order the block's forward runs them
LINEARS = [("q", HIDDEN, HIDDEN), ("k", HIDDEN, KV), ("v", HIDDEN, KV), ("o", HIDDEN, HIDDEN),
           ("gate", HIDDEN, MLP), ("up", HIDDEN, MLP), ("down", MLP, HIDDEN)]


def products():
    """The block's 21 products as (name, pass, M, N, K): forward y[T, out] = x[T, in] W^T;
    backward, from the last Linear to the first, dx[T, in] = dy[T, out] W and
    dW[out, in] = dy^T x, a contraction over the tokens."""
    out = [(name, "forward", TOKENS, o, i) for name, i, o in LINEARS]
    for name, i, o in reversed(LINEARS):
        out.append((name, "input grad", TOKENS, i, o))
        out.append((name, "weight grad", o, i, TOKENS))
    return out


def attention_flops():
    """q.k^T and p.v, 2 flops a multiply-add, half the scores under the causal mask: forward
    2 x 2 x B x heads x T^2 x D / 2; backward 2.5 times it (flash recomputes the scores)."""
    forward = 2 * BATCH * HEADS * SEQ * SEQ * HEAD_DIM
    return forward, 2.5 * forward


def list_shapes(as_json):
    rows = [dict(name=n, pass_=p, m=m, n=nn, k=k, flops=2 * m * nn * k)
            for n, p, m, nn, k in products()]
    fwd, bwd = attention_flops()
    if as_json:
        print(json.dumps(dict(tokens=TOKENS, products=[{("pass" if key == "pass_" else key): v
                                                        for key, v in r.items()} for r in rows],
                              attention=dict(forward=fwd, backward=bwd))))
        return
    for r in rows:
        print(f"{r['name']:>5} {r['pass_']:<11} {r['m']:>6} x {r['n']:>6} x {r['k']:>6} "
              f"{r['flops'] / 1e12:8.3f} TFLOP")
    total = sum(r["flops"] for r in rows)
    print(f"the block's products: {total / 1e12:.3f} TFLOP; attention {fwd / 1e12:.3f} forward, "
          f"{bwd / 1e12:.3f} backward")


def smi_reading():
    """The SM clock (MHz) and board power (W) now, or None where nvidia-smi cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw",
                              "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10).stdout
        clock, power = (float(x) for x in out.strip().splitlines()[0].split(","))
        return dict(sm_mhz=clock, watts=power)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def operands(torch, name, pass_, m, n, k):
    """The two operands as nn.Linear hands them to cuBLAS: forward x @ W.t(), input grad
    dy @ W, weight grad dy.t() @ x (W is [out, in], x [T, in], dy [T, out])."""
    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    if pass_ == "forward":
        return rand(m, k), rand(n, k).t()
    if pass_ == "input grad":
        return rand(m, k), rand(k, n)
    return rand(k, m).t(), rand(k, n)


def timed(torch, fn, seconds, flops_per_call):
    """TFLOP/s of fn over about `seconds` of back-to-back calls, after three untimed ones: CUDA
    events around batches of about a quarter second, so the host never waits between calls."""
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, total_ms, batch = 0, 0.0, 1
    while total_ms < seconds * 1e3:
        start.record()
        for _ in range(batch):
            fn()
        stop.record()
        stop.synchronize()
        total_ms += start.elapsed_time(stop)
        calls += batch
        batch = max(1, int(250.0 / (total_ms / calls)))
    return flops_per_call * calls / (total_ms / 1e3) / 1e12


def measure(args):
    try:
        import torch
    except ImportError as e:
        print(f"gemm_rate_gpu: skipped: {e}", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("gemm_rate_gpu: skipped: no CUDA device", file=sys.stderr)
        return 0
    from torch_fsdp2_gpu import gpu_peaks
    name = torch.cuda.get_device_name(0)
    peaks = gpu_peaks(name, args.peak_tflops)
    peak = peaks["bf16"] if peaks else None
    rows, sequence = [], []
    for n, p, m, nn, k in products():
        a, b = operands(torch, n, p, m, nn, k)
        rate = timed(torch, lambda: torch.mm(a, b), args.each, 2 * m * nn * k)
        rows.append(dict(name=n, pass_=p, m=m, n=nn, k=k, tflops=rate))
        sequence.append((a, b))
        print(f"{n:>5} {p:<11} {m:>6} x {nn:>6} x {k:>6}: {rate:7.1f} TFLOP/s", flush=True)
    total = sum(2 * m * nn * k for _, _, m, nn, k in products())

    def whole_block():
        for a, b in sequence:
            torch.mm(a, b)
    block_rate = timed(torch, whole_block, args.seconds, total)
    block_smi = smi_reading()
    del sequence
    attn = attention_rate(torch, args.seconds)
    attn_smi = smi_reading()
    result = dict(gpu=name, peak_bf16=peak, torch=torch.__version__, tokens=TOKENS,
                  products=[{("pass" if key == "pass_" else key): v for key, v in r.items()}
                            for r in rows],
                  block=dict(tflops=block_rate, seconds=args.seconds, smi=block_smi),
                  attention=dict(attn, smi=attn_smi))
    share = (lambda r: f" ({r / peak:.3f} of {peak:g})") if peak else (lambda r: "")
    print(f"the block's 21 products back to back for {args.seconds:g} s: {block_rate:.1f} "
          f"TFLOP/s{share(block_rate)}, at {block_smi}")
    if "tflops" in attn:
        print(f"flash attention forward and backward for {args.seconds:g} s: "
              f"{attn['tflops']:.1f} TFLOP/s{share(attn['tflops'])}, at {attn_smi}")
    else:
        print(f"flash attention: {attn['skipped']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def attention_rate(torch, seconds):
    """SDPA's flash backend, causal, forward then backward, repeated. K and V come with all 32
    heads, as torchtitan's repeat_kv handed them to SDPA: the same products as grouped K,V."""
    import torch.nn.functional as F
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as e:
        return dict(skipped=f"no torch.nn.attention ({e})")

    def rand():
        return torch.randn(BATCH, HEADS, SEQ, HEAD_DIM, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True)
    q, k, v, dout = rand(), rand(), rand(), rand().detach()
    fwd, bwd = attention_flops()

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(out, (q, k, v), dout)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            rate = timed(torch, step, seconds, fwd + bwd)
    except RuntimeError as e:
        return dict(skipped=f"the flash backend refused: {str(e).splitlines()[0]}")
    return dict(tflops=rate, seconds=seconds, backend="FLASH_ATTENTION")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print the shapes and FLOPs and exit")
    ap.add_argument("--json", action="store_true", help="--list as one JSON object")
    ap.add_argument("--each", type=float, default=1.0, help="seconds of each product alone")
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="seconds of each sustained run (the block's products; attention)")
    ap.add_argument("--out", help="write the figures here as JSON")
    ap.add_argument("--peak-tflops", help="F,T,B: the GPU's fp32, tf32 and bf16 dense peaks")
    args = ap.parse_args()
    if args.list:
        list_shapes(args.json)
        return 0
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
