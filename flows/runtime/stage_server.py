"""The run's stage server: one process that imports torch and transformers once, from which every
stage process of the run is forked (components/stages/handover.py: why, and what a stage sends).

Lifetime: `stage_server` starts it around a pipeline run or a single-step command of two stages or
more (`cluster.preload_stages`, backend local) and sets `$SWEETFLOW_STAGE_SERVER` to its socket,
which `dvc repro` passes on to the stages. The socket is bound before the imports, so a stage that
starts meanwhile waits for them instead of doing them again. Each forked stage leads a process group
of its own, which its caller (the stage process `dvc repro` runs) signals; when that caller's
connection closes before the stage ends (it was killed outright), the stage's group is killed. The
server ends with SIGTERM (or its parent's death), killing any stage still running, and is a process
of the worker's session, so an interrupt's session sweep (flows/runtime/supervise.py) ends it with
the rest.

Writes: its own log to `<log_dir>/stage_server.log` (requests taken or refused, exit statuses).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import logging
import os
import random
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, NoReturn

import numpy

from components.config.cluster import Backend, ClusterConfig
from components.stages.handover import ENV, foreign_variables, receive, send
from flows.runtime.processes import die_with_parent, end_group

BIND_TIMEOUT_S = 60.0  # for the server to start and bind its socket
# What the stages import that takes seconds (transformers' auto classes pull in its modeling and
# generation code); the project's own modules are never preloaded, so a stage runs the code on disk.
PRELOAD = ("numpy", "torch", "transformers", "transformers.modeling_utils", "transformers.generation", "peft")


def log(text: str) -> None:
    print(f"stage server {os.getpid()}: {text}", flush=True)


class Server:
    """Accepts stage requests on a Unix socket, forks one process per stage, reports how each ended."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.path, self.stopping = path, False
        before = dict(os.environ)
        log(f"listening on {path}; importing {', '.join(PRELOAD)}")
        for module in PRELOAD:
            importlib.import_module(module)
        self.env = dict(os.environ)  # the environment a stage must match (what the imports set included)
        self.set_by_imports = {k for k in self.env if before.get(k) != self.env[k]}
        gc.freeze()  # the stages' collections skip the preloaded heap (and leave its pages shared)
        log("ready")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.stages: dict[int, socket.socket] = {}  # forked stage pid -> its caller's connection

    def serve(self) -> dict[str, Any] | None:
        """Serve until SIGTERM (None); in a forked stage process, returns its request instead."""
        signal.signal(signal.SIGTERM, self._stop)
        while not self.stopping:
            for key, _ in self.selector.select(timeout=0.2):
                if key.fileobj is self.listener:
                    request = self._accept()
                    if request is not None:
                        return request
                else:
                    self._caller_gone(key.fileobj)
            self._reap()
        self._shutdown()
        return None

    def _stop(self, signum, frame) -> None:
        self.stopping = True

    def _accept(self) -> dict[str, Any] | None:
        conn, _ = self.listener.accept()
        try:
            request, fds = receive(conn, max_fds=3)
        except (OSError, ValueError) as exc:
            log(f"a request could not be read ({exc})")
            conn.close()
            return None
        refusal = self._refusal(request, fds)
        if refusal is not None:
            log(f"refused {request and request.get('module')}: {refusal}")
            _close(fds)
            _try_send(conn, {"refused": refusal})
            conn.close()
            return None
        pid = os.fork()
        if pid == 0:
            return self._become_stage(conn, request, fds)
        _own_group(pid)  # also done in the child: whichever runs first, the caller signals the right group
        _close(fds)
        self.stages[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ)
        _try_send(conn, {"pid": pid})
        log(f"{request['module']} {' '.join(request['args'])} runs as pid {pid}")
        return None

    def _refusal(self, request: dict[str, Any] | None, fds: list[int]) -> str | None:
        if request is None or len(fds) != 3:
            return "incomplete request"
        if request.get("executable") != os.path.realpath(sys.executable):
            return f"another Python ({request.get('executable')}, server {os.path.realpath(sys.executable)})"
        foreign = foreign_variables(request["env"], self.env, self.set_by_imports)
        if foreign:
            return f"environment differs from the server's in {', '.join(foreign[:8])}"
        return None

    def _become_stage(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """In the forked process: drop the server's state and take the caller's descriptors."""
        os.setpgid(0, 0)
        die_with_parent()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.selector.close()
        for sock in (self.listener, conn, *self.stages.values()):
            sock.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        _close(fds)
        return request

    def _caller_gone(self, conn: socket.socket) -> None:
        """The connection of a running stage's caller closed (it was killed outright): kill the stage."""
        pid = next(p for p, c in self.stages.items() if c is conn)
        log(f"the caller of pid {pid} went away: killing its process group")
        _kill_group(pid, signal.SIGKILL)
        self.selector.unregister(conn)

    def _reap(self) -> None:
        while self.stages:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.stages.pop(pid, None)
            if conn is None:
                continue
            log(f"pid {pid} ended with exit code {os.waitstatus_to_exitcode(status)}")
            with contextlib.suppress(KeyError):  # already dropped when its caller went away
                self.selector.unregister(conn)
            _try_send(conn, {"status": status})
            conn.close()

    def _shutdown(self) -> None:
        for pid in self.stages:
            _kill_group(pid, signal.SIGKILL)
        self.selector.close()
        self.listener.close()
        Path(self.path).unlink(missing_ok=True)
        log("stopped")


def _own_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it already exited, or did it itself
        os.setpgid(pid, pid)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _try_send(conn: socket.socket, message: dict[str, Any]) -> None:
    try:
        send(conn, message)
    except OSError:  # the caller is gone
        pass


def run_stage(request: dict[str, Any]) -> NoReturn:
    """In a forked stage process: run the request's module as `python -m` would have in its caller,
    and exit as that process would (see `_exit`)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({k: v for k, v in request["env"].items() if k != ENV})  # its own stages start fresh
    sys.argv = [request["module"], *request["args"]]
    sys.path[0] = request["cwd"]
    random.seed()  # unseeded generators start from fresh entropy, as in a process of its own
    numpy.random.seed()
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            _exit(exc.code or 0)
        print(exc.code, file=sys.stderr)
        _exit(1)
    except KeyboardInterrupt:
        traceback.print_exc()
        _exit(-signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        _exit(1)
    _exit(0)


def _exit(code: int) -> NoReturn:
    """End a forked stage as Python's own exit would, but for the teardown of every module: wait for its
    threads, run the exit handlers (logging's flush, multiprocessing's children), flush its output, then
    end (by the signal, for a negative code). The teardown would walk the server's whole preloaded heap
    (seconds) and print leak warnings of native extensions that the frozen heap never frees."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def main(path: str) -> NoReturn:
    request = Server(path).serve()
    if request is None:
        _exit(0)
    run_stage(request)


@contextlib.contextmanager
def stage_server(cluster: ClusterConfig, log_dir: Path, stages: int) -> Iterator[str | None]:
    """The stage server while the block runs (its socket; None when the run has none), stopped after.
    A command of one stage (`stages`) gets none: its process would wait for the server's imports
    as long as it takes to do them itself."""
    if not cluster.preload_stages or cluster.backend != Backend.local or stages < 2:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="sweetflow-stages-")  # a short path: a Unix socket's is at most 107 bytes
    path = os.path.join(folder, "socket")
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "stage_server.log", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flows.runtime.stage_server", path],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", ENV: path},
            process_group=0,
            preexec_fn=die_with_parent,
        )
    deadline = time.monotonic() + BIND_TIMEOUT_S  # bound, it queues the stages that come during its imports
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    bound = os.path.exists(path)
    if bound:
        os.environ[ENV] = path
    else:
        logging.getLogger(__name__).warning("no stage server (see %s): each stage imports torch itself", out.name)
    try:
        yield path if bound else None
    finally:
        os.environ.pop(ENV, None)
        end_group(proc, grace_s=5.0)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1])
