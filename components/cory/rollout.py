"""One iteration's samples for CORY and for the PPO baseline, and the forward passes that score them.

Reads and writes no files: a task's rows come in (components/cory/tasks.py: it gives the prompts and
the reward), `Sample`s (exact prompt and response token ids, docs/design.md convention 11) and tensors go
out.

- `cory_samples` (Ma et al. 2024, sec. 3.2; docs/algorithms.md "CORY"): the pioneer answers each
  question (a1 ~ pi_1(.|q)); the observer then answers with the pioneer's actual answer in its
  prompt (a2 ~ pi_2(.|q, a1); the task's observer prompt). Both get the collective reward
  r(q,a1) + r(q,a2).
- `ppo_samples`: the single-agent baseline draws TWO answers per question from the query-only
  prompt (different seeds), each rewarded with its own r(q,a). We keep the questions and double
  the answers (rather than doubling the questions) so that both algorithms see the same questions
  and generate the same number of answers per iteration.
Sampling seeds derive from (run seed, iteration, role, question, sample), so a resumed iteration
draws the same answers.

`collate` lays a batch out as [left-padded prompt | right-padded response], so every response
starts at the same column P and one `logits_to_keep` slice scores all of them; `score` returns
the agent's log-probs, its value estimates, the reference (adapters disabled) log-probs of each
response token and the exact per-position KL to the reference over the vocabulary, all at
temperature 1 (the full KL is what `shaping: trl` penalises; with `paper` it is a diagnostic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from components.cory.agents import OBSERVER, PIONEER, POLICY, AgentPool
from components.cory.collapse import token_entropy
from components.cory.ppo_losses import full_kl
from components.cory.tasks import PromptTask
from components.engines.base import Engine, Generation, SamplingConfig
from components.episodes.driver import derive_seed
from components.lm.logprobs import token_logprobs

EngineFor = Callable[[str], Engine]  # agent name -> an engine serving that agent's current weights


@dataclass
class Sample:
    """One answer an agent generated, with what it is trained on."""

    question: int  # index of the question in the iteration's draw
    role: str  # pioneer | observer | policy
    agent: str
    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    correct: float  # r(q, a) of this answer alone (0/1 correctness on a binary task)
    task_reward: float  # the reward PPO maximises (CORY: collective r(q,a1) + r(q,a2))
    engine_logprobs: list[float]


def encode_prompt(tokenizer, text: str, chat_template: bool) -> list[int]:
    """Token ids of a prompt: one user message in the chat template, or the raw text."""
    if chat_template:
        from components.engines.base import render_chat

        return render_chat(tokenizer, [{"role": "user", "content": text}])
    return tokenizer.encode(text, add_special_tokens=False)


def _generate(engine: Engine, prompts: list[list[int]], sampling: SamplingConfig, seeds: list[int]) -> list[Generation]:
    out = engine.generate(prompts, sampling, seeds)
    for gen in out:
        if not gen.token_ids:
            raise RuntimeError(f"engine {engine.name} returned an empty answer (max_tokens={sampling.max_tokens})")
    return out


def cory_samples(
    engine_for: EngineFor,
    roles: dict[str, str],
    task: PromptTask,
    rows: Sequence[Any],
    sampling: SamplingConfig,
    chat_template: bool,
    seed: int,
    iteration: int,
) -> list[Sample]:
    """Pioneer answers, then observer answers that see them; both with the collective reward."""
    pioneer, observer = roles[PIONEER], roles[OBSERVER]
    engine = engine_for(pioneer)
    tok = engine.tokenizer
    p_prompts = [encode_prompt(tok, task.query_prompt(r), chat_template) for r in rows]
    p_gens = _generate(
        engine, p_prompts, sampling, [derive_seed(seed, iteration, PIONEER, i) for i in range(len(rows))]
    )
    engine = engine_for(observer)
    o_prompts = [encode_prompt(tok, task.observer_prompt(r, g.text), chat_template) for r, g in zip(rows, p_gens)]
    o_gens = _generate(
        engine, o_prompts, sampling, [derive_seed(seed, iteration, OBSERVER, i) for i in range(len(rows))]
    )
    r1s = task.rewards(rows, [g.text for g in p_gens])
    r2s = task.rewards(rows, [g.text for g in o_gens])
    samples: list[Sample] = []
    for i, (r1, r2) in enumerate(zip(r1s, r2s)):
        for role, agent, prompt, gen, own in (
            (PIONEER, pioneer, p_prompts[i], p_gens[i], r1),
            (OBSERVER, observer, o_prompts[i], o_gens[i], r2),
        ):
            samples.append(Sample(i, role, agent, prompt, gen.token_ids, gen.text, own, r1 + r2, gen.logprobs))
    return samples


def ppo_samples(
    engine_for: EngineFor,
    roles: dict[str, str],
    task: PromptTask,
    rows: Sequence[Any],
    sampling: SamplingConfig,
    chat_template: bool,
    seed: int,
    iteration: int,
) -> list[Sample]:
    """Two answers per question from the query-only prompt, each rewarded with its own r(q, a)."""
    agent = roles[POLICY]
    engine = engine_for(agent)
    prompts = [encode_prompt(engine.tokenizer, task.query_prompt(r), chat_template) for r in rows]
    jobs = [(i, k) for i in range(len(rows)) for k in range(2)]
    gens = _generate(
        engine, [prompts[i] for i, _ in jobs], sampling, [derive_seed(seed, iteration, POLICY, i, k) for i, k in jobs]
    )
    rewards = task.rewards([rows[i] for i, _ in jobs], [g.text for g in gens])
    return [
        Sample(i, POLICY, agent, prompts[i], gen.token_ids, gen.text, r, r, gen.logprobs)
        for (i, _), gen, r in zip(jobs, gens, rewards)
    ]


@dataclass
class PolicyBatch:
    """[left-padded prompt | right-padded response] rows; responses start at column `prompt_width`."""

    input_ids: torch.Tensor  # (B, P + R)
    attention_mask: torch.Tensor  # (B, P + R)
    position_ids: torch.Tensor  # (B, P + R)
    response_ids: torch.Tensor  # (B, R)
    mask: torch.Tensor  # (B, R) bool: true on response tokens
    prompt_width: int

    def rows(self, index: torch.Tensor | slice) -> PolicyBatch:
        return PolicyBatch(
            self.input_ids[index],
            self.attention_mask[index],
            self.position_ids[index],
            self.response_ids[index],
            self.mask[index],
            self.prompt_width,
        )


def collate(pairs: Sequence[tuple[list[int], list[int]]], pad_id: int, device: torch.device) -> PolicyBatch:
    """Lay (prompt_ids, response_ids) pairs out as a PolicyBatch."""
    width_p = max(len(p) for p, _ in pairs)
    width_r = max(len(r) for _, r in pairs)
    ids = torch.full((len(pairs), width_p + width_r), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for row, (prompt, response) in enumerate(pairs):
        ids[row, width_p - len(prompt) : width_p] = torch.tensor(prompt)
        ids[row, width_p : width_p + len(response)] = torch.tensor(response)
        attn[row, width_p - len(prompt) : width_p + len(response)] = 1
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    mask = attn[:, width_p:].bool()
    return PolicyBatch(
        ids.to(device), attn.to(device), positions.to(device), ids[:, width_p:].to(device), mask.to(device), width_p
    )


def response_logits(
    model, value_head: torch.nn.Linear | None, batch: PolicyBatch
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits (B, R, V) over the response tokens, values (B, R) or None) under the active adapter.

    The logits and hidden state at column P - 1 + t predict / value response token t."""
    width_r = batch.response_ids.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        output_hidden_states=value_head is not None,
        logits_to_keep=width_r + 1,
        use_cache=False,
    )
    if value_head is None:
        return out.logits[:, :width_r], None
    start = batch.prompt_width - 1
    hidden = out.hidden_states[-1][:, start : start + width_r]
    return out.logits[:, :width_r], value_head(hidden.to(value_head.weight.dtype)).squeeze(-1)


