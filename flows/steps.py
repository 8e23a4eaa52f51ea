"""What every flow step shares: the parameters of an episode stage, running a component in its
own process, logging a stage's run to MLflow, and the end-of-run summary table.

Wiring only (DESIGN.md convention 2): components run as `python -m components.<stage> --config
JSON` in a child process, so vLLM and torch memory is returned when the step ends, and the flow
reads back nothing but the step's metrics.json and the files it declares.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, Field

from components import tracking
from components.config import DataConfig, EpisodeSection
from components.records import Trajectory, read_jsonl


class EpisodeStageParams(BaseModel):
    """Flow parameters of a stage that plays episodes; None keeps the params.yaml value."""

    model: str | None = Field(None, description="agent: HF model folder or hub id")
    engine: str | None = Field(None, description="auto | vllm | hf | openai")
    simulator: str | None = Field(None, description="llm | retrieval")
    simulator_model: str | None = Field(None, description="llm simulator model or OpenAI-compatible URL")
    simulator_engine: str | None = Field(None, description="engine of the simulator model")
    split: str | None = Field(None, description="train | eval | all")
    limit: int | None = Field(None, description="number of tasks")
    out_dir: str | None = Field(None, description="output folder")


def stage_config(section: str, cfg: BaseModel, episode: EpisodeSection, data: DataConfig) -> dict[str, Any]:
    """The JSON-able {section, episode, data} a component's `--config` takes (and MLflow logs)."""
    return {section: cfg.model_dump(mode="json"), "episode": episode.model_dump(mode="json"),
            "data": data.model_dump(mode="json")}


def run_component(module: str, config: dict[str, Any], metrics_path: Path, args: Sequence[str] = ()) -> dict:
    """Run `python -m <module> [ARGS] --config JSON` in a child process; return the metrics file it wrote."""
    proc = subprocess.run([sys.executable, "-m", module, *args, "--config", json.dumps(config)])
    if proc.returncode != 0:
        raise RuntimeError(f"step {module} failed with exit code {proc.returncode} (see its log above)")
    return json.loads(Path(metrics_path).read_text())


def log_stage_run(experiment: str, run_name: str, config: dict[str, Any], metrics: dict, out_dir: Path,
                  sample_dialogues: int, artifacts: Sequence[str] = ("metrics.json",)) -> str:
    """One MLflow run: resolved config as params, metrics, out_dir's artifacts and sample dialogues
    (the first `sample_dialogues` trajectories of out_dir/trajectories.jsonl). Returns the run id."""
    import mlflow

    tracking.configure()
    trajs = list(read_jsonl(Path(out_dir) / "trajectories.jsonl", Trajectory))
    with mlflow.start_run(experiment_id=tracking.experiment_id(experiment), run_name=run_name,
                          tags=tracking.provenance_tags()) as run:
        mlflow.log_params(tracking.flatten(config))
        mlflow.log_metrics(tracking.numeric(metrics))
        mlflow.log_text(tracking.render_dialogues(trajs[:sample_dialogues]), "dialogues.md")
        for name in artifacts:
            mlflow.log_artifact(str(Path(out_dir) / name))
        return run.info.run_id


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    """(label, value) rows as a small fixed-width table."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
