"""What the pipeline reads back and reports: the learning-signal rule and the run folder's results table."""

from __future__ import annotations

from pathlib import Path

from components.config.training import Algo
from components.data.records import Trajectory, read_jsonl, write_jsonl
from components.episodes.metrics import win_rate
from flows.planning.plan import RunPlan
from flows.runtime import inputs
from flows.runtime.iterations import Iteration
from flows.tracking.run_report import results_table
from tests.factories import make_trajectory


def test_rft_needs_a_trajectory_at_its_score_threshold_and_dpo_needs_pairs():
    rollouts = {"n_trajectories": 8, "success_rate": 0.0, "best_score": 1 / 3}
    assert "no successful trajectory among 8" in inputs.no_signal(Algo.rft, "rollouts", rollouts)
    assert inputs.no_signal(Algo.rft, "rollouts", rollouts, rft_min_score=0.3) is None
    assert "scoring 0.5" in inputs.no_signal(Algo.rft, "rollouts", rollouts, rft_min_score=0.5)
    assert inputs.no_signal(Algo.sweet, "rollouts", rollouts) is None
    assert "0 trajectory pairs" in inputs.no_signal(Algo.mtdpo, "train_pairs", {"pairs": 0})
    assert "pairs.min_gap" in inputs.no_signal(Algo.sweet, "train_pairs", {"pairs": 0, "rule": "gap"})
    assert "pairs.min_chosen_score" in inputs.no_signal(Algo.sweet, "train_pairs", {"pairs": 0, "rule": "best"})
    nothing = inputs.no_signal(Algo.sweet, "train_pairs", {"pairs": 0, "trajectories": 24, "best_score": 0.0})
    assert "every one scored 0" in nothing and "rollouts.offline" in nothing


def _metrics(score: float) -> dict:
    return {
        "n": 64,
        "mean_score": score,
        "mean_score_ci_low": score - 0.05,
        "mean_score_ci_high": score + 0.05,
        "success_rate": 0.0,
        "success_rate_ci_low": 0.0,
        "success_rate_ci_high": 0.0,
    }


def test_results_table_lists_zero_shot_each_iteration_and_each_baseline():
    plan = RunPlan(Algo.sweet, "default", {"task": {"name": "elicitation"}}, Path("runs/pipeline/x"))
    zero = Iteration(0, "base", metrics=_metrics(0.06))
    first = Iteration(1, "actor", metrics=_metrics(0.12))
    first.baselines = {
        "mtdpo": {"metrics": _metrics(0.08), "no_signal": None},
        "rft": {"metrics": {}, "no_signal": "no successful trajectory among 8"},
    }
    rows = [line.split("|")[1:-1] for line in results_table(plan, [zero, first]).splitlines()[4:]]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("zero-shot", "0"),
        ("sweet", "1"),
        ("mtdpo", "1"),
        ("rft", "1"),
    ]
    assert rows[1][2].strip() == "0.120 [0.070, 0.170]" and rows[1][5].strip() == "64"
    assert rows[1][4].strip() == ""  # no evaluation folders: no win rate
    assert "no learning signal (no successful trajectory among 8)" in rows[3][2]


def test_win_rate_against_zero_shot_pairs_the_same_tasks(tmp_path):
    def evaluated(name: str, scores: dict[str, float]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        rows = [make_trajectory(i, 0, s, task_id=t, seed=0, answered=True) for i, (t, s) in enumerate(scores.items())]
        write_jsonl(folder / "trajectories.jsonl", rows)
        return folder

    base = evaluated("zero", {"a": 0.5, "b": 0.7, "c": 0.2, "d": 0.9})
    trained = evaluated("one", {"a": 0.6, "b": 0.7, "c": 0.1, "e": 1.0})  # d and e are not shared
    plan = RunPlan(Algo.sweet, "default", {"task": {"name": "colbench-frontend"}}, Path("runs/pipeline/x"))
    zero = Iteration(0, "base", metrics=_metrics(0.5), eval_dir=str(base))
    first = Iteration(1, "actor", metrics=_metrics(0.6), eval_dir=str(trained))
    rows = [line.split("|")[1:-1] for line in results_table(plan, [zero, first]).splitlines()[4:]]
    assert rows[0][4].strip() == "" and rows[1][4].strip() == "0.500 (3)"  # win, tie, loss
    mine = list(read_jsonl(trained / "trajectories.jsonl", Trajectory))
    assert win_rate(mine, []) is None
