"""What a pipeline run reports when it ends: the summary table (one row per iteration and
baseline), results.md (each evaluated model's score and success rate with 95% intervals and its win
rate against zero-shot, then the critic-quality table) and a CORY/PPO stage's final evaluation per
agent. Read back from the iterations' metrics and the files their stages declare."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from components.data.records import Trajectory, read_jsonl
from components.episodes.metrics import win_rate
from components.stages.catalogue import training_stages
from components.tracking.critic_report import critic_quality_table
from flows.planning.baselines import BASELINES
from flows.planning.plan import QUALITY, RunPlan
from flows.runtime.iterations import Iteration
from flows.runtime.steps import format_table


def cory_score(m: dict[str, float]) -> str:
    """A CORY/PPO stage's final evaluation per agent, from its metrics.json (pass@1 on a binary task;
    the sampled answers' reward and KL when measured)."""
    agents = sorted({match.group(1) for k in m if (match := re.fullmatch(r"final_(agent\d+)_reward", k))})

    def one(a: str) -> str:
        text = f"{a} " + (f"pass@1 {m[f'final_{a}_pass_at_1']:.3f}, " if f"final_{a}_pass_at_1" in m else "")
        text += f"reward {m[f'final_{a}_reward']:.3f}, kl {m[f'final_{a}_kl']:.4f}"
        if f"final_{a}_sampled_reward" in m:
            text += f" (sampled: reward {m[f'final_{a}_sampled_reward']:.3f}, kl {m[f'final_{a}_sampled_kl']:.3f})"
        return text

    silent = int(m.get("no_signal_iterations", 0))
    note = f" ({silent} without reward signal: every answer scored the same)" if silent else ""
    return (
        f"{int(m['iterations'])} PPO iterations{note} from reward {m.get('initial_reward', float('nan')):.3f}: "
        + "; ".join(one(a) for a in agents)
    )


def _score(plan: RunPlan, m: dict[str, Any], no_signal: str | None) -> str:
    if plan.single_turn:
        return cory_score(m)
    if m:
        return f"success {m['success_rate']:.3f}, mean score {m['mean_score']:.3f}"
    return f"not evaluated: no learning signal ({no_signal})" if no_signal else "not evaluated"


def summary_table(plan: RunPlan, iterations: list[Iteration]) -> str:
    rows = [("run", str(plan.run_dir)), ("algorithm", plan.algo.value), ("task", plan.task), ("profile", plan.profile)]
    for it in iterations:
        gate = (
            f", registry v{it.registry['version']}{' champion' if it.registry['promoted'] else ''}"
            if it.registry
            else ""
        )
        steps = f"ran {len(it.ran)}, skipped {len(it.skipped)} steps"
        rows.append((f"iteration {it.k}", f"{_score(plan, it.metrics, it.no_signal)}{gate}; {steps}"))
        for algo, b in it.baselines.items():
            rows.append((f"iteration {it.k} {algo}", f"{_score(plan, b['metrics'], b['no_signal'])}"))
    rows.append(("final actor", iterations[-1].actor))
    return format_table(rows)


def _win_cell(eval_dir: str | None, zero_shot_dir: str | None) -> str:
    """The evaluated model's win rate against the zero-shot model on the same tasks (ties count half)."""
    if not eval_dir or not zero_shot_dir:
        return ""
    paths = [Path(d) / "trajectories.jsonl" for d in (eval_dir, zero_shot_dir)]
    if not all(p.exists() for p in paths):
        return ""
    mine, theirs = (list(read_jsonl(p, Trajectory)) for p in paths)
    result = win_rate(mine, theirs)
    return f"{result[0]:.3f} ({result[1]})" if result else ""


def results_table(plan: RunPlan, iterations: list[Iteration]) -> str:
    """Markdown: one row per evaluated model (zero-shot, each iteration, each baseline) with its mean
    score and success rate, their 95% intervals over tasks, and n; then, when a SWEET-RL critic was
    measured, the critic-quality table (components/tracking/critic_report.py)."""

    def cell(m: dict, key: str) -> str:
        return f"{m[key]:.3f} [{m[f'{key}_ci_low']:.3f}, {m[f'{key}_ci_high']:.3f}]"

    rows = []
    zero_shot = iterations[0].eval_dir if iterations else None
    for it in iterations:
        evaluated = [(plan.algo.value if it.k else "zero-shot", asdict(it))] + list(it.baselines.items())
        for algo, entry in evaluated:
            m = entry["metrics"]
            if m and "mean_score" in m:
                wins = _win_cell(entry.get("eval_dir"), zero_shot) if it.k else ""
                row = f"| {algo} | {it.k} | {cell(m, 'mean_score')} | {cell(m, 'success_rate')} | {wins} | {m['n']} |"
                rows.append(row)
            else:
                rows.append(f"| {algo} | {it.k} | {_score(plan, m, entry['no_signal'])} | | | |")
    head = [
        f"# {plan.run_dir.name}: {plan.task}, held-out eval split",
        "",
        "| algorithm | iteration | mean_score [95% CI] | success_rate [95% CI] | win rate vs zero-shot (tasks) | n |",
        "|---|---:|---|---|---|---:|",
    ]
    quality = critic_quality_table(quality_rows(plan, iterations))
    return "\n".join(head + rows) + "\n" + (f"\n{quality}" if quality else "")


def quality_rows(plan: RunPlan, iterations: list[Iteration]) -> list[tuple[str, int, dict, str | None]]:
    """(model, iteration, critic-quality metrics, no-signal reason) of each SWEET-RL model of the run:
    each training iteration of a SWEET-RL run, and each baseline whose algorithm is SWEET-RL."""
    rows = []
    for it in iterations:
        if it.k and QUALITY in plan.stages(it.k):
            rows.append((plan.algo.value, it.k, it.critic_quality, it.no_signal))
        for name, entry in it.baselines.items():
            if QUALITY in training_stages(BASELINES[name].algo):
                rows.append((name, it.k, entry.get("critic_quality") or {}, entry["no_signal"]))
    return rows
