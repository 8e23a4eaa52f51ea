"""Rollouts: K samples per task, resume without duplicates, reset on a new episode configuration,
metrics, config validation and the command line (no model: a fake driver and a fake scorer)."""

import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from components.config.sections import (
    ConfigError,
    DataConfig,
    EpisodeSection,
    RolloutsConfig,
    check_rollouts,
    load_section,
)
from components.data.records import RecordError, Trajectory, Turn, read_jsonl
from components.data.split import Split
from components.episodes import play as evaluate
from components.episodes.driver import DriverStats
from components.stages import rollouts
from components.tasks.colbench_backend.task import ColbenchBackend
from flows.cli.commands import app
from tests.factories import make_task, make_trajectory


class FakeEngine:
    def close(self):
        pass


class FakeDriver:
    """Ends each job at once with a one-turn trajectory; raises after `crash_after` jobs."""

    def __init__(self, calls, crash_after=None):
        self.agent, self.simulator, self.stats = FakeEngine(), object(), DriverStats()
        self.calls, self.crash_after = calls, crash_after

    def run(self, jobs, on_done=None, progress=True):
        self.calls.append([(j.task_index, j.run_seed, j.sample) for j in jobs])
        out = []
        for n, job in enumerate(jobs):
            if n == self.crash_after:
                raise RuntimeError("simulated crash")
            traj = make_trajectory(
                job.task_index,
                job.run_seed,
                task_id=job.task.task_id,
                sample=job.sample,
                seed=job.seed,
                turns=[Turn(index=0, action="a", response_ids=[1, 2])],
            )
            on_done(traj)
            out.append(traj)
        return out


def fake_score(task, tasks, trajs):
    """Sample 0 of task 0 succeeds, everything else scores 0.5 or 0."""

    def score(t):
        return 1.0 if (t.task_index, t.sample) == (0, 0) else 0.5 * (t.task_index == 1)

    return [
        t.model_copy(update={"score": score(t), "success": score(t) == 1.0, "passed": int(10 * score(t)), "total": 10})
        for t in trajs
    ]


@pytest.fixture
def setup(tmp_path, monkeypatch):
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(make_task(n).model_dump_json() + "\n" for n in ("add", "sub", "mul")))
    calls, crash = [], {"after": None}
    monkeypatch.setattr(evaluate, "build_driver", lambda cfg, ep, seed, task, gpus=1: FakeDriver(calls, crash["after"]))
    monkeypatch.setattr(evaluate, "score_trajectories", fake_score)
    cfg = RolloutsConfig(split="all", limit=None, per_task=2, seed=7)
    task = ColbenchBackend({"data": DataConfig(backend_tasks=tasks_file)})
    return cfg, EpisodeSection(), task, tmp_path / "out", calls, crash


def keys(out_dir):
    return [(t.task_index, t.run_seed, t.sample) for t in read_jsonl(out_dir / "trajectories.jsonl", Trajectory)]


def test_pending_jobs_with_k_samples_skip_finished_ones_and_get_distinct_seeds():
    tasks = [make_task(f"f{i}") for i in range(3)]
    done = [make_trajectory(0, 5, sample=1), make_trajectory(2, 5, sample=0), make_trajectory(2, 6, sample=0)]
    jobs = evaluate.pending_jobs(tasks, [0, 2], [5], done, samples=3)
    assert [(j.task_index, j.run_seed, j.sample) for j in jobs] == [(0, 5, 0), (0, 5, 2), (2, 5, 1), (2, 5, 2)]
    assert len({j.seed for j in jobs}) == 4
    assert evaluate.pending_jobs(tasks, [0], [5], [], samples=1)[0].sample == 0


