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


def run_step(step_task, stage: str, cfg: ClusterConfig, *args: Any) -> Any:
    """Run the Prefect task `step_task(*args)` of `stage` where `cfg` places it; return its result.

    local: a plain call in this process. ray: submitted to the flow's RayTaskRunner with the stage's
    resources and this flow's Prefect API address, and waited for (the pipeline is a chain: each
    step needs the one before). A flow running on another task runner (a deployment served for
    `local` and triggered with `cluster.backend=ray`) is refused with a clear error.
    """
    if cfg.backend == Backend.local:
        return step_task(*args)
    from prefect.context import FlowRunContext
    from prefect_ray import RayTaskRunner
    from prefect_ray.context import remote_options

    context = FlowRunContext.get()
    if context is None or not isinstance(context.task_runner, RayTaskRunner):
        raise ConfigError(
            "cluster.backend is ray but this flow runs on another task runner: start it through "
            "`sweetflow` with -S cluster.backend=ray, or serve the deployment with cluster.backend: ray"
        )
    import ray

    res = cfg.resources_for(stage)
    # the step's task run is recorded with its flow's; the stage process joins this cluster (Ray actors)
    api, gcs = str(context.client.api_url), ray.get_runtime_context().gcs_address
    env = {"env_vars": {"PREFECT_API_URL": api, "RAY_ADDRESS": gcs}}
    with remote_options(num_cpus=res.cpus, num_gpus=res.gpus, runtime_env=env):
        return step_task.submit(*args).result()
