"""How well a critic's scores order what matters: the figures of SWEET-RL's critic quality, pure functions
of numbers (the stage that gathers them is components/stages/critic_quality.py).

- `pair_figures`: on trajectory pairs (chosen scored higher than rejected by the task), the share a
  scorer orders right, a tie (|margin| <= tolerance) counting half, so a scorer that cannot tell the
  two apart gets 0.5.
- `agreement`: on the candidate actions of one turn state, every two candidates whose exact turn
  values differ (Task.turn_value) is a comparison; the scorer agrees when it orders them as the
  values do (a tie counts half). Pooled over states, with a 95% bootstrap interval that resamples
  states (the comparisons of one state are not independent). `share_difference`: one scorer's
  agreement minus another's on the same comparisons, the states resampled together (paired).
- `turn_pair_classes`: each turn pair the actor trains on is right (chosen worth more), wrong or a
  tie in exact value.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def ordered(margin: float, tolerance: float) -> float:
    """1 when a margin (higher-valued minus lower-valued side's score) is positive beyond the
    tolerance, 0 when negative beyond it, 0.5 for a tie."""
    if margin > tolerance:
        return 1.0
    return 0.0 if margin < -tolerance else 0.5


def pair_figures(margins: Sequence[float], tolerance: float) -> dict[str, float]:
    """Accuracy (ties half), tie share and count of chosen-minus-rejected score margins (the count
    alone when there are none)."""
    marks = [ordered(m, tolerance) for m in margins]
    if not marks:
        return {"n": 0}
    return {"accuracy": float(np.mean(marks)), "ties": float(np.mean([m == 0.5 for m in marks])), "n": len(marks)}


def state_agreement(values: Sequence[float], scores: Sequence[float], tolerance: float) -> tuple[float, int]:
    """(agreeing comparisons, comparisons) of one state's candidates: the pairs whose values differ."""
    agree, n = 0.0, 0
    for i in range(len(values)):
        for j in range(i + 1, len(values)):
            if values[i] == values[j]:
                continue
            hi, lo = (i, j) if values[i] > values[j] else (j, i)
            agree += ordered(scores[hi] - scores[lo], tolerance)
            n += 1
    return agree, n


def ratio_interval(agree: np.ndarray, counts: np.ndarray, samples: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of sum(agree) / sum(counts) when the states that hold comparisons are
    resampled."""
    agree, counts = agree[counts > 0], counts[counts > 0]
    if counts.sum() == 0 or len(counts) < 2:
        share = float(agree.sum() / counts.sum()) if counts.sum() else float("nan")
        return share, share
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(counts), size=(samples, len(counts)))
    shares = agree[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.percentile(shares, [2.5, 97.5])
    return float(low), float(high)


def agreement(
    values: Sequence[Sequence[float]],
    scores: Sequence[Sequence[float]],
    tolerance: float,
    samples: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Pooled agreement of a scorer with the exact values over states (each a list of candidates)."""
    per_state = [state_agreement(v, s, tolerance) for v, s in zip(values, scores)]
    agree = np.array([a for a, _ in per_state], dtype=float)
    counts = np.array([n for _, n in per_state], dtype=float)
    low, high = ratio_interval(agree, counts, samples, seed)
    share = float(agree.sum() / counts.sum()) if counts.sum() else float("nan")
    return {"agreement": share, "low": low, "high": high, "comparisons": int(counts.sum())}


def share_difference(
    agree_a: np.ndarray, agree_b: np.ndarray, counts: np.ndarray, samples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Agreement of scorer a minus scorer b over the same states' comparisons (per state: agreeing
    comparisons of each, comparisons), with a 95% interval resampling the states with comparisons:
    the pooled share of the per-state differences (`ratio_interval` on a - b)."""
    diff, keep = np.asarray(agree_a) - np.asarray(agree_b), counts > 0
    if counts.sum() == 0:
        return {"difference": float("nan"), "low": float("nan"), "high": float("nan"), "states": 0}
    low, high = ratio_interval(diff, counts, samples, seed)
    return {"difference": float(diff.sum() / counts.sum()), "low": low, "high": high, "states": int(keep.sum())}


def turn_pair_classes(chosen_values: Sequence[float], rejected_values: Sequence[float]) -> dict[str, float]:
    """Shares of turn pairs whose chosen action is worth more (right), less (wrong) or as much (tie)."""
    n = len(chosen_values)
    right = sum(c > r for c, r in zip(chosen_values, rejected_values))
    wrong = sum(c < r for c, r in zip(chosen_values, rejected_values))
    if not n:
        return {"right": float("nan"), "wrong": float("nan"), "tie": float("nan"), "n": 0}
    return {"right": right / n, "wrong": wrong / n, "tie": (n - right - wrong) / n, "n": n}
