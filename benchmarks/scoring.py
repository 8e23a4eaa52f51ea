"""Benchmark: sandboxed backend scoring vs the official-style unsafe in-process exec.

Reads: data/colbench/backend_test.jsonl (the first --n tasks; their reference solutions are
used as the answers, so every test does real work). Writes: benchmarks/results/scoring.json
(and prints it).

- unsafe: what the official scorer does, in this process on one core: for each test call, exec
  the reference and the candidate afresh and eval the call (1 s timer around exec and eval),
  compare with `==`. No isolation.
- sandbox_cold: `score_answers` with an empty reference cache (references and candidates both
  run in the sandbox), over --workers fork-servers, pool start-up included.
- sandbox_warm: the same with the reference cache filled (what the pipeline does after the
  first iteration): only candidates run.
- latency: one candidate at a time on an idle pool: wall ms and CPU ms per candidate (scorer +
  fork-server + child; the figure to compare when the machine is shared).
One "test" is one test call of one candidate, compared with the reference output. Each
throughput figure is the best of --repeat interleaved runs (the machine may be shared with other
work); the latency figures are medians over --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import tempfile
import time
from pathlib import Path

from components.data.tasks import BackendTask, load_backend_tasks
from components.scoring.sandbox import SandboxPool, server_kind
from components.tasks.colbench_backend.scoring import calls_of, score_answers

REPO = Path(__file__).resolve().parents[1]


def _alarm(signum, frame):
    raise TimeoutError


def _outputs_in_process(code: str, calls: list[str]) -> list:
    """Each call on a fresh exec of the code, as officially (into a dict, so helpers work)."""
    outputs = []
    for call in calls:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        try:
            namespace: dict = {}
            exec(code, namespace)
            outputs.append(eval(call, namespace))
        except BaseException:  # noqa: BLE001 - the official scorer swallows everything
            outputs.append(None)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return outputs


def unsafe_in_process(tasks: list[BackendTask]) -> dict:
    """Official-style scoring: in-process exec, per-test timer, == comparison.

    Runs in a throw-away working directory: some references create files (sqlite databases)
    in the current directory, which is exactly why the pipeline never does this.
    """
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)
        try:
            return _unsafe_in_process(tasks)
        finally:
            os.chdir(here)


def _unsafe_in_process(tasks: list[BackendTask]) -> dict:
    signal.signal(signal.SIGALRM, _alarm)
    start, tests, passed = time.perf_counter(), 0, 0
    for task in tasks:
        calls = calls_of(task)
        expected = _outputs_in_process(task.ground_truth, calls)
        got = _outputs_in_process(task.ground_truth, calls)
        for e, g in zip(expected, got):
            try:
                passed += int(e is not None and bool(g == e))
            except Exception:  # noqa: BLE001 - e.g. numpy arrays
                pass
        tests += len(calls)
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 3),
        "tests": tests,
        "passed": passed,
        "tests_per_s": round(tests / seconds, 1),
        "cores": 1,
    }


def sandboxed(tasks: list[BackendTask], workers: int, cache_dir: Path) -> dict:
    answers = [(i, t.ground_truth) for i, t in enumerate(tasks)]
    start = time.perf_counter()
    results = score_answers(tasks, answers, cache_dir=cache_dir, workers=workers)
    seconds = time.perf_counter() - start
    tests = sum(r.total for r in results)
    return {
        "seconds": round(seconds, 3),
        "tests": tests,
        "passed": sum(r.passed for r in results),
        "tests_per_s": round(tests / seconds, 1),
        "cores": workers,
        "tests_per_s_per_core": round(tests / seconds / workers, 1),
    }


def _cpu_s() -> float:
    """CPU seconds of this process (all threads) plus its reaped children (fork-servers, and
    through them every sandboxed child they reaped)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _one_pool(sample: list[BackendTask], workers: int) -> tuple[float, float, dict]:
    """(start-up s, latency s per candidate, capabilities) of one pool running `sample`."""
    start = time.perf_counter()
    with SandboxPool(workers) as pool:
        startup = time.perf_counter() - start
        start = time.perf_counter()
        for task in sample:
            pool.run(task.ground_truth, calls_of(task))
        latency = (time.perf_counter() - start) / len(sample)
        caps = pool.capabilities
    return startup, latency, caps


def per_candidate_ms(tasks: list[BackendTask], workers: int, repeat: int = 3) -> dict:
    """Latency of one candidate (10 calls) on an idle pool, the pool start-up time, and the CPU
    time of one candidate: scorer + fork-server + child, the pool's own start and stop (an
    empty pool's CPU) subtracted. CPU time is what to compare on a shared machine, where wall
    time depends on the other work. Medians over `repeat` runs of 100 lite programs."""
    sample = [t for t in tasks if server_kind(t.ground_truth) == "lite"][:100]
    runs = []
    for _ in range(repeat):
        before = _cpu_s()
        SandboxPool(workers).close()  # starts one server, as does a pool used sequentially
        empty = _cpu_s() - before
        before = _cpu_s()
        startup, latency, caps = _one_pool(sample, workers)
        runs.append((startup, latency, (_cpu_s() - before - empty) / len(sample)))
    return {
        "pool_startup_s": round(statistics.median(r[0] for r in runs), 3),
        "per_candidate_ms": round(statistics.median(r[1] for r in runs) * 1000, 2),
        "per_candidate_cpu_ms": round(statistics.median(r[2] for r in runs) * 1000, 2),
        "server_caps": caps,
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, default=REPO / "data/colbench/backend_test.jsonl")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs each")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/scoring.json")
    args = parser.parse_args()
    tasks = load_backend_tasks(args.tasks)[: args.n]
    best = lambda runs: max(runs, key=lambda r: r["tests_per_s"])  # noqa: E731
    unsafe_runs, cold_runs, warm_runs = [], [], []
    for _ in range(args.repeat):  # interleaved, best of each: the machine may be shared
        unsafe_runs.append(unsafe_in_process(tasks))
        with tempfile.TemporaryDirectory() as cache:
            cold_runs.append(sandboxed(tasks, args.workers, Path(cache)))
            warm_runs.append(sandboxed(tasks, args.workers, Path(cache)))
    unsafe, cold, warm = best(unsafe_runs), best(cold_runs), best(warm_runs)
    report = {
        "n_tasks": len(tasks),
        "workers": args.workers,
        "repeat": args.repeat,
        "load_average": os.getloadavg(),
        "unsafe_in_process": unsafe,
        "sandbox_cold": cold,
        "sandbox_warm": warm,
        "latency": per_candidate_ms(tasks, args.workers, args.repeat),
        "ratio_cold": round(cold["tests_per_s"] / unsafe["tests_per_s"], 3),
        "ratio_warm": round(warm["tests_per_s"] / unsafe["tests_per_s"], 3),
        "ratio_cold_per_core": round(cold["tests_per_s_per_core"] / unsafe["tests_per_s"], 3),
        "goal": "sandbox >= 1/3 of unsafe in-process tests/s",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
