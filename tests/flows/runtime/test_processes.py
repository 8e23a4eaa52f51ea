"""Ending a child's process group (SIGTERM, a grace period, SIGKILL) and a worker's session, with
real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from flows.runtime import processes
from tests.processes import alive

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)
GRANDCHILD = "import subprocess, time; p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)"


def test_a_group_that_ends_on_sigterm_gets_no_sigkill_and_its_grandchildren_go_too():
    proc = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    grandchild = int(proc.stdout.readline())
    processes.end_group(proc, grace_s=10.0)
    assert proc.returncode == -signal.SIGTERM and not alive(grandchild)
    assert not processes.group_alive(proc.pid)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period():
    proc = subprocess.Popen(
        [sys.executable, "-c", IGNORES_TERM], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    start = time.monotonic()
    processes.end_group(proc, grace_s=0.5)
    assert proc.returncode == -signal.SIGKILL and time.monotonic() - start < 5.5


def test_ending_a_group_that_is_gone_already_is_a_no_op():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(timeout=30)
    processes.end_group(proc, grace_s=10.0)
    assert proc.returncode == 0


def test_session_members_lists_a_new_sessions_processes():
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert processes.session_members(proc.pid) == [proc.pid]
    finally:
        processes.kill_session(proc.pid)
        proc.wait(timeout=5)
    assert proc.returncode == -signal.SIGKILL
