"""Command-line options and Prefect flow parameters derived from the config models, so a setting's
type and documentation live in one place (components/config/): a flow's parameters model holds
the chosen fields of a section, each optional (None keeps params.yaml's value) with the section's
description; `option` gives a command's parameter the same flag help."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import typer
from pydantic import BaseModel, Field, create_model


def optional_fields(section: type[BaseModel], names: Sequence[str]) -> dict[str, Any]:
    """`names` of the config model `section` as optional fields (default None) with its descriptions."""
    fields = section.model_fields
    return {
        name: (Optional[fields[name].annotation], Field(None, description=fields[name].description)) for name in names
    }


def flow_params(
    name: str, doc: str, section: type[BaseModel], names: Sequence[str], base: type[BaseModel] = BaseModel, **extra: Any
) -> type[BaseModel]:
    """A flow's parameters model (what the Prefect UI shows as a form): the section's `names`
    (optional) and `extra` fields of its own."""
    model = create_model(name, __base__=base, **optional_fields(section, names), **extra)
    model.__doc__ = doc
    return model


def cluster_field() -> tuple[Any, Any]:
    """The `overrides` parameter of the single-step flows: `cluster.key=value` settings (`-S`)."""
    return (
        list[str],
        Field(
            default_factory=list,
            description="cluster.key=value settings of where the step runs, e.g. cluster.backend=ray (-S, repeatable)",
        ),
    )


def task_help() -> str:
    """The help of the single-step flows' and commands' `task` (None: params.yaml's task.name)."""
    from components.tasks.registry import TASKS

    return f"collaborative task: {' | '.join(TASKS)} [params.yaml task.name]"


def task_field() -> tuple[Any, Any]:
    """The `task` parameter of the single-step flows (None: params.yaml's task.name)."""
    return (Optional[str], Field(None, description=task_help()))


EPISODE_FIELDS = ("model", "engine", "simulator", "simulator_model", "simulator_engine", "split", "limit", "out_dir")
"""The fields of an episode stage's section that its command and flow take as options."""


def option(model: type[BaseModel], name: str, section: str | None = None, *flags: str) -> Any:
    """The typer option of the field `name` of `model` (for a command's `Annotated` parameter): flag
    `--field-name` or `flags`, help from the field's description and, with a `section` (a params.yaml
    section's model), the key it overrides."""
    field = model.model_fields[name]
    help_text = field.description + (f" (params.yaml {section}.{name})" if section else "")
    return typer.Option(*(flags or ("--" + name.replace("_", "-"),)), help=help_text)
