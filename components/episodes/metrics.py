"""Evaluation metrics of scored episodes, with 95% bootstrap intervals.

The official ColBench evaluation samples the agent at temperature 1.0 without a seed, so one
number hides its noise. We resample *tasks* with replacement (each task's value is its mean over
seeds), which gives the interval of the mean over the task population the split stands for.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np

from components.data.records import Trajectory


def bootstrap_ci(values: Sequence[float], samples: int, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of the mean of `values` (a point interval for <2 values)."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        m = float(arr.mean()) if arr.size else 0.0
        return m, m
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(samples, arr.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def per_task_means(trajs: Sequence[Trajectory], field: str) -> list[float]:
    """Each task's mean of a numeric trajectory field over its episodes (seeds)."""
    by_task: dict[int, list[float]] = defaultdict(list)
    for t in trajs:
        by_task[t.task_index].append(float(getattr(t, field) or 0.0))
    return [float(np.mean(v)) for _, v in sorted(by_task.items())]


def summarize(
    trajs: Sequence[Trajectory], bootstrap_samples: int, alias: str | None = None, groups: dict[int, str] | None = None
) -> dict[str, float]:
    """success_rate, mean_score (the graded score in [0, 1]), mean_turns, n and 95% intervals, pooled
    over seeds by task. `alias`: another name mean_score is also kept under (ColBench backend:
    tests_passed). `groups` (task index -> group): the same figures per group, as `<metric>_<group>`."""
    if not trajs:
        raise ValueError("no scored trajectories to summarize")
    success = per_task_means(trajs, "success")
    scores = per_task_means(trajs, "score")
    out = {
        "n": len(success),
        "episodes": len(trajs),
        "success_rate": float(np.mean(success)),
        "mean_score": float(np.mean(scores)),
        "mean_turns": float(np.mean([len(t.turns) for t in trajs])),
        "answered_rate": float(np.mean([t.answered for t in trajs])),
    }
    out["success_rate_ci_low"], out["success_rate_ci_high"] = bootstrap_ci(success, bootstrap_samples)
    out["mean_score_ci_low"], out["mean_score_ci_high"] = bootstrap_ci(scores, bootstrap_samples)
    if alias:
        out |= {key.replace("mean_score", alias): value for key, value in out.items() if key.startswith("mean_score")}
    for group in sorted(set((groups or {}).values())):
        part = [t for t in trajs if groups.get(t.task_index) == group]
        if part:
            out |= {f"{key}_{group}": value for key, value in _group_figures(part, bootstrap_samples).items()}
    return out


def _group_figures(trajs: Sequence[Trajectory], bootstrap_samples: int) -> dict[str, float]:
    success, scores = per_task_means(trajs, "success"), per_task_means(trajs, "score")
    low, high = bootstrap_ci(scores, bootstrap_samples)
    return {"n": len(success), "success_rate": float(np.mean(success)), "mean_score": float(np.mean(scores))} | {
        "mean_score_ci_low": low,
        "mean_score_ci_high": high,
    }


def per_seed(trajs: Sequence[Trajectory], alias: str | None = None) -> dict[int, dict[str, float]]:
    """success_rate and mean_score (and its `alias`) of each run seed's episodes alone (the spread over seeds)."""
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.run_seed].append(t)
    out = {}
    for seed, g in sorted(groups.items()):
        score = float(np.mean([t.score or 0.0 for t in g]))
        out[seed] = {"success_rate": float(np.mean([bool(t.success) for t in g])), "mean_score": score}
        out[seed] |= {alias: score} if alias else {}
    return out


def win_rate(mine: Sequence[Trajectory], reference: Sequence[Trajectory]) -> tuple[float, int] | None:
    """How often `mine` beats `reference` on the same task: per task (scores averaged over seeds and
    samples), 1 for a higher score, 1/2 for a tie, 0 for a lower one, averaged over the tasks both
    played (the paper's win rate of one model's designs against another's). None when they share
    no task; else (rate, number of tasks compared)."""
    ours, theirs = _task_scores(mine), _task_scores(reference)
    shared = sorted(set(ours) & set(theirs))
    if not shared:
        return None
    wins = [1.0 if ours[t] > theirs[t] else 0.5 if ours[t] == theirs[t] else 0.0 for t in shared]
    return float(np.mean(wins)), len(shared)


def _task_scores(trajs: Sequence[Trajectory]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.task_id].append(t.score or 0.0)
    return {task: float(np.mean(scores)) for task, scores in groups.items()}
