"""Configurations of the SWEET-RL training stages (params.yaml sections `train`, `pairs`, `critic`,
`candidates`, `ranking`, `actor`), every field documented; bad values are rejected at load time.

`train` names the actor being improved, the rollouts it learns from and the root folder; every
stage's files live at fixed places under that root (`TrainLayout`), so stages find each other's
outputs without a path per section.

The defaults equal params.yaml's base sections (tests/components/config/test_config_defaults.py), sized for the
embedded CPU run; the authors' hyper-parameters (docs/algorithms.md, SWEET-RL 3 and 7) are noted beside
each field and are the gpu-8b profile's values.

`Algo` is every algorithm sweetflow trains with, one enum whose members carry their traits:
`sweetflow run --algo`, `actor.algo` (the collaborative ones) and `cory.algo` (the single-turn ones)
take its values; the stages each one runs are the stage catalogue's to say (`training_stages`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from components.config.sections import OpenAIRetries, _Section


class Family(str, Enum):
    collaborative = "collaborative"  # multi-turn tasks with a simulated human (components/tasks)
    single_turn = "single_turn"  # single-turn prompt tasks (components/cory)


@dataclass(frozen=True)
class Traits:
    family: Family
    reference: bool  # its training computes a frozen reference model's log-probs (DPO; PPO's KL)
    needs_success: bool = False  # it trains on successful trajectories only (an iteration without one cannot)


class Algo(str, Enum):
    sweet = "sweet"  # SWEET-RL: critic-ranked turn-level DPO
    mtdpo = "mtdpo"  # multi-turn DPO on trajectory pairs, no critic
    rft = "rft"  # rejection fine-tuning: SFT on successful trajectories
    cory = "cory"  # CORY: pioneer + observer, collective reward, role exchange
    ppo = "ppo"  # single-agent PPO on the query-only prompt (CORY's baseline)

    @property
    def traits(self) -> Traits:
        return TRAITS[self]

    @property
    def single_turn(self) -> bool:
        return self.traits.family == Family.single_turn

    @classmethod
    def of(cls, family: Family) -> frozenset["Algo"]:
        return frozenset(a for a in cls if a.traits.family == family)


TRAITS = {
    Algo.sweet: Traits(Family.collaborative, reference=True),
    Algo.mtdpo: Traits(Family.collaborative, reference=True),
    Algo.rft: Traits(Family.collaborative, reference=False, needs_success=True),
    Algo.cory: Traits(Family.single_turn, reference=True),
    Algo.ppo: Traits(Family.single_turn, reference=True),
}


def of_family(algo: Algo, family: Family, field: str) -> Algo:
    """`algo` when it belongs to `family`, else a ValueError naming the ones that do (a config validator)."""
    if algo.traits.family != family:
        names = " | ".join(a.value for a in Algo if a in Algo.of(family))
        raise ValueError(f"{field} takes a {family.value.replace('_', '-')} algorithm ({names}), not {algo.value}")
    return algo


class Normalize(str, Enum):
    per_turn = "per_turn"
    joint = "joint"


class NllScope(str, Enum):
    action = "action"  # per-token NLL of the chosen action (agent tokens) only: the paper's description
    sequence = "sequence"  # per-token NLL of every token of the chosen sequence: the authors' code


class LoraSection(_Section):
    r: int = Field(16, ge=1, description="LoRA rank")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1, description="modules that get adapters"
    )


class OptimConfig(_Section):
    """One training loop's optimisation settings (authors: lr 2e-7, batch 8, Adam betas (0.9, 0.95),
    3% warm-up, cosine to 0.1x, grad clip 1.0, full fine-tuning).

    The defaults are params.yaml's `actor.optim` (the CPU-sized values); `critic_optim()` is
    params.yaml's `critic.optim`. The authors' values are in the descriptions and the gpu-8b profile."""

    lr: float = Field(
        1e-5,
        gt=0.0,
        le=1.0,
        description="peak learning rate (authors: 2e-7, 8B models and 15k trajectories; the gpu-8b profile)",
    )
    epochs: int = Field(1, ge=1, description="passes over the training examples (authors: critic 4, actor 1)")
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimizer steps")
    batch_size: int = Field(8, ge=1, description="examples per optimizer step")
    micro_batch_size: int = Field(2, ge=1, description="examples per forward pass (gradient accumulation)")
    warmup_ratio: float = Field(0.03, ge=0.0, le=0.5, description="share of steps with linear warm-up")
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="cosine decays to this fraction of lr")
    grad_clip: float = Field(1.0, gt=0.0, description="max global gradient norm")
    adam_betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW betas")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    dtype: str = Field("auto", pattern="^(auto|float32|bfloat16)$", description="auto: bf16 on GPU, fp32 on CPU")
    master_weights: bool = Field(
        True,
        description="bf16 models: AdamW steps fp32 copies of the weights (as DeepSpeed bf16); false steps the "
        "bf16 weights, which ignores updates below their spacing (every update at lr 2e-7)",
    )
    lora: LoraSection | None = Field(None, description="train LoRA adapters (PEFT) instead of all weights")
    gradient_checkpointing: bool = Field(False, description="recompute activations to save memory")
    checkpoint_every: int = Field(20, ge=1, description="optimizer steps between checkpoints")
    keep_checkpoints: int = Field(1, ge=1, description="checkpoints kept (the newest)")
    seed: int = Field(0, description="data order and initialisation seed")

    @model_validator(mode="after")
    def _accumulation(self) -> "OptimConfig":
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})"
            )
        if not all(0.0 <= b < 1.0 for b in self.adam_betas):
            raise ValueError(f"adam_betas must lie in [0, 1), got {self.adam_betas}")
        return self


def critic_optim() -> OptimConfig:
    """params.yaml's `critic.optim`: the critic trains 2 epochs (authors: 4)."""
    return OptimConfig(epochs=2)


