"""`sweetflow compare`: evaluated iterations read back from a real MLflow sqlite store.

The module's store holds runs from before there were tasks (no `sweetflow.task` tag, `tests_passed`
instead of `mean_score`): they read as task colbench-backend with mean_score = tests_passed."""

from __future__ import annotations

import math
import re

import pytest
from typer.testing import CliRunner

from components.tracking import store as tracking
from components.tracking.compare import CompareError, UnknownTaskError, eval_runs, figure, format_table, plot
from flows.cli.commands import app

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
    assert set(df["task"]) == {"colbench-backend"} and "tests_passed" not in df.columns  # untagged: old runs
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
        assert row["success_rate"] == pytest.approx(sr) and row["mean_score"] == pytest.approx(tp)
        assert row["n"] == n and row["status"] == "FINISHED"
        assert row["run"] == f"pipeline {row['algo']}" and row["parent_run_id"] == store[row["algo"]]
    sweet, rft = df[df.algo == "sweet"].iloc[1], df[df.algo == "rft"].iloc[1]
    assert sweet["profile"] == "smoke" and rft["profile"] == "default"
    assert sweet["success_rate_ci_low"] == pytest.approx(0.20) and sweet["mean_score_ci_high"] == pytest.approx(0.55)
    assert sweet["mean_score_ci_low"] == pytest.approx(0.35)  # tests_passed's bounds stand in too
    assert math.isnan(rft["success_rate_ci_low"]) and math.isnan(rft["mean_score_ci_high"])
    assert "reward" not in df.columns


def test_format_table_sorted_with_interval_columns(store):
    text = format_table(eval_runs("sweetflow-pipeline"))
    title, header, rule, *rows = text.splitlines()
    assert title == "task: colbench-backend"
    assert header.split()[:5] == ["run", "algo", "iter", "profile", "success_rate"]
    assert re.search(r"success_rate +95% CI +mean_score +95% CI +n +started \(UTC\) +status$", header)
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
    assert "95% CI" not in no_ci and len(no_ci.splitlines()) == 6


def test_extra_metric_columns(store):
    df = eval_runs("sweetflow-pipeline", metrics=["reward", "missing_metric"])
    sweet = df[df.algo == "sweet"]
    assert list(sweet["reward"]) == [1.0, 2.0, 3.0] and df[df.algo == "rft"]["reward"].isna().all()
    assert df["missing_metric"].isna().all()
    header = format_table(df).splitlines()[1]  # under the task line
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
    tasks = dict(zip(df["algo"], df["task"]))
    assert tasks == {"cory": "gsm8k", "sweet": "colbench-backend"}
    text = format_table(df)
    assert "cory/agent0" in text and "cory/agent1" in text and "sweet/" not in text
    colbench, gsm8k = text.split("\n\n")
    assert colbench.startswith("task: colbench-backend\n") and gsm8k.startswith("task: gsm8k\n")
    assert "cory" not in colbench and "sweet" not in gsm8k
    assert "kl" in gsm8k.splitlines()[1] and "kl" not in colbench.splitlines()[1]  # what each task logged
    assert plot(df, tmp_path / "all.png").read_bytes()[:8] == PNG_MAGIC
    one = df[df.parent_run_id == parents["sweet"]]  # what the pipeline plots for its own parent run
    assert plot(one, tmp_path / "sweet.png").read_bytes()[:8] == PNG_MAGIC


# task -> (algo, iteration) -> (success_rate, mean_score); each task's scores in a range of its own,
# so a number in the wrong block or panel gives itself away.
TASK_SCORES = {
    "colbench-backend": {("sweet", 0): (0.11, 0.31), ("sweet", 1): (0.21, 0.41)},
    "elicitation": {("sweet", 0): (0.61, 0.81), ("sweet", 1): (0.71, 0.91), ("rft", 1): (0.66, 0.86)},
}


