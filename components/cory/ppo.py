"""One PPO update of one agent on its samples of an iteration (reads and writes no files).

The RLHF form of PPO (Ziegler et al. 2019; TRL's PPOTrainer), which CORY runs per agent
(Ma et al. 2024, sec. 3; docs/algorithms.md "CORY"); the math is in components.cory.ppo_losses:
1. score the samples once, without gradients: the agent's log-probs and values, the reference
   pi_0's log-probs (adapters disabled) and the exact per-position KL between the two;
2. per-token rewards by the configured shaping (components.cory.shaping): `paper`,
   -eta * (log pi - log pi_0) plus the raw task reward at the last token; `trl`, the authors' TRL
   0.7 shaping (adaptive coefficient, full KL, running score normalisation), whose new state the
   agent keeps after the update;
3. GAE (gamma, lambda) on the rollout values, advantages whitened over the agent's whole batch;
4. `ppo_epochs` passes over seeded minibatches: loss = clipped policy loss + vf_coef x clipped value
   loss, one optimizer step per minibatch on the agent's adapter and value head, gradient norm
   clipped (the authors' TRL runs clip no gradient, max_grad_norm None, and zero the loss of a
   minibatch whose mean ratio exceeds ratio_threshold 10; neither is done here).
Per-token rewards are not whitened (TRL's whiten_rewards False, in the authors' runs too). Train
mode (LoRA dropout) is on during the steps only; rollouts and scoring run in eval mode.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from components.config.cory import CoryConfig
from components.cory.agents import AgentPool
from components.cory.ppo_losses import gae, policy_loss, value_loss, whiten
from components.cory.rollout import PolicyBatch, Sample, collate, forward, score
from components.cory.shaping import SHAPERS, KLEstimates
from components.episodes.driver import derive_seed


def _row_sums(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros_like(x)).sum(-1)


def _step(
    pool: AgentPool, agent: str, mb: PolicyBatch, old: dict[str, torch.Tensor], cfg: CoryConfig
) -> dict[str, float]:
    """One optimizer step on minibatch `mb` (old: rollout log-probs, values, advantages, returns)."""
    state = pool.agents[agent]
    logps, values = forward(pool.model, state.value_head, mb)
    p_loss, clipfrac, approx_kl = policy_loss(logps, old["logps"], old["advantages"], mb.mask, cfg.clip)
    v_loss, v_clipfrac = value_loss(values, old["values"], old["returns"], mb.mask, cfg.value_clip)
    loss = p_loss + cfg.vf_coef * v_loss
    state.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(state.parameters(), cfg.grad_clip)
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    return {
        "policy_loss": p_loss.item(),
        "value_loss": v_loss.item(),
        "clipfrac": clipfrac.item(),
        "value_clipfrac": v_clipfrac.item(),
        "approx_kl": approx_kl.item(),
        "grad_norm": float(grad_norm),
    }


def ppo_update(
    pool: AgentPool, agent: str, samples: Sequence[Sample], cfg: CoryConfig, iteration: int
) -> dict[str, float]:
    """Train `agent` on its `samples`; return the iteration's means (losses, KL, rewards...)."""
    pad = pool.tokenizer.pad_token_id if pool.tokenizer.pad_token_id is not None else pool.tokenizer.eos_token_id
    batch = collate([(s.prompt_ids, s.response_ids) for s in samples], pad, pool.device)
    pool.model.eval()
    scored = score(pool, agent, batch, cfg.minibatch_size)
    logps, values = scored.logps, scored.values
    task = torch.tensor([s.task_reward for s in samples], dtype=logps.dtype, device=logps.device)
    kl_estimates = KLEstimates(sampled=logps - scored.ref, full=scored.kl_full)
    shaped = SHAPERS[cfg.shaping](task, kl_estimates, batch.mask, pool.agents[agent].shaping, cfg)
    advantages, returns = gae(shaped.rewards, values, batch.mask, cfg.gamma, cfg.lam)
    old = {"logps": logps, "values": values, "advantages": whiten(advantages, batch.mask), "returns": returns}
    kl = _row_sums(shaped.kl, batch.mask)
    engine_gap = [abs(a - b) for s, row in zip(samples, logps.tolist()) for a, b in zip(s.engine_logprobs, row)]
    steps: list[dict[str, float]] = []
    pool.activate(agent)
    pool.model.train()
    try:
        for epoch in range(cfg.ppo_epochs):
            order = list(range(len(samples)))
            random.Random(derive_seed(cfg.seed, "minibatches", iteration, agent, epoch)).shuffle(order)
            for start in range(0, len(order), cfg.agent_minibatch_size):
                index = torch.tensor(order[start : start + cfg.agent_minibatch_size], device=pool.device)
                mb_old = {k: v[index] for k, v in old.items()}
                steps.append(_step(pool, agent, batch.rows(index), mb_old, cfg))
    finally:
        pool.model.eval()
    pool.agents[agent].shaping = shaped.state
    means = {k: sum(s[k] for s in steps) / len(steps) for k in steps[0]}
    moments = shaped.state.moments
    return {
        "task_reward": task.mean().item(),
        "correct": sum(s.correct for s in samples) / len(samples),
        "kl": kl.mean().item(),
        "kl_sampled": _row_sums(kl_estimates.sampled, batch.mask).mean().item(),
        "kl_full": _row_sums(kl_estimates.full, batch.mask).mean().item(),
        "kl_coef": shaped.kl_coef,
        "nonscore_reward": (-shaped.kl_coef * kl).mean().item(),
        "score": shaped.scores.mean().item(),
        "score_running_mean": moments.mean,
        "score_running_std": moments.std,
        "lr": pool.agents[agent].optimizer.param_groups[0]["lr"],
        "response_tokens": batch.mask.sum(-1).float().mean().item(),
        "value_mean": torch.where(batch.mask, values, 0).sum().item() / batch.mask.sum().item(),
        "engine_logprob_gap": sum(engine_gap) / max(len(engine_gap), 1),
        "optimizer_steps": float(len(steps)),
        **means,
    }
