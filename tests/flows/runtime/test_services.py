"""Local server supervision (flows/runtime/services.py) with real `python -m http.server` processes:
start and health, clean stop of the whole process group, port-in-use, died, never-answered, Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from flows.runtime.services import Service, ServiceError, healthy, port_in_use, start_services, supervise, ui_services
from tests.processes import free_port


def http_service(port: int, name: str = "web", prefix: list[str] | None = None) -> Service:
    return Service(
        name=name,
        port=port,
        health_path="/",
        cmd=[*(prefix or []), sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_start_health_url_and_clean_stop_of_the_process_group(tmp_path):
    port = free_port()
    pidfile = tmp_path / "child.pid"
    # a shell that forks the real server: stopping must reach the grandchild too (process group)
    shell = ["sh", "-c", f'"{sys.executable}" -m http.server {port} --bind 127.0.0.1 & echo $! > {pidfile}; wait']
    service = Service(name="web", port=port, cmd=shell)
    with start_services([service], tmp_path / "logs", timeout=30) as started:
        assert service.url == f"http://127.0.0.1:{port}/"
        assert healthy(service.health_url)
        assert port_in_use("127.0.0.1", port)
        (run,) = started
        assert run.proc.poll() is None
        child = int(pidfile.read_text())
        assert pid_alive(child)
    assert run.proc.poll() is not None
    assert wait_gone(child), "the server forked by the service outlived the stop"
    assert not healthy(service.health_url)
    assert not port_in_use("127.0.0.1", port)
    assert (tmp_path / "logs" / "web.log").exists()


def test_port_in_use_is_a_clear_error_before_anything_starts(tmp_path):
    first, second = free_port(), free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", second))
        holder.listen()
        with pytest.raises(ServiceError, match=f"port {second} on 127.0.0.1 is already in use.*b"):
            with start_services([http_service(first, "a"), http_service(second, "b")], tmp_path, timeout=30):
                pass
    assert not (tmp_path / "a.log").exists(), "a service was started although a port was taken"
    assert not port_in_use("127.0.0.1", first)


def test_a_service_that_dies_on_start_shows_its_last_log_lines_and_stops_the_others(tmp_path):
    ok_port = free_port()
    dying = Service(
        name="dying",
        port=free_port(),
        cmd=[sys.executable, "-c", "import sys; print('boom: bad config', flush=True); sys.exit(3)"],
    )
    with pytest.raises(ServiceError, match=r"(?s)dying exited with code 3.*boom: bad config"):
        with start_services([http_service(ok_port), dying], tmp_path, timeout=30):
            pass
    time.sleep(0.2)
    assert not healthy(f"http://127.0.0.1:{ok_port}/")


def test_a_service_that_never_answers_times_out_with_its_log(tmp_path):
    silent = Service(
        name="silent",
        port=free_port(),
        cmd=[sys.executable, "-c", "import time; print('still booting', flush=True); time.sleep(60)"],
    )
    start = time.monotonic()
    with pytest.raises(ServiceError, match=r"(?s)silent did not answer .* within 1 s.*still booting"):
        with start_services([silent], tmp_path, timeout=1):
            pass
    assert time.monotonic() - start < 15


def test_supervise_stops_the_others_when_one_dies(tmp_path):
    seen = []
    short = http_service(free_port(), "short", prefix=["timeout", "2"])
    with pytest.raises(ServiceError, match="short exited"):
        supervise([http_service(free_port(), "long"), short], tmp_path, timeout=30, on_ready=seen.extend)
    assert [r.service.name for r in seen] == ["long", "short"]
    assert all(r.proc.poll() is not None for r in seen)


def test_supervise_returns_cleanly_on_sigterm(tmp_path):
    seen = []

    def ready(started):
        seen.extend(started)
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill <pid>` (or Ctrl-C as SIGINT) does to `sweetflow ui`
        time.sleep(5)

    previous = signal.getsignal(signal.SIGTERM)
    supervise([http_service(free_port())], tmp_path, timeout=30, on_ready=ready)
    assert seen and seen[0].proc.poll() is not None
    assert signal.getsignal(signal.SIGTERM) == previous


def test_ui_services_commands(tmp_path):
    prefect, mlflow = ui_services(tmp_path, prefect_port=4300, mlflow_port=5300)
    assert prefect.cmd[1:] == ["-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", "4300"]
    assert prefect.health_url == "http://127.0.0.1:4300/api/health"
    assert prefect.env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert f"sqlite:///{tmp_path.resolve()}/mlflow/mlflow.db" in mlflow.cmd
    assert str(tmp_path.resolve() / "mlflow" / "artifacts") in mlflow.cmd
    assert mlflow.cmd[mlflow.cmd.index("--workers") + 1] == "1"
    assert mlflow.env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert mlflow.url == "http://127.0.0.1:5300/"
