"""The three Prefect tasks every sweetflow flow is made of: run a stage, track it, gate its model.

Wiring only: each wraps the one function that does the work (`dvc_repro` and `registry_gate` in
flows/runtime/steps.py, `track_stage` in flows/tracking/tracker.py). `place` runs a stage where the run's `cluster`
section places it; `run_tracked`, a flow's usual step, then tracks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task

from components.config.cluster import ClusterConfig
from components.stages.catalogue import STAGES, Kind
from flows.runtime.cluster import run_step
from flows.runtime.run_engine import ensure_current
from flows.runtime.steps import dvc_repro, registry_gate, worth_retry
from flows.tracking.tracker import track_stage


@task(name="stage", task_run_name="{name}", timeout_seconds=24 * 3600)
def run_stage(dvc_yaml: Path, stage: str, name: str) -> bool:
    """`dvc repro` of `stage` of `dvc_yaml`: True when it ran, False when DVC skipped it. The run's
    engine, when it has one, is launched again first if it died (flows/runtime/run_engine.py)."""
    ensure_current()
    return dvc_repro(dvc_yaml, stage)


track = task(name="track", task_run_name="track {run_name}")(track_stage)
gate = task(name="registry gate", task_run_name="gate {model}")(registry_gate)

# a stage that plays episodes gets one retry (a simulator endpoint or engine that died may come
# back); it resumes after the episodes already written
EPISODE_RETRY = {"retries": 1, "retry_delay_seconds": 30, "retry_condition_fn": worth_retry}
run_episode_stage = run_stage.with_options(**EPISODE_RETRY)


def stage_task(stage: str):
    """The task that runs `stage`: `run_stage`, or `run_episode_stage` for a stage that plays episodes."""
    return run_episode_stage if STAGES[stage].kind in (Kind.eval, Kind.episodes) else run_stage


def place(dvc_yaml: Path, stage: str, cluster: ClusterConfig, name: str) -> bool:
    """Run `stage` (task run `name`) where `cluster` places it; True when it ran, False when skipped."""
    return run_step(stage_task(stage), stage, cluster, dvc_yaml, stage, name)


def run_tracked(
    dvc_yaml: Path,
    stage: str,
    cluster: ClusterConfig,
    name: str,
    parent: str | None,
    experiment: str,
    tags: dict[str, str],
) -> tuple[bool, dict[str, Any]]:
    """Run `stage` where `cluster` places it, then track it as the MLflow run `name` (nested under
    `parent` when given); returns whether it ran and what `track_stage` returns."""
    ran = place(dvc_yaml, stage, cluster, name)
    return ran, track(dvc_yaml, stage, ran, parent, experiment, name, tags)
