"""Prefect schedule test: the deployments `sweetflow serve` builds, registered on the session's Prefect
test server (tests/conftest.py) without serving or executing anything.

Checks through the Prefect client: the cron schedule, the server's scheduling of runs from it, the
parameter schema (the UI form) carrying the flow's pydantic fields, a run created from the
deployment with other parameters getting exactly those, bad parameters rejected, and the
process-work-pool variant (no image: a pull step that sets the working directory to the checkout).
"""

from __future__ import annotations

from datetime import timezone
from pathlib import Path

import pytest
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

from flows.runtime.serve import FLOWS, REPO, ServeError, build_deployment, deploy_to_pool, load_flow, register

pytestmark = pytest.mark.integration

CRON = "0 2 * * *"
SCHEDULER_BROKEN = (
    "the Prefect server could not insert scheduled runs; with SQLAlchemy 2.1 Prefect 3.7's "
    "scheduler fails ('Can't evaluate bulk DML statement'): pin sqlalchemy<2.1"
)


@pytest.fixture
def client():
    """A client with Prefect's default retries: the test server's SQLite answers 503 (retryable) when busy."""
    from prefect import get_client

    with get_client(sync_client=True) as c:
        yield c


def test_eval_deployment_has_the_cron_schedule_and_the_parameter_form(client):
    deployment_id = register(build_deployment("eval", CRON, name="it-nightly"))

    dep = client.read_deployment_by_name("sweetflow-eval/it-nightly")
    assert dep.id == deployment_id
    assert dep.entrypoint == "flows.steps_flow.eval_flow" and "sweetflow" in dep.tags
    (schedule,) = dep.schedules
    assert schedule.schedule.cron == CRON and schedule.active
    assert not dep.paused

    schema = dep.parameter_openapi_schema
    assert list(schema["properties"]) == ["params"]
    fields = schema["definitions"]["EvalParams"]["properties"]
    assert {"model", "engine", "simulator", "split", "limit", "out_dir", "seeds"} <= set(fields)
    assert "one evaluation per seed" in fields["seeds"]["description"]


def test_pipeline_deployment_form_has_the_run_options(client):
    register(build_deployment("pipeline", CRON, name="it-pipeline"))

    dep = client.read_deployment_by_name("sweetflow-pipeline/it-pipeline")
    assert dep.entrypoint == "flows.pipeline_flow.pipeline_flow"
    assert dep.schedules[0].schedule.cron == CRON
    schema = dep.parameter_openapi_schema
    fields = schema["definitions"]["PipelineParams"]["properties"]
    assert {"algo", "iterations", "profile", "overrides", "runs_root"} <= set(fields)
    assert schema["definitions"]["Algo"]["enum"] == ["sweet", "mtdpo", "rft", "cory", "ppo"]  # a drop-down


def test_the_server_schedules_runs_at_the_cron_times(client):
    """The server's own scheduling code (what its scheduler service runs every loop): runs at 02:00 UTC."""
    import sqlalchemy
    from prefect.exceptions import PrefectHTTPStatusError

    deployment_id = register(build_deployment("eval", CRON, name="it-schedule"))
    try:
        client.request(
            "POST",
            f"/deployments/{deployment_id}/schedule",
            json={"start_time": "2030-01-01T12:00:00+00:00", "min_runs": 3, "max_runs": 3},
        )
    except PrefectHTTPStatusError:
        if tuple(int(x) for x in sqlalchemy.__version__.split(".")[:2]) >= (2, 1):
            pytest.xfail(f"{SCHEDULER_BROKEN} (installed: {sqlalchemy.__version__})")
        raise
    runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])))
    starts = sorted(r.expected_start_time.astimezone(timezone.utc) for r in runs)
    assert [(s.year, s.day, s.hour, s.minute) for s in starts] == [(2030, d, 2, 0) for d in (2, 3, 4)]
    assert all(r.state.is_scheduled() and r.parameters == {} for r in runs)


