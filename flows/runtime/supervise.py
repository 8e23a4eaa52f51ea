"""Interrupts that end a long command cleanly: the command runs as a worker in a session of its own,
and this process, left in the terminal's process group, is the one the signals reach.

Why: a terminal's Ctrl-C (SIGINT), `timeout`, process supervisors and Prefect workers signal the
whole process group. When that group held the command itself, Prefect's ephemeral API server died
with it, and the command then hung on Prefect's event client retrying a dead server, ignoring a
second Ctrl-C. Here the worker and everything it starts (the API server, DVC, the stage and its
engine processes) live in the worker's session, which no group signal reaches. On SIGINT, SIGTERM
or SIGHUP this process:
1. forwards one SIGTERM to the worker alone: its handler (flows/cli/commands.py) raises SystemExit, which
   stops the running step's process group (flows/runtime/console.py); Prefect marks the flow run Crashed
   while its API server still answers, and the worker exits. SIGTERM, not SIGINT: a command started
   by `nohup` or `cmd &` in a script has SIGINT ignored from the start, and Python keeps it so;
2. after `GRACE_S` (or at a second signal) kills whatever of the worker's session is still alive;
   if this process is itself killed outright, the worker gets SIGTERM (Linux's parent-death signal);
3. after the worker is gone, kills every process still in its session (a step's engine core, the
   API server), so none is left behind, prints one line naming the interrupted step (the worker
   writes it to `$SWEETFLOW_STEP_FILE`) and that the same command resumes, and exits 128 + signal.

Finished steps are skipped on the re-run (DVC), rollouts continue after the episodes written,
training from its newest checkpoint. Linux only for the session sweep (/proc); elsewhere the
worker's process group is killed instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from flows.runtime.processes import die_with_parent, kill_session

SUPERVISED_ENV = "SWEETFLOW_SUPERVISED"  # set in the worker: it runs the command itself
STEP_FILE_ENV = "SWEETFLOW_STEP_FILE"  # where the worker writes the step it is running
GRACE_S = 10.0  # after forwarding the interrupt, the worker's time to end cleanly
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def mark_step(text: str | None) -> None:
    """Called by the worker: the step now running (None: between steps)."""
    path = os.environ.get(STEP_FILE_ENV)
    if path:
        Path(path).write_text(text or "")


class Supervisor:
    def __init__(self, argv: Sequence[str], step_file: Path) -> None:
        env = {**os.environ, SUPERVISED_ENV: "1", STEP_FILE_ENV: str(step_file)}
        self.step_file, self.signals, self.child = step_file, [], None
        for sig in SIGNALS:  # before the worker exists: an interrupt at once is still forwarded and reported
            signal.signal(sig, self.on_signal)
        self.child = subprocess.Popen(list(argv), env=env, start_new_session=True, preexec_fn=die_with_parent)
        if self.signals:
            self.child.send_signal(signal.SIGTERM)

    def on_signal(self, signum, frame) -> None:
        self.signals.append(signum)
        if self.child is None:  # not started yet: __init__ forwards it
            return
        if len(self.signals) == 1:
            self.child.send_signal(signal.SIGTERM)
        else:  # a second interrupt: no more waiting
            kill_session(self.child.pid)

    def run(self) -> int:
        code = None
        while code is None:
            try:
                code = self.child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                if self.signals:  # the worker's grace period starts when the signal arrived
                    code = self._wait_grace()
        kill_session(self.child.pid)  # anything the worker left: engine cores, the API server
        return self._report() if self.signals else code

    def _wait_grace(self) -> int:
        try:
            return self.child.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            kill_session(self.child.pid)
            return self.child.wait()

    def _report(self) -> int:
        signum = self.signals[0]
        step = self.step_file.read_text().strip() if self.step_file.exists() else ""
        where = f"during {step}" if step else "between steps"
        sys.stderr.write(
            f"\nsweetflow: interrupted ({signal.Signals(signum).name}) {where}; run the same command again "
            "to resume: finished steps are skipped, the interrupted one continues from what it wrote.\n"
        )
        sys.stderr.flush()
        return 128 + signum


def supervise(argv: Sequence[str]) -> int:
    """Run `argv` as a supervised worker (see the module docstring); its exit status."""
    with tempfile.TemporaryDirectory(prefix="sweetflow-") as tmp:
        return Supervisor(argv, Path(tmp) / "step").run()
