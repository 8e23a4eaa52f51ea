"""The collaborative task interface: what every task gives the episode driver, the scorer, the critic
and the metrics, so that a new task is one module and one registry line (components/tasks/registry.py).

A task owns:
- its records (`record`, a pydantic model with a stable `task_id`), validated on load with
  file:line:field errors (components/data/records.py), the file holding them (`file_key`, a
  `section.key` of params.yaml: a DVC dependency of every stage that reads the tasks) and, when
  the records are generated rather than pulled, the catalogue stage that writes them (`generator`);
- its split (`load(split)`: all records of the split's file and the indices the split plays);
- the agent's instructions and first message (`agent_messages`) and answer extraction
  (`parse_action`: an answer carries `ANSWER_MARKER`, else the message is a question);
- its simulated humans: `llm` (any engine, prompted by `simulator_messages`) and the offline
  deterministic ones it names in `offline_simulators`;
- its scorer (`score`: untrusted output is never executed in the pipeline's process);
- the training-time information the critic sees (`training_info`, never shown to the actor);
- its reference answer (`reference_answer`: scores 1, the contract tests check it) and the groups
  its metrics are broken down by (`group`, e.g. a held-out domain), plus `score_alias`, an older
  name of `mean_score` its metrics keep (ColBench backend: `tests_passed`);
- optionally, the exact value of one agent turn (`turn_value`, e.g. elicitation's), against which
  the critic's turn rankings are measured, and scripted, scored demonstrations (`demonstrations`:
  the module writing them, named, not imported, so no stage depends on it) for a run whose agent
  never scores (the `tiny` profile).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel

from components.data.records import ScoreResult, read_jsonl
from components.data.split import Split

ANSWER_MARKER = "I WANT TO ANSWER:"
Dialogue = list[tuple[str, str | None]]  # (agent message, human reply); the last reply None = to answer


@dataclass(frozen=True)
class Action:
    """An agent message parsed under the protocol."""

    is_answer: bool
    content: str  # the answer (marker removed) or the question text


def parse_marked(message: str, marker: str = ANSWER_MARKER) -> Action:
    """An answer is what follows the first `marker` anywhere in the message; else a question."""
    at = message.find(marker)
    if at < 0:
        return Action(is_answer=False, content=message.strip())
    return Action(is_answer=True, content=message[at + len(marker) :].strip())


def chat_for_simulator(system: str, dialogue: Dialogue) -> list[dict[str, str]]:
    """A simulator's conversation: its instructions, then the dialogue with roles swapped (the
    agent's messages come as `user`, the human's replies as `assistant`)."""
    messages = [{"role": "system", "content": system}]
    for agent_msg, human_reply in dialogue:
        messages.append({"role": "user", "content": agent_msg})
        if human_reply is not None:
            messages.append({"role": "assistant", "content": human_reply})
    return messages


class Task(ABC):
    """One collaborative task family; built from its params sections (`sections`)."""

    name: ClassVar[str]
    record: ClassVar[type[BaseModel]]
    sections: ClassVar[tuple[str, ...]]  # params.yaml sections the task reads (besides `task`)
    file_key: ClassVar[str]  # `section.key` naming the tasks file (a DVC dependency)
    offline_simulators: ClassVar[tuple[str, ...]]  # deterministic simulator kinds besides `llm`
    score_alias: ClassVar[str | None] = None
    generator: ClassVar[str | None] = None  # the catalogue stage writing the records (None: pulled data)
    demonstrations: ClassVar[str | None] = None  # module with FILE and write(task, model, n_tasks, max_turns)
    pair_rule: ClassVar[str] = "best"  # trajectory pairs under pairs.rule auto (components/stages/pairs.py)

    def __init__(self, configs: dict[str, Any]) -> None:
        self.configs = configs  # section name -> validated section model

    @classmethod
    def file_keys(cls) -> tuple[str, ...]:
        """`file_key` as a tuple: what the orchestration asks of any task it plays (a single-turn
        task, components/cory/tasks.py, may read several files)."""
        return (cls.file_key,)

    # --- records and split -------------------------------------------------------------------
    @abstractmethod
    def tasks_file(self, split: Split) -> Path:
        """The file holding `split`'s records."""

    @abstractmethod
    def split_indices(self, records: Sequence[BaseModel], split: Split) -> list[int]:
        """Positions in `records` of the split's tasks, in file order."""

    def records(self, split: Split) -> list[BaseModel]:
        """All records of the split's file, validated (RecordError names file:line:field)."""
        return list(read_jsonl(self.tasks_file(split), self.record))

    def load(self, split: Split) -> tuple[list[BaseModel], list[int]]:
        """All records of the split's file and the indices the split plays."""
        records = self.records(split)
        return records, self.split_indices(records, split)

    def group(self, record: BaseModel) -> str | None:
        """The group a task's metrics are also reported under (None: no breakdown)."""
        return None

    # --- the agent ---------------------------------------------------------------------------
    @abstractmethod
    def agent_messages(self, record: BaseModel, max_turns: int) -> list[dict[str, str]]:
        """The agent's opening conversation: instructions, then the human's first message."""

    def parse_action(self, message: str) -> Action:
        return parse_marked(message)

    def final_answer(self, actions: Sequence[str]) -> str:
        """The answer scored, from the episode's agent messages: by default the last one's content
        (marker removed if present); a task may take it from earlier messages (frontend: the latest page)."""
        return self.parse_action(actions[-1]).content

    # --- the simulated human -----------------------------------------------------------------
    @abstractmethod
    def simulator_messages(self, record: BaseModel, dialogue: Dialogue) -> list[dict[str, str]]:
        """The llm simulator's conversation; the agent's messages come as `user`."""

    def check_simulator_engine(self, engine_kind: str) -> None:
        """Raise ValueError when the llm simulator cannot run on `engine_kind` for this task."""

    def reply_cut(self, episode_cut: int) -> int:
        """The simulator's reply cut in characters: `episode.sim_max_chars` unless the task has its own."""
        return episode_cut

    @abstractmethod
    def offline_simulator(self, kind: str, max_chars: int):
        """A deterministic simulator (components.episodes.simulators.Simulator) of `offline_simulators`."""

    # --- scoring and training ----------------------------------------------------------------
    @abstractmethod
    def score(self, records: Sequence[BaseModel], answers: Sequence[tuple[int, str]]) -> list[ScoreResult]:
        """Score each (task index, answer), in the order of `answers`; untrusted code never runs here."""

    @abstractmethod
    def training_info(self, record: BaseModel) -> str:
        """What the critic sees and the actor never does (SWEET-RL's c)."""

    @abstractmethod
    def reference_answer(self, record: BaseModel) -> str:
        """An answer that scores 1."""

    def turn_value(self, record: BaseModel, history: Dialogue, action: str, last_turn: bool) -> float | None:
        """The exact value of sending `action` after the dialogue `history` (the turns before it, each
        with the human's reply), `last_turn` when no turn follows it; None where the task cannot
        compute one (the default). What the critic's rankings are measured against."""
        return None
