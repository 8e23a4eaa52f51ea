"""Critic-guided best-of-N evaluation as a step: not a DVC stage (its output folder may lie outside
the project), so it runs as `python -m components.stages.best_of` in its own process group on the
step folder's params.yaml, after the task's generator when its records are generated. Wiring only."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml
from prefect import task

from components.config.sections import PARAMS_ENV
from flows.planning.plan import ZERO_SHOT
from flows.runtime.stage_tasks import EPISODE_RETRY
from flows.runtime.steps import StepFailed


@task(name="evaluate best-of-N", timeout_seconds=24 * 3600, **EPISODE_RETRY)
def best_of_step(doc: dict, best_of: int, critic: str | None) -> Path:
    """Best-of-N evaluation (components/stages/best_of.py) in its own process on out_dir/params.yaml,
    after the task's generator when its records are generated (deterministic: the same file again);
    resumes after the episodes already written when retried. Returns where a dvc.yaml would lie: the
    tracker reads the folder beside it (params.yaml, logs/)."""
    from components.stages.catalogue import STAGES
    from components.tasks.registry import task_class

    folder = Path(doc["eval"]["out_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    if generator := task_class(doc["task"]["name"]).generator:
        _run_module(STAGES[generator].module, [], folder, generator)
    args = ["--best-of", str(best_of), *(["--critic", critic] if critic else [])]
    _run_module("components.stages.best_of", args, folder, ZERO_SHOT)
    return folder / "dvc.yaml"


def _run_module(module: str, args: list[str], folder: Path, label: str) -> None:
    """`python -m module args` on folder/params.yaml in its own process group, logged to
    folder/logs/<label>.log (flows/runtime/console.py); StepFailed when it fails."""
    from flows.runtime.console import echo, run_logged
    from flows.runtime.supervise import mark_step

    log_path = folder / "logs" / f"{label}.log"
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, PATH=path, **{PARAMS_ENV: str(folder / "params.yaml")})
    echo(f"\n==> {label} [{module}]  {folder}")
    mark_step(f"step {label} (log: {log_path})")
    try:
        result = run_logged([sys.executable, "-m", module, *args], log_path, env)
    finally:
        mark_step(None)
    if result.returncode != 0:
        raise StepFailed(f"{module} failed with exit code {result.returncode} (log: {log_path})")
