import random

import pytest

from components.config.training import PairRule, PairsConfig, TurnPairing
from components.stages.pairs import gap_pairs, resolve_rule, trajectory_pairs, turn_pairs
from tests.factories import make_trajectory


def traj(task, seed, score):
    return make_trajectory(0, seed, score, task_id=task, seed=seed, answered=True)


def test_best_solved_trajectory_is_chosen_against_every_strictly_worse_one():
    trajs = [traj("a", 0, 0.5), traj("a", 1, 1.0), traj("a", 2, 1.0), traj("a", 3, 0.0), traj("b", 0, 0.9)]
    pairs = trajectory_pairs(trajs)
    assert [(c.run_seed, r.run_seed) for c, r in pairs] == [(1, 0), (1, 3)]  # ties: lowest seed chosen


def test_threshold_zero_keeps_unsolved_tasks_and_all_equal_gives_no_pair():
    trajs = [traj("b", 0, 0.9), traj("b", 1, 0.2), traj("c", 0, 0.3), traj("c", 1, 0.3)]
    assert [(c.score, r.score) for c, r in trajectory_pairs(trajs, min_chosen_score=0.0)] == [(0.9, 0.2)]
    assert trajectory_pairs(trajs) == []


def test_unscored_trajectories_are_rejected():
    with pytest.raises(ValueError, match="not scored"):
        trajectory_pairs([traj("a", 0, None)])


def test_gap_pairs_take_every_two_scores_far_enough_apart():
    trajs = [traj("a", 0, 0.62), traj("a", 1, 0.80), traj("a", 2, 0.75), traj("b", 0, 0.5), traj("b", 1, 0.55)]
    pairs = gap_pairs(trajs, min_gap=0.1)
    assert [(c.run_seed, r.run_seed) for c, r in pairs] == [(1, 0), (2, 0)]  # 0.80-0.75 and task b too close
    assert [(c.score, r.score) for c, r in gap_pairs(trajs, min_gap=0.05)][-1] == (0.55, 0.5)
    assert trajectory_pairs(trajs) == []  # rule best: nothing reaches 1.0


def test_rule_auto_is_the_tasks_own():
    assert resolve_rule(PairsConfig(), "colbench-frontend") == PairRule.gap
    assert resolve_rule(PairsConfig(), "colbench-backend") == PairRule.best
    assert resolve_rule(PairsConfig(), "elicitation") == PairRule.best
    assert resolve_rule(PairsConfig(rule="gap"), "elicitation") == PairRule.gap


def test_turn_pairs_cross_the_halves_and_prefer_the_higher_score():
    scores = [0.1, 0.9, 0.5, 0.7, 0.3, 0.2, 0.8, 0.4]
    pairs = turn_pairs(scores, per_state=4, rng=random.Random(0))
    upper = {1, 6, 3, 2}
    assert len(pairs) == 4 and len(set(pairs)) == 4
    for chosen, rejected in pairs:
        assert chosen in upper and rejected not in upper and scores[chosen] > scores[rejected]


def test_turn_pairs_odd_count_ties_and_determinism():
    assert turn_pairs([0.5, 0.5, 0.5, 0.5], 4, random.Random(0)) == []
    pairs = turn_pairs([0.9, 0.5, 0.1], 4, random.Random(1))
    assert pairs == [(0, 2)]  # the middle candidate is left out
    scores = [i / 16 for i in range(16)]
    assert turn_pairs(scores, 4, random.Random(7)) == turn_pairs(scores, 4, random.Random(7))


def test_best_worse_pairs_the_top_candidate_with_the_lowest_ones():
    scores = [0.2, 0.9, 0.5, 0.1, 0.7, 0.9]
    pairs = turn_pairs(scores, 2, random.Random(0), TurnPairing.best_worse)
    assert pairs == [(1, 3), (1, 0)]  # the first of the tied best; the lowest first
    assert turn_pairs([0.3, 0.3, 0.3], 2, random.Random(0), TurnPairing.best_worse) == []  # ties: no preference
    assert turn_pairs([0.9, 0.1], 4, random.Random(0), TurnPairing.best_worse) == [(0, 1)]
