"""Token log-probabilities and their per-turn reductions (torch only).

SWEET-RL's advantage of an agent turn is beta times the MEAN over the turn's tokens of a log-prob
difference (Zhou et al. 2025, eq. 1); DPO uses SUMS over the response. Both come from
`per_turn_logprobs`, which reduces token log-probs of a batch of tokenised dialogues by a
per-token turn index (-1 for tokens that belong to no agent turn: system, human, padding).
"""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Mean of `values` where `mask` is true along `dim`; 0 (not NaN) where nothing is selected."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(labels[b, t]) under logits[b, t] (already aligned: logits at t predict labels at t)."""
    logps = torch.log_softmax(logits.float(), dim=-1)
    return logps.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def per_turn_logprobs(
    token_logps: torch.Tensor, turn_index: torch.Tensor, num_turns: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, sum) of token log-probs per agent turn, each of shape (batch, num_turns).

    `turn_index[b, t]` is k when token t of dialogue b belongs to agent turn k, else -1. A turn
    with no tokens (a shorter dialogue in the batch) gets mean 0 and sum 0.
    """
    turns = torch.arange(num_turns, device=turn_index.device)
    member = (turn_index.unsqueeze(-1) == turns).to(token_logps.dtype)  # (B, T, K)
    sums = (token_logps.unsqueeze(-1) * member).sum(dim=1)
    return sums / member.sum(dim=1).clamp(min=1.0), sums
