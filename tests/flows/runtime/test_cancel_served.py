"""Cancelling a served deployment's run (the Prefect UI's Cancel, `prefect flow-run cancel`) stops
the running step's whole process group, a child that ignores SIGTERM included, and the run ends
Cancelled. Real runner process, real Prefect server (the session's test server), real signals.

The runner sends SIGTERM to the flow-run process; Prefect raises it there as a termination signal,
which unwinds flows.runtime.console.run_logged: SIGTERM to the step's group, SIGKILL after 5 s."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from flows.runtime.serve import REPO
from tests.processes import alive

pytestmark = pytest.mark.integration


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def test_cancelling_a_served_run_stops_the_steps_process_group(tmp_path):
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Cancelling

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    runner = subprocess.Popen(
        [sys.executable, "tests/flows/runtime/served_step_flow.py"],  # not tests/: its flows/ would shadow ours
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids_file = tmp_path / "pids"
    try:
        with get_client(sync_client=True) as client:
            deployment = _wait(lambda: _deployment(client), 60, "the runner registered its deployment")
            run = client.create_flow_run_from_deployment(deployment.id, parameters={"pids": str(pids_file)})
            step, stubborn = _wait(
                lambda: pids_file.exists() and list(map(int, pids_file.read_text().split())), 90, "the step started"
            )
            start = time.monotonic()
            client.set_flow_run_state(run.id, Cancelling(), force=True)
            _wait(lambda: not alive(step) and not alive(stubborn), 30, "the step's processes ended")
            stopped_after = time.monotonic() - start
            state = _wait(lambda: _final(client, run.id), 30, "the flow run reached a final state")
        assert state.is_cancelled(), state
        assert stopped_after < 15, stopped_after  # runner poll (1 s) + SIGTERM + 5 s before SIGKILL
    finally:
        os.killpg(runner.pid, 9)
        runner.wait()


def _deployment(client):
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name("long-step/cancel-test")
    except ObjectNotFound:
        return None


def _final(client, run_id):
    state = client.read_flow_run(run_id).state
    return state if state.is_final() else None
