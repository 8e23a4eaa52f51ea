"""A stage process that hands its work to the run's stage server (flows/runtime/stage_server.py).

Why: every step of a run is a fresh `python -m components.stages.<stage>` under `dvc repro`, and
importing torch and transformers takes it 5-7 s before any work (more than the work itself on a
small model). The stage server has imported them once; a stage started while `$SWEETFLOW_STAGE_SERVER`
names its socket sends the server its module, arguments, working directory, environment and its
stdin, stdout and stderr, and the server forks a process that runs the module as `python -m` would.
This process stays what `dvc repro` waits on: it forwards SIGINT, SIGTERM and SIGHUP to the forked
stage's process group and ends with the stage's exit status (or the signal that ended it). If this
process is killed outright, the server sees its connection close and kills the stage.

The stage runs here instead, as before, when there is no server, it cannot be reached, or it refuses
(another Python, interpreter options, or an environment whose variables read when torch or
transformers is imported differ from the server's): what the stage computes never depends on where
it runs.

This module and the hook in components/stages/__init__.py are not code deps of any stage
(components/stages/catalogue.py): they decide where a stage runs, not what it computes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from typing import Any

ENV = "SWEETFLOW_STAGE_SERVER"  # the socket of the run's stage server, set by the process that runs the steps
PACKAGE = "components.stages."
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The variables the server's imports (torch, transformers, numpy, peft) may read when imported, by
# prefix: a step whose environment gives any of them another value than the server's runs in its own
# process. Every other variable a forked stage sees is the step's own (set before the stage's code runs).
IMPORT_TIME_PREFIXES = (
    "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO", "TORCH", "PYTORCH_", "CUDA_", "NCCL_", "HF_", "HUGGINGFACE_",
    "TRANSFORMERS_", "TOKENIZERS_", "NUMPY_", "PYTHON", "LD_", "MALLOC",
)  # fmt: skip
PER_STEP = {"PYTHONUNBUFFERED"}  # set for every step's output (flows/runtime/console.py), read when output is written


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One length-prefixed JSON message (with file descriptors passed along, on Linux)."""
    body = json.dumps(message).encode()
    data = struct.pack("!I", len(body)) + body
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """The next message and the descriptors sent with it; (None, fds) when the peer closed first."""
    head, fds = b"", []
    while len(head) < 4:
        chunk, got, _, _ = socket.recv_fds(sock, 4 - len(head), max(max_fds, 1))
        head, fds = head + chunk, fds + got
        if not chunk:
            return None, fds
    (size,) = struct.unpack("!I", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return json.loads(body), fds


def foreign_variables(env: dict[str, str], server_env: dict[str, str], set_by_imports: set[str]) -> list[str]:
    """The import-time variables by which a step's environment `env` differs from the server's; one
    that the server's imports set (`set_by_imports`) and `env` lacks is not among them: the stage's own
    imports would set it just the same."""
    keys = set(env) ^ set(server_env) | {k for k in env.keys() & server_env.keys() if env[k] != server_env[k]}
    return sorted(
        k
        for k in keys
        if k.startswith(IMPORT_TIME_PREFIXES) and k not in PER_STEP and not (k in set_by_imports and k not in env)
    )


def stage_request() -> dict[str, Any] | None:
    """What this process would ask the server to run: the `-m` module and its arguments, when it was
    started as a plain `python -m components.stages.<stage> ...` (no interpreter options)."""
    argv = list(getattr(sys, "orig_argv", []))
    if len(argv) < 3 or argv[1] != "-m" or not argv[2].startswith(PACKAGE):
        return None
    return {
        "module": argv[2],
        "args": argv[3:],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "executable": os.path.realpath(sys.executable),
    }


def hand_over() -> None:
    """Run this stage process's work in a fork of the stage server and exit with its status; returns
    (the stage then runs here) when there is no server or it does not take the stage."""
    path, request = os.environ.get(ENV), stage_request()
    if not path or request is None:
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        send(sock, request, [0, 1, 2])
        reply, _ = receive(sock)
    except OSError as exc:
        sys.stderr.write(f"stage server at {path} not reached ({exc}): the stage runs in its own process\n")
        sock.close()
        return
    if reply is None or "pid" not in reply:
        reason = (reply or {}).get("refused", "it closed the connection")
        sys.stderr.write(f"stage server did not take the stage ({reason}): it runs in its own process\n")
        sock.close()
        return
    _follow(sock, int(reply["pid"]))


def _follow(sock: socket.socket, pid: int) -> None:
    """Forward interrupts to the forked stage until the server reports how it ended; end the same way."""

    def forward(signum, frame) -> None:
        try:
            os.killpg(pid, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    reply, _ = receive(sock)  # interrupted reads resume after the handler (PEP 475)
    status = -signal.SIGKILL if reply is None else os.waitstatus_to_exitcode(reply["status"])
    sys.stdout.flush()
    if status < 0:  # killed by a signal: end by it too, as the stage's own process would have
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)
