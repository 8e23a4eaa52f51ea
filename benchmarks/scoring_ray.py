"""Benchmark: ColBench backend scoring throughput on a Ray cluster by worker count, beside this
machine's own sandbox pool (issue 15, item 8).

Reads: data/colbench/backend_test.jsonl (the first --n tasks; their reference solutions are the
answers, so every test does real work). Writes: benchmarks/results/scoring_ray.json.

Layouts, all on this machine, each scoring the same answers with the reference cache filled first
(what the pipeline does after its first iteration: only candidates run):
- local-W: `score_answers` on a SandboxPool of W fork-servers (no Ray);
- ray-1node-W: one Ray node, its scoring actor holding W fork-servers;
- ray-2nodes-1: two Ray nodes of one CPU each (ray.cluster_utils), one fork-server each.
Throughput is tests/s (one test = one call of one candidate), best of --repeat interleaved runs;
the machine may be shared, so compare the layouts of one run, and read the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from components.data.tasks import load_backend_tasks
from components.tasks.colbench_backend.scoring import score_answers

REPO = Path(__file__).resolve().parents[1]


def throughput(tasks, answers, cache: Path, sandboxes=None, workers: int | None = None) -> float:
    """tests/s of one scoring pass over `answers` (pool start-up included, as in a stage)."""
    kwargs = {"sandboxes": sandboxes} if sandboxes else {"workers": workers}
    start = time.perf_counter()
    results = score_answers(tasks, answers, cache_dir=cache, **kwargs)
    return sum(r.total for r in results) / (time.perf_counter() - start)


def ray_layouts(tasks, answers, cache: Path, max_workers: int) -> dict[str, float]:
    """tests/s of one Ray node by fork-servers per node, and of two one-CPU nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from components.cluster.sandboxes import RaySandboxes

    out = {}
    ray.init(num_cpus=max_workers, include_dashboard=False, log_to_driver=False)
    try:
        for w in range(1, max_workers + 1):
            out[f"ray-1node-{w}"] = throughput(tasks, answers, cache, lambda _w, lim, w=w: RaySandboxes(w, lim))
    finally:
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        out["ray-2nodes-1"] = throughput(tasks, answers, cache, lambda _w, lim: RaySandboxes(1, lim))
    finally:
        ray.shutdown()
        cluster.shutdown()
    return out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, default=REPO / "data/colbench/backend_test.jsonl")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--max-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs each")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/scoring_ray.json")
    args = parser.parse_args()
    tasks = load_backend_tasks(args.tasks)[: args.n]
    answers = [(i, t.ground_truth) for i, t in enumerate(tasks)]
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        score_answers(tasks, answers, cache_dir=cache)  # fill the reference cache
        for _ in range(args.repeat):
            for w in range(1, args.max_workers + 1):
                runs.setdefault(f"local-{w}", []).append(throughput(tasks, answers, cache, workers=w))
            for name, value in ray_layouts(tasks, answers, cache, args.max_workers).items():
                runs.setdefault(name, []).append(value)
    best = {name: round(max(values), 1) for name, values in runs.items()}
    report = {
        "n_tasks": len(tasks),
        "repeat": args.repeat,
        "load_average": os.getloadavg(),
        "tests_per_s": best,
        "ray_vs_local_same_workers": {
            w: round(best[f"ray-1node-{w}"] / best[f"local-{w}"], 3) for w in range(1, args.max_workers + 1)
        },
        "scaling_ray_1node": round(best[f"ray-1node-{args.max_workers}"] / best["ray-1node-1"], 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
