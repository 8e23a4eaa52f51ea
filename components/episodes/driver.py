"""Batched multi-turn episode driver for any collaborative task (components/tasks).

Reads tasks, writes `Trajectory` records (components/data/records.py) through a callback as each
episode ends, so a crash loses only episodes still in flight. Each turn, all live episodes go to
the agent engine in ONE `generate` call and all questions go to the simulator in ONE `reply` call.
Every agent action stores the exact prompt ids, sampled ids and their log-probs.

Seeds: each episode's seed is derived from the run seed, the task id and the sample number
(`episode_seed`), and each agent turn's request seed from the episode seed and the turn, so an
episode samples the same way whatever else shares its batch (where the engine honours per-request
seeds; see the engine's docstring).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from components.data.records import Trajectory, Turn
from components.engines.base import Engine, Generation, SamplingConfig
from components.episodes.simulators import SimRequest, Simulator
from components.episodes.tokens import DialogueTokens
from components.tasks.base import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeConfig:
    """Protocol and decoding settings of an episode (params.yaml `episode`)."""

    max_turns: int = 10
    temperature: float = 1.0
    max_tokens: int = 256
    max_model_len: int = 4096


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to run: a task (with its index in the tasks file), the run seed, the sample number."""

    task_index: int
    task: Any  # the task's record (Task.record)
    run_seed: int
    sample: int = 0

    @property
    def seed(self) -> int:
        return episode_seed(self.run_seed, self.task.task_id, self.sample)


def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (run seed, task id, sample, turn), stable across runs."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def episode_seed(run_seed: int, task_id: str, sample: int) -> int:
    return derive_seed(run_seed, task_id, sample)


@dataclass
class _Episode:
    job: EpisodeJob
    messages: list[dict[str, str]]
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    dialogue: list[tuple[str, str | None]] = field(default_factory=list)

    def record(self, gen: Generation) -> None:
        self.turns.append(
            Turn(
                index=len(self.turns),
                action=gen.text,
                prompt_ids=self.prompt_ids,
                response_ids=gen.token_ids,
                response_logprobs=gen.logprobs,
            )
        )
        self.messages.append({"role": "assistant", "content": gen.text})

    def finish(self, answered: bool, answer: str) -> Trajectory:
        return Trajectory(
            task_id=self.job.task.task_id,
            task_index=self.job.task_index,
            run_seed=self.job.run_seed,
            sample=self.job.sample,
            seed=self.job.seed,
            messages=self.messages,
            turns=self.turns,
            answer=answer,
            answered=answered,
        )


@dataclass
class DriverStats:
    agent_calls: int = 0
    simulator_calls: int = 0
    prompt_reuse: int = 0
    prompt_reencoded: int = 0
    context_full: int = 0


class EpisodeDriver:
    """Runs many episodes in lock-step turns on one agent engine and one simulator."""

    def __init__(self, agent: Engine, simulator: Simulator, cfg: EpisodeConfig, task: Task) -> None:
        if agent.tokenizer is None:
            raise ValueError(f"the agent engine '{agent.name}' has no tokenizer; token ids are required")
        self.agent, self.simulator, self.cfg, self.task = agent, simulator, cfg, task
        self.tokens = DialogueTokens(agent.tokenizer)
        self.stats = DriverStats()

    def run(
        self, jobs: Sequence[EpisodeJob], on_done: Callable[[Trajectory], None] | None = None, progress: bool = True
    ) -> list[Trajectory]:
        """Run every job to the end; return the trajectories in job order."""
        done: dict[int, Trajectory] = {}
        bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress)

        def finish(slot: int, ep: _Episode, answered: bool) -> None:
            done[slot] = ep.finish(answered, self.task.final_answer([t.action for t in ep.turns]))
            if on_done is not None:
                on_done(done[slot])
            bar.update(1)

        live = [(slot, self._start(job)) for slot, job in enumerate(jobs)]
        for turn in range(self.cfg.max_turns):
            if not live:
                break
            bar.set_postfix(turn=turn + 1, live=len(live))
            live = self._turn(turn, live, finish)
        bar.close()
        return [done[slot] for slot in range(len(jobs))]

    def _start(self, job: EpisodeJob) -> _Episode:
        messages = self.task.agent_messages(job.task, self.cfg.max_turns)
        return _Episode(job=job, messages=messages, prompt_ids=self.tokens.start(messages))

    def _turn(self, turn: int, live: list[tuple[int, _Episode]], finish) -> list[tuple[int, _Episode]]:
        sampling = SamplingConfig(temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens)
        seeds = [derive_seed(ep.job.seed, "turn", turn) for _, ep in live]
        start = time.perf_counter()
        gens = self.agent.generate([ep.prompt_ids for _, ep in live], sampling, seeds)
        self.stats.agent_calls += 1
        tokens = sum(len(g.token_ids) for g in gens)
        log.info(
            "turn %d: %d live episodes, %d agent tokens in %.1f s (%.0f tok/s)",
            turn + 1,
            len(live),
            tokens,
            time.perf_counter() - start,
            tokens / max(time.perf_counter() - start, 1e-9),
        )
        asking: list[tuple[int, _Episode]] = []
        for (slot, ep), gen in zip(live, gens):
            ep.record(gen)
            answered = self.task.parse_action(gen.text).is_answer
            if answered or turn == self.cfg.max_turns - 1:
                finish(slot, ep, answered)
            else:
                asking.append((slot, ep))
        return self._observe(turn, asking, finish)

    def _observe(self, turn: int, asking: list[tuple[int, _Episode]], finish) -> list[tuple[int, _Episode]]:
        if not asking:
            return []
        requests = [
            SimRequest(ep.job.task, ep.dialogue + [(ep.turns[-1].action, None)], derive_seed(ep.job.seed, "sim", turn))
            for _, ep in asking
        ]
        replies = self.simulator.reply(requests)
        self.stats.simulator_calls += 1
        still = []
        for (slot, ep), reply in zip(asking, replies):
            last = ep.turns[-1]
            last.observation = reply
            ep.dialogue.append((last.action, reply))
            ep.messages.append({"role": "user", "content": reply})
            ep.prompt_ids, reused = self.tokens.extend(last.prompt_ids + last.response_ids, ep.messages)
            self.stats.prompt_reuse += reused
            self.stats.prompt_reencoded += not reused
            if len(ep.prompt_ids) + self.cfg.max_tokens > self.cfg.max_model_len:
                self.stats.context_full += 1
                finish(slot, ep, False)
            else:
                still.append((slot, ep))
        return still
