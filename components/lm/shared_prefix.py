"""Log-probs of N candidate continuations of one shared prompt, the prompt encoded once (torch only).

Reads: a causal LM (any transformers model taking `past_key_values`), the prompt's token ids and
N candidates' token ids. Writes nothing; returns, per candidate, the float32 CPU tensor
log p(c_j | prompt, c_<j) for every candidate token j (the first token predicted from the
prompt's last position).

Why: SWEET-RL ranks N sampled actions per dialogue state with the critic's advantage, beta times
the mean over the action's tokens of log pi_theta(a_t | o_t, c) - log pi_ref(a_t | o_t, c)
(Zhou et al. 2025, eq. 1 and sec. 4.2). All N actions share the prompt (reference prefix +
dialogue so far, 500-2000 tokens) and are short (20-256 tokens), so re-encoding the prompt per
candidate (`continuation_logprobs_naive`) spends most of its work on the same prefix N times.
`continuation_logprobs` encodes the prefix once with `use_cache=True`, then scores candidates in
chunks of at most `max_batch`: a copy of the prefix's KV cache repeated to the chunk size, the
chunk's tokens right-padded, an attention mask over prefix + candidate, position ids continuing
after the prefix. Candidates are chunked in
length order (less padding) and returned in input order. Same math as the paper, no departure:
both functions agree to float32 rounding (~1e-6, tests/components/lm/test_shared_prefix.py); the shared
one is ~3.5x faster on a shared 2-core CPU with SmolLM2-135M, 800 prefix tokens and 16
candidates (benchmarks/ranking.py, results/ranking.json). On CPU, chunks of 4-16 all reach
that; on a GPU, bigger chunks use the device better.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise

import torch

from components.lm.logprobs import token_logprobs


@contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the block; the caller's train flag is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _check_prefix(prefix_ids: list[int]) -> None:
    if not prefix_ids:
        raise ValueError("prefix_ids is empty: the first continuation token needs a prefix position")


def _empty() -> torch.Tensor:
    return torch.zeros(0, dtype=torch.float32)


def _score_chunk(
    model, cache, prefix_len: int, last_logits: torch.Tensor, chunk: list[list[int]]
) -> list[torch.Tensor]:
    """Scores one chunk of non-empty continuations against `cache` (the prefix's, batch 1).

    Token 0 of every continuation is scored from the prefix's last logits; tokens 1.. from a
    forward over each continuation but its last token (right-padded), on a copy of the cache.
    """
    device = last_logits.device
    firsts = torch.tensor([c[0] for c in chunk], device=device)
    first_logps = token_logprobs(last_logits.expand(len(chunk), -1), firsts)
    width = max(len(c) for c in chunk) - 1
    if width == 0:  # every continuation is one token long
        return [first_logps[i : i + 1].cpu() for i in range(len(chunk))]
    inputs = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
    labels = torch.zeros(len(chunk), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(chunk), prefix_len + width, dtype=torch.long, device=device)
    mask[:, :prefix_len] = 1
    for i, cont in enumerate(chunk):
        n = len(cont) - 1
        inputs[i, :n] = torch.tensor(cont[:-1], device=device)
        labels[i, :n] = torch.tensor(cont[1:], device=device)
        mask[i, prefix_len : prefix_len + n] = 1
    positions = torch.arange(prefix_len, prefix_len + width, device=device).expand(len(chunk), -1)
    chunk_cache = copy.deepcopy(cache)  # the forward appends to the cache it is given
    chunk_cache.batch_repeat_interleave(len(chunk))
    logits = model(
        input_ids=inputs, attention_mask=mask, position_ids=positions, past_key_values=chunk_cache, use_cache=True
    ).logits
    real = mask[:, prefix_len:].bool()  # log-softmax over real positions only, not the padding
    rest = token_logprobs(logits[real], labels[real]).cpu().split([len(c) - 1 for c in chunk])
    return [torch.cat([first_logps[i : i + 1].cpu(), r]) for i, r in enumerate(rest)]


def _chunks(order: list[int], max_batch: int) -> list[list[int]]:
    """`order` cut into ceil(n / max_batch) contiguous chunks of near-equal size (no tiny tail)."""
    n_chunks = -(-len(order) // max_batch)
    bounds = [round(k * len(order) / n_chunks) for k in range(n_chunks + 1)]
    return [order[a:b] for a, b in pairwise(bounds)]


def continuation_logprobs(
    model, prefix_ids: list[int], continuations: list[list[int]], max_batch: int = 16
) -> list[torch.Tensor]:
    """Per continuation, log p(c_j | prefix, c_<j) as a 1-D float32 CPU tensor of len(c).

    One forward over the prefix (KV cache kept), then ceil(#non-empty / max_batch) forwards over
    the continuations, each reusing the prefix's cache. An empty continuation gets an empty tensor.
    """
    _check_prefix(prefix_ids)
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    out = [_empty() for _ in continuations]
    order = sorted((i for i, c in enumerate(continuations) if c), key=lambda i: len(continuations[i]))
    if not order:
        return out
    device = next(model.parameters()).device
    with _eval_mode(model):
        prefix = torch.tensor([prefix_ids], device=device)
        encoded = model(input_ids=prefix, use_cache=True, logits_to_keep=1)
        last_logits = encoded.logits[0, -1]
        for ids in _chunks(order, max_batch):
            scored = _score_chunk(
                model, encoded.past_key_values, len(prefix_ids), last_logits, [continuations[i] for i in ids]
            )
            for i, logps in zip(ids, scored):
                out[i] = logps
    return out


def continuation_logprobs_naive(model, prefix_ids: list[int], continuations: list[list[int]]) -> list[torch.Tensor]:
    """Same values as `continuation_logprobs`, one full forward over prefix + c per continuation.

    The reference and the baseline for benchmarks/ranking.py. Only the logits that score the
    continuation are computed (`logits_to_keep`), as a careful per-sample scorer would.
    """
    _check_prefix(prefix_ids)
    device = next(model.parameters()).device
    out = []
    with _eval_mode(model):
        for cont in continuations:
            if not cont:
                out.append(_empty())
                continue
            ids = torch.tensor([prefix_ids + cont[:-1]], device=device)
            logits = model(input_ids=ids, use_cache=False, logits_to_keep=len(cont)).logits
            labels = torch.tensor([cont], device=device)
            out.append(token_logprobs(logits, labels)[0].float().cpu())
    return out


def continuation_means(
    model, prefix_ids: list[int], continuations: list[list[int]], max_batch: int = 16
) -> list[float]:
    """Per continuation, its mean token log-prob after `prefix_ids` (`continuation_logprobs`; 0.0
    for an empty one): the per-action term of SWEET-RL's advantage."""
    logps = continuation_logprobs(model, prefix_ids, continuations, max_batch)
    return [float(lp.mean()) if len(lp) else 0.0 for lp in logps]
