"""CORY's reward-shaping variants (components/cory/shaping.py) against hand-computed values: TRL's
adaptive KL controller, its running score moments, and one shaping call of each variant."""

import math

import numpy as np
import pytest
import torch

from components.config.cory import CoryConfig, ScoreScaling, Shaping
from components.cory.shaping import (
    EPS,
    SCALERS,
    SHAPERS,
    KLEstimates,
    ScoreMoments,
    ShapingState,
    adaptive_kl_coef,
    initial_state,
    paper_shaping,
    trl_shaping,
    update_moments,
)


@pytest.mark.parametrize(
    "kl, expected",
    [
        (6.0, 0.4),  # on target: unchanged
        (6.6, 0.4 * (1 + 0.1 * 256 / 10000)),  # 10% above: error 0.1
        (3.0, 0.4 * (1 - 0.2 * 256 / 10000)),  # half the target: error -0.5, clipped to -0.2
        (100.0, 0.4 * (1 + 0.2 * 256 / 10000)),  # far above: clipped to +0.2
        (0.0, 0.4 * (1 - 0.2 * 256 / 10000)),
    ],
)
def test_adaptive_kl_update_rule_by_hand(kl, expected):
    # TRL AdaptiveKLController with the authors' batch of 256: coef *= 1 + clip(kl/target - 1, +-0.2) * n / horizon
    assert adaptive_kl_coef(0.4, kl, target=6.0, horizon=10000.0, n_steps=256) == pytest.approx(expected, rel=1e-12)


def test_running_moments_by_hand_and_against_all_scores_at_once():
    first = update_moments(ScoreMoments(), torch.tensor([1.0, 2.0, 3.0]))
    # the initial (mean 0, var 1) weighs count 1e-24: the moments are the batch's own
    assert first.mean == pytest.approx(2.0) and first.var == pytest.approx(2 / 3)
    assert first.std == pytest.approx(1.0) and first.count == pytest.approx(3.0)  # sample std of 1, 2, 3
    second = update_moments(first, torch.tensor([4.0, 6.0]))
    # all five scores: mean 16/5 = 3.2, population var 66/5 - 3.2^2 = 2.96, sample std sqrt(2.96 * 5/4)
    assert second.mean == pytest.approx(3.2) and second.var == pytest.approx(2.96)
    assert second.std == pytest.approx(math.sqrt(3.7)) and second.count == pytest.approx(5.0)
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=n) for n in (4, 7, 2, 9)]
    m = ScoreMoments()
    for b in batches:
        m = update_moments(m, torch.tensor(b, dtype=torch.float32))
    every = np.concatenate(batches).astype(np.float32)
    assert m.mean == pytest.approx(every.mean(), rel=1e-5)
    assert m.std == pytest.approx(every.std(ddof=1), rel=1e-5)


def test_score_scalers_by_hand():
    scores = torch.tensor([0.0, 2.0])  # batch mean 1, sample std sqrt(2)
    raw, kept = SCALERS[ScoreScaling.none](scores, ScoreMoments())
    assert raw.tolist() == [0.0, 2.0] and kept == ScoreMoments()  # TRL without scaling never updates
    scaled, m = SCALERS[ScoreScaling.scale](scores, ScoreMoments())
    assert scaled.tolist() == pytest.approx([0.0, 2.0 / (math.sqrt(2) + EPS)])
    normed, m2 = SCALERS[ScoreScaling.norm](scores, ScoreMoments())
    assert normed.tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-6)
    assert m == m2 and m.mean == pytest.approx(1.0)


def kl_estimates():
    sampled = torch.tensor([[0.3, -0.1], [0.2, 7.0]])
    full = torch.tensor([[0.5, 0.25], [0.75, 9.0]])
    return KLEstimates(sampled, full), torch.tensor([[True, True], [True, False]])


def test_paper_shaping_is_fixed_eta_sampled_kl_and_raw_rewards():
    cfg = CoryConfig(eta=0.1)
    kl, mask = kl_estimates()
    state = initial_state(cfg)
    assert state == ShapingState(0.1)
    shaped = paper_shaping(torch.tensor([1.0, 0.0]), kl, mask, state, cfg)
    assert shaped.rewards.flatten().tolist() == pytest.approx([-0.03, 1.01, -0.02, 0.0])
    assert torch.equal(shaped.kl, kl.sampled) and shaped.scores.tolist() == [1.0, 0.0]
    assert shaped.state == state and shaped.kl_coef == 0.1


def test_trl_shaping_by_hand():
    cfg = CoryConfig(shaping="trl", trl={"init_kl_coef": 0.4, "target": 1.0, "horizon": 10.0, "score_scaling": "norm"})
    kl, mask = kl_estimates()
    state = initial_state(cfg)
    assert state == ShapingState(0.4)
    shaped = trl_shaping(torch.tensor([0.0, 2.0]), kl, mask, state, cfg)
    # scores: moments of {0, 2} (mean 1, sample std sqrt 2) absorbed first, then (r - 1) / sqrt 2
    s = 1 / math.sqrt(2)
    assert shaped.scores.tolist() == pytest.approx([-s, s], rel=1e-6)
    # full KL, current coefficient 0.4: row 0 [-0.2, -0.1 - s]; row 1 [-0.3 + s] (padding ignored)
    assert shaped.rewards.flatten().tolist() == pytest.approx([-0.2, -0.1 - s, -0.3 + s, 0.0], rel=1e-6)
    assert shaped.kl_coef == 0.4 and torch.equal(shaped.kl, kl.full)
    # next coefficient: mean summed KL (0.75 + 0.75) / 2 = 0.75 -> error -0.25, clipped -0.2; n = 2 rows
    assert shaped.state.kl_coef == pytest.approx(0.4 * (1 - 0.2 * 2 / 10))
    assert shaped.state.moments.mean == pytest.approx(1.0) and shaped.state.moments.count == pytest.approx(2.0)
    assert state == ShapingState(0.4)  # the input state is not mutated


def test_every_variant_has_a_function_and_the_state_round_trips():
    assert set(SHAPERS) == set(Shaping) and set(SCALERS) == set(ScoreScaling)
    state = ShapingState(0.123, ScoreMoments(1.5, 2.0, 1.7, 9.0))
    assert ShapingState.from_dict(state.state_dict()) == state
