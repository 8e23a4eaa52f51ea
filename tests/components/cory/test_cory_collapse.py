"""The collapse indicators against hand-computed values (components/cory/collapse.py)."""

import math

import pytest
import torch

from components.cory.collapse import distinct_n, token_entropy


def test_distinct_n_counts_distinct_ngrams_over_all_answers():
    assert distinct_n([[1, 2, 3], [1, 2, 4]], 1) == pytest.approx(4 / 6)
    assert distinct_n([[1, 2, 3], [1, 2, 4]], 2) == pytest.approx(3 / 4)  # (1,2) twice, (2,3), (2,4)
    assert distinct_n([[5, 5, 5, 5]], 2) == pytest.approx(1 / 3)  # a collapsed answer
    assert distinct_n([[1], []], 2) == 0.0  # no bigram at all


def test_token_entropy_is_log_v_for_uniform_zero_for_certain_and_masked_to_zero():
    vocab = 8
    logits = torch.zeros(1, 3, vocab)
    logits[0, 1, 2] = 100.0  # all mass on one token
    mask = torch.tensor([[True, True, False]])
    entropy = token_entropy(logits, mask)
    assert entropy[0, 0].item() == pytest.approx(math.log(vocab))
    assert entropy[0, 1].item() == pytest.approx(0.0, abs=1e-6) and entropy[0, 2].item() == 0.0
