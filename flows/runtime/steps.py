"""How every sweetflow command runs its stages: the checks on a step's folder, `dvc repro` of one
stage in its own process group (so vLLM and torch memory is returned when the step ends), the
registry gate after an evaluation, and the end-of-run summary table. Wiring only: the flows read
back nothing but the files a stage declares.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from components.config.sections import ConfigError
from components.tracking import registry
from components.tracking import store as tracking


def check_step_folder(folder: Path) -> None:
    """A step's dvc.yaml lives in its output folder, which must lie inside this DVC project."""
    if not Path(".dvc").is_dir():
        raise ConfigError(
            f"{Path.cwd()} is not a DVC project: run sweetflow from the sweetflow checkout "
            "(or a folder set up with `git init && dvc init`)"
        )
    check_inside_project(folder, "output folder")


def check_inside_project(folder: Path, what: str) -> None:
    """ConfigError when `folder` lies outside the project (the working directory): DVC 3 refuses
    outputs outside its repository, and would say so only when the first step has finished."""
    if not Path(folder).resolve().is_relative_to(Path.cwd().resolve()):
        raise ConfigError(
            f"{what} {folder} lies outside the project {Path.cwd()}: DVC tracks a step's "
            "outputs inside its project; give a folder inside it"
        )


def registry_gate(model: str, run_id: str, metrics: dict, task: str) -> dict | None:
    """Register the evaluated model as `candidate` of the task's registered model and promote it to
    `champion` only if it beats that task's champion (components.tracking.registry); None, with a log
    line, when the model is not a local folder."""
    from prefect import get_run_logger

    if not Path(model).is_dir():
        get_run_logger().info("registry: %s is not a local folder; not registered", model)
        return None
    tracking.configure()
    name = registry.registered_name(task)
    result = registry.gate(Path(model), run_id, metrics, name)
    get_run_logger().info(
        "registry: %s v%s %s (%s)",
        name,
        result.version,
        "promoted to champion" if result.promoted else "kept as candidate",
        result.reason,
    )
    return asdict(result)


_DVC_GIT_HINTS = (
    "To track the changes with git",
    "git add ",
    "To enable auto staging",
    "core.autostage",
    "Use `dvc push`",
)


def dvc_repro(dvc_yaml: Path, stage: str, *, log_path: Path | None = None) -> bool:
    """`dvc repro --single-item DVC_YAML:STAGE` in a child process group; True when the stage ran,
    False when DVC skipped it (deps, params and outs unchanged since its dvc.lock entry).

    Everything DVC and the stage print goes to `log_path` (default: `logs/<stage>.log` beside the
    dvc.yaml), appended per attempt; the console gets the stage's progress bars, warnings, errors
    and result line, or everything when $SWEETFLOW_VERBOSE is 1 (`sweetflow --verbose`); see
    flows/runtime/console.py. The stage's `python` is this interpreter (its folder leads PATH). If this
    process is stopped (Ctrl-C, SIGTERM turned into SystemExit), the whole group gets SIGTERM, so
    the step's own child is not left running; its persisted outputs let the next run resume it.
    Another run's step holding the project is waited for first (flows/runtime/project_lock.py)."""
    from components.stages.catalogue import STAGES
    from flows.runtime.console import echo, run_logged
    from flows.runtime.project_lock import project_step
    from flows.runtime.supervise import mark_step

    label = STAGES[stage].label if stage in STAGES else stage
    echo(f"\n==> {label} [{stage}]  {Path(dvc_yaml).parent}")
    log_path = Path(dvc_yaml).parent / "logs" / f"{stage}.log" if log_path is None else Path(log_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    skip = "didn't change, skipping"
    with project_step(f"step {label} [{stage}]", Path(dvc_yaml).parent):  # one DVC step at a time per project
        mark_step(f"step {label} [{stage}] (log: {log_path})")
        result = run_logged(
            [sys.executable, "-m", "dvc", "repro", "--single-item", f"{dvc_yaml}:{stage}"],
            log_path,
            env,
            watch=(skip,),
            show=(skip, "skipping run, checking out outputs"),
            hide=_DVC_GIT_HINTS,
        )
        mark_step(None)
    if result.returncode != 0:
        failed = f"stage {dvc_yaml}:{stage} failed with exit code {result.returncode} (log: {log_path})"
        if result.disk_full:
            raise DiskFull(f"{failed}: the disk is full; free space, then run the same command again to resume")
        raise StepFailed(failed)
    return skip not in result.seen


class StepFailed(RuntimeError):
    """A step's process failed; the console has shown its log's last lines."""


class DiskFull(StepFailed):
    """A step failed because a write found the disk full: retrying it before space is freed only fails again."""


def worth_retry(task: Any, task_run: Any, state: Any) -> bool:
    """The steps' Prefect `retry_condition_fn`: retry a failed step (an engine or endpoint that died
    may come back) unless it failed for want of disk space."""
    return not isinstance(state.data, DiskFull)


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    """(label, value) rows as a small fixed-width table."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
