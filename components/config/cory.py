"""Configuration of the CORY training stage (params.yaml section `cory`), every field documented.

Reads and writes nothing. Defaults equal params.yaml's `cory` section, sized for the CPU smoke run
with the 135M default model. Measured there (2 cores): CORY ~63 s per iteration with vLLM (after
a one-time ~90 s engine build), ~107 s with hf; PPO ~41 s and ~61 s; so 10 minutes hold about
7 CORY or 12 PPO iterations with vLLM. The paper's GSM8K values (Ma et al. 2024, sec. 5 and
docs/algorithms.md "CORY": batch 32, eta 0.01, 100 iterations, lr 1e-4 for CORY and 1e-5 for PPO,
T = 5, clip 0.2, gamma 1, lambda 0.95) are noted beside each field and belong in a GPU profile.

Learning rates: each algorithm has its own, as in the paper (GSM8K: 1e-4 for CORY, 1e-5 for PPO):
`lr` is CORY's (both agents), `ppo_lr` the PPO baseline's; a run uses the one of its `algo`
(`learning_rate`), and both are in the run's params (MLflow) with the rate actually used logged
per agent and iteration as `train/<agent>/lr`. The gpu-8b profile sets the paper's pair (the
authors' IMDB scripts, the only public code, use 1.41e-5 for both). The CPU defaults are equal
(1e-4): a CPU run is a few iterations of a few Adam steps, each moving a weight by about lr, so
at 1e-5 PPO's adapter would stay near its start, and equal rates make the short comparison
differ in the algorithm only.

Equal token budget (our choice): PPO samples TWO answers per question (query-only prompt, two
seeds), so per iteration it generates as many answers as CORY's pioneer + observer together and
trains its one agent on 2 x questions_per_iteration answers, on the same questions. The authors'
IMDB code instead gives each PPO trainer the same batch (256 queries, one answer each, in both
imdb_train/ppo.py and imdb_train/cory.py), so there CORY generates twice PPO's answers.
Equal optimizer steps: PPO's minibatches hold twice minibatch_size answers
(`agent_minibatch_size`), so its one agent takes as many optimizer steps per iteration as each
CORY agent (ppo_epochs x questions_per_iteration / minibatch_size); with equal minibatches it took
twice as many, which alone would let it drift further from pi_0 than a CORY agent. Reward scale:
a CORY agent trains on the collective r(q,a1) + r(q,a2), twice the range of PPO's r(q,a) (VADER
compound: [-2, 2] against [-1, 1]) at the same eta, as in the paper; `shaping: trl` normalises
the scores of both.

Reward shaping (`shaping`, components.cory.shaping): `paper` (the default) is what the paper
describes, a per-token penalty -eta * KL with a FIXED eta and the sampled-token estimator
log pi(a_t) - log pi_0(a_t), on the raw task reward. `trl` is what the authors' code runs (their
IMDB scripts, TRL 0.7's PPOTrainer): an adaptive KL coefficient (Ziegler et al. 2019; starting
at `trl.init_kl_coef`, target `trl.target`, horizon `trl.horizon`; eta then only weighs the
evaluation objective), the full-distribution KL over the vocabulary at each response position,
and a running mean/std normalisation of the scores (`trl.score_scaling`). The default follows the
paper because the paper is the specification we reproduce, its GSM8K setting has no public script,
and a fixed eta keeps the trained objective equal to the evaluated one (task reward - eta * KL).

Contradictions (a minibatch larger than an agent's batch, or one that does not divide it; running
score statistics over fewer than two scores) are rejected when the section is loaded.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from components.config.sections import _Section
from components.config.training import Algo, Family, LoraSection, of_family


class CoryEngine(str, Enum):
    auto = "auto"  # vllm where vLLM imports, else hf (see components.cory.serving)
    hf = "hf"  # transformers, generating with the in-memory training model (no reload)
    vllm = "vllm"  # vLLM, given each agent's merged weights after its updates (see vllm_sync)


class Shaping(str, Enum):
    paper = "paper"  # fixed eta, sampled-token KL, raw task reward (the paper's description)
    trl = "trl"  # the authors' code: adaptive KL coefficient, full-vocabulary KL, running score normalisation


class ScoreScaling(str, Enum):
    none = "none"  # raw scores (TRL: use_score_scaling False)
    scale = "scale"  # score / (running std + eps) (TRL: use_score_scaling True, use_score_norm False)
    norm = "norm"  # (score - running mean) / (running std + eps) (TRL: both True)


class TrlShapingSection(_Section):
    """`shaping: trl`: TRL 0.7 PPOTrainer's reward shaping with the authors' values (their CORY IMDB
    script, imdb_train/cory.py; their PPO script, imdb_train/ppo.py, differs where noted)."""

    init_kl_coef: float = Field(
        0.4, gt=0.0, description="adaptive KL coefficient at the start (authors' cory.py: 0.4; their ppo.py: 0.3)"
    )
    target: float = Field(6.0, gt=0.0, description="KL target of the adaptive controller, nats per answer (TRL: 6)")
    horizon: float = Field(10000.0, gt=0.0, description="horizon of the adaptive controller, in samples (TRL: 10000)")
    score_scaling: ScoreScaling = Field(
        ScoreScaling.norm,
        description="none | scale | norm: running statistics of the scores "
        "(authors' cory.py: norm; their ppo.py: none)",
    )


class VllmSync(str, Enum):
    inplace = "inplace"  # one engine; its weights are reloaded in place from the agent's merged folder
    reload = "reload"  # one engine per agent, rebuilt from its merged folder after every update


class CoryConfig(_Section):
    """One CORY (or single-agent PPO) training run on a single-turn task (params `task.name`; the task's
    files live in its own section, components/config/prompt_tasks.py)."""

    model: str = Field(
        "models/smollm2-135m-instruct", description="base model (HF folder); frozen, it is also the KL reference pi_0"
    )
    algo: Algo = Field(Algo.cory, description="cory (two agents) | ppo (one agent, the baseline)")
    iterations: int = Field(
        6,
        ge=1,
        description="PPO iterations (paper: 100); 6 on CPU so that one role exchange happens with exchange_every 5",
    )
    questions_per_iteration: int = Field(
        4,
        ge=1,
        description="training questions drawn per iteration (paper: "
        "batch 32). CORY answers each twice (pioneer, observer); PPO samples "
        "two answers per question, so both generate the same number of answers (equal token budget)",
    )
    eval_questions: int = Field(
        8, ge=1, description="evaluation slice: the task's first N held-out rows, the same every iteration"
    )
    max_new_tokens: int = Field(128, ge=1, description="tokens per sampled answer (train and eval)")
    temperature: float = Field(
        1.0,
        gt=0.0,
        le=5.0,
        description="rollout sampling temperature (PPO needs "
        "sampling; log-probs are always the model's own, temperature 1)",
    )
    eval_temperature: float = Field(0.0, ge=0.0, le=5.0, description="evaluation temperature (0 = greedy)")
    eval_samples: int = Field(
        4,
        ge=0,
        description="answers per held-out prompt also sampled at temperature 1 for the paper's reward and KL "
        "(sampled_reward, sampled_kl) and the collapse indicators; 0: none",
    )
    chat_template: bool = Field(
        True,
        description="wrap each prompt as one user message in the model's chat "
        "template (instruct models); false: the raw 'Question: ... Answer:' text",
    )
    eta: float = Field(
        0.01,
        ge=0.0,
        description="KL coefficient of the per-token penalty (paper: 0.01) and of the evaluation "
        "objective; with shaping trl only the latter (training starts at trl.init_kl_coef)",
    )
    lr: float = Field(1e-4, gt=0.0, le=1.0, description="CORY: AdamW learning rate of both agents (paper GSM8K: 1e-4)")
    ppo_lr: float = Field(
        1e-4,
        gt=0.0,
        le=1.0,
        description="PPO baseline: AdamW learning rate of its agent (paper GSM8K: 1e-5; the CPU default equals lr)",
    )
    shaping: Shaping = Field(
        Shaping.paper,
        description="paper (fixed eta, sampled-token KL, raw reward) | trl (the authors' code: see `trl`)",
    )
    trl: TrlShapingSection = Field(
        default_factory=TrlShapingSection,
        description="shaping trl only: init_kl_coef, target, horizon, score_scaling",
    )
    ppo_epochs: int = Field(2, ge=1, description="passes over an iteration's samples (TRL default: 4)")
    minibatch_size: int = Field(
        4,
        ge=1,
        description="samples per optimizer step of a CORY agent; must divide questions_per_iteration. PPO's one "
        "agent, trained on twice the answers, steps on twice as many, so that it takes as many optimizer steps "
        "as each CORY agent (agent_minibatch_size)",
    )
    clip: float = Field(0.2, gt=0.0, lt=1.0, description="policy ratio clip epsilon (paper: 0.2)")
    value_clip: float = Field(0.2, gt=0.0, description="value clip range around the rollout values (0.2)")
    vf_coef: float = Field(0.1, ge=0.0, description="weight of the value loss (TRL: 0.1)")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount (paper: 1)")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda (paper: 0.95)")
    grad_clip: float = Field(1.0, gt=0.0, description="max gradient norm per agent step")
    exchange_every: int = Field(
        5, ge=1, description="CORY: swap pioneer and observer every T iterations (paper: 5); ignored by ppo"
    )
    lora: LoraSection = Field(
        default_factory=LoraSection,
        description="each agent's LoRA adapter on the shared frozen base (r, alpha, dropout, target_modules)",
    )
    engine: CoryEngine = Field(CoryEngine.auto, description="auto | hf | vllm: the generation engine")
    vllm_sync: VllmSync = Field(
        VllmSync.inplace,
        description="vllm: how the engine gets an agent's new weights: "
        "inplace (reload into the running engine, ~4 s on CPU) | reload (rebuild, ~42 s)",
    )
    generation_batch_size: int = Field(16, ge=1, description="hf engine: prompts per generate batch")
    dtype: str = Field(
        "auto", pattern="^(auto|float32|bfloat16)$", description="training dtype (auto: bf16 on GPU, fp32 on CPU)"
    )
    seed: int = Field(0, description="seed of the LoRA/value-head init, question draws, sampling, minibatches")
    out_dir: Path = Field(Path("runs/cory"), description="output folder (see components.stages.cory)")
    save_merged: bool = Field(False, description="also write each agent as a merged HF folder at the end")

    @property
    def learning_rate(self) -> float:
        """The AdamW learning rate of this run's agents: `lr` for cory, `ppo_lr` for ppo."""
        return self.ppo_lr if self.algo == Algo.ppo else self.lr

    @property
    def samples_per_agent(self) -> int:
        """Answers each agent is trained on per iteration."""
        return self.questions_per_iteration * (2 if self.algo == Algo.ppo else 1)

    @property
    def agent_minibatch_size(self) -> int:
        """Samples per optimizer step of one agent: minibatch_size, doubled for PPO, so that PPO and each
        CORY agent take the same number of optimizer steps per iteration on the same generated answers."""
        return self.minibatch_size * (2 if self.algo == Algo.ppo else 1)

    @field_validator("algo")
    @classmethod
    def _single_turn(cls, value: Algo) -> Algo:
        return of_family(value, Family.single_turn, "cory.algo")

    @model_validator(mode="after")
    def _consistent(self) -> CoryConfig:
        n = self.samples_per_agent
        if self.minibatch_size > self.questions_per_iteration:
            raise ValueError(
                f"minibatch_size ({self.minibatch_size}) exceeds questions_per_iteration "
                f"({self.questions_per_iteration})"
            )
        if self.questions_per_iteration % self.minibatch_size:
            raise ValueError(
                f"minibatch_size ({self.minibatch_size}) must divide questions_per_iteration "
                f"({self.questions_per_iteration}), so that every optimizer step sees a full minibatch"
            )
        if self.shaping == Shaping.trl and self.trl.score_scaling != ScoreScaling.none and n < 2:
            raise ValueError(
                f"shaping trl with score_scaling {self.trl.score_scaling.value} needs at least 2 samples per "
                f"agent and iteration (it has {n}): the running std of one score is undefined"
            )
        return self

    def fingerprint(self) -> dict:
        """What a checkpoint must share with this config to be resumed: everything but the number of
        iterations (a run may be extended), where it lives and the other algorithm's learning rate."""
        unused_lr = "lr" if self.algo == Algo.ppo else "ppo_lr"
        return self.model_dump(mode="json", exclude={"iterations", "out_dir", unused_lr})
