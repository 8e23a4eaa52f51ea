"""Prefect flow: evaluate a model on ColBench backend tasks and track it in MLflow.

Wiring only: the evaluation runs in its own process (`python -m components.evaluate`) so vLLM's
memory is returned when it ends; this flow resolves the configuration (params.yaml + parameters),
runs the step, logs params, metrics and a readable sample of dialogues to MLflow, and returns
the metrics. Runs on Prefect's ephemeral API: no server needed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger, task
from pydantic import BaseModel, Field

from components import tracking
from components.config import DataConfig, EpisodeSection, EvalConfig, load_section
from components.records import Trajectory, read_jsonl


class EvalParams(BaseModel):
    """Parameters of the eval flow; None keeps the params.yaml value (shown as a form in the UI)."""

    model: str | None = Field(None, description="agent: HF model folder or hub id")
    engine: str | None = Field(None, description="auto | vllm | hf | openai")
    simulator: str | None = Field(None, description="llm | retrieval")
    simulator_model: str | None = Field(None, description="llm simulator model or OpenAI-compatible URL")
    simulator_engine: str | None = Field(None, description="engine of the simulator model")
    split: str | None = Field(None, description="train | eval | all")
    limit: int | None = Field(None, description="number of tasks")
    seeds: list[int] | None = Field(None, description="one evaluation per seed")
    out_dir: str | None = Field(None, description="output folder")


def resolve(params: EvalParams) -> tuple[EvalConfig, EpisodeSection, DataConfig]:
    """params.yaml sections with the flow parameters applied; raises ConfigError on bad values."""
    cfg = load_section(EvalConfig, "eval", params.model_dump())
    return cfg, load_section(EpisodeSection, "episode"), load_section(DataConfig, "data")


@task(name="evaluate", timeout_seconds=6 * 3600)
def evaluate_step(cfg: EvalConfig, episode: EpisodeSection, data: DataConfig) -> dict:
    """Run the evaluation component in a child process; return its metrics.json."""
    config = json.dumps({"eval": cfg.model_dump(mode="json"), "episode": episode.model_dump(mode="json"),
                         "data": data.model_dump(mode="json")})
    proc = subprocess.run([sys.executable, "-m", "components.evaluate", "--config", config])
    if proc.returncode != 0:
        raise RuntimeError(f"evaluation step failed with exit code {proc.returncode} (see its log above)")
    return json.loads((cfg.out_dir / "metrics.json").read_text())


@task(name="track")
def track_step(cfg: EvalConfig, episode: EpisodeSection, data: DataConfig, metrics: dict) -> str:
    """Log the run to MLflow: resolved config, metrics, outputs and sample dialogues."""
    import mlflow

    tracking.configure()
    trajs = list(read_jsonl(cfg.out_dir / "trajectories.jsonl", Trajectory))
    with mlflow.start_run(experiment_id=tracking.experiment_id(cfg.experiment),
                          run_name=f"eval {Path(cfg.model).name}", tags=tracking.provenance_tags()) as run:
        mlflow.log_params(tracking.flatten({"eval": cfg.model_dump(mode="json"),
                                            "episode": episode.model_dump(mode="json"),
                                            "data": data.model_dump(mode="json")}))
        mlflow.log_metrics(tracking.numeric(metrics))
        mlflow.log_text(tracking.render_dialogues(trajs[: cfg.sample_dialogues]), "dialogues.md")
        for name in ("metrics.json", "scores.jsonl"):
            mlflow.log_artifact(str(cfg.out_dir / name))
        return run.info.run_id


def summary_table(metrics: dict) -> str:
    """The headline numbers as a small fixed-width table."""
    rows = [
        ("tasks (n)", f"{metrics['n']}"),
        ("episodes", f"{metrics['episodes']}"),
        ("success rate", f"{metrics['success_rate']:.3f}  [{metrics['success_rate_ci_low']:.3f}, "
                         f"{metrics['success_rate_ci_high']:.3f}]"),
        ("tests passed", f"{metrics['tests_passed']:.3f}  [{metrics['tests_passed_ci_low']:.3f}, "
                         f"{metrics['tests_passed_ci_high']:.3f}]"),
        ("mean turns", f"{metrics['mean_turns']:.2f}"),
        ("answered", f"{metrics['answered_rate']:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)


@flow(name="sweetflow-eval", log_prints=True)
def eval_flow(params: EvalParams = EvalParams()) -> dict:
    """Evaluate a model on ColBench backend tasks (95% intervals in brackets)."""
    cfg, episode, data = resolve(params)
    metrics = evaluate_step(cfg, episode, data)
    run_id = track_step(cfg, episode, data, metrics)
    get_run_logger().info("MLflow run %s\n%s", run_id, summary_table(metrics))
    return metrics | {"mlflow_run_id": run_id}
