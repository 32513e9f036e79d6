#!/usr/bin/env python3
"""fsdp's Hugging Face folders against transformers itself (run where transformers is: the GPU
machine's gpu/run.sh stage 5). For a Llama and a GPT-2-shaped model: trains a few steps with
--save-hf and --save-full, loads the folder with from_pretrained (strict: no missing or unexpected
tensor), checks every name and shape against a model transformers builds from the same
config.json, and compares greedy continuations of a prompt with `fsdp sample`'s.

    python3 tests/hf_vs_transformers.py --fsdp ./fsdp [--fixture tests/fixtures/hf_shapes.json]

--fixture writes what transformers built (each class's config keys, tensor names and shapes) as
JSON, for the C tests to hold fsdp's export to without transformers. Exits 1 on any mismatch.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

SHAPE = ["--layers", "2", "--hidden", "64", "--heads", "4", "--mlp", "96", "--seq", "32"]
MODELS = {"llama": ["--kv-heads", "2"], "transformer": []}
PROMPT = "Q: What is"


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"hf_vs_transformers: {' '.join(cmd)}: {out.stderr or out.stdout}")
    return out.stdout


def check(fsdp, model, work, fixture):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    hf, full = os.path.join(work, model), os.path.join(work, model + ".safetensors")
    run([fsdp, "train", "--model", model, *SHAPE, *MODELS[model], "--ranks", "2", "--steps", "40",
         "--save-hf", hf, "--save-full", full])
    loaded, info = AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(hf))
    want = {k: list(v.shape) for k, v in fresh.state_dict().items()}
    got = {k: list(v.shape) for k, v in loaded.state_dict().items()}
    if bad or want != got:
        print(f"{model}: loading info {bad}; shapes differ: "
              f"{ {k: (want.get(k), got.get(k)) for k in set(want) | set(got) if want.get(k) != got.get(k)} }")
        return False
    n = 20  # the prompt and its continuation within one sequence of 32: no window slides
    ours = run([fsdp, "sample", "--weights", full, "--prompt", PROMPT, "--tokens", str(n)])
    ids = torch.tensor([list(PROMPT.encode())])
    out = loaded.generate(ids, max_new_tokens=n, do_sample=False, attention_mask=torch.ones_like(ids))
    theirs = bytes(out[0].tolist()).decode("utf-8", errors="replace")
    same = ours.rstrip("\n") == theirs
    print(f"{model}: {type(loaded).__name__} loads strictly, {len(got)} tensors as transformers "
          f"builds them; greedy {n} bytes {'equal' if same else 'DIFFER'}:\n  fsdp: {ours!r}\n  "
          f"transformers: {theirs!r}")
    if fixture is not None:
        fixture[model] = {"class": type(loaded).__name__,
                          "config_keys": sorted(AutoConfig.from_pretrained(hf).to_dict()),
                          "tensors": want}
    return same


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fsdp", default="./fsdp")
    p.add_argument("--fixture", help="write transformers' names and shapes here (JSON)")
    args = p.parse_args()
    try:
        import transformers
    except ImportError as e:
        print(f"hf_vs_transformers: skipped: {e}", file=sys.stderr)
        return 0
    print(f"# transformers {transformers.__version__}")
    fixture = {} if args.fixture else None
    with tempfile.TemporaryDirectory() as work:
        ok = all([check(args.fsdp, m, work, fixture) for m in MODELS])
    if fixture is not None:
        fixture["transformers"] = transformers.__version__
        with open(args.fixture, "w") as f:
            json.dump(fixture, f, indent=1, sort_keys=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
