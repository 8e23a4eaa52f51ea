"""results.md's critic-quality table (components/tracking/critic_report.py) from hand-made metrics."""

from __future__ import annotations

import math
from pathlib import Path

from components.config.training import Algo
from components.tracking.critic_report import critic_quality_table
from flows.planning.plan import RunPlan
from flows.runtime.iterations import Iteration
from flows.tracking.run_report import results_table

QUALITY = {
    "tie_tolerance": 1e-4,
    "ranking_baseline": "actor",
    "heldout_pair_accuracy_trained": 0.75,
    "heldout_pair_accuracy_trained_n": 8,
    "heldout_pair_accuracy_untrained": 0.5,
    "heldout_pair_accuracy_untrained_n": 8,
    "turn_value_agreement_trained": 0.638,
    "turn_value_agreement_trained_low": 0.55,
    "turn_value_agreement_trained_high": 0.7204,
    "turn_value_agreement_trained_comparisons": 141,
    "turn_value_agreement_untrained": 0.645,
    "turn_value_agreement_untrained_low": 0.56,
    "turn_value_agreement_untrained_high": 0.73,
    "turn_value_agreement_learned": 0.489,
    "turn_value_agreement_learned_low": 0.4,
    "turn_value_agreement_learned_high": 0.58,
    "turn_value_agreement_random": 0.5,
    "turn_value_agreement_random_low": 0.42,
    "turn_value_agreement_random_high": 0.58,
    "turn_pairs_right": 5 / 36,
    "turn_pairs_wrong": 1 / 36,
    "turn_pairs_tie": 30 / 36,
    "turn_pairs_n": 36,
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("|")[1:-1]]


def test_one_row_per_model_with_accuracies_intervals_and_turn_pair_shares():
    table = critic_quality_table([("sweet", 1, QUALITY, None), ("sweet-noc", 1, {}, "0 trajectory pairs")])
    lines = table.splitlines()
    assert lines[0] == "## Critic quality"
    head, rows = _cells(lines[4]), [_cells(line) for line in lines[6:]]
    assert len(rows[0]) == len(head) == 11
    assert rows[0] == [
        "sweet",
        "1",
        "0.750",
        "0.500",
        "8",
        "0.638 [0.550, 0.720]",
        "0.645 [0.560, 0.730]",
        "0.489 [0.400, 0.580]",
        "0.500 [0.420, 0.580]",
        "141",
        "0.139 / 0.028 / 0.833 (36)",
    ]
    assert rows[1][:3] == ["sweet-noc", "1", "not measured: no learning signal (0 trajectory pairs)"]


def test_absent_figures_print_a_dash_and_an_unmeasured_run_gets_no_table():
    sparse = {"heldout_pair_accuracy_trained_n": 0, "turn_value_agreement_trained": math.nan}
    row = _cells(critic_quality_table([("sweet", 1, sparse, None)]).splitlines()[6])
    assert row[2:6] == ["-", "-", "0", "-"] and row[-1] == "-"
    assert critic_quality_table([("sweet", 1, {}, "no pairs")]) == ""


def test_results_md_gains_the_table_for_the_run_and_its_sweet_ablations_only():
    plan = RunPlan(Algo.sweet, "smoke", {"task": {"name": "elicitation"}}, Path("runs/pipeline/x"))
    metrics = {"n": 2, "mean_score": 0.5, "success_rate": 0.0}
    metrics |= {f"{k}_ci_{b}": 0.0 for k in ("mean_score", "success_rate") for b in ("low", "high")}
    first = Iteration(1, "actor", metrics=metrics, critic_quality=QUALITY)
    first.baselines = {
        "mtdpo": {"metrics": metrics, "no_signal": None},
        "sweet-untrained": {"metrics": metrics, "no_signal": None, "critic_quality": QUALITY},
    }
    text = results_table(plan, [Iteration(0, "base", metrics=metrics), first])
    quality = text.split("## Critic quality")[1]
    models = [_cells(line)[0] for line in quality.splitlines() if line.startswith("| ") and "model" not in line]
    assert models == ["sweet", "sweet-untrained"]
    assert "| mtdpo | 1 |" in text.split("## Critic quality")[0]
