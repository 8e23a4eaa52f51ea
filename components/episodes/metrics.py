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


def summarize(trajs: Sequence[Trajectory], bootstrap_samples: int) -> dict[str, float]:
    """success_rate, tests_passed, mean_turns, n and intervals, pooled over seeds by task."""
    if not trajs:
        raise ValueError("no scored trajectories to summarize")
    success = per_task_means(trajs, "success")
    passed = per_task_means(trajs, "score")
    out = {
        "n": len(success),
        "episodes": len(trajs),
        "success_rate": float(np.mean(success)),
        "tests_passed": float(np.mean(passed)),
        "mean_turns": float(np.mean([len(t.turns) for t in trajs])),
        "answered_rate": float(np.mean([t.answered for t in trajs])),
    }
    out["success_rate_ci_low"], out["success_rate_ci_high"] = bootstrap_ci(success, bootstrap_samples)
    out["tests_passed_ci_low"], out["tests_passed_ci_high"] = bootstrap_ci(passed, bootstrap_samples)
    return out


def per_seed(trajs: Sequence[Trajectory]) -> dict[int, dict[str, float]]:
    """success_rate and tests_passed of each run seed's episodes alone (the spread over seeds)."""
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.run_seed].append(t)
    return {
        seed: {
            "success_rate": float(np.mean([bool(t.success) for t in g])),
            "tests_passed": float(np.mean([t.score or 0.0 for t in g])),
        }
        for seed, g in sorted(groups.items())
    }
