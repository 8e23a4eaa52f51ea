"""One DVC step at a time per project (flows/runtime/project_lock.py), across real processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from flows.runtime.project_lock import HOLDER, holder, project_step

HOLD = """
import sys, time
from pathlib import Path
from flows.runtime.project_lock import project_step
with project_step("step critic [critic]", "runs/pipeline/first", Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print(time.time(), flush=True)  # the last moment it holds the project
"""


def _holding(root: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_step_waits_for_the_first_and_says_for_whom(tmp_path, capsys):
    first = _holding(tmp_path, 1.5)
    with project_step("step evaluation [eval_zero_shot]", "runs/pipeline/second", tmp_path) as waited:
        assert holder(tmp_path / HOLDER)["run"] == "runs/pipeline/second"
        went_on = time.time()
    assert float(first.stdout.readline()) <= went_on  # the first was done holding before the second went on
    assert first.wait(timeout=10) == 0
    assert waited > 0.5
    out = capsys.readouterr().out
    assert "waiting for the project's DVC state: held by pid" in out
    assert "step critic [critic] of runs/pipeline/first" in out
    assert "the project is free after" in out
    assert holder(tmp_path / HOLDER) is None  # released: nobody holds it


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    first = _holding(tmp_path, 60)
    first.kill()
    first.wait()
    start = time.monotonic()
    with project_step("step rollouts [rollouts]", "runs/pipeline/second", tmp_path) as waited:
        pass
    assert waited < 5 and time.monotonic() - start < 5


def test_an_uncontended_step_does_not_wait_or_talk(tmp_path, capsys):
    with project_step("data pull", "runs/pipeline/x", tmp_path) as waited:
        assert holder(tmp_path / HOLDER)["step"] == "data pull"
    assert waited < 0.5 and capsys.readouterr().out == ""
