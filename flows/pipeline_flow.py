"""Prefect flow: the whole pipeline, iterated: data pull -> model -> [rollouts -> training -> eval] x N
(collaborative tasks: sweet, mtdpo, rft), or data pull -> model -> [records] -> cory (single-turn tasks:
cory, ppo; the stage iterates: flows/cory_flow.py).

Wiring only. Each step is a stage of a generated, per-iteration dvc.yaml (flows.planning.plan)
run as `dvc repro --single-item` in its own process group, so GPU and vLLM memory is returned
between steps and DVC skips a step whose deps, params and outs are unchanged: a second identical
run only checks hashes. Iteration 0 evaluates the base model; iteration k collects rollouts with
actor k-1, trains actor k (SWEET-RL or a baseline) and evaluates it (flows/runtime/iterations.py).
When an iteration's data hold no learning signal (no trajectory pair for sweet/mtdpo, no success
for rft), its training steps are not run: the iteration is tagged `sweetflow.no_signal` and the next
one starts from the same actor (rollouts are re-sampled with another seed).

MLflow (experiment `sweetflow-pipeline`): one parent run per pipeline run (kind=pipeline, algo,
profile; the resolved parameters as params; the git commit and each iteration's dvc.lock hash as
tags; a per-iteration plot of success rate and tests passed), a nested run per step (kind=stage
or kind=eval, iteration, skipped) with the step's sections, metrics, files, training curves and
sample dialogues. After each evaluation the actor goes through the registry gate (alias
`candidate`; `champion` only if it beats the champion). The run ends with summary.json and
results.md (flows/tracking/run_report.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from prefect import flow, get_run_logger, task

from components.tracking import store as tracking
from components.tracking.compare import DEFAULT_EXPERIMENT
from flows.cory_flow import cory_run
from flows.planning.plan import ROLLOUTS, PipelineParams, RunPlan, check_baselines, plan_run
from flows.runtime import inputs
from flows.runtime.cluster import cluster_config, moved_to_cluster
from flows.runtime.iterations import Iteration, log_progress, run_baseline, run_iteration
from flows.runtime.run_engine import run_engine
from flows.runtime.stage_server import stage_server
from flows.runtime.steps import check_inside_project
from flows.tracking.links import link_mlflow_run, prefect_tags
from flows.tracking.run_report import results_table, summary_table


@flow(name="sweetflow-pipeline", log_prints=True)
def pipeline_flow(params: PipelineParams = PipelineParams()) -> dict:
    """SWEET-RL (or a baseline) end to end: evaluate the base model, then N iterations of rollouts,
    training and evaluation; or CORY/PPO on a single-turn task; every step DVC-versioned and tracked in MLflow."""
    plan = resolve(params)
    if (moved := moved_to_cluster(pipeline_flow, cluster_config(plan.doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    with stage_server(cluster_config(plan.doc), plan.run_dir / "logs", stages=2):  # importing torch meanwhile
        return _run(params, plan)


def _run(params: PipelineParams, plan: RunPlan) -> dict:
    import mlflow

    tracking.configure()  # before any work: a tracking server that does not answer fails the run now
    pull_data_task(plan)
    base = prepare_model_task(plan)
    inputs.prepare_demonstrations(plan, base)  # the tiny profile's scored rollouts, written when missing
    inputs.check_offline(plan)  # before any step: offline trajectories of held-out tasks are refused
    experiment = tracking.experiment_id(DEFAULT_EXPERIMENT)
    with (
        run_engine(plan.doc, cluster_config(plan.doc), base, plan.run_dir),
        mlflow.start_run(experiment_id=experiment, run_name=plan.run_dir.name, tags=run_tags(plan)) as run,
    ):
        link_mlflow_run(mlflow.get_tracking_uri(), experiment, run.info.run_id)
        n = iteration_count(params, plan)
        mlflow.log_params(tracking.flatten({"iterations": n, **plan.doc}))
        if plan.single_turn:
            iterations, summary, table = cory_run(plan, base, run.info.run_id, experiment)
        else:
            iterations, summary, table = collaborative_run(plan, n, base, params.baselines, run.info.run_id, experiment)
        (plan.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        mlflow.log_artifact(str(plan.run_dir / "summary.json"))
        get_run_logger().info("MLflow run %s\n%s", run.info.run_id, table)
        return {
            "run_dir": str(plan.run_dir),
            "mlflow_run_id": run.info.run_id,
            "summary": table,
            "iterations": [asdict(it) for it in iterations],
        }


def resolve(params: PipelineParams) -> RunPlan:
    """The run's plan; raises ConfigError on a bad algo, profile or override."""
    overrides = list(params.overrides)
    if params.algo.single_turn and params.iterations is not None:
        overrides.append(f"cory.iterations={params.iterations}")
    plan = plan_run(params.algo.value, params.profile, overrides, Path(params.runs_root), params.task)
    check_baselines(plan, params.baselines)
    check_inside_project(Path(params.runs_root), "runs_root")  # the Prefect form lets a user set it
    return plan


def iteration_count(params: PipelineParams, plan: RunPlan) -> int:
    """Training iterations of the run: `params.iterations` (default 1), or for CORY/PPO cory.iterations."""
    if plan.single_turn:
        return plan.doc["cory"]["iterations"]
    return 1 if params.iterations is None else params.iterations


@task(name="data pull", retries=2, retry_delay_seconds=10)
def pull_data_task(plan: RunPlan) -> str:
    return inputs.pull_data(plan)


@task(name="prepare model")
def prepare_model_task(plan: RunPlan) -> str:
    return inputs.prepare_model(plan)


def run_tags(plan: RunPlan) -> dict[str, str]:
    """The parent MLflow run's tags: provenance, what the run plays, and its Prefect flow run."""
    return (
        tracking.provenance_tags()
        | {
            "sweetflow.kind": "pipeline",
            "sweetflow.algo": plan.algo.value,
            "sweetflow.task": plan.task,
            "sweetflow.profile": plan.profile,
            "sweetflow.run_dir": str(plan.run_dir),
        }
        | prefect_tags()
    )


def collaborative_run(
    plan: RunPlan, n: int, base: str, baselines: Sequence[str], parent: str, experiment: str
) -> tuple[list[Iteration], list[dict], str]:
    """Iterations 0..n from the model `base` under the MLflow run `parent`, the baselines on iteration
    1's rollouts, then results.md: (iterations, summary.json's entries, the summary table)."""
    import mlflow

    iterations: list[Iteration] = []
    for k in plan.iterations(n):
        start = iterations[-1].actor if iterations else base
        iterations.append(run_iteration(plan, k, start, parent, experiment))
        if k == 1 and baselines and ROLLOUTS in iterations[-1].ran + iterations[-1].skipped:
            iterations[-1].baselines = {
                name: asdict(run_baseline(plan, name, start, parent, experiment)) for name in baselines
            }
        log_progress(plan, parent, iterations)
    results = results_table(plan, iterations)
    (plan.run_dir / "results.md").write_text(results)
    mlflow.log_artifact(str(plan.run_dir / "results.md"))
    return iterations, [asdict(it) for it in iterations], summary_table(plan, iterations) + "\n\n" + results
