"""The task a run plays, by name, from either registry: the collaborative tasks SWEET-RL and its
baselines play (components/tasks/registry.py) or the single-turn ones CORY and PPO play
(components/cory/registry.py). Both kinds answer what orchestration asks of a task (`name`,
`sections`, `file_keys()`, `generator`), so flows ask the task and never name one. Kept out of
components so that a stage's code dependencies stay those of the tasks it can play.
"""

from __future__ import annotations

from components.config.sections import ConfigError
from components.cory.registry import PROMPT_TASKS, prompt_task_class
from components.tasks.registry import TASKS, task_class


def played_class(name: str, single_turn: bool) -> type:
    """The class of task `name` for a single-turn (cory/ppo) or a collaborative algorithm; a
    single-turn algorithm given a collaborative name plays the default single-turn task (the
    stage's own rule, components/cory/registry.py)."""
    if single_turn:
        return prompt_task_class(name)
    if name not in TASKS:
        raise ConfigError(f"unknown task '{name}' ({kinds()})")
    return task_class(name)


def kinds() -> str:
    """The registered task names of both kinds, for error messages."""
    return f"collaborative: {', '.join(TASKS)}; single-turn, for cory/ppo: {', '.join(PROMPT_TASKS)}"
