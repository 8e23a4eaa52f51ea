"""`sweetflow run --profile tiny` as a user runs it, in a git+DVC project of its own whose models/
links the session's default and tiny models (that a run makes the tiny one when missing:
tests/flows/runtime/test_inputs.py). The run generates the elicitation tasks, and every SWEET-RL step
of iteration 1 runs on the hf engine, one optimizer step per training stage. The tiny model's own
answers score 0, so iteration 1 trains on the task's scripted, scored demonstrations, which the run
writes first. Real Prefect, DVC and MLflow (about 40 s on 2 idle cores, stages forked from the stage server)."""

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
    train = run_dir / "iter-1/train"  # critic quality reuses the critic's reference pass, adding nothing
    assert (train / "critic_quality/reference_sums.jsonl").read_text() == (
        train / "critic/reference_logprobs.jsonl"
    ).read_text()
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


TIMINGS = ("second", "per_s", "rss")  # what may differ between two runs of the same work


def _untimed(doc):
    if isinstance(doc, dict):
        return {k: _untimed(v) for k, v in doc.items() if not any(t in k for t in TIMINGS)}
    return [_untimed(v) for v in doc] if isinstance(doc, list) else doc


def _outputs(run_dir: Path) -> dict[str, object]:
    """Every step's outputs by path (the run's folder named <run>): records and models by DVC's hash,
    metrics untimed (training checkpoints hold Python's unseeded generator's state, which no two
    processes share)."""
    project, found = run_dir.parents[2], {}
    for lock in sorted(run_dir.glob("iter-*/dvc.lock")):
        for stage in yaml.safe_load(lock.read_text())["stages"].values():
            for out in stage.get("outs", []):
                path, key = project / out["path"], out["path"].replace(str(run_dir.relative_to(project)), "<run>")
                if path.name.endswith(".json"):
                    found[key] = _untimed(json.loads(path.read_text()))
                elif path.name.endswith(".jsonl") and "metrics" in path.name:
                    found[key] = [_untimed(json.loads(line)) for line in path.read_text().splitlines()]
                elif path.name != "checkpoints":
                    found[key] = out.get("md5")
    return found


@pytest.mark.slow  # two tiny runs (~2 min)
def test_stages_forked_from_the_stage_server_write_what_their_own_processes_write(
    tmp_path, prepared_model_dir, tiny_model_dir
):
    outputs = {}
    for preload in ("true", "false"):
        (tmp_path / preload).mkdir()
        project = git_dvc_project(tmp_path / preload)
        (project / "models").mkdir()
        for model in (prepared_model_dir, tiny_model_dir):
            (project / "models" / model.name).symlink_to(model)
        cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", "tiny"]
        done = subprocess.run(
            [*cmd, "-S", f"cluster.preload_stages={preload}"], cwd=project, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        [run_dir] = (project / "runs" / "pipeline").iterdir()
        outputs[preload] = _outputs(run_dir)
        server_log = run_dir / "logs" / "stage_server.log"
        if preload == "true":
            assert (
                server_log.read_text().count("ended with exit code 0") == 2 + len(SWEET_STAGES) - 1
            )  # all but the generator
        else:
            assert not server_log.exists()
    assert len(outputs["true"]) > 20 and outputs["true"] == outputs["false"]
