"""Prefect flow: improve an actor from scored rollouts with SWEET-RL or a training baseline.

Wiring only. Each step is a component run in its own process (`python -m components.<stage>
--config JSON`), so model and vLLM memory is returned between steps; files under the
`train.out_dir` root connect them (components.config.training.TrainLayout):

  sweet: trajectory pairs -> critic -> candidates -> ranking -> turn pairs -> actor (turn DPO)
  mtdpo: trajectory pairs -> actor (DPO on trajectory pairs)
  rft:   actor (SFT on successful trajectories)

MLflow: one parent run per flow run, a nested run per step with that step's resolved sections as
params, its metrics, and for training steps every optimizer step's metrics (loss, rewards,
accuracy, margin, lr, tokens/s) as a curve. Runs on Prefect's ephemeral API: no server needed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow, get_run_logger, task
from pydantic import BaseModel, Field

from components.tracking import store as tracking
from components.config.sections import DataConfig, EpisodeSection, load_section
from flows.plan import TRAIN_STAGES
from components.config.training import (ActorConfig, Algo, CandidatesConfig, CriticConfig, PairsConfig, RankingConfig,
                                     TrainConfig, TrainLayout)
from components.training.loop import METRICS_FILE
from flows.steps import format_table, log_nested_run, run_component

SECTIONS = {"train": TrainConfig, "pairs": PairsConfig, "critic": CriticConfig, "candidates": CandidatesConfig,
            "ranking": RankingConfig, "actor": ActorConfig, "episode": EpisodeSection, "data": DataConfig}


class TrainParams(BaseModel):
    """Parameters of the train flow; None keeps the params.yaml value (shown as a form in the UI)."""

    algo: str | None = Field(None, description="sweet | mtdpo | rft")
    trajectories: str | None = Field(None, description="rollouts folder holding trajectories.jsonl")
    model: str | None = Field(None, description="the actor to improve (HF folder)")
    out_dir: str | None = Field(None, description="root folder of the training steps' files")


@dataclass(frozen=True)
class Step:
    name: str
    module: str
    sections: tuple[str, ...]
    metrics: str                      # metrics file, relative to the layout root
    args: tuple[str, ...] = ()
    curves: str | None = None         # folder holding train_metrics.jsonl, relative to the root
    artifacts: tuple[str, ...] = ()   # further files to keep in MLflow, relative to the root


PAIRS = Step("trajectory pairs", "components.stages.pairs", ("pairs", "train"), "pairs/pairs_metrics.json", ("trajectory",))
CRITIC = Step("critic", "components.stages.critic", ("critic", "train", "data"), "critic/metrics.json", curves="critic",
              artifacts=("critic/advantages.md",))
CANDIDATES = Step("candidates", "components.stages.candidates", ("candidates", "train", "episode"),
                  "candidates/candidates_metrics.json")
RANKING = Step("ranking", "components.stages.ranking", ("ranking", "critic", "train", "data"), "ranking/ranking_metrics.json")
TURN_PAIRS = Step("turn pairs", "components.stages.pairs", ("pairs", "train"), "ranking/turn_pairs_metrics.json", ("turn",))
ACTOR = Step("actor", "components.stages.actor", ("actor", "train"), "actor/metrics.json", curves="actor")
STEPS = {"train_pairs": PAIRS, "critic": CRITIC, "candidates": CANDIDATES, "ranking": RANKING,
         "turn_pairs": TURN_PAIRS, "actor": ACTOR}   # by dvc.yaml stage name
PLANS = {algo: tuple(STEPS[stage] for stage in stages) for algo, stages in TRAIN_STAGES.items()}


@dataclass
class Plan:
    sections: dict[str, BaseModel]
    steps: tuple[Step, ...] = field(default=())

    def config(self, step: Step) -> dict:
        return {name: self.sections[name].model_dump(mode="json") for name in step.sections}

    @property
    def root(self) -> Path:
        return self.sections["train"].out_dir


def resolve(params: TrainParams) -> Plan:
    """params.yaml sections with the flow parameters applied; raises ConfigError on bad values."""
    train_over = {"trajectories": params.trajectories, "model": params.model, "out_dir": params.out_dir}
    sections = {name: load_section(model, name, train_over if name == "train" else
                                   {"algo": params.algo} if name == "actor" else None)
                for name, model in SECTIONS.items()}
    return Plan(sections, PLANS[sections["actor"].algo])


def check_inputs(plan: Plan) -> None:
    """Fail before any heavy work when the rollouts or a model are missing."""
    from components.data.model_prepare import resolve_model

    rollouts = plan.sections["train"].trajectories / "trajectories.jsonl"
    if not rollouts.exists():
        raise FileNotFoundError(f"{rollouts} not found: run `sweetflow rollouts --out "
                                f"{plan.sections['train'].trajectories}` first")
    resolve_model(plan.sections["train"].model)
    if CRITIC in plan.steps:
        resolve_model(plan.sections["critic"].model)


@task(name="train-step", timeout_seconds=12 * 3600, task_run_name="{step.name}")
def run_step(step: Step, config: dict, root: Path) -> dict:
    """One component in a child process; its metrics.json."""
    return run_component(step.module, config, root / step.metrics, args=step.args)


@task(name="track-step", task_run_name="track {step.name}")
def track_step(step: Step, config: dict, metrics: dict, root: Path, parent: str, experiment_id: str) -> str:
    """A nested MLflow run under `parent`: the step's sections, its metrics and its training curves."""
    return log_nested_run(experiment_id, parent, step.name, config, metrics, tracking.provenance_tags(),
                          files=[root / name for name in (step.metrics, *step.artifacts)],
                          curves=root / step.curves / METRICS_FILE if step.curves else None)


def summary_table(plan: Plan, results: dict[str, dict]) -> str:
    rows = [("algorithm", plan.sections["actor"].algo.value), ("new actor", str(TrainLayout(plan.root).actor_dir / "model"))]
    for name, metrics in results.items():
        if "final_loss" in metrics:
            rows.append((name, f"loss {metrics['first_loss']:.4f} -> {metrics['final_loss']:.4f} over "
                               f"{metrics['steps']} steps"))
        else:
            rows.append((name, ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in list(metrics.items())[:4])))
    return format_table(rows)


@flow(name="sweetflow-train", log_prints=True)
def train_flow(params: TrainParams = TrainParams()) -> dict:
    """Improve an actor from scored rollouts: SWEET-RL (sweet), multi-turn DPO (mtdpo) or RFT (rft)."""
    import mlflow

    plan = resolve(params)
    check_inputs(plan)
    tracking.configure()
    results: dict[str, dict] = {}
    experiment = tracking.experiment_id(plan.sections["train"].experiment)
    with mlflow.start_run(experiment_id=experiment, run_name=f"train {plan.sections['actor'].algo.value}",
                          tags=tracking.provenance_tags()) as run:
        mlflow.log_params(tracking.flatten({"train": plan.sections["train"].model_dump(mode="json"),
                                            "algo": plan.sections["actor"].algo.value}))
        for step in plan.steps:
            metrics = run_step(step, plan.config(step), plan.root)
            track_step(step, plan.config(step), metrics, plan.root, run.info.run_id, experiment)
            results[step.name] = metrics
        table = summary_table(plan, results)
        get_run_logger().info("MLflow run %s\n%s", run.info.run_id, table)
        return {"steps": results, "actor_model": str(TrainLayout(plan.root).actor_dir / "model"),
                "mlflow_run_id": run.info.run_id, "summary": table}
