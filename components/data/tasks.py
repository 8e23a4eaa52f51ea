"""ColBench task records and their validated loaders.

Reads: data/colbench/backend_test.jsonl and frontend_test.jsonl (DVC-tracked). A backend task is a vague request whose
last sentence gives the function signature, the reference solution (`ground_truth`), the
information the simulated human may draw on (`hidden_information`, equal to the reference in
this release) and ten test calls whose expected values are the reference's outputs (docs/algorithms.md).
A frontend task is a short description of a web page and the reference page (HTML with Tailwind).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from components.data.records import read_jsonl


def content_id(description: str, reference: str) -> str:
    """A task's stable id: a hash of its request and its reference (independent of file order)."""
    return hashlib.sha256((description + "\0" + reference).encode()).hexdigest()[:16]


class BackendTask(BaseModel):
    """One ColBench backend programming task."""

    model_config = ConfigDict(extra="ignore")
    problem_description: str = Field(min_length=1)
    ground_truth: str = Field(min_length=1)
    hidden_information: str = Field(min_length=1)
    test_cases: dict[str, str] = Field(min_length=1)

    @field_validator("test_cases")
    @classmethod
    def _calls_not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        empty = [k for k, v in value.items() if not v.strip()]
        if empty:
            raise ValueError(f"empty test call(s): {', '.join(empty)}")
        return value

    @property
    def task_id(self) -> str:
        """Stable id: a hash of the request and the reference (independent of file order)."""
        return content_id(self.problem_description, self.ground_truth)


class FrontendTask(BaseModel):
    """One ColBench frontend design task: a short description and the reference page (HTML)."""

    model_config = ConfigDict(extra="ignore")
    problem_description: str = Field(min_length=1)
    ground_truth: str = Field(min_length=1)

    @property
    def task_id(self) -> str:
        """Stable id: a hash of the description and the reference page (independent of file order)."""
        return content_id(self.problem_description, self.ground_truth)


def load_backend_tasks(path: Path) -> list[BackendTask]:
    """Load and validate every task; the first bad row raises RecordError (file, line, field)."""
    return list(read_jsonl(Path(path), BackendTask))
