"""The single-turn task interface CORY and PPO play: records, prompts, reward, held-out split.

Reads and writes no files itself; each task reads its own records (files named by its params
section). A task answers everything the algorithms and the orchestration ask of it, so neither names
a task: its rows for training and for the fixed held-out evaluation slice, the pioneer's (query-only)
prompt, the observer's prompt given the pioneer's answer, the reward of a batch of answers, and
whether that reward is 0/1 correctness (then pass@1 is reported beside the mean reward).

Ma et al. 2024 (arXiv 2410.06101, sec. 3.2; docs/algorithms.md "CORY"): the pioneer answers the query,
a1 ~ pi_1(.|q); the observer answers with the pioneer's answer in view, a2 ~ pi_2(.|q, a1); either
agent alone answers the query-only prompt at evaluation. The tasks: components/cory/gsm8k.py
(GSM8K, the paper's reasoning setting) and components/cory/reviews.py (the paper's IMDB setting,
offline); components/cory/registry.py names them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar


class PromptTask(ABC):
    """One single-turn task: built from its validated params section (`sections[0]`, its only one)."""

    name: ClassVar[str]  # what --task and params.yaml task.name call it
    sections: ClassVar[tuple[str]]  # its params.yaml section
    record_keys: ClassVar[tuple[str, ...]]  # `section.key` of each records file it reads (DVC dependencies)
    binary: ClassVar[bool]  # the reward is 0/1 correctness: pass@1 is reported beside the mean reward
    generator: ClassVar[str | None] = None  # the catalogue stage writing its records (None: pulled data)

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    @classmethod
    def file_keys(cls) -> tuple[str, ...]:
        """`section.key` of each records file (the collaborative tasks' Task.file_keys, the same call)."""
        return cls.record_keys

    @abstractmethod
    def train_rows(self) -> list[Any]:
        """Every training row (the iterations draw from them)."""

    @abstractmethod
    def eval_rows(self, limit: int) -> list[Any]:
        """The first `limit` held-out rows: the fixed slice every iteration is evaluated on; a
        ValueError naming the file when there are fewer."""

    @abstractmethod
    def query_prompt(self, row: Any) -> str:
        """The pioneer's prompt, also either agent's prompt when evaluated alone."""

    @abstractmethod
    def observer_prompt(self, row: Any, pioneer_answer: str) -> str:
        """The observer's prompt: the query with the pioneer's actual answer in view."""

    @abstractmethod
    def rewards(self, rows: Sequence[Any], answers: Sequence[str]) -> list[float]:
        """r(q, a) of each answer to its row, in order."""

    @abstractmethod
    def describe(self, row: Any) -> dict[str, str]:
        """What a reader of samples.jsonl needs beside the answer: `prompt` and `target` (the gold
        answer, or what the reward wants)."""
