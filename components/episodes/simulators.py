"""Simulated humans behind one interface: the `llm` one of every task, and each task's offline ones.

- `llm`: the protocol's simulator (docs/algorithms.md): an LLM prompted by the task (request and hidden
  information; `Task.simulator_messages`), greedy decoding (temperature 0), reply cut to
  `episode.sim_max_chars`. It runs on any engine, including an OpenAI-compatible endpoint hosting a
  large model. `conversation`, `sampling` and `reply_text` are its parts, which the per-arrival
  driver (async_driver.py) uses to send its requests through the agent's request stream when the
  two share one engine.
- each task's offline deterministic simulators (`Task.offline_simulator`), in the task's package
  (ColBench backend's `retrieval`: components/tasks/colbench_backend/simulator.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from components.config.sections import SimulatorKind
from components.engines.base import Engine, Generation, SamplingConfig

DONT_KNOW = "I don't know."


@dataclass
class SimRequest:
    """One reply to produce: the task's record and the dialogue, whose last pair has reply None."""

    task: Any
    dialogue: list[tuple[str, str | None]]
    seed: int = 0


class Simulator(Protocol):
    name: str

    def reply(self, requests: Sequence[SimRequest]) -> list[str]: ...


def cut_reply(reply: str, max_chars: int) -> str:
    """The simulator's reply, stripped and cut to `max_chars` characters."""
    return reply.strip()[:max_chars]


@dataclass
class LLMSimulator:
    """The protocol's LLM simulator on any engine (greedy decoding), prompted by the task."""

    engine: Engine
    task: Any  # components.tasks.base.Task
    max_tokens: int = 128
    max_chars: int = 400
    name: str = field(default="llm", init=False)

    def reply(self, requests: Sequence[SimRequest]) -> list[str]:
        if not requests:
            return []
        conversations = [self.conversation(r) for r in requests]
        generations = self.engine.chat(conversations, self.sampling, [r.seed for r in requests])
        return [self.reply_text(g) for g in generations]

    def conversation(self, request: SimRequest) -> list[dict[str, str]]:
        """The simulator's chat for one request (the task's prompt and the dialogue so far)."""
        return self.task.simulator_messages(request.task, request.dialogue)

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(temperature=0.0, max_tokens=self.max_tokens)

    def reply_text(self, generation: Generation) -> str:
        """The reply a generation gives: cut to max_chars; an empty one becomes "I don't know."."""
        return cut_reply(generation.text, self.max_chars) or cut_reply(DONT_KNOW, self.max_chars)


def make_simulator(
    kind: SimulatorKind | None, task, engine: Engine | None, max_tokens: int, max_chars: int
) -> Simulator:
    """The simulator named by `kind` for `task` (None: the task's first offline one); `llm` needs an engine."""
    if kind != SimulatorKind.llm:
        name = kind.value if kind else task.offline_simulators[0]
        if name not in task.offline_simulators:
            valid = ", ".join(("llm", *task.offline_simulators))
            raise ValueError(f"task {task.name} has no simulator '{name}' (it has: {valid})")
        return task.offline_simulator(name, max_chars)
    if engine is None:
        raise ValueError("the llm simulator needs an engine (set --simulator-model or use the agent's engine)")
    return LLMSimulator(engine=engine, task=task, max_tokens=max_tokens, max_chars=max_chars)
