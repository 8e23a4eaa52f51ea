"""The command line: help everywhere, clear errors before heavy work."""

import logging
import time

import pytest
from typer.testing import CliRunner

from flows.cli.commands import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def root_logging_restored():
    """The commands call logging.basicConfig, which binds the root logger to CliRunner's temporary
    stderr; once that is closed, any later test that logs (Prefect's print_as_log) would fail with
    'I/O operation on closed file'. Put the root handlers back after each test."""
    handlers = logging.root.handlers[:]
    yield
    logging.root.handlers[:] = handlers


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["data"],
        ["model"],
        ["data", "pull"],
        ["model", "prepare"],
        ["eval"],
        ["params"],
        ["run"],
        ["score"],
        ["render"],
    ],
)
def test_every_command_has_help(args):
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_eval_rejects_bad_params_before_any_work(monkeypatch):
    result, flow_params = eval_params_of(monkeypatch, ["--limit", "0"])
    assert result.exit_code == 2 and "eval.limit" in result.output
    assert flow_params is None  # no flow started


def test_eval_rejects_a_missing_model():
    result = runner.invoke(app, ["eval", "--model", "/nonexistent/model-folder"])
    assert result.exit_code == 2 and "/nonexistent/model-folder" in result.output


def test_train_refuses_a_single_turn_algorithm(tmp_path):
    result = runner.invoke(app, ["train", "--algo", "cory", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "--algo takes a collaborative algorithm" in result.output
    assert "sweetflow run --algo cory|ppo" in result.output and not (tmp_path / "out").exists()


def test_eval_rejects_seed_and_seeds_together():
    result = runner.invoke(app, ["eval", "--seed", "1", "--seeds", "1,2"])
    assert result.exit_code == 2 and "not both" in result.output


def test_score_reports_a_missing_file(tmp_path):
    result = runner.invoke(
        app,
        [
            "score",
            "--tasks",
            str(tmp_path / "no.jsonl"),
            "--answers",
            str(tmp_path / "a.jsonl"),
            "--out",
            str(tmp_path / "s.jsonl"),
        ],
    )
    assert result.exit_code == 2 and "not found" in result.output


def test_from_hub_fails_fast_offline(monkeypatch):
    from components.data import pull

    monkeypatch.setattr(pull, "HUB_HOST", ("127.0.0.1", 9))  # nothing listens on the discard port
    start = time.perf_counter()
    result = runner.invoke(app, ["data", "pull", "--from-hub"])
    assert result.exit_code == 2 and "not reachable" in result.output
    assert time.perf_counter() - start < 10


def test_score_command_contract(tmp_path):
    import json

    from tests.factories import make_task

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(make_task(n).model_dump_json() + "\n" for n in ("add", "sub")))
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        json.dumps({"index": 0, "answer": "def add(a, b):\n    return a + b"})
        + "\n"
        + json.dumps({"index": 1, "answer": "def sub(a, b):\n    return 0"})
        + "\n"
        + '{"index": 7}\n'
    )
    out = tmp_path / "scores.jsonl"
    result = runner.invoke(app, ["score", "--tasks", str(tasks), "--answers", str(answers), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["index"], r["score"], r["success"]) for r in rows[:2]] == [(0, 1.0, True), (1, 0.0, False)]
    assert rows[2]["error"] and rows[2]["score"] == 0
    assert summary == {"n": 3, "tests_passed": pytest.approx(1 / 3), "success_rate": pytest.approx(1 / 3)}


