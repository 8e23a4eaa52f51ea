"""Model forward passes that turn token sequences into per-turn log-prob sums.

`turn_logprob_sums` runs the decoder over a padded batch and applies the LM head only at the
positions that predict an agent-turn token: with a 49k vocabulary the full logits of a 4k-token
dialogue take ~800 MB, while agent tokens are a small share of a ColBench dialogue.

`reference_sums` is the separate reference pass of SWEET-RL's critic and of DPO: the frozen
model's per-turn sums for every sequence, computed once and cached to a JSONL file keyed by the
model and the sequence's content, so training holds only the trained model in memory and a
re-run (or a resumed run) does not recompute them. Single actions after a prompt (turn-level DPO
pairs: several candidates of one state) are grouped by prompt and scored with
components.lm.shared_prefix, one pass over each prompt; whole dialogues go in padded batches.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections import defaultdict
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Iterator, Sequence

import torch
from pydantic import BaseModel
from tqdm.auto import tqdm

from components.data.records import read_resumable, write_jsonl
from components.lm.logprobs import per_turn_logprobs, token_logprobs
from components.lm.sequences import Batch, TokenSequence, collate
from components.lm.shared_prefix import continuation_logprobs

SCORED_LOGITS = "scored_logits"  # a sharded model's own `scored_logits`, run inside its FSDP hooks


def scored_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """The LM head's logits at the `scored` positions of the decoder's output (the model's forward,
    with the head applied only where a log-prob is needed)."""
    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return model.get_output_embeddings()(hidden[:, :-1][scored])


def turn_logprob_sums(model, batch: Batch) -> torch.Tensor:
    """Sum of token log-probs per agent turn, shape (B, K); differentiable when grads are on. A model
    sharded with FSDP2 (training/sharding.py) carries `scored_logits` as a method that gathers its
    weights (it calls the decoder and the head itself, never the model's own forward)."""
    device = next(model.parameters()).device
    target = batch.turn_index[:, 1:].to(device)
    scored = target >= 0
    logits_of = getattr(model, SCORED_LOGITS, None) or partial(scored_logits, model)
    logits = logits_of(batch.input_ids.to(device), batch.attention_mask.to(device), scored)
    labels = batch.input_ids[:, 1:].to(device)[scored]
    token_lp = torch.zeros(scored.shape, dtype=torch.float32, device=device)
    token_lp = token_lp.masked_scatter(scored, token_logprobs(logits, labels))
    _, sums = per_turn_logprobs(token_lp, target, batch.num_turns)
    return sums


class ReferenceRow(BaseModel):
    key: str
    sums: list[float]


def sequence_key(model_id: str, seq: TokenSequence) -> str:
    digest = hashlib.sha256(json.dumps([model_id, seq.ids, seq.turn_index]).encode()).hexdigest()
    return digest[:24]


def action_split(seq: TokenSequence) -> int | None:
    """Where the action starts when `seq` is one action (turn 0) at the end of a prompt, else None."""
    if seq.num_turns != 1 or not seq.ids:
        return None
    start = seq.turn_index.index(0) if 0 in seq.turn_index else len(seq.ids)
    ok = start > 0 and all(k == 0 for k in seq.turn_index[start:]) and all(k == -1 for k in seq.turn_index[:start])
    return start if ok else None


def _action_sums(
    model, seqs: Sequence[TokenSequence], todo: list[int], batch_size: int
) -> Iterator[dict[int, list[float]]]:
    """Sums of single actions, one prompt (and its actions) at a time, each prompt encoded once."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i in todo:
        groups[tuple(seqs[i].ids[: action_split(seqs[i])])].append(i)
    for prompt, members in tqdm(
        groups.items(), desc="reference log-probs (shared prompts)", unit="prompt", disable=not groups
    ):
        actions = [seqs[i].ids[len(prompt) :] for i in members]
        logps = continuation_logprobs(model, list(prompt), actions, batch_size)
        yield {i: [float(lp.sum())] for i, lp in zip(members, logps)}


def _batched_sums(
    model, seqs: Sequence[TokenSequence], todo: list[int], pad_id: int, batch_size: int
) -> Iterator[dict[int, list[float]]]:
    """Per-turn sums of whole sequences, one padded batch at a time (longest first: less padding)."""
    todo = sorted(todo, key=lambda i: -len(seqs[i].ids))
    for start in tqdm(range(0, len(todo), batch_size), desc="reference log-probs", unit="batch", disable=not todo):
        chunk = todo[start : start + batch_size]
        sums = turn_logprob_sums(model, collate([seqs[i] for i in chunk], pad_id)).cpu()
        yield {i: sums[j, : seqs[i].num_turns].tolist() for j, i in enumerate(chunk)}


def _cached(model_id: str, seqs: Sequence[TokenSequence], cache: Path) -> tuple[list[str], dict[str, list[float]]]:
    """The cache keys of `seqs` under `model_id`, and the sums `cache` already holds (by key)."""
    return [sequence_key(model_id, s) for s in seqs], {row.key: row.sums for row in read_resumable(cache, ReferenceRow)}


def frozen_reference_sums(
    model_path: str, dtype: str, seqs: Sequence[TokenSequence], cache: Path, pad_id: int, batch_size: int
) -> list[list[float]]:
    """`reference_sums` under the frozen model at `model_path`, loaded for this pass and released after,
    so the training that follows holds only the trained model; not loaded when `cache` has them all."""
    from components.training.models import load_frozen, train_device_dtype

    keys, known = _cached(model_path, seqs, cache)
    if all(k in known for k in keys):
        return [known[k] for k in keys]
    model = load_frozen(model_path, *train_device_dtype(dtype))
    sums = reference_sums(model, model_path, seqs, cache, pad_id, batch_size)
    del model
    gc.collect()
    return sums


@torch.no_grad()
def reference_sums(
    model, model_id: str, seqs: Sequence[TokenSequence], cache: Path, pad_id: int, batch_size: int = 8
) -> list[list[float]]:
    """Per-turn log-prob sums of `seqs` under the frozen `model`, read from / appended to `cache`."""
    keys, known = _cached(model_id, seqs, cache)
    todo = list({k: i for i, k in enumerate(keys) if k not in known}.values())
    is_action = {i: action_split(seqs[i]) is not None for i in todo}
    actions = [i for i in todo if is_action[i]]
    whole = [i for i in todo if not is_action[i]]
    was_training = model.training
    model.eval()
    for part in chain(
        _action_sums(model, seqs, actions, batch_size), _batched_sums(model, seqs, whole, pad_id, batch_size)
    ):
        rows = [ReferenceRow(key=keys[i], sums=sums) for i, sums in part.items()]
        write_jsonl(cache, rows, append=True)  # appended as computed: a crash loses one batch at most
        known.update({r.key: r.sums for r in rows})
    model.train(was_training)
    return [known[k] for k in keys]
