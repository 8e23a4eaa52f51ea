"""One MLflow run of a step, nested under its pipeline's run: its params, metrics, files, metric
curves, sample dialogues (markdown and traces) and data inputs. flows/tracking/tracker.py and
flows/tracking/cory.py log every step through it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from components.data.records import Trajectory, read_jsonl
from components.tracking import datasets, traces
from components.tracking import store as tracking
from components.tracking.datasets import DataInput


def log_nested_run(
    experiment_id: str,
    parent: str | None,
    name: str,
    config: dict[str, Any],
    metrics: dict,
    tags: dict[str, str],
    files: Sequence[Path] = (),
    curves: Path | None = None,
    dialogues: Path | None = None,
    sample_dialogues: int = 0,
    trace_dialogues: int = 0,
    inputs: Sequence[DataInput] = (),
    curve_step: str = "step",
    curve_prefix: str = "train/",
) -> str:
    """A nested MLflow run under `parent` (a top-level run when None): config as params, the numeric
    metrics as metrics and the string ones (e.g. critic quality's `ranking_baseline`) as tags
    `result.<key>`, `files` as artifacts, every numeric value of every row of a JSONL file (`curves`: a
    train_metrics.jsonl, or CORY's iterations.jsonl) as a metric curve `<curve_prefix><key>` by the
    row's `curve_step`, the first `sample_dialogues` trajectories of `dialogues` rendered as
    markdown and the first `trace_dialogues` logged as traces (components/tracking/traces.py), and
    `inputs` as dataset inputs (components/tracking/datasets.py). Returns the run id.

    The parent is passed explicitly: MLflow's active run is thread-local and Prefect tasks may run on
    another thread than the flow."""
    import mlflow
    from mlflow.entities import Metric

    with mlflow.start_run(
        experiment_id=experiment_id, run_name=name, nested=parent is not None, parent_run_id=parent, tags=tags
    ) as run:
        mlflow.log_params(tracking.flatten(config))
        datasets.log_inputs(list(inputs), context=tags.get("sweetflow.stage", "input"))
        mlflow.log_metrics(tracking.numeric(metrics))
        mlflow.set_tags({f"result.{k}": v[:5000] for k, v in metrics.items() if isinstance(v, str)})
        for path in files:
            mlflow.log_artifact(str(path))
        if curves is not None and curves.exists():
            rows = [json.loads(line) for line in curves.read_text().splitlines() if line.strip()]
            curve = [
                Metric(f"{curve_prefix}{k}", float(v), 0, int(r[curve_step]))
                for r in rows
                for k, v in r.items()
                if k != curve_step and isinstance(v, (int, float))
            ]
            for start in range(0, len(curve), 900):
                mlflow.tracking.MlflowClient().log_batch(run.info.run_id, metrics=curve[start : start + 900])
            mlflow.log_artifact(str(curves))
        if dialogues is not None and (sample_dialogues or trace_dialogues) and dialogues.exists():
            trajs = list(read_jsonl(dialogues, Trajectory))
            if sample_dialogues:
                mlflow.log_text(tracking.render_dialogues(trajs[:sample_dialogues]), "dialogues.md")
            traces.log_episodes(trajs[:trace_dialogues], run.info.run_id, experiment_id, tags)
        return run.info.run_id
