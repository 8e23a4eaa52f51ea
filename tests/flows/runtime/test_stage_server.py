"""flows/runtime/stage_server.py and components/stages/handover.py with real processes: a real server
(torch and transformers imported), real stage modules started as DVC starts them (`python -m
components.stages.<stage>`), real signals. A stage blocks on a params file that is a FIFO nobody
writes, so that it is running when the test signals its caller."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.config.cluster import ClusterConfig
from components.stages.handover import ENV
from flows.runtime.stage_server import stage_server
from tests.processes import alive

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A running stage server (module-wide: it takes seconds to import torch), its socket and its log."""
    logs = tmp_path_factory.mktemp("logs")
    with stage_server(ClusterConfig(), logs, stages=2) as path:
        yield path, logs / "stage_server.log"


def stage(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def forked_pids(log: Path, module: str) -> list[int]:
    return [int(p) for p in re.findall(rf"{re.escape(module)} .*runs as pid (\d+)", log.read_text())]


def new_forked_pid(log: Path, module: str, before: list[int], timeout: float = 60.0) -> int:
    """The pid the server gave a `module` request that `before` does not hold (waits for it to be logged)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = [pid for pid in forked_pids(log, module) if pid not in before]
        if new:
            return new[0]
        time.sleep(0.1)
    raise AssertionError(f"{module} never ran in the server:\n{log.read_text()}")


def test_a_stage_runs_in_a_fork_with_its_cwd_environment_arguments_and_exit_status(server, tmp_path):
    path, log = server
    (tmp_path / "bad.yaml").write_text("pairs:\n  bogus_field: 1\n")
    done = stage(["components.stages.pairs", "turn"], tmp_path, {"SWEETFLOW_PARAMS": "bad.yaml"})
    out, err = done.communicate(timeout=120)
    assert done.returncode == 1, err
    assert "invalid configuration in bad.yaml [pairs]" in err  # read from its cwd, named by its variable
    assert "components.stages.pairs turn runs as pid" in log.read_text()
    helped = stage(["components.stages.pairs", "--help"], tmp_path)
    out, err = helped.communicate(timeout=120)
    assert helped.returncode == 0 and out.startswith("python -m components.stages.pairs"), err
    assert log.read_text().count("components.stages.pairs --help runs as pid") == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupt_of_the_caller_ends_the_forked_stage_the_same_way(server, tmp_path, sig):
    path, log = server
    os.mkfifo(tmp_path / "params.yaml")  # opened for reading, it blocks until a writer comes
    before = forked_pids(log, "components.stages.critic")
    caller = stage(["components.stages.critic"], tmp_path, {"SWEETFLOW_PARAMS": "params.yaml"})
    pid = new_forked_pid(log, "components.stages.critic", before)
    time.sleep(0.5)
    assert alive(pid) and caller.poll() is None
    caller.send_signal(sig)
    caller.communicate(timeout=30)
    assert caller.returncode == -sig  # as the stage's own process would have ended
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_a_caller_killed_outright_takes_its_forked_stage_with_it(server, tmp_path):
    path, log = server
    os.mkfifo(tmp_path / "params.yaml")
    before = forked_pids(log, "components.stages.actor")
    caller = stage(["components.stages.actor"], tmp_path, {"SWEETFLOW_PARAMS": "params.yaml"})
    pid = new_forked_pid(log, "components.stages.actor", before)
    caller.kill()
    caller.wait(timeout=10)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert f"the caller of pid {pid} went away" in log.read_text()


def test_a_stage_runs_in_its_own_process_where_the_server_does_not_take_it(server, tmp_path):
    path, log = server
    refused = stage(["components.stages.pairs", "--help"], tmp_path, {"OMP_NUM_THREADS": "7"})
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 0 and out.startswith("python -m components.stages.pairs")
    assert "did not take the stage (environment differs from the server's in OMP_NUM_THREADS)" in err
    assert "refused components.stages.pairs: environment differs" in log.read_text()
    unreachable = stage(["components.stages.pairs", "--help"], tmp_path, {ENV: str(tmp_path / "no-socket")})
    out, err = unreachable.communicate(timeout=120)
    assert unreachable.returncode == 0 and out.startswith("python -m components.stages.pairs")
    assert "not reached" in err


@pytest.mark.parametrize("preload, stages", [(False, 9), (True, 1)])
def test_without_preloading_or_for_one_stage_the_run_has_no_server(tmp_path, preload, stages):
    before = os.environ.get(ENV)  # the module's server's
    with stage_server(ClusterConfig(preload_stages=preload), tmp_path, stages) as path:
        assert path is None and os.environ.get(ENV) == before
    assert not (tmp_path / "stage_server.log").exists()
