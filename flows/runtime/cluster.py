"""Where a flow's steps run: the `cluster` section (components/config/cluster.py) turned into
Prefect's task runner.

- `local` (default): each step task is called in the flow's own process, one after the other, as
  before; nothing here changes that path (its Ctrl-C and SIGTERM handling is docs/reliability.md's).
- `ray`: the flow runs with prefect-ray's `RayTaskRunner` (a local Ray cluster started for the run,
  or the cluster at `cluster.address`), and each step task is submitted to it inside
  `remote_options(num_cpus=..., num_gpus=...)` from `cluster.resources`, so Ray places the step on
  a node with those resources free. The step itself is unchanged: the task on the Ray worker runs
  `dvc repro` of the stage in its own process group, in the run's folder. On a cluster of several
  nodes that folder must be on a file system every node sees (README "Running on a cluster").

A flow started another way than by the CLI (a served deployment: Prefect loads it by module path
and runs it on its default task runner) moves itself: when its parameters ask for Ray, it runs
again as a child flow run on a RayTaskRunner (`moved_to_cluster`) and returns that run's result.

Ray workers are told the flow's Prefect API address, so every step's task run is recorded in the
same Prefect server (or ephemeral API) as its flow run instead of one a worker would start itself,
and the cluster's address, so the stage process can place its own work (scoring fork-servers on
every node: components/cluster) on the same cluster.
"""

from __future__ import annotations

from typing import Any

from components.config.cluster import Backend, ClusterConfig
from components.config.sections import ConfigError


def cluster_config(doc: dict[str, Any]) -> ClusterConfig:
    """The `cluster` section of a run's parameters (the defaults when the run has none)."""
    return ClusterConfig.model_validate(doc.get("cluster") or {})


def task_runner(cfg: ClusterConfig):
    """The Prefect task runner for `cfg`: None (the flow's default) for local, else a RayTaskRunner."""
    if cfg.backend == Backend.local:
        return None
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as exc:  # the `cluster` extra is not installed
        raise ConfigError(
            "cluster.backend ray needs Ray and prefect-ray: pip install -e '.[cluster]' (make install does it)"
        ) from exc
    init: dict[str, Any] = {"include_dashboard": False}
    if cfg.address is None and cfg.local_cpus is not None:
        init["num_cpus"] = cfg.local_cpus
    return RayTaskRunner(address=cfg.address, init_kwargs=init)


def placed(flow_fn, cfg: ClusterConfig):
    """`flow_fn` with the task runner `cfg` asks for (itself for local)."""
    runner = task_runner(cfg)
    return flow_fn if runner is None else flow_fn.with_options(task_runner=runner)


def _on_ray() -> bool:
    """Whether this flow run's task runner is a RayTaskRunner."""
    from prefect.context import FlowRunContext

    try:
        from prefect_ray import RayTaskRunner
    except ImportError:  # the `cluster` extra is not installed: nothing runs on Ray
        return False
    context = FlowRunContext.get()
    return context is not None and isinstance(context.task_runner, RayTaskRunner)


def moved_to_cluster(flow_fn, cfg: ClusterConfig, params: Any) -> dict | None:
    """Call first in a flow, with its resolved `cluster` section: when `cfg` asks for Ray and this run
    is on another task runner (a served deployment), run `flow_fn(params)` as a child flow run on
    the runner `cfg` asks for and return its result; None when this run is where it should be."""
    if cfg.backend == Backend.local or _on_ray():
        return None
    return placed(flow_fn, cfg)(params)


def run_step(step_task, stage: str, cfg: ClusterConfig, *args: Any) -> Any:
    """Run the Prefect task `step_task(*args)` of `stage` where `cfg` places it; return its result.

    local: a plain call in this process. ray: submitted to the flow's RayTaskRunner with the stage's
    resources and this flow's Prefect API address, and waited for (the pipeline is a chain: each
    step needs the one before). A flow that did not move itself to Ray first (`moved_to_cluster`)
    is refused with a clear error.
    """
    if cfg.backend == Backend.local:
        return step_task(*args)
    from prefect.context import FlowRunContext
    from prefect_ray.context import remote_options

    if not _on_ray():
        raise ConfigError(
            "cluster.backend is ray but this flow runs on another task runner: call "
            "flows.runtime.cluster.moved_to_cluster at the start of the flow"
        )
    import ray

    context = FlowRunContext.get()
    res = cfg.resources_for(stage)
    # the step's task run is recorded with its flow's; the stage process joins this cluster (Ray actors)
    api, gcs = str(context.client.api_url), ray.get_runtime_context().gcs_address
    env = {"env_vars": {"PREFECT_API_URL": api, "RAY_ADDRESS": gcs}}
    with remote_options(num_cpus=res.cpus, num_gpus=res.gpus, runtime_env=env):
        return step_task.submit(*args).result()
