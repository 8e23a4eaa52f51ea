"""Screenshots for the docs: the MLflow comparison of the pipeline's evaluated iterations, and the
Prefect page of the pipeline deployment, taken with headless Chromium (Debian package `chromium`).

Run from the checkout after some `sweetflow run`s: `.venv/bin/python scripts/screenshots.py`.
It starts `sweetflow ui` (both servers on loopback), registers the scheduled pipeline deployment for
a process work pool, screenshots both pages into docs/, then stops the servers.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PREFECT, MLFLOW = "http://127.0.0.1:4200", "http://127.0.0.1:5000"


def wait_for(url: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


def shoot(url: str, out: Path, size: str = "1600,1000") -> None:
    subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            "--disable-component-update",
            f"--window-size={size}",
            "--virtual-time-budget=20000",
            f"--screenshot={out}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    print(f"{out}  <- {url}")


def compare_url() -> str:
    """MLflow's run comparison of the first and last evaluation (each agent's, for CORY) of the newest
    pipeline run of each algorithm."""
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{REPO / 'mlflow' / 'mlflow.db'}")
    exp = mlflow.get_experiment_by_name("sweetflow-pipeline")
    if exp is None:
        raise SystemExit("no pipeline runs yet: run `sweetflow run` first")
    parents = mlflow.search_runs(
        [exp.experiment_id],
        filter_string="tags.`sweetflow.kind` = 'pipeline'",
        order_by=["attributes.start_time DESC"],
        output_format="list",
    )
    newest = {}
    for parent in parents:
        newest.setdefault(parent.data.tags.get("sweetflow.algo"), parent.info.run_id)
    ids = []
    for parent_id in newest.values():
        evals = mlflow.search_runs(
            [exp.experiment_id],
            output_format="list",
            filter_string=(f"tags.`sweetflow.kind` = 'eval' and tags.mlflow.parentRunId = '{parent_id}'"),
        )
        last = max((int(r.data.tags["sweetflow.iteration"]) for r in evals), default=0)
        ids += [r.info.run_id for r in evals if int(r.data.tags["sweetflow.iteration"]) in (0, last)]
    query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([exp.experiment_id])})
    return f"{MLFLOW}/#/compare-runs?{query}"


def deployment_url() -> str:
    out = subprocess.run(
        [
            str(BIN / "sweetflow"),
            "serve",
            "--cron",
            "0 2 * * *",
            "--work-pool",
            "sweetflow-local",
            "--api-url",
            f"{PREFECT}/api",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    found = re.search(r"http://\S+/deployments/deployment/[0-9a-f-]+", out.stdout)
    if not found:
        raise SystemExit(f"no deployment URL in:\n{out.stdout}\n{out.stderr}")
    return found.group(0)


def main() -> None:
    docs = REPO / "docs"
    ui = subprocess.Popen(
        [str(BIN / "sweetflow"), "ui"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(f"{PREFECT}/api/health")
        wait_for(f"{MLFLOW}/health")
        shoot(compare_url(), docs / "mlflow-compare.png", size="1900,2600")  # down to the metrics table
        shoot(deployment_url(), docs / "prefect-deployment.png")
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=60)


if __name__ == "__main__":
    main()
