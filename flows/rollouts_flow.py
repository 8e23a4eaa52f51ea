"""Prefect flow: K sampled, scored trajectories per training task (SWEET-RL step 1), tracked in MLflow.

Wiring only: the rollouts run in their own process (`python -m components.stages.rollouts`) so vLLM's
memory is returned when they end; this flow resolves the configuration (params.yaml `rollouts`,
`episode`, `data` + parameters), runs the step, logs params, metrics and a readable sample of
dialogues to MLflow, and returns the metrics. Runs on Prefect's ephemeral API: no server needed.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from pydantic import Field

from components.config.sections import DataConfig, EpisodeSection, RolloutsConfig, check_rollouts, stage_sections
from flows.steps import EpisodeStageParams, format_table, log_stage_run, run_component, stage_config


class RolloutsParams(EpisodeStageParams):
    """Parameters of the rollouts flow; None keeps the params.yaml value (shown as a form in the UI)."""

    per_task: int | None = Field(None, description="trajectories sampled per task (K)")
    seed: int | None = Field(None, description="run seed")


def resolve(params: RolloutsParams) -> tuple[RolloutsConfig, EpisodeSection, DataConfig]:
    """params.yaml sections with the flow parameters applied; raises ConfigError on bad values."""
    cfg, episode, data = stage_sections(RolloutsConfig, "rollouts", overrides=params.model_dump())
    check_rollouts(cfg, episode)
    return cfg, episode, data


@task(name="rollouts", timeout_seconds=12 * 3600)
def rollouts_step(cfg: RolloutsConfig, episode: EpisodeSection, data: DataConfig) -> dict:
    """Run the rollouts component in a child process; return its metrics.json."""
    return run_component("components.stages.rollouts", stage_config("rollouts", cfg, episode, data),
                         cfg.out_dir / "metrics.json")


@task(name="track")
def track_step(cfg: RolloutsConfig, episode: EpisodeSection, data: DataConfig, metrics: dict) -> str:
    """Log the run to MLflow: resolved config, metrics, sample dialogues."""
    return log_stage_run(cfg.experiment, f"rollouts {Path(cfg.model).name} k={cfg.per_task}",
                         stage_config("rollouts", cfg, episode, data), metrics, cfg.out_dir, cfg.sample_dialogues)


def summary_table(metrics: dict) -> str:
    """The headline numbers as a small fixed-width table."""
    rows = [
        ("tasks", f"{metrics['n_tasks']}"),
        ("trajectories", f"{metrics['n_trajectories']}  ({metrics['episodes_run']} run now)"),
        ("success rate", f"{metrics['success_rate']:.3f}"),
        ("tests passed", f"{metrics['tests_passed']:.3f}"),
        ("tasks solved", f"{metrics['solved_task_fraction']:.3f}  (at least one success)"),
        ("tasks w/ pairs", f"{metrics['contrast_task_fraction']:.3f}  (scores differ)"),
        ("mean turns", f"{metrics['mean_turns']:.2f}"),
        ("answered", f"{metrics['answered_rate']:.3f}"),
    ]
    if "episodes_per_s" in metrics:
        rows.append(("speed", f"{metrics['episodes_per_s']:.2f} episodes/s, "
                              f"{metrics['agent_tokens_per_s']:.0f} agent tokens/s"))
    return format_table(rows)


@flow(name="sweetflow-rollouts", log_prints=True)
def rollouts_flow(params: RolloutsParams = RolloutsParams()) -> dict:
    """Sample K scored trajectories per training task (the input of SWEET-RL training)."""
    cfg, episode, data = resolve(params)
    metrics = rollouts_step(cfg, episode, data)
    run_id = track_step(cfg, episode, data, metrics)
    get_run_logger().info("MLflow run %s\n%s", run_id, summary_table(metrics))
    return metrics | {"mlflow_run_id": run_id}
