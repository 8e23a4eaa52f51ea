"""The registered collaborative tasks, by name: adding a task is one module and one line here.

`sweetflow ... --task NAME` and params.yaml `task.name` pick one; the stage catalogue reads each
task's params sections and tasks file from its class (components/tasks/base.py).
"""

from __future__ import annotations

from typing import Any

from components.tasks.base import Task
from components.tasks.colbench_backend import ColbenchBackend
from components.tasks.colbench_frontend import ColbenchFrontend
from components.tasks.elicitation import ElicitationTask

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (ColbenchBackend, ColbenchFrontend, ElicitationTask)}


def task_class(name: str) -> type[Task]:
    """The task registered as `name`; a clear error naming the registered ones otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task '{name}' (registered: {', '.join(TASKS)})") from None


def make_task(name: str, configs: dict[str, Any]) -> Task:
    """The task `name` built from its validated params sections (section name -> config model)."""
    cls = task_class(name)
    missing = [s for s in cls.sections if s not in configs]
    if missing:
        raise ValueError(f"task {name} needs the params section(s) {', '.join(missing)}")
    return cls({s: configs[s] for s in cls.sections})


def task_from_sections(sections: dict[str, Any]) -> Task:
    """The task a stage plays, from its validated sections (`task` names it; its own sections follow)."""
    return make_task(sections["task"].name, sections)


def task_sections(name: str) -> tuple[str, ...]:
    """The params sections task `name` reads (for components.stages.cli.stage_cli)."""
    return task_class(name).sections
