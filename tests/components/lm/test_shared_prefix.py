"""Shared-prefix candidate scoring equals per-candidate full forwards and a hand computation."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from components.lm.shared_prefix import continuation_logprobs, continuation_logprobs_naive

VOCAB = 300


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
    )  # larger than the default 0.02: log-probs spread by
    # several nats and depend on context and position, so a mis-aligned cache shows far above 1e-4
    return LlamaForCausalLM(config).train()  # train mode on purpose: the scorers must switch to eval


def ids(seed: int, n: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


PREFIX = ids(1, 37)


def assert_same(batched, naive, lengths):
    assert [t.shape for t in batched] == [torch.Size([n]) for n in lengths]
    for b, n in zip(batched, naive):
        assert b.dtype == torch.float32 and b.device.type == "cpu"
        torch.testing.assert_close(b, n, atol=1e-4, rtol=0)


@pytest.mark.parametrize("max_batch", [16, 3, 1])
def test_batched_matches_naive_across_lengths_and_chunks(model, max_batch):
    lengths = [5, 1, 12, 3, 9, 2, 7, 1, 4, 11]  # unsorted, with one-token continuations
    conts = [ids(100 + i, n) for i, n in enumerate(lengths)]
    batched = continuation_logprobs(model, PREFIX, conts, max_batch=max_batch)
    assert_same(batched, continuation_logprobs_naive(model, PREFIX, conts), lengths)
    assert model.training  # the caller's mode is restored


def test_single_candidate_and_empty_list(model):
    cont = [ids(7, 6)]
    assert_same(continuation_logprobs(model, PREFIX, cont), continuation_logprobs_naive(model, PREFIX, cont), [6])
    assert continuation_logprobs(model, PREFIX, []) == []
    assert continuation_logprobs_naive(model, PREFIX, []) == []


def test_empty_continuation_gets_empty_tensor(model):
    conts = [ids(8, 4), [], ids(9, 2)]
    batched = continuation_logprobs(model, PREFIX, conts, max_batch=2)
    assert_same(batched, continuation_logprobs_naive(model, PREFIX, conts), [4, 0, 2])
    assert batched[1].dtype == torch.float32
    only_empty = continuation_logprobs(model, PREFIX, [[]])
    assert len(only_empty) == 1 and only_empty[0].numel() == 0


def test_values_equal_manual_computation(model):
    cont = ids(10, 5)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([PREFIX + cont])).logits[0].float()
    model.train()
    logps = torch.log_softmax(logits, dim=-1)
    expected = torch.stack([logps[len(PREFIX) - 1 + j, tok] for j, tok in enumerate(cont)])
    torch.testing.assert_close(
        continuation_logprobs(model, PREFIX, [cont], max_batch=1)[0], expected, atol=1e-4, rtol=0
    )
    torch.testing.assert_close(continuation_logprobs_naive(model, PREFIX, [cont])[0], expected, atol=1e-5, rtol=0)


def test_rejects_empty_prefix_and_bad_batch(model):
    with pytest.raises(ValueError):
        continuation_logprobs(model, [], [[1, 2]])
    with pytest.raises(ValueError):
        continuation_logprobs_naive(model, [], [[1, 2]])
    with pytest.raises(ValueError):
        continuation_logprobs(model, PREFIX, [[1]], max_batch=0)
