"""The one tracker: an MLflow run for any catalogue stage, read back from the files it declares.

Wiring only. Every sweetflow command (`run`, `eval`, `rollouts`, `train`) runs its stages through
DVC on a generated dvc.yaml beside a params file, then calls `track_stage`, which reads that
params file and the stage's catalogue entry: the stage's sections as params, its metrics.json as
metrics, its declared artifacts as files (each must exist), its per-step JSONL as metric curves,
and its trajectories as readable sample dialogues. CORY stages also get one eval run per
iteration and agent (flows/cory_tracking.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import yaml

from components.data.records import Trajectory, read_jsonl
from components.stages.catalogue import STAGES, TASK, Kind
from components.tracking import datasets, traces
from components.tracking import store as tracking
from components.tracking.datasets import DataInput
from flows.plan import interpolate
from flows.played import played_class


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


def stage_files(stage: str, doc: dict[str, Any]) -> tuple[Path, list[Path]]:
    """The stage's metrics file and the files MLflow keeps (metrics first); FileNotFoundError names
    the first declared file the stage did not write."""
    spec = STAGES[stage]
    metrics = Path(interpolate(spec.metrics, doc))
    files = [metrics, *(Path(p) for p in interpolate(list(spec.artifacts), doc))]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"stage {stage} wrote no {', '.join(missing)}")
    return metrics, files


def stage_sections(stage: str, doc: dict) -> tuple[str, ...]:
    """The params sections `stage` read in the run whose params are `doc`: for a stage that plays
    a task, `task` and the task's own sections (e.g. ColBench's `data`, with its simulator prompt)."""
    spec = STAGES[stage]
    if TASK not in spec.sections:
        return spec.sections
    return spec.sections_for(played_class(doc[TASK]["name"], spec.kind == Kind.cory).sections)


def track_stage(
    dvc_yaml: Path, stage: str, ran: bool, parent: str | None, experiment: str, run_name: str, tags: dict[str, str]
) -> dict[str, Any]:
    """The MLflow run of `stage` of the generated `dvc_yaml` (its params file beside it); returns
    the run id, the stage's metrics and its data inputs (DataInput). TrackingError when the store
    fails: the stage's outputs stay on disk and the same command logs them (DVC skips the stage, and
    a skipped stage is tracked)."""
    from flows.cory_tracking import track_cory

    spec, folder = STAGES[stage], Path(dvc_yaml).parent
    doc = yaml.safe_load((folder / "params.yaml").read_text())
    metrics_path, files = stage_files(stage, doc)
    metrics = json.loads(metrics_path.read_text())
    log = folder / "logs" / f"{stage}.log"  # everything the step printed (flows/console.py)
    files += [log] if log.exists() else []
    tags = (
        tracking.provenance_tags(folder)
        | {
            "sweetflow.kind": "eval" if spec.kind == Kind.eval else "stage",
            "sweetflow.stage": stage,
            "sweetflow.skipped": str(not ran).lower(),
        }
        | tags
    )
    inputs = datasets.stage_inputs(folder / "dvc.lock", stage, datasets.default_remote())
    with tracking.store_errors(disk=True):  # a full disk under a local artifact store included
        if spec.kind == Kind.cory:
            run_id = track_cory(doc, metrics, files, run_name, parent, experiment, tags, inputs)
            return {"run_id": run_id, "metrics": metrics, "inputs": inputs}
        sample = int(interpolate(f"${{{spec.sample_key}}}", doc)) if spec.sample_key else 0
        traced = int(interpolate(f"${{{spec.trace_key}}}", doc)) if spec.trace_key else 0
        run_id = log_nested_run(
            experiment,
            parent,
            run_name,
            {s: doc[s] for s in stage_sections(stage, doc)},
            metrics,
            tags,
            files=files,
            curves=Path(interpolate(spec.curves, doc)) if spec.curves else None,
            dialogues=Path(interpolate(spec.dialogues, doc)) if spec.dialogues else None,
            sample_dialogues=sample,
            trace_dialogues=traced,
            inputs=inputs,
        )
    return {"run_id": run_id, "metrics": metrics, "metrics_file": str(metrics_path), "inputs": inputs}
