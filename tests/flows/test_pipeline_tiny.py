"""`sweetflow run --profile tiny` as a user runs it, in a git+DVC project of its own whose models/
links the session's default and tiny models (that a run makes the tiny one when missing:
tests/flows/runtime/test_inputs.py). The run generates the elicitation tasks, and every SWEET-RL step
of iteration 1 runs on the hf engine, one optimizer step per training stage. The tiny model's own
answers score 0, so iteration 1 trains on the task's scripted, scored demonstrations, which the run
writes first. Real Prefect, DVC and MLflow (80-100 s on 2 idle cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl
from tests.conftest import git_dvc_project
from tests.pipeline_helpers import SWEET_STAGES

pytestmark = pytest.mark.integration


def test_tiny_profile_runs_every_sweet_rl_step(project_dir, prepared_model_dir, tiny_model_dir):
    from mlflow import MlflowClient

    from flows.planning.profiles import resolve

    git_dvc_project(project_dir)
    (project_dir / "models").mkdir()
    for model in (prepared_model_dir, tiny_model_dir):
        (project_dir / "models" / model.name).symlink_to(model)
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", "tiny"]
    done = subprocess.run(cmd, cwd=project_dir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    demos = list(read_jsonl(project_dir / resolve("tiny")["rollouts"]["offline"], Trajectory))  # written by the run
    assert sorted(t.score for t in demos) == [0.0, 0.0, 1.0, 1.0]  # two training tasks, answered right and not

    [run_dir] = (project_dir / "runs" / "pipeline").iterdir()
    assert run_dir.name.startswith("sweet-elicitation-tiny-")
    zero, first = json.loads((run_dir / "summary.json").read_text())
    assert zero["ran"] == ["elicitation_tasks", "eval_zero_shot"]
    assert first["ran"] == SWEET_STAGES and first["no_signal"] is None and "mean_score" in first["metrics"]
    assert (run_dir / "results.md").exists() and (run_dir / "iter-1/train/actor/model/config.json").exists()
    for stage in ("critic", "actor"):
        assert json.loads((run_dir / f"iter-1/train/{stage}/metrics.json").read_text())["steps"] == 1
    params = yaml.safe_load((run_dir / "iter-1/params.yaml").read_text())
    assert {params[s]["model"] for s in ("rollouts", "train", "critic")} == {"models/tiny-llama"}
    assert {params[s]["engine"] for s in ("eval", "rollouts", "candidates")} == {"hf"}

    client = MlflowClient(f"sqlite:///{project_dir / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sweetflow-pipeline").experiment_id
    [parent] = client.search_runs([experiment], "tags.`sweetflow.kind` = 'pipeline'")
    assert parent.data.tags["sweetflow.profile"] == "tiny"
    nested = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in nested) == sorted(
        ["iter 0 eval_zero_shot", *(f"iter 1 {s}" for s in SWEET_STAGES)]
    )
