"""Does training help? Zero-shot, RFT, multi-turn DPO and SWEET-RL over several seeds, on held-out tasks.

For each seed this runs the pipeline the way `make run` does (`sweetflow run --baselines mtdpo,rft`,
profile `default` unless told otherwise) with every seed of the run moved to that seed (rollouts,
candidates, pairs, critic and actor data order, evaluation), so each seed is a run folder of its
own. It then reads each evaluated model's `scores.jsonl` (one row per eval episode) and reports, per
algorithm and seed, mean_score and success_rate with their 95% intervals, and, pooled over seeds,
each algorithm's mean_score minus zero-shot's with a paired bootstrap interval over tasks (each
task's score averaged over seeds first). Wall times are the pipeline's, per seed.
Writes benchmarks/results/learning.json.
Usage: python benchmarks/learning.py [--seeds 0,1,2] [--profile default] [-S section.key=value ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ALGOS = ("zero-shot", "sweet", "mtdpo", "rft")
SEEDED = ("rollouts.seed", "candidates.seed", "pairs.seed", "critic.optim.seed", "actor.optim.seed")


def run_seed(seed: int, profile: str, extra: list[str]) -> tuple[Path, float]:
    """One pipeline run with every seed set to `seed`; its run folder and wall time."""
    sets = [f"{key}={seed}" for key in SEEDED] + [f"eval.seeds=[{seed}]", *extra]
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", profile, "--baselines", "mtdpo,rft"]
    cmd += [arg for s in sets for arg in ("-S", s)]
    params = subprocess.run([cmd[0], "params", *cmd[2:]], capture_output=True, text=True, check=True)
    run_dir = Path(params.stdout.splitlines()[0].rsplit("run folder ", 1)[1])
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return run_dir, time.perf_counter() - start


def eval_dirs(run_dir: Path) -> dict[str, Path]:
    """Where each algorithm's evaluation of iteration 1 (zero-shot: iteration 0) wrote its scores."""
    it = run_dir / "iter-1"
    return {
        "zero-shot": run_dir / "iter-0/eval",
        "sweet": it / "train/eval",
        "mtdpo": it / "mtdpo/eval",
        "rft": it / "rft/eval",
    }


def task_scores(folder: Path) -> dict[int, tuple[float, float]]:
    """Task index -> (score, success) of one evaluation (one seed: one episode per task)."""
    rows = [json.loads(line) for line in (folder / "scores.jsonl").read_text().splitlines() if line.strip()]
    return {r["index"]: (float(r["score"] or 0.0), float(bool(r["success"]))) for r in rows}


def bootstrap(values: np.ndarray, samples: int = 4000, seed: int = 0) -> tuple[float, float]:
    means = values[np.random.default_rng(seed).integers(0, len(values), (samples, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def summary(per_task: dict[int, tuple[float, float]]) -> dict:
    scores = np.array([s for s, _ in per_task.values()])
    success = np.array([w for _, w in per_task.values()])
    return {
        "n": len(per_task),
        "mean_score": float(scores.mean()),
        "mean_score_ci": bootstrap(scores),
        "success_rate": float(success.mean()),
        "success_rate_ci": bootstrap(success),
    }


def differences(by_algo: dict[str, list[dict[int, tuple[float, float]]]]) -> dict:
    """Each algorithm's mean_score minus zero-shot's, paired by task (averaged over seeds first)."""

    def pooled(runs: list[dict[int, tuple[float, float]]]) -> dict[int, float]:
        acc: dict[int, list[float]] = defaultdict(list)
        for run in runs:
            for task, (score, _) in run.items():
                acc[task].append(score)
        return {task: float(np.mean(v)) for task, v in acc.items()}

    base = pooled(by_algo["zero-shot"])
    out = {}
    for algo in ALGOS[1:]:
        mine = pooled(by_algo[algo])
        tasks = sorted(set(base) & set(mine))
        diff = np.array([mine[t] - base[t] for t in tasks])
        low, high = bootstrap(diff)
        out[algo] = {"mean_score_minus_zero_shot": float(diff.mean()), "ci": (low, high), "n_tasks": len(tasks)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one pipeline run each")
    parser.add_argument("--profile", default="default")
    parser.add_argument("-S", dest="sets", action="append", default=[], help="extra section.key=value overrides")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/learning.json"))
    args = parser.parse_args()
    result: dict = {"profile": args.profile, "machine": platform.processor() or platform.machine(), "seeds": {}}
    by_algo: dict[str, list] = defaultdict(list)
    for seed in [int(s) for s in args.seeds.split(",")]:
        run_dir, seconds = run_seed(seed, args.profile, args.sets)
        per_algo = {algo: task_scores(folder) for algo, folder in eval_dirs(run_dir).items() if folder.exists()}
        result["seeds"][seed] = {"run_dir": str(run_dir), "wall_s": seconds} | {
            algo: summary(scores) for algo, scores in per_algo.items()
        }
        for algo, scores in per_algo.items():
            by_algo[algo].append(scores)
    if all(by_algo.get(a) for a in ALGOS):
        result["minus_zero_shot"] = differences(by_algo)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result.get("minus_zero_shot", result), indent=2))


if __name__ == "__main__":
    main()
