"""Small hand-made records for unit tests."""

from __future__ import annotations

from components.data.records import Trajectory
from components.data.tasks import BackendTask


def make_task(name: str = "add", body: str = "return a + b") -> BackendTask:
    code = f"def {name}(a, b):\n    # combine the two numbers\n    {body}"
    return BackendTask(
        problem_description=f"Write a function. The signature of the function is: def {name}(a, b)",
        ground_truth=code,
        hidden_information=code,
        test_cases={f"test{i}": f"{name}({i}, {i + 1})" for i in range(1, 11)},
    )


def make_trajectory(
    task_index: int = 0, run_seed: int = 0, score: float | None = None, task_id: str = "x", **fields
) -> Trajectory:
    """An empty-dialogue trajectory; `fields` set any other Trajectory field."""
    values = dict(
        task_id=task_id,
        task_index=task_index,
        run_seed=run_seed,
        seed=0,
        messages=[],
        turns=[],
        answer="",
        answered=False,
        score=score,
    )
    return Trajectory(**(values | fields))


def make_meeting(split: str = "eval"):
    """An elicitation task: a meeting on Tuesday morning, online."""
    from components.tasks.elicitation.task import ElicitationRecord

    slots = {"day": "Tuesday", "time": "morning", "place": "online"}
    return ElicitationRecord(domain="meeting", request="Can you help me book a meeting?", slots=slots, split=split)
