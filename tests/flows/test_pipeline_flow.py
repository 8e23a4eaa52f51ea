"""The pipeline flow end to end on the smoke profile: real Prefect runs, real DVC stages in a git+DVC
project of its own, a real MLflow store and registry.

The tiny model cannot solve ColBench, so iteration 1 trains on offline rollouts from the controlled
world of tests/synthetic_dialogues.py (`rollouts.offline`, the paper's offline setting) with that
world's tasks as the tasks file; everything else (critic, candidates, ranking, actor, evaluation)
runs for real on the tiny model with the hf engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from components.data.records import Trajectory, read_jsonl
from tests.pipeline_helpers import SWEET_STAGES

pytestmark = pytest.mark.integration


def processes_in(folder: Path) -> list[str]:
    """Command lines of the live processes (but this one) whose working directory is under `folder`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            if (
                Path(os.readlink(proc / "cwd")).is_relative_to(folder)
                and "Z" != (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            ):
                found.append((proc / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue
    return found


def _runs(parent: str | None = None) -> list:
    import mlflow

    where = f"tags.mlflow.parentRunId = '{parent}'" if parent else "tags.`sweetflow.kind` = 'pipeline'"
    return mlflow.search_runs(experiment_names=["sweetflow-pipeline"], filter_string=where, output_format="list")


@pytest.mark.slow  # two smoke runs, minutes: `make test` keeps the tiny profile's run (test_pipeline_tiny.py)
def test_smoke_pipeline_tracks_every_step_and_a_second_run_skips_them(overrides, project_dir):
    import mlflow
    from mlflow import MlflowClient

    from flows.pipeline_flow import PipelineParams, pipeline_flow

    params = PipelineParams(profile="smoke", overrides=overrides)
    first = pipeline_flow(params)
    assert [it["ran"] for it in first["iterations"]] == [["eval_zero_shot"], SWEET_STAGES]
    run_dir = Path(first["run_dir"])
    lock = yaml.safe_load((run_dir / "iter-1" / "dvc.lock").read_text())
    assert sorted(lock["stages"]) == sorted(SWEET_STAGES)
    actor = run_dir / "iter-1" / "train" / "actor" / "model"
    assert (actor / "config.json").exists() and first["iterations"][1]["actor"] == str(actor)

    client = MlflowClient()
    parent = client.get_run(first["mlflow_run_id"])
    assert parent.data.tags["sweetflow.kind"] == "pipeline" and parent.data.tags["sweetflow.profile"] == "smoke"
    assert (
        parent.data.tags["dvc_lock_sha256.iter-1"]
        == hashlib.sha256((run_dir / "iter-1" / "dvc.lock").read_bytes()).hexdigest()
    )
    assert parent.data.params["critic.optim.max_steps"] == "3"
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "plots")} == {"plots/iterations.png"}
    nested = {r.info.run_name: r for r in _runs(parent.info.run_id)}
    assert sorted(nested) == sorted(["iter 0 eval_zero_shot", *(f"iter 1 {s}" for s in SWEET_STAGES)])
    evals = [r for r in nested.values() if r.data.tags["sweetflow.kind"] == "eval"]
    assert sorted(r.data.tags["sweetflow.iteration"] for r in evals) == ["0", "1"]
    assert all("success_rate" in r.data.metrics and "tests_passed" in r.data.metrics for r in evals)
    critic = nested["iter 1 critic"]
    assert len(client.get_metric_history(critic.info.run_id, "train/loss")) == 3
    assert "advantages.md" in {a.path for a in client.list_artifacts(critic.info.run_id)}
    assert "dialogues.md" in {a.path for a in client.list_artifacts(nested["iter 1 rollouts"].info.run_id)}
    rollouts = nested["iter 1 rollouts"]
    traces = mlflow.search_traces(
        locations=[rollouts.info.experiment_id], run_id=rollouts.info.run_id, return_type="list"
    )
    assert len(traces) == 2 and {a.name for a in traces[0].info.assessments} >= {"score"}
    assert traces[0].info.tags["sweetflow.iteration"] == "1" and traces[0].info.tags["sweetflow.stage"] == "rollouts"
    data = {d.dataset.name: d.dataset.digest for d in critic.inputs.dataset_inputs}
    pairs = next(d for d in lock["stages"]["critic"]["deps"] if d["path"].endswith("pairs.jsonl"))
    assert data[pairs["path"]] == pairs["md5"]  # the runs table's Dataset column: the DVC version read
    on_parent = {d.dataset.name for d in parent.inputs.dataset_inputs}  # the project's data, not the run's own
    assert on_parent == {"world/tasks.jsonl", "world/trajectories.jsonl"}
    assert nested["iter 1 actor"].data.params["actor.algo"] == "sweet"
    candidate = client.get_model_version_by_alias("sweetflow-actor", "candidate")
    assert candidate.source == str(actor.resolve())

    again = pipeline_flow(params)
    assert again["run_dir"] == first["run_dir"]
    assert [it["ran"] for it in again["iterations"]] == [[], []]
    assert [it["skipped"] for it in again["iterations"]] == [["eval_zero_shot"], SWEET_STAGES]
    assert len(_runs()) == 2
    assert client.get_model_version_by_alias("sweetflow-actor", "candidate").version == candidate.version


def test_an_iteration_without_signal_carries_the_actor_forward(overrides, tiny_model_dir):
    from flows.pipeline_flow import PipelineParams, pipeline_flow

    no_success = [o for o in overrides if not o.startswith("rollouts.offline")]  # the tiny model's own rollouts
    no_success.append("actor.rft_min_score=1.0")  # RFT on successes only (the smoke profile lowers it)
    result = pipeline_flow(PipelineParams(algo="rft", iterations=2, profile="smoke", overrides=no_success))
    first, second = result["iterations"][1:]
    assert first["ran"] == ["rollouts"] and "no successful trajectory" in first["no_signal"]
    assert first["actor"] == second["actor"] == str(tiny_model_dir)
    seeds = {
        yaml.safe_load((Path(result["run_dir"]) / f"iter-{k}" / "params.yaml").read_text())["rollouts"]["seed"]
        for k in (1, 2)
    }
    assert len(seeds) == 2  # the next iteration samples afresh


@pytest.mark.slow  # minutes: CI runs it with `make test-slow`
def test_a_pipeline_killed_in_training_resumes_from_its_checkpoint(overrides, project_dir):
    slow = [o for o in overrides if not o.startswith("critic.optim")] + [
        "critic.optim={lr: 0.001, epochs: 3, max_steps: 30, batch_size: 2, micro_batch_size: 1, checkpoint_every: 1}"
    ]
    cmd = [
        str(Path(sys.executable).parent / "sweetflow"),
        "run",
        "--profile",
        "smoke",
        *[arg for o in slow for arg in ("-S", o)],
    ]
    # its own session and group, signalled as a whole as a terminal's Ctrl-C does (flows/runtime/supervise.py)
    proc = subprocess.Popen(
        cmd, cwd=project_dir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    checkpoints, sent = None, None
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline:
        found = [
            p
            for p in project_dir.glob("runs/pipeline/*/iter-1/train/critic/checkpoints/step-*")
            if not p.name.endswith(".tmp")
        ]
        if found:
            checkpoints, sent = found, time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=120)
    assert checkpoints, "the critic never wrote a checkpoint before the run ended"
    assert proc.returncode == 130 and time.monotonic() - sent < 15, (proc.returncode, err[-2000:])
    assert "interrupted (SIGINT) during step critic [critic]" in err and "run the same command again" in err
    assert not processes_in(project_dir)  # no engine, DVC, stage or API server process left
    critic_dir = checkpoints[0].parents[1]
    assert not (critic_dir / "model").exists()  # killed mid-training

    resumed = subprocess.run(cmd, cwd=project_dir, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # the stage's own lines go to its log file (the console shows only progress, warnings, results)
    assert "resuming from" in (critic_dir.parents[1] / "logs" / "critic.log").read_text()
    steps = [r["step"] for r in map(json.loads, (critic_dir / "train_metrics.jsonl").read_text().splitlines())]
    done = json.loads((critic_dir / "metrics.json").read_text())["steps"]
    assert steps == list(range(1, done + 1))  # every step once: none lost, none repeated
    assert int(checkpoints[0].name.split("-")[1]) < done
    rollouts = list(read_jsonl(critic_dir.parents[1] / "rollouts" / "trajectories.jsonl", Trajectory))
    assert len({t.key for t in rollouts}) == len(rollouts)


RECORDS = ("trajectories.jsonl", "scores.jsonl", "pairs.jsonl", "turn_pairs.jsonl", "ranked.jsonl")


def _records(run_dir: Path) -> dict[str, bytes]:
    """A run folder's records (not its logs, metrics or timings), by path inside it."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*.jsonl") if p.name in RECORDS}


@pytest.mark.manual  # three smoke runs, 221-310 s in CI: `make test-manual`; CI guards the lock it rests on with
# tests/flows/runtime/test_project_lock.py (a second step waits and says for whom; a killed holder leaves no lock)
def test_two_runs_at_once_both_finish_one_step_at_a_time_with_the_records_of_a_run_alone(
    overrides, project_dir, tmp_path_factory
):
    alone_dir = tmp_path_factory.mktemp("alone")
    shutil.copytree(project_dir, alone_dir, dirs_exist_ok=True, symlinks=True)  # the same project, untouched
    cmd = [str(Path(sys.executable).parent / "sweetflow"), "run", "--profile", "smoke"]
    cmd += [arg for o in overrides for arg in ("-S", o)]
    runs = []
    for seed in (1, 2):  # different seeds: two run folders of one project, as a schedule beside a user's run
        runs.append(
            subprocess.Popen(
                [*cmd, "-S", f"pairs.seed={seed}"], cwd=project_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        )
        time.sleep(3)
    outs = [proc.communicate(timeout=900)[0].decode() for proc in runs]
    assert [proc.returncode for proc in runs] == [0, 0], outs[1][-3000:]
    assert "waiting for the project's DVC state: held by pid" in "".join(outs)  # the waiter said for whom
    assert "is busy" not in "".join(outs)
    summaries = [json.loads(p.read_text()) for p in sorted(project_dir.glob("runs/pipeline/*/summary.json"))]
    assert len(summaries) == 2
    # the same run alone afterwards: beside the two, three runs on 2 cores took longer (310 s against 221 s)
    alone = subprocess.run([*cmd, "-S", "pairs.seed=2"], cwd=alone_dir, capture_output=True, text=True, timeout=900)
    assert alone.returncode == 0, alone.stdout[-3000:]
    (alone_run,) = alone_dir.glob("runs/pipeline/*")
    together = _records(project_dir / "runs/pipeline" / alone_run.name)
    assert together and together == _records(alone_run)  # the same records as a run alone, step for step
