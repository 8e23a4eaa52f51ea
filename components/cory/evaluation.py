"""Evaluate one agent alone on the fixed GSM8K test slice (reads and writes no files).

As in Ma et al. 2024 (sec. 5; ALGORITHMS.md "CORY"), either agent is used alone at inference, with
the query-only prompt. Per agent:
- pass@1: share of questions whose one answer (greedy by default) is correct;
- reward: mean task reward r(q, a) (0/1 on GSM8K, so equal to pass@1 here; both are kept because
  the paper reports task reward and other rewards need not be 0/1);
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

from components.cory.agents import AgentPool
from components.cory.gsm8k import GSM8KRow, query_prompt, reward
from components.cory.rollout import collate, encode_prompt, kl_to_reference
from components.cory.serving import PolicyServer
from components.engines.base import Generation, SamplingConfig
from components.episodes.driver import derive_seed


def evaluate_agent(
    server: PolicyServer,
    pool: AgentPool,
    agent: str,
    rows: Sequence[GSM8KRow],
    *,
    sampling: SamplingConfig,
    chat_template: bool,
    eta: float,
    seed: int,
    chunk: int,
) -> tuple[dict[str, float], list[Generation]]:
    """(metrics, answers) of `agent` alone on `rows`; see the module docstring for the metrics."""
    engine = server.engine_for(agent)
    prompts = [encode_prompt(pool.tokenizer, query_prompt(r.question), chat_template) for r in rows]
    gens = engine.generate(prompts, sampling, [derive_seed(seed, "eval", i) for i in range(len(rows))])
    correct = [reward(g.text, r.gold) for g, r in zip(gens, rows)]
    pad = pool.tokenizer.pad_token_id if pool.tokenizer.pad_token_id is not None else pool.tokenizer.eos_token_id
    batch = collate([(p, g.token_ids) for p, g in zip(prompts, gens)], pad, pool.device)
    pool.model.eval()
    sampled, exact = kl_to_reference(pool, agent, batch, chunk)
    kl = exact.sum(-1).mean().item()
    mean_reward = sum(correct) / len(correct)
    tokens = sum(len(g.token_ids) for g in gens)
    return {
        "pass_at_1": sum(c == 1.0 for c in correct) / len(correct),
        "reward": mean_reward,
        "kl": kl,
        "kl_sampled": sampled.sum(-1).mean().item(),
        "objective": mean_reward - eta * kl,
        "response_tokens": tokens / len(gens),
        "tokens": float(tokens),
    }, gens
