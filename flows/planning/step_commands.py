"""The single-step commands (`sweetflow eval`, `rollouts`, `train`) as plans: each command's
parameters (its options, and the form of the `eval` deployment in the Prefect UI) resolved once
into a `StepsRun`, which the one steps flow (flows/steps_flow.py) runs.

Resolution: params.yaml's base sections (for `eval`, a profile's overlay and `-S` overrides first)
with the command's non-None options applied per section, validated (ConfigError lists every
problem). The stages are the catalogue's: `eval` the evaluation stage, `rollouts` the rollouts
stage (each after the task's generator stage when its records are generated), `train` the
algorithm's training stages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, Field

from components.config.sections import (
    PARAMS,
    ConfigError,
    EpisodeSection,
    EvalConfig,
    RolloutsConfig,
    check_rollouts,
    read_params,
)
from components.config.training import ActorConfig, Algo, Family, TrainConfig, TrainLayout, of_family
from components.stages.catalogue import training_stages
from flows.planning import profiles
from flows.planning.options import EPISODE_FIELDS, cluster_field, flow_params, task_field
from flows.planning.plan import ROLLOUTS, ZERO_SHOT


def step_doc(sections: Sequence[str], overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A single-step command's parameters: params.yaml's base `sections` (no profile) with the
    command's non-None options applied per section, validated (ConfigError lists every problem)."""
    from flows.planning.profiles import deep_merge, validate

    base = read_params(PARAMS)
    doc = {
        name: deep_merge(
            base.get(name) or {},
            {k: v if not isinstance(v, Path) else str(v) for k, v in overrides.get(name, {}).items() if v is not None},
        )
        for name in sections
    }
    models = validate(doc)
    return {name: models[name].model_dump(mode="json") for name in sections}


def task_name(task: str | None) -> str:
    """The task a single-step command plays: `task` (--task), else params.yaml's `task.name` (validated)."""
    from components.config.sections import TaskSection, load_section
    from components.tasks.registry import task_class

    return task_class(task or load_section(TaskSection, "task", path=PARAMS).name).name


