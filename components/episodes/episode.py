"""One collaborative episode's state and the steps every episode driver applies to it.

Reads: the task (its prompts, its action parser, its final answer). Writes: nothing; the drivers
(driver.py turn-synchronous, async_driver.py per-arrival) hand the finished `Trajectory` records
(components/data/records.py) to their caller. Both drivers call the same `EpisodeSteps`, so an
episode records the same fields, token ids and seeds whichever driver plays it.

Seeds: each episode's seed is derived from the run seed, the task id and the sample number
(`episode_seed`); turn t's agent request seed is `derive_seed(episode seed, "turn", t)` and its
simulator request seed `derive_seed(episode seed, "sim", t)`, so an episode samples the same way
whatever else shares its batch and whenever its request is sent (where the engine honours
per-request seeds; see the engine's docstring).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from components.data.records import Trajectory, Turn
from components.engines.base import Generation
from components.episodes.simulators import SimRequest
from components.episodes.tokens import DialogueTokens
from components.tasks.base import Task


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
class Episode:
    """An episode in flight: its job, the agent's chat so far, and the next prompt's token ids."""

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
    """Counts and times of one driver run. `agent_calls`/`simulator_calls` count engine calls: one
    batch per turn for the sync driver, one request (agent) or one arrival batch (offline or
    separate-engine simulator) for the async one. `agent_wait_s` is the time the driver blocked on
    the agent engine, `simulator_s` the time in simulator calls; the rest of a run is the driver's
    own Python (tokenizing, parsing, the on_done callback)."""

    agent_calls: int = 0
    simulator_calls: int = 0
    prompt_reuse: int = 0
    prompt_reencoded: int = 0
    context_full: int = 0
    agent_wait_s: float = 0.0
    simulator_s: float = 0.0


class EpisodeSteps:
    """What happens to one episode between engine calls, whichever driver makes the calls."""

    def __init__(self, tokenizer, cfg: EpisodeConfig, task: Task, stats: DriverStats) -> None:
        self.tokens, self.cfg, self.task, self.stats = DialogueTokens(tokenizer), cfg, task, stats

    def start(self, job: EpisodeJob) -> Episode:
        messages = self.task.agent_messages(job.task, self.cfg.max_turns)
        return Episode(job=job, messages=messages, prompt_ids=self.tokens.start(messages))

    @staticmethod
    def agent_seed(ep: Episode) -> int:
        """The seed of the episode's next agent request (turn = turns recorded so far)."""
        return derive_seed(ep.job.seed, "turn", len(ep.turns))

    def act(self, ep: Episode, gen: Generation) -> bool | None:
        """Record the agent's response: True = answered, False = out of turns, None = asks on."""
        ep.record(gen)
        if self.task.parse_action(gen.text).is_answer:
            return True
        return False if len(ep.turns) == self.cfg.max_turns else None

    @staticmethod
    def sim_request(ep: Episode) -> SimRequest:
        """The simulator's request for the episode's last question."""
        seed = derive_seed(ep.job.seed, "sim", len(ep.turns) - 1)
        return SimRequest(ep.job.task, ep.dialogue + [(ep.turns[-1].action, None)], seed)

    def observe(self, ep: Episode, reply: str) -> bool:
        """Add the human's reply and extend the next prompt; False when the context is then full."""
        last = ep.turns[-1]
        last.observation = reply
        ep.dialogue.append((last.action, reply))
        ep.messages.append({"role": "user", "content": reply})
        ep.prompt_ids, reused = self.tokens.extend(last.prompt_ids + last.response_ids, ep.messages)
        self.stats.prompt_reuse += reused
        self.stats.prompt_reencoded += not reused
        if len(ep.prompt_ids) + self.cfg.max_tokens > self.cfg.max_model_len:
            self.stats.context_full += 1
            return False
        return True

    def trajectory(self, ep: Episode, answered: bool) -> Trajectory:
        return ep.finish(answered, self.task.final_answer([t.action for t in ep.turns]))
