"""Side-by-side comparison of pipeline runs: evaluated iterations from the MLflow store.

Reads: the MLflow store (`tracking.configure()`: sqlite under mlflow/ unless MLFLOW_TRACKING_URI is set).
The pipeline logs one parent run per pipeline run (tags `sweetflow.kind=pipeline`, `sweetflow.algo`,
`sweetflow.profile`) and, under it, one nested run per evaluation of an iteration's actor (tags
`sweetflow.kind=eval`, `sweetflow.algo`, `sweetflow.iteration`; 0 is the base model before training)
with metrics `success_rate`, `tests_passed`, `n` and, when the evaluation computed them, the 95%
interval bounds `<metric>_ci_low` / `<metric>_ci_high`. CORY/PPO runs (GSM8K) log one eval run per
iteration and agent (tag `sweetflow.agent`) with success_rate = pass@1 and the task_reward, kl and
objective (task reward - eta * KL) columns, which appear whenever some run logged them.
Writes: a fixed-width table (returned as text) and a PNG plot of each metric against the iteration,
one line per parent run, with error bars from the intervals.
No paper equation is implemented here; this is the "compare iterations and algorithms" view of the
SWEET-RL paper's tables (success rate and % tests passed per method), read from our own runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

DEFAULT_EXPERIMENT = "sweetflow-pipeline"
BASE_METRICS = ("success_rate", "tests_passed")
OPTIONAL_METRICS = ("task_reward", "kl", "objective")  # shown when some eval run logged them (CORY, PPO)
CI_BOUNDS = ("ci_low", "ci_high")
_EVAL_FILTER = "tags.`sweetflow.kind` = 'eval'"
_TAG_COLUMNS = {
    "algo": "sweetflow.algo",
    "iteration": "sweetflow.iteration",
    "profile": "sweetflow.profile",
    "agent": "sweetflow.agent",
}


class CompareError(ValueError):
    """The store cannot answer the comparison (e.g. the experiment does not exist)."""


def _experiment(name: str) -> Any:
    import mlflow

    found = mlflow.get_experiment_by_name(name)
    if found is None:
        names = sorted(e.name for e in mlflow.search_experiments())
        known = ", ".join(names) if names else "none"
        raise CompareError(
            f"MLflow experiment '{name}' not found at {mlflow.get_tracking_uri()}; experiments there: {known}"
        )
    return found


def _metric_columns(metrics: Sequence[str]) -> list[str]:
    """Each metric followed by its interval bounds, base metrics first, no duplicates."""
    names = list(dict.fromkeys([*BASE_METRICS, *metrics]))
    return [col for m in names for col in (m, f"{m}_{CI_BOUNDS[0]}", f"{m}_{CI_BOUNDS[1]}")] + ["n"]


def _parents(experiment_id: str, parent_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """run id -> name, profile of each parent (pipeline) run that exists in the experiment."""
    import mlflow

    if not parent_ids:
        return {}
    quoted = ", ".join(f"'{p}'" for p in parent_ids)
    found = mlflow.search_runs([experiment_id], filter_string=f"attributes.run_id IN ({quoted})", output_format="list")
    return {r.info.run_id: {"name": r.info.run_name, "profile": r.data.tags.get("sweetflow.profile")} for r in found}


def eval_runs(experiment: str = DEFAULT_EXPERIMENT, metrics: Sequence[str] = ()) -> pd.DataFrame:
    """One row per evaluated iteration in `experiment` (an empty frame when there is none).

    Columns: run (the parent pipeline run's name), algo, iteration (int), profile (the parent's tag,
    else the eval run's), agent (CORY/PPO's evaluated agent, else None), each metric in BASE_METRICS,
    OPTIONAL_METRICS that some run logged, and `metrics`, with its `_ci_low`/`_ci_high`
    bounds (NaN where not logged), n, start_time and status (of the eval run), run_id, parent_run_id.
    Sorted by algo, then iteration, then start time. Raises CompareError if the experiment is unknown.
    """
    import mlflow

    exp = _experiment(experiment)
    found = mlflow.search_runs([exp.experiment_id], filter_string=_EVAL_FILTER, output_format="list")
    logged = {name for r in found for name in r.data.metrics}
    metrics = [*[m for m in OPTIONAL_METRICS if m in logged], *metrics]
    parents = _parents(exp.experiment_id, sorted({r.data.tags.get("mlflow.parentRunId", "") for r in found} - {""}))
    rows = []
    for r in found:
        tags, parent_id = r.data.tags, r.data.tags.get("mlflow.parentRunId")
        parent = parents.get(parent_id or "", {})
        row: dict[str, Any] = {key: tags.get(tag) for key, tag in _TAG_COLUMNS.items()}
        row.update(run=parent.get("name") or r.info.run_name, profile=parent.get("profile") or row["profile"])
        row.update({col: r.data.metrics.get(col, math.nan) for col in _metric_columns(metrics)})
        row.update(
            start_time=pd.to_datetime(r.info.start_time, unit="ms", utc=True),
            status=r.info.status,
            run_id=r.info.run_id,
            parent_run_id=parent_id,
        )
        rows.append(row)
    columns = ["run", *_TAG_COLUMNS, *_metric_columns(metrics), "start_time", "status", "run_id", "parent_run_id"]
    df = pd.DataFrame(rows, columns=columns)
    df["iteration"] = pd.to_numeric(df["iteration"], errors="coerce").astype("Int64")
    return df.sort_values(["algo", "iteration", "start_time"], na_position="last", kind="stable", ignore_index=True)


def _metrics_in(df: pd.DataFrame) -> list[str]:
    """The metric names with a value column in `df` (base metrics first), in column order."""
    return [c for c in df.columns if f"{c}_{CI_BOUNDS[0]}" in df.columns and f"{c}_{CI_BOUNDS[1]}" in df.columns]


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def _interval(low: Any, high: Any) -> str:
    return "-" if pd.isna(low) or pd.isna(high) else f"[{low:.3f}, {high:.3f}]"


def _algo(row: pd.Series) -> str:
    """The algo, and for CORY/PPO the evaluated agent: `sweet`, `cory/agent1`."""
    agent = row["agent"]
    return f"{row['algo']}/{agent}" if isinstance(agent, str) and agent else str(row["algo"])


def _cells(row: pd.Series, metrics: Sequence[str], with_ci: dict[str, bool]) -> list[str]:
    cells = [
        str(row["run"]),
        _algo(row),
        "-" if pd.isna(row["iteration"]) else str(row["iteration"]),
        str(row["profile"] or "-"),
    ]
    for m in metrics:
        cells.append(_number(row[m]))
        if with_ci[m]:
            cells.append(_interval(row[f"{m}_{CI_BOUNDS[0]}"], row[f"{m}_{CI_BOUNDS[1]}"]))
    cells += [_number(row["n"], 0), row["start_time"].strftime("%Y-%m-%d %H:%M"), str(row["status"])]
    return cells


def format_table(df: pd.DataFrame) -> str:
    """Fixed-width text table of `eval_runs` rows, sorted by algo then iteration.

    A metric's `95% CI` column (next to it) appears only when some row logged its interval; missing values print `-`.
    """
    metrics = _metrics_in(df)
    with_ci = {m: bool(df[[f"{m}_{b}" for b in CI_BOUNDS]].notna().all(axis=1).any()) for m in metrics}
    header = ["run", "algo", "iter", "profile"]
    for m in metrics:
        header += [m, "95% CI"] if with_ci[m] else [m]
    header += ["n", "started (UTC)", "status"]
    ordered = df.sort_values(["algo", "iteration", "start_time"], na_position="last", kind="stable")
    rows = [_cells(row, metrics, with_ci) for _, row in ordered.iterrows()]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    numeric = {i for i, h in enumerate(header) if h not in ("run", "algo", "profile", "started (UTC)", "status")}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _draw(ax: Any, df: pd.DataFrame, metric: str, colors: dict[str, str]) -> None:
    """One line per parent run of `metric` against the iteration, error bars from its interval."""
    low, high = (f"{metric}_{b}" for b in CI_BOUNDS)
    for key, runs in df.groupby("_line", sort=False):
        runs = runs.dropna(subset=["iteration", metric]).sort_values("iteration")
        if runs.empty:
            continue
        y = runs[metric].astype(float)
        yerr = None
        if runs[[low, high]].notna().any(axis=None):
            yerr = [
                (y - runs[low].astype(float)).clip(lower=0).fillna(0),
                (runs[high].astype(float) - y).clip(lower=0).fillna(0),
            ]
        ax.errorbar(runs["iteration"].astype(int), y, yerr=yerr, marker="o", capsize=4, color=colors[key])
    ax.set_title(metric)
    ax.set_xlabel("iteration")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)


def plot(df: pd.DataFrame, path: Path) -> Path:
    """PNG at `path`: each metric of `df` against the iteration, one line per pipeline run.

    A run (each agent of a CORY run) keeps its colour in every panel; the legend names it by algo
    (and agent) and run name (and the run id's first characters where names repeat).
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    metrics = _metrics_in(df)
    algos = pd.Series([_algo(r) for _, r in df.iterrows()], index=df.index, dtype=object)
    df = df.assign(_line=df["parent_run_id"].fillna(df["run_id"]) + "/" + algos)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    firsts = df.drop_duplicates("_line")
    colors = {key: cycle[i % len(cycle)] for i, key in enumerate(firsts["_line"])}
    fig = Figure(figsize=(5.5 * len(metrics), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        _draw(ax, df, metric, colors)
    handles = [Line2D([], [], color=colors[r["_line"]], marker="o") for _, r in firsts.iterrows()]
    labels = [f"{_algo(r)} · {r['run']}" for _, r in firsts.iterrows()]
    repeated = {label for label in labels if labels.count(label) > 1}  # e.g. nightly runs with one name
    labels = [f"{label} ({key[:8]})" if label in repeated else label for label, key in zip(labels, firsts["_line"])]
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3), fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path
