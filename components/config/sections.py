"""Stage configurations: one pydantic model per params.yaml section, every field documented.

Values come from params.yaml and are overridden by CLI flags / flow parameters. Unknown keys and
contradictory or out-of-range values are rejected at load time with a message naming the field
(docs/design.md convention 3).
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from components.data.split import Split

C = TypeVar("C", bound=BaseModel)
PARAMS = Path("params.yaml")
PARAMS_ENV = "SWEETFLOW_PARAMS"  # names another params file: a pipeline iteration's (flows.planning.plan)


def params_file() -> Path:
    """The params file stages read: $SWEETFLOW_PARAMS when set, else params.yaml of the working directory."""
    return Path(os.environ.get(PARAMS_ENV) or PARAMS)


class SimulatorKind(str, Enum):
    llm = "llm"
    retrieval = "retrieval"  # colbench-backend
    rules = "rules"  # elicitation
    visual = "visual"  # colbench-frontend


class ConfigError(ValueError):
    """params.yaml or an override is invalid."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TaskSection(_Section):
    name: str = Field(
        "colbench-backend",
        min_length=1,
        description="the task played and trained on: a collaborative one (components/tasks/registry.py: "
        "colbench-backend | colbench-frontend | elicitation) or, for cory/ppo, a single-turn one "
        "(components/cory/registry.py: gsm8k | reviews; cory/ppo play gsm8k when this names a collaborative task)",
    )


class SimulatorPrompt(str, Enum):
    official = "official"  # the benchmark's instructions: answer only from the hidden information (may quote it)
    no_code = "no_code"  # ours before: describe the hidden information in words, never write code


class DataConfig(_Section):
    source: str = Field(
        "dvc",
        pattern="^(dvc|hub)$",
        description="dvc: the DVC-tracked test file, split by "
        "hash; hub: the official train/test files from `sweetflow data pull --from-hub`",
    )
    backend_tasks: Path = Field(Path("data/colbench/backend_test.jsonl"), description="ColBench backend tasks")
    hub_dir: Path = Field(Path("data/colbench/hub"), description="where --from-hub puts the official files")
    eval_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="share of tasks in the eval split")
    split_salt: str = Field("sweetflow-v1", min_length=1, description="salt of the split hash")
    simulator_prompt: SimulatorPrompt = Field(
        SimulatorPrompt.official,
        description="the llm simulator's instructions: official (only from the hidden information, which "
        "it may quote, code included) | no_code (also: describe it in words, never write code)",
    )

    def tasks_file(self, split: Split) -> Path:
        """The file holding `split`: one file split by hash (dvc), or the official file (hub)."""
        if self.source == "dvc":
            return self.backend_tasks
        if split == Split.all:
            raise ConfigError("split 'all' needs data.source dvc (the hub has separate train and test files)")
        return self.hub_dir / "backend_tasks" / ("train.jsonl" if split == Split.train else "test.jsonl")


class ModelConfig(_Section):
    out_dir: Path = Field(Path("models/smollm2-135m-instruct"), description="prepared default model folder")


class DriverKind(str, Enum):
    """How episodes are stepped (components/episodes): both give the same records, in another order."""

    sync = "sync"  # driver.py: one agent batch per turn, waiting for the turn's longest response
    async_ = "async"  # async_driver.py: each episode's next request goes out as soon as its response is in


class EpisodeSection(_Section):
    max_turns: int = Field(10, ge=1, le=50, description="agent turns per episode")
    temperature: float = Field(1.0, ge=0.0, le=5.0, description="agent sampling temperature")
    max_tokens: int = Field(256, ge=1, description="agent tokens per turn")
    max_model_len: int = Field(4096, ge=256, description="context budget per episode")
    sim_max_tokens: int = Field(128, ge=1, description="LLM simulator tokens per reply")
    sim_max_chars: int = Field(400, ge=1, description="simulator reply cut")
    driver: DriverKind = Field(
        DriverKind.sync,
        description="sync: all live episodes step together, one agent batch per turn | async: each episode "
        "advances as soon as its own response is in (needs a streaming agent engine: vllm or openai; hf runs "
        "sync, with a warning). Same records either way; not part of the episodes' fingerprint",
    )

    @model_validator(mode="after")
    def _fits(self) -> "EpisodeSection":
        if self.max_tokens >= self.max_model_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be below max_model_len ({self.max_model_len})")
        return self


class OpenAIRetries(_Section):
    """The retry settings of a stage's OpenAI-compatible engines (components/engines/openai_engine.py)."""

    openai_retries: int = Field(
        3,
        ge=0,
        le=10,
        description="openai engines (agent or simulator): retries of a request that times out, gets HTTP "
        "408/429/5xx or loses its connection, before the step fails",
    )
    openai_backoff_s: float = Field(
        1.0,
        ge=0,
        le=30,
        description="openai engines: wait before the first retry, doubled at each next one (each wait capped at 30 s)",
    )


