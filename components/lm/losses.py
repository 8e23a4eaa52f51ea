"""Pure loss functions (torch only), shared by the critic and the actor.

- `dpo_loss`: Direct Preference Optimization (Rafailov et al. 2023, eq. 7), used by SWEET-RL's
  actor on critic-ranked turn pairs (Zhou et al. 2025, eq. 3) and by the multi-turn DPO baseline.
- `bradley_terry_loss`: the pairwise objective of SWEET-RL's critic on trajectory scores
  (Zhou et al. 2025, eq. 2): -log sigmoid(score(chosen) - score(rejected)).
Inputs are per-example summed (or averaged) log-probabilities / scores of shape (batch,).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair DPO losses and the implicit rewards (detached), each of shape (batch,).

    reward(y) = beta * (log pi(y) - log pi_ref(y)); loss = -log sigmoid(reward(chosen) - reward(rejected)).
    """
    chosen_logratios = policy_chosen_logps - ref_chosen_logps
    rejected_logratios = policy_rejected_logps - ref_rejected_logps
    losses = -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))
    return losses, (beta * chosen_logratios).detach(), (beta * rejected_logratios).detach()


def bradley_terry_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """Per-pair Bradley-Terry losses -log sigmoid(chosen - rejected), shape (batch,)."""
    return -F.logsigmoid(chosen_scores - rejected_scores)
