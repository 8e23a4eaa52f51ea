"""vLLM on CPU: torch.compile (vLLM's default) vs eager mode, side by side in one run.

Every pipeline step that samples (eval, rollouts, candidates, CORY) builds its own engine in its own
process, and on these CPUs vLLM's compile cache is not reused between processes, so each build
compiles again. Eager mode (`enforce_eager=True`, no torch.compile) builds faster but may decode
slower. For each mode this times the engine build and the episode driver on the same episodes as
benchmarks/rollout.py (retrieval simulator), and reports build + episodes, what a step pays.
Writes benchmarks/results/vllm_compile.json.
Usage: python benchmarks/vllm_compile.py [--episodes 32] [--turns 2] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from rollout import MODEL, jobs_for, run_driver  # benchmarks/rollout.py, beside this script

from components.engines.factory import make_engine
from components.episodes.driver import EpisodeConfig

MODES = {"compiled": False, "eager": True}


def measure(eager: bool, jobs, cfg: EpisodeConfig) -> dict:
    start = time.perf_counter()
    engine = make_engine("vllm", MODEL, max_model_len=4096, enforce_eager=eager)
    built = time.perf_counter() - start
    try:
        run, _ = run_driver(engine, jobs, cfg)
    finally:
        engine.close()
    return {"build_s": built, **run, "build_plus_episodes_s": built + run["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/vllm_compile.json"))
    args = parser.parse_args()
    cfg = EpisodeConfig(max_turns=args.turns, temperature=1.0, max_tokens=args.max_tokens, max_model_len=4096)
    jobs = jobs_for(args.episodes)
    result: dict = {
        "episodes": len(jobs),
        "turns": args.turns,
        "max_tokens": args.max_tokens,
        "machine": platform.processor() or platform.machine(),
    }
    for name, eager in MODES.items():
        result[name] = measure(eager, jobs, cfg)
    compiled, eager = result["compiled"], result["eager"]
    result["eager_vs_compiled_build"] = eager["build_s"] / compiled["build_s"]
    result["eager_vs_compiled_tokens_per_s"] = eager["tokens_per_s"] / compiled["tokens_per_s"]
    result["eager_vs_compiled_step_s"] = eager["build_plus_episodes_s"] / compiled["build_plus_episodes_s"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
