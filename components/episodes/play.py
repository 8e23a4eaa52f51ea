"""Playing and scoring collaborative episodes for a stage: task selection, resume, the driver (built by
components/episodes/build.py), the task's scorer, and the files an episode stage writes (evaluation and rollouts
share all of it).

Any task of components/tasks plays through here. Episodes are appended to trajectories.jsonl as
each ends; a re-run after a crash skips the episodes already there, so nothing finished is lost or
duplicated. Scoring runs once all episodes exist, by the task's scorer (untrusted output runs in
the sandbox of components/scoring, never in this process), and rewrites the file with the scores.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

from components.cluster.connect import join
from components.config.cluster import cluster_section
from components.config.sections import EpisodeSection, EpisodeStageConfig
from components.data.records import Trajectory, read_resumable, write_jsonl
from components.episodes.async_driver import AsyncEpisodeDriver
from components.episodes.build import build_driver, close_engines, sampled_driver
from components.episodes.driver import EpisodeDriver, EpisodeJob, TurnSampler
from components.tasks.base import Task

log = logging.getLogger(__name__)


def select_tasks(task: Task, cfg: EpisodeStageConfig) -> tuple[list[Any], list[int]]:
    """All records of the split's file and the indices played (split, then the first `limit`)."""
    records, indices = task.load(cfg.split)
    return records, indices[: cfg.limit] if cfg.limit else indices


def wanted_keys(indices: list[int], seeds: list[int], samples: int = 1) -> list[tuple[int, int, int]]:
    """Every episode a stage wants, as (task index, run seed, sample), seeds outermost."""
    return [(i, s, k) for s in seeds for i in indices for k in range(samples)]


def pending_jobs(
    tasks: Sequence[Any], indices: list[int], seeds: list[int], done: list[Trajectory], samples: int = 1
) -> list[EpisodeJob]:
    """Episodes still to run: every (task, seed, sample < `samples`) not already in `done`."""
    finished = {(t.task_index, t.run_seed, t.sample) for t in done}
    return [
        EpisodeJob(task_index=i, task=tasks[i], run_seed=s, sample=k)
        for i, s, k in wanted_keys(indices, seeds, samples)
        if (i, s, k) not in finished
    ]


def run_episodes(
    cfg: EpisodeStageConfig,
    episode: EpisodeSection,
    task: Task,
    jobs: list[EpisodeJob],
    traj_path: Path,
    seed: int,
    sampler: TurnSampler | None = None,
) -> dict[str, float]:
    """Run `jobs`, appending each trajectory to `traj_path` as it ends; return speed figures. One
    engine, or `cluster.rollout_engines` engines on the run's Ray cluster (components/cluster);
    with a turn hook `sampler`, one engine and the sync driver (`sampled_driver`)."""
    if not jobs:
        return {"episodes_run": 0}
    placement = cluster_section()
    append = lambda t: write_jsonl(traj_path, [t], append=True)  # noqa: E731
    start = time.perf_counter()
    engine_s = 0.0  # building the engine (sharded on Ray: inside the actors, not measured here)
    if placement.rollout_engines > 1 and sampler is None and join(placement):
        from components.cluster.episodes import play_sharded

        engines = min(placement.rollout_engines, len(jobs))
        trajs, reencoded = play_sharded(cfg, episode, task, jobs, seed, engines, placement.tensor_parallel, append)
    else:
        if sampler is not None and placement.rollout_engines > 1:
            log.warning("cluster.rollout_engines is %d: %s runs on one engine", placement.rollout_engines, sampler)
        engines = 1
        if sampler is None:
            driver = build_driver(cfg, episode, seed, task, placement.tensor_parallel)
        else:
            driver = sampled_driver(cfg, episode, seed, task, placement.tensor_parallel, sampler)
        engine_s = time.perf_counter() - start
        trajs, reencoded = _play(driver, jobs, append)
    elapsed = time.perf_counter() - start
    tokens = sum(len(turn.response_ids) for t in trajs for turn in t.turns)
    return {
        "episodes_run": len(trajs),
        "engines": engines,
        "rollout_seconds": elapsed,
        "engine_seconds": engine_s,
        "episodes_per_s": len(trajs) / elapsed,
        "agent_tokens_per_s": tokens / elapsed,
        "prompt_reencoded": reencoded,
    }


def _play(driver: EpisodeDriver | AsyncEpisodeDriver, jobs: list[EpisodeJob], on_done) -> tuple[list[Trajectory], int]:
    """`jobs` on one driver, its engines closed after; the trajectories and the prompts re-encoded."""
    try:
        return driver.run(jobs, on_done=on_done), driver.stats.prompt_reencoded
    finally:
        close_engines(driver)


