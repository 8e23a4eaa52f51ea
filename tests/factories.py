"""Small hand-made records for unit tests."""
from __future__ import annotations

from components.data.tasks import BackendTask


def make_task(name: str = "add", body: str = "return a + b") -> BackendTask:
    code = f"def {name}(a, b):\n    # combine the two numbers\n    {body}"
    return BackendTask(
        problem_description=f"Write a function. The signature of the function is: def {name}(a, b)",
        ground_truth=code, hidden_information=code,
        test_cases={f"test{i}": f"{name}({i}, {i + 1})" for i in range(1, 11)},
    )
