"""Token sequences that critic and actor training score, built from the stored token ids.

Training never re-tokenises dialogue text (docs/design.md convention 11): a trajectory's sequence is
the ids its actions were generated with, and every token carries the agent turn it belongs to
(-1 for system, human and padding tokens). Three kinds:

- a whole dialogue (`dialogue_sequence`): the critic and the multi-turn baselines;
- one action after its state (`action_sequence`): turn-level DPO on candidate pairs;
- either, after the critic's reference prefix (`with_prefix` + `reference_prefix`): SWEET-RL's
  asymmetric critic sees the training-time information c. Authors' code: c is injected as the
  text "In light that the final answer is: {c}." in front of the dialogue; so is ours.

Departure: when a later turn's prompt ids do not extend the earlier ids (the rare re-encoded
prompt, see rollout/tokens.py), the sequence follows the later prompt from the first differing
token, so the earlier turns lose their tokens past that point.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from components.data.records import Trajectory

REFERENCE_TEMPLATE = "In light that the final answer is: {reference}.\n"


@dataclass(frozen=True)
class TokenSequence:
    """Token ids and, per token, the agent turn it belongs to (-1: none)."""

    ids: list[int]
    turn_index: list[int]
    num_turns: int

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.turn_index):
            raise ValueError(f"{len(self.ids)} ids but {len(self.turn_index)} turn indices")

    def turn_counts(self) -> list[int]:
        counts = [0] * self.num_turns
        for k in self.turn_index:
            if k >= 0:
                counts[k] += 1
        return counts


@dataclass
class Batch:
    """Right-padded tensors of several sequences."""

    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    turn_index: torch.Tensor  # (B, T), -1 outside agent turns and on padding
    counts: torch.Tensor  # (B, K) tokens per agent turn
    num_turns: int

    @property
    def tokens(self) -> int:
        return int(self.attention_mask.sum())


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def dialogue_sequence(traj: Trajectory) -> TokenSequence:
    """The whole dialogue as one sequence: each turn's prompt extension, then its response."""
    ids: list[int] = []
    turns: list[int] = []
    for k, turn in enumerate(traj.turns):
        keep = common_prefix(ids, turn.prompt_ids)
        del ids[keep:], turns[keep:]
        ids += turn.prompt_ids[keep:] + turn.response_ids
        turns += [-1] * (len(turn.prompt_ids) - keep) + [k] * len(turn.response_ids)
    return TokenSequence(ids, turns, len(traj.turns))


def action_sequence(prompt_ids: list[int], response_ids: list[int]) -> TokenSequence:
    """One action after its state: the response tokens form turn 0."""
    return TokenSequence(list(prompt_ids) + list(response_ids), [-1] * len(prompt_ids) + [0] * len(response_ids), 1)


def whole_sequence(seq: TokenSequence) -> TokenSequence:
    """The same ids with every predicted token (all but the first) in one turn: what a loss over the
    whole sequence scores (the authors' NLL term, their pairs having no prompt)."""
    return TokenSequence(seq.ids, [-1] + [0] * (len(seq.ids) - 1), 1)


def reference_prefix(tokenizer, reference: str) -> list[int]:
    """Token ids of the critic's reference-information prefix."""
    return tokenizer.encode(REFERENCE_TEMPLATE.format(reference=reference), add_special_tokens=False)


def with_prefix(seq: TokenSequence, prefix_ids: list[int]) -> TokenSequence:
    return TokenSequence(list(prefix_ids) + seq.ids, [-1] * len(prefix_ids) + seq.turn_index, seq.num_turns)


def collate(seqs: list[TokenSequence], pad_id: int) -> Batch:
    """Pad on the right to the longest sequence; turn counts per sequence."""
    if not seqs:
        raise ValueError("cannot collate an empty list of sequences")
    width = max(len(s.ids) for s in seqs)
    num_turns = max(s.num_turns for s in seqs)
    input_ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    turn_index = torch.full((len(seqs), width), -1, dtype=torch.long)
    counts = torch.zeros((len(seqs), num_turns), dtype=torch.float32)
    for b, seq in enumerate(seqs):
        n = len(seq.ids)
        input_ids[b, :n] = torch.tensor(seq.ids, dtype=torch.long)
        mask[b, :n] = 1
        turn_index[b, :n] = torch.tensor(seq.turn_index, dtype=torch.long)
        counts[b, : seq.num_turns] = torch.tensor(seq.turn_counts(), dtype=torch.float32)
    return Batch(input_ids, mask, turn_index, counts, num_turns)
