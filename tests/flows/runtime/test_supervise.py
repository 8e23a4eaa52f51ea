"""flows/runtime/supervise.py with real processes and real signals: a worker that starts a step in a process
group of its own and a stubborn server; SIGINT/SIGTERM to the supervisor's whole process group (what
a terminal's Ctrl-C and `timeout` send) or to it alone end everything within the grace period, with
one line naming the step, and leave no process of the worker's session behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flows.runtime import supervise
from tests.processes import alive, describe

WORKER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from flows.runtime.supervise import mark_step
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # as flows/cli/commands.py's worker does
    if sys.argv[1] == "stuck":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stubborn = step = None
    try:  # the test signals after "pids": the SystemExit always lands inside this try
        stubborn = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)"])
        step = subprocess.Popen(["sleep", "300"], process_group=0)
        mark_step("step rollouts [rollouts] (log: runs/x/logs/rollouts.log)")
        print("pids", stubborn.pid, step.pid, flush=True)
        time.sleep(300)
    finally:  # SystemExit: stop the step and the server, as the real worker does
        if step is not None:
            os.killpg(step.pid, signal.SIGTERM)
        if stubborn is not None:
            stubborn.kill()
    """
)
SUPERVISOR = "import sys; from flows.runtime.supervise import supervise; sys.exit(supervise(sys.argv[1:]))"


def start(mode: str, sigint_ignored: bool = False):
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, sys.executable, "-c", WORKER, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the test signals that group like a terminal would
        # as `nohup` or `cmd &` in a script start it: SIGINT ignored, inherited by the worker
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None,
    )
    line = proc.stdout.readline().split()
    assert line[0] == "pids", line
    return proc, [int(p) for p in line[1:]]


@pytest.mark.parametrize(
    "mode, sig, to_group, limit, ignored",
    [
        ("clean", signal.SIGINT, True, 5.0, False),  # Ctrl-C in a terminal
        ("clean", signal.SIGTERM, True, 5.0, False),  # `timeout`, a process supervisor
        ("clean", signal.SIGTERM, False, 5.0, False),  # `kill PID`
        ("clean", signal.SIGTERM, False, 5.0, True),  # `kill PID` of a command started with `nohup ... &`
        ("stuck", signal.SIGINT, True, supervise.GRACE_S + 4.0, False),  # a worker that ignores the interrupt
    ],
)
def test_an_interrupt_ends_the_worker_its_step_and_its_servers(mode, sig, to_group, limit, ignored):
    proc, children = start(mode, ignored)
    sent = time.monotonic()
    workers = children_of(proc.pid)
    (os.killpg if to_group else os.kill)(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=limit + 5)
    except subprocess.TimeoutExpired:
        raise AssertionError(describe({"supervisor": [proc.pid], "worker": workers, "children": children})) from None
    elapsed = time.monotonic() - sent
    assert proc.returncode == 128 + sig and elapsed < limit
    assert f"interrupted ({sig.name}) during step rollouts [rollouts] (log: runs/x/logs/rollouts.log)" in err
    assert "run the same command again to resume" in err
    time.sleep(0.2)
    assert not [pid for pid in children if alive(pid)]


def test_a_second_interrupt_does_not_wait_for_the_grace_period():
    proc, children = start("stuck")
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.5)
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 130 and time.monotonic() - sent < 3.0
    time.sleep(0.2)
    assert not [pid for pid in children if alive(pid)]


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def test_a_killed_supervisor_takes_its_worker_with_it():
    """SIGKILL (no handler runs): the worker gets its parent-death SIGTERM and stops its step."""
    proc, children = start("clean")
    (worker,) = children_of(proc.pid)
    proc.kill()
    proc.wait(timeout=5)
    deadline = time.monotonic() + 5
    while [pid for pid in (worker, *children) if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in (worker, *children) if alive(pid)]


def test_a_worker_that_ends_by_itself_keeps_its_exit_status_and_prints_nothing_more():
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISOR, sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "hi\n", "")
