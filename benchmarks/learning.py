"""Does training help, and does SWEET-RL's critic? Zero-shot, RFT, multi-turn DPO, SWEET-RL and its
untrained-critic ablation over several seeds, on held-out tasks, with the critic's quality.

For each seed this runs the pipeline the way `make run` does (`sweetflow run --baselines
mtdpo,rft,sweet-untrained`, profile `default` unless told otherwise) with every seed of the run moved
to that seed (rollouts, candidates, pairs, critic and actor data order, evaluation), so each seed is
a run folder of its own. It then reads each evaluated model's `scores.jsonl` (one row per eval
episode) and reports, per algorithm and seed, mean_score and success_rate with their 95% intervals;
pooled over seeds, paired by task (each task's score averaged over seeds first) with bootstrap
intervals: each algorithm minus zero-shot, SWEET-RL minus multi-turn DPO, and SWEET-RL minus
SWEET-RL with the untrained critic (the same differences per seed too); and each SWEET-RL critic's
quality figures (its run's critic_quality/metrics.json: held-out pair accuracy, turn-value
agreement, turn pairs), per seed and averaged, and its turn-value agreement minus the untrained
critic's pooled over the seeds' ranked states (paired by state, from each run's agreement.jsonl).
With `--best-of N`, each seed also evaluates the
base model with critic-guided best-of-N (`sweetflow eval --best-of N`) under the trained critic, the
untrained one (`--critic base`) and plain sampling (`--best-of 1`), on `--best-of-limit` held-out
tasks. Wall times are per seed. `--run SEED=DIR` reads a seed from a run folder that finished
before (say, in an earlier session) instead of running it again; where that folder no longer has its
per-task scores (a cleared DVC cache), the seed counts through each evaluation's metrics.json only.
`across_seeds` holds the same differences at the seed level: each seed's difference of mean scores,
their mean and a Student-t 95% interval over the seeds.
Writes benchmarks/results/learning.json.
Usage: python benchmarks/learning.py [--seeds 0,1,2] [--profile default|data128] [--baselines mtdpo,sweet-untrained]
       [--best-of 4] [-S section.key=value ...] [--run SEED=DIR ...]
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

from components.episodes.metrics import bootstrap_ci
from components.lm.critic_quality import share_difference
from components.tracking.frontier import t_interval

ALGOS = ("zero-shot", "sweet", "mtdpo", "rft", "sweet-untrained")
BASELINES = ",".join(ALGOS[2:])  # all of them by default
PAIRED = (("sweet", "mtdpo"), ("sweet", "sweet-untrained"))  # paired differences beside "minus zero-shot"
QUALITY = (  # critic_quality figures kept per seed and averaged
    "heldout_pair_accuracy_trained",
    "heldout_pair_accuracy_untrained",
    "heldout_pair_accuracy_trained_n",
    "train_pair_accuracy_trained",
    "turn_value_agreement_trained",
    "turn_value_agreement_untrained",
    "turn_value_agreement_learned",
    "turn_value_agreement_random",
    "turn_value_agreement_trained_comparisons",
    "turn_value_agreement_trained_minus_untrained",
    "turn_value_agreement_trained_minus_untrained_low",
    "turn_value_agreement_trained_minus_untrained_high",
    "turn_value_agreement_learned_minus_untrained",
    "turn_value_agreement_learned_minus_untrained_low",
    "turn_value_agreement_learned_minus_untrained_high",
    "turn_pairs_right",
    "turn_pairs_wrong",
    "turn_pairs_tie",
)
SEEDED = ("rollouts.seed", "candidates.seed", "pairs.seed", "critic.optim.seed", "actor.optim.seed")


def run_seed(seed: int, profile: str, baselines: str, extra: list[str]) -> tuple[Path, float]:
    """One pipeline run with every seed set to `seed`; its run folder and wall time."""
    sets = [f"{key}={seed}" for key in SEEDED] + [f"eval.seeds=[{seed}]", *extra]
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", profile, "--baselines", baselines]
    cmd += [arg for s in sets for arg in ("-S", s)]
    params = subprocess.run([cmd[0], "params", *cmd[2:]], capture_output=True, text=True, check=True)
    run_dir = Path(params.stdout.splitlines()[0].rsplit("run folder ", 1)[1])
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    return run_dir, time.perf_counter() - start


def eval_dirs(run_dir: Path) -> dict[str, Path]:
    """Where each algorithm's evaluation of iteration 1 (zero-shot: iteration 0) wrote its scores."""
    it = run_dir / "iter-1"
    return {"zero-shot": run_dir / "iter-0/eval", "sweet": it / "train/eval"} | {
        algo: it / algo / "eval" for algo in ALGOS[2:]
    }


