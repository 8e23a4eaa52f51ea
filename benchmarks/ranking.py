"""Benchmark: scoring N candidate actions of one dialogue state, shared prefix vs one forward each.

Reads: the model folder (--model, default models/smollm2-135m-instruct) and ColBench backend
tasks (--tasks, default data/colbench/backend_test.jsonl, `dvc pull` fetches it). Writes:
benchmarks/results/ranking.json (and prints it).

The workload is the critic's ranking step: a prompt of --prefix-tokens tokens (a task's reference
function, then a dialogue: the human's request, then agent questions quoting further tasks'
requests and the human answering with the task's hidden information, cut to the exact length)
and --n candidate actions of 40-120 tokens each (varied text: other tasks' code and requests;
lengths from a seeded RNG).
- naive:   `continuation_logprobs_naive`, one forward over prompt + candidate per candidate.
- batched: `continuation_logprobs`, the prompt once, candidates in chunks of --max-batch reusing
           its KV cache; also at each --sweep value (ratio_by_max_batch). On CPU small chunks
           win: less padding, and activations and the repeated prefix cache stay in the CPU's
           caches; on a GPU larger chunks pay off.
Each is warmed up once, then timed --repeat times, interleaved (the machine may be shared);
medians of wall time reported (`ratio`), and of this process's CPU time (`cpu_ratio_by_max_batch`,
the figure to compare when other work shares the cores). Every batched run must give the same
per-candidate mean log-prob as naive (what SWEET-RL's advantage averages, eq. 1) to 1e-3.
Goal: ratio naive_s / batched_s >= 3 on CPU.
Usage: python benchmarks/ranking.py [--prefix-tokens 800] [--n 16] [--max-batch 16] [--sweep 8 4]
                                    [--repeat 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from components.data.tasks import BackendTask, load_backend_tasks
from components.lm.shared_prefix import continuation_logprobs, continuation_logprobs_naive

REPO = Path(__file__).resolve().parents[1]


def build_prefix(tokenizer, tasks: list[BackendTask], n_tokens: int) -> list[int]:
    """A ColBench-like critic prompt: reference function, then a dialogue, cut to n_tokens."""
    first = tasks[0]
    text = f"Reference solution (hidden from the agent):\n{first.ground_truth}\n\nHuman: {first.problem_description}\n"
    turns = iter(tasks[1:])
    ids = tokenizer.encode(text, add_special_tokens=False)
    while len(ids) < n_tokens:
        other = next(turns)
        text += (
            f"Agent: Could you tell me more about the inputs and the expected output? "
            f"For example: {other.problem_description}\n"
            f"Human: {first.hidden_information}\n"
        )
        ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[:n_tokens]


def build_candidates(tokenizer, tasks: list[BackendTask], n: int, seed: int = 0) -> list[list[int]]:
    """n candidate actions, 40-120 tokens each: questions or code answers of varied tasks."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        task = tasks[(i * 7 + 3) % len(tasks)]
        text = (
            f"I would like to clarify: {task.problem_description}\n"
            if i % 2
            else f"Here is my answer:\n```python\n{task.ground_truth}\n```\n"
        )
        text = (text + " ") * 4  # long enough for the longest draw
        out.append(tokenizer.encode(text, add_special_tokens=False)[: rng.randint(40, 120)])
    return out


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(fn, *args, **kwargs) -> tuple[float, float, list[torch.Tensor]]:
    """(wall s, CPU s of this process, result) of one call."""
    cpu, start = _cpu_s(), time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, _cpu_s() - cpu, result


def compare(model, prefix, candidates, batches: list[int], repeat: int) -> tuple[dict, float]:
    """Median wall and CPU seconds of naive and of batched at each max_batch (runs interleaved),
    and the largest per-candidate mean log-prob difference between naive and any batched run."""
    runs: dict[str, list[tuple[float, float]]] = {"naive": [], **{f"batched_{b}": [] for b in batches}}
    diff = 0.0
    for _ in range(repeat):
        wall, cpu, naive = timed(continuation_logprobs_naive, model, prefix, candidates)
        runs["naive"].append((wall, cpu))
        for b in batches:
            wall, cpu, batched = timed(continuation_logprobs, model, prefix, candidates, max_batch=b)
            runs[f"batched_{b}"].append((wall, cpu))
            diff = max([diff] + [abs(x.mean().item() - y.mean().item()) for x, y in zip(naive, batched)])
    return {
        name: {
            "wall_s": round(statistics.median(w for w, _ in r), 3),
            "cpu_s": round(statistics.median(c for _, c in r), 3),
            "wall_runs_s": [round(w, 3) for w, _ in r],
        }
        for name, r in runs.items()
    }, diff


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models/smollm2-135m-instruct")
    parser.add_argument("--tasks", type=Path, default=REPO / "data/colbench/backend_test.jsonl")
    parser.add_argument("--prefix-tokens", type=int, default=800)
    parser.add_argument("--n", type=int, default=16, help="candidates per dialogue state")
    parser.add_argument("--max-batch", type=int, default=16, help="candidates per forward (the ratio)")
    parser.add_argument(
        "--sweep",
        type=int,
        nargs="*",
        default=[8, 4],
        help="further max_batch values timed alongside (ratio_by_max_batch)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/ranking.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tasks = load_backend_tasks(args.tasks)[:200]
    prefix = build_prefix(tokenizer, tasks, args.prefix_tokens)
    candidates = build_candidates(tokenizer, tasks, args.n)

    continuation_logprobs_naive(model, prefix, candidates[:2])  # warm-up
    continuation_logprobs(model, prefix, candidates[:2], max_batch=args.max_batch)
    batches = [args.max_batch] + [b for b in args.sweep if b != args.max_batch]
    timings, diff = compare(model, prefix, candidates, batches, args.repeat)
    naive_s, batched_s = timings["naive"]["wall_s"], timings[f"batched_{args.max_batch}"]["wall_s"]
    report = {
        "naive_s": naive_s,
        "batched_s": batched_s,
        "ratio": round(naive_s / batched_s, 2),
        "max_abs_diff": diff,
        "n_candidates": len(candidates),
        "prefix_tokens": len(prefix),
        "candidate_tokens": sum(len(c) for c in candidates),
        "threads": args.threads,
        "max_batch": args.max_batch,
        "repeat": args.repeat,
        "ratio_by_max_batch": {b: round(naive_s / timings[f"batched_{b}"]["wall_s"], 2) for b in batches},
        "cpu_ratio_by_max_batch": {
            b: round(timings["naive"]["cpu_s"] / timings[f"batched_{b}"]["cpu_s"], 2) for b in batches
        },
        "timings": timings,
        "model": args.model.name,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "argv": sys.argv[1:],
        "goal": "ratio >= 3 on CPU",
    }
    assert diff < 1e-3, f"batched and naive mean log-probs differ by {diff}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
