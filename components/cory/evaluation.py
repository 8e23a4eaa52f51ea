"""Evaluate one agent alone on a task's fixed held-out slice (reads and writes no files).

As in Ma et al. 2024 (sec. 5; ALGORITHMS.md "CORY"), either agent is used alone at inference, with
the query-only prompt. Per agent:
- reward: mean task reward r(q, a) (components/cory/tasks.py);
- pass@1 (binary tasks only, such as GSM8K): share of questions whose one answer (greedy by
  default) is correct, equal to the mean reward there; kept because it is what GSM8K reports;
- kl: KL to the initial model along each answer, the mean over questions of the summed exact
  per-position KL(pi(.|s_t) || pi_0(.|s_t)) over the answer's tokens; always >= 0;
- kl_sampled: the mean summed log pi(a_t) - log pi_0(a_t) over the answer's tokens (the estimator
  training uses). Unbiased only for answers sampled at temperature 1: on greedy answers (the
  default) it is biased and can be negative, which is why `kl` is the exact form;
- objective: reward - eta * kl, the paper's evaluation objective.
The answers' seeds depend only on the run seed and the question, so every iteration answers the
same questions with the same random streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from components.cory.agents import AgentPool
from components.cory.rollout import collate, encode_prompt, kl_to_reference
from components.cory.serving import PolicyServer
from components.cory.tasks import PromptTask
from components.engines.base import Generation, SamplingConfig
from components.episodes.driver import derive_seed


def evaluate_agent(
    server: PolicyServer,
    pool: AgentPool,
    agent: str,
    task: PromptTask,
    rows: Sequence[Any],
    *,
    sampling: SamplingConfig,
    chat_template: bool,
    eta: float,
    seed: int,
    chunk: int,
) -> tuple[dict[str, float], list[Generation]]:
    """(metrics, answers) of `agent` alone on `rows`; see the module docstring for the metrics."""
    engine = server.engine_for(agent)
    prompts = [encode_prompt(pool.tokenizer, task.query_prompt(r), chat_template) for r in rows]
    gens = engine.generate(prompts, sampling, [derive_seed(seed, "eval", i) for i in range(len(rows))])
    rewards = task.rewards(rows, [g.text for g in gens])
    pad = pool.tokenizer.pad_token_id if pool.tokenizer.pad_token_id is not None else pool.tokenizer.eos_token_id
    batch = collate([(p, g.token_ids) for p, g in zip(prompts, gens)], pad, pool.device)
    pool.model.eval()
    sampled, exact = kl_to_reference(pool, agent, batch, chunk)
    kl = exact.sum(-1).mean().item()
    mean_reward = sum(rewards) / len(rewards)
    tokens = sum(len(g.token_ids) for g in gens)
    binary = {"pass_at_1": sum(r == 1.0 for r in rewards) / len(rewards)} if task.binary else {}
    return binary | {
        "reward": mean_reward,
        "kl": kl,
        "kl_sampled": sampled.sum(-1).mean().item(),
        "objective": mean_reward - eta * kl,
        "response_tokens": tokens / len(gens),
        "tokens": float(tokens),
    }, gens
