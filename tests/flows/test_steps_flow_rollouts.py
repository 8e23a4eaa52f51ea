"""End-to-end rollouts: real HF engine, retrieval simulator, sandbox, Prefect flow and MLflow store."""

from __future__ import annotations

import json

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl
from components.tasks.colbench_backend.task import ColbenchBackend
from tests.conftest import DEFAULT_MODEL_DIR as MODEL
from tests.conftest import TASKS_FILE as TASKS

pytestmark = pytest.mark.integration


@pytest.fixture
def workdir(workdir):
    """The project folder with params.yaml: a short protocol, 2 train tasks x K=2."""
    params = {
        "data": {"backend_tasks": str(TASKS), "eval_fraction": 0.2, "split_salt": "sweetflow-v1"},
        "episode": {
            "max_turns": 2,
            "temperature": 1.0,
            "max_tokens": 16,
            "max_model_len": 2048,
            "sim_max_tokens": 32,
            "sim_max_chars": 400,
        },
        "rollouts": {
            "model": str(MODEL),
            "engine": "hf",
            "simulator": "retrieval",
            "split": "train",
            "limit": 2,
            "per_task": 2,
            "seed": 3,
            "out_dir": "out",
            "experiment": "it-rollouts",
            "sample_dialogues": 2,
        },
    }
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return workdir


def test_rollouts_flow_k_scored_trajectories_per_train_task(workdir):
    import mlflow

    from components.config.sections import DataConfig, RolloutsConfig, load_section
    from components.episodes.play import select_tasks
    from flows.planning.step_commands import RolloutsParams, rollouts_run
    from flows.steps_flow import steps_flow

    result = steps_flow(rollouts_run(RolloutsParams()))
    out = workdir / "out"
    trajs = list(read_jsonl(out / "trajectories.jsonl", Trajectory))
    assert sorted((t.task_index, t.sample) for t in trajs) == sorted(
        (i, k) for i in {t.task_index for t in trajs} for k in range(2)
    )
    assert len(trajs) == 4 and len({t.seed for t in trajs}) == 4 and {t.run_seed for t in trajs} == {3}
    task = ColbenchBackend({"data": load_section(DataConfig, "data")})
    _, train = select_tasks(task, load_section(RolloutsConfig, "rollouts"))
    assert {t.task_index for t in trajs} == set(train)
    for t in trajs:
        assert 1 <= len(t.turns) <= 2 and t.score is not None and t.total == 10
        assert all(turn.response_ids and len(turn.response_logprobs) == len(turn.response_ids) for turn in t.turns)
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n_tasks"], metrics["n_trajectories"], metrics["episodes_run"]) == (2, 4, 4)
    assert 0.0 <= metrics["solved_task_fraction"] <= 1.0 and result["tests_passed"] == metrics["tests_passed"]

    run = mlflow.get_run(result["mlflow_run_id"])
    assert run.data.params["rollouts.per_task"] == "2" and run.data.params["episode.max_turns"] == "2"
    assert run.data.metrics["n_trajectories"] == 4 and "git_commit" in run.data.tags
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"dialogues.md", "metrics.json"} <= artifacts

    again = steps_flow(rollouts_run(RolloutsParams()))  # unchanged: DVC skips the stage, nothing is re-sampled
    assert not again["ran"] and again["n_trajectories"] == 4
    rerun = list(read_jsonl(out / "trajectories.jsonl", Trajectory))
    assert [(t.seed, t.turns) for t in rerun] == [(t.seed, t.turns) for t in trajs]
