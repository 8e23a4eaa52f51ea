"""`sweetflow run --profile smoke` on the elicitation task with the default model, as a user runs it:
every SWEET-RL step runs on a fresh machine (the task gives the 135M model a learning signal), the
trained actor is evaluated, and a baseline trained on the same rollouts lands in the same table.
Real Prefect, DVC, vLLM and MLflow in a git+DVC project of its own (about 5 minutes on 2 cores)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from flows.planning.plan import CODE_ROOT
from tests.conftest import git_dvc_init
from tests.pipeline_helpers import SWEET_STAGES

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ~7 min: CI runs it with `make test-slow`


def test_smoke_run_on_elicitation_trains_every_step_and_evaluates_the_actor(project_dir, prepared_model_dir):
    import mlflow

    from flows.pipeline_flow import PipelineParams, pipeline_flow

    git_dvc_init(project_dir)
    shutil.copy(CODE_ROOT / "params.yaml", project_dir / "params.yaml")
    model = str(prepared_model_dir)
    sets = [f"{s}.model={model}" for s in ("eval", "rollouts", "train", "critic")]
    result = pipeline_flow(PipelineParams(profile="smoke", baselines=["mtdpo"], overrides=sets))

    run_dir = Path(result["run_dir"])
    assert run_dir.name.startswith("sweet-elicitation-smoke-")
    zero, first = result["iterations"]
    assert zero["ran"] == ["elicitation_tasks", "eval_zero_shot"]
    assert first["ran"] == SWEET_STAGES and first["no_signal"] is None  # a fresh machine forms pairs
    assert (run_dir / "iter-1/train/actor/model/config.json").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    for it in summary:
        m = it["metrics"]
        assert m["mean_score_ci_low"] <= m["mean_score"] <= m["mean_score_ci_high"] and "success_rate" in m
    mtdpo = summary[1]["baselines"]["mtdpo"]
    assert mtdpo["ran"] == ["train_pairs", "actor", "eval_actor"] and "mean_score" in mtdpo["metrics"]
    assert Path(mtdpo["actor"]) == run_dir / "iter-1/mtdpo/actor/model"
    results = (run_dir / "results.md").read_text()
    scores = results.split("\n\n")[1].splitlines()  # the scores table (the critic-quality one follows)
    assert [line.split("|")[1].strip() for line in scores[2:]] == ["zero-shot", "sweet", "mtdpo"]
    wins = [line.split("|")[5].strip() for line in scores[3:]]  # trained models vs zero-shot
    assert all(re.fullmatch(r"[01]\.\d{3} \(\d+\)", cell) for cell in wins), results

    lock = yaml.safe_load((run_dir / "iter-0/dvc.lock").read_text())["stages"]
    assert lock["elicitation_tasks"]["outs"][0]["path"] == "data/elicitation/tasks.jsonl"  # DVC-tracked records
    evals = mlflow.search_runs(
        experiment_names=["sweetflow-pipeline"], filter_string="tags.`sweetflow.kind` = 'eval'", output_format="list"
    )
    assert {r.data.tags["sweetflow.task"] for r in evals} == {"elicitation"}
    assert sorted(r.data.tags["sweetflow.algo"] for r in evals) == ["mtdpo", "sweet", "sweet"]
    client = mlflow.MlflowClient()
    assert client.get_model_version_by_alias("sweetflow-actor-elicitation", "candidate")
