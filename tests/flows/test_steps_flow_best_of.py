"""`sweetflow eval --best-of`: the real flow, stage process, task generator and MLflow store on a tiny
random model (hf engine), writing outside the project (no DVC)."""

from __future__ import annotations

import json

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl

pytestmark = pytest.mark.integration


def test_best_of_eval_flow_ranks_with_the_base_critic_and_tracks_to_mlflow(
    project_dir, tiny_model_dir, tmp_path_factory
):
    import mlflow

    from flows.planning.step_commands import EvalParams
    from flows.steps_flow import eval_flow

    params = {
        "task": {"name": "elicitation"},
        "elicitation": {"file": "tasks/elicitation.jsonl", "train_tasks": 4, "eval_tasks": 3},
        "episode": {"max_turns": 2, "max_tokens": 6, "sim_max_tokens": 8, "max_model_len": 1024},
        "eval": {"model": str(tiny_model_dir), "engine": "hf", "limit": 3, "bootstrap_samples": 200},
        "critic": {"model": str(tiny_model_dir)},
        "ranking": {"max_batch": 2},
    }
    (project_dir / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path_factory.mktemp("outside") / "bon"
    result = eval_flow(EvalParams(best_of=3, critic="base", out_dir=out, overrides=["episode.temperature=1.0"]))
    assert (project_dir / "tasks" / "elicitation.jsonl").exists()  # the task's generator ran first
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["best_of"] == 3 and metrics["critic"] == "base" and metrics["n"] == 3
    assert 3 <= metrics["ranked_states"] <= 6 and metrics["critic_score_spread_min"] >= 0
    assert yaml.safe_load((out / "params.yaml").read_text())["ranking"]["max_batch"] == 2
    for traj in read_jsonl(out / "trajectories.jsonl", Trajectory):
        for turn in traj.turns:
            assert turn.prompt_ids and len(turn.response_logprobs) == len(turn.response_ids) > 0
    run = mlflow.get_run(result["mlflow_run_id"])
    assert run.data.tags["sweetflow.best_of"] == "3" and run.data.tags["sweetflow.critic"] == "base"
    assert run.data.metrics["best_of"] == 3 and run.data.params["episode.max_turns"] == "2"
