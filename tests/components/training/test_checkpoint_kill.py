"""A process killed (SIGKILL: no cleanup runs) while it writes a training checkpoint leaves the
previous checkpoint whole and the one to resume; the torn write is ignored and redone
(components/training/checkpoint.py writes to `step-N.tmp` and renames)."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from components.training import checkpoint

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from components.training import checkpoint

    class Model:  # the second save is slow (to be killed in) or big (to fill the disk), per argv[2]
        def __init__(self, second):
            self.second = second
        def save_pretrained(self, folder, state_dict=None):
            big = self.second and sys.argv[2] == "big"
            (Path(folder) / "model.safetensors").write_bytes(b"w" * (1 << 20 if big else 4096))
            if self.second and sys.argv[2] == "slow":
                print("writing", flush=True)
                time.sleep(60)

    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([param], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    param.grad = torch.ones(3)
    opt.step()
    out = Path(sys.argv[1])
    checkpoint.save(out, 1, Model(False), opt, sched, {"run": 1}, keep=1)
    checkpoint.save(out, 2, Model(True), opt, sched, {"run": 1}, keep=1)  # killed or out of space in here
    """
)


def test_a_kill_during_a_checkpoint_write_keeps_the_previous_checkpoint(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "slow"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert (tmp_path / "checkpoints" / "step-2.tmp" / "model.safetensors").exists()  # the torn write
    resumes_from_step_1(tmp_path)


def test_a_full_disk_during_a_checkpoint_write_keeps_the_previous_checkpoint(tmp_path):
    """A file-size limit stands in for a full disk: step 2's weights fail with EFBIG, as with ENOSPC."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 18, 1 << 18))

    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), "big"], capture_output=True, text=True, preexec_fn=limited
    )
    assert proc.returncode == 1 and "File too large" in proc.stderr
    assert (tmp_path / "checkpoints" / "step-2.tmp").exists() and not (tmp_path / "checkpoints" / "step-2").exists()
    resumes_from_step_1(tmp_path)


def resumes_from_step_1(out) -> None:
    """The resume finds step 1 whole (optimizer state included), and redoing step 2 replaces its torn write."""
    resume = checkpoint.latest(out, {"run": 1})
    assert resume is not None and resume.name == "step-1"
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.AdamW([param], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    assert checkpoint.restore(resume, opt, sched) == 1 and opt.state_dict()["state"][0]["step"] == 1

    class Model:
        def save_pretrained(self, folder, state_dict=None):
            (folder / "model.safetensors").write_bytes(b"w")

    checkpoint.save(out, 2, Model(), opt, sched, {"run": 1}, keep=1)  # the resumed run redoes it
    assert [p.name for p in (out / "checkpoints").iterdir()] == ["step-2"]


CORY_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from components.cory import state

    class Slow:  # pickled inside torch.save: the kill lands mid-write
        def __reduce__(self):
            print("writing", flush=True)
            time.sleep(60)
            return (dict, ())

    class Pool:
        def __init__(self, payload):
            self.payload = payload
        def state_dict(self):
            return {"agent0": self.payload}

    out = Path(sys.argv[1])
    state.save_checkpoint(out, Pool(torch.ones(4)), 1, {"run": 1})
    second = Slow() if sys.argv[2] == "slow" else torch.ones(1 << 18)  # 1 MiB: past the size limit
    state.save_checkpoint(out, Pool(second), 2, {"run": 1})
    """
)


class Pool:
    device = "cpu"

    def load_state_dict(self, agents):
        self.agents = agents


@pytest.mark.parametrize("fault", ["kill", "full disk"])
def test_a_cory_state_write_cut_by_a_kill_or_a_full_disk_keeps_the_previous_state(tmp_path, fault):
    """CORY's state file (tmp + rename): cut mid-write, the previous iteration's state is resumed."""
    if fault == "kill":
        proc = subprocess.Popen(
            [sys.executable, "-c", CORY_WRITER, str(tmp_path), "slow"], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    else:
        limit = 1 << 18
        done = subprocess.run(
            [sys.executable, "-c", CORY_WRITER, str(tmp_path), "big"],
            capture_output=True,
            text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
        )
        assert done.returncode == 1 and "File too large" in done.stderr
    from components.cory import state

    assert (tmp_path / state.CHECKPOINT).with_name("state.pt.tmp").exists()  # the torn write
    pool = Pool()
    assert state.resume(tmp_path, pool, {"run": 1}) == 1
    assert torch.equal(pool.agents["agent0"], torch.ones(4))
