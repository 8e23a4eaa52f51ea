"""One step at a time on a project's DVC state: two runs of one project (by hand, scheduled, from the
UI) both finish, the second waiting, visibly, while the first's step holds the project.

DVC itself refuses a second `dvc repro` whose stage touches a path another one holds ("... is busy,
it is being blocked by: (PID ...)") and leaves the run failed. So every step that runs DVC or writes
the project's shared files (`dvc pull`, the model preparation, each `dvc repro`) takes this lock
first: an exclusive `flock` on `.dvc/tmp/sweetflow-steps.lock`, which the kernel releases when the
holder exits, however it exits (no stale lock after a crash or kill -9). The holder writes who it is
(pid, step, run folder, since when) into `.dvc/tmp/sweetflow-steps.holder`; a waiter prints that
once, and again whenever the holder changes, to the console and to the Prefect run's log (the
flow-run page shows it), then polls so that Ctrl-C ends the wait at once. Runs interleave step by
step; nothing is skipped or repeated, since each step is DVC's unit of resumption.

Reads and writes only those two files.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

LOCK = Path(".dvc/tmp/sweetflow-steps.lock")
HOLDER = Path(".dvc/tmp/sweetflow-steps.holder")
POLL_S = 0.5


def holder(path: Path = HOLDER) -> dict | None:
    """Who holds the lock, as the holder wrote it (None when nobody said)."""
    try:
        return json.loads(path.read_text() or "null")
    except (OSError, ValueError):
        return None


def describe(info: dict | None) -> str:
    if not info:
        return "another sweetflow process"
    return f"pid {info['pid']}: {info['step']} of {info['run']} (since {info['since']})"


def _say(text: str) -> None:
    """To the console and, inside a Prefect run, to its log."""
    from flows.runtime.console import echo

    echo(text)
    try:
        from prefect.logging import get_run_logger

        get_run_logger().warning(text)
    except Exception:  # outside a Prefect run: the console line is enough
        pass


@contextmanager
def project_step(step: str, run: str | Path, root: Path = Path(".")) -> Iterator[float]:
    """Hold the project for `step` of the run in folder `run`; yields the seconds spent waiting."""
    lock_path, holder_path = root / LOCK, root / HOLDER
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as handle:
        seen, waiting, start = None, False, time.monotonic()
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = holder(holder_path)
                if not waiting or now != seen:
                    _say(f"waiting for the project's DVC state: held by {describe(now)}")
                    seen, waiting = now, True
                time.sleep(POLL_S)
        waited = time.monotonic() - start
        if waiting:
            _say(f"the project is free after {waited:.0f} s: {step} goes on")
        since = datetime.now(timezone.utc).isoformat(timespec="seconds")
        holder_path.write_text(json.dumps({"pid": os.getpid(), "step": step, "run": str(run), "since": since}))
        try:
            yield waited
        finally:
            holder_path.write_text("")
            fcntl.flock(handle, fcntl.LOCK_UN)
