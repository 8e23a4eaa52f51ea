"""CORY (or single-agent PPO) in a pipeline run, top to bottom: the single-turn task's records
(when its generator makes them), then the one `cory` stage, which iterates itself (pioneer and
observer PPO updates, role exchange, evaluation after every iteration), tracked as its stage run
and a nested eval run per iteration and agent (flows/tracking/cory.py); then the summary entries
(one per evaluated iteration, the base model first) and the agents' reward-KL frontier plot.

`sweetflow run --algo cory|ppo` reaches it through the pipeline flow (flows/pipeline_flow.py), which
pulls the data, prepares the model and opens the parent MLflow run first. Wiring only.
"""

from __future__ import annotations

from pathlib import Path

from components.tracking.compare import DEFAULT_EXPERIMENT, eval_runs
from components.tracking.frontier import frontier_plot
from flows.planning.plan import CORY, RunPlan
from flows.runtime.iterations import Iteration, log_progress, run_iteration
from flows.tracking.cory import summary_entries
from flows.tracking.run_report import summary_table


def cory_run(plan: RunPlan, base: str, parent: str, experiment: str) -> tuple[list[Iteration], list[dict], str]:
    """The run's one iteration from the model `base` under the MLflow run `parent`: (iterations,
    summary.json's entries, the summary table)."""
    import mlflow

    iterations = [run_iteration(plan, 1, base, parent, experiment)]
    log_progress(plan, parent, iterations)
    mlflow.log_artifact(str(run_frontier(plan, parent)), "plots")
    return iterations, summary_entries(plan.iteration_dir(1) / CORY), summary_table(plan, iterations)


def run_frontier(plan: RunPlan, parent: str) -> Path:
    """The run's agents' reward and KL by iteration and their reward-KL frontier (run folder PNG)."""
    df = eval_runs(DEFAULT_EXPERIMENT)
    return frontier_plot(df[df["parent_run_id"] == parent], plan.run_dir / "frontier.png")
