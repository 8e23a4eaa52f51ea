"""What the pipeline tests share (tests/flows/test_pipeline_*.py): the SWEET-RL iteration's
stages, short optimiser settings, and the -S settings of a smoke run on offline rollouts and the tiny
model."""

from __future__ import annotations

from pathlib import Path

from components.data.records import Trajectory, write_jsonl
from components.data.split import in_eval

OPTIM = {"lr": 1e-3, "epochs": 1, "max_steps": 3, "batch_size": 2, "micro_batch_size": 1, "checkpoint_every": 1}
SWEET_STAGES = [
    "rollouts",
    "train_pairs",
    "critic",
    "candidates",
    "ranking",
    "turn_pairs",
    "critic_quality",
    "actor",
    "eval_actor",
]


def offline_run_sets(project_dir: Path, trajs: list[Trajectory], split, tiny_model_dir: Path) -> dict:
    """Write the trajectories of `split`'s training tasks as world/trajectories.jsonl (the evaluation's
    tasks must not be trained on: rollouts.offline refuses them); the -S settings a smoke run on them
    and the tiny model (hf engine, short budgets) takes, whatever its task."""
    train = [t for t in trajs if not in_eval(t.task_id, split.eval_fraction, split.split_salt)]
    assert 0 < len(train) < len(trajs)
    write_jsonl(project_dir / "world" / "trajectories.jsonl", train)
    return {
        "rollouts.offline": "world/trajectories.jsonl",
        "train.model": str(tiny_model_dir),
        "critic.model": str(tiny_model_dir),
        "eval.engine": "hf",
        "rollouts.engine": "hf",
        "candidates.engine": "hf",
        "episode.max_model_len": 1024,
        "critic.optim": OPTIM,
        "actor.optim": OPTIM,
    }
