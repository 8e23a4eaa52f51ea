"""Prefect flow: evaluate a model on a collaborative task (`--task`) and track it in MLflow.

Wiring only, and the same path as `sweetflow run`: the resolved parameters (params.yaml's task,
the task's, episode and eval sections with the flow parameters applied) are written to
`<out_dir>/params.yaml` beside a generated `<out_dir>/dvc.yaml` holding the catalogue's evaluation
stage (after the task's generator stage when its records are generated); the stage runs as
`dvc repro` in its own process (vLLM's memory is returned when it ends; an unchanged re-run is
skipped), and the one tracker (flows/tracking.py) logs params, metrics, outputs and sample
dialogues. Runs on Prefect's ephemeral API: no server needed.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from pydantic import Field

from components.config.sections import ConfigError, EvalConfig
from components.tracking import store as tracking
from flows.cluster import cluster_config, moved_to_cluster, run_step
from flows.options import EPISODE_FIELDS, cluster_field, flow_params, task_field
from flows.plan import ZERO_SHOT
from flows.steps import (
    check_step_folder,
    cluster_settings,
    dvc_repro,
    format_table,
    registry_gate,
    stages_doc,
    task_name,
    with_generator,
    worth_retry,
    write_task_stage,
)
from flows.tracking import track_stage

EvalParams = flow_params(
    "EvalParams",
    "Parameters of the eval flow; None keeps the params.yaml value (shown as a form in the UI).",
    EvalConfig,
    (*EPISODE_FIELDS, "seeds"),
    task=task_field(),
    overrides=cluster_field(),
    register_model=(
        bool,
        Field(
            False,
            description="register the evaluated model (a local folder) in the MLflow "
            "registry as `candidate`, and as `champion` if it beats the current champion",
        ),
    ),
)


def resolve(params: EvalParams) -> dict:
    """The run's parameters (task, the task's sections, episode, eval); raises ConfigError on bad values."""
    task = task_name(params.task)
    doc = stages_doc(
        with_generator(task, [ZERO_SHOT]),
        task,
        {
            "eval": params.model_dump(exclude={"register_model", "task", "overrides"}),
            "cluster": cluster_settings(params.overrides),
        },
    )
    if params.register_model and not Path(doc["eval"]["model"]).is_dir():
        raise ConfigError(f"--register needs a local model folder; '{doc['eval']['model']}' is not one")
    return doc


@task(name="evaluate", timeout_seconds=6 * 3600, retries=1, retry_delay_seconds=30, retry_condition_fn=worth_retry)
def evaluate_step(dvc_yaml: Path) -> bool:
    """The evaluation stage (resumes after the episodes already written when retried)."""
    return dvc_repro(dvc_yaml, ZERO_SHOT)


@task(name="track")
def track_step(dvc_yaml: Path, ran: bool, doc: dict) -> dict:
    eval_cfg, task = doc["eval"], doc["task"]["name"]
    return track_stage(
        dvc_yaml,
        ZERO_SHOT,
        ran,
        None,
        tracking.experiment_id(eval_cfg["experiment"]),
        f"eval {Path(eval_cfg['model']).name} on {task}",
        {"sweetflow.task": task},
    )


@task(name="registry gate")
def gate_step(model: str, run_id: str, metrics: dict, task: str) -> dict | None:
    return registry_gate(model, run_id, metrics, task)


def summary_table(metrics: dict) -> str:
    """The headline numbers as a small fixed-width table."""
    return format_table(
        [
            ("tasks (n)", f"{metrics['n']}"),
            ("episodes", f"{metrics['episodes']}"),
            (
                "success rate",
                f"{metrics['success_rate']:.3f}  [{metrics['success_rate_ci_low']:.3f}, "
                f"{metrics['success_rate_ci_high']:.3f}]",
            ),
            (
                "mean score",
                f"{metrics['mean_score']:.3f}  [{metrics['mean_score_ci_low']:.3f}, "
                f"{metrics['mean_score_ci_high']:.3f}]",
            ),
            ("mean turns", f"{metrics['mean_turns']:.2f}"),
            ("answered", f"{metrics['answered_rate']:.3f}"),
        ]
    )


@flow(name="sweetflow-eval", log_prints=True)
def eval_flow(params: EvalParams = EvalParams()) -> dict:
    """Evaluate a model on a collaborative task (95% intervals in brackets)."""
    doc = resolve(params)
    if (moved := moved_to_cluster(eval_flow, cluster_config(doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    check_step_folder(Path(doc["eval"]["out_dir"]))
    tracking.configure()
    task = doc["task"]["name"]
    dvc_yaml = write_task_stage(Path(doc["eval"]["out_dir"]), ZERO_SHOT, doc)
    ran = run_step(evaluate_step, ZERO_SHOT, cluster_config(doc), dvc_yaml)
    tracked = track_step(dvc_yaml, ran, doc)
    metrics = tracked["metrics"]
    get_run_logger().info("MLflow run %s\n%s", tracked["run_id"], summary_table(metrics))
    gated = (
        {"registry": gate_step(doc["eval"]["model"], tracked["run_id"], metrics, task)} if params.register_model else {}
    )
    return metrics | {"mlflow_run_id": tracked["run_id"], "ran": ran} | gated
