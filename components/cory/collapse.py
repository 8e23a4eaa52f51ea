"""Distribution-collapse indicators of sampled answers (reads and writes no files).

CORY's second claim (Ma et al. 2024, sec. 5) is that its agents do not collapse the way a PPO
policy pushed for reward does: the answers stay varied. Two standard indicators, on answers sampled
at temperature 1 from the agent:
- distinct-n (Li et al. 2016): the share of distinct n-grams among all n-grams of a set of answers,
  pooled over the answers (token ids; 1.0 when no n-gram repeats, near 0 when every answer is the
  same few tokens);
- token entropy: the mean, over the answers' token positions, of the policy's entropy
  H(pi(.|s_t)) = -sum_v pi(v|s_t) log pi(v|s_t) in nats (falls towards 0 as the policy turns
  deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def distinct_n(answers: Sequence[Sequence[int]], n: int) -> float:
    """Distinct n-grams / all n-grams over `answers` (token id lists); 0.0 when there is none."""
    grams = [tuple(a[i : i + n]) for a in answers for i in range(len(a) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-position entropy (B, R) of softmax(`logits` (B, R, V)), 0 where `mask` is false."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return torch.where(mask, entropy, torch.zeros_like(entropy))
