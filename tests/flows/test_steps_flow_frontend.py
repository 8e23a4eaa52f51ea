"""`sweetflow eval --task colbench-frontend` end to end: the real Prefect flow, the default model,
the offline designer and the scorer on real rendered pages, tracked in a real MLflow store."""

from __future__ import annotations

import json

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl
from components.tasks.colbench_frontend.simulator import NO_PAGE
from tests.conftest import DEFAULT_MODEL_DIR as MODEL
from tests.conftest import REPO

pytestmark = pytest.mark.integration


def test_frontend_eval_flow_scores_designs_and_names_its_metric(workdir):
    import mlflow

    from flows.planning.step_commands import EvalParams
    from flows.steps_flow import eval_flow

    params = {
        "task": {"name": "colbench-frontend"},
        "frontend": {
            "tasks": str(REPO / "data/colbench/frontend_test.jsonl"),
            "assets_dir": str(REPO / "vendor/web"),
            "render_cache": None,
        },
        "episode": {"max_turns": 2, "max_tokens": 24, "max_model_len": 2048, "sim_max_chars": 400},
        "eval": {
            "model": str(MODEL),
            "engine": "hf",
            "limit": 2,
            "bootstrap_samples": 200,
            "out_dir": "out",
            "experiment": "it-eval-frontend",
        },
    }
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    result = eval_flow(EvalParams())
    trajs = list(read_jsonl(workdir / "out" / "trajectories.jsonl", Trajectory))
    assert len(trajs) == 2 and all(t.score is not None and t.total == 1 for t in trajs)
    replies = [turn.observation for t in trajs for turn in t.turns if turn.observation]
    assert replies and all(0 < len(r) <= 1000 for r in replies)  # the task's cut, not episode's 400
    assert any(r.startswith(NO_PAGE) or "background" in r for r in replies)
    metrics = json.loads((workdir / "out" / "metrics.json").read_text())
    assert metrics["similarity_layout"] == metrics["mean_score"] and metrics["n"] == 2
    run = mlflow.get_run(result["mlflow_run_id"])
    assert run.data.tags["sweetflow.task"] == "colbench-frontend" and "similarity_layout" in run.data.metrics
