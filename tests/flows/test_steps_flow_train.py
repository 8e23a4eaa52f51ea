"""The train flow end to end for each algorithm: real Prefect runs, child processes, MLflow store.

Rollouts come from the controlled world of tests/synthetic_dialogues.py (the tiny model cannot
solve ColBench tasks, so real rollouts would give no pairs); actor and critic are the tiny model,
candidates are sampled with the hf engine. Few optimizer steps: this checks the wiring and the
files, tests/components/stages/test_credit_assignment.py checks that the learning works.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components.data.records import TurnCandidates, TurnPair, read_jsonl, write_jsonl
from tests import synthetic_dialogues as world
from tests.conftest import git_dvc_init

pytestmark = pytest.mark.integration
OPTIM = {"lr": 1e-3, "epochs": 1, "max_steps": 3, "batch_size": 4, "micro_batch_size": 2, "checkpoint_every": 2}


@pytest.fixture
def workdir(project_dir, tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tasks = world.make_world(12, seed=1)
    write_jsonl(project_dir / "rollouts" / "trajectories.jsonl", world.rollouts(tokenizer, tasks, 3, 2, seed=2))
    write_jsonl(project_dir / "tasks.jsonl", tasks.tasks)
    params = {
        "data": {"backend_tasks": str(project_dir / "tasks.jsonl")},
        "episode": {"max_model_len": 1024, "max_tokens": 8},
        "train": {
            "model": str(tiny_model_dir),
            "trajectories": "rollouts",
            "out_dir": "train",
            "experiment": "it-train",
        },
        "pairs": {"min_chosen_score": 1.0, "per_state": 2, "seed": 0},
        "critic": {"model": str(tiny_model_dir), "optim": OPTIM, "ref_batch_size": 4},
        "candidates": {"engine": "hf", "fraction": 0.2, "per_state": 4, "max_tokens": 8, "seed": 0},
        "ranking": {"baseline": "reference", "max_batch": 4},
        "actor": {"algo": "sweet", "optim": OPTIM, "ref_batch_size": 4},
    }
    (project_dir / "params.yaml").write_text(yaml.safe_dump(params))
    return git_dvc_init(project_dir)


def nested_runs(parent_id: str) -> dict[str, object]:
    import mlflow

    runs = mlflow.search_runs(
        experiment_names=["it-train"], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'", output_format="list"
    )
    return {r.info.run_name: r for r in runs}


def test_sweet_flow_runs_every_step_and_tracks_each_in_mlflow(workdir):
    import mlflow

    from flows.planning.step_commands import TrainParams, train_run
    from flows.steps_flow import steps_flow

    result = steps_flow(train_run(TrainParams()))
    root = workdir / "train"
    assert (root / "actor" / "model" / "config.json").exists() and (root / "critic" / "model" / "config.json").exists()
    states = list(read_jsonl(root / "candidates" / "candidates.jsonl", TurnCandidates))
    assert states and all(len(s.candidates) == 4 for s in states)
    ranked = list(read_jsonl(root / "ranking" / "ranked.jsonl", TurnCandidates))
    assert all(c.score is not None for s in ranked for c in s.candidates)
    assert list(read_jsonl(root / "ranking" / "turn_pairs.jsonl", TurnPair))
    runs = nested_runs(result["mlflow_run_id"])
    assert set(runs) == {"trajectory pairs", "critic", "candidates", "ranking", "turn pairs", "critic quality", "actor"}
    critic = runs["critic"]
    assert critic.data.params["critic.beta"] == "0.1" and "final_loss" in critic.data.metrics
    curve = mlflow.tracking.MlflowClient().get_metric_history(critic.info.run_id, "train/loss")
    view = (root / "critic" / "advantages.md").read_text()
    assert view.count("| 0 | ") >= 2 and "pair 1 chosen" in view and "pair 1 rejected" in view
    logged = {a.path for a in mlflow.tracking.MlflowClient().list_artifacts(critic.info.run_id)}
    assert {"advantages.md", "metrics.json", "train_metrics.jsonl"} <= logged
    steps = int(critic.data.metrics["steps"])
    assert 1 <= steps <= 3 and sorted(m.step for m in curve) == list(range(1, steps + 1))
    actor_rows = [json.loads(line) for line in (root / "actor" / "train_metrics.jsonl").read_text().splitlines()]
    assert {
        "loss",
        "dpo_loss",
        "nll",
        "accuracy",
        "margin",
        "chosen_reward",
        "rejected_reward",
        "lr",
        "tokens_per_s",
    } <= set(actor_rows[0])


@pytest.mark.parametrize("algo, steps", [("mtdpo", {"trajectory pairs", "actor"}), ("rft", {"actor"})])
def test_baselines_run_only_their_steps(workdir, algo, steps):
    from flows.planning.step_commands import TrainParams, train_run
    from flows.steps_flow import steps_flow

    result = steps_flow(train_run(TrainParams(algo=algo, out_dir=f"train-{algo}")))
    assert set(nested_runs(result["mlflow_run_id"])) == steps
    assert Path(result["actor_model"]).is_dir() and not (workdir / f"train-{algo}" / "critic").exists()
