"""Prefect flow: the stages of a single-step command (`sweetflow eval`, `rollouts`, `train`), each
tracked in MLflow.

Wiring only, and the same path as `sweetflow run`: the command's resolved plan
(flows/planning/step_commands.py: `StepsRun`) is written as `<folder>/params.yaml` beside a
generated `<folder>/dvc.yaml` holding its catalogue stages (after the task's generator stage when
its records are generated); each stage runs as `dvc repro` in its own process (vLLM and model
memory is returned when it ends; an unchanged re-run is skipped), and the one tracker
(flows/tracking/tracker.py) logs its params, metrics, outputs, curves and sample dialogues. One
stage is one MLflow run; a training algorithm's stages are nested runs under a parent run.

  eval:     the evaluation stage (or critic-guided best-of-N, in its own process without DVC, so
            its output folder may lie outside the project; flows/runtime/best_of.py), then the
            registry gate when asked
  rollouts: K sampled, scored trajectories per training task
  train:    sweet: trajectory pairs -> critic -> candidates -> ranking -> turn pairs -> critic
            quality -> actor; mtdpo: trajectory pairs -> actor; rft: actor

`eval_flow` is the `eval` deployment's entry (flows/runtime/serve.py): the Prefect UI shows its
parameters as a form, resolved here and run by `steps_flow`. Runs on Prefect's ephemeral API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from components.stages.catalogue import STAGES
from components.tracking import store as tracking
from flows.planning.plan import ZERO_SHOT, write_stages
from flows.planning.step_commands import EvalParams, StepsRun, eval_run
from flows.runtime.best_of import best_of_step
from flows.runtime.cluster import cluster_config, moved_to_cluster, run_step
from flows.runtime.stage_server import stage_server
from flows.runtime.stage_tasks import gate, place, run_tracked, track
from flows.runtime.steps import check_step_folder, format_table


@flow(name="sweetflow-steps", log_prints=True)
def steps_flow(run: StepsRun) -> dict[str, Any]:
    """Run a single-step command's stages, each tracked in MLflow; returns the one stage's metrics
    (or every stage's under `steps`), the MLflow run id, what the command made and its summary."""
    if (moved := moved_to_cluster(steps_flow, cluster_config(run.doc), run)) is not None:
        return moved  # a served deployment asked for Ray
    with stage_server(cluster_config(run.doc), Path(run.folder) / "logs", len(run.stages)):
        return _steps(run)


def _steps(run: StepsRun) -> dict[str, Any]:
    tracking.configure()
    experiment = tracking.experiment_id(run.experiment)
    if run.best_of is not None:
        result = _best_of(run, experiment)
    else:
        check_step_folder(Path(run.folder))
        dvc_yaml = write_stages(Path(run.folder), [*run.generators, *run.stages], run.doc, run.algo)
        for generator in run.generators:  # DVC skips it when the task's records are current
            place(dvc_yaml, generator, cluster_config(run.doc), STAGES[generator].label)
        result = _tracked(run, dvc_yaml, experiment)
    if run.register_model:
        result["registry"] = gate(run.doc["eval"]["model"], result["mlflow_run_id"], result, run.doc["task"]["name"])
    result |= run.products
    result["summary"] = TABLES[run.command](run, result)
    get_run_logger().info("MLflow run %s\n%s", result["mlflow_run_id"], result["summary"])
    return result


@flow(name="sweetflow-eval", log_prints=True)
def eval_flow(params: EvalParams = EvalParams()) -> dict[str, Any]:
    """Evaluate a model on a collaborative task (95% intervals in brackets)."""
    return steps_flow(eval_run(params))


def _best_of(run: StepsRun, experiment: str) -> dict[str, Any]:
    dvc_yaml = run_step(best_of_step, ZERO_SHOT, cluster_config(run.doc), run.doc, run.best_of, run.critic)
    tracked = track(dvc_yaml, ZERO_SHOT, True, None, experiment, run.run_name, run.tags)
    return tracked["metrics"] | {"mlflow_run_id": tracked["run_id"], "ran": True}


def _tracked(run: StepsRun, dvc_yaml: Path, experiment: str) -> dict[str, Any]:
    """The stages of `dvc_yaml` run and tracked: the one stage as the run `run.run_name`, or each
    stage as a nested run named by its label under a parent run of that name."""
    import mlflow

    cluster = cluster_config(run.doc)
    if not run.nested:
        ran, tracked = run_tracked(dvc_yaml, run.stages[0], cluster, run.run_name, None, experiment, run.tags)
        return tracked["metrics"] | {"mlflow_run_id": tracked["run_id"], "ran": ran}
    steps: dict[str, dict] = {}
    with mlflow.start_run(experiment_id=experiment, run_name=run.run_name, tags=tracking.provenance_tags()) as parent:
        mlflow.log_params(tracking.flatten({"train": run.doc["train"], "algo": run.algo}))
        for stage in run.stages:
            label = STAGES[stage].label
            steps[label] = run_tracked(dvc_yaml, stage, cluster, label, parent.info.run_id, experiment, run.tags)[1][
                "metrics"
            ]
    return {"steps": steps, "mlflow_run_id": parent.info.run_id}


def eval_table(run: StepsRun, metrics: dict) -> str:
    """An evaluation's headline numbers (95% intervals in brackets)."""
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


def rollouts_table(run: StepsRun, metrics: dict) -> str:
    """The rollouts' headline numbers."""
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


def train_table(run: StepsRun, result: dict) -> str:
    """The algorithm, the new actor and each training step's loss (or first metrics)."""
    rows = [("algorithm", str(run.algo)), ("new actor", result["actor_model"])]
    for name, metrics in result["steps"].items():
        if "final_loss" in metrics:
            rows.append(
                (name, f"loss {metrics['first_loss']:.4f} -> {metrics['final_loss']:.4f} over {metrics['steps']} steps")
            )
        else:
            shown = list(metrics.items())[:4]
            rows.append((name, ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in shown)))
    return format_table(rows)


TABLES = {"eval": eval_table, "rollouts": rollouts_table, "train": train_table}
