"""The critic-quality table of a pipeline run's results.md: one row per SWEET-RL model of the run.

Reads nothing itself: each row's numbers are the critic-quality step's metrics.json
(components/stages/critic_quality.py, as a dict) of one SWEET-RL model (an iteration of the run,
or a SWEET-RL ablation of `--baselines`). Shown per model: the Bradley-Terry pair accuracy on the
held-out pairs of the trained critic (as used in the ranking) and of the untrained critic, with
their count; the agreement with the task's exact turn value, with its 95% interval over states,
for the trained critic, the untrained critic with c, the learned part alone (trained minus its
frozen reference) and random scores, and the count of comparisons; the right / wrong / tie
shares of the turn pairs the actor trained on. Missing figures (a task without turn values, no
held-out pairs) print `-`. Light on purpose: no torch, no MLflow.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

SCORERS = ("trained", "untrained", "learned", "random")
HEAD = (
    "| model | iteration | held-out pair accuracy: trained | untrained | held-out pairs "
    "| turn-value agreement [95% CI]: trained | untrained with c | learned part | random | comparisons "
    "| turn pairs right / wrong / tie (n) |"
)
LEGEND = (
    "Pair accuracy: share of held-out trajectory pairs (tasks the critic never trained on) a critic "
    "orders right, ties half. Turn-value agreement: share of candidate comparisons ordered as the "
    "task's exact turn value orders them; `learned part` is the trained critic minus its frozen "
    "reference, `random` the chance level. Turn pairs: the actor's DPO pairs against the same value."
)


def _number(m: Mapping[str, Any], key: str, digits: int = 3) -> str:
    value = m.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _count(m: Mapping[str, Any], key: str) -> str:
    value = m.get(key)
    return "-" if value is None else str(int(value))


def agreement_cell(m: Mapping[str, Any], scorer: str) -> str:
    """`0.638 [0.552, 0.720]`: a scorer's turn-value agreement and its 95% interval (`-` when absent)."""
    key = f"turn_value_agreement_{scorer}"
    if _number(m, key) == "-":
        return "-"
    return f"{_number(m, key)} [{_number(m, key + '_low')}, {_number(m, key + '_high')}]"


def turn_pairs_cell(m: Mapping[str, Any]) -> str:
    if "turn_pairs_n" not in m:
        return "-"
    shares = " / ".join(_number(m, f"turn_pairs_{k}") for k in ("right", "wrong", "tie"))
    return f"{shares} ({_count(m, 'turn_pairs_n')})"


def quality_row(model: str, iteration: int, m: Mapping[str, Any]) -> str:
    """One model's row from its critic-quality metrics."""
    cells = [
        model,
        str(iteration),
        _number(m, "heldout_pair_accuracy_trained"),
        _number(m, "heldout_pair_accuracy_untrained"),
        _count(m, "heldout_pair_accuracy_trained_n"),
        *(agreement_cell(m, s) for s in SCORERS),
        _count(m, "turn_value_agreement_trained_comparisons"),
        turn_pairs_cell(m),
    ]
    return "| " + " | ".join(cells) + " |"


def critic_quality_table(rows: Sequence[tuple[str, int, Mapping[str, Any], str | None]]) -> str:
    """Markdown section of (model, iteration, critic-quality metrics, why not measured) rows; a row
    without metrics says why (e.g. no learning signal). Empty when no row was measured."""
    if not any(m for _, _, m, _ in rows):
        return ""
    lines = ["## Critic quality", "", LEGEND, "", HEAD, "|---|---:|---|---|---:|---|---|---|---|---:|---|"]
    for model, iteration, m, why in rows:
        if m:
            lines.append(quality_row(model, iteration, m))
        else:
            note = f"not measured: no learning signal ({why})" if why else "not measured"
            lines.append(f"| {model} | {iteration} | {note} |" + " |" * 8)
    return "\n".join(lines) + "\n"
