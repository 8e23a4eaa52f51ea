"""CORY and PPO side by side: reward and KL curves pooled over seeds, and the reward-KL frontier.

Reads a frame of evaluation runs (components/tracking/compare.py `eval_runs`, one row per run, agent
and iteration; the rows with an agent are CORY/PPO's). Writes nothing but what `frontier_plot` is
asked to (a PNG); `format_pooled` returns text.

Pooling: the runs of one algorithm and profile are the seeds of one setting. Each (algo, profile,
agent, iteration) point is the mean over those runs with a 95% t-interval (no interval from one
run). A run folder counts once, with its latest evaluation: running a command again logs the same
run's evaluations again (every step skipped), and that is not another seed. The quantities are
those of answers sampled at temperature 1 from the agent (the stage's `sampled_reward` and
`sampled_kl`, the summed log pi - log pi_0 along an answer), which is what the paper's curves show;
runs from before the stage measured them fall back to the greedy answers' `task_reward` and `kl`.

Frontier (Ma et al. 2024, sec. 5: task reward against KL to the initial model): each agent's pooled
points in iteration order, KL on x, reward on y; a method whose curve lies above another's gains
more reward for the same drift from pi_0, which is CORY's claim against PPO.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REWARD, KL = "sampled_reward", "sampled_kl"
FALLBACK = {REWARD: "task_reward", KL: "kl"}  # the greedy answers' numbers, for runs without sampled ones
POOLED = (REWARD, KL, "entropy", "distinct_2")
KEYS = ["algo", "profile", "agent", "iteration"]


def t_interval(values: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the mean with a 95% Student-t interval; NaN bounds for fewer than 2 values."""
    from scipy import stats

    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def _value(df: pd.DataFrame, metric: str) -> pd.Series:
    own = df[metric] if metric in df else pd.Series(math.nan, index=df.index)
    fallback = FALLBACK.get(metric)
    return own.fillna(df[fallback]) if fallback and fallback in df else own


def pooled(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (algo, profile, agent, iteration) of the agent rows of `df` (eval_runs' columns,
    `run` and `start_time` among them): `seeds` (runs pooled) and, per quantity of POOLED, `<q>` (the
    mean), `<q>_low`, `<q>_high`."""
    rows = df[df["agent"].notna()].sort_values("start_time", kind="stable")
    rows = rows.drop_duplicates(["run", *KEYS], keep="last")
    values = pd.DataFrame({q: _value(rows, q) for q in POOLED}, index=rows.index)
    out = []
    for key, group in pd.concat([rows[KEYS], values], axis=1).groupby(KEYS, sort=True):
        row: dict[str, Any] = dict(zip(KEYS, key)) | {"seeds": len(group)}
        for q in POOLED:
            finite = group[q].dropna().to_numpy(dtype=float)
            mean, low, high = t_interval(finite) if len(finite) else (math.nan,) * 3
            row |= {q: mean, f"{q}_low": low, f"{q}_high": high}
        out.append(row)
    return pd.DataFrame(out, columns=[*KEYS, "seeds", *(f"{q}{s}" for q in POOLED for s in ("", "_low", "_high"))])


def _cell(row: pd.Series, q: str) -> str:
    if math.isnan(row[q]):
        return "-"
    bounds = "" if math.isnan(row[f"{q}_low"]) else f" [{row[f'{q}_low']:.3f}, {row[f'{q}_high']:.3f}]"
    return f"{row[q]:.3f}{bounds}"


def format_pooled(table: pd.DataFrame) -> str:
    """The pooled points as a fixed-width table, one line per agent and iteration."""
    head = ["algo/agent", "profile", "it", "seeds", "reward (sampled)", "KL (sampled)", "entropy", "distinct-2"]
    lines = [
        [f"{r.algo}/{r.agent}", str(r.profile), str(r.iteration), str(r.seeds), *(_cell(r, q) for q in POOLED)]
        for _, r in table.iterrows()
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *lines)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in [head, *lines])


def _band(ax: Any, points: pd.DataFrame, x: str, y: str, label: str) -> None:
    ax.plot(points[x], points[y], marker="o", label=label)
    if points[f"{y}_low"].notna().any():
        ax.fill_between(points[x], points[f"{y}_low"], points[f"{y}_high"], alpha=0.2)


def frontier_figure(table: pd.DataFrame) -> Any:
    """Three panels: reward and KL against the iteration (mean and 95% band), and reward against KL."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(16, 4.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    for key, points in table.groupby(["algo", "profile", "agent"], sort=True):
        label = f"{key[0]}/{key[2]} ({key[1]}, {points['seeds'].max()} seed(s))"
        points = points.sort_values("iteration")
        _band(axes[0], points, "iteration", REWARD, label)
        _band(axes[1], points, "iteration", KL, label)
        axes[2].plot(points[KL], points[REWARD], marker="o", label=label)
        for _, p in points.iloc[[0, -1]].iterrows():
            axes[2].annotate(str(p["iteration"]), (p[KL], p[REWARD]), fontsize="small")
    titles = [("iteration", "held-out reward (sampled)"), ("iteration", "KL to pi_0 (sampled)"),
              ("KL to pi_0 (sampled)", "held-out reward (sampled)")]  # fmt: skip
    for ax, (x, y) in zip(axes, titles):
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[2].set_title("reward-KL frontier (points: iterations)")
    axes[2].legend(fontsize="small")
    return fig


def frontier_plot(df: pd.DataFrame, path: Path) -> Path:
    """PNG at `path` of the pooled curves and frontier of the CORY/PPO rows of `df`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frontier_figure(pooled(df)).savefig(path, format="png", dpi=110)
    return path
