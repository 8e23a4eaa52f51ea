"""Scorer side of the sandbox: a pool of fork-servers and the per-candidate protocol.

Reads/writes no files except a temporary jail root per fork-server (a private tmpfs inside the
server's own mount namespace when run as root; an ordinary directory otherwise), removed on close.

`SandboxPool(workers)` starts `workers` fork-servers (server.py) with an empty environment, each
handling one candidate at a time; `pool.run(code, calls)` forks a confined child in one of them
(it runs each call on fresh module state), sends it the code over a pipe the server never reads,
reads the child's output lines from a pipe the server never reads either, enforces a wall-clock
limit (per test call: `timeout` + grace) and has the server kill and reap the child. It returns
the raw wire outputs; decoding and comparison happen in the caller (backend.py), never in the
sandbox. A server that dies is restarted.
See jail.py for the confinement layers and `SandboxPool.capabilities` for which are active.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import queue
import secrets
import select
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

SERVER = Path(__file__).with_name("server.py")
# Modules a candidate may import (a chrooted child can only use what its server pre-imported).
# Two kinds of fork-server: "lite" (standard library) and "heavy" (also numpy and bs4). Forking
# and exiting a process that holds numpy costs about 1.2 ms more, and only programs whose text
# names one of HEAVY_MARKERS are sent to a heavy server (an obfuscated import of numpy fails).
LITE_PRELOAD = (
    "math cmath re json random datetime time _strptime calendar collections collections.abc "
    "itertools functools operator string statistics heapq bisect copy decimal fractions numbers "
    "hashlib hmac base64 binascii struct array enum dataclasses typing types textwrap unicodedata "
    "urllib.parse html html.parser xml.etree.ElementTree sqlite3 csv io uuid zlib difflib pprint "
    "locale secrets socket subprocess encodings.idna encodings.utf_16 encodings.utf_32 "
    "encodings.latin_1 encodings.ascii encodings.cp1252 encodings.unicode_escape "
    "encodings.raw_unicode_escape"
).split()
HEAVY_PRELOAD = LITE_PRELOAD + ("numpy numpy.random numpy.linalg numpy.fft numpy.polynomial numpy.ma bs4").split()
HEAVY_MARKERS = ("numpy", "bs4")


def server_kind(code: str) -> str:
    """Which fork-server kind a program needs: "heavy" if it names numpy or bs4, else "lite"."""
    return "heavy" if any(marker in code for marker in HEAVY_MARKERS) else "lite"


def missing_modules() -> list[str]:
    """Top-level pre-import modules not installed here (a candidate cannot import them)."""
    tops = sorted({name.split(".")[0] for name in HEAVY_PRELOAD})
    return [name for name in tops if importlib.util.find_spec(name) is None]


@dataclass(frozen=True)
class Limits:
    """Per-candidate limits (ColBench's official per-call timeout is 1 s)."""

    timeout_s: float = 1.0
    grace_s: float = 1.0
    mem_mb: int = 512
    fsize_mb: int = 8
    nofile: int = 32
    max_output_chars: int = 1_000_000
    max_total_bytes: int = 16_000_000
    tmpfs_mb: int = 64


@dataclass
class RunResult:
    """Raw outcome of one candidate: wire outputs (None where the call failed) and errors."""

    outputs: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    exec_error: str | None = None
    exit: str | None = None
    caps: dict = field(default_factory=dict)
    done: bool = False


class ServerDied(RuntimeError):
    """The fork-server stopped answering (it is restarted by the pool)."""


class _Lines:
    """Non-blocking line reader over a pipe fd (linear in the bytes read, newlines or not)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.parts, self.eof, self.nbytes = fd, [], False, 0

    @property
    def buf(self) -> bytes:
        return b"".join(self.parts)

    def pump(self) -> list[bytes]:
        try:
            chunk = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return []
        if not chunk:
            self.eof = True
            return []
        self.nbytes += len(chunk)
        if b"\n" not in chunk:
            self.parts.append(chunk)
            return []
        *lines, rest = (self.buf + chunk).split(b"\n")
        self.parts = [rest] if rest else []
        return lines


def _parse(line: bytes):
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return msg if isinstance(msg, dict) else None


class ForkServer:
    """One fork-server process and its four pipes; one job at a time."""

    def __init__(self, limits: Limits, preload: list[str], wait: bool = True) -> None:
        self.limits = limits
        self.jail_root = tempfile.mkdtemp(prefix="sweetflow-sandbox-")
        os.chmod(self.jail_root, 0o711)
        jobs_r, self.jobs_w = os.pipe()
        self.results_r, results_w = os.pipe()
        self.jobs_drain = os.open(f"/proc/self/fd/{jobs_r}", os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(self.results_r, False)
        try:  # room for a whole program's output: the scorer reads it once the child is gone
            fcntl.fcntl(self.results_r, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        os.set_blocking(self.jobs_w, False)
        cfg = {
            "jail_root": self.jail_root,
            "jobs_fd": jobs_r,
            "results_fd": results_w,
            "tmpfs_mb": limits.tmpfs_mb,
            "preload": list(preload),
            "paths": _site_paths(),
            "limits": {"mem_mb": limits.mem_mb, "fsize_mb": limits.fsize_mb, "nofile": limits.nofile},
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-s", "-S", str(SERVER), json.dumps(cfg)],
            env={"PYTHONHASHSEED": "0"},
            cwd="/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(jobs_r, results_w),
        )
        os.close(jobs_r)
        os.close(results_w)
        self.ctl = _Lines(self.proc.stdout.fileno())
        os.set_blocking(self.ctl.fd, False)
        self.jobs, self._msgs = 0, []
        self.caps: dict | None = None
        self.missing: list = []
        if wait:
            self.await_ready()

    def await_ready(self) -> None:
        """Wait for the server's hello (its imports done); raises ServerDied if none comes."""
        if self.caps is None:
            hello = self._control(time.monotonic() + 60)
            self.caps, self.missing = hello.get("caps", {}), hello.get("missing", [])

    def _control(self, deadline: float) -> dict:
        """Next control message from the server (blocking until `deadline`)."""
        while not self._msgs:
            self._msgs.extend(m for m in map(_parse, self.ctl.pump()) if m is not None)
            if self._msgs:
                break
            if self.ctl.eof:
                raise ServerDied("fork-server closed its control pipe")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerDied("fork-server did not answer in time")
            select.select([self.ctl.fd], [], [], left)
        return self._msgs.pop(0)

    def _order(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise ServerDied(f"fork-server gone: {exc}") from None

    def run(self, code: str, calls: list[str]) -> RunResult:
        """Run `code`'s calls in one confined child, each on fresh module state (server.py)."""
        self.await_ready()
        self._drain()
        lim, nonce = self.limits, secrets.token_hex(8)
        body = json.dumps(
            {
                "nonce": nonce,
                "code": code,
                "calls": list(calls),
                "timeout": lim.timeout_s,
                "max_chars": lim.max_output_chars,
            }
        ).encode()
        self.jobs += 1
        cpu = int(lim.timeout_s * (len(calls) + 1)) + 2
        backstop = (lim.timeout_s + lim.grace_s) * (len(calls) + 2) + 10
        self._order({"id": self.jobs, "size": len(body), "limits": {"cpu_s": cpu}, "backstop": backstop})
        result = RunResult(outputs=[None] * len(calls), errors=[None] * len(calls))
        self._collect(self.jobs, nonce, body, result)
        return result

    def _write_body(self, body: memoryview) -> memoryview:
        try:
            return body[os.write(self.jobs_w, body) :]
        except BlockingIOError:
            return body
        except OSError:
            return body[:0]

    def _collect(self, job: int, nonce: str, body: bytes, result: RunResult) -> None:
        """Feed the body and wait until the server has reaped the child, stopping it when it
        makes no progress for a call's time (timeout + grace) or writes too much.

        The child's lines wait in the (1 MiB) results pipe, which keeps them even if the child
        is killed, so the scorer wakes up once per program (the server's exit message), not
        once per line; it also reads the pipe on each wake-up (at least every 0.5 s) to see
        progress, and watches it continuously while it is filling up fast.
        """
        lim, step = self.limits, self.limits.timeout_s + self.limits.grace_s
        out, pending = _Lines(self.results_r), memoryview(body)
        deadline, reason, eager = time.monotonic() + step + 5, None, False
        while True:
            if pending:
                pending = self._write_body(pending)
            before = out.nbytes
            if any([_apply(_parse(line), nonce, result) for line in out.pump()]):
                deadline = time.monotonic() + step
            eager = out.nbytes - before >= 1 << 16
            if reason is None:
                if out.nbytes > lim.max_total_bytes:
                    reason = "output limit"
                elif time.monotonic() > deadline:
                    reason = "wall-clock limit"
                if reason:
                    self._order({"kill": job})
                    deadline = time.monotonic() + 10
            elif time.monotonic() > deadline:
                raise ServerDied("fork-server did not reap a stopped child")
            wait = max(0.0, min(deadline - time.monotonic(), 0.5))
            reads = [self.ctl.fd, out.fd] if eager else [self.ctl.fd]
            select.select(reads, [self.jobs_w] if pending else [], [], wait)
            self._pump_control()
            exited = self._take_exit(job)
            if exited is not None:
                break
        for line in out.pump() + [out.buf]:
            _apply(_parse(line), nonce, result)
        result.exit = reason or ("done" if result.done else exited)

    def _pump_control(self) -> None:
        self._msgs.extend(m for m in map(_parse, self.ctl.pump()) if m is not None)
        if self.ctl.eof:
            raise ServerDied("fork-server closed its control pipe")

    def _take_exit(self, job: int) -> str | None:
        """The exit description of `job` if the server reported it; drops older messages."""
        found = None
        for msg in self._msgs:
            if msg.get("id") == job and "exit" in msg:
                found = str(msg["exit"])
        self._msgs = [m for m in self._msgs if m.get("id", job + 1) > job]
        return found

    def _drain(self) -> None:
        """Discard what a dead child left unread in the jobs pipe or unparsed in results."""
        for fd in (self.jobs_drain, self.results_r):
            try:
                while os.read(fd, 1 << 20):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        for fd in (self.jobs_w, self.jobs_drain, self.results_r):
            os.close(fd)
        self.proc.stdout.close()
        shutil.rmtree(self.jail_root, ignore_errors=True)


def _apply(msg, nonce: str, result: RunResult) -> bool:
    """Record one child message; False if it is not a well-formed message of this job."""
    if msg is None or msg.get("n") != nonce:
        return False
    kind = msg.get("k")
    if kind == "exec":
        result.exec_error = str(msg["err"])[:500] if msg.get("err") else None
        caps = msg.get("caps")
        result.caps = dict(caps) if isinstance(caps, dict) else {}
    elif kind == "test":
        i = msg.get("i")
        if type(i) is not int or not 0 <= i < len(result.outputs):
            return False
        if result.outputs[i] is None and result.errors[i] is None:
            if "out" in msg:
                result.outputs[i] = msg["out"]
            else:
                result.errors[i] = str(msg.get("err"))[:500]
    elif kind == "done":
        result.done = True
    elif kind == "crash":
        result.exec_error = result.exec_error or f"sandbox child crashed: {msg.get('err')}"[:500]
    else:
        return False
    return True


def _site_paths() -> list[str]:
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return sorted(p for p in paths if os.path.isdir(p))


class SandboxPool:
    """Up to `workers` fork-servers of each kind, shared by threads; use as a context manager.

    All `workers` lite servers are started at once, side by side (their imports overlap, and
    the first one's hello reports the active isolation layers); heavy ones start on first need.
    """

    def __init__(self, workers: int | None = None, limits: Limits | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.limits = limits or Limits()
        self._preload = {"lite": LITE_PRELOAD, "heavy": HEAVY_PRELOAD}
        self._idle = {kind: queue.Queue() for kind in self._preload}
        self._count = {kind: 0 for kind in self._preload}
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()
        self.missing = missing_modules()
        try:
            servers = [self._start("lite", wait=False) for _ in range(self.workers)]
            servers[0].await_ready()
        except BaseException:
            self.close()
            raise
        for server in servers:
            self._release("lite", server)

    def _start(self, kind: str, wait: bool = True) -> ForkServer:
        with self._lock:
            self._count[kind] += 1
        try:
            server = ForkServer(self.limits, self._preload[kind], wait)
        except BaseException:
            with self._lock:
                self._count[kind] -= 1
            raise
        server.kind = kind
        with self._lock:
            self._all.append(server)
        return server

    def _acquire(self, kind: str) -> ForkServer:
        with self._lock:
            grow = self._idle[kind].empty() and self._count[kind] < self.workers
        return self._start(kind) if grow else self._idle[kind].get()

    def _release(self, kind: str, server: ForkServer) -> None:
        self._idle[kind].put(server)

    @property
    def capabilities(self) -> dict:
        """Which isolation layers the fork-servers could set up (see jail.isolate_server)."""
        return dict(self._all[0].caps or {}) if self._all else {}

    def run(self, code: str, calls: list[str]) -> RunResult:
        """Run one program with its test calls in an idle fork-server (thread-safe).

        A server that dies (or wedges) is replaced and the program is tried once more on a
        fresh one, so a failure left behind by an earlier program does not count against it.
        """
        kind = server_kind(code)
        for attempt in (1, 2):
            server = self._acquire(kind)
            try:
                result = server.run(code, calls)
            except ServerDied as exc:
                with self._lock:
                    self._all.remove(server)
                    self._count[kind] -= 1
                server.close()
                if attempt == 2:
                    return RunResult(
                        [None] * len(calls), [f"sandbox failure: {exc}"] * len(calls), exit=f"sandbox failure: {exc}"
                    )
                continue
            self._release(kind, server)
            return result
        raise AssertionError("unreachable")

    def close(self) -> None:
        for server in self._all:
            server.close()
        self._all.clear()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
