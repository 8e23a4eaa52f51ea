"""Side-by-side comparison of pipeline runs: evaluated iterations from the MLflow store.

Reads: the MLflow store (`tracking.configure()`: sqlite under mlflow/ unless MLFLOW_TRACKING_URI is set).
The pipeline logs one parent run per pipeline run (tags `sweetflow.kind=pipeline`, `sweetflow.algo`,
`sweetflow.profile`) and, under it, one nested run per evaluation of an iteration's actor (tags
`sweetflow.kind=eval`, `sweetflow.algo`, `sweetflow.iteration`; 0 is the base model before training;
`sweetflow.task`, the collaborative task evaluated) with metrics `success_rate`, `mean_score` (the
graded score in [0, 1]), `n` and, when the evaluation computed them, the 95% interval bounds
`<metric>_ci_low` / `<metric>_ci_high`. Runs from before there were tasks carry no `sweetflow.task`
and no `mean_score`: they read as task `colbench-backend` with mean_score = their `tests_passed`
(and its bounds). CORY/PPO runs log one eval run per iteration and agent (tag `sweetflow.agent`)
with the task_reward, kl and objective (task reward - eta * KL) columns, which appear whenever some
run logged them, and success_rate = pass@1 on a binary task (GSM8K); their task is their
`sweetflow.task` tag (`gsm8k` for runs from before CORY played other tasks).
A SWEET-RL model's row also shows its critic's quality, from the critic-quality stage's nested run
under the same parent with the same algo and iteration tags (`sweetflow.stage=critic_quality`):
`critic_heldout_acc` (the trained critic's held-out pair accuracy) and `critic_agreement` (its
turn-value agreement, with its 95% interval); the columns appear when some such run exists.
Writes: a fixed-width table (returned as text), one block per task, and a PNG plot of each metric
against the iteration, one row of panels per task, one line per parent run, with error bars from
the intervals. Numbers of two tasks never share a column or an axis: their scores are not comparable.
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
BASE_METRICS = ("success_rate", "mean_score")
LEGACY_SCORE = "tests_passed"  # ColBench backend's mean_score, under the name older runs logged it with
DEFAULT_TASK = "colbench-backend"  # the task of eval runs without a `sweetflow.task` tag
GSM8K_TASK = "gsm8k"  # the task of CORY/PPO eval runs logged without a task tag
# shown when some eval run logged them: CORY/PPO's, and ColBench frontend's similarity under the
# metric's own name (clip and layout never share a column)
OPTIONAL_METRICS = (
    "task_reward",
    "kl",
    "objective",
    "sampled_reward",  # CORY/PPO: on answers sampled at temperature 1 (components/cory/evaluation.py)
    "sampled_kl",
    "entropy",
    "distinct_2",
    "similarity_clip",
    "similarity_layout",
)
CI_BOUNDS = ("ci_low", "ci_high")
_EVAL_FILTER = "tags.`sweetflow.kind` = 'eval'"
_CRITIC_FILTER = "tags.`sweetflow.stage` = 'critic_quality'"
# column -> the critic-quality run's metric for the trained critic (as the ranking used it), its interval bounds
CRITIC_METRICS = {
    "critic_heldout_acc": ("heldout_pair_accuracy_trained", None, None),
    "critic_agreement": (
        "turn_value_agreement_trained",
        "turn_value_agreement_trained_low",
        "turn_value_agreement_trained_high",
    ),
}
_ORDER = ["task", "algo", "iteration", "start_time"]
_TAG_COLUMNS = {
    "task": "sweetflow.task",
    "algo": "sweetflow.algo",
    "iteration": "sweetflow.iteration",
    "profile": "sweetflow.profile",
    "agent": "sweetflow.agent",
}


class CompareError(ValueError):
    """The store cannot answer the comparison (e.g. the experiment does not exist)."""


class UnknownTaskError(CompareError):
    """The experiment has evaluation runs, but none of the task asked for."""


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


def task_of(tags: dict[str, str]) -> str:
    """An eval run's task: its `sweetflow.task` tag, else (a run from before there were tasks)
    `gsm8k` for CORY/PPO's (tagged with an agent) and `colbench-backend` for the others."""
    if tags.get(_TAG_COLUMNS["task"]):
        return tags[_TAG_COLUMNS["task"]]
    return GSM8K_TASK if tags.get(_TAG_COLUMNS["agent"]) else DEFAULT_TASK


