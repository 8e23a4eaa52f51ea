"""Ending what a command started, in one place: a child's process group (a stage under `dvc repro`,
a UI service) or a worker's whole session (flows/runtime/supervise.py).

A child started with `start_new_session=True` leads a process group whose id is its pid: SIGTERM to
the group lets the child and its grandchildren (engine workers, uvicorn's) end cleanly, SIGKILL
after a grace period ends whatever ignored it. A session is swept by its members' ids in /proc,
since a process that started a group of its own is out of reach of its parent's group signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def die_with_parent() -> None:
    """In a child before it starts (Linux; a no-op elsewhere): SIGTERM it when its parent dies, also
    when the parent is killed outright (SIGKILL, the OOM killer, a test's timeout), instead of leaving it
    running unsupervised."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs (one of another user's counts as running)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_group(proc: subprocess.Popen, grace_s: float, kill_wait_s: float = 5.0) -> None:
    """SIGTERM to `proc`'s group, up to `grace_s` for all of it to end, then SIGKILL to what is left;
    `proc` is reaped."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        proc.poll()
        if not group_alive(proc.pid):
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
            time.sleep(0.1)
    try:
        proc.wait(timeout=kill_wait_s)
    except subprocess.TimeoutExpired:
        pass


def session_members(sid: int) -> list[int]:
    """Pids of the live processes whose session id is `sid` (field 6 of /proc/PID/stat)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_session(sid: int, wait_s: float = 5.0) -> None:
    """SIGKILL every process of session `sid` (its process group where /proc is missing) and wait
    until they are gone, so that a re-run started right after finds no lock of theirs held."""
    if not Path("/proc/self/stat").exists():
        try:
            os.killpg(sid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    deadline = time.monotonic() + wait_s
    while (pids := session_members(sid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