def stages_doc(stages: Sequence[str], task: str, overrides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`step_doc` of every section `stages` read when playing `task` (in the stages' order), the
    `task` section naming it, and the `cluster` section (where the steps run; no stage's DVC param)."""
    from components.stages.catalogue import STAGES
    from components.tasks.registry import task_class

    names: list[str] = []
    for stage in stages:
        names += [n for n in STAGES[stage].sections_for(task_class(task).sections) if n not in names]
    return step_doc([*names, "cluster"], overrides | {"task": {"name": task}})


def cluster_settings(items: Sequence[str]) -> dict[str, Any]:
    """A single-step command's `-S cluster.key=value` items as overrides of the `cluster` section;
    ConfigError for another section (those have the command's own options)."""
    from flows.planning.profiles import parse_override, set_path

    doc: dict[str, Any] = {}
    for item in items:
        path, value = parse_override(item)
        if path[0] != "cluster":
            raise ConfigError(
                f"-S {item}: single-step commands take -S for the cluster section only (e.g. -S "
                f"cluster.backend=ray); set {path[0]} with the command's options or in params.yaml"
            )
        set_path(doc, path, value)
    return doc.get("cluster", {})


def with_generator(task: str, stages: Sequence[str]) -> list[str]:
    """`stages` after the stage generating the task's records, when the task has one."""
    from components.tasks.registry import task_class

    generator = task_class(task).generator
    return [*([generator] if generator else []), *stages]


class StepsRun(BaseModel):
    """What a single-step command runs: `stages` of the catalogue on the resolved parameters `doc`,
    in `folder` (its params.yaml and dvc.yaml), tracked in the MLflow experiment `experiment` (both
    from the command's own section of `doc`): one stage as the run `run_name`, or (`nested`) each
    stage as a run nested under a parent of that name."""

    command: Literal["eval", "rollouts", "train"]
    doc: dict[str, Any]
    stages: list[str] = Field(description="the tracked stages in order (a task's generator runs first, untracked)")
    run_name: str
    tags: dict[str, str] = Field(default_factory=dict)
    nested: bool = Field(False, description="each stage a nested run under a parent run (train)")
    algo: Optional[str] = Field(None, description="the training algorithm whose stages these are (train)")
    best_of: Optional[int] = Field(None, description="eval: critic-guided best-of-N, run without DVC")
    critic: Optional[str] = None
    register_model: bool = Field(False, description="eval: the evaluated model goes through the registry gate")
    products: dict[str, str] = Field(default_factory=dict, description="what the command reports it made")

    @property
    def folder(self) -> str:
        return self.doc[self.command]["out_dir"]

    @property
    def experiment(self) -> str:
        return self.doc[self.command]["experiment"]

    @property
    def generators(self) -> list[str]:
        """The task's generator stage, before the stages, when its records are generated (not for training)."""
        return [] if self.command == "train" else with_generator(self.doc["task"]["name"], [])


# ---- eval

EvalParams = flow_params(
    "EvalParams",
    "Parameters of the eval flow; None keeps the params.yaml value (shown as a form in the UI).",
    EvalConfig,
    (*EPISODE_FIELDS, "seeds"),
    task=task_field(),
    profile=(
        Optional[str],
        Field(
            None,
            description="run profile whose overlay applies (as `sweetflow run --profile`); None = params.yaml's base",
        ),
    ),
    overrides=(
        list[str],
        Field(
            default_factory=list,
            description="section.key=value settings of the sections eval reads (task, the task's, episode, eval, "
            "cluster; critic and ranking with best_of > 1), after the profile (-S, repeatable)",
        ),
    ),
    best_of=(
        Optional[int],
        Field(None, description="critic-guided best-of-N: candidates sampled per agent turn (1 = plain sampling)"),
    ),
    critic=(
        Optional[str],
        Field(None, description="best_of > 1: the critic ranking the candidates, a trained critic's folder or `base`"),
    ),
    register_model=(
        bool,
        Field(
            False,
            description="register the evaluated model (a local folder) in the MLflow "
            "registry as `candidate`, and as `champion` if it beats the current champion",
        ),
    ),
)

EVAL_OWN_FIELDS = {"register_model", "task", "overrides", "profile", "best_of", "critic"}  # not eval section keys


def eval_run(params: EvalParams) -> StepsRun:
    """The evaluation of `params` (see the module docstring); ConfigError on bad values, an override
    of a section eval does not read, or a bad best-of combination."""
    _check_best_of(params)
    doc = profiles.resolve(params.profile, list(params.overrides))
    task = task_name(params.task or (doc.get("task") or {}).get("name"))  # None: the task section's default
    names = [*stages_doc(with_generator(task, [ZERO_SHOT]), task, {})]  # the sections those stages read, cluster
    names += ["critic", "ranking"] if (params.best_of or 1) > 1 else []
    stray = [o for o in params.overrides if o.partition(".")[0] not in names]
    if stray:
        raise ConfigError(f"-S {', '.join(stray)}: sweetflow eval reads only the sections {', '.join(names)}")
    own = {k: v for k, v in params.model_dump(exclude=EVAL_OWN_FIELDS).items() if v is not None}
    merged = profiles.deep_merge({n: doc.get(n) or {} for n in names}, {"task": {"name": task}, "eval": own})
    models = profiles.validate(merged)
    resolved = {name: models[name].model_dump(mode="json") for name in names}
    cfg = resolved["eval"]
    if params.register_model and not Path(cfg["model"]).is_dir():
        raise ConfigError(f"--register needs a local model folder; '{cfg['model']}' is not one")
    best = f" best-of-{params.best_of}" if params.best_of else ""
    tags = {"sweetflow.task": task} | (
        {"sweetflow.best_of": str(params.best_of), "sweetflow.critic": str(params.critic)} if params.best_of else {}
    )
    return StepsRun(
        command="eval",
        doc=resolved,
        stages=[ZERO_SHOT],
        run_name=f"eval {Path(cfg['model']).name} on {task}{best}",
        tags=tags,
        best_of=params.best_of,
        critic=params.critic,
        register_model=params.register_model,
    )


def _check_best_of(params: EvalParams) -> None:
    from components.episodes.best_of import check_best_of

    if params.best_of is None:
        if params.critic is not None:
            raise ConfigError(f"--critic {params.critic} needs --best-of N (N > 1): the critic ranks N candidates")
        return
    if params.register_model:
        raise ConfigError("--register is refused with --best-of: a best-of-N score is not the model's own")
    try:
        check_best_of(params.best_of, params.critic)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# ---- rollouts

RolloutsParams = flow_params(
    "RolloutsParams",
    "Parameters of the rollouts command; None keeps the params.yaml value.",
    RolloutsConfig,
    (*EPISODE_FIELDS, "per_task", "seed"),
    task=task_field(),
    overrides=cluster_field(),
)


def rollouts_run(params: RolloutsParams) -> StepsRun:
    """K sampled, scored trajectories per training task (task, the task's sections, episode,
    rollouts); ConfigError on bad values."""
    task = task_name(params.task)
    settings = {
        "rollouts": params.model_dump(exclude={"task", "overrides"}),
        "cluster": cluster_settings(params.overrides),
    }
    doc = stages_doc(with_generator(task, [ROLLOUTS]), task, settings)
    check_rollouts(RolloutsConfig.model_validate(doc["rollouts"]), EpisodeSection.model_validate(doc["episode"]))
    cfg = doc["rollouts"]
    return StepsRun(
        command="rollouts",
        doc=doc,
        stages=[ROLLOUTS],
        run_name=f"rollouts {Path(cfg['model']).name} k={cfg['per_task']} on {task}",
        tags={"sweetflow.task": task},
    )


# ---- train

TRAIN_FIELDS = ("trajectories", "model", "out_dir")
TrainParams = flow_params(
    "TrainParams",
    "Parameters of the train command; None keeps the params.yaml value.",
    TrainConfig,
    TRAIN_FIELDS,
    algo=(Optional[Algo], Field(None, description=ActorConfig.model_fields["algo"].description)),
    task=task_field(),
    overrides=cluster_field(),
)


def train_run(params: TrainParams) -> StepsRun:
    """The training stages of the algorithm (the sections they read, with the task's); ConfigError on
    bad values or an algorithm of another family."""
    algo = params.algo.value if params.algo else read_params(PARAMS).get("actor", {}).get("algo", Algo.sweet.value)
    try:
        of_family(Algo(algo), Family.collaborative, "--algo")
    except ValueError as exc:
        raise ConfigError(f"{exc} (CORY and PPO train in `sweetflow run --algo cory|ppo`)") from None
    overrides = {
        "train": params.model_dump(include=set(TRAIN_FIELDS)),
        "actor": {"algo": params.algo},
        "cluster": cluster_settings(params.overrides),
    }
    doc = stages_doc(training_stages(algo), task_name(params.task), overrides)
    cfg = doc["train"]
    return StepsRun(
        command="train",
        doc=doc,
        stages=list(training_stages(algo, doc)),
        run_name=f"train {algo}",
        nested=True,
        algo=algo,
        products={"actor_model": str(TrainLayout(Path(cfg["out_dir"])).actor_model)},
    )


def check_train_inputs(run: StepsRun) -> None:
    """Fail before any heavy work when the rollouts or a model of a training run are missing."""
    from components.data.model_prepare import resolve_model

    rollouts = Path(run.doc["train"]["trajectories"]) / "trajectories.jsonl"
    if not rollouts.exists():
        raise FileNotFoundError(
            f"{rollouts} not found: run `sweetflow rollouts --out {run.doc['train']['trajectories']}` first"
        )
    resolve_model(run.doc["train"]["model"])
    if "critic" in training_stages(run.algo):
        resolve_model(run.doc["critic"]["model"])
