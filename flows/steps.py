"""What every flow step shares: the parameters of an episode stage, running a component in its
own process, logging a stage's run to MLflow, the registry gate after an evaluation, and the
end-of-run summary table.

Wiring only (DESIGN.md convention 2): components run as `python -m components.<stage> --config
JSON` in a child process, so vLLM and torch memory is returned when the step ends, and the flow
reads back nothing but the step's metrics.json and the files it declares.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, Field

from components.tracking import registry
from components.tracking import store as tracking
from components.config.sections import PARAMS_ENV, DataConfig, EpisodeSection
from components.data.records import Trajectory, read_jsonl


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
    """Run `python -m <module> [ARGS]` in a child process on `config` (its sections, written as the
    child's params file); return the metrics file it wrote."""
    import tempfile

    import yaml

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="sweetflow-params-") as params:
        yaml.safe_dump(config, params)
        params.flush()
        proc = subprocess.run([sys.executable, "-m", module, *args], env=dict(os.environ, **{PARAMS_ENV: params.name}))
    if proc.returncode != 0:
        raise RuntimeError(f"step {module} failed with exit code {proc.returncode} (see its log above)")
    return json.loads(Path(metrics_path).read_text())


def log_stage_run(experiment: str, run_name: str, config: dict[str, Any], metrics: dict, out_dir: Path,
                  sample_dialogues: int, artifacts: Sequence[str] = ("metrics.json",)) -> str:
    """A top-level MLflow run of a single-step flow (eval, rollouts): `log_nested_run` without a
    parent, with provenance tags, out_dir's `artifacts` (each must exist) and its trajectories as
    sample dialogues."""
    files = [Path(out_dir) / name for name in artifacts]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"the step wrote no {', '.join(missing)}")
    tracking.configure()
    return log_nested_run(tracking.experiment_id(experiment), None, run_name, config, metrics,
                          tracking.provenance_tags(), files=files,
                          dialogues=Path(out_dir) / "trajectories.jsonl", sample_dialogues=sample_dialogues)


def log_nested_run(experiment_id: str, parent: str | None, name: str, config: dict[str, Any], metrics: dict,
                   tags: dict[str, str], files: Sequence[Path] = (), curves: Path | None = None,
                   dialogues: Path | None = None, sample_dialogues: int = 0, curve_step: str = "step",
                   curve_prefix: str = "train/") -> str:
    """A nested MLflow run under `parent` (a top-level run when None): config as params, metrics,
    `files` as artifacts (those that exist), every numeric value of every row of a JSONL file
    (`curves`: a train_metrics.jsonl, or CORY's iterations.jsonl) as a metric curve
    `<curve_prefix><key>` by the row's `curve_step`, and the first `sample_dialogues` trajectories
    of `dialogues` rendered as markdown. Returns the run id.

    The parent is passed explicitly: MLflow's active run is thread-local and Prefect tasks may run on
    another thread than the flow."""
    import mlflow
    from mlflow.entities import Metric

    with mlflow.start_run(experiment_id=experiment_id, run_name=name, nested=parent is not None,
                          parent_run_id=parent, tags=tags) as run:
        mlflow.log_params(tracking.flatten(config))
        mlflow.log_metrics(tracking.numeric(metrics))
        for path in files:
            if Path(path).exists():
                mlflow.log_artifact(str(path))
        if curves is not None and curves.exists():
            rows = [json.loads(line) for line in curves.read_text().splitlines() if line.strip()]
            curve = [Metric(f"{curve_prefix}{k}", float(v), 0, int(r[curve_step])) for r in rows
                     for k, v in r.items() if k != curve_step and isinstance(v, (int, float))]
            for start in range(0, len(curve), 900):
                mlflow.tracking.MlflowClient().log_batch(run.info.run_id, metrics=curve[start:start + 900])
            mlflow.log_artifact(str(curves))
        if dialogues is not None and sample_dialogues and dialogues.exists():
            trajs = list(read_jsonl(dialogues, Trajectory))[:sample_dialogues]
            mlflow.log_text(tracking.render_dialogues(trajs), "dialogues.md")
        return run.info.run_id


def registry_gate(model: str, run_id: str, metrics: dict) -> dict | None:
    """Register the evaluated model as `candidate` and promote it to `champion` only if it beats the
    champion (components.tracking.registry); None, with a log line, when the model is not a local folder."""
    from prefect import get_run_logger

    if not Path(model).is_dir():
        get_run_logger().info("registry: %s is not a local folder; not registered", model)
        return None
    tracking.configure()
    result = registry.gate(Path(model), run_id, metrics)
    get_run_logger().info("registry: %s v%s %s (%s)", registry.MODEL_NAME, result.version,
                          "promoted to champion" if result.promoted else "kept as candidate", result.reason)
    return asdict(result)


_DVC_GIT_HINTS = ("To track the changes with git", "git add ", "To enable auto staging", "core.autostage",
                  "Use `dvc push`")


def dvc_repro(dvc_yaml: Path, stage: str, *, log_path: Path | None = None) -> bool:
    """`dvc repro --single-item DVC_YAML:STAGE` in a child process group; True when the stage ran,
    False when DVC skipped it (deps, params and outs unchanged since its dvc.lock entry).

    Everything DVC and the stage print goes to `log_path` (default: `logs/<stage>.log` beside the
    dvc.yaml), appended per attempt; the console gets the stage's progress bars, warnings, errors
    and result line, or everything when $SWEETFLOW_VERBOSE is 1 (`sweetflow --verbose`); see
    flows/console.py. The stage's `python` is this interpreter (its folder leads PATH). If this
    process is stopped (Ctrl-C, SIGTERM turned into SystemExit), the whole group gets SIGTERM, so
    the step's own child is not left running; its persisted outputs let the next run resume it."""
    from flows.console import run_logged

    log_path = Path(dvc_yaml).parent / "logs" / f"{stage}.log" if log_path is None else Path(log_path)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    skip = "didn't change, skipping"
    result = run_logged([sys.executable, "-m", "dvc", "repro", "--single-item", f"{dvc_yaml}:{stage}"], log_path,
                        env, watch=(skip,), show=(skip, "skipping run, checking out outputs"), hide=_DVC_GIT_HINTS)
    if result.returncode != 0:
        raise RuntimeError(f"stage {dvc_yaml}:{stage} failed with exit code {result.returncode} (log: {log_path})")
    return skip not in result.seen


def format_table(rows: Sequence[tuple[str, str]]) -> str:
    """(label, value) rows as a small fixed-width table."""
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)
