"""Configuration of the elicitation task's generator (params.yaml section `elicitation`).

Reads and writes nothing. Defaults equal params.yaml's `elicitation` section. The generator
(`python -m components.tasks.elicitation.generate`) writes `file`; the task
(components/tasks/elicitation/task.py) reads it. Contradictions (an unknown held-out domain, every
domain held out) are rejected when the section is loaded.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from components.config.sections import _Section


class ElicitationConfig(_Section):
    """The generated preference-elicitation tasks: how many, from which seed, what is held out."""

    file: Path = Field(
        Path("data/elicitation/tasks.jsonl"),
        description="the generated tasks (JSONL, train and eval rows in one file, split by each row's `split`)",
    )
    seed: int = Field(0, description="generator seed: the same seed gives a byte-identical file")
    train_tasks: int = Field(256, ge=1, description="tasks of the train split")
    eval_tasks: int = Field(64, ge=1, description="tasks of the eval split")
    heldout_domains: list[str] = Field(
        default_factory=lambda: ["haircut"],
        min_length=1,
        description="domains that appear only in the eval split (components/tasks/elicitation/task.py DOMAINS)",
    )
    eval_combo_fraction: float = Field(
        0.25,
        gt=0.0,
        lt=1.0,
        description="share of each other domain's slot-value combinations kept for the eval split "
        "(never seen in train)",
    )

    @model_validator(mode="after")
    def _domains_known(self) -> "ElicitationConfig":
        from components.tasks.elicitation.domains import DOMAINS

        unknown = [d for d in self.heldout_domains if d not in DOMAINS]
        if unknown:
            raise ValueError(f"unknown held-out domain(s) {', '.join(unknown)} (domains: {', '.join(DOMAINS)})")
        if len(set(self.heldout_domains)) != len(self.heldout_domains):
            raise ValueError(f"heldout_domains must be distinct, got {self.heldout_domains}")
        if len(self.heldout_domains) >= len(DOMAINS):
            raise ValueError("every domain is held out: at least one domain must be left for the train split")
        return self
