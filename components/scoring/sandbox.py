"""Scorer side of the sandbox: a pool of fork-servers and the per-candidate protocol.

Reads/writes no files except a temporary jail root per fork-server (a private tmpfs inside the
server's own mount namespace when run as root; an ordinary directory otherwise), removed on close.

`SandboxPool(workers)` starts `workers` fork-servers (server.py) with an empty environment, each
handling one candidate at a time; `pool.run(code, calls)` forks a confined child in one of them,
sends it the code over a pipe the server never reads, reads the child's output lines from a pipe
the server never reads either, enforces a wall-clock limit (per test call: `timeout` + grace) and
has the server kill and reap the child. It returns the raw wire outputs; decoding and comparison
happen in the caller (backend.py), never in the sandbox. A server that dies is restarted.
See jail.py for the confinement layers and `SandboxPool.capabilities` for which are active.
"""
from __future__ import annotations

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
# Modules a candidate may import (a chrooted child can only use what the server pre-imported).
PRELOAD = (
    "math cmath re json random datetime time _strptime calendar collections collections.abc "
    "itertools functools operator string statistics heapq bisect copy decimal fractions numbers "
    "hashlib hmac base64 binascii struct array enum dataclasses typing types textwrap unicodedata "
    "urllib.parse html html.parser xml.etree.ElementTree sqlite3 csv io uuid zlib difflib pprint "
    "locale secrets socket subprocess encodings.idna encodings.utf_16 encodings.utf_32 encodings.latin_1 "
    "encodings.ascii encodings.cp1252 encodings.unicode_escape encodings.raw_unicode_escape "
    "numpy numpy.random numpy.linalg numpy.fft numpy.polynomial numpy.ma bs4"
).split()


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

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.jail_root = tempfile.mkdtemp(prefix="sweetflow-sandbox-")
        os.chmod(self.jail_root, 0o711)
        jobs_r, self.jobs_w = os.pipe()
        self.results_r, results_w = os.pipe()
        self.jobs_drain = os.open(f"/proc/self/fd/{jobs_r}", os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(self.results_r, False)
        cfg = {"jail_root": self.jail_root, "jobs_fd": jobs_r, "results_fd": results_w,
               "tmpfs_mb": limits.tmpfs_mb, "preload": list(PRELOAD), "paths": _site_paths()}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-s", "-S", str(SERVER), json.dumps(cfg)],
            env={"PYTHONHASHSEED": "0"}, cwd="/",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(jobs_r, results_w))
        os.close(jobs_r)
        os.close(results_w)
        self.ctl = _Lines(self.proc.stdout.fileno())
        os.set_blocking(self.ctl.fd, False)
        self.jobs, self._msgs = 0, []
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
        """Run `code` and then each call in a fresh confined child; see module docstring."""
        lim, nonce = self.limits, secrets.token_hex(8)
        body = json.dumps({"nonce": nonce, "code": code, "calls": list(calls),
                           "timeout": lim.timeout_s, "max_chars": lim.max_output_chars}).encode()
        self.jobs += 1
        job = self.jobs
        cpu = int(lim.timeout_s * (len(calls) + 1)) + 2
        backstop = (lim.timeout_s + lim.grace_s) * (len(calls) + 2) + 10
        limits = {"cpu_s": cpu, "mem_mb": lim.mem_mb, "fsize_mb": lim.fsize_mb, "nofile": lim.nofile}
        self._order({"id": job, "size": len(body), "limits": limits, "backstop": backstop})
        started = self._control(time.monotonic() + 30)
        if started.get("id") != job or "pid" not in started:
            raise ServerDied(f"unexpected control message {started!r}")
        result = RunResult(outputs=[None] * len(calls), errors=[None] * len(calls))
        self._collect(job, nonce, body, result)
        self._drain()
        return result

    def _write_body(self, body: memoryview) -> memoryview:
        try:
            return body[os.write(self.jobs_w, body):]
        except BlockingIOError:
            return body
        except OSError:
            return body[:0]

    def _collect(self, job: int, nonce: str, body: bytes, result: RunResult) -> None:
        """Feed the body, read the child's lines, stop it when done or over a limit."""
        lim, step = self.limits, self.limits.timeout_s + self.limits.grace_s
        out, pending = _Lines(self.results_r), memoryview(body)
        os.set_blocking(self.jobs_w, False)
        deadline, reason, kill_sent, exited = time.monotonic() + step + 5, None, False, None
        while exited is None:
            if pending:
                pending = self._write_body(pending)
            for line in out.pump():
                if _apply(_parse(line), nonce, result):
                    deadline = time.monotonic() + step
            if not kill_sent:
                if out.nbytes > lim.max_total_bytes:
                    reason = "output limit"
                elif time.monotonic() > deadline and not result.done:
                    reason = "wall-clock limit"
                if result.done or reason:
                    self._order({"kill": job})
                    kill_sent, deadline = True, time.monotonic() + 10
            elif time.monotonic() > deadline:
                raise ServerDied("fork-server did not reap a stopped child")
            exited = self._poll_exit(job, out, pending, deadline)
        for line in out.pump() + [out.buf]:
            _apply(_parse(line), nonce, result)
        result.exit = reason or ("done" if result.done else exited)

    def _poll_exit(self, job: int, out: _Lines, pending: memoryview, deadline: float):
        wait = max(0.0, min(deadline - time.monotonic(), 0.5))
        select.select([self.ctl.fd, out.fd], [self.jobs_w] if pending else [], [], wait)
        self._msgs.extend(m for m in map(_parse, self.ctl.pump()) if m is not None)
        for msg in self._msgs:
            if msg.get("id") == job and "exit" in msg:
                self._msgs.remove(msg)
                return str(msg["exit"])
        if self.ctl.eof:
            raise ServerDied("fork-server closed its control pipe")
        return None

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
    if kind == "caps":
        result.caps = {k: v for k, v in msg.items() if k not in ("k", "n")}
    elif kind == "exec":
        result.exec_error = str(msg["err"])[:500] if msg.get("err") else None
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
    """`workers` fork-servers shared by threads; use as a context manager."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.limits = limits or Limits()
        self._idle: queue.Queue[ForkServer] = queue.Queue()
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()
        starters = [threading.Thread(target=self._start) for _ in range(self.workers)]
        for t in starters:
            t.start()
        for t in starters:
            t.join()
        if not self._all:
            raise RuntimeError("no sandbox fork-server could be started")

    def _start(self) -> None:
        server = ForkServer(self.limits)
        with self._lock:
            self._all.append(server)
        self._idle.put(server)

    @property
    def capabilities(self) -> dict:
        """Which isolation layers are active (from the first server and its last child)."""
        return dict(self._all[0].caps) if self._all else {}

    @property
    def missing(self) -> list[str]:
        """Pre-import modules that are not installed (a candidate cannot import them)."""
        return list(self._all[0].missing) if self._all else []

    def run(self, code: str, calls: list[str]) -> RunResult:
        """Run one program with its test calls in the next idle fork-server (thread-safe)."""
        server = self._idle.get()
        try:
            return server.run(code, calls)
        except ServerDied as exc:
            with self._lock:
                self._all.remove(server)
            server.close()
            self._start()
            return RunResult([None] * len(calls), [f"sandbox failure: {exc}"] * len(calls),
                             exit=f"sandbox failure: {exc}")
        finally:
            if server in self._all:
                self._idle.put(server)

    def close(self) -> None:
        for server in self._all:
            server.close()
        self._all.clear()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
