"""A step that failed is retried once by Prefect (an engine or endpoint that died may come back),
except when it failed for want of disk space: a real DVC stage, a real file-size limit standing in
for a full disk (EFBIG, as ENOSPC), a real Prefect task with the steps' retry condition."""

from __future__ import annotations

import pytest
import yaml
from prefect import flow, task

from flows.runtime.steps import DiskFull, StepFailed, dvc_repro, worth_retry
from tests.conftest import git_dvc_init

pytestmark = pytest.mark.integration

FILLS_THE_DISK = (
    "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16)); "
    "open('out.bin', 'wb').write(b'x' * (1 << 17))"
)
FAILS_OTHERWISE = "raise SystemExit('the simulator endpoint went away')"


@task(retries=1, retry_delay_seconds=0, retry_condition_fn=worth_retry)
def step(dvc_yaml: str) -> bool:
    return dvc_repro(dvc_yaml, "s")


@flow
def one_step(dvc_yaml: str) -> str:
    try:
        step(dvc_yaml)
    except Exception as exc:  # the test reads the failure's type from the name returned
        return type(exc).__name__
    return "passed"


def attempts(project, script: str) -> tuple[str, int]:
    dvc_yaml = project / "dvc.yaml"
    dvc_yaml.write_text(yaml.safe_dump({"stages": {"s": {"cmd": f'python -c "{script}"', "outs": ["out.bin"]}}}))
    failure = one_step(str(dvc_yaml))
    log = (project / "logs" / "s.log").read_text().splitlines()
    return failure, sum(line.startswith("===== ") and " run: " in line for line in log)  # a header per attempt


@pytest.mark.parametrize(
    "script, failure, runs",
    [(FILLS_THE_DISK, DiskFull.__name__, 1), (FAILS_OTHERWISE, StepFailed.__name__, 2)],
    ids=["disk full: not retried", "other failure: retried once"],
)
def test_a_step_is_retried_unless_the_disk_is_full(project_dir, script, failure, runs):
    assert attempts(git_dvc_init(project_dir), script) == (failure, runs)