def _metric_values(logged: dict[str, float], columns: Sequence[str]) -> dict[str, float]:
    """`columns` from a run's metrics (NaN where not logged); `tests_passed` (and its bounds) stands
    in for a `mean_score` the run did not log (ColBench backend runs from before `mean_score`)."""
    score = BASE_METRICS[1]
    legacy = {f"{score}{end}": f"{LEGACY_SCORE}{end}" for end in ("", *(f"_{b}" for b in CI_BOUNDS))}
    return {col: logged.get(col, logged.get(legacy.get(col, col), math.nan)) for col in columns}


def _critic_runs(experiment_id: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """(parent run id, algo, iteration) -> the compare columns of its latest critic-quality run."""
    import mlflow

    found = mlflow.search_runs(
        [experiment_id], filter_string=_CRITIC_FILTER, order_by=["attributes.start_time ASC"], output_format="list"
    )
    out = {}
    for r in found:
        tags, logged = r.data.tags, r.data.metrics
        key = (
            tags.get("mlflow.parentRunId", ""),
            tags.get(_TAG_COLUMNS["algo"], ""),
            tags.get(_TAG_COLUMNS["iteration"], ""),
        )
        values = {}
        for column, names in CRITIC_METRICS.items():
            for suffix, name in zip(("", *(f"_{b}" for b in CI_BOUNDS)), names):
                if name is not None and name in logged:
                    values[column + suffix] = logged[name]
        out[key] = values
    return out


def eval_runs(
    experiment: str = DEFAULT_EXPERIMENT, metrics: Sequence[str] = (), task: str | None = None
) -> pd.DataFrame:
    """One row per evaluated iteration in `experiment` (an empty frame when there is none).

    Columns: run (the parent pipeline run's name), task (`task_of` the eval run), algo, iteration
    (int), profile (the parent's tag, else the eval run's), agent (CORY/PPO's evaluated agent, else
    None), each metric in BASE_METRICS, OPTIONAL_METRICS that some run logged, CRITIC_METRICS when some
    critic-quality run exists (NaN on the rows it does not measure), and `metrics`, with its
    `_ci_low`/`_ci_high` bounds (NaN where not logged), n, start_time and status (of the eval run),
    run_id, parent_run_id. `task` keeps that task's rows only. Sorted by task, algo, iteration, then
    start time. Raises CompareError if the experiment is unknown, UnknownTaskError if it has eval runs
    but none of `task`.
    """
    import mlflow

    exp = _experiment(experiment)
    found = mlflow.search_runs([exp.experiment_id], filter_string=_EVAL_FILTER, output_format="list")
    logged = {name for r in found for name in r.data.metrics}
    critic = _critic_runs(exp.experiment_id)
    metrics = [*[m for m in OPTIONAL_METRICS if m in logged], *(CRITIC_METRICS if critic else ()), *metrics]
    parents = _parents(exp.experiment_id, sorted({r.data.tags.get("mlflow.parentRunId", "") for r in found} - {""}))
    rows = []
    for r in found:
        tags, parent_id = r.data.tags, r.data.tags.get("mlflow.parentRunId")
        parent = parents.get(parent_id or "", {})
        row: dict[str, Any] = {key: tags.get(tag) for key, tag in _TAG_COLUMNS.items()}
        row.update(run=parent.get("name") or r.info.run_name, profile=parent.get("profile") or row["profile"])
        row.update(task=task_of(tags))
        quality = critic.get(
            (parent_id or "", tags.get(_TAG_COLUMNS["algo"], ""), tags.get(_TAG_COLUMNS["iteration"], ""))
        )
        row.update(_metric_values(r.data.metrics | (quality or {}), _metric_columns(metrics)))
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
    if task is not None:
        known = sorted(set(df["task"]))
        df = df[df["task"] == task]
        if df.empty and known:
            raise UnknownTaskError(
                f"experiment '{experiment}' has no evaluation runs of task '{task}'; tasks there: {', '.join(known)}"
            )
    return df.sort_values(_ORDER, na_position="last", kind="stable", ignore_index=True)


def _metrics_in(df: pd.DataFrame) -> list[str]:
    """The metric names with a value column in `df` (base metrics first), in column order; of the
    optional ones (mean_score, task_reward, kl, objective) only those some row has a value for, so
    that a task's block or panels show what that task logged (GSM8K has no graded score)."""
    droppable = {*BASE_METRICS[1:], *OPTIONAL_METRICS, *CRITIC_METRICS}
    return [
        c
        for c in df.columns
        if f"{c}_{CI_BOUNDS[0]}" in df.columns
        and f"{c}_{CI_BOUNDS[1]}" in df.columns
        and (c not in droppable or df[c].notna().any())
    ]


def _tasks(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(task, its rows) in task order; a frame without rows or a task column is the default task's."""
    if df.empty or "task" not in df.columns:
        return [(DEFAULT_TASK, df)]
    tasks = df["task"].fillna(DEFAULT_TASK)
    return [(str(t), df[tasks == t]) for t in sorted(set(tasks))]


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
    """Fixed-width text tables of `eval_runs` rows: one block per task (in task order), each headed
    by a `task: NAME` line, its rows sorted by algo then iteration; blocks apart by a blank line.

    Each block has its own columns (`_metrics_in` its rows) and widths, so two tasks' numbers never
    share a column. A metric's `95% CI` column (next to it) appears only when some row of the block
    logged its interval; missing values print `-`.
    """
    return "\n\n".join(f"task: {task}\n{_block(rows)}" for task, rows in _tasks(df))


def _block(df: pd.DataFrame) -> str:
    """One task's table (see format_table)."""
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


def _draw(ax: Any, df: pd.DataFrame, task: str, metric: str, colors: dict[str, str]) -> None:
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
    ax.set_title(f"{task} · {metric}")
    ax.set_xlabel("iteration")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)


def _legend(fig: Any, firsts: pd.DataFrame, colors: dict[str, str]) -> None:
    """The lines of `firsts` named by algo (and agent) and run name (and run id where names repeat)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colors[r["_line"]], marker="o") for _, r in firsts.iterrows()]
    labels = [f"{_algo(r)} · {r['run']}" for _, r in firsts.iterrows()]
    repeated = {label for label in labels if labels.count(label) > 1}  # e.g. nightly runs with one name
    labels = [f"{label} ({key[:8]})" if label in repeated else label for label, key in zip(labels, firsts["_line"])]
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 3), fontsize="small")


def figure(df: pd.DataFrame) -> Any:
    """The matplotlib Figure `plot` saves: one subfigure (a row of panels) per task, in task order,
    titled with the task; in it one panel per metric of that task's rows, one line per pipeline run,
    and a legend of that task's runs. Tasks never share a panel, so no axis mixes their scores.

    A run (each agent of a CORY run) keeps its colour in every panel; the legend names it by algo
    (and agent) and run name (and the run id's first characters where names repeat).
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    algos = pd.Series([_algo(r) for _, r in df.iterrows()], index=df.index, dtype=object)
    df = df.assign(_line=df["parent_run_id"].fillna(df["run_id"]) + "/" + algos)
    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {key: cycle[i % len(cycle)] for i, key in enumerate(df["_line"].drop_duplicates())}
    tasks = _tasks(df)
    width = max(len(_metrics_in(rows)) for _, rows in tasks)
    fig = Figure(figsize=(5.5 * width, 4.6 * len(tasks)), layout="constrained")
    FigureCanvasAgg(fig)
    for sub, (task, rows) in zip(fig.subfigures(len(tasks), 1, squeeze=False)[:, 0], tasks):
        sub.suptitle(f"task: {task}")
        metrics = _metrics_in(rows)
        for ax, metric in zip(sub.subplots(1, len(metrics), squeeze=False)[0], metrics):
            _draw(ax, rows, task, metric, colors)
        _legend(sub, rows.drop_duplicates("_line"), colors)
    return fig


def plot(df: pd.DataFrame, path: Path) -> Path:
    """PNG at `path` of `figure(df)`: each task's metrics against the iteration, one row per task."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(df).savefig(path, format="png", dpi=110)
    return path
