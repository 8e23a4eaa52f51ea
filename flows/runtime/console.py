"""A step's console: run a child command with its output captured whole in the step's log file,
and show on the console only what a person watching the run needs.

`run_logged(argv, log_path, env)` writes every byte the child prints (stdout and stderr, merged in
the order they came) to `log_path`, appending across resumes with a header line per attempt, and
echoes to the console only

- progress bars (tqdm's '\\r' updates): redrawn in place on a terminal, their final state elsewhere;
- warnings and errors: lines with a WARNING/ERROR/CRITICAL level, `error:`, `...Warning:`,
  `...Error:`, and whole tracebacks; a warning repeated word for word, or from the same source line
  of a library that names it (vLLM's `[utils.py:333]`, e.g. one line per weight loaded), is shown once;
  the warnings every vLLM-CPU step prints and no user can act on (`_CHATTER`) stay in the log;
- the stage's result line: the JSON object a stage prints last (its metrics), in a compact form;
- lines containing one of `show` (e.g. DVC's "didn't change, skipping").

Lines with an INFO or DEBUG level (vLLM's engine, transformers, DVC, the stages' own logging) stay
in the log. In verbose mode (`SWEETFLOW_VERBOSE=1`, set by `sweetflow --verbose`) everything is
echoed as it comes. On a non-zero exit the last lines of the log and its path are printed.

The child runs in its own process group (as dvc_repro ran `dvc repro` before): if this process is stopped
(Ctrl-C, SIGTERM turned into SystemExit by the CLI) while the child runs, the whole group gets
SIGTERM, so no engine worker is left running.

Console output is written to sys.stdout directly, not through print(): the flows use Prefect's
`log_prints`, which would turn every line into an INFO log record with a Prefect prefix (hidden
on a quiet console, and no good for a progress bar). `echo` is the same path for a step's banner.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Mapping, Sequence

from flows.runtime.processes import end_group

VERBOSE_ENV = "SWEETFLOW_VERBOSE"
TAIL_LINES = 30
INDENT = "  "
RESULT_KEYS = 12  # at most this many metrics on the compact result line
_EXIT_GRACE_S = 2.0  # after the child exits, stop reading once its pipe has been quiet this long
_TERM_WAIT_S = 5.0  # after SIGTERM to the group, SIGKILL it if the child is still there (an interrupt must end in 15 s)

_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")
_LOUD = {"WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"}
_ALERT = re.compile(r"\b[Ee]rror:|\b\w*(?:Warning|Error|Exception)\b:")
_TRACEBACK = "Traceback (most recent call last)"
_TB_GLUE = ("During handling of the above exception", "The above exception was the direct cause")
_DISK_FULL = tuple(os.strerror(e) for e in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT))
_WORKER = re.compile(r"^\([^)]*pid=\d+\)\s?")  # vLLM's "(EngineCore_DP0 pid=123) " line prefix
_STAMP = re.compile(r"\d{2,4}[-/]\d{2}[-/]\d{2,4}[ T]?|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?")
# Warnings every vLLM-CPU / torch step prints and no user can act on: kept in the log, never echoed
# (a quiet console shows the warnings that say something about this run).
_CHATTER = (
    "Triton is installed, but doesn't include CPU backend",
    "Triton is not installed",
    "Model Runner V2 requires Triton",
    "does not officially support disabling chunked prefill",
    "Enforce eager set, disabling torch.compile",
    "Inductor compilation was disabled",
    "Reset SSM cache type",
    "VLLM_CPU_NUM_OF_RESERVED_CPU is less than",
    "`torch.distributed.reduce_op` is deprecated",
    "NUMA binding",
    "is not found in LD_PRELOAD",
    "Attempted to load weight",
    "OMP_NUM_THREADS=2 is set",
    "[shutdown] Process manager: force killing",
)
_SOURCE = re.compile(r"\[[\w./-]+\.py:\d+\]")  # vLLM's "[utils.py:333]": one warning per source line
# a tqdm meter ("desc: 40%|####  | 2/5 [00:01<00:01, 2.0it/s]", or "desc: 7it [00:01, 5.1it/s]"), then
# whatever the child logged onto the bar's line before its next '\r'
_BAR = re.compile(r"^(.*?(?:\d+%\|[^|]*\|[^\[]*|\d+(?:\.\d+)?[kMG]?[A-Za-z/]* )\[[^\]]*\])(.*)$")


def is_verbose(env: Mapping[str, str] | None = None) -> bool:
    """Whether this run echoes everything (`SWEETFLOW_VERBOSE` set to 1/true/yes)."""
    return (os.environ if env is None else env).get(VERBOSE_ENV, "").strip().lower() in {"1", "true", "yes"}


def echo(text: str = "", stream: IO[str] | None = None) -> None:
    """A line for the console (a step's banner or result), not through Prefect's print logging."""
    stream = sys.stdout if stream is None else stream
    stream.write(text + "\n")
    stream.flush()


def compact_result(line: str) -> str | None:
    """'result: k v, ...' for a line that is one JSON object (a stage's metrics), else None.
    Nested values are left out (they are in the log and in metrics.json)."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    parts = [f"{k} {_fmt(v)}" for k, v in obj.items() if not isinstance(v, (dict, list))]
    more = len(parts) - RESULT_KEYS
    return "result: " + (", ".join(parts[:RESULT_KEYS]) or "{}") + (f", ... (+{more} in the log)" if more > 0 else "")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if value is None or isinstance(value, bool) else str(value)


@dataclass
class ChildResult:
    returncode: int
    log_path: Path
    seen: set[str] = field(default_factory=set)  # the `watch` strings that appeared in the output
    tail: list[str] = field(default_factory=list)  # the last lines of this attempt's output

    @property
    def disk_full(self) -> bool:
        """The output's last lines report a write refused for want of space (or by a size or quota limit)."""
        return any(text in line for line in self.tail for text in _DISK_FULL)


class _Console:
    """Turns the child's output (text, in arbitrary chunks) into console lines."""

    def __init__(
        self, out: IO[str], verbose: bool, tty: bool, watch: Sequence[str], show: Sequence[str], hide: Sequence[str]
    ):
        self.out, self.verbose, self.tty = out, verbose, tty
        self.watch, self.show, self.hide = tuple(watch), tuple(show), tuple(hide)
        self.seen: set[str] = set()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.buf = ""
        self.bar: str | None = None  # the latest in-place state of a running progress bar
        self.drawn = False  # that state is on the terminal's current line (tty only)
        self.after_cr = False  # the last segment ended with '\r': the next one redraws a line
        self.in_traceback = False
        self.shown: set[str] = set()  # warnings already echoed (timestamps stripped)
        self.repeats = 0

    # -- input -------------------------------------------------------------------------------
    def feed(self, text: str) -> None:
        self.buf += text
        while True:
            cut = min((i for i in (self.buf.find("\n"), self.buf.find("\r")) if i >= 0), default=-1)
            if cut < 0:
                return
            if self.buf[cut] == "\r":
                if cut + 1 == len(self.buf):
                    return  # a '\r' at the end of a chunk: wait to see whether '\n' follows
                if self.buf[cut + 1] == "\n":
                    self._segment(self.buf[:cut], "\n")
                    self.buf = self.buf[cut + 2 :]
                    continue
            self._segment(self.buf[:cut], self.buf[cut])
            self.buf = self.buf[cut + 1 :]

    def close(self) -> None:
        if self.buf.rstrip("\r"):
            self._segment(self.buf.rstrip("\r"), "\n")
        self.buf = ""
        self._end_bar()
        if self.repeats and not self.verbose:
            self._write(f"{INDENT}({self.repeats} repeated warning line(s) not shown again)\n")

    # -- segments ----------------------------------------------------------------------------
    def _segment(self, text: str, end: str) -> None:
        after_cr, self.after_cr = self.after_cr, end == "\r"
        if self.verbose:
            if end == "\n":
                self._note(text)
                if not any(h in text for h in self.hide):
                    self._write(text + "\n")
            else:
                self._write(text + "\r")
            return
        if end == "\r":
            if text.strip():
                self.bar = text
                if self.tty:
                    self._draw(text)
            elif text and self.bar is not None:  # tqdm(leave=False) blanks its line with spaces on close
                if self.drawn:
                    self._write("\r\x1b[K")
                self.bar, self.drawn = None, False
            return
        meter = _BAR.match(text) if self.bar is not None or after_cr else None
        if meter and not meter.group(2).strip():  # the bar's final state, then its '\n'
            self.bar = text
            self._note(text.strip())
            self._end_bar()
            return
        if meter:  # a line logged while the bar runs lands after the bar's latest state
            self.bar, text = meter.group(1), meter.group(2)
            if self.tty:
                self._draw(self.bar)
        self._note(text)
        show = self._classify(text)
        if show is not None:
            self._emit(INDENT + show)

    def _note(self, text: str) -> None:
        self.tail.append(text)
        self.seen.update(w for w in self.watch if w in text)

    def _classify(self, text: str) -> str | None:
        """What to echo for one complete line (None: log only)."""
        body = _WORKER.sub("", text).rstrip()
        if self.in_traceback:
            if not body.strip() or body[:1].isspace() or body.startswith((*_TB_GLUE, _TRACEBACK)):
                return body
            self.in_traceback = False
            return body  # the exception line ends the traceback
        if not body.strip() or any(h in body for h in self.hide):
            return None
        if body.startswith(_TB_GLUE) or body.lstrip().startswith(_TRACEBACK):
            self.in_traceback = True
            return body
        if any(s in body for s in self.show):
            return body.strip()
        result = compact_result(body)
        if result is not None:
            return result
        if any(c in body for c in _CHATTER):
            return None
        level = _LEVEL.search(body[:80])
        loud = level.group(1) in _LOUD if level else bool(_ALERT.search(body))
        if not loud:
            return None
        source = _SOURCE.search(body[:120])
        key = source.group(0) if source else _STAMP.sub("", body).strip()
        if key in self.shown:
            self.repeats += 1
            return None
        self.shown.add(key)
        return body.strip()

    # -- progress bars -----------------------------------------------------------------------
    def _draw(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1 - len(INDENT)
        self._write("\r" + INDENT + text.strip()[: max(width, 20)] + "\x1b[K")
        self.drawn = True

    def _emit(self, line: str) -> None:
        """A console line; a bar drawn on the terminal is lifted off and redrawn below it."""
        if self.drawn:
            self._write("\r\x1b[K" + line + "\n")
            self._draw(self.bar)
        else:
            self._write(line + "\n")

    def _end_bar(self) -> None:
        """The running bar is done: leave its last state on the console."""
        if self.bar is None:
            return
        if self.tty:
            self._draw(self.bar)
            self._write("\n")
        else:
            self._write(INDENT + self.bar.strip() + "\n")
        self.bar, self.drawn = None, False

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


def run_logged(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    verbose: bool | None = None,
    watch: Sequence[str] = (),
    show: Sequence[str] = (),
    hide: Sequence[str] = (),
    out: IO[str] | None = None,
) -> ChildResult:
    """Run `argv` (stdin inherited, stdout and stderr captured) in its own process group; every
    byte goes to `log_path` (appended, after a header line for this attempt), the console gets
    what the module docstring lists (everything when `verbose`; default: `SWEETFLOW_VERBOSE`;
    `hide` keeps lines off it even then). Returns the exit code, and which `watch` strings
    appeared; on a non-zero exit the log's tail and path are printed to stderr first."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONUNBUFFERED", "1")  # the child's prints and logs reach the log in order
    verbose = is_verbose(env) if verbose is None else verbose
    out = sys.stdout if out is None else out
    console = _Console(out, verbose, _isatty(out), watch, show, hide)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start, code = time.monotonic(), None
    with _LogFile(log_path) as log:
        command = shlex.join(map(str, argv)).replace("\n", " ")
        log.write(f"===== {datetime.now().isoformat(timespec='seconds')} run: {command} =====\n".encode())
        proc = subprocess.Popen(
            list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, process_group=0
        )
        try:
            fd, quiet_since = proc.stdout.fileno(), None
            while True:
                ready, _, _ = select.select([fd], [], [], 0.5)
                if ready:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    log.write(chunk)
                    console.feed(decoder.decode(chunk))
                    quiet_since = None
                elif proc.poll() is not None:  # exited; a left-over grandchild may hold the pipe open
                    quiet_since = quiet_since or time.monotonic()
                    if time.monotonic() - quiet_since > _EXIT_GRACE_S:
                        break
            code = proc.wait()
        finally:
            if proc.poll() is None:
                end_group(proc, _TERM_WAIT_S)
            proc.stdout.close()
            console.feed(decoder.decode(b"", final=True))
            console.close()
            status = f"exit {code}" if code is not None else "interrupted; process group sent SIGTERM"
            log.write(f"===== {status} after {time.monotonic() - start:.1f} s =====\n".encode())
    result = ChildResult(code, log_path, console.seen, list(console.tail))
    if code != 0:
        _report_failure(result, sys.stderr if out is sys.stdout else out)
    return result


class _LogFile:
    """The step's log file, appended and flushed chunk by chunk. A write that fails (a full disk)
    ends the logging, not the step: the console still shows the output and its tail."""

    def __init__(self, path: Path):
        self.fh, self.failed = open(path, "ab"), False

    def __enter__(self) -> "_LogFile":
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # a full disk: what it could not write is on the console
            self.fh.close()

    def write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            self.fh.write(data)
            self.fh.flush()
        except OSError:
            self.failed = True


def _report_failure(result: ChildResult, stream: IO[str]) -> None:
    lines = result.tail or ["(no output)"]
    stream.write(
        f"{INDENT}exit code {result.returncode}; the last {len(lines)} lines of {result.log_path}:\n"
        + "".join(f"{INDENT}| {line}\n" for line in lines)
        + f"{INDENT}full log: {result.log_path}\n"
        + (
            f"{INDENT}the disk is full (or a file-size or quota limit was hit) under {result.log_path.parent.parent}: "
            "free space, then run the same command again; what the step wrote before is kept and it "
            "resumes from there\n"
            if result.disk_full
            else ""
        )
    )
    stream.flush()


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
