"""Prefect flow: the whole pipeline, iterated: data pull -> model -> [rollouts -> training -> eval] x N
(collaborative tasks: sweet, mtdpo, rft), or data pull -> model -> [records] -> cory (single-turn tasks:
cory, ppo; the stage iterates).

Wiring only. Each step is a stage of a generated, per-iteration dvc.yaml (flows.planning.plan)
run as `dvc repro --single-item` in its own process group, so GPU and vLLM memory is returned
between steps and DVC skips a step whose deps, params and outs are unchanged: a second identical
run only checks hashes. Iteration 0 evaluates the base model; iteration k collects rollouts with
actor k-1, trains actor k (SWEET-RL or a baseline) and evaluates it. When an iteration's data hold
no learning signal (no trajectory pair for sweet/mtdpo, no success for rft), its training steps
are not run: the iteration is tagged `sweetflow.no_signal` and the next one starts from the same
actor (rollouts are re-sampled with another seed).

MLflow (experiment `sweetflow-pipeline`): one parent run per pipeline run (kind=pipeline, algo,
profile; the resolved parameters as params; the git commit and each iteration's dvc.lock hash as
tags; a per-iteration plot of success rate and tests passed), a nested run per step (kind=stage
or kind=eval, iteration, skipped) with the step's sections, metrics, files, training curves and
sample dialogues. After each evaluation the actor goes through the registry gate (alias
`candidate`; `champion` only if it beats the champion).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task

from components.config.training import Algo, TrainLayout
from components.data.records import Trajectory, read_jsonl
from components.episodes.metrics import win_rate
from components.stages.catalogue import STAGES, Kind, training_stages
from components.tracking import datasets
from components.tracking import store as tracking
from components.tracking.compare import DEFAULT_EXPERIMENT, eval_runs, plot
from components.tracking.critic_report import critic_quality_table
from components.tracking.frontier import frontier_plot
from flows.planning.baselines import BASELINES
from flows.planning.plan import (
    CORY,
    QUALITY,
    ROLLOUTS,
    PipelineParams,
    RunPlan,
    baseline_doc,
    baseline_stages,
    check_baselines,
    plan_run,
    write_baseline,
    write_iteration,
)
from flows.runtime import inputs
from flows.runtime.cluster import cluster_config, moved_to_cluster
from flows.runtime.run_engine import run_engine
from flows.runtime.stage_tasks import gate, place, run_tracked
from flows.runtime.steps import check_inside_project, format_table
from flows.tracking.cory import summary_entries
from flows.tracking.links import link_mlflow_run, prefect_tags


@dataclass
class Iteration:
    k: int
    actor: str  # the model this iteration ends with
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)  # eval metrics (none when not evaluated)
    eval_dir: str | None = None  # the evaluation's folder (trajectories.jsonl), when evaluated
    no_signal: str | None = None
    registry: dict[str, Any] | None = None
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> an Iteration as a dict
    critic_quality: dict[str, Any] = field(default_factory=dict)  # a SWEET-RL critic's quality metrics, if measured


def resolve(params: PipelineParams) -> RunPlan:
    """The run's plan; raises ConfigError on a bad algo, profile or override."""
    overrides = list(params.overrides)
    if params.algo.single_turn and params.iterations is not None:
        overrides.append(f"cory.iterations={params.iterations}")
    plan = plan_run(params.algo.value, params.profile, overrides, Path(params.runs_root), params.task)
    check_baselines(plan, params.baselines)
    check_inside_project(Path(params.runs_root), "runs_root")  # the Prefect form lets a user set it
    return plan


def iteration_count(params: PipelineParams, plan: RunPlan) -> int:
    """Training iterations of the run: `params.iterations` (default 1), or for CORY/PPO cory.iterations."""
    if plan.single_turn:
        return plan.doc["cory"]["iterations"]
    return 1 if params.iterations is None else params.iterations


@task(name="data pull", retries=2, retry_delay_seconds=10)
def pull_data_task(plan: RunPlan) -> str:
    return inputs.pull_data(plan)


