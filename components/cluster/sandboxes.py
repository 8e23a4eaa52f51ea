"""Scoring fork-servers as Ray actors: one `SandboxPool` (components/scoring/sandbox.py) on every
alive node of the Ray cluster, pinned there, behind the pool's own interface (`run`, `workers`,
`limits`, `missing`), so `score_answers` (components/tasks/colbench_backend/scoring.py) scores the same way on
one machine and on a cluster.

Reads and writes nothing itself. Untrusted code still runs only in the nodes' fork-server children,
never in an actor's or the scorer's process; outputs come back encoded and are compared by the
scorer, as on one machine (the reference outputs never reach a node's sandbox process).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from components.scoring.sandbox import Limits, RunResult, SandboxPool


class NodeSandbox:
    """The body of the Ray actor on one node: a SandboxPool of `workers` fork-servers."""

    def __init__(self, workers: int, limits: Limits) -> None:
        self.pool = SandboxPool(workers, limits)

    def missing(self) -> list[str]:
        return list(self.pool.missing)

    def run(self, code: str, calls: list[str]) -> RunResult:
        return self.pool.run(code, calls)

    def close(self) -> None:
        self.pool.close()


class RaySandboxes:
    """A SandboxPool-like front for one NodeSandbox actor per alive node (use as a context manager).

    `workers_per_node` None = each node's CPU count. `workers` is the total, so a caller running
    that many threads keeps every fork-server busy; programs go to the nodes in turn.
    """

    def __init__(self, workers_per_node: int | None = None, limits: Limits | None = None) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.limits = limits or Limits()
        actor = ray.remote(num_cpus=0)(NodeSandbox)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        sizes = [workers_per_node or max(1, int(n["Resources"].get("CPU", 1))) for n in nodes]
        self.actors = [
            actor.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False), max_concurrency=size
            ).remote(size, self.limits)
            for n, size in zip(nodes, sizes)
        ]
        self.workers = sum(sizes)
        self.missing = sorted({m for found in ray.get([a.missing.remote() for a in self.actors]) for m in found})
        # each node in turn, as many turns as it has fork-servers (a call runs in one of its threads)
        self._turn = itertools.cycle([i for i, size in enumerate(sizes) for _ in range(size)])
        self._lock = threading.Lock()

    @property
    def nodes(self) -> int:
        return len(self.actors)

    def run(self, code: str, calls: list[str]) -> RunResult:
        import ray

        with self._lock:
            actor = self.actors[next(self._turn)]
        return ray.get(actor.run.remote(code, calls))

    def close(self) -> None:
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.close.remote())
            finally:
                ray.kill(actor)
        self.actors = []

    def __enter__(self) -> "RaySandboxes":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
