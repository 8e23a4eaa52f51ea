"""Pure PPO math for CORY's two agents (torch only; reads and writes no files).

Each CORY agent is trained with its own PPO (Ma et al. 2024, sec. 3 and docs/algorithms.md "CORY"),
the RLHF form of PPO (Ziegler et al. 2019; Ouyang et al. 2022) that TRL's PPOTrainer implements:

- `penalized_rewards`: r_t = -coef * kl_t at every response token, plus the task reward R (CORY:
  the collective reward r(q,a1) + r(q,a2)) at the last token; `kl_penalized_rewards` is it with the
  sampled-token estimator kl_t = log pi(a_t|s_t) - log pi_0(a_t|s_t) (TRL's kl_penalty "kl").
- `full_kl`: KL(pi(.|s_t) || pi_0(.|s_t)) = sum_v pi(v|s_t) (log pi(v|s_t) - log pi_0(v|s_t)) over
  the whole vocabulary at each position (TRL's kl_penalty "full"); >= 0 at every position.
- `gae`: generalised advantage estimation (Schulman et al. 2016, eq. 16):
  delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = delta_t + gamma * lam * A_{t+1},  returns = A + V,
  with V and A after a row's last token taken as 0 (the episode ends with the response).
- `whiten`: (x - mean) / sqrt(var + 1e-8) over the unmasked entries (population variance).
- `policy_loss`: the clipped surrogate (Schulman et al. 2017, eq. 7), as a loss to minimise:
  max(-A * rho, -A * clip(rho, 1 - eps, 1 + eps)) with rho = exp(log pi - log pi_old).
- `value_loss`: the clipped value loss of PPO's reference implementation (OpenAI baselines; TRL):
  0.5 * max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2).

Tensors are (batch, tokens), right-padded; `mask` is true on response tokens. Padded positions
are replaced before any arithmetic, so whatever they hold (even inf/NaN) changes nothing, and a
fully masked batch gives 0, not NaN. Means are over all unmasked tokens of the batch (token-level,
as in TRL), not per row then over rows.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_token_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of `x` over all positions where `mask` is true (a scalar); 0 when none is."""
    mask = mask.bool()
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / mask.sum().clamp(min=1).to(x.dtype)


def _zero_padding(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask.bool(), x, torch.zeros_like(x))


def last_token_index(mask: Tensor) -> Tensor:
    """Index of each row's last true position in `mask` (B, T), shape (B,); 0 for empty rows."""
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, torch.zeros_like(positions)).max(dim=-1).values


def full_kl(logits: Tensor, ref_logits: Tensor) -> Tensor:
    """(B, T) exact KL(pi || pi_0) over the last dimension (the vocabulary) of two (B, T, V) logit
    tensors, computed in float32; detached. Padding is left to the caller's mask."""
    logp = torch.log_softmax(logits.detach().float(), dim=-1)
    ref = torch.log_softmax(ref_logits.detach().float(), dim=-1)
    return (logp.exp() * (logp - ref)).sum(-1)


def kl_penalized_rewards(
    task_reward: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, eta: float
) -> Tensor:
    """`penalized_rewards` with the sampled-token KL estimator logprobs - ref_logprobs."""
    return penalized_rewards(task_reward, logprobs.detach() - ref_logprobs.detach(), mask, eta)


def penalized_rewards(task_reward: Tensor, kl: Tensor, mask: Tensor, coef: float) -> Tensor:
    """Per-token rewards (B, T): -coef * kl, plus `task_reward` (B,) at each row's last unmasked
    token; 0 on padding. A row with no unmasked token gets no reward at all. The result is
    detached: rewards are constants for the PPO update."""
    if task_reward.shape != mask.shape[:1]:
        raise ValueError(
            f"task_reward must have shape {tuple(mask.shape[:1])} (one per row), got {tuple(task_reward.shape)}"
        )
    mask = mask.bool()
    kl = _zero_padding(kl.detach(), mask)
    rewards = -coef * kl
    has_tokens = mask.any(dim=-1)
    bonus = torch.where(
        has_tokens, task_reward.detach().to(rewards.dtype), torch.zeros_like(task_reward, dtype=rewards.dtype)
    )
    return rewards.scatter_add(-1, last_token_index(mask).unsqueeze(-1), bonus.unsqueeze(-1))


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """(advantages, returns), each (B, T) and detached, by GAE over right-padded rows.

    The value after a row's last unmasked token is 0 and padding contributes nothing; both
    outputs are 0 on padding.
    """
    mask = mask.bool()
    rewards = _zero_padding(rewards.detach(), mask)
    values = _zero_padding(values.detach(), mask)
    live = mask.to(values.dtype)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(values.shape[-1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantages[:, t] = (delta + gamma * lam * next_advantage) * live[:, t]
        next_value, next_advantage = values[:, t], advantages[:, t]
    return advantages, _zero_padding(advantages + values, mask)


def whiten(x: Tensor, mask: Tensor, shift_mean: bool = True) -> Tensor:
    """Normalise `x` to zero mean, unit variance over its unmasked entries; 0 on padding.

    With `shift_mean=False` the mean is added back (only the scale changes), as TRL does for
    rewards. A fully masked input gives zeros.
    """
    mask = mask.bool()
    x = _zero_padding(x, mask)
    mean = masked_token_mean(x, mask)
    var = masked_token_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        out = out + mean
    return _zero_padding(out, mask)


def policy_loss(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, clip: float = 0.2
) -> tuple[Tensor, Tensor, Tensor]:
    """(loss, clipfrac, approx_kl): the clipped PPO surrogate as a masked token mean.

    clipfrac is the share of tokens where the clipped term is the one used; approx_kl is the
    masked mean of (rho - 1) - log rho (Schulman's k3 estimator of KL(pi_old || pi)). Both are
    detached diagnostics.
    """
    mask = mask.bool()
    log_ratio = _zero_padding(logprobs - old_logprobs.detach(), mask)
    advantages = _zero_padding(advantages.detach(), mask)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = masked_token_mean(torch.maximum(unclipped, clipped), mask)
    clipfrac = masked_token_mean((clipped > unclipped).to(ratio.dtype), mask).detach()
    approx_kl = masked_token_mean((ratio - 1.0) - log_ratio, mask).detach()
    return loss, clipfrac, approx_kl


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float = 0.2
) -> tuple[Tensor, Tensor]:
    """(loss, clipfrac): 0.5 * masked token mean of the larger of the unclipped and clipped
    squared errors; clipfrac is the share of tokens where the clipped error is the larger."""
    mask = mask.bool()
    values = _zero_padding(values, mask)
    old_values = _zero_padding(old_values.detach(), mask)
    returns = _zero_padding(returns.detach(), mask)
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    loss = 0.5 * masked_token_mean(torch.maximum(unclipped_error, clipped_error), mask)
    clipfrac = masked_token_mean((clipped_error > unclipped_error).to(values.dtype), mask).detach()
    return loss, clipfrac