@task(name="prepare model")
def prepare_model_task(plan: RunPlan) -> str:
    return inputs.prepare_model(plan)


def run_iteration(plan: RunPlan, k: int, start: str, parent: str, experiment: str) -> Iteration:
    """Iteration k's stages in order, each tracked; stops before training when there is no signal."""
    it = Iteration(k, start if k == 0 else str(plan.trained_actor(k)))
    dvc_yaml = write_iteration(plan, k, start)
    run_stages(plan, dvc_yaml, plan.stages(k), it, plan.algo, plan.algo.value, start, parent, experiment)
    return it


def run_baseline(plan: RunPlan, name: str, start: str, parent: str, experiment: str) -> Iteration:
    """The baseline `name` (flows/planning/baselines.py) trained on iteration 1's rollouts (iter-1/<name>/)
    and evaluated; its MLflow runs are tagged with `name` as their algo."""
    algo = Algo(BASELINES[name].algo)
    it = Iteration(1, str(TrainLayout(plan.iteration_dir(1) / name).actor_model))
    rollouts = json.loads((plan.iteration_dir(1) / ROLLOUTS / "metrics.json").read_text())
    rft_min_score = plan.doc["actor"]["rft_min_score"]
    it.no_signal = inputs.no_signal(algo, ROLLOUTS, rollouts, rft_min_score)
    if it.no_signal:  # the rollouts were made (and checked) for the run's own algorithm
        it.actor = start
        get_run_logger().warning("%s baseline: no learning signal (%s); not trained", name, it.no_signal)
        return it
    dvc_yaml = write_baseline(plan, 1, start, name)
    stages = baseline_stages(name, baseline_doc(plan, 1, start, name))
    run_stages(plan, dvc_yaml, stages, it, algo, name, start, parent, experiment)
    return it


def run_stages(
    plan: RunPlan,
    dvc_yaml: Path,
    stages,
    it: Iteration,
    algo: Algo,
    name: str,
    start: str,
    parent: str,
    experiment: str,
) -> None:
    """`stages` of `dvc_yaml` in order, each tracked (tagged with `name` as algo: the run's algo or a
    baseline's name), into `it`; stops before training when there is no signal."""
    rft_min_score = plan.doc.get("actor", {}).get("rft_min_score", 1.0)
    cluster = cluster_config(plan.doc)
    tags = {
        "sweetflow.algo": name,
        "sweetflow.task": plan.task,
        "sweetflow.profile": plan.profile,
        "sweetflow.iteration": str(it.k),
    }
    for stage in stages:
        kind = STAGES[stage].kind
        label = f"iter {it.k} {stage}" if name == plan.algo.value else f"iter {it.k} {name} {stage}"
        if kind == Kind.data:  # the task's records: versioned by DVC, read by the stages that follow
            (it.ran if place(dvc_yaml, stage, cluster, label) else it.skipped).append(stage)
            continue
        ran, tracked = run_tracked(dvc_yaml, stage, cluster, label, parent, experiment, tags)
        (it.ran if ran else it.skipped).append(stage)
        with tracking.store_errors():  # the project's data files (not the run's own outputs) on the parent too
            datasets.log_inputs(datasets.outside(tracked["inputs"], plan.run_dir), context="pipeline", run_id=parent)
        if kind in (Kind.eval, Kind.cory):
            it.metrics = tracked["metrics"]
        if stage == QUALITY:
            it.critic_quality = tracked["metrics"]
        if kind == Kind.eval:
            it.eval_dir = str(Path(tracked["metrics_file"]).parent)
            it.registry = gate(it.actor, tracked["run_id"], it.metrics, plan.task)
        it.no_signal = inputs.no_signal(algo, stage, tracked["metrics"], rft_min_score)
        if it.no_signal:
            it.actor = start
            get_run_logger().warning(
                "%s iteration %d: no learning signal (%s); actor %s carried forward", name, it.k, it.no_signal, start
            )
            return


