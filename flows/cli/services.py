"""The `sweetflow` commands that run services: `ui` (the Prefect and MLflow servers) and `serve` (a
scheduled Prefect deployment). They register themselves on flows.cli.commands's `app`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from flows.cli.app import SERVICES, app, fail, setup


@app.command("ui", rich_help_panel=SERVICES)
def ui(
    prefect_port: int = typer.Option(4200, "--prefect-port", help="port of the Prefect server (UI + API)"),
    mlflow_port: int = typer.Option(5000, "--mlflow-port", help="port of the MLflow tracking server"),
    timeout: float = typer.Option(180.0, help="seconds to wait for both servers to answer"),
) -> None:
    """Start the Prefect and MLflow servers on 127.0.0.1, print their URLs; Ctrl-C stops both. MLflow
    serves the store of the project in the working directory (mlflow/mlflow.db there), where every
    sweetflow command run in it tracks."""
    from flows.runtime.services import ServiceError, supervise, ui_services

    setup()
    repo = Path.cwd()
    log_dir = repo / "runs" / "ui-logs"

    def ready(started: list) -> None:
        for run in started:
            typer.echo(f"{run.service.name:8s} {run.service.url}   (log: {run.log_path})")
        for name, url in experiment_pages(f"http://127.0.0.1:{mlflow_port}"):
            typer.echo(f"  {name}: {url}")
        typer.echo(
            f"MLflow shows the project store (mlflow/mlflow.db) as runs write it; for flow runs, "
            f"`sweetflow serve` and workers to report to this Prefect server: export PREFECT_API_URL="
            f"http://127.0.0.1:{prefect_port}/api\nCtrl-C stops both servers"
        )

    typer.echo(f"starting the Prefect and MLflow servers (logs in {log_dir}) ...")
    try:
        supervise(ui_services(repo, prefect_port, mlflow_port), log_dir, timeout=timeout, on_ready=ready)
    except ServiceError as exc:
        fail(str(exc))
    typer.echo("servers stopped")


def experiment_pages(mlflow_url: str) -> list[tuple[str, str]]:
    """Each sweetflow experiment of the store served at `mlflow_url` with the page of its runs."""
    from mlflow import MlflowClient

    from flows.tracking.links import runs_page

    found = MlflowClient(tracking_uri=mlflow_url).search_experiments(filter_string="name LIKE 'sweetflow-%'")
    return [(e.name, runs_page(mlflow_url, e.experiment_id)) for e in found]


@app.command("serve", rich_help_panel=SERVICES)
def serve(
    cron: str = typer.Option(..., help='cron schedule, 5 fields, e.g. "0 2 * * *" (02:00 daily)'),
    name: Optional[str] = typer.Option(None, help="deployment name [<flow>-scheduled]"),
    flow: str = typer.Option("pipeline", "--flow", help="pipeline | eval"),
    timezone: Optional[str] = typer.Option(None, help="IANA timezone of the schedule, e.g. Europe/Paris [UTC]"),
    work_pool: Optional[str] = typer.Option(
        None,
        "--work-pool",
        help="register for this Prefect process work pool (created if missing) instead of serving in this process",
    ),
    api_url: Optional[str] = typer.Option(
        None,
        "--api-url",
        help="Prefect server API [PREFECT_API_URL, else http://127.0.0.1:4200/api as started by `sweetflow ui`]",
    ),
) -> None:
    """A Prefect deployment of a flow on a cron schedule, also runnable from the Prefect UI with other
    parameters: served by this process until Ctrl-C (its runs in the working directory's
    project), or registered for a work pool with --work-pool."""
    from flows.runtime.serve import (
        ServeError,
        build_deployment,
        cron_schedule,
        deploy_to_pool,
        deployment_name,
        load_flow,
        resolve_api_url,
        serve_forever,
        ui_url,
        using_api,
    )

    setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per API poll otherwise
    if not work_pool and not Path("params.yaml").exists():
        fail(f"no params.yaml in {Path.cwd()}: served runs run in the project `sweetflow serve` starts in")
    try:
        cron_schedule(cron, timezone)
        load_flow(flow)
        url = resolve_api_url(api_url)
        with using_api(url):
            if work_pool:
                deployment_id = deploy_to_pool(flow, cron, work_pool, name, timezone)
                typer.echo(
                    f"deployment '{deployment_name(flow, name)}' registered for work pool '{work_pool}' "
                    f'(cron "{cron}"): {ui_url(url, deployment_id)}\nstart a worker to run it: '
                    f"PREFECT_API_URL={url} prefect worker start --pool {work_pool}"
                )
                return
            deployment = build_deployment(flow, cron, name, timezone)
            typer.echo(
                f"serving '{deployment.flow_name}/{deployment.name}' (cron \"{cron}\") against {url}; "
                "Ctrl-C stops serving and pauses the schedule"
            )
            serve_forever(deployment)
    except ServeError as exc:
        fail(str(exc))
