"""The score of one answer on one task: what every task's scorer returns."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
