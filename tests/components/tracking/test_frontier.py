"""CORY/PPO curves pooled over seeds and the frontier plot (components/tracking/frontier.py)."""

import math

import pandas as pd
import pytest

from components.tracking.frontier import format_pooled, frontier_plot, pooled, t_interval


def _rows():
    rows = []
    for seed, (r1, k1) in enumerate([(0.1, 1.0), (0.2, 2.0), (0.3, 3.0)]):
        for algo, agent, gain in (("cory", "agent0", 1.0), ("cory", "agent1", 0.5), ("ppo", "agent0", 2.0)):
            run = dict(run=f"{algo}-{seed}", start_time=1, algo=algo, profile="reviews", agent=agent, task="reviews")
            rows.append(run | dict(iteration=0, sampled_reward=0.0, sampled_kl=0.0, task_reward=9.0, kl=9.0))
            rows.append(
                run | dict(iteration=1, sampled_reward=gain * r1, sampled_kl=gain * k1, task_reward=9.0, kl=9.0)
            )
    rows.append(dict(run="sweet-0", start_time=1, algo="sweet", profile="default", agent=None, iteration=1,
                     task="elicitation", task_reward=1.0))  # fmt: skip
    return pd.DataFrame(rows)


def test_the_t_interval_matches_hand_values():
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5) and low == 4.0 - high
    assert math.isnan(t_interval([1.0])[1])


def test_agents_are_pooled_over_the_runs_of_one_algorithm_and_profile():
    table = pooled(_rows())
    assert len(table) == 6 and set(table["seeds"]) == {3}  # (cory x 2 agents + ppo) x 2 iterations
    ppo = table[(table.algo == "ppo") & (table.iteration == 1)].iloc[0]
    assert ppo["sampled_reward"] == pytest.approx(0.4) and ppo["sampled_kl"] == pytest.approx(4.0)
    assert ppo["sampled_reward_high"] - 0.4 == pytest.approx(4.302653 * 0.2 / math.sqrt(3), rel=1e-5)
    assert "cory/agent1" in format_pooled(table) and "0.100 [" in format_pooled(table)


def test_a_run_evaluated_again_counts_once_with_its_latest_evaluation():
    first = _rows()
    again = first[first["run"] == "ppo-0"].assign(start_time=2, sampled_reward=lambda d: d["sampled_reward"] + 1)
    table = pooled(pd.concat([first, again], ignore_index=True))
    assert set(table["seeds"]) == {3}
    ppo = table[(table.algo == "ppo") & (table.iteration == 1)].iloc[0]
    assert ppo["sampled_reward"] == pytest.approx(0.4 + 1 / 3)  # ppo-0's latest numbers, counted once


def test_runs_without_sampled_answers_fall_back_to_the_greedy_numbers():
    old = _rows().drop(columns=["sampled_reward", "sampled_kl"])
    assert set(pooled(old)["sampled_reward"]) == {9.0}


def test_the_frontier_plot_is_written(tmp_path):
    path = frontier_plot(_rows(), tmp_path / "plots" / "frontier.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
