"""Both UIs as a user meets them, in real Chromium: `sweetflow ui` and `sweetflow serve` started as
documented in a project of their own; the pipeline deployment run from the Prefect UI's form
(Run > Custom run, a profile and an override typed in, Submit); the run ends Completed with its step
tasks on its page; in the MLflow UI its parent run shows in the runs table with its dataset, its
results table renders, and an evaluation's traces show a dialogue with its turns and score.

The run is the smoke pipeline on the tiny model, hf engine and offline rollouts (about 70 s);
servers, browser and run take about 3 minutes on 2 cores. Screenshots of every check land in the
test's tmp folder (`screenshots/`), the page a failed check stopped on included.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from flows.planning.profiles import parse_override, set_path
from flows.runtime.processes import end_group
from scripts.ui_pages import browser, poll, prefect_first, run_from_form, sweetflow
from tests.processes import free_port

pytestmark = pytest.mark.slow  # servers, a browser and a served pipeline run: `make test-slow`


def _profile(project: Path, name: str, overrides: list[str]) -> None:
    """A profile `name` in the project's params.yaml: smoke with `overrides` set (what a user adds)."""
    doc = yaml.safe_load((project / "params.yaml").read_text())
    overlay: dict = {"extends": "smoke"}
    for text in overrides:
        set_path(overlay, *parse_override(text))
    doc["profiles"][name] = overlay
    (project / "params.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_run_started_from_the_prefect_form_completes_and_reads_in_mlflow(overrides, project_dir, tmp_path):
    _profile(project_dir, "browser", overrides)
    prefect_url, mlflow_url = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),  # a Prefect database of the test's own
        "PREFECT_API_URL": f"{prefect_url}/api",
        "PREFECT_RUNNER_POLL_FREQUENCY": "2",
        "MLFLOW_TRACKING_URI": mlflow_url,  # steps track through the server: the Prefect run links to it
    }
    logs = tmp_path / "logs"
    logs.mkdir()
    ports = ["--prefect-port", prefect_url.rsplit(":", 1)[1], "--mlflow-port", mlflow_url.rsplit(":", 1)[1]]
    started = [sweetflow(["ui", *ports], project_dir, env, logs / "ui.log")]
    try:
        poll("both servers up", 240, lambda: "Ctrl-C stops both" in (logs / "ui.log").read_text() or None)
        started.append(sweetflow(["serve", "--cron", "0 0 1 1 *"], project_dir, env, logs / "serve.log"))
        with browser(tmp_path / "screenshots") as pages:
            ended = run_from_form(pages, prefect_url, "browser", ["eval.sample_dialogues=2"], timeout_s=600)
            assert ended["parameters"]["params"]["profile"] == "browser"
            assert ended["parameters"]["params"]["overrides"] == ["eval.sample_dialogues=2"]
            assert ended["state_type"] == "COMPLETED", (logs / "serve.log").read_text()[-3000:]
            pages.flow_run(prefect_url, ended["id"], "critic")
            on_run = {"artifacts": {"flow_run_id": {"any_": [ended["id"]]}}}
            link = prefect_first(prefect_url, "artifacts/filter", on_run, lambda found: found["key"] == "mlflow-run")
            assert f"({mlflow_url}/#/experiments/" in link["data"]  # a markdown link to the parent run
            _check_mlflow(pages, mlflow_url, prefect_url, ended["id"])
    finally:
        for proc in reversed(started):
            end_group(proc, grace_s=20)


def _check_mlflow(pages, mlflow_url: str, prefect_url: str, flow_run_id: str) -> None:
    """The pipeline's parent run (found by its Prefect flow-run tag) in the runs table with its dataset,
    its results table, and the dialogue trace of its trained actor's evaluation."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_url)  # not the process-wide URI: later tests keep theirs
    experiment = client.get_experiment_by_name("sweetflow-pipeline").experiment_id
    (parent,) = client.search_runs([experiment], filter_string=f"tags.`prefect.flow_run_id` = '{flow_run_id}'")
    assert parent.data.tags["prefect.flow_run_url"] == f"{prefect_url}/flow-runs/flow-run/{flow_run_id}"
    pages.mlflow_runs(mlflow_url, experiment, parent.info.run_name, parent.inputs.dataset_inputs[0].dataset.name)
    pages.mlflow_artifact(mlflow_url, experiment, parent.info.run_id, "results.md", "Critic quality")
    query = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and tags.`sweetflow.stage` = 'eval_actor'"
    (evaluation,) = client.search_runs([experiment], filter_string=query)
    pages.mlflow_trace(mlflow_url, experiment, evaluation.info.run_id, "score", "turn 0")