class EpisodeStageConfig(OpenAIRetries):
    """What every stage that plays collaborative episodes shares: the agent, the simulated human,
    and which tasks they play. Eval and rollouts extend it (their `split` defaults differ)."""

    model: str = Field("models/smollm2-135m-instruct", description="agent: HF folder or hub id")
    engine: str = Field(
        "auto",
        pattern="^(auto|vllm|hf|openai)$",
        description="agent engine: auto (vllm when importable, else hf) | vllm | hf | openai",
    )
    simulator: SimulatorKind | None = Field(
        None,
        description="simulated human: llm | the task's offline one (colbench-backend: retrieval, "
        "elicitation: rules); None = the task's offline one",
    )
    simulator_model: str | None = Field(
        None, description="llm simulator: model folder or OpenAI-compatible URL; None = the agent's engine"
    )
    simulator_engine: str | None = Field(
        None, pattern="^(auto|vllm|hf|openai)$", description="engine of the simulator model; None = the agent's"
    )
    split: Split = Field(Split.eval, description="task split played")
    limit: int | None = Field(8, ge=1, description="number of tasks (the split's first ones); None = whole split")

    @model_validator(mode="after")
    def _simulator_consistent(self) -> "EpisodeStageConfig":
        if self.simulator != SimulatorKind.llm and self.simulator_model:
            given = self.simulator.value if self.simulator else "null, the task's offline one"
            raise ValueError(f"simulator_model is only used by the llm simulator (simulator {given} given)")
        return self


class EvalConfig(EpisodeStageConfig):
    """Evaluation: one episode per task and seed, scored, with 95% intervals."""

    split: Split = Field(Split.eval, description="task split to evaluate")
    seeds: list[int] = Field([0], min_length=1, description="one evaluation per seed")
    bootstrap_samples: int = Field(2000, ge=100, description="resamples for 95% intervals")
    out_dir: Path = Field(Path("runs/eval"), description="output folder")
    experiment: str = Field("sweetflow-eval", min_length=1, description="MLflow experiment")
    sample_dialogues: int = Field(5, ge=0, description="dialogues rendered into MLflow")
    trace_dialogues: int = Field(64, ge=0, description="episodes logged as MLflow traces (the first N; 0: none)")

    @model_validator(mode="after")
    def _distinct_seeds(self) -> "EvalConfig":
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        return self


class RolloutsConfig(EpisodeStageConfig):
    """SWEET-RL step 1: K sampled, scored trajectories per task of the training split."""

    split: Split = Field(Split.train, description="task split sampled (train: eval/all would train on held-out tasks)")
    per_task: int = Field(3, ge=1, description="trajectories sampled per task (K; authors' scripts: 3)")
    seed: int = Field(0, description="run seed; each episode's seed derives from it, the task and the sample")
    offline: Path | None = Field(
        None,
        description="a scored trajectories.jsonl to train on instead of sampling "
        "(the paper's offline setting); the pipeline uses it for iteration 1 only",
    )
    out_dir: Path = Field(Path("runs/rollouts"), description="output folder")
    experiment: str = Field("sweetflow-rollouts", min_length=1, description="MLflow experiment")
    sample_dialogues: int = Field(5, ge=0, description="dialogues rendered into MLflow")
    trace_dialogues: int = Field(64, ge=0, description="episodes logged as MLflow traces (the first N; 0: none)")


def check_rollouts(cfg: RolloutsConfig, episode: EpisodeSection) -> None:
    """Contradictions across sections: K > 1 samples of a task at temperature 0 are K copies."""
    if cfg.per_task > 1 and episode.temperature == 0:
        raise ConfigError(
            f"rollouts.per_task is {cfg.per_task} but episode.temperature is 0: greedy decoding "
            "gives the same trajectory K times; raise the temperature or set per_task 1"
        )


def read_params(path: Path | None = None) -> dict[str, Any]:
    """The whole params file (`params_file()` by default) as a dict (empty when the file is missing)."""
    path = params_file() if path is None else path
    if not Path(path).exists():
        return {}
    return yaml.safe_load(Path(path).read_text()) or {}


def load_section(model: type[C], section: str, overrides: dict[str, Any] | None = None, path: Path | None = None) -> C:
    """Validate params.yaml[section] updated with the non-None `overrides`."""
    path = params_file() if path is None else path
    values = dict(read_params(path).get(section) or {})
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        lines = error_lines(section, exc)
        raise ConfigError(f"invalid configuration in {path} [{section}]:\n" + "\n".join(lines)) from None


def error_lines(section: str, exc: ValidationError) -> list[str]:
    """One `  section.field: message` line per problem."""
    return [f"  {section}.{'.'.join(map(str, e['loc'])) or '<section>'}: {e['msg']}" for e in exc.errors()]