@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory):
    """A store with eval runs of two tasks: tagged ColBench backend and elicitation runs (with
    mean_score and its interval; ColBench backend's also keep tests_passed), and one old untagged run
    that logged tests_passed only (iteration 2 of a ColBench backend pipeline)."""
    import mlflow

    root = tmp_path_factory.mktemp("tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        tracking.configure()
        exp = tracking.experiment_id("sweetflow-pipeline")
        for task, scores in TASK_SCORES.items():
            for algo in sorted({a for a, _ in scores}):
                with mlflow.start_run(
                    experiment_id=exp,
                    run_name=f"{task} {algo}",
                    tags={"sweetflow.kind": "pipeline", "sweetflow.algo": algo, "sweetflow.task": task},
                ) as parent:
                    for (a, it), (sr, ms) in scores.items():
                        if a != algo:
                            continue
                        tags = {"sweetflow.kind": "eval", "sweetflow.algo": algo, "sweetflow.iteration": str(it)}
                        metrics = {"success_rate": sr, "mean_score": ms, "n": 10}
                        metrics.update(mean_score_ci_low=ms - 0.01, mean_score_ci_high=ms + 0.01)
                        if task == "colbench-backend":
                            metrics["tests_passed"] = ms
                        with mlflow.start_run(
                            experiment_id=exp,
                            nested=True,
                            parent_run_id=parent.info.run_id,
                            tags=tags | {"sweetflow.task": task},
                        ):
                            mlflow.log_metrics(metrics)
        with mlflow.start_run(experiment_id=exp, run_name="old", tags={"sweetflow.kind": "pipeline"}) as parent:
            tags = {"sweetflow.kind": "eval", "sweetflow.algo": "sweet", "sweetflow.iteration": "2"}
            with mlflow.start_run(experiment_id=exp, nested=True, parent_run_id=parent.info.run_id, tags=tags):
                mlflow.log_metrics(
                    {
                        "success_rate": 0.31,
                        "tests_passed": 0.51,
                        "tests_passed_ci_low": 0.5,
                        "tests_passed_ci_high": 0.52,
                    }
                )
    return root


@pytest.fixture
def tasks_store(two_tasks, monkeypatch):
    monkeypatch.chdir(two_tasks)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure()


def _task_of_score(value: float) -> str:
    """The task whose range a score (or interval bound) of TASK_SCORES or the old run lies in."""
    return "elicitation" if value > 0.6 else "colbench-backend"


def test_an_old_untagged_run_reads_as_colbench_backend_with_tests_passed_as_mean_score(tasks_store):
    df = eval_runs("sweetflow-pipeline")
    old = df[df.run == "old"]
    assert len(old) == 1 and old.iloc[0]["task"] == "colbench-backend"
    assert old.iloc[0]["mean_score"] == pytest.approx(0.51)
    assert (old.iloc[0]["mean_score_ci_low"], old.iloc[0]["mean_score_ci_high"]) == pytest.approx((0.5, 0.52))


def test_two_tasks_are_two_blocks_that_never_share_a_column(tasks_store):
    df = eval_runs("sweetflow-pipeline")
    assert list(df["task"]) == ["colbench-backend"] * 3 + ["elicitation"] * 3  # sorted by task first
    assert list(df[df.task == "elicitation"]["algo"]) == ["rft", "sweet", "sweet"]
    for _, row in df[df.run != "old"].iterrows():
        assert (row["success_rate"], row["mean_score"]) == pytest.approx(
            TASK_SCORES[row["task"]][(row["algo"], row["iteration"])]
        )
    blocks = format_table(df).split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["task: colbench-backend", "task: elicitation"]
    for block in blocks:
        task = block.splitlines()[0].removeprefix("task: ")
        header, rows = block.splitlines()[1], block.splitlines()[3:]
        assert "mean_score" in header and "tests_passed" not in header
        assert len(rows) == (df.task == task).sum()
        numbers = [float(x) for r in rows for x in re.findall(r"\b0\.\d{3}\b", r)]
        assert numbers and {_task_of_score(x) for x in numbers} == {task}
    assert "0.810" in blocks[1] and "0.810" not in blocks[0] and "0.510" in blocks[0]


def test_each_task_has_its_own_panels(tasks_store, tmp_path):
    df = eval_runs("sweetflow-pipeline")
    fig = figure(df)
    assert len(fig.subfigs) == 2
    for sub, task in zip(fig.subfigs, ["colbench-backend", "elicitation"]):
        titles = [ax.get_title() for ax in sub.axes]
        assert titles == [f"{task} · success_rate", f"{task} · mean_score"]
        for ax in sub.axes:
            ys = [y for c in ax.containers for y in c.lines[0].get_ydata()]
            assert ys and {_task_of_score(y) for y in ys} == {task}
            expected = df[df.task == task][ax.get_title().split(" · ")[1]]
            assert sorted(ys) == pytest.approx(sorted(expected))
    assert plot(df, tmp_path / "tasks.png").read_bytes()[:8] == PNG_MAGIC


def test_task_filter_keeps_one_task(tasks_store):
    df = eval_runs("sweetflow-pipeline", task="elicitation")
    assert len(df) == 3 and set(df["task"]) == {"elicitation"}
    text = format_table(df)
    assert text.startswith("task: elicitation\n") and "\n\n" not in text and "colbench" not in text
    assert len(figure(df).subfigs) == 1
    old = eval_runs("sweetflow-pipeline", task="colbench-backend")
    assert len(old) == 3 and "old" in set(old["run"])  # the untagged run counts as ColBench backend
    with pytest.raises(UnknownTaskError, match="tasks there: colbench-backend, elicitation"):
        eval_runs("sweetflow-pipeline", task="nope")


def test_frontend_similarities_are_shown_under_their_metrics_name(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure()
    exp = tracking.experiment_id("sweetflow-pipeline")
    for it, (metric, value) in enumerate([("similarity_layout", 0.81), ("similarity_clip", 0.74)]):
        tags = {"sweetflow.kind": "eval", "sweetflow.algo": "sweet", "sweetflow.iteration": str(it)}
        with mlflow.start_run(experiment_id=exp, tags=tags | {"sweetflow.task": "colbench-frontend"}):
            bounds = {f"{name}_ci_{end}": value for name in ("mean_score", metric) for end in ("low", "high")}
            mlflow.log_metrics({"success_rate": 0.0, "mean_score": value, metric: value, "n": 8} | bounds)
    df = eval_runs("sweetflow-pipeline")
    assert list(df["similarity_layout"].fillna(-1)) == [0.81, -1]
    assert list(df["similarity_clip"].fillna(-1)) == [-1, 0.74]
    header = format_table(df).splitlines()[1]
    assert "similarity_layout" in header and "similarity_clip" in header


def test_sweet_rows_show_their_critics_quality_from_the_critic_quality_run_of_the_same_parent(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.configure()
    exp = tracking.experiment_id("sweetflow-pipeline")
    quality = {"sweet": (0.75, 0.638), "sweet-noc": (0.5, 0.512)}  # (held-out accuracy, agreement)
    with mlflow.start_run(experiment_id=exp, tags={"sweetflow.kind": "pipeline", "sweetflow.algo": "sweet"}) as parent:
        for algo in ("sweet", "sweet-noc", "mtdpo"):
            tags = {"sweetflow.algo": algo, "sweetflow.iteration": "1", "sweetflow.task": "elicitation"}
            with mlflow.start_run(
                experiment_id=exp, nested=True, parent_run_id=parent.info.run_id, tags=tags | {"sweetflow.kind": "eval"}
            ):
                mlflow.log_metrics({"success_rate": 0.1, "mean_score": 0.4, "n": 8})
            if algo in quality:
                stage = tags | {"sweetflow.kind": "stage", "sweetflow.stage": "critic_quality"}
                with mlflow.start_run(experiment_id=exp, nested=True, parent_run_id=parent.info.run_id, tags=stage):
                    acc, agree = quality[algo]
                    mlflow.log_metrics(
                        {
                            "heldout_pair_accuracy_trained": acc,
                            "turn_value_agreement_trained": agree,
                            "turn_value_agreement_trained_low": agree - 0.1,
                            "turn_value_agreement_trained_high": agree + 0.1,
                        }
                    )
    df = eval_runs("sweetflow-pipeline").set_index("algo")
    assert df.loc["sweet", "critic_heldout_acc"] == 0.75 and df.loc["sweet-noc", "critic_agreement"] == 0.512
    assert df.loc["sweet", "critic_agreement_ci_low"] == pytest.approx(0.538)
    assert math.isnan(df.loc["mtdpo", "critic_agreement"])
    text = format_table(df.reset_index())
    header, rows = text.splitlines()[1], {line.split()[1]: line for line in text.splitlines()[3:]}
    assert "critic_heldout_acc" in header and "critic_agreement" in header
    assert "0.638  [0.538, 0.738]" in rows["sweet"] and "0.750" in rows["sweet"]
    assert rows["mtdpo"].count(" - ") >= 2  # no critic: dashes
