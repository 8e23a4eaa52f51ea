"""The registered single-turn tasks CORY and PPO play, by name: adding one is a module and a line here.

`sweetflow run --algo cory|ppo --task NAME` and params.yaml `task.name` pick one; a run whose
`task.name` names a collaborative task (params.yaml's default, colbench-backend) plays
`DEFAULT_PROMPT_TASK`, so `--algo cory` alone keeps meaning GSM8K. The stage catalogue reads each
task's params section and records files from its class (components/cory/tasks.py).
"""

from __future__ import annotations

from typing import Any

from components.cory.gsm8k import GSM8KTask
from components.cory.reviews import ReviewsTask
from components.cory.tasks import PromptTask

PROMPT_TASKS: dict[str, type[PromptTask]] = {cls.name: cls for cls in (GSM8KTask, ReviewsTask)}
DEFAULT_PROMPT_TASK = "gsm8k"  # what cory/ppo play when task.name names a collaborative task


def prompt_task_class(name: str) -> type[PromptTask]:
    """The single-turn task `name`, or the default one when `name` is not a single-turn task."""
    return PROMPT_TASKS.get(name, PROMPT_TASKS[DEFAULT_PROMPT_TASK])


def prompt_task_sections(name: str) -> tuple[str, ...]:
    """The params sections the task played under `task.name` = `name` reads (for stage_cli)."""
    return prompt_task_class(name).sections


def make_prompt_task(sections: dict[str, Any]) -> PromptTask:
    """The task a CORY/PPO stage plays, from its validated sections (`task` names it)."""
    cls = prompt_task_class(sections["task"].name)
    return cls(sections[cls.sections[0]])
