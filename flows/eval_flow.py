"""Prefect flow: evaluate a model on ColBench backend tasks and track it in MLflow.

Wiring only: the evaluation runs in its own process (`python -m components.stages.evaluate`) so vLLM's
memory is returned when it ends; this flow resolves the configuration (params.yaml + parameters),
runs the step, logs params, metrics and a readable sample of dialogues to MLflow, and returns
the metrics. Runs on Prefect's ephemeral API: no server needed.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from pydantic import Field

from components.config.sections import ConfigError, DataConfig, EpisodeSection, EvalConfig, stage_sections
from flows.steps import EpisodeStageParams, format_table, log_stage_run, registry_gate, run_component, stage_config


class EvalParams(EpisodeStageParams):
    """Parameters of the eval flow; None keeps the params.yaml value (shown as a form in the UI)."""

    seeds: list[int] | None = Field(None, description="one evaluation per seed")
    register_model: bool = Field(False, description="register the evaluated model (a local folder) in the MLflow "
                           "registry as `candidate`, and as `champion` if it beats the current champion")


def resolve(params: EvalParams) -> tuple[EvalConfig, EpisodeSection, DataConfig]:
    """params.yaml sections with the flow parameters applied; raises ConfigError on bad values."""
    overrides = params.model_dump(exclude={"register_model"})
    cfg, episode, data = stage_sections(EvalConfig, "eval", overrides=overrides)
    if params.register_model and not Path(cfg.model).is_dir():
        raise ConfigError(f"--register needs a local model folder; '{cfg.model}' is not one")
    return cfg, episode, data


@task(name="evaluate", timeout_seconds=6 * 3600)
def evaluate_step(cfg: EvalConfig, episode: EpisodeSection, data: DataConfig) -> dict:
    """Run the evaluation component in a child process; return its metrics.json."""
    return run_component("components.stages.evaluate", stage_config("eval", cfg, episode, data),
                         cfg.out_dir / "metrics.json")


@task(name="track")
def track_step(cfg: EvalConfig, episode: EpisodeSection, data: DataConfig, metrics: dict) -> str:
    """Log the run to MLflow: resolved config, metrics, outputs and sample dialogues."""
    return log_stage_run(cfg.experiment, f"eval {Path(cfg.model).name}", stage_config("eval", cfg, episode, data),
                         metrics, cfg.out_dir, cfg.sample_dialogues, ("metrics.json", "scores.jsonl"))


@task(name="registry gate")
def gate_step(cfg: EvalConfig, run_id: str, metrics: dict) -> dict | None:
    return registry_gate(cfg.model, run_id, metrics)


def summary_table(metrics: dict) -> str:
    """The headline numbers as a small fixed-width table."""
    return format_table([
        ("tasks (n)", f"{metrics['n']}"),
        ("episodes", f"{metrics['episodes']}"),
        ("success rate", f"{metrics['success_rate']:.3f}  [{metrics['success_rate_ci_low']:.3f}, "
                         f"{metrics['success_rate_ci_high']:.3f}]"),
        ("tests passed", f"{metrics['tests_passed']:.3f}  [{metrics['tests_passed_ci_low']:.3f}, "
                         f"{metrics['tests_passed_ci_high']:.3f}]"),
        ("mean turns", f"{metrics['mean_turns']:.2f}"),
        ("answered", f"{metrics['answered_rate']:.3f}"),
    ])


@flow(name="sweetflow-eval", log_prints=True)
def eval_flow(params: EvalParams = EvalParams()) -> dict:
    """Evaluate a model on ColBench backend tasks (95% intervals in brackets)."""
    cfg, episode, data = resolve(params)
    metrics = evaluate_step(cfg, episode, data)
    run_id = track_step(cfg, episode, data, metrics)
    get_run_logger().info("MLflow run %s\n%s", run_id, summary_table(metrics))
    gated = {"registry": gate_step(cfg, run_id, metrics)} if params.register_model else {}
    return metrics | {"mlflow_run_id": run_id} | gated
