"""A pipeline run's iterations: each one's stages of its generated dvc.yaml in order, each tracked
as a nested MLflow run under the run's parent, stopping before training when the iteration's data
hold no learning signal (the actor is carried forward); a baseline's stages on iteration 1's
rollouts; the parent run's per-iteration tags and plot. Wiring only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import get_run_logger

from components.config.training import Algo, TrainLayout
from components.stages.catalogue import STAGES, Kind
from components.tracking import datasets
from components.tracking import store as tracking
from components.tracking.compare import DEFAULT_EXPERIMENT, eval_runs, plot
from flows.planning.baselines import BASELINES
from flows.planning.plan import (
    QUALITY,
    ROLLOUTS,
    RunPlan,
    baseline_doc,
    baseline_stages,
    write_baseline,
    write_iteration,
)
from flows.runtime import inputs
from flows.runtime.cluster import cluster_config
from flows.runtime.stage_tasks import gate, place, run_tracked


@dataclass
class Iteration:
    k: int
    actor: str  # the model this iteration ends with
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)  # eval metrics (none when not evaluated)
    eval_dir: str | None = None  # the evaluation's folder (trajectories.jsonl), when evaluated
    no_signal: str | None = None
    registry: dict[str, Any] | None = None
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> an Iteration as a dict
    critic_quality: dict[str, Any] = field(default_factory=dict)  # a SWEET-RL critic's quality metrics, if measured


def run_iteration(plan: RunPlan, k: int, start: str, parent: str, experiment: str) -> Iteration:
    """Iteration k's stages in order, each tracked; stops before training when there is no signal."""
    it = Iteration(k, start if k == 0 else str(plan.trained_actor(k)))
    dvc_yaml = write_iteration(plan, k, start)
    run_stages(plan, dvc_yaml, plan.stages(k), it, plan.algo, plan.algo.value, start, parent, experiment)
    return it


def run_baseline(plan: RunPlan, name: str, start: str, parent: str, experiment: str) -> Iteration:
    """The baseline `name` (flows/planning/baselines.py) trained on iteration 1's rollouts (iter-1/<name>/)
    and evaluated; its MLflow runs are tagged with `name` as their algo."""
    algo = Algo(BASELINES[name].algo)
    it = Iteration(1, str(TrainLayout(plan.iteration_dir(1) / name).actor_model))
    rollouts = json.loads((plan.iteration_dir(1) / ROLLOUTS / "metrics.json").read_text())
    rft_min_score = plan.doc["actor"]["rft_min_score"]
    it.no_signal = inputs.no_signal(algo, ROLLOUTS, rollouts, rft_min_score)
    if it.no_signal:  # the rollouts were made (and checked) for the run's own algorithm
        it.actor = start
        get_run_logger().warning("%s baseline: no learning signal (%s); not trained", name, it.no_signal)
        return it
    dvc_yaml = write_baseline(plan, 1, start, name)
    stages = baseline_stages(name, baseline_doc(plan, 1, start, name))
    run_stages(plan, dvc_yaml, stages, it, algo, name, start, parent, experiment)
    return it


def run_stages(
    plan: RunPlan,
    dvc_yaml: Path,
    stages,
    it: Iteration,
    algo: Algo,
    name: str,
    start: str,
    parent: str,
    experiment: str,
) -> None:
    """`stages` of `dvc_yaml` in order, each tracked (tagged with `name` as algo: the run's algo or a
    baseline's name), into `it`; stops before training when there is no signal."""
    rft_min_score = plan.doc.get("actor", {}).get("rft_min_score", 1.0)
    cluster = cluster_config(plan.doc)
    tags = {
        "sweetflow.algo": name,
        "sweetflow.task": plan.task,
        "sweetflow.profile": plan.profile,
        "sweetflow.iteration": str(it.k),
    }
    for stage in stages:
        kind = STAGES[stage].kind
        label = f"iter {it.k} {stage}" if name == plan.algo.value else f"iter {it.k} {name} {stage}"
        if kind == Kind.data:  # the task's records: versioned by DVC, read by the stages that follow
            (it.ran if place(dvc_yaml, stage, cluster, label) else it.skipped).append(stage)
            continue
        ran, tracked = run_tracked(dvc_yaml, stage, cluster, label, parent, experiment, tags)
        (it.ran if ran else it.skipped).append(stage)
        with tracking.store_errors():  # the project's data files (not the run's own outputs) on the parent too
            datasets.log_inputs(datasets.outside(tracked["inputs"], plan.run_dir), context="pipeline", run_id=parent)
        if kind in (Kind.eval, Kind.cory):
            it.metrics = tracked["metrics"]
        if stage == QUALITY:
            it.critic_quality = tracked["metrics"]
        if kind == Kind.eval:
            it.eval_dir = str(Path(tracked["metrics_file"]).parent)
            it.registry = gate(it.actor, tracked["run_id"], it.metrics, plan.task)
        it.no_signal = inputs.no_signal(algo, stage, tracked["metrics"], rft_min_score)
        if it.no_signal:
            it.actor = start
            get_run_logger().warning(
                "%s iteration %d: no learning signal (%s); actor %s carried forward", name, it.k, it.no_signal, start
            )
            return


def log_progress(plan: RunPlan, parent: str, iterations: list[Iteration]) -> None:
    """The parent run's tags for each iteration and the success/tests-passed-per-iteration plot."""
    import mlflow

    client = mlflow.tracking.MlflowClient()
    for it in iterations:
        lock = plan.iteration_dir(it.k) / "dvc.lock"
        if lock.exists():
            client.set_tag(
                parent, f"dvc_lock_sha256.iter-{it.k}", tracking.provenance_tags(lock.parent).get("dvc_lock_sha256", "")
            )
        if it.no_signal:
            client.set_tag(parent, f"sweetflow.no_signal.iter-{it.k}", it.no_signal)
    df = eval_runs(DEFAULT_EXPERIMENT)
    df = df[df["parent_run_id"] == parent]
    if not df.empty:
        client.log_artifact(parent, str(plot(df, plan.run_dir / "iterations.png")), "plots")
