#!/usr/bin/env python3
"""Hugging Face's LlamaForCausalLM under PyTorch FSDP2 beside `fsdp train --backend cuda --model
llama-125m`, on the same GPU in one run, in bf16: tokens/s, MFU and peak memory of each side.

Both sides train the same shape (fsdp's llama-125m preset: 12 layers of hidden 1,024, 16 heads
of 64, 4 K,V heads, SwiGLU MLP 2,560, RMSNorm eps 1e-5, RoPE base 500,000, untied lm_head, a
byte vocabulary of 256: 126,379,008 parameters) on the bytes of the same text, Adam at lr 3e-4,
next-token cross-entropy. PyTorch: LlamaConfig of that shape with attn_implementation "sdpa"
(flash attention on an H100/H200), `fully_shard` on each decoder layer and then on the root with
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): FSDP2's bf16 mixed precision,
as torchtitan sets it. Ours: `--param-dtype bf16 --reduce-dtype fp32`, flash attention.

    python3 bench/torch_llama_gpu.py --fsdp ./fsdp --text /usr/share/games/fortunes

For each --seq (default 1,024 and 4,096; the batch keeps 16,384 tokens a step) it prints one row:
each side's tokens/s (tokens a step over the median wall time of --steps steps after --warmup
untimed ones, each step ending with its loss read back on the host), the ratio ours/PyTorch
measured in this run, each side's model TFLOP/s and MFU, and each side's peak device memory.

FLOPs a token, as PaLM counts them: 6 x parameters (every matrix product forward and backward)
plus attention's 12 x layers x seq x hidden (q.k^T and p.v, forward and backward, the causal
mask not discounted). MFU is that over the GPU's bf16 dense peak (torch_fsdp2_gpu.PEAK_TFLOPS).

Needs torch with CUDA and transformers; exits 0 with one line on stderr when either is missing
or there is no GPU, so a caller can skip it.
"""

import argparse
import json
import os
import statistics
import sys

from torch_fsdp2_gpu import common_args, gpu_peaks, one_rank_or_skip, run_ours, timed_steps

SHAPE = dict(layers=12, hidden=1024, heads=16, kv_heads=4, mlp=2560, vocab=256)
PARAMS = 126_379_008  # fsdp plan --model llama-125m
TOKENS_PER_STEP = 16384


