"""Turn-synchronous multi-turn episode driver for any collaborative task (components/tasks).

Reads tasks, writes `Trajectory` records (components/data/records.py) through a callback as each
episode ends, so a crash loses only episodes still in flight. Each turn, all live episodes go to
the agent engine in ONE `generate` call and all questions go to the simulator in ONE `reply` call,
so a turn lasts as long as its longest response. Every agent action stores the exact prompt ids,
sampled ids and their log-probs. How a turn's actions are drawn is the driver's `TurnSampler`
hook: by default one sample per episode (`PlainSampler`); components/episodes/best_of.py draws N
candidates per episode in the same one call and keeps the one a critic ranks highest. What
happens to an episode between calls (recording, parsing, the simulator's request, the next
prompt's ids, the seeds) is episode.py's `EpisodeSteps`, shared with the per-arrival driver
(async_driver.py), which gives the same records.

This module also re-exports episode.py's job, config and seed helpers, which the stages import
from here.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Protocol, Sequence

from tqdm.auto import tqdm

from components.data.records import Trajectory
from components.engines.base import Engine, Generation, SamplingConfig
from components.episodes.episode import (
    DriverStats,
    Episode,
    EpisodeConfig,
    EpisodeJob,
    EpisodeSteps,
    derive_seed,
    episode_seed,
)
from components.episodes.simulators import Simulator
from components.tasks.base import Task

__all__ = [
    "DriverStats",
    "EpisodeConfig",
    "EpisodeDriver",
    "EpisodeJob",
    "PlainSampler",
    "TurnSampler",
    "derive_seed",
    "episode_seed",
]

log = logging.getLogger(__name__)


class TurnSampler(Protocol):
    """The driver's hook for a turn's actions: `sample` gives one `Generation` per live episode (in
    their order) from one `agent.generate` call for the whole batch, each with its exact token ids
    and log-probs; `identity` is what else the episodes depend on (part of an output folder's
    episode fingerprint, components/episodes/play.py); `metrics` what it measured, for metrics.json."""

    def sample(self, agent: Engine, episodes: Sequence[Episode], sampling: SamplingConfig) -> list[Generation]: ...

    def identity(self) -> dict: ...

    def metrics(self) -> dict: ...


class PlainSampler:
    """One sample per episode, seeded `derive_seed(episode seed, "turn", t)` (EpisodeSteps.agent_seed)."""

    def sample(self, agent: Engine, episodes: Sequence[Episode], sampling: SamplingConfig) -> list[Generation]:
        return agent.generate(
            [ep.prompt_ids for ep in episodes], sampling, [EpisodeSteps.agent_seed(ep) for ep in episodes]
        )

    def identity(self) -> dict:
        return {}

    def metrics(self) -> dict:
        return {}


class EpisodeDriver:
    """Runs many episodes in lock-step turns on one agent engine and one simulator."""

    def __init__(
        self, agent: Engine, simulator: Simulator, cfg: EpisodeConfig, task: Task, sampler: TurnSampler | None = None
    ) -> None:
        if agent.tokenizer is None:
            raise ValueError(f"the agent engine '{agent.name}' has no tokenizer; token ids are required")
        self.agent, self.simulator, self.cfg, self.task = agent, simulator, cfg, task
        self.sampler: TurnSampler = sampler or PlainSampler()
        self.stats = DriverStats()
        self.steps = EpisodeSteps(agent.tokenizer, cfg, task, self.stats)

    def run(
        self, jobs: Sequence[EpisodeJob], on_done: Callable[[Trajectory], None] | None = None, progress: bool = True
    ) -> list[Trajectory]:
        """Run every job to the end; return the trajectories in job order."""
        done: dict[int, Trajectory] = {}
        bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress)

        def finish(slot: int, ep: Episode, answered: bool) -> None:
            done[slot] = self.steps.trajectory(ep, answered)
            if on_done is not None:
                on_done(done[slot])
            bar.update(1)

        live = [(slot, self.steps.start(job)) for slot, job in enumerate(jobs)]
        for turn in range(self.cfg.max_turns):
            if not live:
                break
            bar.set_postfix(turn=turn + 1, live=len(live))
            live = self._turn(turn, live, finish)
        bar.close()
        return [done[slot] for slot in range(len(jobs))]

    def _turn(self, turn: int, live: list[tuple[int, Episode]], finish) -> list[tuple[int, Episode]]:
        sampling = SamplingConfig(temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens)
        start = time.perf_counter()
        gens = self.sampler.sample(self.agent, [ep for _, ep in live], sampling)
        seconds = time.perf_counter() - start
        self.stats.agent_calls += 1
        self.stats.agent_wait_s += seconds
        tokens = sum(len(g.token_ids) for g in gens)
        log.info(
            "turn %d: %d live episodes, %d agent tokens in %.1f s (%.0f tok/s)",
            turn + 1,
            len(live),
            tokens,
            seconds,
            tokens / max(seconds, 1e-9),
        )
        asking: list[tuple[int, Episode]] = []
        for (slot, ep), gen in zip(live, gens):
            answered = self.steps.act(ep, gen)
            if answered is None:
                asking.append((slot, ep))
            else:
                finish(slot, ep, answered)
        return self._observe(asking, finish)

    def _observe(self, asking: list[tuple[int, Episode]], finish) -> list[tuple[int, Episode]]:
        if not asking:
            return []
        start = time.perf_counter()
        replies = self.simulator.reply([self.steps.sim_request(ep) for _, ep in asking])
        self.stats.simulator_s += time.perf_counter() - start
        self.stats.simulator_calls += 1
        still = []
        for (slot, ep), reply in zip(asking, replies):
            if self.steps.observe(ep, reply):
                still.append((slot, ep))
            else:
                finish(slot, ep, False)
        return still
