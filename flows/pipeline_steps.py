"""What the pipeline flow does around its DVC stages: fetch the data and the base model, decide
whether an iteration has a learning signal, and log a stage to MLflow as a nested run.

Wiring only: stage outputs are read back from the files the generated dvc.yaml declares.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from components.tracking import store as tracking
from components.config.sections import ConfigError
from components.data.pull import dvc_pull
from components.data.model_prepare import is_complete, resolve_model
from flows.plan import CORY, EVAL_ACTOR, ROLLOUTS, ZERO_SHOT, PipelineAlgo, RunPlan
from components.training.loop import METRICS_FILE
from flows.cory_steps import track_cory
from flows.steps import log_nested_run
from flows.train_flow import STEPS

EVAL_STAGES = (ZERO_SHOT, EVAL_ACTOR)
EPISODE_STAGES = (ROLLOUTS, *EVAL_STAGES)
DEFAULT_MODEL = Path("models/smollm2-135m-instruct")


def data_files(plan: RunPlan) -> list[Path]:
    """The data files the run reads: the ColBench tasks, or GSM8K's train and test questions."""
    if plan.gsm8k:
        return [Path(plan.doc["cory"]["train_file"]), Path(plan.doc["cory"]["test_file"])]
    return [Path(plan.doc["data"]["backend_tasks"])]


def pull_data(plan: RunPlan) -> list[str]:
    """`dvc pull` each data file DVC tracks (a `.dvc` pointer beside it); any other must exist."""
    files = data_files(plan)
    tracked = [f"{f}.dvc" for f in files if Path(f"{f}.dvc").exists()]
    if tracked and (plan.gsm8k or plan.doc["data"]["source"] == "dvc"):
        dvc_pull(targets=tracked)
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"data file(s) {', '.join(missing)} not found (and no .dvc pointer to pull them)")
    return [str(f) for f in files]


def prepare_model(plan: RunPlan) -> str:
    """The base model: the embedded default is prepared when missing; any other must resolve."""
    base = plan.doc["cory" if plan.gsm8k else "train"]["model"]
    if Path(base) == DEFAULT_MODEL and not is_complete(DEFAULT_MODEL):
        subprocess.run([sys.executable, "-m", "components.data.model_prepare", "--out", base], check=True)
    for model in {base, *([] if plan.gsm8k else [plan.doc["critic"]["model"]])}:
        resolve_model(model)
    return base


def no_signal(algo: PipelineAlgo, stage: str, metrics: dict[str, Any]) -> str | None:
    """Why this iteration cannot train (None when it can): no trajectory pair, or for rft no success."""
    if stage == "train_pairs" and metrics.get("pairs", 0) == 0:
        return f"0 trajectory pairs from {metrics.get('trajectories', 0)} trajectories: no task has a " \
               "trajectory scoring above another (see pairs.min_chosen_score)"
    if algo == PipelineAlgo.rft and stage == ROLLOUTS and metrics.get("success_rate", 0) == 0:
        return f"no successful trajectory among {metrics.get('n_trajectories', 0)}"
    return None


def _stage_spec(dvc_yaml: Path, stage: str) -> dict[str, Any]:
    return yaml.safe_load(Path(dvc_yaml).read_text())["stages"][stage]


def _first_key(entry: Any) -> str:
    return next(iter(entry)) if isinstance(entry, dict) else entry


def track_stage(plan: RunPlan, dvc_yaml: Path, stage: str, k: int, ran: bool, parent: str,
                experiment: str) -> dict[str, Any]:
    """A nested MLflow run for one stage of iteration k; returns its run id and metrics."""
    spec = _stage_spec(dvc_yaml, stage)
    params_file, sections = next(iter(spec["params"][0].items())) if spec.get("params") else (None, [])
    doc = yaml.safe_load(Path(params_file).read_text()) if params_file else {}
    metrics_path = Path(_first_key(spec["metrics"][0]))
    if not metrics_path.exists():
        raise ConfigError(f"stage {stage} of {dvc_yaml} wrote no {metrics_path}")
    metrics = json.loads(metrics_path.read_text())
    tags = tracking.provenance_tags(Path(dvc_yaml).parent) | {
        "sweetflow.kind": "eval" if stage in EVAL_STAGES else "stage", "sweetflow.algo": plan.algo.value,
        "sweetflow.profile": plan.profile, "sweetflow.iteration": str(k), "sweetflow.stage": stage,
        "sweetflow.skipped": str(not ran).lower()}
    if stage == CORY:
        return {"run_id": track_cory(doc, metrics, metrics_path, k, parent, experiment, tags), "metrics": metrics}
    root = Path(doc.get("train", {}).get("out_dir", "."))
    files, curves, dialogues = [metrics_path], None, None
    if stage in STEPS:
        step = STEPS[stage]
        files += [root / name for name in step.artifacts]
        curves = root / step.curves / METRICS_FILE if step.curves else None
    else:
        dialogues = metrics_path.parent / "trajectories.jsonl"
        files.append(metrics_path.parent / "scores.jsonl")
    sample = doc.get("eval" if stage in EVAL_STAGES else "rollouts", {}).get("sample_dialogues", 0)
    run_id = log_nested_run(experiment, parent, f"iter {k} {stage}", {s: doc[s] for s in sections}, metrics, tags,
                            files=files, curves=curves, dialogues=dialogues, sample_dialogues=sample)
    return {"run_id": run_id, "metrics": metrics}
