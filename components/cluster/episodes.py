"""A step's episodes shared by several engines on a Ray cluster (`cluster.rollout_engines` N > 1).

Each of N Ray actors builds its own agent engine (vLLM: `cluster.tensor_parallel` GPUs, when the
cluster has GPUs), with the LLM simulator sharing it when the simulator has no model of its own,
and plays every N-th job with the step's driver (components/episodes/play.py). Each trajectory
comes back through a Ray queue as soon as its episode ends, and this process appends it to the
step's file, so a crash loses only episodes still in flight, as with one engine; a re-run resumes.

Reads the stage's configs (passed in). Writes nothing itself (the caller's `on_done` does).
Records equal a single-engine run's, order aside: an episode's seeds derive from its job, not from
its engine or batch neighbours, where the engine's samples do not depend on the batch (hf in fp32;
vLLM's bf16 may flip a near-tie token: README "Determinism"). A simulator behind an
OpenAI-compatible URL is one service every engine's episodes share.
"""

from __future__ import annotations

from typing import Any, Callable

from components.config.sections import EpisodeSection, EpisodeStageConfig
from components.data.records import Trajectory
from components.episodes.driver import EpisodeJob
from components.tasks.base import Task

_DONE = "done"  # a worker's last message on the queue: ("done", worker, stats) or ("error", worker, text)


class EpisodeWorker:
    """The body of one Ray actor: an engine (built once) and the driver over it."""

    def __init__(self, cfg: EpisodeStageConfig, episode: EpisodeSection, seed: int, task: Task, gpus: int) -> None:
        from components.episodes.play import build_driver

        self.driver = build_driver(cfg, episode, seed, task, gpus)

    def play(self, jobs: list[EpisodeJob], queue, worker: int) -> None:
        """Run `jobs`, putting each trajectory on `queue` as it ends, then ("done", worker, stats)."""
        from components.episodes.play import close_engines

        try:
            self.driver.run(jobs, on_done=queue.put, progress=False)
            message = (_DONE, worker, self.driver.stats.prompt_reencoded)
        except Exception as exc:  # reported to the stage process, which fails the step
            message = ("error", worker, f"{type(exc).__name__}: {exc}")
        finally:
            close_engines(self.driver)  # before the last message: the stage then stops the actor
        queue.put(message)


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
    from ray.util.queue import Queue
    from tqdm.auto import tqdm

    on_gpus = ray.cluster_resources().get("GPU", 0) > 0
    actor = ray.remote(num_cpus=0, num_gpus=gpus if on_gpus else 0)(EpisodeWorker)
    queue = Queue()
    shards = [jobs[i::engines] for i in range(engines)]  # engines <= len(jobs): none is empty
    workers = [actor.remote(cfg, episode, seed, task, gpus) for _ in shards]
    for i, (worker, shard) in enumerate(zip(workers, shards)):
        worker.play.remote(shard, queue, i)
    done, reencoded, pending = [], 0, len(workers)
    with tqdm(total=len(jobs), desc=f"episodes ({len(workers)} engines)", unit="ep") as bar:
        try:
            while pending:
                item = queue.get()
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