def test_rollouts_resume_after_a_crash_without_duplicates(setup):
    cfg, episode, data, out, calls, crash = setup
    crash["after"] = 4
    with pytest.raises(RuntimeError, match="simulated crash"):
        rollouts.run(cfg, episode, data, out)
    assert len(keys(out)) == 4
    crash["after"] = None
    result = rollouts.run(cfg, episode, data, out)
    assert calls[-1] == [(2, 7, 0), (2, 7, 1)]  # only what the crash left undone
    assert sorted(keys(out)) == [(i, 7, k) for i in range(3) for k in range(2)]
    assert result.metrics["episodes_run"] == 2 and result.metrics["n_trajectories"] == 6
    trajs = list(read_jsonl(out / "trajectories.jsonl", Trajectory))
    assert all(t.score is not None for t in trajs) and len({t.seed for t in trajs}) == 6
    again = rollouts.run(cfg, episode, data, out)
    assert len(calls) == 2 and again.metrics["episodes_run"] == 0 and len(keys(out)) == 6


def test_more_samples_reuse_the_first_ones_and_a_new_episode_config_restarts(setup):
    cfg, episode, data, out, calls, _ = setup
    rollouts.run(cfg, episode, data, out)
    rollouts.run(cfg.model_copy(update={"per_task": 3}), episode, data, out)
    assert calls[-1] == [(i, 7, 2) for i in range(3)]
    rollouts.run(cfg.model_copy(update={"limit": 1}), episode, data, out)  # fewer tasks: nothing to run
    assert len(calls) == 2
    rollouts.run(cfg, episode.model_copy(update={"temperature": 0.7}), data, out)
    assert len(calls[-1]) == 6 and len(keys(out)) == 6
    assert json.loads((out / "episode_config.json").read_text())["episode"]["temperature"] == 0.7


def test_metrics_and_files(setup):
    cfg, episode, data, out, _, _ = setup
    m = rollouts.run(cfg, episode, data, out).metrics
    assert m == json.loads((out / "metrics.json").read_text())
    assert (m["n_tasks"], m["n_trajectories"]) == (3, 6)
    assert m["success_rate"] == pytest.approx(1 / 6) and m["tests_passed"] == pytest.approx(2 / 6)
    assert m["mean_score"] == m["tests_passed"]
    assert m["solved_task_fraction"] == pytest.approx(1 / 3)
    assert m["contrast_task_fraction"] == pytest.approx(1 / 3)  # only task 0 has two different scores
    assert m["mean_turns"] == 1.0 and m["answered_rate"] == 0.0 and m["episodes_per_s"] > 0
    assert not (out / "trajectories.jsonl.tmp").exists()


