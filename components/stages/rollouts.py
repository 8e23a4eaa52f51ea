"""Rollouts: K sampled, scored trajectories per task of the training split (SWEET-RL step 1).

Implements step 1 of docs/algorithms.md "SWEET-RL": collect trajectories with the current actor and
score each. The paper uses 15k offline backend trajectories of the 8B actor; the authors' scripts
sample k=3 per task, our default (params `rollouts.per_task`). Later steps read this file: the
trajectory pairs of step 2 compare the K trajectories of one task.

Reads: the run task's records file (params `task` and the task's section, split `rollouts.split`,
first `rollouts.limit` tasks), the agent model (HF folder or id). Writes to the output folder:
- `trajectories.jsonl`: one `Trajectory` per episode (dialogue, exact token ids and log-probs of
  every agent action, answer, score); episode k of a task under run seed s has `sample` k and its
  own seed derived from (s, task id, k) (components/episodes/driver.py);
- `metrics.json`: n_tasks, n_trajectories, success_rate and mean_score (over trajectories;
  ColBench backend also as tests_passed),
  best_score (the highest trajectory score), solved_task_fraction (tasks with at least one
  success), contrast_task_fraction (tasks whose K scores are not all equal: the ones that give
  trajectory pairs), mean_turns, answered_rate and
  the speed of the episodes run now (episodes_run, engines, rollout_seconds (engine_seconds of
  them building or reaching the engine), episodes_per_s, agent_tokens_per_s);
- `episode_config.json`: the fingerprint the episodes were made under.

Episodes are appended as each ends and a re-run skips the (task, run seed, sample) already
written, unless the episode fingerprint changed (then all restart); scoring runs in the sandbox
once all exist and replaces the file atomically. All of it is the episode machinery
(`components/episodes/play.py`). Departure from the paper: the simulator defaults to the task's
offline one (ColBench backend: retrieval) on CPU (params `rollouts.simulator`), where the paper
uses a 70B LLM simulator.
With `rollouts.offline` set, the scored trajectories in that file are used instead of sampling
(the paper's offline setting: trajectories collected once, possibly by another actor); a file
holding trajectories of evaluation-split tasks is refused (it would leak the held-out tasks).
Run as `python -m components.stages.rollouts` so vLLM's memory is returned afterwards.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import numpy as np

from components.config.sections import EpisodeSection, RolloutsConfig, check_rollouts
from components.data.records import RecordError, Trajectory, read_jsonl
from components.data.split import Split
from components.episodes.play import replace_trajectories, run_and_score
from components.stages.evaluate import stage_main
from components.stages.result import StageResult
from components.tasks.base import Task


def rollout_metrics(trajs: Sequence[Trajectory], alias: str | None = None) -> dict[str, float]:
    """Headline figures of scored rollouts (see the module docstring)."""
    if not trajs:
        raise ValueError("no scored trajectories to summarize")
    scores: dict[int, list[float]] = defaultdict(list)
    solved: dict[int, bool] = defaultdict(bool)
    for t in trajs:
        scores[t.task_index].append(float(t.score or 0.0))
        solved[t.task_index] |= bool(t.success)
    mean_score = float(np.mean([t.score or 0.0 for t in trajs]))
    return ({alias: mean_score} if alias else {}) | {
        "n_tasks": len(scores),
        "n_trajectories": len(trajs),
        "success_rate": float(np.mean([bool(t.success) for t in trajs])),
        "mean_score": mean_score,
        "best_score": max(float(t.score or 0.0) for t in trajs),
        "solved_task_fraction": float(np.mean(list(solved.values()))),
        "contrast_task_fraction": float(np.mean([len(set(s)) > 1 for s in scores.values()])),
        "mean_turns": float(np.mean([len(t.turns) for t in trajs])),
        "answered_rate": float(np.mean([t.answered for t in trajs])),
    }


def offline_trajectories(path: Path, task: Task) -> list[Trajectory]:
    """Scored trajectories collected before (validated row by row), none of an evaluation-split
    task; RecordError names a bad row or the leaking tasks."""
    trajs = list(read_jsonl(path, Trajectory))
    unscored = [t.key for t in trajs if t.score is None]
    if not trajs or unscored:
        raise RecordError(
            f"{path}: offline rollouts must be scored trajectories; "
            + (f"{len(unscored)} are unscored (first: {unscored[0]})" if unscored else "the file is empty")
        )
    check_no_eval_tasks(path, trajs, task)
    return trajs


def check_no_eval_tasks(path: Path, trajs: Sequence[Trajectory], task: Task) -> None:
    """Refuse trajectories of tasks the evaluation plays: training the critic and actor on them would
    measure the trained model on tasks it learnt from (e.g. an evaluation's trajectories file)."""
    records, indices = task.load(Split.eval)
    held_out = {records[i].task_id for i in indices}
    leaked = [t for t in trajs if t.task_id in held_out]
    if leaked:
        ids = sorted({t.task_id for t in leaked})
        raise RecordError(
            f"{path}: {len(leaked)} of {len(trajs)} offline trajectories are of {len(ids)} evaluation-split "
            f"tasks (task ids {', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''}); training on them "
            "leaks the held-out tasks into the critic and actor. Use trajectories of training-split tasks "
            "(e.g. a rollouts stage's trajectories.jsonl, not an evaluation's)"
        )


def run(cfg: RolloutsConfig, episode: EpisodeSection, task: Task, out_dir: Path) -> StageResult:
    """Sample `cfg.per_task` scored trajectories per selected task; see the module docstring."""
    check_rollouts(cfg, episode)
    if cfg.offline is not None:
        trajs, speed = offline_trajectories(cfg.offline, task), {"episodes_run": 0}
        out_dir.mkdir(parents=True, exist_ok=True)
    else:
        trajs, speed = run_and_score(cfg, episode, task, out_dir, [cfg.seed], cfg.per_task, "rollouts")
    metrics = rollout_metrics(trajs, task.score_alias) | speed
    paths = {"trajectories.jsonl": replace_trajectories(out_dir, trajs), "metrics.json": out_dir / "metrics.json"}
    paths["metrics.json"].write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths=paths, metrics=metrics)


def main() -> None:
    stage_main("components.stages.rollouts", "rollouts", run)


if __name__ == "__main__":
    main()
