"""Every ColBench backend reference solution scored against itself in the sandbox.

The official in-process rules give 996/1000 tasks at 1.0 (mean 0.9973). Ours (measured on this
machine, numpy installed, bs4 not): 997/1000 at 1.0, mean 0.9978. The three that are not at 1.0,
and why (same reasons with the official scorer unless noted):
- 214: the reference imports bs4; where bs4 is not installed every reference output is None.
- 456: the reference contains the banned substring 'sudo' (official rule: score 0).
- 741: np.corrcoef of constant inputs returns nan on two tests, and nan != nan.
Reference outputs are computed here with a fresh cache, so this also times the sandbox on the
full set (about 20,000 sandboxed test calls).
"""

from __future__ import annotations

import time

import pytest

from components.data.tasks import load_backend_tasks
from components.tasks.colbench_backend.scoring import score_answers
from tests.conftest import REPO

DATA = REPO / "data" / "colbench" / "backend_test.jsonl"
EXPLAINED = {214, 456, 741}


@pytest.mark.slow
def test_reference_solutions_score_themselves(tmp_path):
    if not DATA.is_file():
        pytest.skip(f"{DATA} not pulled (run `sweetflow data pull`)")
    tasks = load_backend_tasks(DATA)
    start = time.monotonic()
    results = score_answers(tasks, [(i, t.ground_truth) for i, t in enumerate(tasks)], cache_dir=tmp_path)
    elapsed = time.monotonic() - start
    at_one = sum(r.success for r in results) / len(results)
    mean = sum(r.score for r in results) / len(results)
    failing = {r.index: (r.score, r.error) for r in results if not r.success}
    print(
        f"\nself-score: {at_one:.3f} of {len(results)} tasks at 1.0, mean score {mean:.4f}, "
        f"{elapsed:.1f} s; not at 1.0: {failing}"
    )
    assert at_one >= 0.99 and mean >= 0.99
    assert set(failing) <= EXPLAINED, f"unexplained failures: {set(failing) - EXPLAINED}"
