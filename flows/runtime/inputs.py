"""What a pipeline run needs before its stages: the data (pulled through DVC) and the base model
(the embedded default, and the tiny model, are prepared when missing), and whether an iteration's
data hold a learning signal. Wiring only."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

from components.config.training import Algo
from components.data.model_prepare import is_complete, resolve_model
from components.data.pull import dvc_pull
from components.data.tiny_model import TINY_OUT as TINY_MODEL
from flows.planning.plan import ROLLOUTS, RunPlan, interpolate
from flows.runtime.project_lock import project_step

DEFAULT_MODEL = Path("models/smollm2-135m-instruct")
DEMONSTRATED_TASKS = 32  # training tasks a run without a rollouts limit gets demonstrations of


def data_files(plan: RunPlan) -> list[Path]:
    """The data files the run reads and does not make itself: the task's records files (none for a
    task whose records a generator stage writes)."""
    task = plan.task_class
    return [] if task.generator else [Path(interpolate(f"${{{key}}}", plan.doc)) for key in task.file_keys()]


def pull_data(plan: RunPlan) -> list[str]:
    """`dvc pull` each data file DVC tracks (a `.dvc` pointer beside it); any other must exist."""
    files = data_files(plan)
    tracked = [f"{f}.dvc" for f in files if Path(f"{f}.dvc").exists()]
    if tracked and plan.doc.get("data", {}).get("source", "dvc") == "dvc":
        with project_step("data pull", plan.run_dir):
            dvc_pull(targets=tracked)
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"data file(s) {', '.join(missing)} not found (and no .dvc pointer to pull them)")
    return [str(f) for f in files]


def check_offline(plan: RunPlan) -> None:
    """Refuse `rollouts.offline` trajectories of evaluation-split tasks before any step runs, when the
    task's records exist already (a generated task's appear with its first step: then the rollouts
    step refuses them, components.stages.rollouts)."""
    path = _offline(plan)
    if not path:
        return
    from components.data.split import Split
    from components.stages.rollouts import offline_trajectories

    task = _task(plan)
    if task.tasks_file(Split.eval).exists():
        offline_trajectories(Path(path), task)


def prepare_demonstrations(plan: RunPlan, model: str) -> None:
    """`rollouts.offline`, when it names the file of the task's scripted demonstrations (the task's
    `demonstrations` module) and is missing, written on `model`'s tokenizer: the `tiny` profile's
    learning signal, since a random-weight agent never scores."""
    path = _offline(plan)
    if path is None or Path(path).exists() or plan.task_class.demonstrations is None:
        return
    writer = importlib.import_module(plan.task_class.demonstrations)
    if Path(path) != writer.FILE:
        return
    limit = plan.doc["rollouts"]["limit"]
    with project_step("scripted demonstrations", plan.run_dir):
        if not Path(path).exists():  # another run may have written them meanwhile
            writer.write(_task(plan), model, limit or DEMONSTRATED_TASKS, plan.doc["episode"]["max_turns"])


def _offline(plan: RunPlan) -> str | None:
    """The run's `rollouts.offline` file (None: it samples its rollouts, or plays a single-turn task)."""
    return None if plan.single_turn else plan.doc.get("rollouts", {}).get("offline")


def _task(plan: RunPlan):
    """The collaborative task the run plays, built from its validated sections."""
    from components.config.schema import SECTIONS

    cls = plan.task_class
    return cls({s: SECTIONS[s].model_validate(plan.doc[s]) for s in cls.sections})


def prepare_model(plan: RunPlan) -> str:
    """The base model: the embedded default, or the tiny model (after the default, whose tokenizer it
    takes), is prepared when missing; any other must resolve."""
    base = plan.doc["cory" if plan.single_turn else "train"]["model"]
    if Path(base) in (DEFAULT_MODEL, TINY_MODEL):
        _prepare(DEFAULT_MODEL, "components.data.model_prepare", plan)
    if Path(base) == TINY_MODEL:
        _prepare(TINY_MODEL, "components.data.tiny_model", plan)
    for model in {base, *([] if plan.single_turn else [plan.doc["critic"]["model"]])}:
        resolve_model(model)
    return base


def _prepare(folder: Path, module: str, plan: RunPlan) -> None:
    """`python -m module --out folder` unless the folder is complete, one run at a time."""
    if is_complete(folder):
        return
    with project_step("model preparation", plan.run_dir):
        if not is_complete(folder):  # another run may have prepared it meanwhile
            subprocess.run([sys.executable, "-m", module, "--out", str(folder)], check=True)


def no_signal(algo: Algo, stage: str, metrics: dict[str, Any], rft_min_score: float = 1.0) -> str | None:
    """Why this iteration cannot train (None when it can): no trajectory pair, or for an algorithm that
    trains on successes (rft) no trajectory scoring `rft_min_score` (a success when 1.0)."""
    if stage == "train_pairs" and metrics.get("pairs", 0) == 0:
        n = metrics.get("trajectories", 0)
        if metrics.get("best_score", 1.0) == 0.0:
            return (
                f"0 trajectory pairs from {n} trajectories: every one scored 0 (the actor earned nothing; "
                "a stronger actor, or its scored trajectories as rollouts.offline)"
            )
        setting = "pairs.min_gap" if metrics.get("rule") == "gap" else "pairs.min_chosen_score"
        return (
            f"0 trajectory pairs from {n} trajectories: no task has a trajectory scoring above another (see {setting})"
        )
    if algo.traits.needs_success and stage == ROLLOUTS:
        best = metrics.get("best_score", 1.0 if metrics.get("success_rate", 0) > 0 else 0.0)
        if best < rft_min_score:
            wanted = (
                "successful trajectory" if rft_min_score >= 1.0 else f"trajectory scoring {rft_min_score:g} or more"
            )
            return f"no {wanted} among {metrics.get('n_trajectories', 0)}"
    return None
