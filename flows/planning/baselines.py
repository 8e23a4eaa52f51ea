"""The names `sweetflow run --baselines` takes: each an algorithm trained on iteration 1's rollouts
beside the run's own, with settings applied over the run's parameters (the SWEET-RL ablations of
issue 26: the untrained critic, a critic without c, either ranking baseline). Their traits live in
this one table (BASELINES); flows/planning/plan.py turns a name into its parameters, folder and stages.

Reads nothing and writes nothing: the table, a name's parameters, and the checks of those
parameters (ConfigError before any step runs).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from components.config.schema import SECTIONS
from components.config.sections import ConfigError, error_lines
from components.config.training import Baseline as RankingBaseline
from components.config.training import CriticChoice, Information


@dataclass(frozen=True)
class Comparison:
    """A `--baselines` name: the algorithm it trains (sweet | mtdpo | rft) and the `settings`
    (`section.key`, value) it applies over the run's parameters."""

    name: str
    algo: str
    about: str
    settings: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """`algo sweet, ranking.critic=untrained`: what sets it apart."""
        return ", ".join([f"algo {self.algo}", *(f"{k}={v}" for k, v in self.settings)])


BASELINES: dict[str, Comparison] = {
    c.name: c
    for c in (
        Comparison("sweet", "sweet", "SWEET-RL"),
        Comparison("mtdpo", "mtdpo", "multi-turn DPO"),
        Comparison("rft", "rft", "rejection fine-tuning"),
        Comparison(
            "sweet-untrained",
            "sweet",
            "SWEET-RL ranked by the untrained critic, the base model with c: no critic training",
            (("ranking.critic", CriticChoice.untrained.value),),
        ),
        Comparison(
            "sweet-noc",
            "sweet",
            "SWEET-RL whose critic never sees c",
            (("critic.information", Information.none.value),),
        ),
        Comparison(
            "sweet-reference",
            "sweet",
            "SWEET-RL with ranking baseline reference, the paper's",
            (("ranking.baseline", RankingBaseline.reference.value),),
        ),
        Comparison(
            "sweet-actor",
            "sweet",
            "SWEET-RL with ranking baseline actor, the authors' code",
            (("ranking.baseline", RankingBaseline.actor.value),),
        ),
    )
}


def variant_doc(doc: dict[str, Any], comparison: Comparison) -> dict[str, Any]:
    """A copy of the run parameters `doc` with the baseline's algorithm and settings."""
    out = copy.deepcopy(doc)
    out["actor"]["algo"] = comparison.algo
    for key, value in comparison.settings:
        section, _, name = key.partition(".")
        out[section][name] = value
    return out


def identity(doc: dict[str, Any]) -> str:
    """Parameters as one comparable string: two baselines with the same one would train the same."""
    return json.dumps(doc, sort_keys=True, default=str)


def check_settings(doc: dict[str, Any], comparison: Comparison) -> None:
    """ConfigError when the baseline's settings make its parameters invalid (e.g. sweet-untrained
    under ranking.baseline=reference, where every candidate would score 0)."""
    problems = []
    for section in sorted({key.partition(".")[0] for key, _ in comparison.settings}):
        try:
            SECTIONS[section].model_validate(doc[section])
        except ValidationError as exc:
            problems += error_lines(section, exc)
    if problems:
        raise ConfigError(f"baseline {comparison.name} ({comparison.describe()}):\n" + "\n".join(problems))
