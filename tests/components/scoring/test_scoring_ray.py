"""Scoring on a Ray cluster (components/cluster/sandboxes.py): a local cluster of two nodes, one
scoring actor pinned on each, gives exactly the scores of this machine's sandbox pool."""

from __future__ import annotations

import pytest

from components.data.tasks import load_backend_tasks
from components.tasks.colbench_backend.scoring import score_answers
from tests.conftest import TASKS_FILE

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes():
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def answers(tasks) -> list[tuple[int, str]]:
    """References (all pass), a wrong constant, code that raises and an always-equal object, per task."""
    out = []
    for i, task in enumerate(tasks):
        name = task.ground_truth.split("def ", 1)[1].split("(", 1)[0]
        out += [
            (i, task.ground_truth),
            (i, f"def {name}(*a, **k):\n    return 0\n"),
            (i, f"def {name}(*a, **k):\n    raise ValueError('no')\n"),
            (i, f"class E:\n    def __eq__(self, o): return True\ndef {name}(*a, **k):\n    return E()\n"),
        ]
    return out


def test_every_node_scores_and_the_scores_equal_one_machines(two_nodes, tmp_path):
    import ray

    from components.cluster.sandboxes import RaySandboxes

    if not TASKS_FILE.exists():
        pytest.skip("run `make data` first")
    tasks = load_backend_tasks(TASKS_FILE)[:12]
    rows = answers(tasks)
    with RaySandboxes() as pool:
        assert pool.nodes == 2 and pool.workers == 2
        nodes = {
            ray.get(a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())) for a in pool.actors
        }
        assert len(nodes) == 2  # one actor on each node
        on_ray = score_answers(tasks, rows, cache_dir=tmp_path / "ray", sandboxes=lambda w, lim: pool)
    here = score_answers(tasks, rows, cache_dir=tmp_path / "local", workers=2)
    assert on_ray == here
    assert sum(r.success for r in here) >= len(tasks) - 2  # the references pass (bar a flaky one)
    assert not any(r.success for r in here[3::4])  # an always-equal object never passes
