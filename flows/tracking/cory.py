"""What the pipeline flow logs for a CORY (or single-agent PPO) stage, read back from its files.

Wiring only. The `cory` stage (components/stages/cory.py) writes under `cory.out_dir`:
eval_initial.json (the base model), iterations.jsonl (one row per PPO iteration with every agent's
`train/<agent>/...` and `eval/<agent>/...` numbers), samples.jsonl (answers to read) and
metrics.json. This module turns them into MLflow runs under the pipeline's parent run:
- one nested stage run (kind=stage): the `cory` section as params, metrics.json, every
  iteration row as metric curves by iteration, the samples rendered as markdown;
- one nested eval run per iteration and agent (kind=eval, tags sweetflow.iteration and
  sweetflow.agent; iteration 0 is the base model, logged for each agent so that each agent's
  curve starts there) with task_reward, kl, objective (task reward - eta * KL) and n, and on a
  binary task (GSM8K) pass_at_1 and success_rate (= pass@1 on the fixed held-out slice), which
  `sweetflow compare` shows side by side with the collaborative runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from components.cory.state import INITIAL_EVAL, ITERATIONS, SAMPLES, read_rows
from components.tracking.datasets import DataInput
from components.tracking.nested import log_nested_run
from flows.planning.played import played_class

SAMPLED = ("sampled_reward", "sampled_kl", "sampled_objective", "entropy", "distinct_1", "distinct_2")


def eval_metrics(values: dict[str, float], n: int) -> dict[str, float]:
    """An agent's evaluation under the names `sweetflow compare` reads (success_rate is pass@1, on a
    binary task only), with the sampled answers' reward, KL and collapse indicators when measured."""
    binary = {"success_rate": values["pass_at_1"], "pass_at_1": values["pass_at_1"]} if "pass_at_1" in values else {}
    return (
        binary
        | {"task_reward": values["reward"], "kl": values["kl"], "objective": values["objective"], "n": float(n)}
        | {k: values[k] for k in SAMPLED if k in values}
    )


def agents_of(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({key.split("/")[1] for key in rows[0] if key.startswith("eval/")}) if rows else []


def raw_points(out_dir: Path) -> list[tuple[int, str, dict[str, float]]]:
    """(iteration, agent, the stage's evaluation numbers) of every evaluation: the base model as
    iteration 0 (for every agent: each starts there), then each iteration row."""
    rows = read_rows(out_dir / ITERATIONS)
    agents = agents_of(rows) or ["agent0"]
    points = []
    initial = out_dir / INITIAL_EVAL
    if initial.exists():
        base = json.loads(initial.read_text())
        points += [(0, agent, base) for agent in agents]
    for row in rows:
        points += [
            (row["iteration"], agent, {k.split("/")[2]: v for k, v in row.items() if k.startswith(f"eval/{agent}/")})
            for agent in agents
        ]
    return points


def eval_points(out_dir: Path, n: int) -> list[tuple[int, str, dict[str, float]]]:
    """(iteration, agent, metrics under the names `sweetflow compare` reads) of every evaluation."""
    return [(k, agent, eval_metrics(values, n)) for k, agent, values in raw_points(out_dir)]


def summary_entries(out_dir: Path) -> list[dict[str, Any]]:
    """One entry per evaluated iteration, in order (k 0: the base model), its `metrics` holding
    `<agent>/<name>` for every agent evaluated alone (reward, kl, objective, sampled_reward,
    sampled_kl, entropy, distinct_2, ...): the run's summary.json."""
    by_k: dict[int, dict[str, float]] = {}
    for k, agent, values in raw_points(out_dir):
        by_k.setdefault(k, {}).update({f"{agent}/{name}": v for name, v in values.items()})
    return [{"k": k, "metrics": metrics} for k, metrics in sorted(by_k.items())]


def render_samples(path: Path) -> str:
    """samples.jsonl as markdown: each sampled prompt with every role's answer and its reward."""
    parts = []
    for s in read_rows(path):
        parts.append(
            f"### iteration {s['iteration']}, question {s['question']}: {s['role']} ({s['agent']}), "
            f"reward {s['reward']:g}\n\n**Prompt.** {s['prompt']}\n\n**Target.** {s['target']}\n\n"
            f"**Answer.**\n\n```\n{s['answer']}\n```\n"
        )
    return "\n".join(parts)


def track_cory(
    doc: dict[str, Any],
    metrics: dict[str, float],
    files: list[Path],
    run_name: str,
    parent: str,
    experiment: str,
    tags: dict[str, str],
    inputs: Sequence[DataInput] = (),
) -> str:
    """The stage run (with its data `inputs`) and its eval runs (see the module docstring); returns the
    stage run's id."""
    metrics_path = files[0]
    out_dir = metrics_path.parent
    samples = out_dir / "samples.md"
    samples.write_text(render_samples(out_dir / SAMPLES))
    run_id = log_nested_run(
        experiment,
        parent,
        run_name,
        {name: doc[name] for name in ("cory", "task", *played_class(doc["task"]["name"], True).sections)},
        metrics,
        tags,
        files=[*files, *(f for f in (out_dir / INITIAL_EVAL, out_dir / SAMPLES, samples) if f.exists())],
        curves=out_dir / ITERATIONS,
        curve_step="iteration",
        curve_prefix="",
        inputs=inputs,
    )
    for iteration, agent, values in eval_points(out_dir, doc["cory"]["eval_questions"]):
        eval_tags = tags | {"sweetflow.kind": "eval", "sweetflow.iteration": str(iteration), "sweetflow.agent": agent}
        log_nested_run(experiment, parent, f"eval {iteration} {agent}", {}, values, eval_tags)
    return run_id
