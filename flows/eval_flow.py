"""Prefect flow: evaluate a model on a collaborative task (`--task`) and track it in MLflow.

Wiring only, and the same path as `sweetflow run`: the resolved parameters (params.yaml's task,
the task's, episode and eval sections with the flow parameters applied) are written to
`<out_dir>/params.yaml` beside a generated `<out_dir>/dvc.yaml` holding the catalogue's evaluation
stage (after the task's generator stage when its records are generated); the stage runs as
`dvc repro` in its own process (vLLM's memory is returned when it ends; an unchanged re-run is
skipped), and the one tracker (flows/tracking/tracker.py) logs params, metrics, outputs and sample
dialogues. Runs on Prefect's ephemeral API: no server needed.

The parameters are params.yaml's base sections, then a profile's overlay (`profile`, as
`sweetflow run --profile`; none by default), then the `section.key=value` overrides, then the
flow's own fields (model, limit, ...), which win. With `best_of` the evaluation is critic-guided
best-of-N (components/stages/best_of.py; the `critic` and `ranking` sections join the document when
N > 1): it runs in its own process without DVC, so its output folder may lie outside the project,
and is tracked like an evaluation, tagged with N and the critic.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import yaml
from prefect import flow, get_run_logger, task
from pydantic import Field

from components.config.sections import PARAMS_ENV, ConfigError, EvalConfig
from components.tracking import store as tracking
from flows.planning import profiles
from flows.planning.options import EPISODE_FIELDS, flow_params, task_field
from flows.planning.plan import ZERO_SHOT
from flows.runtime.cluster import cluster_config, moved_to_cluster, run_step
from flows.runtime.stage_tasks import EPISODE_RETRY, gate, run_tracked, track
from flows.runtime.steps import (
    StepFailed,
    check_step_folder,
    format_table,
    stages_doc,
    task_name,
    with_generator,
    write_task_stage,
)

EvalParams = flow_params(
    "EvalParams",
    "Parameters of the eval flow; None keeps the params.yaml value (shown as a form in the UI).",
    EvalConfig,
    (*EPISODE_FIELDS, "seeds"),
    task=task_field(),
    profile=(
        Optional[str],
        Field(
            None,
            description="run profile whose overlay applies (as `sweetflow run --profile`); None = params.yaml's base",
        ),
    ),
    overrides=(
        list[str],
        Field(
            default_factory=list,
            description="section.key=value settings of the sections eval reads (task, the task's, episode, eval, "
            "cluster; critic and ranking with best_of > 1), after the profile (-S, repeatable)",
        ),
    ),
    best_of=(
        Optional[int],
        Field(None, description="critic-guided best-of-N: candidates sampled per agent turn (1 = plain sampling)"),
    ),
    critic=(
        Optional[str],
        Field(None, description="best_of > 1: the critic ranking the candidates, a trained critic's folder or `base`"),
    ),
    register_model=(
        bool,
        Field(
            False,
            description="register the evaluated model (a local folder) in the MLflow "
            "registry as `candidate`, and as `champion` if it beats the current champion",
        ),
    ),
)


OWN_FIELDS = {"register_model", "task", "overrides", "profile", "best_of", "critic"}  # not eval section keys


def resolve(params: EvalParams) -> dict:
    """The run's parameters (see the module docstring) for the sections eval reads; raises ConfigError
    on bad values, an override of a section eval does not read, or a bad best-of combination."""
    _check_best_of(params)
    doc = profiles.resolve(params.profile, list(params.overrides))
    task = task_name(params.task or (doc.get("task") or {}).get("name"))  # None: the task section's default
    names = [*stages_doc(with_generator(task, [ZERO_SHOT]), task, {})]  # the sections those stages read, cluster
    names += ["critic", "ranking"] if (params.best_of or 1) > 1 else []
    stray = [o for o in params.overrides if o.partition(".")[0] not in names]
    if stray:
        raise ConfigError(f"-S {', '.join(stray)}: sweetflow eval reads only the sections {', '.join(names)}")
    own = {k: v for k, v in params.model_dump(exclude=OWN_FIELDS).items() if v is not None}
    merged = profiles.deep_merge({n: doc.get(n) or {} for n in names}, {"task": {"name": task}, "eval": own})
    models = profiles.validate(merged)
    resolved = {name: models[name].model_dump(mode="json") for name in names}
    if params.register_model and not Path(resolved["eval"]["model"]).is_dir():
        raise ConfigError(f"--register needs a local model folder; '{resolved['eval']['model']}' is not one")
    return resolved


def _check_best_of(params: EvalParams) -> None:
    from components.episodes.best_of import check_best_of

    if params.best_of is None:
        if params.critic is not None:
            raise ConfigError(f"--critic {params.critic} needs --best-of N (N > 1): the critic ranks N candidates")
        return
    if params.register_model:
        raise ConfigError("--register is refused with --best-of: a best-of-N score is not the model's own")
    try:
        check_best_of(params.best_of, params.critic)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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
            *_best_of_rows(metrics),
        ]
    )


def _best_of_rows(metrics: dict) -> list[tuple[str, str]]:
    if "best_of" not in metrics:
        return []
    rows = [("best of", f"{metrics['best_of']}" + (f" (critic {metrics['critic']})" if metrics.get("critic") else ""))]
    if "critic_score_spread_mean" in metrics:
        rows.append(
            (
                "critic spread",
                f"{metrics['critic_score_spread_mean']:.4f}  [min {metrics['critic_score_spread_min']:.4f}, "
                f"max {metrics['critic_score_spread_max']:.4f}] over {metrics['ranked_states']} states",
            )
        )
    return rows


@flow(name="sweetflow-eval", log_prints=True)
def eval_flow(params: EvalParams = EvalParams()) -> dict:
    """Evaluate a model on a collaborative task (95% intervals in brackets)."""
    doc = resolve(params)
    if (moved := moved_to_cluster(eval_flow, cluster_config(doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    folder, task = Path(doc["eval"]["out_dir"]), doc["task"]["name"]
    if params.best_of is None:
        check_step_folder(folder)
    tracking.configure()
    name, tags = _run_name(doc, params.best_of, params.critic)
    experiment = tracking.experiment_id(doc["eval"]["experiment"])
    if params.best_of is None:
        dvc_yaml = write_task_stage(folder, ZERO_SHOT, doc)
        ran, tracked = run_tracked(dvc_yaml, ZERO_SHOT, cluster_config(doc), name, None, experiment, tags)
    else:
        dvc_yaml = run_step(best_of_step, ZERO_SHOT, cluster_config(doc), doc, params.best_of, params.critic)
        ran, tracked = True, track(dvc_yaml, ZERO_SHOT, True, None, experiment, name, tags)
    metrics = tracked["metrics"]
    get_run_logger().info("MLflow run %s\n%s", tracked["run_id"], summary_table(metrics))
    gated = {"registry": gate(doc["eval"]["model"], tracked["run_id"], metrics, task)} if params.register_model else {}
    return metrics | {"mlflow_run_id": tracked["run_id"], "ran": ran} | gated


def _run_name(doc: dict, best_of: int | None, critic: str | None) -> tuple[str, dict[str, str]]:
    """The evaluation's MLflow run name and tags (best-of-N's N and critic when given)."""
    task = doc["task"]["name"]
    name = f"eval {Path(doc['eval']['model']).name} on {task}" + (f" best-of-{best_of}" if best_of else "")
    tags = {"sweetflow.task": task} | (
        {"sweetflow.best_of": str(best_of), "sweetflow.critic": str(critic)} if best_of else {}
    )
    return name, tags
