"""The one tracker: an MLflow run for any catalogue stage, read back from the files it declares.

Wiring only. Every sweetflow command (`run`, `eval`, `rollouts`, `train`) runs its stages through
DVC on a generated dvc.yaml beside a params file, then calls `track_stage`, which reads that
params file and the stage's catalogue entry: the stage's sections as params, its metrics.json as
metrics, its declared artifacts as files (each must exist), its per-step JSONL as metric curves,
and its trajectories as readable sample dialogues. CORY stages also get one eval run per
iteration and agent (flows/tracking/cory.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from components.stages.catalogue import STAGES, TASK, Kind
from components.tracking import datasets
from components.tracking import store as tracking
from components.tracking.nested import log_nested_run
from flows.planning.plan import interpolate
from flows.planning.played import played_class
from flows.tracking.cory import track_cory


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
    spec, folder = STAGES[stage], Path(dvc_yaml).parent
    doc = yaml.safe_load((folder / "params.yaml").read_text())
    metrics_path, files = stage_files(stage, doc)
    metrics = json.loads(metrics_path.read_text())
    log = folder / "logs" / f"{stage}.log"  # everything the step printed (flows/runtime/console.py)
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
