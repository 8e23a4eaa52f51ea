"""Evaluate one agent alone on a task's fixed held-out slice (reads and writes no files).

As in Ma et al. 2024 (sec. 5; docs/algorithms.md "CORY"), either agent is used alone at inference, with
the query-only prompt. Per agent, on one answer per prompt at `cory.eval_temperature` (greedy by
default):
- reward: mean task reward r(q, a) (components/cory/tasks.py);
- pass_at_1 (binary tasks only, such as GSM8K): share of prompts whose answer is correct, equal to
  the mean reward there; kept because it is what GSM8K reports;
- kl: KL to the initial model along each answer, the mean over prompts of the summed exact
  per-position KL(pi(.|s_t) || pi_0(.|s_t)) over the answer's tokens; always >= 0;
- objective: reward - eta * kl.
And on `cory.eval_samples` answers per prompt sampled at temperature 1 (the policy itself, which
is what the paper's reward and KL curves are measured on, TRL's `objective/kl`):
- sampled_reward: their mean task reward;
- sampled_kl: the mean over answers of the summed log pi(a_t) - log pi_0(a_t), an unbiased
  estimate of the sequence KL(pi || pi_0) (the paper's quantity);
- sampled_objective: sampled_reward - eta * sampled_kl, the paper's evaluation objective;
- entropy, distinct_1, distinct_2: collapse indicators (components/cory/collapse.py).
Beside the metrics, one row per prompt (its greedy answer and that answer's reward, its sampled
answers' mean reward and the first of them), for analyses paired by prompt and for reading what an
agent learned to write. The answers' seeds depend only on the run seed and the prompt, so every
iteration answers the same prompts with the same random streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from components.cory.agents import AgentPool
from components.cory.collapse import distinct_n
from components.cory.rollout import Divergence, collate, encode_prompt, kl_to_reference
from components.cory.serving import PolicyServer
from components.cory.tasks import PromptTask
from components.engines.base import Generation, SamplingConfig
from components.episodes.driver import derive_seed


def _answers(
    server: PolicyServer, pool: AgentPool, agent: str, prompts: list[list[int]], sampling: SamplingConfig, seeds, chunk
) -> tuple[list[Generation], Divergence]:
    """The agent's answers to `prompts` and their Divergence from the reference (rollout.kl_to_reference)."""
    gens = server.engine_for(agent).generate(prompts, sampling, seeds)
    pad = pool.tokenizer.pad_token_id if pool.tokenizer.pad_token_id is not None else pool.tokenizer.eos_token_id
    batch = collate([(p, g.token_ids) for p, g in zip(prompts, gens)], pad, pool.device)
    pool.model.eval()
    return gens, kl_to_reference(pool, agent, batch, chunk)


def evaluate_agent(
    server: PolicyServer,
    pool: AgentPool,
    agent: str,
    task: PromptTask,
    rows: Sequence[Any],
    *,
    sampling: SamplingConfig,
    samples: int,
    chat_template: bool,
    eta: float,
    seed: int,
    chunk: int,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The metrics of `agent` alone on `rows` and the per-prompt rows; see the module docstring."""
    prompts = [encode_prompt(pool.tokenizer, task.query_prompt(r), chat_template) for r in rows]
    seeds = [derive_seed(seed, "eval", i) for i in range(len(rows))]
    gens, div = _answers(server, pool, agent, prompts, sampling, seeds, chunk)
    rewards = task.rewards(rows, [g.text for g in gens])
    reward, kl = sum(rewards) / len(rewards), div.exact.sum(-1).mean().item()
    tokens = sum(len(g.token_ids) for g in gens)
    out = {"pass_at_1": sum(r == 1.0 for r in rewards) / len(rewards)} if task.binary else {}
    out |= {"reward": reward, "kl": kl, "objective": reward - eta * kl, "response_tokens": tokens / len(gens)}
    per_prompt = [{"prompt": i, "reward": r, "answer": g.text} for i, (r, g) in enumerate(zip(rewards, gens))]
    if samples:
        jobs = [(i, j) for i in range(len(rows)) for j in range(samples)]
        at_one = SamplingConfig(temperature=1.0, max_tokens=sampling.max_tokens)
        seeds = [derive_seed(seed, "eval-sampled", i, j) for i, j in jobs]
        drawn, div = _answers(server, pool, agent, [prompts[i] for i, _ in jobs], at_one, seeds, chunk)
        drawn_tokens = sum(len(g.token_ids) for g in drawn)  # the answer positions (unmasked) of `div`
        drawn_rewards = task.rewards([rows[i] for i, _ in jobs], [g.text for g in drawn])
        sampled_reward = sum(drawn_rewards) / len(drawn_rewards)
        sampled_kl = div.sampled.sum(-1).mean().item()
        out |= {
            "sampled_reward": sampled_reward,
            "sampled_kl": sampled_kl,
            "sampled_objective": sampled_reward - eta * sampled_kl,
            "entropy": div.entropy.sum().item() / drawn_tokens,
            "distinct_1": distinct_n([g.token_ids for g in drawn], 1),
            "distinct_2": distinct_n([g.token_ids for g in drawn], 2),
        }
        tokens += drawn_tokens
        for i, row in enumerate(per_prompt):
            row["sampled_reward"] = sum(drawn_rewards[i * samples : (i + 1) * samples]) / samples
            row["sample"] = drawn[i * samples].text
    return out | {"tokens": float(tokens)}, per_prompt
