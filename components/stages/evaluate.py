"""Evaluation stage: a model's collaborative episodes on the run's task (params `task`), scored, with metrics.

Reads: the task's records file (its params section, e.g. `data` for ColBench backend), the agent
model (HF folder or id). Writes to the output folder: `trajectories.jsonl` (one `Trajectory` per
episode: dialogue, exact token ids and log-probs of every agent action, answer, score),
`scores.jsonl` (one row per episode: index of the task in the tasks file, seed, score, passed,
total, success, error) and `metrics.json` (success_rate, mean_score (the graded score in [0, 1];
ColBench backend keeps it as tests_passed too), mean_turns, n, their 95% bootstrap intervals, the
same per task group where the task has groups (e.g. `mean_score_heldout`), per-seed values).
Episodes are appended as each ends and a re-run resumes after them (components/episodes/play.py).
With a turn hook `sampler` (components/stages/best_of.py: critic-guided best-of-N) the episodes are
the hook's, its identity is part of the folder's episode fingerprint and its figures join metrics.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, TypeVar

from components.config.sections import EpisodeSection, EpisodeStageConfig, EvalConfig
from components.episodes.driver import TurnSampler
from components.episodes.metrics import per_seed, summarize
from components.episodes.play import run_and_score, write_outputs
from components.stages.cli import stage_cli
from components.stages.result import StageResult
from components.tasks.base import Task
from components.tasks.registry import task_from_sections, task_sections

C = TypeVar("C", bound=EpisodeStageConfig)


def run(
    cfg: EvalConfig, episode: EpisodeSection, task: Task, out_dir: Path, sampler: TurnSampler | None = None
) -> StageResult:
    """Evaluate `cfg.model`; see the module docstring for the files written."""
    trajs, speed = run_and_score(cfg, episode, task, out_dir, cfg.seeds, 1, "eval", sampler)
    records = task.records(cfg.split)
    groups = {t.task_index: task.group(records[t.task_index]) for t in trajs}
    groups = {i: g for i, g in groups.items() if g is not None}
    metrics = summarize(trajs, cfg.bootstrap_samples, task.score_alias, groups) | speed
    metrics["per_seed"] = per_seed(trajs, task.score_alias)
    metrics |= sampler.metrics() if sampler else {}
    return StageResult(paths=write_outputs(out_dir, trajs, metrics), metrics=metrics)


def stage_args(
    module: str, section: str, options: Callable[[argparse.ArgumentParser], None] | None = None, prog: str | None = None
) -> tuple[dict, EpisodeStageConfig, argparse.Namespace]:
    """The sections of `module`'s stage, its `section` with `--model`/`--out` applied, and the parsed
    arguments (`options` adds the caller's own to the parser)."""
    sections, argv = stage_cli(module, task_sections)
    parser = argparse.ArgumentParser(prog=prog or f"python -m {module}")
    parser.add_argument("--model", help=f"agent model [{section}.model]")
    parser.add_argument("--out", help=f"output folder [{section}.out_dir]")
    if options is not None:
        options(parser)
    args = parser.parse_args(argv)
    cfg = sections[section].model_copy(
        update={k: v for k, v in (("model", args.model), ("out_dir", args.out and Path(args.out))) if v}
    )
    return sections, cfg, args


def print_metrics(result: StageResult) -> None:
    """The stage's flat metrics as one JSON line (its result line)."""
    print(json.dumps({k: v for k, v in result.metrics.items() if not isinstance(v, dict)}))


def stage_main(module: str, section: str, run_stage: Callable[[C, EpisodeSection, Task, Path], StageResult]) -> None:
    """`python -m <module> [--model M] [--out DIR]`: run an episode stage on the params file's sections,
    print its flat metrics as JSON. `--model`/`--out` override `<section>.model`/`.out_dir` (DVC
    evaluating the trained actor)."""
    sections, cfg, _ = stage_args(module, section)
    print_metrics(run_stage(cfg, sections["episode"], task_from_sections(sections), cfg.out_dir))


def main() -> None:
    stage_main("components.stages.evaluate", "eval", run)


if __name__ == "__main__":
    main()
