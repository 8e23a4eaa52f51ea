"""SWEET-RL critic advantages and trajectory scores (Zhou et al. 2025, eq. 1 and 2).

A(o_t, a_t, c) = beta * mean over the turn's tokens of [log pi_critic - log pi_ref], both
conditioned on the reference information c. The trajectory score that Bradley-Terry compares is
the sum of its turns' advantages (`Normalize.per_turn`, the paper). The authors' code takes one
mean over all assistant tokens of the trajectory instead (`Normalize.joint`), which weighs long
turns more. Inputs are per-turn log-prob SUMS and token counts, shape (B, K); a turn with no
tokens contributes 0.
"""

from __future__ import annotations

import torch

from components.config.training import Normalize


def turn_advantages(
    critic_sums: torch.Tensor, ref_sums: torch.Tensor, counts: torch.Tensor, beta: float
) -> torch.Tensor:
    """beta * (mean critic log-prob - mean reference log-prob) per turn, shape (B, K)."""
    return beta * (critic_sums - ref_sums) / counts.clamp(min=1.0)


def _per_turn_score(critic_sums, ref_sums, counts, beta) -> torch.Tensor:
    return turn_advantages(critic_sums, ref_sums, counts, beta).sum(-1)


def _joint_score(critic_sums, ref_sums, counts, beta) -> torch.Tensor:
    return beta * (critic_sums - ref_sums).sum(-1) / counts.sum(-1).clamp(min=1.0)


_SCORES = {Normalize.per_turn: _per_turn_score, Normalize.joint: _joint_score}


def trajectory_scores(
    critic_sums: torch.Tensor, ref_sums: torch.Tensor, counts: torch.Tensor, beta: float, normalize: Normalize
) -> torch.Tensor:
    """Score of each trajectory, shape (B,)."""
    return _SCORES[Normalize(normalize)](critic_sums, ref_sums, counts, beta)


def pair_accuracy(margins: torch.Tensor, tolerance: float) -> float:
    """Share of pairs ordered right (chosen minus rejected margin above `tolerance`), a tie (|margin| at most
    `tolerance`) counting half: 0.5 for a scorer that cannot tell the two apart."""
    right = (margins > tolerance).float()
    ties = (margins.abs() <= tolerance).float()
    return (right + 0.5 * ties).mean().item()