def test_offline_trajectories_of_evaluation_tasks_are_refused(tmp_path):
    tasks = [make_task(f"f{i}") for i in range(12)]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    task = ColbenchBackend({"data": DataConfig(backend_tasks=tasks_file, eval_fraction=0.5)})
    held_out = set(task.split_indices(tasks, Split.eval))
    assert 0 < len(held_out) < len(tasks)
    trajs = [make_trajectory(i, score=1.0, task_id=t.task_id) for i, t in enumerate(tasks)]
    offline = tmp_path / "offline.jsonl"
    offline.write_text("".join(t.model_dump_json() + "\n" for t in trajs))
    with pytest.raises(RecordError, match=f"{len(held_out)} of 12 offline trajectories are of {len(held_out)} eval"):
        rollouts.run(RolloutsConfig(offline=offline), EpisodeSection(), task, tmp_path / "out")
    assert not (tmp_path / "out" / "trajectories.jsonl").exists()
    offline.write_text("".join(t.model_dump_json() + "\n" for t in trajs if t.task_index not in held_out))
    m = rollouts.run(RolloutsConfig(offline=offline), EpisodeSection(), task, tmp_path / "out").metrics
    assert m["n_trajectories"] == len(tasks) - len(held_out) and m["episodes_run"] == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("rollouts:\n  per_task: 0\n", "rollouts.per_task"),
        ("rollouts:\n  limit: 0\n", "rollouts.limit"),
        ("rollouts:\n  seed: x\n", "rollouts.seed"),
        ("rollouts:\n  split: test\n", "rollouts.split"),
        ("rollouts:\n  engine: tpu\n", "rollouts.engine"),
        ("rollouts:\n  simulator: retrieval\n  simulator_model: http://x\n", "simulator_model is only used"),
        ("rollouts:\n  seeds: [1]\n", "rollouts.seeds"),
    ],
)
def test_bad_rollouts_params_are_rejected_with_the_field_named(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_section(RolloutsConfig, "rollouts", path=path)


def test_k_samples_at_temperature_zero_are_rejected():
    with pytest.raises(ConfigError, match="temperature is 0"):
        check_rollouts(RolloutsConfig(per_task=2), EpisodeSection(temperature=0.0))
    check_rollouts(RolloutsConfig(per_task=1), EpisodeSection(temperature=0.0))


def test_repo_params_and_defaults():
    cfg = load_section(RolloutsConfig, "rollouts")
    assert cfg.per_task >= 1 and cfg.split.value == "train"
    assert RolloutsConfig().per_task == 3 and RolloutsConfig().out_dir.as_posix() == "runs/rollouts"


def test_the_stage_reads_its_sections_from_the_params_file_it_is_given(tmp_path, monkeypatch):
    from components.stages.cli import stage_cli
    from components.tasks.registry import task_sections

    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump({"rollouts": {"per_task": 2}, "episode": {"max_turns": 2}}))
    monkeypatch.setenv("SWEETFLOW_PARAMS", str(params))
    monkeypatch.setattr("sys.argv", ["rollouts"])
    sections, _ = stage_cli("components.stages.rollouts", task_sections)
    assert (
        sections["rollouts"].per_task == 2
        and sections["episode"].max_turns == 2
        and set(sections) == {"task", "data", "episode", "rollouts"}
    )
    params.write_text(yaml.safe_dump({"task": {"name": "elicitation"}}))
    assert set(stage_cli("components.stages.rollouts", task_sections)[0]) == {
        "task",
        "elicitation",
        "episode",
        "rollouts",
    }
    params.write_text(yaml.safe_dump({"rollouts": {"per_task": 0}}))
    with pytest.raises(SystemExit, match="rollouts.per_task"):
        stage_cli("components.stages.rollouts", task_sections)
    params.write_text(yaml.safe_dump({"task": {"name": "chess"}}))
    with pytest.raises(SystemExit, match="unknown task 'chess'"):
        stage_cli("components.stages.rollouts", task_sections)


def test_cli_rollouts_help_and_errors_before_any_work():
    runner = CliRunner()
    help_text = runner.invoke(app, ["rollouts", "--help"]).output
    for flag in ("--model", "--split", "--per-task", "--out", "--limit", "--simulator", "--engine", "--seed"):
        assert flag in help_text
    start = time.perf_counter()
    result = runner.invoke(app, ["rollouts", "--per-task", "0"])
    assert result.exit_code == 2 and "rollouts.per_task" in result.output
    result = runner.invoke(app, ["rollouts", "--model", "/nonexistent/model-folder"])
    assert result.exit_code == 2 and "/nonexistent/model-folder" in result.output
    assert time.perf_counter() - start < 30


def test_cli_rollouts_reports_a_missing_tasks_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("data:\n  backend_tasks: nowhere/tasks.jsonl\n")
    result = CliRunner().invoke(app, ["rollouts", "--per-task", "2"])
    assert result.exit_code == 2 and "nowhere/tasks.jsonl not found" in result.output


def test_a_failed_stage_names_itself_and_its_log(tmp_path, monkeypatch):
    from flows.runtime.steps import dvc_repro
    from tests.conftest import git_dvc_init

    monkeypatch.chdir(git_dvc_init(tmp_path))
    (tmp_path / "dvc.yaml").write_text(
        yaml.safe_dump(
            {
                "stages": {
                    "broken": {
                        "cmd": "python -c \"import sys; print('chatter'); sys.exit('boom')\"",
                        "outs": ["never.txt"],
                    }
                }
            }
        )
    )
    with pytest.raises(RuntimeError, match=r"stage dvc.yaml:broken failed .*logs/broken.log"):
        dvc_repro(Path("dvc.yaml"), "broken")
    assert "boom" in (tmp_path / "logs" / "broken.log").read_text()
