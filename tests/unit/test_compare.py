"""`sweetflow compare`: evaluated iterations read back from a real MLflow sqlite store."""

from __future__ import annotations

import math
import re

import pytest
from typer.testing import CliRunner

from components.tracking import store as tracking
from components.tracking.compare import CompareError, eval_runs, format_table, plot
from flows.cli import app

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# (algo, profile, iteration) -> (success_rate, tests_passed, n); sweet improves, rft stays flat.
SCORES = {
    ("sweet", 0): (0.10, 0.30, 20),
    ("sweet", 1): (0.25, 0.45, 20),
    ("sweet", 2): (0.40, 0.60, 20),
    ("rft", 0): (0.10, 0.30, 20),
    ("rft", 1): (0.15, 0.35, 20),
    ("rft", 2): (0.15, 0.36, 20),
}


def _log_pipeline(algo: str, profile: str, with_ci: bool, extra: str | None = None) -> str:
    """A parent pipeline run and its nested eval runs for iterations 2, 0, 1 (out of order on purpose)."""
    import mlflow

    exp = tracking.experiment_id("sweetflow-pipeline")
    with mlflow.start_run(
        experiment_id=exp,
        run_name=f"pipeline {algo}",
        tags={"sweetflow.kind": "pipeline", "sweetflow.algo": algo, "sweetflow.profile": profile},
    ) as parent:
        for it in (2, 0, 1):
            sr, tp, n = SCORES[(algo, it)]
            with mlflow.start_run(
                experiment_id=exp,
                run_name=f"eval it{it}",
                nested=True,
                parent_run_id=parent.info.run_id,
                tags={"sweetflow.kind": "eval", "sweetflow.algo": algo, "sweetflow.iteration": str(it)},
            ):
                metrics = {"success_rate": sr, "tests_passed": tp, "n": n}
                if with_ci:
                    metrics.update(
                        success_rate_ci_low=sr - 0.05,
                        success_rate_ci_high=sr + 0.05,
                        tests_passed_ci_low=tp - 0.1,
                        tests_passed_ci_high=tp + 0.1,
                    )
                if extra:
                    metrics[extra] = 1.0 + it
                mlflow.log_metrics(metrics)
        # A non-eval nested step must not appear in the comparison.
        with mlflow.start_run(
            experiment_id=exp,
            run_name="critic",
            nested=True,
            parent_run_id=parent.info.run_id,
            tags={"sweetflow.kind": "step"},
        ):
            mlflow.log_metric("success_rate", 0.99)
    return parent.info.run_id


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """One sqlite store per module (creating the schema takes seconds): a sweet pipeline run (with
    intervals and an extra `reward` metric) and an rft run (without)."""
    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        tracking.configure()
        parents = {
            "sweet": _log_pipeline("sweet", "smoke", with_ci=True, extra="reward"),
            "rft": _log_pipeline("rft", "default", with_ci=False),
        }
    return root, parents


@pytest.fixture
def store(populated, monkeypatch):
    """The populated store as the current project (cwd) and tracking URI; parent run ids by algo."""
    root, parents = populated
    monkeypatch.chdir(root)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure()
    return parents


def test_eval_runs_one_row_per_evaluated_iteration(store):
    df = eval_runs("sweetflow-pipeline")
    assert len(df) == 6  # the pipeline runs and the non-eval step are left out
    assert list(zip(df["algo"], df["iteration"])) == [
        ("rft", 0),
        ("rft", 1),
        ("rft", 2),
        ("sweet", 0),
        ("sweet", 1),
        ("sweet", 2),
    ]
    for _, row in df.iterrows():
        sr, tp, n = SCORES[(row["algo"], row["iteration"])]
        assert row["success_rate"] == pytest.approx(sr) and row["tests_passed"] == pytest.approx(tp)
        assert row["n"] == n and row["status"] == "FINISHED"
        assert row["run"] == f"pipeline {row['algo']}" and row["parent_run_id"] == store[row["algo"]]
    sweet, rft = df[df.algo == "sweet"].iloc[1], df[df.algo == "rft"].iloc[1]
    assert sweet["profile"] == "smoke" and rft["profile"] == "default"
    assert sweet["success_rate_ci_low"] == pytest.approx(0.20) and sweet["tests_passed_ci_high"] == pytest.approx(0.55)
    assert math.isnan(rft["success_rate_ci_low"]) and math.isnan(rft["tests_passed_ci_high"])
    assert "reward" not in df.columns