def actor_optim() -> OptimConfig:
    """params.yaml's `actor.optim`: the actor trains 1 epoch (authors: 1)."""
    return OptimConfig(epochs=1)


class PairRule(str, Enum):
    auto = "auto"  # the task's own (Task.pair_rule)
    best = "best"  # a task's best trajectory (reaching min_chosen_score) vs every lower one (authors' backend)
    gap = "gap"  # every two trajectories of a task whose scores differ by >= min_gap (authors' frontend: 0.1)


class TurnPairing(str, Enum):
    halves = "halves"  # per_state random (upper half, lower half) pairs (paper)
    best_worse = "best_worse"  # the top candidate against the per_state lowest (authors' script option)


class PairsConfig(_Section):
    rule: PairRule = Field(
        PairRule.auto,
        description="trajectory pairs: best (best vs every lower, backend) | gap (any two scores >= min_gap "
        "apart, frontend) | auto (the task's own)",
    )
    min_gap: float = Field(0.1, gt=0.0, le=1.0, description="rule gap: the least score difference (authors: 0.1)")
    min_chosen_score: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="a task gives trajectory pairs only when its best trajectory reaches this score (authors: 1.0)",
    )
    per_state: int = Field(4, ge=1, description="turn pairs per state: upper half vs lower half (authors: 4)")
    pairing: TurnPairing = Field(
        TurnPairing.halves,
        description="turn pairs: halves (a random upper-half vs lower-half draw, the paper's) | best_worse (the "
        "best-ranked candidate vs each of the worst, an option of the authors' script)",
    )
    seed: int = Field(0, description="seed of the turn-pair draw")


class TrainConfig(_Section):
    model: str = Field("models/smollm2-135m-instruct", description="the actor to improve (HF folder)")
    trajectories: Path = Field(Path("runs/rollouts"), description="rollouts folder holding trajectories.jsonl")
    out_dir: Path = Field(Path("runs/train"), description="root of every training stage's files")
    candidates: Path | None = Field(
        None,
        description="candidates.jsonl of sampled turn states to rank (null: the candidates stage's own, "
        "<out_dir>/candidates/candidates.jsonl); set, the candidates stage does not run (a pipeline's SWEET-RL "
        "ablations rank the candidates its SWEET-RL iteration sampled)",
    )
    experiment: str = Field("sweetflow-train", min_length=1, description="MLflow experiment")


REFERENCE_LOGPROBS = "reference_logprobs.jsonl"  # a training stage's frozen reference pass, in its out dir


@dataclass(frozen=True)
class TrainLayout:
    """Where each training stage reads and writes, under one root folder (the candidates to rank
    may come from elsewhere: `train.candidates`)."""

    root: Path
    candidates_file: Path | None = None  # None: root/candidates/candidates.jsonl

    @classmethod
    def of(cls, cfg: TrainConfig) -> "TrainLayout":
        """The layout of a `train` section: its out_dir, and its candidates file when set."""
        return cls(cfg.out_dir, cfg.candidates)

    @property
    def pairs(self) -> Path:
        return self.root / "pairs" / "pairs.jsonl"

    @property
    def critic_dir(self) -> Path:
        return self.root / "critic"

    @property
    def candidates(self) -> Path:
        return self.candidates_file or self.root / "candidates" / "candidates.jsonl"

    @property
    def ranking_dir(self) -> Path:
        return self.root / "ranking"

    @property
    def quality_dir(self) -> Path:
        return self.root / "critic_quality"

    @property
    def critic_model(self) -> Path:
        return self.critic_dir / "model"

    @property
    def actor_dir(self) -> Path:
        return self.root / "actor"

    @property
    def actor_model(self) -> Path:
        return self.actor_dir / "model"

    @property
    def eval_dir(self) -> Path:
        """Where the trained actor's evaluation writes."""
        return self.root / "eval"


class Information(str, Enum):
    """What the critic is shown as the training-time information c (never the actor)."""

    full = "full"  # the task's training-time information (Task.training_info: the paper's hidden information)
    answer = "answer"  # the reference answer only (Task.reference_answer: the authors' c, the final answer)
    none = "none"  # nothing: the critic without c (the ablation of the paper's asymmetry)


