"""What fp32 master weights cost: a full fine-tuning step of the default model in three precisions.

Variants, each in its own process (so peak memory is its own), on the same random batch:
- `fp32`: fp32 weights, AdamW (the CPU default);
- `bf16-plain`: bf16 weights stepped by AdamW directly (what GPU training did before: updates
  smaller than a weight's bf16 spacing are lost);
- `bf16-master`: bf16 weights and compute, AdamW on fp32 master copies
  (components/training/precision.py, what every training path now uses).
Each runs `--steps` optimizer steps at the authors' lr 2e-7 after one warm-up step and reports the
median step time, the peak memory (RSS on CPU; CUDA peak allocated on a GPU), the optimizer's
state in bytes (Adam moments + master copies), and the share of weights the steps changed (the
fp32 copies for bf16-master). Ratios against `bf16-plain` are the cost; `changed` is the benefit.
Writes benchmarks/results/precision.json.
Usage: python benchmarks/precision.py [--model DIR] [--steps 3] [--tokens 128] [--batch 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {"fp32": ("float32", False), "bf16-plain": ("bfloat16", False), "bf16-master": ("bfloat16", True)}


def state_bytes(opt) -> int:
    tensors = [t for s in opt.state.values() for t in s.values() if hasattr(t, "nbytes")]
    tensors += [m for _, m in getattr(opt, "pairs", [])]
    return sum(t.nbytes for t in tensors)


def trained(opt, model) -> list:
    """The weights training produced: the master copies where there are some, else the parameters."""
    masters = {id(p): m for p, m in getattr(opt, "pairs", [])}
    return [masters.get(id(p), p).detach().float().clone() for p in model.parameters()]


def measure(args, variant: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from components.training.precision import adamw

    dtype, master = VARIANTS[variant]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, dtype)).to(device).train()
    opt = adamw(list(model.parameters()), master, lr=2e-7, betas=(0.9, 0.95), weight_decay=0.0)
    shape = (args.batch, args.tokens)
    ids = torch.randint(0, model.config.vocab_size, shape, generator=torch.Generator().manual_seed(0)).to(device)

    def step() -> float:
        began = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - began

    step()  # warm-up (allocates the Adam moments)
    before = trained(opt, model)
    times = [step() for _ in range(args.steps)]
    after = trained(opt, model)
    changed = sum((a != b).sum().item() for a, b in zip(after, before)) / sum(a.numel() for a in after)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "variant": variant,
        "step_s_median": statistics.median(times),
        "step_s": times,
        "peak_memory_bytes": peak,
        "memory_kind": "cuda_max_allocated" if device.type == "cuda" else "process_max_rss",
        "optimizer_state_bytes": state_bytes(opt),
        "weights_changed_share": changed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--variant", choices=sorted(VARIANTS), help="internal: measure one variant and print JSON")
    parser.add_argument("--out", default="benchmarks/results/precision.json")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args, args.variant)))
        return
    rows = {}
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", variant, "--model", args.model, "--steps", str(args.steps)]
        cmd += ["--tokens", str(args.tokens), "--batch", str(args.batch)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows[variant] = json.loads(done.stdout.strip().splitlines()[-1])
        print(json.dumps(rows[variant]))
    plain, master = rows["bf16-plain"], rows["bf16-master"]
    result = {
        "model": args.model,
        "batch": args.batch,
        "tokens": args.tokens,
        "steps": args.steps,
        "machine": platform.platform(),
        "variants": rows,
        "master_vs_plain_step_time": master["step_s_median"] / plain["step_s_median"],
        "master_vs_plain_peak_memory": master["peak_memory_bytes"] / plain["peak_memory_bytes"],
        "master_vs_plain_optimizer_state": master["optimizer_state_bytes"] / plain["optimizer_state_bytes"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "variants"}, indent=2))


if __name__ == "__main__":
    main()
