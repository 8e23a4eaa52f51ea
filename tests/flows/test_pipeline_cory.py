"""CORY and PPO as pipeline algorithms on the smoke profile: real Prefect runs, a real DVC stage in
a git+DVC project of its own, a real MLflow store; the tiny model with the hf engine on a six-question
GSM8K, and on a few generated review openers. Its answers are noise, so the numbers are plumbing,
not learning."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import git_dvc_project
from tests.cory_helpers import write_gsm8k

pytestmark = pytest.mark.integration


@pytest.fixture
def overrides(project_dir, tiny_model_dir):
    git_dvc_project(project_dir)
    write_gsm8k(project_dir / "gsm8k")
    sets = {
        "cory.model": str(tiny_model_dir),
        "cory.engine": "hf",
        "gsm8k.train_file": "gsm8k/train.jsonl",
        "gsm8k.test_file": "gsm8k/test.jsonl",
        "cory.max_new_tokens": 5,
        "cory.lr": 0.01,
        "cory.lora": json.dumps({"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}),
    }
    return [f"{k}={v}" for k, v in sets.items()]


def _children(parent: str, kind: str) -> list:
    import mlflow

    where = f"tags.mlflow.parentRunId = '{parent}' and tags.`sweetflow.kind` = '{kind}'"
    return mlflow.search_runs(experiment_names=["sweetflow-pipeline"], filter_string=where, output_format="list")


def test_cory_runs_as_one_tracked_stage_and_a_longer_run_resumes_it(overrides):
    from mlflow import MlflowClient

    from components.tracking.compare import eval_runs, format_table
    from flows.pipeline_flow import PipelineParams, pipeline_flow

    first = pipeline_flow(PipelineParams(algo="cory", profile="smoke", overrides=overrides))
    assert [it["ran"] for it in first["iterations"]] == [["cory"]]
    run_dir = Path(first["run_dir"])
    out = run_dir / "iter-1" / "cory"
    assert "cory" in yaml.safe_load((run_dir / "iter-1" / "dvc.lock").read_text())["stages"]
    assert (out / "adapters" / "agent1" / "adapter_config.json").exists()
    assert "agent0 pass@1" in first["summary"] and "agent1 pass@1" in first["summary"]
    assert first["iterations"][0]["actor"] == str(out / "adapters")
    assert (run_dir / "frontier.png").stat().st_size > 10_000
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [e["k"] for e in summary] == [0, 1, 2]  # the base model, then every iteration
    for agent in ("agent0", "agent1"):
        assert {f"{agent}/reward", f"{agent}/kl", f"{agent}/sampled_kl", f"{agent}/entropy"} <= set(
            summary[-1]["metrics"]
        )

    [stage] = _children(first["mlflow_run_id"], "stage")
    assert stage.data.params["cory.algo"] == "cory" and stage.data.metrics["iterations"] == 2
    history = MlflowClient().get_metric_history(stage.info.run_id, "train/agent0/kl")
    assert [m.step for m in history] == [1, 2]
    assert "samples.md" in {f.path for f in MlflowClient().list_artifacts(stage.info.run_id)}
    evals = _children(first["mlflow_run_id"], "eval")
    points = sorted((int(r.data.tags["sweetflow.iteration"]), r.data.tags["sweetflow.agent"]) for r in evals)
    assert points == [(i, a) for i in range(3) for a in ("agent0", "agent1")]
    rows = [json.loads(line) for line in (out / "iterations.jsonl").read_text().splitlines()]
    last = next(
        r for r in evals if r.data.tags["sweetflow.iteration"] == "2" and r.data.tags["sweetflow.agent"] == "agent1"
    )
    assert last.data.metrics["success_rate"] == rows[-1]["eval/agent1/pass_at_1"]
    assert last.data.metrics["kl"] == rows[-1]["eval/agent1/kl"] and last.data.metrics["n"] == 2

    df = eval_runs()
    assert {"task_reward", "kl", "objective"} <= set(df.columns) and set(df["agent"]) == {"agent0", "agent1"}
    assert "cory/agent1" in format_table(df)

    longer = pipeline_flow(PipelineParams(algo="cory", profile="smoke", iterations=3, overrides=overrides))
    assert longer["run_dir"] == first["run_dir"] and longer["iterations"][0]["ran"] == ["cory"]
    rows = [json.loads(line) for line in (out / "iterations.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3]  # resumed after iteration 2, nothing repeated

    again = pipeline_flow(PipelineParams(algo="cory", profile="smoke", iterations=3, overrides=overrides))
    assert again["iterations"][0]["skipped"] == ["cory"]


def test_ppo_trains_one_agent_on_the_same_stage(overrides):
    from flows.pipeline_flow import PipelineParams, pipeline_flow

    result = pipeline_flow(PipelineParams(algo="ppo", profile="smoke", iterations=1, overrides=overrides))
    assert Path(result["run_dir"]).name.startswith("ppo-gsm8k-smoke-")
    agents = {r.data.tags["sweetflow.agent"] for r in _children(result["mlflow_run_id"], "eval")}
    assert agents == {"agent0"} and "agent1" not in result["summary"]


def test_ppo_on_the_reviews_task_generates_its_openers_first(overrides):
    from components.tracking.compare import eval_runs
    from flows.pipeline_flow import PipelineParams, pipeline_flow

    cory = [o for o in overrides if not o.startswith("gsm8k.")]  # an override of a task not played is refused
    sets = [*cory, "reviews.train_openers=8", "reviews.eval_openers=2", "cory.chat_template=false"]
    result = pipeline_flow(PipelineParams(algo="ppo", profile="smoke", task="reviews", iterations=1, overrides=sets))
    assert Path(result["run_dir"]).name.startswith("ppo-reviews-smoke-")
    assert result["iterations"][0]["ran"] == ["reviews_openers", "cory"]
    assert "pass@1" not in result["summary"] and "agent0 reward" in result["summary"]
    evals = _children(result["mlflow_run_id"], "eval")
    assert {r.data.tags["sweetflow.task"] for r in evals} == {"reviews"}
    assert all("success_rate" not in r.data.metrics and "task_reward" in r.data.metrics for r in evals)
    assert set(eval_runs(task="reviews")["agent"]) == {"agent0"}
    sample = json.loads((Path(result["run_dir"]) / "iter-1/cory/samples.jsonl").read_text().splitlines()[0])
    openers = [json.loads(line)["opener"] for line in Path("data/reviews/openers.jsonl").read_text().splitlines()]
    assert sample["target"] == "positive sentiment" and sample["prompt"] in openers and len(openers) == 10


@pytest.mark.slow  # minutes: CI runs it with `make test-slow`
def test_a_cory_pipeline_killed_mid_training_resumes_after_its_last_iteration(overrides, project_dir):
    cmd = [
        str(Path(sys.executable).parent / "sweetflow"),
        "run",
        "--algo",
        "cory",
        "--profile",
        "smoke",
        "--iterations",
        "8",
        *[arg for o in overrides for arg in ("-S", o)],
    ]
    proc = subprocess.Popen(cmd, cwd=project_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows_at_kill, deadline = 0, time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        found = list(project_dir.glob("runs/pipeline/cory-gsm8k-smoke-*/iter-1/cory/iterations.jsonl"))
        if found and found[0].read_text().strip():
            proc.send_signal(signal.SIGTERM)
            rows_at_kill = len(found[0].read_text().splitlines())
            break
        time.sleep(0.05)
    proc.wait(timeout=120)
    assert 0 < rows_at_kill < 8, "the run was not killed between its first and last iteration"
    out = found[0].parent
    assert not (out / "metrics.json").exists()  # killed before the end

    resumed = subprocess.run(cmd, cwd=project_dir, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # the stage's own lines go to its log file (the console shows only progress, warnings, results)
    assert "resuming after iteration" in (out.parent / "logs" / "cory.log").read_text()
    rows = [json.loads(line) for line in (out / "iterations.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(1, 9))  # every iteration once: none lost, none repeated
    assert json.loads((out / "metrics.json").read_text())["iterations"] == 8
