"""Collaborative preference elicitation: a small, lexical task a 135M model can learn on CPU.

Reads: the tasks file of params `elicitation` (data/elicitation/tasks.jsonl, written by
`python -m components.tasks.elicitation.generate`; train and eval rows in one file, split by each
row's `split`). A task is an everyday domain (meeting, restaurant, trip, pizza, gift, haircut) with
three slots, each holding one single-word value (day: Tuesday); the agent sees only a vague request
("Can you help me book a meeting?"), asks about the slots, and answers with `I WANT TO ANSWER:`
followed by the values. One or two irrelevant details about the person are not scored.

Scoring is by slot: a slot is right when the answer names its value and no other value of that
slot (case-insensitive, whole words, a plural `s`/`es` allowed), so listing every value scores 0.
The `rules` simulator answers only the slots whose keywords or values the last question names.
The critic's training-time information c is the hidden preferences. The exact value of a turn
(`turn_value`) is known here: an answer's slot score, or the share of slots revealed once the human
has replied (what a perfect final answer would score). Not a task of the SWEET-RL
paper: it is the CPU demo's stand-in for ColBench, sized so that a few minutes of RL move it.
`group` reports "heldout" (the domains of `elicitation.heldout_domains`) and "seen" apart.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from components.data.records import ScoreResult
from components.data.split import Split
from components.tasks.base import ANSWER_MARKER, Dialogue, Task, chat_for_simulator
from components.tasks.elicitation.domains import DETAILS, DOMAINS, Slot

NOT_SURE = "I'm not sure what you mean."

AGENT_SYSTEM_PROMPT = (
    "You help a person with a request. The request leaves out what they want. Ask short questions, "
    "one per message, to learn their choices. You have at most {max_turns} messages. When you know, "
    "reply with '" + ANSWER_MARKER + "' followed by their choices."
)
SIMULATOR_SYSTEM_PROMPT = (
    "You are a person who asked an assistant: {request}\n"
    "What you want (only you know it): {preferences}.\n"
    "About you: {details}\n"
    "The assistant's messages come to you as user messages. Answer only what it asks, in one short "
    "sentence, using the words above. If it asks something vague, say you are not sure what it means."
)


@lru_cache(maxsize=None)
def _pattern(word: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(word) + r"(?:e?s)?\b", re.IGNORECASE)


def mentions(text: str, word: str) -> bool:
    """Whether `text` names `word` as a whole word (any case, a plural s/es allowed)."""
    return _pattern(word).search(text) is not None


class ElicitationRecord(BaseModel):
    """One elicitation task: the domain, the vague request, the hidden slot values and details."""

    model_config = ConfigDict(extra="forbid")
    domain: str = Field(description="one of DOMAINS")
    request: str = Field(min_length=1, description="the vague first message the agent sees")
    slots: dict[str, str] = Field(description="slot name -> the person's value (hidden)")
    details: list[str] = Field(default_factory=list, description="irrelevant facts about the person, not scored")
    split: Literal["train", "eval"]

    @field_validator("domain")
    @classmethod
    def _known_domain(cls, value: str) -> str:
        if value not in DOMAINS:
            raise ValueError(f"unknown domain '{value}' (domains: {', '.join(DOMAINS)})")
        return value

    @field_validator("slots")
    @classmethod
    def _slot_values(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        domain = DOMAINS.get(info.data.get("domain", ""))
        if domain is None:  # the domain's own error is reported
            return value
        names = [s.name for s in domain.slots]
        if sorted(value) != sorted(names):
            raise ValueError(f"slots must be exactly {', '.join(names)}, got {', '.join(value) or 'none'}")
        for slot in domain.slots:
            if value[slot.name] not in slot.values:
                raise ValueError(
                    f"slot '{slot.name}' value '{value[slot.name]}' is not one of {', '.join(slot.values)}"
                )
        return {name: value[name] for name in names}  # domain order

    @property
    def task_id(self) -> str:
        """Stable id: a hash of the content (domain, request, slots, details), not of the split."""
        content = {"domain": self.domain, "request": self.request, "slots": self.slots, "details": self.details}
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]

    def preferences(self) -> str:
        """`day: Tuesday; time: morning; place: online`."""
        return "; ".join(f"{name}: {value}" for name, value in self.slots.items())


def asked_slots(record: ElicitationRecord, question: str) -> list[Slot]:
    """The slots whose keywords or values the question names, in domain order."""
    return [s for s in DOMAINS[record.domain].slots if any(mentions(question, w) for w in s.keywords + s.values)]


def rules_reply(record: ElicitationRecord, question: str) -> str:
    """The rule-based human's reply: the asked slots' values, then any detail whose topic is named."""
    parts = [f"the {s.name} is {record.slots[s.name]}" for s in asked_slots(record, question)]
    told = [d for d in record.details if any(mentions(question, w) for w in DETAILS.get(d, ()))]
    if not parts and not told:
        return NOT_SURE
    sentence = " and ".join(parts) + "." if parts else ""
    sentence = sentence[:1].upper() + sentence[1:]
    return " ".join([sentence, *told]).strip()


@dataclass
class RulesSimulator:
    """Deterministic human: answers only the slots the last agent message asks about."""

    max_chars: int = 400
    name: str = field(default="rules", init=False)

    def reply(self, requests: Sequence) -> list[str]:
        return [rules_reply(r.task, r.dialogue[-1][0]).strip()[: self.max_chars] for r in requests]


def grade(record: ElicitationRecord, answer: str) -> tuple[int, list[str]]:
    """(right slots, names of the wrong or missing ones): right = its value named, no other of its values."""
    wrong = []
    for slot in DOMAINS[record.domain].slots:
        named = [v for v in slot.values if mentions(answer, v)]
        if named != [record.slots[slot.name]]:
            wrong.append(slot.name)
    return len(record.slots) - len(wrong), wrong


def score_one(index: int, record: ElicitationRecord, answer: str) -> ScoreResult:
    right, wrong = grade(record, answer)
    total = len(record.slots)
    error = f"wrong or missing: {', '.join(wrong)}" if wrong else None
    return ScoreResult(index=index, score=right / total, passed=right, total=total, success=not wrong, error=error)


class ElicitationTask(Task):
    name = "elicitation"
    record = ElicitationRecord
    sections = ("elicitation",)
    file_key = "elicitation.file"
    offline_simulators = ("rules",)
    generator = "elicitation_tasks"
    demonstrations = "components.tasks.elicitation.demonstrations"

    def tasks_file(self, split: Split) -> Path:
        return self.configs["elicitation"].file

    def split_indices(self, records: Sequence[ElicitationRecord], split: Split) -> list[int]:
        if split == Split.all:
            return list(range(len(records)))
        return [i for i, r in enumerate(records) if r.split == split.value]

    def group(self, record: ElicitationRecord) -> str:
        return "heldout" if record.domain in self.configs["elicitation"].heldout_domains else "seen"

    def agent_messages(self, record: ElicitationRecord, max_turns: int) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": AGENT_SYSTEM_PROMPT.format(max_turns=max_turns)},
            {"role": "user", "content": record.request},
        ]

    def simulator_messages(self, record: ElicitationRecord, dialogue: Dialogue) -> list[dict[str, str]]:
        system = SIMULATOR_SYSTEM_PROMPT.format(
            request=record.request, preferences=record.preferences(), details=" ".join(record.details) or "nothing"
        )
        return chat_for_simulator(system, dialogue)

    def offline_simulator(self, kind: str, max_chars: int) -> RulesSimulator:
        if kind != "rules":
            raise ValueError(f"task {self.name} has no offline simulator '{kind}' (it has: rules)")
        return RulesSimulator(max_chars=max_chars)

    def score(self, records: Sequence[ElicitationRecord], answers: Sequence[tuple[int, str]]) -> list[ScoreResult]:
        results = []
        for index, answer in answers:
            if not 0 <= index < len(records):
                error = f"task index {index} out of range ({len(records)} tasks)"
                results.append(ScoreResult.failed(index, 0, error))
            else:
                results.append(score_one(index, records[index], answer))
        return results

    def training_info(self, record: ElicitationRecord) -> str:
        details = " ".join(record.details) or "none"
        return f"Preferences: {record.preferences()}. Details: {details}"

    def reference_answer(self, record: ElicitationRecord) -> str:
        return ", ".join(record.slots.values())

    def turn_value(self, record: ElicitationRecord, history: Dialogue, action: str, last_turn: bool) -> float:
        """Exact under the rules simulator: an answer (or any last message) is worth its slot score; a
        question, the share of slots the dialogue has revealed once the human has replied to it (the
        score a perfect final answer would then get)."""
        if last_turn or self.parse_action(action).is_answer:
            return score_one(0, record, self.final_answer([action])).score
        replies = [reply or "" for _, reply in history] + [rules_reply(record, action)]
        revealed = [s for s in DOMAINS[record.domain].slots if any(mentions(r, record.slots[s.name]) for r in replies)]
        return len(revealed) / len(record.slots)
