"""Evaluation stage: a model's collaborative episodes on ColBench backend tasks, scored, with metrics.

Reads: the tasks file (params `data`), the agent model (HF folder or id). Writes to the output
folder: `trajectories.jsonl` (one `Trajectory` per episode: dialogue, exact token ids and
log-probs of every agent action, answer, score), `scores.jsonl` (one row per episode: index of
the task in the tasks file, seed, score, passed, total, success, error) and `metrics.json`
(success_rate, tests_passed, mean_turns, n, their 95% bootstrap intervals, per-seed values).
Episodes are appended as each ends and a re-run resumes after them (components/episodes/play.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, TypeVar

from components.config.sections import DataConfig, EpisodeSection, EpisodeStageConfig, EvalConfig
from components.episodes.metrics import per_seed, summarize
from components.episodes.play import run_and_score, write_outputs
from components.stages.cli import stage_cli
from components.stages.result import StageResult

C = TypeVar("C", bound=EpisodeStageConfig)


def run(cfg: EvalConfig, episode: EpisodeSection, data: DataConfig, out_dir: Path) -> StageResult:
    """Evaluate `cfg.model`; see the module docstring for the files written."""
    trajs, speed = run_and_score(cfg, episode, data, out_dir, cfg.seeds, 1, "eval")
    metrics = summarize(trajs, cfg.bootstrap_samples) | speed
    metrics["per_seed"] = per_seed(trajs)
    return StageResult(paths=write_outputs(out_dir, trajs, metrics), metrics=metrics)


def stage_main(
    module: str, section: str, run_stage: Callable[[C, EpisodeSection, DataConfig, Path], StageResult]
) -> None:
    """`python -m <module> [--model M] [--out DIR]`: run an episode stage on the params file's sections,
    print its flat metrics as JSON. `--model`/`--out` override `<section>.model`/`.out_dir` (DVC
    evaluating the trained actor)."""
    sections, argv = stage_cli(module)
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--model", help=f"agent model [{section}.model]")
    parser.add_argument("--out", help=f"output folder [{section}.out_dir]")
    args = parser.parse_args(argv)
    cfg = sections[section].model_copy(
        update={k: v for k, v in (("model", args.model), ("out_dir", args.out and Path(args.out))) if v}
    )
    result = run_stage(cfg, sections["episode"], sections["data"], cfg.out_dir)
    print(json.dumps({k: v for k, v in result.metrics.items() if not isinstance(v, dict)}))


def main() -> None:
    stage_main("components.stages.evaluate", "eval", run)


if __name__ == "__main__":
    main()
