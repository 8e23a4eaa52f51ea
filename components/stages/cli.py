"""The command line every stage module shares: `python -m components.stages.<stage> [ARGS]`.

A stage reads the params file (`$SWEETFLOW_PARAMS`, else ./params.yaml) and validates the sections
the stage catalogue says it reads (for a stage that plays a task: `task`, then the sections of the
task it names); DVC runs it this way (`dvc repro` of a generated dvc.yaml),
and so does every sweetflow command. ARGS are the stage's own (`trajectory`/`turn` for pairs,
`--model`/`--out` for an evaluation).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable, Sequence

from components.config.schema import SECTIONS
from components.config.sections import ConfigError, TaskSection, load_section, params_file
from components.stages.catalogue import TASK, stages_of_module


def stage_cli(
    module: str, task_sections: Callable[[str], Sequence[str]] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The validated sections `module`'s stage reads, and its own arguments; exits with the
    config error (file, section, field) on bad params. A stage that plays a task passes
    `task_sections` (task name -> its sections; components/tasks/registry.py), so that only such a
    stage imports the tasks' code."""
    stages = stages_of_module(module)
    if not stages or any(s.sections != stages[0].sections for s in stages):
        raise ValueError(f"{module} is not one stage of the catalogue (or its stages read other sections)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = sys.argv[1:]
    if args[:1] in (["-h"], ["--help"]):
        print(
            f"python -m {module} {' '.join(stages[0].args)}\n  {stages[0].label} stage; reads sections "
            f"{', '.join(stages[0].sections)} of {params_file()} ($SWEETFLOW_PARAMS)"
        )
        raise SystemExit(0)
    try:
        names = stages[0].sections
        if TASK in names:
            if task_sections is None:
                raise ValueError(f"{module} plays a task: pass task_sections to stage_cli")
            names = stages[0].sections_for(task_sections(load_section(TaskSection, TASK).name))
        return {name: load_section(SECTIONS[name], name) for name in names}, args
    except (ConfigError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