def quality_of(run_dir: Path) -> dict[str, dict]:
    """Each SWEET-RL model's critic-quality figures (the run's own and its sweet-based baselines')."""
    it = run_dir / "iter-1"
    folders = {"sweet": it / "train"} | {a: it / a for a in ALGOS if a.startswith("sweet-")}
    out = {}
    for algo, folder in folders.items():
        path = folder / "critic_quality/metrics.json"
        if path.exists():
            metrics = json.loads(path.read_text())
            out[algo] = {k: metrics[k] for k in QUALITY if k in metrics}
    return out


def trained_critic(run_dir: Path) -> Path:
    return run_dir / "iter-1/train/critic/model"


def best_of_n(seed: int, profile: str, run_dir: Path, n: int, limit: int, extra: list[str]) -> dict:
    """The base model evaluated with critic-guided best-of-N: trained critic, untrained, plain sampling."""
    sweetflow = str(Path(sys.executable).parent / "sweetflow")
    arms = {"trained": (n, str(trained_critic(run_dir))), "untrained": (n, "base"), "plain": (1, None)}
    out = {}
    for arm, (count, critic) in arms.items():
        folder = run_dir / f"best-of/{arm}-{count}"
        cmd = [sweetflow, "eval", "--task", "elicitation", "--model", "models/smollm2-135m-instruct"]
        cmd += ["--best-of", str(count), "--profile", profile, "--seed", str(seed), "--limit", str(limit)]
        cmd += ["--out", str(folder), *(["--critic", critic] if critic else [])]
        cmd += [arg for s in extra for arg in ("-S", s)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        out[arm] = {"best_of": count, "wall_s": time.perf_counter() - start} | summary(task_scores(folder))
    return out


def task_scores(folder: Path) -> dict[int, tuple[float, float]]:
    """Task index -> (score, success) of one evaluation (one seed: one episode per task)."""
    rows = [json.loads(line) for line in (folder / "scores.jsonl").read_text().splitlines() if line.strip()]
    return {r["index"]: (float(r["score"] or 0.0), float(bool(r["success"]))) for r in rows}


def seed_summary(folder: Path) -> tuple[dict, dict[int, tuple[float, float]] | None]:
    """One evaluation's summary and per-task scores; from its metrics.json alone (no per-task
    scores) when scores.jsonl is gone."""
    if (folder / "scores.jsonl").exists():
        per_task = task_scores(folder)
        return summary(per_task), per_task
    m = json.loads((folder / "metrics.json").read_text())
    ci = (m["mean_score_ci_low"], m["mean_score_ci_high"])
    return {"n": m["n"], "mean_score": m["mean_score"], "mean_score_ci": ci, "from": "metrics.json"}, None


def comparisons(present: list[str]) -> list[tuple[str, str]]:
    """The differences reported, among the algorithms `present` (in ALGOS order): each minus
    zero-shot, then PAIRED."""
    baseline = [(a, "zero-shot") for a in present[1:]] if "zero-shot" in present else []
    return baseline + [(a, b) for a, b in PAIRED if a in present and b in present]


def across_seeds(seeds: dict) -> dict:
    """Each comparison's per-seed difference of mean scores, their mean and a t interval over seeds."""
    out = {}
    for a, b in comparisons([a for a in ALGOS if any(a in entry for entry in seeds.values())]):
        diffs = [e[a]["mean_score"] - e[b]["mean_score"] for e in seeds.values() if a in e and b in e]
        mean, low, high = t_interval(np.array(diffs))
        ci = (low, high) if len(diffs) > 1 else None
        out[f"{a} minus {b}"] = {"per_seed": diffs, "difference": mean, "ci": ci, "n_seeds": len(diffs)}
    return out


def bootstrap(values: np.ndarray) -> tuple[float, float]:
    return bootstrap_ci(values, samples=4000)


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

    def paired(a: str, b: str) -> dict:
        mine, base = pooled(by_algo[a]), pooled(by_algo[b])
        tasks = sorted(set(base) & set(mine))
        diff = np.array([mine[t] - base[t] for t in tasks])
        low, high = bootstrap(diff)
        return {"difference": float(diff.mean()), "ci": (low, high), "n_tasks": len(tasks)}

    return {f"{a} minus {b}": paired(a, b) for a, b in comparisons([a for a in ALGOS if by_algo.get(a)])}


def pooled_agreement(run_dirs: list[Path]) -> dict:
    """SWEET-RL's trained and learned turn-value agreement minus the untrained critic's, over every
    seed's ranked states together (paired by state)."""
    rows = []
    for run_dir in run_dirs:
        path = run_dir / "iter-1/train/critic_quality/agreement.jsonl"
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    if not rows:
        return {}
    counts = np.array([r["comparisons"] for r in rows], dtype=float)
    column = {n: np.array([r[n] for r in rows], dtype=float) for n in ("trained", "untrained", "learned")}
    untrained = column["untrained"]
    return {f"{n} minus untrained": share_difference(column[n], untrained, counts) for n in ("trained", "learned")}


def mean_quality(seeds: dict) -> dict:
    """Each critic-quality figure averaged over the seeds that have it."""
    acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for entry in seeds.values():
        for algo, figures in entry.get("critic_quality", {}).items():
            for key, value in figures.items():
                acc[algo][key].append(value)
    return {algo: {k: float(np.mean(v)) for k, v in figs.items()} for algo, figs in acc.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one pipeline run each")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--baselines", default=BASELINES, help="the `sweetflow run --baselines` of every seed")
    parser.add_argument("-S", dest="sets", action="append", default=[], help="extra section.key=value overrides")
    parser.add_argument("--best-of", type=int, default=0, help="N of the best-of-N evaluations (0: none)")
    parser.add_argument("--best-of-limit", type=int, default=32, help="held-out tasks of each best-of-N evaluation")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/learning.json"))
    parser.add_argument(
        "--run",
        dest="runs",
        action="append",
        default=[],
        metavar="SEED=DIR",
        help="read that seed from a finished run folder instead of running it (wall_s is then null)",
    )
    args = parser.parse_args()
    finished = {int(seed): Path(folder) for seed, folder in (run.split("=", 1) for run in args.runs)}
    result: dict = {"profile": args.profile, "machine": platform.processor() or platform.machine(), "seeds": {}}
    by_algo: dict[str, list] = defaultdict(list)
    for seed in [int(s) for s in args.seeds.split(",")]:
        if seed in finished:
            run_dir, seconds = finished[seed], None
        else:
            run_dir, seconds = run_seed(seed, args.profile, args.baselines, args.sets)
        read = {algo: seed_summary(folder) for algo, folder in eval_dirs(run_dir).items() if folder.exists()}
        per_algo = {algo: per_task for algo, (_, per_task) in read.items() if per_task is not None}
        entry = {"run_dir": str(run_dir), "wall_s": seconds} | {algo: figures for algo, (figures, _) in read.items()}
        entry["paired"] = differences({algo: [scores] for algo, scores in per_algo.items()})
        entry["critic_quality"] = quality_of(run_dir)
        critic = trained_critic(run_dir)
        if args.best_of and not critic.exists():
            print(f"seed {seed}: no best-of-N, its trained critic {critic} is gone", file=sys.stderr)
        elif args.best_of:
            entry["best_of"] = best_of_n(seed, args.profile, run_dir, args.best_of, args.best_of_limit, args.sets)
        result["seeds"][seed] = entry
        for algo, scores in per_algo.items():
            by_algo[algo].append(scores)
        result["paired"] = differences(by_algo)
        result["across_seeds"] = across_seeds(result["seeds"])
        result["critic_quality_mean"] = mean_quality(result["seeds"])
        result["agreement_pooled"] = pooled_agreement([Path(e["run_dir"]) for e in result["seeds"].values()])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")  # after each seed: nothing lost on a crash
    shown = ("paired", "across_seeds", "critic_quality_mean", "agreement_pooled")
    print(json.dumps({k: result[k] for k in shown}, indent=2))


if __name__ == "__main__":
    main()