def test_sigterm_unwinds_like_ctrl_c_so_children_and_servers_are_stopped():
    import os
    import signal

    from flows.cli.app import setup

    previous = signal.getsignal(signal.SIGTERM)
    try:
        setup()
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before the next statement
        assert exited.value.code == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_eval_register_needs_a_local_model_folder():
    result = runner.invoke(app, ["eval", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--register"])
    assert result.exit_code == 2 and "--register needs a local model folder" in result.output


def test_params_prints_what_run_would_use_and_fails_like_run():
    import yaml

    from flows.planning.plan import plan_run

    result = runner.invoke(app, ["params", "--profile", "smoke", "-S", "critic.optim.lr=3e-6"])
    assert result.exit_code == 0
    doc = yaml.safe_load(result.output)
    expected = plan_run("sweet", "smoke", ["critic.optim.lr=3e-6"])
    assert doc == expected.doc and doc["critic"]["optim"]["lr"] == 3e-6 and "cory" not in doc
    assert str(expected.run_dir) in result.output.splitlines()[0]
    colbench = runner.invoke(app, ["params", "--task", "colbench-backend"])
    assert (
        yaml.safe_load(colbench.output)["task"] == {"name": "colbench-backend"} and "elicitation" not in colbench.output
    )
    assert "--task colbench-backend" in colbench.output.splitlines()[0]
    cory = yaml.safe_load(runner.invoke(app, ["params", "--algo", "cory", "--iterations", "3"]).output)
    assert sorted(cory) == ["cluster", "cory", "gsm8k", "model", "task"] and cory["cory"]["iterations"] == 3
    for bad, message in (
        (["-S", "cory.lr=1"], "do not apply to algo sweet"),
        (["--algo", "nope"], "nope"),
        (["-S", "critic.optim.lr=-1"], "critic.optim.lr"),
        (["--task", "chess"], "unknown task 'chess'"),
        (["--task", "colbench-backend", "-S", "elicitation.seed=3"], "do not apply to algo sweet"),
        (["--baselines", "sweet"], "baseline(s) sweet"),
    ):
        printed, ran = runner.invoke(app, ["params", *bad]), runner.invoke(app, ["run", *bad])
        assert printed.exit_code == ran.exit_code == 2 and message in printed.output
        assert message in ran.output


def test_run_refuses_offline_trajectories_of_evaluation_tasks_before_any_step(tmp_path):
    from components.config.sections import DataConfig
    from components.data.records import read_jsonl
    from components.data.split import Split, select
    from components.data.tasks import BackendTask
    from tests.conftest import TASKS_FILE
    from tests.factories import make_trajectory

    if not TASKS_FILE.exists():
        pytest.skip("ColBench data not pulled (make data)")
    tasks, data = list(read_jsonl(TASKS_FILE, BackendTask)), DataConfig()
    held_out = select(tasks, Split.eval, data.eval_fraction, data.split_salt)[:2]
    offline = tmp_path / "eval_trajectories.jsonl"
    offline.write_text(
        "".join(make_trajectory(i, score=0.5, task_id=tasks[i].task_id).model_dump_json() + "\n" for i in held_out)
    )
    args = ["--task", "colbench-backend", "-S", f"rollouts.offline={offline}"]
    for command in ("params", "run"):
        result = runner.invoke(app, [command, *args])
        assert result.exit_code == 2 and "2 of 2 offline trajectories are of 2 evaluation-split tasks" in result.output
        assert tasks[held_out[0]].task_id in result.output


def test_render_writes_what_the_frontend_scorer_sees(tmp_path):
    from PIL import Image

    page = tmp_path / "message.txt"
    page.write_text('Draft: <html><body style="background: rgb(0,128,0)"><h1>Hi</h1></body></html> ok?')
    result = runner.invoke(app, ["render", "--html", str(page), "--out", str(tmp_path / "page.png")])
    assert result.exit_code == 0, result.output
    assert '"failed": false' in result.output and '"elements": 1' in result.output
    image = Image.open(tmp_path / "page.png").convert("RGB")
    assert image.size == (1280, 800) and image.getpixel((600, 600)) == (0, 128, 0)
    missing = runner.invoke(app, ["render", "--html", str(tmp_path / "none.html"), "--out", str(tmp_path / "x.png")])
    assert missing.exit_code == 2 and "not found" in missing.output


FAKE_METRICS = {
    "n": 1,
    "episodes": 1,
    "success_rate": 0.0,
    "success_rate_ci_low": 0.0,
    "success_rate_ci_high": 0.0,
    "mean_score": 0.0,
    "mean_score_ci_low": 0.0,
    "mean_score_ci_high": 0.0,
    "mean_turns": 1.0,
    "answered_rate": 1.0,
    "mlflow_run_id": "fake",
    "summary": "  n  1",
}


def eval_params_of(monkeypatch, args):
    """`sweetflow eval ARGS` run up to the flow, which is not run: (result, the plan it was given)."""
    from flows.cli import commands as cli

    seen = {}

    def no_flow(flow, params):
        seen["params"] = params
        return FAKE_METRICS

    monkeypatch.setattr(cli, "_tracked_flow", no_flow)
    return runner.invoke(app, ["eval", *args]), seen.get("params")


def test_eval_plays_a_profile_with_overrides_and_its_own_flags_win(monkeypatch, prepared_model_dir):
    args = ["--profile", "default", "-S", "episode.max_turns=2", "-S", "eval.limit=7", "--limit", "5"]
    result, params = eval_params_of(monkeypatch, [*args, "-S", "eval.seeds=[1, 2]"])
    assert result.exit_code == 0, result.output
    doc = params.doc
    assert doc["task"] == {"name": "elicitation"} and "elicitation" in doc and "data" not in doc
    assert doc["episode"]["max_turns"] == 2  # -S over the profile's 3
    assert (doc["episode"]["max_tokens"], doc["episode"]["temperature"]) == (24, 0.7)  # the profile's
    assert doc["eval"]["limit"] == 5 and doc["eval"]["seeds"] == [1, 2]  # --limit over -S over the profile's 64
    assert "critic" not in doc and "ranking" not in doc


def test_eval_without_a_profile_resolves_as_before(monkeypatch, prepared_model_dir):
    from flows.planning.plan import ZERO_SHOT
    from flows.planning.step_commands import EvalParams, eval_run, stages_doc, task_name

    assert eval_run(EvalParams()).doc == stages_doc([ZERO_SHOT], task_name(None), {})
    result, params = eval_params_of(monkeypatch, ["--limit", "3", "-S", "cluster.local_cpus=2"])
    assert result.exit_code == 0, result.output
    doc = params.doc
    assert doc["eval"]["limit"] == 3 and doc["cluster"]["local_cpus"] == 2
    assert doc["episode"]["max_turns"] == 10  # params.yaml's base


def test_eval_best_of_reads_the_critic_sections_and_may_write_outside_the_project(
    monkeypatch, tmp_path, prepared_model_dir
):
    args = ["--profile", "default", "--best-of", "4", "--critic", "base", "-S", "critic.beta=0.2"]
    result, params = eval_params_of(monkeypatch, [*args, "-S", "ranking.max_batch=4", "--out", str(tmp_path / "bon")])
    assert result.exit_code == 0, result.output
    assert "best-of-4 ranked by critic base" in result.output
    doc = params.doc
    assert (
        doc["critic"]["beta"] == 0.2
        and doc["ranking"]["max_batch"] == 4
        and doc["eval"]["out_dir"] == str(tmp_path / "bon")
    )
    assert (params.best_of, params.critic) == (4, "base")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--best-of", "0"], "--best-of must be at least 1"),
        (["--best-of", "4"], "--best-of 4 needs --critic"),
        (["--best-of", "1", "--critic", "base"], "refused with --best-of 1"),
        (["--best-of", "4", "--critic", "/nonexistent/critic"], "is not an HF model folder"),
        (["--critic", "base"], "needs --best-of"),
        (["--best-of", "2", "--critic", "base", "--register"], "--register is refused with --best-of"),
        (["--profile", "default", "-S", "actor.beta=0.2"], "eval reads only the sections"),
        (["--profile", "default", "-S", "critic.beta=0.2"], "eval reads only the sections"),
        (["--profile", "nope"], "unknown profile 'nope'"),
        (["--profile", "default", "-S", "episode.max_turns=0"], "episode.max_turns"),
        (["--out", "/tmp/sweetflow-eval-outside"], "lies outside the project"),  # plain eval runs on DVC
    ],
)
def test_eval_refuses_bad_profile_override_and_best_of_options(monkeypatch, args, message):
    result, params = eval_params_of(monkeypatch, args)
    assert result.exit_code == 2 and message in result.output and params is None