def forward(model, value_head: torch.nn.Linear | None, batch: PolicyBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log-probs (B, R) of the response tokens, values (B, R) or None) under the active adapter."""
    logits, values = response_logits(model, value_head, batch)
    return token_logprobs(logits, batch.response_ids), values


@dataclass
class Scored:
    """A batch scored once before a PPO update, each (B, R), detached; `kl_full` is 0 on padding."""

    logps: torch.Tensor  # the agent's log-probs of the response tokens
    values: torch.Tensor  # its value head's estimates
    ref: torch.Tensor  # the reference pi_0's log-probs of the response tokens
    kl_full: torch.Tensor  # KL(pi(.|s_t) || pi_0(.|s_t)) over the vocabulary at each response position


@torch.no_grad()
def score(pool: AgentPool, agent: str, batch: PolicyBatch, chunk: int) -> Scored:
    """The agent's and the reference's view of `batch`, in row chunks, without gradients."""
    head = pool.activate(agent).value_head
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, batch.input_ids.shape[0], chunk):
        rows = batch.rows(slice(start, start + chunk))
        logits, values = response_logits(pool.model, head, rows)
        with pool.reference():
            ref_logits, _ = response_logits(pool.model, None, rows)
        full = full_kl(logits, ref_logits)
        parts.append(
            (
                token_logprobs(logits, rows.response_ids),
                values,
                token_logprobs(ref_logits, rows.response_ids),
                torch.where(rows.mask, full, torch.zeros_like(full)),
            )
        )
    return Scored(*(torch.cat(cols) for cols in zip(*parts)))


@dataclass
class Divergence:
    """An agent's view of answers beside the reference pi_0's, each (B, R) and 0 on padding."""

    sampled: torch.Tensor  # log pi(a_t) - log pi_0(a_t) of the answer tokens (the estimator training uses)
    exact: torch.Tensor  # KL(pi(.|s_t) || pi_0(.|s_t)) over the whole vocabulary at each answer position
    entropy: torch.Tensor  # H(pi(.|s_t)) at each answer position (components/cory/collapse.py)


@torch.no_grad()
def kl_to_reference(pool: AgentPool, agent: str, batch: PolicyBatch, chunk: int) -> Divergence:
    """One policy and one reference pass over `batch`. Summed over an answer, `exact` is the KL along
    that answer's states, >= 0 even for greedy answers; `sampled` is an unbiased estimate of the
    sequence KL only for answers sampled at temperature 1 (biased, possibly negative, on greedy ones)."""
    pool.activate(agent)
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, batch.input_ids.shape[0], chunk):
        rows = batch.rows(slice(start, start + chunk))
        logits, _ = response_logits(pool.model, None, rows)
        with pool.reference():
            ref_logits, _ = response_logits(pool.model, None, rows)
        token = token_logprobs(logits, rows.response_ids) - token_logprobs(ref_logits, rows.response_ids)
        zero = torch.zeros_like(token)
        full = full_kl(logits, ref_logits)
        parts.append(
            (
                torch.where(rows.mask, token, zero),
                torch.where(rows.mask, full, zero),
                token_entropy(logits, rows.mask),
            )
        )
    return Divergence(*(torch.cat(cols) for cols in zip(*parts)))
