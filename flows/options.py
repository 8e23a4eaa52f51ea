"""Command-line options and Prefect flow parameters derived from the config models, so a setting's
type and documentation live in one place (components/config/): a flow's parameters model holds
the chosen fields of a section, each optional (None keeps params.yaml's value) with the section's
description, and `cli_options` turns such a model into the command's typer options."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

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


def cluster_option() -> inspect.Parameter:
    """The single-step commands' `-S/--set`, for the cluster section only."""
    return extra_option(
        "overrides",
        Optional[list[str]],
        typer.Option(None, "-S", "--set", help="cluster.key=value: where the step runs, e.g. -S cluster.backend=ray"),
    )


def task_field() -> tuple[Any, Any]:
    """The `task` parameter of the single-step flows (None: params.yaml's task.name)."""
    from components.tasks.registry import TASKS

    return (Optional[str], Field(None, description=f"collaborative task: {' | '.join(TASKS)} [params.yaml task.name]"))


EPISODE_FIELDS = ("model", "engine", "simulator", "simulator_model", "simulator_engine", "split", "limit", "out_dir")
"""The fields of an episode stage's section that its command and flow take as options."""


def cli_options(
    params: type[BaseModel],
    section: str | None,
    names: Sequence[str],
    flags: dict[str, tuple[str, ...]] | None = None,
    extra: Sequence[inspect.Parameter] = (),
) -> Callable[[Callable], Callable]:
    """A decorator giving a typer command one option per field `names` of `params` (flag `--field-name`
    or `flags[field]`, help from the field) before `extra`. With a `section` (a params.yaml section's
    model), every option defaults to None (keep params.yaml's value) and its help names the key;
    without, the options take the model's defaults (a flow's own parameters)."""
    flags = flags or {}

    def option(name: str) -> inspect.Parameter:
        field = params.model_fields[name]
        names_ = flags.get(name, ("--" + name.replace("_", "-"),))
        help_text = field.description + (f" (params.yaml {section}.{name})" if section else "")
        default = None if section or field.default_factory is not None else field.default
        annotation = Optional[field.annotation] if default is None else field.annotation
        return inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=annotation,
            default=typer.Option(default, *names_, help=help_text),
        )

    def decorate(command: Callable) -> Callable:
        command.__signature__ = inspect.Signature([*(option(n) for n in names), *extra])
        return command

    return decorate


def extra_option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """An option of the command's own (not a section field), e.g. `--seeds`, `--register`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)
