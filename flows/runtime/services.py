"""Long-running local servers (the Prefect and MLflow UIs): start, health-check, supervise, stop.

Reads nothing but the commands it is given; writes each server's stdout+stderr to `<log_dir>/<name>.log`.
Each server runs in its own process group (session), so stopping it reaches the workers it forks
(uvicorn/gunicorn): SIGTERM to the group, a grace period, then SIGKILL to whatever is left.
Ports are checked before anything starts; health is an HTTP GET on loopback (proxies bypassed)
that must answer 2xx/3xx. Subprocess only: no Prefect or MLflow import here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Sequence

from flows.runtime.processes import end_group

LOG_TAIL_LINES = 20


class ServiceError(RuntimeError):
    """A server could not start (port taken, died, never answered) or died while supervised."""


@dataclass(frozen=True)
class Service:
    """A server command and where it answers once it is up."""

    name: str
    cmd: list[str]
    port: int
    host: str = "127.0.0.1"
    health_path: str = "/"
    ui_path: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    own_session: bool = True  # False: a process group in this session, which an interrupt's sweep reaches

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.ui_path}"

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.port}{self.health_path}"


@dataclass
class Running:
    """A started service: its process (leader of its own process group) and its log file."""

    service: Service
    proc: subprocess.Popen
    log_path: Path
    log_file: IO[bytes]

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (a bind like the server's own fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def healthy(url: str, timeout: float = 2.0) -> bool:
    """True when GET url answers 2xx/3xx (environment proxies are ignored: loopback only)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return 200 <= resp.status < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def stop(running: Running, grace: float = 10.0) -> None:
    """SIGTERM the service's process group, wait up to `grace` s, then SIGKILL what is left."""
    end_group(running.proc, grace)
    running.log_file.close()


def launch(service: Service, log_dir: Path) -> Running:
    """Start `service` (not waiting for it to answer), its output to `<log_dir>/<name>.log`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{service.name}.log"
    log_file = open(log_path, "wb")  # this start only: the tail shown on errors is this run's
    try:
        proc = subprocess.Popen(
            service.cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **service.env},
            cwd=service.cwd,
            start_new_session=service.own_session,
            process_group=None if service.own_session else 0,
        )
    except OSError as exc:
        log_file.close()
        raise ServiceError(f"{service.name}: cannot run {service.cmd[0]}: {exc}") from exc
    return Running(service, proc, log_path, log_file)


def _died_message(running: Running) -> str:
    return (
        f"{running.service.name} exited with code {running.proc.returncode}; last lines of "
        f"{running.log_path}:\n{running.log_tail()}"
    )


def _wait_healthy(started: Sequence[Running], timeout: float) -> None:
    pending = list(started)
    deadline = time.monotonic() + timeout
    while pending:
        for run in list(pending):
            if run.proc.poll() is not None:
                raise ServiceError(_died_message(run))
            if healthy(run.service.health_url):
                pending.remove(run)
        if pending and time.monotonic() > deadline:
            run = pending[0]
            raise ServiceError(
                f"{run.service.name} did not answer {run.service.health_url} within {timeout:.0f} s; "
                f"last lines of {run.log_path}:\n{run.log_tail()}"
            )
        if pending:
            time.sleep(0.25)


def check_ports(services: Sequence[Service]) -> None:
    """Raise ServiceError naming every service whose port is already taken."""
    taken = [s for s in services if port_in_use(s.host, s.port)]
    if taken:
        raise ServiceError(
            "; ".join(
                f"port {s.port} on {s.host} is already in use (needed by {s.name}): stop "
                f"what holds it or choose another port"
                for s in taken
            )
        )


@contextmanager
def start_services(services: Sequence[Service], log_dir: Path, timeout: float = 120.0) -> Iterator[list[Running]]:
    """Start every service (ports checked first), wait until all answer, yield them; stop all on exit."""
    check_ports(services)
    started: list[Running] = []
    try:
        for service in services:
            started.append(launch(service, Path(log_dir)))
        _wait_healthy(started, timeout)
        yield started
    finally:
        for run in reversed(started):
            stop(run)


def wait_any(started: Sequence[Running], poll: float = 0.5) -> Running:
    """Block until one of the services exits; return it."""
    while True:
        for run in started:
            if run.proc.poll() is not None:
                return run
        time.sleep(poll)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt (so Ctrl-C and `kill` stop the same way)."""

    def _raise(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def supervise(
    services: Sequence[Service], log_dir: Path, timeout: float = 120.0, on_ready=lambda started: None
) -> None:
    """Start the services, call on_ready, and block until Ctrl-C/SIGTERM (clean stop, returns) or
    until one service dies (the others are stopped, ServiceError raised)."""
    with sigterm_as_interrupt():
        try:
            with start_services(services, log_dir, timeout) as started:
                on_ready(started)
                dead = wait_any(started)
                raise ServiceError(_died_message(dead))
        except KeyboardInterrupt:
            return


def ui_services(
    repo: Path, prefect_port: int = 4200, mlflow_port: int = 5000, host: str = "127.0.0.1"
) -> list[Service]:
    """The Prefect server (UI + API) and the MLflow tracking server over the project's store."""
    repo = Path(repo).resolve()
    store = repo / "mlflow"
    (store / "artifacts").mkdir(parents=True, exist_ok=True)
    prefect = Service(
        name="prefect",
        port=prefect_port,
        host=host,
        health_path="/api/health",
        ui_path="/",
        cmd=[sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(prefect_port)],
        # the UI's pages call this API: without it they call PREFECT_API_URL's or port 4200's
        env={
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_UI_API_URL": f"http://{host}:{prefect_port}/api",
        },
        cwd=repo,
    )
    mlflow = Service(
        name="mlflow",
        port=mlflow_port,
        host=host,
        health_path="/health",
        ui_path="/",
        cmd=[
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            host,
            "--port",
            str(mlflow_port),
            "--backend-store-uri",
            f"sqlite:///{store / 'mlflow.db'}",
            "--default-artifact-root",
            str(store / "artifacts"),
            "--workers",
            "1",
        ],
        env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        cwd=repo,
    )
    return [prefect, mlflow]
