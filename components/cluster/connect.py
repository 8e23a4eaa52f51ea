"""A stage process joins the Ray cluster its run is placed on (params.yaml `cluster.backend: ray`).

Reads the `cluster` section of the stage's params file and $RAY_ADDRESS, which the flow gives every
step it places on Ray (flows/runtime/cluster.py). Writes nothing. A stage run by hand (`dvc repro`, or
`python -m components.stages...`) with `backend: ray` and no $RAY_ADDRESS joins `cluster.address`,
else starts a local Ray instance of its own for the step.
"""

from __future__ import annotations

import os

from components.config.cluster import Backend, ClusterConfig

ADDRESS_ENV = "RAY_ADDRESS"  # Ray's own variable: ray.init() joins the cluster it names


def join(cfg: ClusterConfig) -> bool:
    """Connect this process to the run's Ray cluster when `cfg` places the run on Ray; True then."""
    if cfg.backend != Backend.ray:
        return False
    import ray

    if not ray.is_initialized():
        address = os.environ.get(ADDRESS_ENV) or cfg.address
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return True
