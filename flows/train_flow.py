"""Prefect flow: improve an actor from scored rollouts with SWEET-RL or a training baseline.

Wiring only, and the same path as `sweetflow run`: the resolved parameters go to
`<train.out_dir>/params.yaml` beside a generated `<train.out_dir>/dvc.yaml` holding the catalogue
stages of the algorithm, each run as `dvc repro` in its own process (model and vLLM memory is
returned between steps; unchanged steps are skipped):

  sweet: trajectory pairs -> critic -> candidates -> ranking -> turn pairs -> actor (turn DPO)
  mtdpo: trajectory pairs -> actor (DPO on trajectory pairs)
  rft:   actor (SFT on successful trajectories)

MLflow: one parent run per flow run, a nested run per step from the one tracker (flows/tracking/tracker.py):
the step's sections as params, its metrics, and for training steps every optimizer step's numbers
(loss, rewards, accuracy, margin, lr, tokens/s) as curves. Runs on Prefect's ephemeral API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from prefect import flow, get_run_logger
from pydantic import Field

from components.config.training import ActorConfig, Algo, Family, TrainConfig, TrainLayout, of_family
from components.stages.catalogue import STAGES, training_stages
from components.tracking import store as tracking
from flows.planning.options import cluster_field, flow_params, task_field
from flows.planning.plan import write_stages
from flows.runtime.cluster import cluster_config, moved_to_cluster
from flows.runtime.stage_tasks import run_tracked
from flows.runtime.steps import check_step_folder, cluster_settings, format_table, stages_doc, task_name

TRAIN_FIELDS = ("trajectories", "model", "out_dir")
TrainParams = flow_params(
    "TrainParams",
    "Parameters of the train flow; None keeps the params.yaml value (shown as a form in the UI).",
    TrainConfig,
    TRAIN_FIELDS,
    algo=(Optional[Algo], Field(None, description=ActorConfig.model_fields["algo"].description)),
    task=task_field(),
    overrides=cluster_field(),
)


def resolve(params: TrainParams) -> dict:
    """The run's parameters (the sections the algorithm's stages read, with the task's); raises
    ConfigError on bad values."""
    from components.config.sections import PARAMS, ConfigError, read_params

    algo = params.algo.value if params.algo else read_params(PARAMS).get("actor", {}).get("algo", Algo.sweet.value)
    try:
        of_family(Algo(algo), Family.collaborative, "--algo")
    except ValueError as exc:
        raise ConfigError(f"{exc} (CORY and PPO train in `sweetflow run --algo cory|ppo`)") from None
    task = task_name(params.task)
    overrides = {
        "train": params.model_dump(include=set(TRAIN_FIELDS)),
        "actor": {"algo": params.algo},
        "cluster": cluster_settings(params.overrides),
    }
    return stages_doc(training_stages(algo), task, overrides)


def check_inputs(doc: dict) -> None:
    """Fail before any heavy work when the rollouts or a model are missing."""
    from components.data.model_prepare import resolve_model

    rollouts = Path(doc["train"]["trajectories"]) / "trajectories.jsonl"
    if not rollouts.exists():
        raise FileNotFoundError(
            f"{rollouts} not found: run `sweetflow rollouts --out {doc['train']['trajectories']}` first"
        )
    resolve_model(doc["train"]["model"])
    if "critic" in training_stages(doc["actor"]["algo"]):
        resolve_model(doc["critic"]["model"])


def summary_table(algo: str, root: Path, results: dict[str, dict]) -> str:
    rows = [("algorithm", algo), ("new actor", str(TrainLayout(root).actor_model))]
    for name, metrics in results.items():
        if "final_loss" in metrics:
            rows.append(
                (name, f"loss {metrics['first_loss']:.4f} -> {metrics['final_loss']:.4f} over {metrics['steps']} steps")
            )
        else:
            rows.append(
                (
                    name,
                    ", ".join(
                        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in list(metrics.items())[:4]
                    ),
                )
            )
    return format_table(rows)


@flow(name="sweetflow-train", log_prints=True)
def train_flow(params: TrainParams = TrainParams()) -> dict:
    """Improve an actor from scored rollouts: SWEET-RL (sweet), multi-turn DPO (mtdpo) or RFT (rft)."""
    import mlflow

    doc = resolve(params)
    if (moved := moved_to_cluster(train_flow, cluster_config(doc), params)) is not None:
        return moved  # a served deployment asked for Ray
    check_step_folder(Path(doc["train"]["out_dir"]))
    check_inputs(doc)
    algo, root = doc["actor"]["algo"], Path(doc["train"]["out_dir"])
    stages = training_stages(algo, doc)
    tracking.configure()
    results: dict[str, dict] = {}
    experiment = tracking.experiment_id(doc["train"]["experiment"])
    dvc_yaml = write_stages(root, stages, doc, algo)
    with mlflow.start_run(experiment_id=experiment, run_name=f"train {algo}", tags=tracking.provenance_tags()) as run:
        mlflow.log_params(tracking.flatten({"train": doc["train"], "algo": algo}))
        for stage in stages:
            label = STAGES[stage].label
            _, tracked = run_tracked(dvc_yaml, stage, cluster_config(doc), label, run.info.run_id, experiment, {})
            results[label] = tracked["metrics"]
        table = summary_table(algo, root, results)
        get_run_logger().info("MLflow run %s\n%s", run.info.run_id, table)
        return {
            "steps": results,
            "actor_model": str(TrainLayout(root).actor_model),
            "mlflow_run_id": run.info.run_id,
            "summary": table,
        }
