"""SWEET-RL on ColBench frontend design end to end (`sweetflow run --task colbench-frontend`, smoke
profile): real Prefect, DVC, MLflow, Chromium rendering and the layout similarity.

The default model writes no page (README "ColBench frontend"), so iteration 1 trains on offline
rollouts (`rollouts.offline`) from the controlled design world of tests/synthetic_pages.py, scored
here by the frontend task on rendered pages. Everything after runs for real on the tiny model: the
trajectory pairs by score gap, the critic with the reference HTML as its training-time information,
candidates, ranking, the actor, and the trained actor's frontend evaluation (the offline designer
on rendered pages).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from components.data.records import Trajectory, TrajectoryPair, read_jsonl, write_jsonl
from components.tasks.colbench_frontend.config import FrontendConfig
from components.tasks.colbench_frontend.task import ColbenchFrontend
from tests import synthetic_pages as world
from tests.conftest import REPO, git_dvc_project
from tests.pipeline_helpers import OPTIM, SWEET_STAGES, offline_run_sets

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # minutes: CI runs it with `make test-slow`


@pytest.fixture
def overrides(project_dir, tiny_model_dir):
    """A git+DVC project with the world's design tasks and their scored offline rollouts; the -S list."""
    from transformers import AutoTokenizer

    git_dvc_project(project_dir)
    tasks = world.make_tasks(24, seed=1)
    write_jsonl(project_dir / "world" / "pages.jsonl", tasks)
    cfg = FrontendConfig(tasks="world/pages.jsonl", assets_dir=str(REPO / "vendor/web"), render_cache=None)
    scorer = ColbenchFrontend({"frontend": cfg})
    try:
        trajs = world.rollouts(AutoTokenizer.from_pretrained(tiny_model_dir), scorer, tasks, 3, 2, seed=2)
    finally:
        scorer.close()
    sets = {
        "frontend.tasks": "world/pages.jsonl",
        "frontend.assets_dir": cfg.assets_dir,
        "frontend.render_cache": "null",
        **offline_run_sets(project_dir, trajs, cfg, tiny_model_dir),
    }
    return [f"{k}={v}" for k, v in sets.items()]


def test_sweet_rl_on_frontend_forms_gap_pairs_trains_and_evaluates_the_actor(overrides):
    from flows.pipeline_flow import PipelineParams, pipeline_flow

    result = pipeline_flow(PipelineParams(profile="smoke", task="colbench-frontend", overrides=overrides))
    zero, first = result["iterations"]
    assert zero["ran"] == ["eval_zero_shot"] and first["ran"] == SWEET_STAGES and first["no_signal"] is None
    iteration = Path(result["run_dir"]) / "iter-1"
    trajs = {t.key: t for t in read_jsonl(iteration / "rollouts" / "trajectories.jsonl", Trajectory)}
    pairs = list(read_jsonl(iteration / "train" / "pairs" / "pairs.jsonl", TrajectoryPair))
    assert pairs and all(trajs[p.chosen].score - trajs[p.rejected].score >= 0.1 for p in pairs)  # rule gap
    critic = json.loads((iteration / "train" / "critic" / "metrics.json").read_text())
    assert critic["steps"] == OPTIM["max_steps"] and critic["final_loss"] < critic["first_loss"]
    assert (iteration / "train" / "actor" / "model" / "config.json").exists()
    metrics = json.loads((iteration / "train" / "eval" / "metrics.json").read_text())
    assert metrics["n"] == 2 and 0.0 <= metrics["similarity_layout"] <= 1.0
