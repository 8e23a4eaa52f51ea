"""The registered collaborative tasks, by name: adding a task is one module and one line here.

`sweetflow ... --task NAME` and params.yaml `task.name` pick one; the stage catalogue reads each
task's params sections and tasks file from its class (components/tasks/base.py). A task's module is
imported only when the task is asked for, so a stage's code dependencies (components/stages/
catalogue.py `code_deps`) hold the task it plays and not the others: the generated dvc.yaml adds the
played task's module (`task_module`) to the stage's own.
"""

from __future__ import annotations

from typing import Any

from components.config.schema import named
from components.tasks.base import Task

TASKS: dict[str, str] = {  # name -> "module:class"
    "colbench-backend": "components.tasks.colbench_backend.task:ColbenchBackend",
    "colbench-frontend": "components.tasks.colbench_frontend.task:ColbenchFrontend",
    "elicitation": "components.tasks.elicitation.task:ElicitationTask",
}


def task_module(name: str) -> str:
    """The dotted module that holds task `name`; a clear error naming the registered ones otherwise."""
    try:
        return TASKS[name].partition(":")[0]
    except KeyError:
        raise ValueError(f"unknown task '{name}' (registered: {', '.join(TASKS)})") from None


def task_class(name: str) -> type[Task]:
    """The task registered as `name` (its module imported now)."""
    task_module(name)  # a clear error for an unknown name
    return named(TASKS[name])


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
