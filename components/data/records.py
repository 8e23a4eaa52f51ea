"""Typed records that steps exchange through JSONL files, and their one reader/writer.

Every row is validated on read: a bad row raises `RecordError` naming the file, the 1-based line
and the offending field, so nothing downstream runs on invalid data (docs/design.md convention 4).
Writers append and flush row by row, so a crash loses at most the row being written.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)


class ScoreResult(BaseModel):
    """Score of one answer on one task."""

    index: int = Field(description="0-based index of the task in the tasks list/file")
    score: float = Field(ge=0.0, le=1.0, description="graded score: passed / total")
    passed: int = Field(ge=0)
    total: int = Field(ge=0)
    success: bool = Field(description="every part right (score == 1.0)")
    error: str | None = Field(default=None, description="why the answer lost points, if known")

    @classmethod
    def failed(cls, index: int, total: int, error: str) -> "ScoreResult":
        """Score 0 of `total` parts, and why (an answer that could not be scored, or a bad task index)."""
        return cls(index=index, score=0.0, passed=0, total=total, success=False, error=error)


class RecordError(ValueError):
    """A JSONL row that does not match its record type."""


class Turn(BaseModel):
    """One agent action with the exact tokens it was generated from (convention 11)."""

    model_config = ConfigDict(extra="forbid")
    index: int = Field(ge=0, description="0-based agent turn number")
    action: str = Field(description="the agent's message text")
    prompt_ids: list[int] = Field(default_factory=list, description="token ids fed to the actor")
    response_ids: list[int] = Field(default_factory=list, description="sampled token ids")
    response_logprobs: list[float] = Field(default_factory=list, description="log-prob per sampled token")
    observation: str | None = Field(default=None, description="simulator reply that followed, if any")


class Trajectory(BaseModel):
    """One collaborative episode on one task, with its score once scored."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    task_index: int = Field(ge=0, description="0-based line of the task in its tasks file")
    run_seed: int = Field(description="the run seed the episode seed was derived from")
    sample: int = Field(0, ge=0, description="sample number of this task under the run seed")
    seed: int = Field(description="the episode's own seed")
    messages: list[dict[str, str]] = Field(description="agent view: system, then user/assistant turns")
    turns: list[Turn]
    answer: str = Field(description="the final answer (code), marker removed")
    answered: bool = Field(description="True when the agent used the answer marker")
    score: float | None = None
    passed: int | None = None
    total: int | None = None
    success: bool | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        """Unique within a rollouts file: task line / run seed / sample."""
        return f"{self.task_index}/{self.run_seed}/{self.sample}"


class TrajectoryPair(BaseModel):
    """A preference between two trajectories of one task (SWEET-RL step 2), by trajectory key."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    task_index: int = Field(ge=0)
    chosen: str = Field(description="key of the chosen trajectory (Trajectory.key)")
    rejected: str = Field(description="key of the rejected trajectory")
    chosen_score: float
    rejected_score: float


class Candidate(BaseModel):
    """One sampled candidate action for a turn state; `score` is the critic's advantage once ranked."""

    model_config = ConfigDict(extra="forbid")
    text: str
    response_ids: list[int]
    score: float | None = None


class TurnCandidates(BaseModel):
    """N candidate actions sampled from the actor for one turn state (SWEET-RL step 4)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    task_index: int = Field(ge=0)
    trajectory: str = Field(description="key of the trajectory the state comes from")
    turn: int = Field(ge=0, description="agent turn whose state (history before it) is used")
    prompt_ids: list[int] = Field(min_length=1, description="the state as the actor's prompt ids")
    candidates: list[Candidate] = Field(min_length=1)


class TurnPair(BaseModel):
    """A turn-level preference between two candidate actions of one state (SWEET-RL step 6)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    trajectory: str
    turn: int = Field(ge=0)
    prompt_ids: list[int] = Field(min_length=1)
    chosen_ids: list[int] = Field(min_length=1)
    rejected_ids: list[int] = Field(min_length=1)
    chosen_score: float
    rejected_score: float


def _where(path: Path, line_no: int) -> str:
    return f"{path}:{line_no}"


def read_jsonl(path: Path, record: type[R]) -> Iterator[R]:
    """Yield validated records; raise RecordError naming file, line and field on the first bad row."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            yield parse_row(line, record, _where(path, line_no))


def parse_row(line: str, record: type[R], where: str) -> R:
    """Parse one JSON line into `record`, with an error message that says where and what."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(raw, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    try:
        return record.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "<row>"
        raise RecordError(f"{where}: field '{field}': {first['msg']}") from None


def write_jsonl(path: Path, rows: Iterable[BaseModel | dict], append: bool = False) -> int:
    """Write rows (records or plain dicts) as JSON lines; return how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for row in rows:
            data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
            fh.write(json.dumps(data, ensure_ascii=False) + "\n")
            fh.flush()
            n += 1
    return n


def replace_jsonl(path: Path, rows: Iterable[BaseModel | dict]) -> int:
    """`write_jsonl` to a temporary file beside `path`, then renamed over it: a reader (or a crash)
    sees the old file or the new one, never half of one; returns how many rows were written."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = write_jsonl(tmp, rows)
    os.replace(tmp, path)
    return n


def read_resumable(path: Path, record: type[R]) -> list[R]:
    """Records of a file being appended to by a step that may have crashed mid-row.

    A torn final row (no trailing newline, not parseable: a write cut by a kill or power loss) is
    dropped, cut from the file and reported as a warning, so the step redoes it and appends after
    the last whole row; a whole final row whose newline was cut (a full disk may cut a write
    there) is kept and its newline written; any other bad row still raises RecordError.
    """
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    rows: list[R] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = line_no == len(lines) and not text.endswith("\n")
        try:
            rows.append(parse_row(line, record, _where(path, line_no)))
        except RecordError:
            if not torn:
                raise
            path.write_text(text[: len(text) - len(line)], encoding="utf-8")
            log.warning("%s: dropped its torn last row (%d bytes, an interrupted write); it is redone", path, len(line))
        else:
            if torn:  # whole, but the write was cut before its newline: end it, or the next append joins it
                with path.open("a", encoding="utf-8") as fh:
                    fh.write("\n")
    return rows
