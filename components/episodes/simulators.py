"""Simulated humans behind one interface: the `llm` one of every task, and ColBench backend's `retrieval`.

- `llm`: the protocol's simulator (docs/algorithms.md): an LLM prompted by the task (request and hidden
  information; `Task.simulator_messages`), greedy decoding (temperature 0), reply cut to
  `episode.sim_max_chars`. It runs on any engine, including an OpenAI-compatible endpoint hosting a
  large model. `conversation`, `sampling` and `reply_text` are its parts, which the per-arrival
  driver (async_driver.py) uses to send its requests through the agent's request stream when the
  two share one engine.
- each task's offline deterministic simulators (`Task.offline_simulator`); ColBench backend's is
  `retrieval`, defined here.
- `retrieval`: deterministic and offline. It splits the hidden information into lines, scores each
  line by the question's words it contains (identifiers split on `_` and case, weighted by how rare
  the word is among the lines), and answers with the best two lines (two "sentences") in their
  original order, or "I don't know." when no line shares a word with the question.
  How it differs from a human: it quotes the reference code verbatim instead of describing it, it
  cannot reason, paraphrase or infer intent, it ignores the dialogue before the last question, and
  vague questions ("any other details?") get "I don't know." It exists so a 135M agent can be run
  end to end offline, where a 135M model cannot play the human; published numbers use `llm`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from components.config.sections import SimulatorKind
from components.engines.base import Engine, Generation, SamplingConfig

DONT_KNOW = "I don't know."
_STOP = frozenset(
    "a an the and or of to in on for is are be it this that what which how do does should can "
    "i you we your my with as by if at from def return function python code please "
    "would could will there any other more".split()
)


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


def words(text: str) -> list[str]:
    """Lower-case word terms; identifiers are split on underscores and camelCase."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return [w.lower() for w in re.findall(r"[A-Za-z]+|\d+", spaced) if w.lower() not in _STOP]


@dataclass
class RetrievalSimulator:
    """Answers from the hidden-information lines that share the most (rare) words with the question."""

    max_chars: int = 400
    max_lines: int = 2
    name: str = field(default="retrieval", init=False)

    def reply(self, requests: Sequence[SimRequest]) -> list[str]:
        return [self._answer(r.task.hidden_information, r.dialogue[-1][0]) for r in requests]

    def _answer(self, hidden: str, question: str) -> str:
        lines = [ln.strip() for ln in hidden.splitlines() if ln.strip()]
        terms = [set(words(ln)) for ln in lines]
        doc_freq = Counter(t for ts in terms for t in ts)
        asked = set(words(question))
        scores = [sum(math.log(1 + len(lines) / doc_freq[t]) for t in asked & ts) for ts in terms]
        ranked = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
        best = sorted(ranked[: self.max_lines])
        if not best:
            return cut_reply(DONT_KNOW, self.max_chars)
        return cut_reply("Here is what I know: " + " ".join(lines[i] for i in best), self.max_chars)


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
