"""A flow served by a Prefect runner whose one task runs a step the way every sweetflow stage runs
(flows.runtime.console.run_logged: its own process group, here a process and a grandchild that ignores
SIGTERM, as a vLLM engine core may); tests/flows/runtime/test_cancel_served.py cancels it."""

import sys
from pathlib import Path

from prefect import flow, task

from flows.runtime.console import run_logged

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
STEP = (
    "import os, subprocess, sys, time\n"
    f"stubborn = subprocess.Popen([sys.executable, '-c', {IGNORES_SIGTERM!r}])\n"
    "open(sys.argv[1], 'w').write(f'{os.getpid()} {stubborn.pid}')\n"
    "time.sleep(600)\n"
)


@task
def step(pids: str) -> int:
    return run_logged([sys.executable, "-c", STEP, pids], Path(pids).with_suffix(".log")).returncode


@flow
def long_step(pids: str) -> None:
    step(pids)


if __name__ == "__main__":
    long_step.serve(name="cancel-test")
