"""Deterministic train/eval split of ColBench backend tasks.

Offline only the public *test* file (1000 tasks) exists, so we split it ourselves: a task goes
to `eval` when the first 8 bytes of sha256(salt + task_id), read as an integer, fall below
`eval_fraction` of 2**64; otherwise to `train`. The task id hashes the task's own text, so the split
does not depend on file order, survives appending tasks, and changes only with the salt.
With hub data (`--from-hub`) the official train and test files are used as they are.
"""

from __future__ import annotations

import hashlib
from enum import Enum
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # an annotation only: the split needs no task code
    from components.data.tasks import BackendTask


class Split(str, Enum):
    train = "train"
    eval = "eval"
    all = "all"


def hashed_below(text: str, fraction: float) -> bool:
    """Whether the first 8 bytes of sha256(text), as an integer, fall below `fraction` of 2**64:
    a stable, order-independent draw of about `fraction` of all texts."""
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


def in_eval(task_id: str, eval_fraction: float, salt: str) -> bool:
    """Whether the task with this id belongs to the eval split."""
    return hashed_below(salt + task_id, eval_fraction)


def select(tasks: Sequence[BackendTask], split: Split, eval_fraction: float, salt: str) -> list[int]:
    """Indices (positions in `tasks`) of the tasks in `split`, in file order."""
    if split == Split.all:
        return list(range(len(tasks)))
    want_eval = split == Split.eval
    return [i for i, t in enumerate(tasks) if in_eval(t.task_id, eval_fraction, salt) == want_eval]