def log_progress(plan: RunPlan, parent: str, iterations: list[Iteration]) -> None:
    """The parent run's tags for each iteration and the success/tests-passed-per-iteration plot."""
    import mlflow

    client = mlflow.tracking.MlflowClient()
    for it in iterations:
        lock = plan.iteration_dir(it.k) / "dvc.lock"
        if lock.exists():
            client.set_tag(
                parent, f"dvc_lock_sha256.iter-{it.k}", tracking.provenance_tags(lock.parent).get("dvc_lock_sha256", "")
            )
        if it.no_signal:
            client.set_tag(parent, f"sweetflow.no_signal.iter-{it.k}", it.no_signal)
    df = eval_runs(DEFAULT_EXPERIMENT)
    df = df[df["parent_run_id"] == parent]
    if not df.empty:
        client.log_artifact(parent, str(plot(df, plan.run_dir / "iterations.png")), "plots")


def run_frontier(plan: RunPlan, parent: str) -> Path:
    """The run's agents' reward and KL by iteration and their reward-KL frontier (run folder PNG)."""
    df = eval_runs(DEFAULT_EXPERIMENT)
    return frontier_plot(df[df["parent_run_id"] == parent], plan.run_dir / "frontier.png")


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


@flow(name="sweetflow-pipeline", log_prints=True)
def pipeline_flow(params: PipelineParams = PipelineParams()) -> dict:
    """SWEET-RL (or a baseline) end to end: evaluate the base model, then N iterations of rollouts,
    training and evaluation; or CORY/PPO on a single-turn task; every step DVC-versioned and tracked in MLflow."""
    import mlflow

    plan = resolve(params)
    if (moved := moved_to_cluster(pipeline_flow, cluster_config(plan.doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    tracking.configure()  # before any work: a tracking server that does not answer fails the run now
    pull_data_task(plan)
    inputs.check_offline(plan)  # before any step: offline trajectories of held-out tasks are refused
    base = prepare_model_task(plan)
    experiment = tracking.experiment_id(DEFAULT_EXPERIMENT)
    tags = tracking.provenance_tags() | {
        "sweetflow.kind": "pipeline",
        "sweetflow.algo": plan.algo.value,
        "sweetflow.task": plan.task,
        "sweetflow.profile": plan.profile,
        "sweetflow.run_dir": str(plan.run_dir),
    }
    with (
        run_engine(plan.doc, cluster_config(plan.doc), base, plan.run_dir),
        mlflow.start_run(experiment_id=experiment, run_name=plan.run_dir.name, tags=tags | prefect_tags()) as run,
    ):
        link_mlflow_run(mlflow.get_tracking_uri(), experiment, run.info.run_id)
        n = iteration_count(params, plan)
        mlflow.log_params(tracking.flatten({"iterations": n, **plan.doc}))
        iterations: list[Iteration] = []
        for k in plan.iterations(n):
            start = iterations[-1].actor if iterations else base
            iterations.append(run_iteration(plan, k, start, run.info.run_id, experiment))
            if k == 1 and params.baselines and "rollouts" in iterations[-1].ran + iterations[-1].skipped:
                iterations[-1].baselines = {
                    algo: asdict(run_baseline(plan, algo, start, run.info.run_id, experiment))
                    for algo in params.baselines
                }
            log_progress(plan, run.info.run_id, iterations)
        table = summary_table(plan, iterations)
        if plan.single_turn:  # one entry per evaluated iteration of the stage, the base model first
            summary = summary_entries(plan.iteration_dir(1) / CORY)
            mlflow.log_artifact(str(run_frontier(plan, run.info.run_id)), "plots")
        else:
            summary = [asdict(it) for it in iterations]
        (plan.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        mlflow.log_artifact(str(plan.run_dir / "summary.json"))
        if not plan.single_turn:
            results = results_table(plan, iterations)
            (plan.run_dir / "results.md").write_text(results)
            mlflow.log_artifact(str(plan.run_dir / "results.md"))
            table += "\n\n" + results
        get_run_logger().info("MLflow run %s\n%s", run.info.run_id, table)
        return {
            "run_dir": str(plan.run_dir),
            "mlflow_run_id": run.info.run_id,
            "summary": table,
            "iterations": [asdict(it) for it in iterations],
        }
