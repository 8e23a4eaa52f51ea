"""Every params.yaml section and the config model that validates it (the sections' one registry).

A section's model is imported when the section is asked for, so a stage that reads a few sections
imports (and depends on) their config modules only: the generated dvc.yaml adds `section_module`
of each section a stage reads to its code deps (flows/planning/plan.py `dvc_stage`).
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator, Mapping

from pydantic import BaseModel

_AT: dict[str, str] = {  # section -> "module:class"
    "task": "components.config.sections:TaskSection",
    "data": "components.config.sections:DataConfig",
    "elicitation": "components.tasks.elicitation.config:ElicitationConfig",
    "frontend": "components.tasks.colbench_frontend.config:FrontendConfig",
    "cluster": "components.config.cluster:ClusterConfig",
    "model": "components.config.sections:ModelConfig",
    "episode": "components.config.sections:EpisodeSection",
    "eval": "components.config.sections:EvalConfig",
    "rollouts": "components.config.sections:RolloutsConfig",
    "train": "components.config.training:TrainConfig",
    "pairs": "components.config.training:PairsConfig",
    "critic": "components.config.training:CriticConfig",
    "candidates": "components.config.training:CandidatesConfig",
    "ranking": "components.config.training:RankingConfig",
    "actor": "components.config.training:ActorConfig",
    "cory": "components.config.cory:CoryConfig",
    "gsm8k": "components.config.prompt_tasks:GSM8KConfig",
    "reviews": "components.config.prompt_tasks:ReviewsConfig",
}


def named(at: str) -> Any:
    """The object "module:name" names, its module imported now (the registries' lazy entries)."""
    module, _, name = at.partition(":")
    return getattr(importlib.import_module(module), name)


class _Sections(Mapping[str, type[BaseModel]]):
    """Section name -> config model, each model's module imported on first use."""

    def __getitem__(self, name: str) -> type[BaseModel]:
        return named(_AT[name])

    def __iter__(self) -> Iterator[str]:
        return iter(_AT)

    def __len__(self) -> int:
        return len(_AT)


SECTIONS: Mapping[str, type[BaseModel]] = _Sections()


def section_module(name: str) -> str:
    """The dotted module that holds section `name`'s config model."""
    return _AT[name].partition(":")[0]


def section_of(model: type) -> str | None:
    """The section a config model validates (None for a model that is no section's), without
    importing any other section's module."""
    return next((name for name, at in _AT.items() if at == f"{model.__module__}:{model.__qualname__}"), None)
