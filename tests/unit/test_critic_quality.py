"""The critic-quality figures: pair accuracy with ties, agreement with exact turn values, turn-pair classes."""

from __future__ import annotations

import pytest
import torch

from components.lm.advantage import pair_accuracy
from components.lm.critic_quality import agreement, pair_figures, state_agreement, turn_pair_classes


def test_pair_accuracy_counts_ties_half():
    margins = torch.tensor([0.5, -0.5, 2e-8, -2e-8])
    assert pair_accuracy(margins, 1e-4) == pytest.approx(0.5)  # one right, one wrong, two ties
    assert pair_accuracy(margins, 0.0) == pytest.approx(0.5)  # without tolerance the tiny margins decide
    assert pair_accuracy(torch.tensor([2e-8, 3e-8]), 0.0) == 1.0
    assert pair_accuracy(torch.tensor([2e-8, 3e-8]), 1e-4) == 0.5
    assert pair_figures([0.5, 0.0, -1.0, 0.2], 1e-4) == {"accuracy": pytest.approx(0.625), "ties": 0.25, "n": 4}
    assert pair_figures([], 1e-4) == {"n": 0}


def test_agreement_compares_only_candidates_whose_values_differ():
    values = [1.0, 0.0, 0.0, 1 / 3]
    assert state_agreement(values, [3.0, 0.0, 1.0, 2.0], 0.0) == (5.0, 5)  # the 0-0 pair is no comparison
    assert state_agreement(values, [0.0, 3.0, 1.0, 2.0], 0.0) == (1.0, 5)  # only 1/3 over the 0 at score 1
    assert state_agreement(values, [1.0, 1.0, 1.0, 1.0], 0.0) == (2.5, 5)  # all ties: half each
    assert state_agreement([0.0, 0.0], [1.0, 2.0], 0.0) == (0.0, 0)


def test_pooled_agreement_weighs_comparisons_and_resamples_states():
    values = [[1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0]]
    right = agreement(values, [[1.0, 0.0], [1.0, 0.0, 0.0], [5.0, 1.0]], 0.0)
    assert right == {"agreement": 1.0, "low": 1.0, "high": 1.0, "comparisons": 3}
    mixed = agreement(values, [[1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0]], 0.0)
    assert mixed["agreement"] == pytest.approx(1 / 3) and mixed["comparisons"] == 3
    assert mixed["low"] <= 1 / 3 <= mixed["high"] and mixed["low"] < mixed["high"]


def test_turn_pairs_are_right_wrong_or_tied_in_exact_value():
    classes = turn_pair_classes([1.0, 0.0, 1 / 3, 0.0], [0.0, 1 / 3, 1 / 3, 0.0])
    assert classes == {"right": 0.25, "wrong": 0.25, "tie": 0.5, "n": 4}
