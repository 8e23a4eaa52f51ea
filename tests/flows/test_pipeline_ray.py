"""The smoke pipeline with `cluster.backend: ray` on a local Ray cluster of 2 CPUs (prefect-ray's
RayTaskRunner; flows/runtime/cluster.py), tracked to a local MLflow tracking server, ends with the same
metrics, step by step, as the local backend tracking to the project's store.

The Ray run starts the way a served deployment does: the flow loaded by its module path and called
with the parameters, on Prefect's default task runner; it moves itself to Ray (a child flow run).

The project, tasks, offline rollouts and tiny model are tests/flows/test_pipeline_flow.py's
(its `overrides` fixture): every training and evaluation step runs for real. The two runs use runs
roots of their own, so neither reads the other's outputs (DVC would skip or restore them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.pipeline_helpers import SWEET_STAGES
from tests.processes import free_port

# 2-4 min (170 s in CI): `make test-manual`. CI guards the parts with cheaper tests: episodes on Ray engines
# (tests/components/episodes/test_episodes_ray.py), training processes, the cluster config and placement
pytestmark = [pytest.mark.integration, pytest.mark.manual]
MACHINE = re.compile(r"seconds|per_s|_s$|elapsed|rss")  # time and memory figures differ from run to run
METRICS = {  # every step that writes a metrics.json, by its path in the run folder
    "iter-0/eval/metrics.json",
    "iter-1/rollouts/metrics.json",
    "iter-1/train/critic/metrics.json",
    "iter-1/train/critic_quality/metrics.json",
    "iter-1/train/actor/metrics.json",
    "iter-1/train/eval/metrics.json",
}


def flat(metrics: dict, prefix: str = "") -> dict:
    """A metrics dict with its nested dicts (per_seed) spelled out as 'outer/inner' keys."""
    out = {}
    for key, value in metrics.items():
        out.update(flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def near(metrics: dict) -> dict:
    """The metrics with every float matched up to float summation order (a Ray worker's torch may sum with
    another thread count: losses and margins came out up to 1e-6 apart); everything else matched exactly."""
    return {k: pytest.approx(v, rel=1e-5, abs=1e-5) if isinstance(v, float) else v for k, v in metrics.items()}


def step_metrics(run_dir: Path) -> dict[str, dict]:
    """Every step's metrics.json under the run, by its path in the run, flat, time and memory figures left out."""
    return {
        str(path.relative_to(run_dir)): {
            k: v for k, v in flat(json.loads(path.read_text())).items() if not MACHINE.search(k)
        }
        for path in sorted(run_dir.glob("iter-*/**/metrics.json"))
    }


@pytest.fixture
def tracking_server(project_dir, monkeypatch):
    """A local MLflow tracking server over a store of its own, as MLFLOW_TRACKING_URI."""
    from flows.runtime.services import start_services, ui_services

    _, mlflow = ui_services(project_dir / "server", mlflow_port=free_port())
    with start_services([mlflow], project_dir / "server" / "logs"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.url.rstrip("/"))
        yield mlflow.url.rstrip("/")


def test_the_smoke_pipeline_on_a_local_ray_cluster_ends_with_the_local_metrics(overrides, tracking_server, monkeypatch):  # noqa: F811
    import mlflow
    import ray

    from flows.pipeline_flow import PipelineParams, pipeline_flow
    from flows.runtime.serve import load_flow

    on_ray = [*overrides, "cluster.backend=ray", "cluster.local_cpus=2"]
    remote = load_flow("pipeline")(PipelineParams(profile="smoke", overrides=on_ray, runs_root="runs/ray"))
    assert not ray.is_initialized()  # the run's own local cluster is stopped with its flow
    nested = mlflow.search_runs(
        experiment_names=["sweetflow-pipeline"],
        filter_string=f"tags.mlflow.parentRunId = '{remote['mlflow_run_id']}'",
        output_format="list",
    )
    assert sorted(r.info.run_name for r in nested) == sorted(
        ["iter 0 eval_zero_shot", *(f"iter 1 {s}" for s in SWEET_STAGES)]
    )  # every step, run on a Ray worker, is a nested run of the parent on the tracking server

    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    local = pipeline_flow(PipelineParams(profile="smoke", overrides=overrides, runs_root="runs/local"))
    assert [it["ran"] for it in remote["iterations"]] == [["eval_zero_shot"], SWEET_STAGES]
    mine, theirs = step_metrics(Path(remote["run_dir"])), step_metrics(Path(local["run_dir"]))
    assert set(mine) == METRICS
    assert mine == {path: near(metrics) for path, metrics in theirs.items()}
