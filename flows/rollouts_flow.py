"""Prefect flow: K sampled, scored trajectories per training task (SWEET-RL step 1), tracked in MLflow.

Wiring only, and the same path as `sweetflow run`: the resolved parameters (params.yaml's task,
the task's, episode and rollouts sections with the flow parameters applied) go to
`<out_dir>/params.yaml` beside a generated `<out_dir>/dvc.yaml` holding the catalogue's rollouts
stage (after the task's generator stage when its records are generated), run as `dvc repro`
in its own process (vLLM's memory is returned when it ends; an unchanged re-run is skipped) and
logged by the one tracker (flows/tracking/tracker.py). Runs on Prefect's ephemeral API: no server needed.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from components.config.sections import EpisodeSection, RolloutsConfig, check_rollouts
from components.tracking import store as tracking
from flows.planning.options import EPISODE_FIELDS, cluster_field, flow_params, task_field
from flows.planning.plan import ROLLOUTS
from flows.runtime.cluster import cluster_config, moved_to_cluster
from flows.runtime.stage_tasks import run_tracked
from flows.runtime.steps import (
    check_step_folder,
    cluster_settings,
    format_table,
    stages_doc,
    task_name,
    with_generator,
    write_task_stage,
)

RolloutsParams = flow_params(
    "RolloutsParams",
    "Parameters of the rollouts flow; None keeps the params.yaml value (shown as a form in the UI).",
    RolloutsConfig,
    (*EPISODE_FIELDS, "per_task", "seed"),
    task=task_field(),
    overrides=cluster_field(),
)


def resolve(params: RolloutsParams) -> dict:
    """The run's parameters (task, the task's sections, episode, rollouts); raises ConfigError on bad values."""
    task = task_name(params.task)
    settings = {
        "rollouts": params.model_dump(exclude={"task", "overrides"}),
        "cluster": cluster_settings(params.overrides),
    }
    doc = stages_doc(with_generator(task, [ROLLOUTS]), task, settings)
    check_rollouts(RolloutsConfig.model_validate(doc["rollouts"]), EpisodeSection.model_validate(doc["episode"]))
    return doc


def summary_table(metrics: dict) -> str:
    """The headline numbers as a small fixed-width table."""
    rows = [
        ("tasks", f"{metrics['n_tasks']}"),
        ("trajectories", f"{metrics['n_trajectories']}  ({metrics['episodes_run']} run now)"),
        ("success rate", f"{metrics['success_rate']:.3f}"),
        ("mean score", f"{metrics['mean_score']:.3f}"),
        ("tasks solved", f"{metrics['solved_task_fraction']:.3f}  (at least one success)"),
        ("tasks w/ pairs", f"{metrics['contrast_task_fraction']:.3f}  (scores differ)"),
        ("mean turns", f"{metrics['mean_turns']:.2f}"),
        ("answered", f"{metrics['answered_rate']:.3f}"),
    ]
    if "episodes_per_s" in metrics:
        rows.append(
            ("speed", f"{metrics['episodes_per_s']:.2f} episodes/s, {metrics['agent_tokens_per_s']:.0f} agent tokens/s")
        )
    return format_table(rows)


@flow(name="sweetflow-rollouts", log_prints=True)
def rollouts_flow(params: RolloutsParams = RolloutsParams()) -> dict:
    """Sample K scored trajectories per training task (the input of SWEET-RL training)."""
    doc = resolve(params)
    if (moved := moved_to_cluster(rollouts_flow, cluster_config(doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    check_step_folder(Path(doc["rollouts"]["out_dir"]))
    tracking.configure()
    dvc_yaml = write_task_stage(Path(doc["rollouts"]["out_dir"]), ROLLOUTS, doc)
    cfg, task = doc["rollouts"], doc["task"]["name"]
    name = f"rollouts {Path(cfg['model']).name} k={cfg['per_task']} on {task}"
    experiment = tracking.experiment_id(cfg["experiment"])
    ran, tracked = run_tracked(
        dvc_yaml, ROLLOUTS, cluster_config(doc), name, None, experiment, {"sweetflow.task": task}
    )
    get_run_logger().info("MLflow run %s\n%s", tracked["run_id"], summary_table(tracked["metrics"]))
    return tracked["metrics"] | {"mlflow_run_id": tracked["run_id"], "ran": ran}
