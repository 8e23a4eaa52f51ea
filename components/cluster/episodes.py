"""A step's episodes shared by several engines on a Ray cluster (`cluster.rollout_engines` N > 1).

Each of N Ray actors builds its own agent engine (vLLM: `cluster.tensor_parallel` GPUs, when the
cluster has GPUs), with the LLM simulator sharing it when the simulator has no model of its own,
and plays every N-th job with the step's driver (components/episodes/build.py). Each trajectory
comes back through a Ray queue as soon as its episode ends, and this process appends it to the
step's file, so a crash loses only episodes still in flight, as with one engine; a re-run resumes.
The engines on one node split its CPUs: each actor pins itself to its own block (`core_shares`)
before building its engine, so vLLM's CPU backend binds its OpenMP threads there, not on every core
of the node; each engine allocates its own KV cache (VLLM_CPU_KVCACHE_SPACE GB on CPU), so N
engines on a node take N times that memory. An engine build that fails is reported like an
episode that fails, and fails the step; an actor that dies without a word (killed, out of memory)
fails it too: while the queue is quiet, the stage checks every POLL_S that its actors are alive.

Reads the stage's configs (passed in). Writes nothing itself (the caller's `on_done` does).
Records equal a single-engine run's, order aside: an episode's seeds derive from its job, not from
its engine or batch neighbours, where the engine's samples do not depend on the batch (hf in fp32;
vLLM's bf16 may flip a near-tie token: README "Determinism"). A simulator behind an
OpenAI-compatible URL is one service every engine's episodes share.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from components.config.sections import EpisodeSection, EpisodeStageConfig
from components.data.records import Trajectory
from components.episodes.driver import EpisodeJob
from components.tasks.base import Task

_DONE = "done"  # a worker's last message on the queue: ("done", worker, stats) or ("error", worker, text)
POLL_S = 5.0  # how long the stage waits on a quiet queue before checking that its actors are alive


class EpisodeWorker:
    """The body of one Ray actor: an engine (built at the start of `play`, on the cores it is given)
    and the driver over it."""

    def __init__(self, cfg: EpisodeStageConfig, episode: EpisodeSection, seed: int, task: Task, gpus: int) -> None:
        self.args = (cfg, episode, seed, task, gpus)

    def placement(self) -> tuple[str, list[int]]:
        """This actor's Ray node and the CPUs its process may run on."""
        import ray

        return ray.get_runtime_context().get_node_id(), sorted(os.sched_getaffinity(0))

    def play(self, jobs: list[EpisodeJob], queue, worker: int, cpus: list[int]) -> None:
        """Build the driver on `cpus`, run `jobs`, putting each trajectory on `queue` as it ends, then
        ("done", worker, stats); a failure (the engine build's too) as ("error", worker, text)."""
        from components.episodes.build import build_driver, close_engines  # the engine's imports, in the actor

        driver = None
        try:
            os.sched_setaffinity(0, cpus)  # the engine's processes inherit it (vLLM binds its threads inside)
            driver = build_driver(*self.args)
            driver.run(jobs, on_done=queue.put, progress=False)
            message = (_DONE, worker, driver.stats.prompt_reencoded)
        except Exception as exc:  # reported to the stage process, which fails the step
            message = ("error", worker, f"{type(exc).__name__}: {exc}")
        finally:
            if driver is not None:
                close_engines(driver)  # before the last message: the stage then stops the actor
        queue.put(message)


def core_shares(placed: list[tuple[str, list[int]]]) -> list[list[int]]:
    """The CPUs each actor's engine runs on, from each actor's (node, allowed CPUs): a node's CPUs
    split into contiguous disjoint blocks among the actors on it, one each, or, with more actors
    than CPUs, one CPU each, shared round robin.

    Why: vLLM on CPU binds one OpenMP thread to each CPU its process may use (VLLM_CPU_OMP_THREADS_BIND
    "auto"), so two engines on one node would each bind a thread to every core; their spinning
    OpenMP barriers then wait on threads the other engine has preempted (measured on 2 cores: no
    episode of 12 finished in 5 minutes)."""
    on_node: dict[str, list[int]] = {}
    for i, (node, _) in enumerate(placed):
        on_node.setdefault(node, []).append(i)
    shares: list[list[int]] = [[] for _ in placed]
    for actors in on_node.values():
        for k, i in enumerate(actors):
            cpus, n = placed[i][1], len(actors)
            if n > len(cpus):
                shares[i] = [cpus[k % len(cpus)]]
            else:
                shares[i] = cpus[k * len(cpus) // n : (k + 1) * len(cpus) // n]
    return shares


def check_alive(plays: list) -> None:
    """Raise when an actor's `play` call ended in a Ray error (its process died, so its last message
    will never come): the step must fail, not wait on the queue for ever. A call that ended well has
    put its last message on the queue already (`Queue.put` waits)."""
    import ray

    ready, _ = ray.wait(plays, num_returns=len(plays), timeout=0)
    for worker, call in enumerate(plays):
        if call in ready:
            try:
                ray.get(call)
            except ray.exceptions.RayError as exc:
                raise RuntimeError(f"episode engine {worker} died: {type(exc).__name__}: {exc}") from None


def play_sharded(
    cfg: EpisodeStageConfig,
    episode: EpisodeSection,
    task: Task,
    jobs: list[EpisodeJob],
    seed: int,
    engines: int,
    gpus: int,
    on_done: Callable[[Trajectory], Any],
) -> tuple[list[Trajectory], int]:
    """Play `jobs` on `engines` (at most len(jobs)) Ray actors, job i on engine i mod N; `on_done`
    each trajectory here as it arrives; return them in arrival order and the prompts re-encoded."""
    import ray
    from ray.util.queue import Empty, Queue
    from tqdm.auto import tqdm

    on_gpus = ray.cluster_resources().get("GPU", 0) > 0
    actor = ray.remote(num_cpus=0, num_gpus=gpus if on_gpus else 0)(EpisodeWorker)
    queue = Queue()
    shards = [jobs[i::engines] for i in range(engines)]  # engines <= len(jobs): none is empty
    workers = [actor.remote(cfg, episode, seed, task, gpus) for _ in shards]
    cores = core_shares(ray.get([worker.placement.remote() for worker in workers]))
    plays = [worker.play.remote(shard, queue, i, cores[i]) for i, (worker, shard) in enumerate(zip(workers, shards))]
    done, reencoded, pending = [], 0, len(workers)
    with tqdm(total=len(jobs), desc=f"episodes ({len(workers)} engines)", unit="ep") as bar:
        try:
            while pending:
                try:
                    item = queue.get(timeout=POLL_S)
                except Empty:
                    check_alive(plays)
                    continue
                if isinstance(item, Trajectory):
                    on_done(item)
                    done.append(item)
                    bar.update(1)
                elif item[0] == _DONE:
                    pending, reencoded = pending - 1, reencoded + item[2]
                else:
                    raise RuntimeError(f"episode engine {item[1]} failed: {item[2]}")
        finally:
            for worker in workers:
                ray.kill(worker)
            queue.shutdown()
    return done, reencoded
