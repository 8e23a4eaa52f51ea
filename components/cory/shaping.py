"""Reward shaping of CORY's PPO: how an agent's task rewards and its KL to pi_0 become per-token
rewards (reads and writes no files; torch and plain Python only).

`cory.shaping` picks one of two functions (docs/design.md convention 6), both called as
`SHAPERS[shaping](task_reward, kl, mask, state, cfg) -> Shaped`:

- `paper_shaping` (the default; Ma et al. 2024, sec. 3; docs/algorithms.md "CORY"): the per-token
  penalty -eta * KL with a FIXED eta and the sampled-token estimator
  log pi(a_t|s_t) - log pi_0(a_t|s_t), on the raw task reward. The state never changes.
- `trl_shaping`: what the authors' code runs, TRL 0.7's PPOTrainer.step as configured by their
  IMDB scripts (kl_penalty "full", use_score_scaling and use_score_norm, init_kl_coef 0.4 in
  imdb_train/cory.py; the TRL defaults adap_kl_ctrl True, target 6, horizon 10000):
  1. scores: the running moments (`update_moments`, TRL's RunningMoments) absorb the batch's task
     rewards FIRST, then each reward becomes (r - mean) / (std + eps) (`norm`), r / (std + eps)
     (`scale`) or stays raw (`none`); eps is float32's machine epsilon, as TRL's;
  2. per-token KL: the exact KL(pi(.|s_t) || pi_0(.|s_t)) over the vocabulary (`ppo_losses.full_kl`);
  3. rewards: -kl_coef * KL at every token plus the score at the last, with the CURRENT coefficient;
  4. the coefficient for the next iteration: `adaptive_kl_coef` (Ziegler et al. 2019, TRL's
     AdaptiveKLController) with the batch's mean summed KL (the pre-update KL, as TRL's
     `objective/kl`) and n_steps = the agent's samples in the iteration (TRL: its batch size).

`ShapingState` (the KL coefficient and the running score moments) belongs to one agent; it is in
the agent's checkpoint (components.cory.agents), so a resumed run continues with the same
coefficient and statistics. Departures from the authors' code: the authors re-create both PPO
trainers at every role exchange (imdb_train/cory.py, lines 347-371), which resets the coefficient
to init_kl_coef and the score statistics; we keep an agent's state across exchanges, as we keep
its optimizer. The moments are kept in Python floats (float64), TRL's in float32 tensors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor

from components.config.cory import CoryConfig, ScoreScaling, Shaping
from components.cory.ppo_losses import penalized_rewards

EPS = torch.finfo(torch.float32).eps  # TRL adds the scores' dtype epsilon to the running std


@dataclass(frozen=True)
class ScoreMoments:
    """Running mean / variance of every score seen so far (TRL's RunningMoments and its start)."""

    mean: float = 0.0
    var: float = 1.0  # population variance
    std: float = 1.0  # sample standard deviation (Bessel-corrected), what scores are divided by
    count: float = 1e-24


@dataclass(frozen=True)
class ShapingState:
    """One agent's shaping state: the KL coefficient in use and the running score moments."""

    kl_coef: float
    moments: ScoreMoments = field(default_factory=ScoreMoments)

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict) -> ShapingState:
        return cls(float(state["kl_coef"]), ScoreMoments(**state["moments"]))


@dataclass
class KLEstimates:
    """Per-token KL to pi_0 of a batch's response tokens, both (B, T): `sampled` is
    log pi(a_t) - log pi_0(a_t), `full` the exact KL over the vocabulary at each position."""

    sampled: Tensor
    full: Tensor


@dataclass
class Shaped:
    """What the PPO update trains on and reports."""

    rewards: Tensor  # (B, T) per-token rewards
    kl: Tensor  # (B, T) the per-token KL the penalty used
    scores: Tensor  # (B,) the task rewards after scaling (raw for paper)
    kl_coef: float  # the coefficient the penalty used
    state: ShapingState  # the agent's state for the next iteration


def initial_state(cfg: CoryConfig) -> ShapingState:
    """A fresh agent's state: the coefficient is eta (paper) or trl.init_kl_coef (trl)."""
    return ShapingState(INITIAL_KL_COEF[cfg.shaping](cfg))


def update_moments(m: ScoreMoments, scores: Tensor) -> ScoreMoments:
    """TRL's RunningMoments.update: merge the batch's population mean and variance into the running
    ones (Chan et al.'s parallel update); std is the Bessel-corrected std of all scores seen."""
    n = scores.numel()
    var, mean = torch.var_mean(scores.detach().double(), unbiased=False)
    delta = float(mean) - m.mean
    total = m.count + n
    old_sum = m.var * m.count + delta**2 * m.count * n / total
    new_var = (old_sum + float(var) * n) / total
    return ScoreMoments(m.mean + delta * n / total, new_var, math.sqrt(new_var * total / (total - 1)), total)


def adaptive_kl_coef(coef: float, kl: float, target: float, horizon: float, n_steps: int) -> float:
    """TRL's AdaptiveKLController.update: coef * (1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon)."""
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return coef * (1.0 + error * n_steps / horizon)


def _raw(scores: Tensor, m: ScoreMoments) -> tuple[Tensor, ScoreMoments]:
    return scores, m  # TRL with use_score_scaling False never updates its moments


def _scaled(scores: Tensor, m: ScoreMoments) -> tuple[Tensor, ScoreMoments]:
    m = update_moments(m, scores)
    return scores / (m.std + EPS), m


def _normalised(scores: Tensor, m: ScoreMoments) -> tuple[Tensor, ScoreMoments]:
    m = update_moments(m, scores)
    return (scores - m.mean) / (m.std + EPS), m


SCALERS: dict[ScoreScaling, Callable[[Tensor, ScoreMoments], tuple[Tensor, ScoreMoments]]] = {
    ScoreScaling.none: _raw,
    ScoreScaling.scale: _scaled,
    ScoreScaling.norm: _normalised,
}


def paper_shaping(task: Tensor, kl: KLEstimates, mask: Tensor, state: ShapingState, cfg: CoryConfig) -> Shaped:
    """-eta * (log pi - log pi_0) per token, the raw task reward at the last token; state unchanged."""
    rewards = penalized_rewards(task, kl.sampled, mask, state.kl_coef)
    return Shaped(rewards, kl.sampled, task, state.kl_coef, state)


def trl_shaping(task: Tensor, kl: KLEstimates, mask: Tensor, state: ShapingState, cfg: CoryConfig) -> Shaped:
    """TRL 0.7's shaping (see the module docstring): scaled scores, full KL, adaptive coefficient."""
    scores, moments = SCALERS[cfg.trl.score_scaling](task, state.moments)
    rewards = penalized_rewards(scores, kl.full, mask, state.kl_coef)
    mean_kl = torch.where(mask.bool(), kl.full, torch.zeros_like(kl.full)).sum(-1).mean().item()
    coef = adaptive_kl_coef(state.kl_coef, mean_kl, cfg.trl.target, cfg.trl.horizon, task.numel())
    return Shaped(rewards, kl.full, scores, state.kl_coef, ShapingState(coef, moments))


SHAPERS: dict[Shaping, Callable[[Tensor, KLEstimates, Tensor, ShapingState, CoryConfig], Shaped]] = {
    Shaping.paper: paper_shaping,
    Shaping.trl: trl_shaping,
}
INITIAL_KL_COEF: dict[Shaping, Callable[[CoryConfig], float]] = {
    Shaping.paper: lambda cfg: cfg.eta,
    Shaping.trl: lambda cfg: cfg.trl.init_kl_coef,
}
