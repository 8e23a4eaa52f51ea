"""Every params.yaml section and the config model that validates it (the sections' one registry)."""

from __future__ import annotations

from pydantic import BaseModel

from components.config.cluster import ClusterConfig
from components.config.cory import CoryConfig
from components.config.elicitation import ElicitationConfig
from components.config.frontend import FrontendConfig
from components.config.prompt_tasks import GSM8KConfig, ReviewsConfig
from components.config.sections import (
    DataConfig,
    EpisodeSection,
    EvalConfig,
    ModelConfig,
    RolloutsConfig,
    TaskSection,
)
from components.config.training import (
    ActorConfig,
    CandidatesConfig,
    CriticConfig,
    PairsConfig,
    RankingConfig,
    TrainConfig,
)

SECTIONS: dict[str, type[BaseModel]] = {
    "task": TaskSection,
    "data": DataConfig,
    "elicitation": ElicitationConfig,
    "frontend": FrontendConfig,
    "cluster": ClusterConfig,
    "model": ModelConfig,
    "episode": EpisodeSection,
    "eval": EvalConfig,
    "rollouts": RolloutsConfig,
    "train": TrainConfig,
    "pairs": PairsConfig,
    "critic": CriticConfig,
    "candidates": CandidatesConfig,
    "ranking": RankingConfig,
    "actor": ActorConfig,
    "cory": CoryConfig,
    "gsm8k": GSM8KConfig,
    "reviews": ReviewsConfig,
}