def test_a_run_triggered_with_other_parameters_gets_them(client):
    deployment_id = register(build_deployment("eval", CRON, name="it-trigger"))
    params = {"params": {"model": "models/other", "limit": 2, "simulator": "retrieval", "seeds": [3, 4]}}

    run = client.create_flow_run_from_deployment(deployment_id, parameters=params)

    stored = client.read_flow_run(run.id)
    assert stored.deployment_id == deployment_id
    assert stored.parameters == params
    assert stored.state.is_scheduled()

    from prefect.exceptions import PrefectHTTPStatusError

    with pytest.raises(PrefectHTTPStatusError, match="409|422|Validation"):
        client.create_flow_run_from_deployment(deployment_id, parameters={"params": {"limit": "many"}})


def test_process_work_pool_deployment_runs_the_checkout_in_place(client):
    deployment_id = deploy_to_pool("eval", CRON, "it-process-pool", name="it-pool")

    pool = client.read_work_pool("it-process-pool")
    assert pool.type == "process"
    dep = client.read_deployment(deployment_id)
    assert dep.work_pool_name == "it-process-pool"
    assert dep.entrypoint == "flows/steps_flow.py:eval_flow"
    assert dep.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(REPO)}}]
    assert dep.schedules[0].schedule.cron == CRON
    assert "EvalParams" in dep.parameter_openapi_schema["definitions"]
    assert (Path(REPO) / dep.entrypoint.split(":")[0]).exists()


def test_clear_errors_for_a_bad_cron_an_unknown_flow_and_a_wrong_pool_type(client, monkeypatch):
    with pytest.raises(ServeError, match="Invalid cron string.*5 fields"):
        build_deployment("eval", "0 2 * *")
    with pytest.raises(ServeError, match="unknown flow 'nope'"):
        load_flow("nope")
    monkeypatch.setitem(FLOWS, "missing", "flows.not_written_yet:some_flow")
    with pytest.raises(ServeError, match="cannot be imported: ModuleNotFoundError"):
        build_deployment("missing", CRON)

    from prefect.client.schemas.actions import WorkPoolCreate

    client.create_work_pool(WorkPoolCreate(name="it-not-process", type="prefect-agent"))
    with pytest.raises(ServeError, match="type 'prefect-agent'"):
        deploy_to_pool("eval", CRON, "it-not-process")


def test_cli_serve_registers_for_a_work_pool_and_rejects_bad_input(client, monkeypatch, tmp_path):
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings
    from typer.testing import CliRunner

    from flows.cli.commands import app

    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--cron", "0 2 * * 9", "--flow", "eval"])
    assert result.exit_code == 2 and "invalid schedule" in result.output
    monkeypatch.setitem(FLOWS, "missing", "flows.not_written_yet:some_flow")
    result = runner.invoke(app, ["serve", "--cron", CRON, "--flow", "missing"])
    assert result.exit_code == 2 and "cannot be imported" in result.output
    with temporary_settings(updates={PREFECT_CLIENT_MAX_RETRIES: 0}):  # nothing listens there: fail at once
        result = runner.invoke(app, ["serve", "--cron", CRON, "--flow", "eval", "--api-url", "http://127.0.0.1:9/api"])
    assert result.exit_code == 2 and "no Prefect server answers at http://127.0.0.1:9/api" in result.output
    with monkeypatch.context() as elsewhere:
        elsewhere.chdir(tmp_path)  # served runs run in the working directory: it must be a project
        result = runner.invoke(app, ["serve", "--cron", CRON, "--flow", "eval"])
    assert result.exit_code == 2 and f"no params.yaml in {tmp_path}" in result.output

    result = runner.invoke(
        app,
        [
            "serve",
            "--cron",
            "30 1 * * 1",
            "--flow",
            "eval",
            "--name",
            "it-cli",
            "--work-pool",
            "it-cli-pool",
            "--timezone",
            "Europe/Paris",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "prefect worker start --pool it-cli-pool" in result.output
    dep = client.read_deployment_by_name("sweetflow-eval/it-cli")
    assert dep.work_pool_name == "it-cli-pool"
    assert (dep.schedules[0].schedule.cron, dep.schedules[0].schedule.timezone) == ("30 1 * * 1", "Europe/Paris")
