"""The critic-quality figures: pair accuracy with ties, agreement with exact turn values, turn-pair classes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from components.lm.advantage import pair_accuracy
from components.lm.critic_quality import (
    agreement,
    pair_figures,
    share_difference,
    state_agreement,
    turn_pair_classes,
)


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


def test_paired_difference_of_two_scorers_resamples_states_together():
    counts = np.array([2.0, 4.0, 0.0, 2.0])
    better, worse = np.array([2.0, 3.0, 0.0, 1.0]), np.array([1.0, 1.0, 0.0, 1.0])
    diff = share_difference(better, worse, counts)
    assert diff["difference"] == pytest.approx(3 / 8) and diff["states"] == 3  # the state without comparisons drops
    assert 0 <= diff["low"] < 3 / 8 < diff["high"]  # a never-worse scorer: no resample below 0
    same = share_difference(better, better, counts)
    assert same["difference"] == same["low"] == same["high"] == 0.0
    assert np.isnan(share_difference(better, worse, np.zeros(4))["difference"])


def test_turn_pairs_are_right_wrong_or_tied_in_exact_value():
    classes = turn_pair_classes([1.0, 0.0, 1 / 3, 0.0], [0.0, 1 / 3, 1 / 3, 0.0])
    assert classes == {"right": 0.25, "wrong": 0.25, "tie": 0.5, "n": 4}


def test_the_stage_writes_each_states_agreements_and_the_paired_differences(tmp_path):
    from components.data.records import Candidate, TurnCandidates
    from components.stages.critic_quality import agreement_differences

    def state(key: str) -> TurnCandidates:
        cands = [Candidate(text=str(i), response_ids=[i]) for i in range(3)]
        return TurnCandidates(task_id="t", task_index=0, trajectory=key, turn=1, prompt_ids=[1], candidates=cands)

    values = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    scores = {
        "trained": [[2.0, 1.0, 0.0], [1.0, 2.0, 3.0]],
        "untrained": [[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]],
        "learned": [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]],
        "random": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
    }
    metrics = agreement_differences([state("a"), state("b")], values, scores, 0.0, tmp_path / "agreement.jsonl")
    assert metrics["turn_value_agreement_trained_minus_untrained"] == 1.0  # 2 of 2 against 0 of 2
    assert metrics["turn_value_agreement_learned_minus_untrained"] == 0.5  # ties count half
    rows = [json.loads(line) for line in (tmp_path / "agreement.jsonl").read_text().splitlines()]
    first = {"state": "a#1", "comparisons": 2, "trained": 2.0, "untrained": 0.0, "learned": 1.0, "random": 1.0}
    assert rows[0] == first
    assert rows[1]["comparisons"] == 0