def read_text(path):
    """The text as fsdp reads it: a file, or a folder's files in path order, hidden names and
    symbolic links skipped, files holding a 0 byte left out (gzip'd ones decompressed)."""
    import gzip
    files = [path]
    if os.path.isdir(path):
        files = []
        for root, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for n in names:
                p = os.path.join(root, n)
                if not n.startswith(".") and os.path.isfile(p) and not os.path.islink(p):
                    files.append(p)
        files.sort(key=lambda p: p.encode())
    out = bytearray()
    for p in files:
        with open(p, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        if os.path.isdir(path) and b"\0" in data:
            continue
        out += data
    return bytes(out)


def flops_per_token(seq):
    return 6 * PARAMS + 12 * SHAPE["layers"] * seq * SHAPE["hidden"]


def build_llama(seq):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["hidden"],
                      intermediate_size=SHAPE["mlp"], num_hidden_layers=SHAPE["layers"],
                      num_attention_heads=SHAPE["heads"], num_key_value_heads=SHAPE["kv_heads"],
                      max_position_embeddings=seq, rms_norm_eps=1e-5, rope_theta=500000.0,
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    if n != PARAMS:
        raise SystemExit(f"torch_llama_gpu: LlamaForCausalLM has {n} parameters, fsdp's "
                         f"llama-125m {PARAMS}: the shapes differ")
    return model


def time_torch(seq, batch, args, text):
    """(tokens/s, peak bytes, last loss)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    torch.manual_seed(0)
    model = build_llama(seq)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    data = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)

    def step(i):
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        rows = torch.stack([data[s:s + seq + 1] for s in starts.tolist()]).long().cuda()
        # every position predicts the byte after it, as ours: seq predictions from seq + 1 bytes
        logits = model(input_ids=rows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, SHAPE["vocab"]),
                                                 rows[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    times, last = timed_steps(step, args.warmup, args.steps)
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return batch * seq / statistics.median(times), peak, last


def time_ours(seq, batch, args):
    cmd = [args.fsdp, "train", "--backend", "cuda", "--model", "llama-125m", "--ranks", "1",
           "--seq", str(seq), "--batch-size", str(batch), "--steps", str(args.warmup + args.steps),
           "--param-dtype", "bf16", "--reduce-dtype", "fp32", "--lr", "3e-4", "--json",
           "--text", args.text]
    res = run_ours(cmd, args.warmup)
    if "error" in res:
        return res
    return {"tok_s": batch * seq / statistics.median(res["timed"]), "peak_bytes": res["peak"],
            "last_loss": res["last"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common_args(p)
    p.add_argument("--text", default=os.environ.get("FSDP_TEXT", "/usr/share/games/fortunes"))
    p.add_argument("--seqs", default="1024,4096")
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    torch = one_rank_or_skip("torch_llama_gpu", 29512, ["transformers"])
    if torch is None:
        return 0
    import torch.distributed as dist
    import transformers
    text = read_text(args.text)
    name = torch.cuda.get_device_name(0)
    peaks = gpu_peaks(name, args.peak_tflops)
    bf16 = peaks["bf16"] if peaks else None
    print(f"# {name}, torch {torch.__version__}, transformers {transformers.__version__}; world "
          f"size 1; llama-125m ({PARAMS:,} parameters, bytes as tokens); {len(text):,} bytes of "
          f"{args.text}")
    print(f"# tok/s = tokens a step / median wall time of {args.steps} steps after {args.warmup} "
          f"warm-up; ratio = ours / PyTorch, both measured in this run (>1: ours faster)")
    print(f"# MFU: (6 x params + 12 x layers x seq x hidden) FLOPs a token over the bf16 dense "
          f"peak, {bf16 if bf16 else 'unknown (give --peak-tflops)'} TFLOP/s")
    head = (f"{'seq':>5} {'batch':>5} {'torch tok/s':>11} {'ours tok/s':>10} {'ours/torch':>10} "
            f"{'torch MFU':>9} {'ours MFU':>8} {'torch MiB':>9} {'ours MiB':>9}  note")
    print(head)
    print("-" * len(head))
    for seq in (int(s) for s in args.seqs.split(",")):
        batch = max(1, TOKENS_PER_STEP // seq)
        t_tok, t_peak, t_loss = time_torch(seq, batch, args, text)
        ours = time_ours(seq, batch, args)
        o_tok = ours.get("tok_s")
        f = flops_per_token(seq)
        t_mfu = f"{100 * t_tok * f / 1e12 / bf16:.1f}%" if bf16 else "-"
        o_mfu = f"{100 * o_tok * f / 1e12 / bf16:.1f}%" if bf16 and o_tok else "-"
        o_peak = ours.get("peak_bytes")
        print(f"{seq:>5} {batch:>5} {t_tok:>11.0f} {(f'{o_tok:.0f}' if o_tok else '-'):>10} "
              f"{(f'{o_tok / t_tok:.3f}' if o_tok else '-'):>10} {t_mfu:>9} {o_mfu:>8} "
              f"{t_peak / 2**20:>9.1f} {(f'{o_peak / 2**20:.1f}' if o_peak else '-'):>9}  "
              f"{ours.get('error', '')}", flush=True)
        if args.json:
            print(json.dumps({"seq": seq, "batch": batch, "torch_tok_s": t_tok,
                              "torch_peak_bytes": t_peak, "torch_last_loss": t_loss,
                              "flops_per_token": f, "peak_tflops": bf16, "ours": ours}),
                  flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
