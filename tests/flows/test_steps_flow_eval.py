"""End-to-end evaluation: real engines, real simulator, real sandbox, real Prefect flow and MLflow store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl
from components.tasks.colbench_backend.task import ColbenchBackend
from tests.conftest import DEFAULT_MODEL_DIR as MODEL
from tests.conftest import TASKS_FILE as TASKS

pytestmark = pytest.mark.integration


def write_params(workdir: Path, engine: str, limit: int) -> None:
    params = {
        "data": {"backend_tasks": str(TASKS), "eval_fraction": 0.2, "split_salt": "sweetflow-v1"},
        "episode": {
            "max_turns": 3,
            "temperature": 1.0,
            "max_tokens": 48,
            "max_model_len": 2048,
            "sim_max_tokens": 32,
            "sim_max_chars": 400,
        },
        "eval": {
            "model": str(MODEL),
            "engine": engine,
            "simulator": "retrieval",
            "split": "eval",
            "limit": limit,
            "seeds": [0],
            "bootstrap_samples": 200,
            "out_dir": "out",
            "experiment": "it-eval",
            "sample_dialogues": 2,
        },
    }
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))


def check_outputs(out: Path, n: int) -> dict:
    trajs = list(read_jsonl(out / "trajectories.jsonl", Trajectory))
    assert len(trajs) == n
    for t in trajs:
        assert 1 <= len(t.turns) <= 3 and t.score is not None and t.total == 10
        for turn in t.turns:
            assert turn.prompt_ids and turn.response_ids and len(turn.response_logprobs) == len(turn.response_ids)
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert {"index", "score", "passed", "total", "success", "error"} <= set(scores[0])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == n and 0.0 <= metrics["success_rate"] <= 1.0
    assert metrics["tests_passed_ci_low"] <= metrics["tests_passed"] <= metrics["tests_passed_ci_high"]
    assert metrics["mean_score"] == metrics["tests_passed"]
    return metrics


def test_eval_flow_hf_engine_tracks_to_mlflow(workdir):
    import mlflow

    from flows.planning.step_commands import EvalParams
    from flows.steps_flow import eval_flow

    write_params(workdir, "hf", 2)
    result = eval_flow(EvalParams(register_model=True))
    metrics = check_outputs(workdir / "out", 2)
    assert result["success_rate"] == metrics["success_rate"]
    run = mlflow.get_run(result["mlflow_run_id"])
    assert run.data.params["eval.engine"] == "hf" and run.data.params["episode.max_turns"] == "3"
    assert run.data.metrics["n"] == 2 and "tests_passed_ci_high" in run.data.metrics
    assert "git_commit" in run.data.tags
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"dialogues.md", "metrics.json", "scores.jsonl"} <= artifacts
    gated = result["registry"]  # the first registered model becomes candidate and champion
    assert gated["promoted"] and gated["champion"] == gated["version"]
    version = mlflow.MlflowClient().get_model_version_by_alias("sweetflow-actor", "candidate")
    assert version.source == str(MODEL.resolve()) and version.run_id == run.info.run_id
    assert run.data.tags["sweetflow.task"] == "colbench-backend"


def test_eval_resumes_without_duplicating_episodes(workdir):
    from components.config.sections import DataConfig, EpisodeSection, EvalConfig, load_section
    from components.stages.evaluate import run

    write_params(workdir, "hf", 2)
    cfg = load_section(EvalConfig, "eval", {"limit": 1})
    episode, data = load_section(EpisodeSection, "episode"), ColbenchBackend({"data": load_section(DataConfig, "data")})
    run(cfg, episode, data, Path("out"))
    first = (workdir / "out" / "trajectories.jsonl").read_text().splitlines()
    result = run(cfg.model_copy(update={"limit": 2}), episode, data, Path("out"))
    second = (workdir / "out" / "trajectories.jsonl").read_text().splitlines()
    assert len(second) == 2 and json.loads(second[0])["turns"] == json.loads(first[0])["turns"]
    assert result.metrics["n"] == 2


def test_eval_vllm_engine(workdir):
    pytest.importorskip("vllm")
    from components.config.sections import DataConfig, EpisodeSection, EvalConfig, load_section
    from components.stages.evaluate import run

    write_params(workdir, "vllm", 4)
    cfg = load_section(EvalConfig, "eval")
    task = ColbenchBackend({"data": load_section(DataConfig, "data")})
    result = run(cfg, load_section(EpisodeSection, "episode"), task, Path("out"))
    check_outputs(workdir / "out", 4)
    assert result.metrics["prompt_reencoded"] == 0
