"""Prefect deployments of sweetflow's flows: a cron schedule, runs from the Prefect UI with other parameters.

Two ways to run a deployment (both need a Prefect server: its scheduler service creates the
scheduled runs, and its UI is where runs are triggered; Prefect's ephemeral API runs no scheduler):
- served in-process (`serve_forever`): `flow.to_deployment(...)` + `prefect.serve`; this process
  polls the server and runs each flow run in a child process. Stopping it pauses the schedule.
- registered for a process work pool (`deploy_to_pool`): `Flow.from_source(<this checkout>, entrypoint)
  .deploy(work_pool_name=...)`, no image: the flow's code stays in this checkout (a LocalStorage pull
  step sets the run's working directory to it), and `prefect worker start --pool NAME` runs it.

Flows are resolved lazily by import path (FLOWS), so a flow module that is missing or broken gives a
clear error only when that flow is asked for. The flow parameters are pydantic models, so the
deployment's parameter schema gives the UI a form. Wiring only: no pipeline logic here.
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator
from uuid import UUID

from flows.runtime.services import healthy

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment
    from prefect.flows import Flow

FLOWS = {"pipeline": "flows.pipeline_flow:pipeline_flow", "eval": "flows.steps_flow:eval_flow"}
REPO = Path(__file__).resolve().parents[2]  # the checkout whose params.yaml and data the runs use
DEFAULT_API_URL = "http://127.0.0.1:4200/api"  # where `sweetflow ui` starts the Prefect server
TAGS = ["sweetflow"]


class ServeError(RuntimeError):
    """A deployment cannot be built or registered (unknown flow, bad cron, no server, bad pool)."""


def load_flow(key: str) -> "Flow":
    """The Prefect flow registered under `key` in FLOWS, imported now."""
    from prefect.flows import Flow

    if key not in FLOWS:
        raise ServeError(f"unknown flow '{key}': choose one of {', '.join(FLOWS)}")
    module_name, attr = FLOWS[key].split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure (missing module, error inside it) gets one clear message
        raise ServeError(f"flow '{key}' ({FLOWS[key]}) cannot be imported: {type(exc).__name__}: {exc}") from exc
    found = getattr(module, attr, None)
    if not isinstance(found, Flow):
        raise ServeError(f"flow '{key}': {FLOWS[key]} is not a Prefect flow")
    return found


def cron_schedule(cron: str, timezone: str | None = None):
    """A validated Prefect cron schedule (IANA timezone, default UTC); ServeError on a bad value."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        return CronSchedule(cron=cron, timezone=timezone)
    except ValidationError as exc:
        hint = ' (cron has 5 fields: minute hour day-of-month month day-of-week, e.g. "0 2 * * *" for 02:00 every day)'
        details = "; ".join(
            err["msg"].removeprefix("Value error, ") + (hint if err["loc"] == ("cron",) else "") for err in exc.errors()
        )
        raise ServeError(f"invalid schedule: {details}") from exc


def deployment_name(key: str, name: str | None) -> str:
    return name or f"{key}-scheduled"


def build_deployment(key: str, cron: str, name: str | None = None, timezone: str | None = None) -> "RunnerDeployment":
    """The deployment `serve_forever` serves: the flow on the cron schedule, parameters from the UI form.

    The entrypoint is the module path (e.g. `flows.steps_flow.eval_flow`), importable from the
    installed package whatever the working directory.
    """
    from prefect.deployments.runner import EntrypointType

    schedule = cron_schedule(cron, timezone)
    flow = load_flow(key)
    return flow.to_deployment(
        name=deployment_name(key, name),
        schedules=[schedule],
        tags=[*TAGS, key],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def register(deployment: "RunnerDeployment") -> UUID:
    """Create or update the deployment on the Prefect API without serving it; return its id."""
    return deployment.apply()


def serve_forever(deployment: "RunnerDeployment") -> None:
    """Register the deployment and run its flow runs in child processes until Ctrl-C / SIGTERM.

    Runs start in the working directory, the project `sweetflow serve` was started in (params.yaml,
    data/, runs/ and mlflow/ are read relative to it, as for `sweetflow run`). On stop, Prefect pauses
    the schedule (nobody would run its runs); serving again resumes it.
    """
    from prefect import serve

    serve(deployment)


def _process_entrypoint(key: str) -> str:
    module_name, attr = FLOWS[key].split(":")
    path = Path(*module_name.split(".")).with_suffix(".py")
    if not (REPO / path).exists():
        raise ServeError(f"flow '{key}': {REPO / path} does not exist (registry entry {FLOWS[key]})")
    return f"{path.as_posix()}:{attr}"


def ensure_process_pool(pool: str) -> None:
    """Create the process work pool `pool` if missing; ServeError if it exists with another type."""
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            found = client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(
                WorkPoolCreate(
                    name=pool, type="process", base_job_template=ProcessWorker.get_default_base_job_template()
                )
            )
            return
    if found.type != "process":
        raise ServeError(
            f"work pool '{pool}' has type '{found.type}'; sweetflow deploys to a 'process' pool "
            f"(runs in this checkout, no image): choose another name"
        )


def deploy_to_pool(key: str, cron: str, pool: str, name: str | None = None, timezone: str | None = None) -> UUID:
    """Register the deployment for the process work pool `pool` (created if missing); return its id.

    `Flow.from_source(<checkout>, "flows/x.py:flow")` makes the deployment carry a pull step that sets
    the working directory to this checkout, so a process worker runs the code in place: no image,
    no upload. Start the worker with `prefect worker start --pool <pool>`.
    """
    from prefect.flows import Flow

    schedule = cron_schedule(cron, timezone)
    load_flow(key)  # same clear error as serving when the flow's module is missing or broken
    entrypoint = _process_entrypoint(key)
    ensure_process_pool(pool)
    flow = Flow.from_source(source=str(REPO), entrypoint=entrypoint)
    return flow.deploy(
        name=deployment_name(key, name),
        work_pool_name=pool,
        schedules=[schedule],
        tags=[*TAGS, key],
        build=False,
        push=False,
        print_next_steps=False,
        ignore_warnings=True,
    )


def resolve_api_url(api_url: str | None = None) -> str:
    """The Prefect server to use: `api_url`, else PREFECT_API_URL, else `sweetflow ui`'s loopback one.

    ServeError when it does not answer: schedules need a running server (its scheduler service).
    """
    from prefect.settings import PREFECT_API_URL

    url = (api_url or PREFECT_API_URL.value() or DEFAULT_API_URL).rstrip("/")
    if not healthy(f"{url}/health", timeout=5):
        raise ServeError(
            f"no Prefect server answers at {url}: start one with `sweetflow ui` (or `prefect server "
            f"start`), or point PREFECT_API_URL / --api-url at yours. Scheduled runs are created by "
            f"the server's scheduler, which Prefect's ephemeral API does not run."
        )
    return url


@contextmanager
def using_api(url: str) -> Iterator[None]:
    """Talk to the Prefect server at `url` here and in the child processes of served runs."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


def ui_url(api_url: str, deployment_id: UUID) -> str:
    """The deployment's page in the Prefect UI served next to `api_url`."""
    return f"{api_url.removesuffix('/api')}/deployments/deployment/{deployment_id}"
