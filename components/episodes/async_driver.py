"""Per-arrival multi-turn episode driver: each episode advances as soon as its own response is ready.

Reads tasks, writes `Trajectory` records (components/data/records.py) through a callback as each
episode ends, like the turn-synchronous driver (driver.py), whose per-episode steps it shares
(episode.py `EpisodeSteps`): same prompts, same token ids, same per-request seeds
(`derive_seed(episode seed, "turn", t)`), so the same engine outputs give the same records; only
the order in which episodes end differs. Where they differ is when requests are sent: the sync
driver sends one batch per turn and waits for its longest response, while this one submits every
episode's first request to a streaming engine (components/engines/base.py `StreamingEngine`: vLLM
through its `LLMEngine` step loop, an OpenAI-compatible server through many in-flight requests)
and, whenever requests finish, records each response, parses it, ends the episode or gets the
human's reply, and submits the episode's next turn at once. The engine's batch stays full instead
of draining to the turn's last long response.

The simulator, by kind:
- offline simulators (instant Python) and an LLM simulator on an engine of its own: one `reply`
  call per arrival, for the episodes whose questions arrived together (its engine blocks this
  driver meanwhile, but a vLLM agent engine keeps decoding in its own process).
- an LLM simulator sharing the agent's engine: its requests (the task's simulator chat, greedy,
  the "sim" seed) go through the same stream as the agent's, so both kinds fill one batch.

Engines that cannot stream (the transformers `hf` engine) run the sync driver: play.py's
`build_driver` says so in the log. A dead vLLM engine core raises `EngineDied` from `collect`
(components/engines/vllm_liveness.py); on any error the requests still in flight are cancelled
and the error propagates; episodes already handed to `on_done` stay written.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

from tqdm.auto import tqdm

from components.data.records import Trajectory
from components.engines.base import SamplingConfig, StreamingEngine
from components.episodes.episode import DriverStats, Episode, EpisodeConfig, EpisodeJob, EpisodeSteps
from components.episodes.simulators import LLMSimulator, Simulator
from components.tasks.base import Task

log = logging.getLogger(__name__)

AGENT, SIM = "agent", "sim"  # the kinds of request in the stream, keyed (kind, slot)


class AsyncEpisodeDriver:
    """Runs many episodes on one streaming agent engine, each at its own pace."""

    def __init__(self, agent: StreamingEngine, simulator: Simulator, cfg: EpisodeConfig, task: Task) -> None:
        if not isinstance(agent, StreamingEngine):
            raise TypeError(f"the agent engine '{agent.name}' cannot stream requests; use the sync driver")
        if agent.tokenizer is None:
            raise ValueError(f"the agent engine '{agent.name}' has no tokenizer; token ids are required")
        self.agent, self.simulator, self.cfg, self.task = agent, simulator, cfg, task
        self.stats = DriverStats()
        self.steps = EpisodeSteps(agent.tokenizer, cfg, task, self.stats)
        self.sampling = SamplingConfig(temperature=cfg.temperature, max_tokens=cfg.max_tokens)
        self.sim_streams = isinstance(simulator, LLMSimulator) and simulator.engine is agent

    def run(
        self, jobs: Sequence[EpisodeJob], on_done: Callable[[Trajectory], None] | None = None, progress: bool = True
    ) -> list[Trajectory]:
        """Run every job to the end; return the trajectories in job order (on_done gets them as they end)."""
        done: dict[int, Trajectory] = {}
        live: dict[int, Episode] = {}
        bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress)

        def finish(slot: int, answered: bool) -> None:
            done[slot] = self.steps.trajectory(live.pop(slot), answered)
            if on_done is not None:
                on_done(done[slot])
            bar.update(1)

        start = time.perf_counter()
        try:
            for slot, job in enumerate(jobs):
                live[slot] = self.steps.start(job)
                self._ask_agent(slot, live[slot])
            while self.agent.in_flight():
                self._advance(live, finish)
                bar.set_postfix(live=len(live), in_flight=self.agent.in_flight())
        except BaseException:
            self.agent.cancel()
            raise
        finally:
            bar.close()
        tokens = sum(len(t.response_ids) for traj in done.values() for t in traj.turns)
        seconds = max(time.perf_counter() - start, 1e-9)
        log.info("%d episodes, %d agent tokens in %.1f s (%.0f tok/s)", len(done), tokens, seconds, tokens / seconds)
        return [done[slot] for slot in range(len(jobs))]

    def _advance(self, live: dict[int, Episode], finish) -> None:
        """Take the requests that finished next and move each of their episodes on."""
        start = time.perf_counter()
        arrived = self.agent.collect()
        self.stats.agent_wait_s += time.perf_counter() - start
        asking: list[int] = []
        for (kind, slot), gen in arrived:
            if kind == SIM:
                self._observed(slot, live[slot], self.simulator.reply_text(gen), finish)
                continue
            answered = self.steps.act(live[slot], gen)
            if answered is None:
                asking.append(slot)
            else:
                finish(slot, answered)
        if asking:
            self._simulate(asking, live, finish)

    def _simulate(self, asking: list[int], live: dict[int, Episode], finish) -> None:
        requests = [self.steps.sim_request(live[slot]) for slot in asking]
        if self.sim_streams:
            for slot, request in zip(asking, requests):
                conversation = self.simulator.conversation(request)
                self.agent.submit_chat((SIM, slot), conversation, self.simulator.sampling, request.seed)
                self.stats.simulator_calls += 1
            return
        start = time.perf_counter()
        replies = self.simulator.reply(requests)
        self.stats.simulator_s += time.perf_counter() - start
        self.stats.simulator_calls += 1
        for slot, reply in zip(asking, replies):
            self._observed(slot, live[slot], reply, finish)

    def _observed(self, slot: int, ep: Episode, reply: str, finish) -> None:
        """The human replied: submit the episode's next turn, or end it when its context is full."""
        if self.steps.observe(ep, reply):
            self._ask_agent(slot, ep)
        else:
            finish(slot, False)

    def _ask_agent(self, slot: int, ep: Episode) -> None:
        self.agent.submit((AGENT, slot), ep.prompt_ids, self.sampling, self.steps.agent_seed(ep))
        self.stats.agent_calls += 1