def test_format_table_sorted_with_interval_columns(store):
    text = format_table(eval_runs("sweetflow-pipeline"))
    header, rule, *rows = text.splitlines()
    assert header.split()[:5] == ["run", "algo", "iter", "profile", "success_rate"]
    assert re.search(r"success_rate +95% CI +tests_passed +95% CI +n +started \(UTC\) +status$", header)
    assert set(rule) <= {"-", " "} and len(rows) == 6
    assert [(r.split()[2], r.split()[3]) for r in rows] == [
        ("rft", "0"),
        ("rft", "1"),
        ("rft", "2"),
        ("sweet", "0"),
        ("sweet", "1"),
        ("sweet", "2"),
    ]
    assert re.search(r"0\.250 +\[0\.200, 0\.300\] +0\.450 +\[0\.350, 0\.550\] +20 ", rows[4])
    assert "0.150" in rows[1] and "[" not in rows[1]  # rft logged no intervals: "-" in their place
    assert all(len(r.rstrip()) <= len(rule) for r in rows)  # fixed width
    # Without any interval logged, the interval columns are left out.
    no_ci = format_table(eval_runs("sweetflow-pipeline").query("algo == 'rft'"))
    assert "95% CI" not in no_ci and len(no_ci.splitlines()) == 5


def test_extra_metric_columns(store):
    df = eval_runs("sweetflow-pipeline", metrics=["reward", "missing_metric"])
    sweet = df[df.algo == "sweet"]
    assert list(sweet["reward"]) == [1.0, 2.0, 3.0] and df[df.algo == "rft"]["reward"].isna().all()
    assert df["missing_metric"].isna().all()
    header = format_table(df).splitlines()[0]
    assert "reward" in header and "missing_metric" in header


def test_plot_writes_a_png(store, tmp_path):
    df = eval_runs("sweetflow-pipeline", metrics=["reward"])
    path = plot(df, tmp_path / "out" / "compare.png")
    assert path.exists() and path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000


def test_missing_experiment_names_the_known_ones(store):
    with pytest.raises(CompareError) as exc:
        eval_runs("no-such-experiment")
    assert "no-such-experiment" in str(exc.value) and "sweetflow-pipeline" in str(exc.value)


def test_cli_prints_table_and_plot(store, tmp_path):
    result = CliRunner().invoke(app, ["compare", "--out", str(tmp_path / "cmp"), "--metric", "reward"])
    assert result.exit_code == 0, result.output
    assert "95% CI" in result.output and "reward" in result.output
    assert result.output.count("sweet") >= 3 and result.output.count("rft") >= 3
    png = tmp_path / "cmp" / "compare.png"
    assert f"plot: {png}" in result.output and png.read_bytes()[:8] == PNG_MAGIC


def test_cli_unknown_experiment_is_an_error(store):
    result = CliRunner().invoke(app, ["compare", "--experiment", "nope"])
    assert result.exit_code == 2 and "nope" in result.output and "sweetflow-pipeline" in result.output


def test_cli_nothing_to_compare(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    runner = CliRunner()
    fresh = runner.invoke(app, ["compare"])  # default experiment not created yet
    assert fresh.exit_code == 0 and "nothing to compare" in fresh.output
    tracking.configure()
    tracking.experiment_id("empty")
    empty = runner.invoke(app, ["compare", "--experiment", "empty", "--out", str(tmp_path / "cmp")])
    assert empty.exit_code == 0 and "nothing to compare" in empty.output
    assert not (tmp_path / "cmp").exists()


def test_cli_help():
    result = CliRunner().invoke(app, ["compare", "--help"])
    assert result.exit_code == 0 and "--experiment" in result.output and "--metric" in result.output


def test_cory_agents_get_their_own_rows_lines_and_reward_columns_beside_colbench_runs(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure()
    exp = tracking.experiment_id("sweetflow-pipeline")
    parents = {}
    for algo, agents in (("sweet", [None]), ("cory", ["agent0", "agent1"])):
        with mlflow.start_run(
            experiment_id=exp, run_name=f"pipeline {algo}", tags={"sweetflow.kind": "pipeline", "sweetflow.algo": algo}
        ) as parent:
            parents[algo] = parent.info.run_id
            for it in (0, 1):
                for agent in agents:
                    tags = {"sweetflow.kind": "eval", "sweetflow.algo": algo, "sweetflow.iteration": str(it)}
                    metrics = {"success_rate": 0.1 * it, "n": 8}
                    if agent:
                        tags["sweetflow.agent"] = agent
                        metrics.update(task_reward=0.2 * it, kl=0.01 * it, objective=0.2 * it - 1e-4 * it)
                    with mlflow.start_run(experiment_id=exp, nested=True, parent_run_id=parent.info.run_id, tags=tags):
                        mlflow.log_metrics(metrics)
    df = eval_runs("sweetflow-pipeline")
    assert len(df) == 6 and {"task_reward", "kl", "objective"} <= set(df.columns)
    assert df[df.algo == "sweet"]["task_reward"].isna().all() and df[df.algo == "cory"]["kl"].max() == 0.01
    text = format_table(df)
    assert "cory/agent0" in text and "cory/agent1" in text and "sweet/" not in text
    assert plot(df, tmp_path / "all.png").read_bytes()[:8] == PNG_MAGIC
    one = df[df.parent_run_id == parents["sweet"]]  # what the pipeline plots for its own parent run
    assert plot(one, tmp_path / "sweet.png").read_bytes()[:8] == PNG_MAGIC
