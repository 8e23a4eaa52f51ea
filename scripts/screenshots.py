"""The README's screenshots, taken in headless Chromium (Debian package `chromium`) from the checkout:
the MLflow runs table, a dialogue trace, the comparison of the pipeline's evaluated iterations, and
the Prefect page of a run started from the deployment's form.

Run from the checkout after `make run`: `.venv/bin/python -m scripts.screenshots [--profile smoke]`.
It starts `sweetflow ui` and `sweetflow serve` here (ports 4200 and 5000 must be free), runs the
pipeline deployment from the Prefect UI's Custom run form with the profile given (smoke by default:
about 6 minutes on 2 cores), screenshots the pages into docs/, then stops both. The trace shown is
that run's trained actor's evaluation; the comparison is of every evaluation of the newest run of
the default profile (`make run`'s: zero-shot, SWEET-RL and its baselines).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import urllib.parse
from pathlib import Path

from flows.runtime.processes import end_group
from scripts.ui_pages import Pages, browser, poll, run_from_form, sweetflow

REPO = Path(__file__).resolve().parents[1]
PREFECT, MLFLOW = "http://127.0.0.1:4200", "http://127.0.0.1:5000"
DOCS = {  # docs/ file <- the screenshot of ui_pages' step
    "prefect-flow-run.png": "prefect-flow-run-task",
    "mlflow-runs.png": "mlflow-runs-table",
    "mlflow-trace.png": "mlflow-trace-spans",
    "mlflow-compare.png": "mlflow-compare",
}


def compare_url(client, experiment: str) -> str:
    """MLflow's run comparison of every evaluation (zero-shot, SWEET-RL and the baselines) of the
    newest pipeline run of the default profile (`make run`'s)."""
    query = "tags.`sweetflow.kind` = 'pipeline' and tags.`sweetflow.profile` = 'default'"
    newest = client.search_runs([experiment], filter_string=query, order_by=["attributes.start_time DESC"])
    if not newest:
        raise SystemExit("no pipeline run of the default profile: run `make run` first")
    query = f"tags.`sweetflow.kind` = 'eval' and tags.mlflow.parentRunId = '{newest[0].info.run_id}'"
    ids = [run.info.run_id for run in client.search_runs([experiment], filter_string=query)]
    query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([experiment])})
    return f"{MLFLOW}/#/compare-runs?{query}"


def shoot_mlflow(pages: Pages, flow_run_id: str) -> None:
    """The runs table, the UI-started run's evaluation trace, and the comparison plot."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=MLFLOW)
    experiment = client.get_experiment_by_name("sweetflow-pipeline").experiment_id
    (parent,) = client.search_runs([experiment], filter_string=f"tags.`prefect.flow_run_id` = '{flow_run_id}'")
    pages.mlflow_runs(MLFLOW, experiment, parent.info.run_name, parent.inputs.dataset_inputs[0].dataset.name)
    query = f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and tags.`sweetflow.stage` = 'eval_actor'"
    (evaluation,) = client.search_runs([experiment], filter_string=query)
    pages.mlflow_trace(MLFLOW, experiment, evaluation.info.run_id, "score", "turn 0")
    pages.page.set_viewport_size({"width": 1900, "height": 2900})  # down to the metrics table
    pages.page.goto(compare_url(client, experiment))
    pages.close_assistant()
    pages.see("mean_score", "mlflow-compare", exact=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke", help="profile of the run started from the Prefect form")
    profile = parser.parse_args().profile
    shots = REPO / "runs" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFECT_API_URL": f"{PREFECT}/api", "MLFLOW_TRACKING_URI": MLFLOW}
    started = [sweetflow(["ui"], REPO, env, shots / "ui.log")]
    try:
        poll("both servers up", 240, lambda: "Ctrl-C stops both" in (shots / "ui.log").read_text() or None)
        started.append(sweetflow(["serve", "--cron", "0 2 * * *"], REPO, env, shots / "serve.log"))
        with browser(shots) as pages:
            ended = run_from_form(pages, PREFECT, profile, [], timeout_s=3600)
            if ended["state_type"] != "COMPLETED":
                raise SystemExit(f"the run ended {ended['state_type']}: see {shots / 'serve.log'}")
            pages.flow_run(PREFECT, ended["id"], "critic")
            shoot_mlflow(pages, ended["id"])
    finally:
        for proc in reversed(started):
            end_group(proc, grace_s=20)
    for name, shot in DOCS.items():
        shutil.copy(shots / f"{shot}.png", REPO / "docs" / name)
        print(f"docs/{name}  <- {shots / shot}.png")


if __name__ == "__main__":
    main()
