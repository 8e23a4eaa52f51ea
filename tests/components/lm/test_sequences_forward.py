"""Token sequences from stored ids, and the per-turn log-prob forward against a plain computation."""

from __future__ import annotations

import pytest
import torch

from components.data.records import Turn
from components.lm.forward import frozen_reference_sums, reference_sums, turn_logprob_sums
from components.lm.sequences import action_sequence, collate, dialogue_sequence, with_prefix
from tests.factories import make_trajectory


def turn(k, prompt, response):
    return Turn(index=k, action=f"a{k}", prompt_ids=prompt, response_ids=response)


def test_dialogue_sequence_follows_extending_prompts_and_marks_each_turn():
    traj = make_trajectory(turns=[turn(0, [1, 2], [3, 4]), turn(1, [1, 2, 3, 4, 5], [6])])
    seq = dialogue_sequence(traj)
    assert seq.ids == [1, 2, 3, 4, 5, 6]
    assert seq.turn_index == [-1, -1, 0, 0, -1, 1]
    assert seq.turn_counts() == [2, 1]


def test_dialogue_sequence_follows_a_re_encoded_prompt_from_the_first_difference():
    traj = make_trajectory(turns=[turn(0, [1, 2], [3, 4]), turn(1, [1, 2, 3, 9, 5], [6])])
    seq = dialogue_sequence(traj)
    assert seq.ids == [1, 2, 3, 9, 5, 6]
    assert seq.turn_index == [-1, -1, 0, -1, -1, 1]


def test_prefix_and_action_sequences_and_padding():
    seq = with_prefix(action_sequence([5, 6], [7, 8, 9]), [1, 1])
    assert seq.ids == [1, 1, 5, 6, 7, 8, 9] and seq.turn_index == [-1] * 4 + [0] * 3
    batch = collate([seq, action_sequence([5], [7])], pad_id=0)
    assert batch.input_ids.shape == (2, 7) and batch.input_ids[1].tolist() == [5, 7, 0, 0, 0, 0, 0]
    assert batch.attention_mask[1].tolist() == [1, 1, 0, 0, 0, 0, 0]
    assert batch.turn_index[1].tolist() == [-1, 0, -1, -1, -1, -1, -1]
    assert batch.counts.tolist() == [[3.0], [1.0]] and batch.tokens == 9
    with pytest.raises(ValueError):
        collate([], 0)


@pytest.fixture
def toy(toy_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32).eval()


def plain_turn_sums(model, seq):
    """Full logits, log-softmax, gather: the textbook computation for one unpadded sequence."""
    ids = torch.tensor([seq.ids])
    logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    token = logps.gather(-1, ids[0, 1:, None])[:, 0]
    return [
        sum(token[t - 1].item() for t in range(1, len(seq.ids)) if seq.turn_index[t] == k) for k in range(seq.num_turns)
    ]


def test_turn_logprob_sums_match_the_plain_computation_under_padding(toy):
    traj = make_trajectory(turns=[turn(0, [10, 11, 12], [13, 14]), turn(1, [10, 11, 12, 13, 14, 15], [16, 17, 18])])
    seqs = [dialogue_sequence(traj), action_sequence([20, 21], [22]), action_sequence([30], [31, 32, 33, 34])]
    with torch.no_grad():
        sums = turn_logprob_sums(toy, collate(seqs, pad_id=0))
    for b, seq in enumerate(seqs):
        torch.testing.assert_close(sums[b, : seq.num_turns], torch.tensor(plain_turn_sums(toy, seq)), atol=1e-4, rtol=0)
    assert sums[1, 1].item() == 0.0 and sums[2, 1].item() == 0.0  # turns a sequence does not have


def test_turn_logprob_sums_carry_gradients(toy):
    toy.train()
    sums = turn_logprob_sums(toy, collate([action_sequence([5, 6], [7, 8])], 0))
    sums.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in toy.parameters())


def test_reference_sums_are_cached_and_keyed_by_model_and_content(toy, tmp_path):
    seqs = [action_sequence([5, 6], [7, 8]), action_sequence([5], [9]), action_sequence([5, 6], [7, 8])]
    cache = tmp_path / "ref.jsonl"
    first = reference_sums(toy, "toy", seqs, cache, pad_id=0)
    assert first[0] == first[2] and len(cache.read_text().splitlines()) == 2  # duplicates computed once
    with torch.no_grad():
        toy.model.embed_tokens.weight.mul_(0)  # a cached value must not be recomputed
    assert reference_sums(toy, "toy", seqs, cache, pad_id=0) == first
    assert reference_sums(toy, "other", seqs[:1], cache, pad_id=0) != first[:1]  # another model: new keys


def test_frozen_reference_sums_load_no_model_when_the_cache_has_every_sequence(toy_model_dir, tmp_path, monkeypatch):
    from components.training import models

    seqs = [action_sequence([5, 6], [7, 8]), action_sequence([5], [9])]
    cache, path = tmp_path / "ref.jsonl", str(toy_model_dir)
    first = frozen_reference_sums(path, "float32", seqs, cache, pad_id=0, batch_size=2)

    def no_load(*args):
        raise AssertionError("the model was loaded although every sum is cached")

    monkeypatch.setattr(models, "load_frozen", no_load)
    assert frozen_reference_sums(path, "float32", seqs[::-1], cache, pad_id=0, batch_size=2) == first[::-1]
    with pytest.raises(AssertionError, match="was loaded"):  # one sequence not cached: the model is needed
        frozen_reference_sums(path, "float32", [action_sequence([5], [10])], cache, pad_id=0, batch_size=2)


def test_reference_sums_of_actions_sharing_a_prompt_equal_the_batched_forward(toy, tmp_path):
    seqs = [
        action_sequence([5, 6, 7], [8, 9]),
        action_sequence([5, 6, 7], [10]),
        action_sequence([4], [8, 9, 11]),
        dialogue_sequence(make_trajectory(turns=[turn(0, [3, 4], [5]), turn(1, [3, 4, 5, 6], [7, 8])])),
    ]
    got = reference_sums(toy, "toy", seqs, tmp_path / "ref.jsonl", pad_id=0, batch_size=2)
    with torch.no_grad():
        want = turn_logprob_sums(toy, collate(seqs, 0))
    for row, seq, expected in zip(got, seqs, want):
        assert row == pytest.approx(expected[: seq.num_turns].tolist(), abs=1e-4)