class CriticConfig(_Section):
    model: str = Field("models/smollm2-135m-instruct", description="base model: critic and frozen reference")
    information: Information = Field(
        Information.full,
        description="c the critic sees: full (the task's training-time information, the paper's) | answer "
        "(the reference answer only, the authors' c) | none (no c: the ablation)",
    )
    heldout_fraction: float = Field(
        0.2,
        ge=0.0,
        lt=1.0,
        description="share of the rollouts' tasks (by hash of the task id) whose trajectory pairs the critic "
        "never trains on: its held-out pair accuracy is measured on them (0: none held out, no held-out figures)",
    )
    tie_tolerance: float = Field(
        1e-4,
        ge=0.0,
        description="critic scores closer than this count as a tie (half right) in every critic accuracy",
    )
    beta: float = Field(0.1, gt=0.0, description="advantage scale (paper: 0.1)")
    normalize: Normalize = Field(Normalize.per_turn, description="per_turn (paper) | joint (authors' code)")
    max_length: int = Field(4096, ge=64, description="longer dialogues (with the reference) are left out")
    ref_batch_size: int = Field(4, ge=1, description="sequences per forward in the reference pass")
    optim: OptimConfig = Field(default_factory=critic_optim, description="authors: 4 epochs")


class CandidatesConfig(OpenAIRetries):
    engine: str = Field("auto", pattern="^(auto|vllm|hf|openai)$", description="sampling engine")
    fraction: float = Field(
        0.1,
        gt=0.0,
        le=1.0,
        description="share of trajectories whose turns are used (authors: 10%, against DPO over-fitting)",
    )
    per_state: int = Field(16, ge=2, description="candidate actions per turn state (authors: 16)")
    temperature: float = Field(1.0, gt=0.0, le=5.0, description="sampling temperature")
    max_tokens: int = Field(256, ge=1, description="tokens per candidate")
    seed: int = Field(0, description="selection and sampling seed")


class Baseline(str, Enum):
    reference = "reference"  # paper: frozen initial critic, with c
    actor = "actor"  # authors' code: the actor's own log-prob, without c


class CriticChoice(str, Enum):
    """Which critic ranks the candidates (and is measured as `trained` by the critic-quality step)."""

    trained = "trained"  # the critic the `critic` stage trained (SWEET-RL)
    untrained = "untrained"  # the frozen base model `critic.model`, with c: SWEET-RL without critic training

    @property
    def trains(self) -> bool:
        """Whether the run trains a critic (the `critic` stage runs)."""
        return self is CriticChoice.trained


class RankingConfig(_Section):
    baseline: Baseline = Field(
        Baseline.reference,
        description="reference (paper: the frozen initial critic, "
        "with c) | actor (authors' code: the actor's own mean log-prob, without c)",
    )
    critic: CriticChoice = Field(
        CriticChoice.trained,
        description="trained (the critic stage's model, SWEET-RL) | untrained (the base model critic.model with "
        "c, no critic training: the ablation; needs baseline actor, as under reference every score is 0)",
    )
    max_batch: int = Field(16, ge=1, description="candidates per forward pass (sharing the state's cache)")

    @model_validator(mode="after")
    def _untrained_needs_a_baseline_apart(self) -> "RankingConfig":
        if self.critic == CriticChoice.untrained and self.baseline == Baseline.reference:
            raise ValueError(
                "critic untrained with baseline reference scores every candidate 0 (the frozen base model minus "
                "itself): set ranking.baseline=actor"
            )
        return self


class ActorConfig(_Section):
    algo: Algo = Field(Algo.sweet, description="sweet | mtdpo | rft")
    beta: float = Field(0.1, gt=0.0, description="DPO beta (authors: 0.1)")
    nll_coef: float = Field(
        0.01,
        ge=0.0,
        description="NLL on the chosen side added to DPO (authors: 0.01); sweet and mtdpo share the DPO "
        "loss, so multi-turn DPO gets it too (0: plain DPO)",
    )
    nll_scope: NllScope = Field(
        NllScope.action,
        description="action: NLL of the chosen action's tokens (mtdpo: the chosen dialogue's agent tokens) | "
        "sequence: of every token of the chosen sequence, state and human turns included (the authors' code, "
        "whose pairs have no prompt; one more forward pass of the chosen sequences)",
    )
    rft_min_score: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="rft trains on the trajectories scoring at least this (1.0: the successful ones, the paper's)",
    )
    max_length: int = Field(4096, ge=64, description="longer sequences are left out")
    ref_batch_size: int = Field(4, ge=1, description="sequences per forward in the reference pass")
    optim: OptimConfig = Field(default_factory=actor_optim, description="authors: 1 epoch, lr 2e-7")

    @field_validator("algo")
    @classmethod
    def _collaborative(cls, value: Algo) -> Algo:
        return of_family(value, Family.collaborative, "actor.algo")
