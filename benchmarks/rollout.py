"""Rollout speed, side by side in one run (writes benchmarks/results/rollout.json).

1. `driver_vllm`: N episodes of the episode driver on the vLLM engine (retrieval simulator).
2. `raw_vllm`:    the same token workload replayed with bare `vllm.LLM.generate`: per turn, the
                  same prompt ids, each forced to produce exactly as many tokens as the driver's
                  episode did (min_tokens = max_tokens, ignore_eos). Measures the driver overhead.
3. `driver_hf`:   the same N episodes (same tasks, seeds, protocol) on the transformers engine.

Engine build time (vLLM compiles for 75-115 s on CPU) is excluded: each engine is warmed up on a
short request first. Reported: episodes/s, generated tokens/s, and the ratios
driver_vllm/driver_hf (goal >= 6x on 2 CPU cores) and driver_vllm/raw_vllm (goal >= 0.9).
Usage: python benchmarks/rollout.py [--episodes 32] [--turns 2] [--max-tokens 128] [--skip-hf]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from components.config.sections import DataConfig, load_section
from components.data.split import Split, select
from components.data.tasks import load_backend_tasks
from components.engines.base import SamplingConfig
from components.engines.factory import make_engine
from components.episodes.driver import EpisodeConfig, EpisodeDriver, EpisodeJob, derive_seed
from components.episodes.simulators import RetrievalSimulator
from components.tasks.colbench_backend import ColbenchBackend

MODEL = "models/smollm2-135m-instruct"


def jobs_for(n: int) -> list[EpisodeJob]:
    data = load_section(DataConfig, "data")
    tasks = load_backend_tasks(data.backend_tasks)
    return [
        EpisodeJob(i, tasks[i], run_seed=0) for i in select(tasks, Split.all, data.eval_fraction, data.split_salt)[:n]
    ]


def warm_up(engine) -> None:
    engine.generate([engine.tokenizer.encode("Hello")], SamplingConfig(max_tokens=8), [0])


def run_driver(engine, jobs, cfg: EpisodeConfig) -> tuple[dict, list]:
    warm_up(engine)
    task = ColbenchBackend({"data": load_section(DataConfig, "data")})
    driver = EpisodeDriver(engine, RetrievalSimulator(), cfg, task)
    start = time.perf_counter()
    trajs = driver.run(jobs)
    seconds = time.perf_counter() - start
    tokens = sum(len(t.response_ids) for tr in trajs for t in tr.turns)
    return {
        "seconds": seconds,
        "episodes_per_s": len(trajs) / seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "turns": sum(len(tr.turns) for tr in trajs),
    }, trajs


def replay_raw(engine, trajs, cfg: EpisodeConfig) -> dict:
    """The driver's exact per-turn prompts and output lengths through bare vllm.LLM.generate."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    engine.llm.reset_prefix_cache()  # start cold, as the driver did: no hits from the driver's run
    seconds, tokens = 0.0, 0
    for turn in range(cfg.max_turns):
        batch = [(tr, tr.turns[turn]) for tr in trajs if len(tr.turns) > turn]
        if not batch:
            break
        prompts = [TokensPrompt(prompt_token_ids=t.prompt_ids) for _, t in batch]
        params = [
            SamplingParams(
                temperature=cfg.temperature,
                max_tokens=max(1, len(t.response_ids)),
                min_tokens=max(1, len(t.response_ids)),
                ignore_eos=True,
                logprobs=0,
                seed=derive_seed(tr.seed, "turn", turn),
            )
            for tr, t in batch
        ]
        start = time.perf_counter()
        outs = engine.llm.generate(prompts, params, use_tqdm=False)
        seconds += time.perf_counter() - start
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    return {
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "episodes_per_s": len(trajs) / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/rollout.json"))
    args = parser.parse_args()
    cfg = EpisodeConfig(max_turns=args.turns, temperature=1.0, max_tokens=args.max_tokens, max_model_len=4096)
    jobs = jobs_for(args.episodes)
    result = {
        "episodes": len(jobs),
        "turns": args.turns,
        "max_tokens": args.max_tokens,
        "machine": platform.processor() or platform.machine(),
    }
    vllm = make_engine("vllm", MODEL, max_model_len=4096)
    result["driver_vllm"], trajs = run_driver(vllm, jobs, cfg)
    result["raw_vllm"] = replay_raw(vllm, trajs, cfg)
    vllm.close()
    result["driver_vs_raw_tokens_per_s"] = result["driver_vllm"]["tokens_per_s"] / result["raw_vllm"]["tokens_per_s"]
    if not args.skip_hf:
        hf = make_engine("hf", MODEL)
        result["driver_hf"], _ = run_driver(hf, jobs, cfg)
        result["vllm_vs_hf_tokens_per_s"] = result["driver_vllm"]["tokens_per_s"] / result["driver_hf"]["tokens_per_s"]
        result["vllm_vs_hf_episodes_per_s"] = (
            result["driver_vllm"]["episodes_per_s"] / result["driver_hf"]["episodes_per_s"]
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