def score_trajectories(task: Task, records: Sequence[Any], trajs: list[Trajectory]) -> list[Trajectory]:
    """Fill each trajectory's score fields from the task's scorer."""
    results = task.score(records, [(t.task_index, t.answer) for t in trajs])
    scored = []
    for traj, res in zip(trajs, results):
        if res.index != traj.task_index:
            raise RuntimeError(f"scorer returned task {res.index} where task {traj.task_index} was expected")
        scored.append(
            traj.model_copy(
                update={
                    "score": res.score,
                    "passed": res.passed,
                    "total": res.total,
                    "success": res.success,
                    "error": res.error,
                }
            )
        )
    return scored


def replace_trajectories(out_dir: Path, trajs: list[Trajectory]) -> Path:
    """Atomically replace out_dir/trajectories.jsonl with `trajs` (a crash leaves the old file whole)."""
    path = out_dir / "trajectories.jsonl"
    tmp = path.with_suffix(".jsonl.tmp")
    write_jsonl(tmp, trajs)
    os.replace(tmp, path)
    return path


def write_outputs(out_dir: Path, trajs: list[Trajectory], metrics: dict) -> dict[str, Path]:
    """trajectories.jsonl (atomically replaced, now scored), scores.jsonl, metrics.json."""
    paths = {
        "trajectories.jsonl": replace_trajectories(out_dir, trajs),
        "scores.jsonl": out_dir / "scores.jsonl",
        "metrics.json": out_dir / "metrics.json",
    }
    rows = [
        {
            "index": t.task_index,
            "task_id": t.task_id,
            "seed": t.run_seed,
            "score": t.score,
            "passed": t.passed,
            "total": t.total,
            "success": t.success,
            "error": t.error,
        }
        for t in trajs
    ]
    write_jsonl(paths["scores.jsonl"], rows)
    paths["metrics.json"].write_text(json.dumps(metrics, indent=2) + "\n")
    return paths


def episode_fingerprint(cfg: EpisodeStageConfig, episode: EpisodeSection, task: Task, section: str = "eval") -> dict:
    """What an episode's content depends on; episodes made under another fingerprint are not reused.

    The agent fields are keyed by the stage's section name (an output folder of one stage is
    never reused by the other). `episode.driver` is left out: both drivers compute the same
    episodes (only their order in the file differs), so switching it resumes them.
    """
    keep = ("model", "engine", "simulator", "simulator_model", "simulator_engine")
    return {
        section: {k: str(getattr(cfg, k)) for k in keep},
        "episode": episode.model_dump(mode="json", exclude={"driver"}),
        "task": task.name,
        "tasks": str(task.tasks_file(cfg.split)),
    }


def reset_if_config_changed(out_dir: Path, fingerprint: dict) -> None:
    """Start the episodes afresh when the folder holds episodes of another configuration."""
    path, traj_path = out_dir / "episode_config.json", out_dir / "trajectories.jsonl"
    if path.exists() and json.loads(path.read_text()) != fingerprint and traj_path.exists():
        log.warning("%s holds episodes of another configuration; starting afresh", out_dir)
        traj_path.unlink()
    path.write_text(json.dumps(fingerprint, indent=2) + "\n")


def run_and_score(
    cfg: EpisodeStageConfig,
    episode: EpisodeSection,
    task: Task,
    out_dir: Path,
    seeds: list[int],
    samples: int,
    section: str,
    sampler: TurnSampler | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """The wanted episodes of the selected tasks, resumed from out_dir, all scored in the sandbox.

    Runs only the (task, seed, sample) episodes not already in out_dir/trajectories.jsonl (all of
    them when the episode fingerprint changed); returns the scored trajectories in file order,
    restricted to the wanted ones, and the speed figures of the episodes run now. `sampler`: the
    driver's turn hook (`run_episodes`); its `identity` (best-of-N: N and the critic) is part of
    the fingerprint.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks, indices = select_tasks(task, cfg)
    if not indices:
        raise ValueError(f"split '{cfg.split.value}' of {task.tasks_file(cfg.split)} has no tasks")
    reset_if_config_changed(
        out_dir, episode_fingerprint(cfg, episode, task, section) | (sampler.identity() if sampler else {})
    )
    traj_path = out_dir / "trajectories.jsonl"
    jobs = pending_jobs(tasks, indices, seeds, read_resumable(traj_path, Trajectory), samples)
    wanted = set(wanted_keys(indices, seeds, samples))
    log.info("running %d episodes (%d already in %s)", len(jobs), len(wanted) - len(jobs), traj_path)
    speed = run_episodes(cfg, episode, task, jobs, traj_path, seeds[0], sampler)
    trajs = [t for t in read_resumable(traj_path, Trajectory) if (t.task_index, t.run_seed, t.sample) in wanted]
    return score_trajectories(task, tasks, trajs), speed
