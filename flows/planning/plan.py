"""A pipeline run's plan: where its files live, each iteration's parameters and its DVC stages.

Reads: the project's params.yaml (through flows.planning.profiles) and the stage catalogue
(components/stages/catalogue.py). Writes, for each iteration k of a run, under
`runs/pipeline/<algo>-<task>-<profile>-<hash of the resolved parameters>/iter-k/`:
  params.yaml  the run's resolved parameters with iteration k's paths and seeds
  dvc.yaml     the catalogue stages this algorithm runs, `${...}` filled in from that params.yaml,
               run from the project root (`wdir`) with SWEETFLOW_PARAMS naming that params.yaml
DVC then writes iter-k/dvc.lock (the iteration's version record) and skips a stage whose deps,
params and outs did not change, so a second identical run only checks hashes; a run with other
parameters gets another folder and never overwrites one.

Collaborative-task algorithms (sweet, mtdpo, rft) on the task `task.name` names (ColBench backend,
elicitation, ...: components/tasks): iteration 0 generates the task's records when the task has a
generator stage, then evaluates the base model (stage eval_zero_shot). Iteration k >= 1 collects
rollouts with actor k-1 (the base model for k = 1), trains actor k with the algorithm's stages
(the SWEET-RL loop of docs/algorithms.md steps 1-8, or a baseline) and evaluates it (eval_actor).
Rollout and candidate seeds move with k so that iterations sample afresh; the eval seeds stay
fixed so that iterations are compared on the same episodes.

Baselines (`--baselines`, the names of flows/planning/baselines.py: other algorithms and SWEET-RL ablations)
train on iteration 1's rollouts in iter-1/<name>/ with their own params.yaml and dvc.yaml; a
SWEET-RL one ranks the candidates the run's own iteration sampled (`train.candidates`) when it
would sample the same ones, and a stage its settings make unnecessary (the critic's training for
an untrained critic) is not in its dvc.yaml (catalogue `Stage.unless`).

Single-turn algorithms (cory, ppo) on the single-turn task `task.name` names (gsm8k, reviews:
components/cory/registry.py; a profile whose task is collaborative gives them gsm8k): in iter-1,
the task's generator stage when it has one, then one stage, `cory`, which runs `cory.iterations`
PPO iterations itself (evaluating every agent after each) and resumes from its checkpoint, so a
longer `cory.iterations` extends a run in the same folder instead of starting another.

A run's parameters hold only the sections its algorithm reads (an override of another section is
an error, not silently ignored).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, Field, field_validator

from components.config.schema import section_module
from components.config.sections import PARAMS_ENV, ConfigError, TaskSection
from components.config.training import Algo, TrainLayout
from components.cory.registry import DEFAULT_PROMPT_TASK, PROMPT_TASKS
from components.stages.catalogue import (
    CODE_ROOT,
    STAGES,
    TASK,
    Kind,
    Out,
    Stage,
    code_deps,
    skipped_outs,
    training_stages,
)
from components.stages.catalogue import TASKS as TASK_FILES
from components.tasks.registry import TASKS, task_class
from flows.planning import profiles
from flows.planning.baselines import BASELINES, check_settings, identity, variant_doc
from flows.planning.played import kinds, played_class

RUNS_ROOT = Path("runs/pipeline")
ZERO_SHOT, ROLLOUTS, EVAL_ACTOR, CORY = "eval_zero_shot", "rollouts", "eval_actor", "cory"
QUALITY = "critic_quality"  # the stage measuring a SWEET-RL critic (results.md's critic-quality table)


SINGLE_TURN_SECTIONS = ("task", "model", "cluster", "cory")  # what a CORY run reads besides its task's section;
# collaborative runs read every other section but the sections of the tasks they do not play
_VAR = re.compile(r"\$\{([\w.-]+)\}")


class PipelineParams(BaseModel):
    """Parameters of a pipeline run (the Prefect UI shows them as a form); `overrides` win over the profile."""

    algo: Algo = Field(
        Algo.sweet,
        description="sweet (SWEET-RL) | mtdpo (multi-turn DPO) | "
        "rft (rejection FT) on a collaborative task; cory (CORY) | ppo (single-agent PPO) on a single-turn task",
    )
    iterations: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="training iterations; ColBench: each starts "
        "from the last actor (default 1); cory/ppo: PPO iterations (default: "
        "cory.iterations)",
    )
    profile: str = Field(
        "default",
        description="default (embedded CPU run) | data128 | smoke | colbench-cpu | reviews | gpu-8b "
        "(params.yaml profiles)",
    )
    task: str | None = Field(
        None,
        description=f"task: {' | '.join(TASKS)} (collaborative); {' | '.join(PROMPT_TASKS)} (single-turn, "
        "for cory/ppo). None: the profile's task.name (cory/ppo: gsm8k when that is a collaborative task)",
    )
    overrides: list[str] = Field(default_factory=list, description="section.key=value, e.g. critic.optim.lr=1e-5")
    runs_root: str = Field(str(RUNS_ROOT), description="folder holding the runs' iteration folders")
    baselines: list[str] = Field(
        default_factory=list,
        description="other algorithms and SWEET-RL ablations trained on iteration 1's rollouts and evaluated "
        "on the same eval tasks, in iter-1/<name>/, for a side-by-side table (make run: mtdpo, rft): "
        + "; ".join(f"{c.name} ({c.about})" for c in BASELINES.values())
        + ". SWEET-RL ones rank the run's own candidates when it sampled them; one that would repeat the run "
        "(e.g. sweet-reference when ranking.baseline is reference) is refused",
    )

    @field_validator("baselines", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """`--baselines mtdpo,rft` as well as one flag per algorithm."""
        if isinstance(value, str):
            value = [value]
        return [b.strip() for v in value or [] for b in str(v).split(",") if b.strip()]


@dataclass(frozen=True)
class RunPlan:
    algo: Algo
    profile: str
    doc: dict[str, Any]  # resolved parameters (profile and overrides applied), no iteration paths
    run_dir: Path

    def iteration_dir(self, k: int) -> Path:
        return self.run_dir / f"iter-{k}"

    @property
    def single_turn(self) -> bool:
        """Whether the algorithm plays a single-turn task (cory, ppo) rather than a collaborative one."""
        return self.algo.single_turn

    def iterations(self, n: int) -> list[int]:
        """The pipeline iterations of a run asked for `n` training iterations: 0 (the base model's
        evaluation) to n on a collaborative task; the one `cory` stage for CORY/PPO, which iterates itself."""
        return [1] if self.single_turn else list(range(n + 1))

    @property
    def task(self) -> str:
        """The task the run plays."""
        return self.doc[TASK]["name"]

    @property
    def task_class(self) -> type:
        """The class of the task the run plays (a collaborative or a single-turn task)."""
        return played_class(self.task, self.single_turn)

    def stages(self, k: int) -> tuple[str, ...]:
        generator = self.task_class.generator
        if self.single_turn:
            return (*([generator] if generator else []), CORY)
        if k == 0:
            return (*([generator] if generator else []), ZERO_SHOT)
        return (ROLLOUTS, *training_stages(self.algo.value, self.doc), EVAL_ACTOR)

    def trained_actor(self, k: int) -> Path:
        """Where iteration k (>= 1) writes its trained actor (CORY/PPO: the agents' LoRA adapters)."""
        if self.single_turn:
            return self.iteration_dir(k) / CORY / "adapters"
        return TrainLayout(self.iteration_dir(k) / "train").actor_model

    def eval_dir(self, k: int) -> Path:
        """Where iteration k's evaluation writes (the root dvc.yaml's eval_zero_shot / eval_actor outs)."""
        return self.iteration_dir(k) / "eval" if k == 0 else TrainLayout(self.iteration_dir(k) / "train").eval_dir


LOGGING_ONLY = tuple(sorted({k for stage in STAGES.values() for k in (stage.sample_key, stage.trace_key) if k}))


def plan_run(
    algo: str,
    profile: str = profiles.DEFAULT,
    overrides: list[str] = (),
    runs_root: Path = RUNS_ROOT,
    task: str | None = None,
) -> RunPlan:
    """The run's resolved parameters and folder; ConfigError on a bad algo, profile, task or override.
    `task` (None: the profile's `task.name`) picks the task: a collaborative one for sweet, mtdpo
    and rft, a single-turn one for cory and ppo (which play gsm8k when the profile's is collaborative).

    The folder is named by a hash of the parameters, less the `cluster` section (placement changes
    no result: a run moved to Ray resumes the local one) and the counts of dialogues logged to MLflow
    (LOGGING_ONLY); for CORY/PPO, `cory.iterations` is left
    out of it too, so that a longer run resumes the shorter one's checkpoint (the per-iteration rows
    are kept)."""
    try:
        algo = Algo(algo)
    except ValueError:
        raise ConfigError(f"unknown algo '{algo}' (choose one of {', '.join(a.value for a in Algo)})") from None
    overrides = [*overrides, *([f"task.name={task}"] if task is not None else [])]
    resolved = profiles.resolve(profile, list(overrides))
    _check_task(algo, resolved, named=any(o.replace(" ", "").startswith("task.name=") for o in overrides))
    doc = _sections_of(algo, resolved, overrides)
    doc["cory" if algo.single_turn else "actor"]["algo"] = algo.value
    identity = copy.deepcopy(doc)
    identity.get("cory", {}).pop("iterations", None)
    identity.pop("cluster", None)  # where the steps run does not change what they compute
    for key in LOGGING_ONLY:  # nor how many dialogues are logged to MLflow
        section, _, name = key.partition(".")
        identity.get(section, {}).pop(name, None)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
    name = f"{algo.value}-{doc[TASK]['name']}-{profile}"
    return RunPlan(algo, profile, doc, Path(runs_root) / f"{name}-{digest}")


def _check_task(algo: Algo, doc: dict[str, Any], named: bool) -> None:
    """ConfigError when the task does not suit the algorithm's kind; a single-turn algorithm on a
    profile whose task is collaborative, no task named, plays the default single-turn task."""
    name = doc[TASK]["name"]
    if name not in TASKS and name not in PROMPT_TASKS:
        raise ConfigError(f"unknown task '{name}' ({kinds()})")
    if algo.single_turn and name in TASKS:
        if named:
            raise ConfigError(
                f"algo {algo.value} plays a single-turn task ({', '.join(PROMPT_TASKS)}), not the collaborative "
                f"task {name}"
            )
        doc[TASK]["name"] = DEFAULT_PROMPT_TASK
    if not algo.single_turn and name in PROMPT_TASKS:
        raise ConfigError(
            f"task {name} is a single-turn task, for --algo cory or ppo; algo {algo.value} plays a collaborative "
            f"one ({', '.join(TASKS)})"
        )


def _sections_of(algo: Algo, doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The sections `algo` reads; an override of any other section is an error."""
    if algo.single_turn:
        keep = {*SINGLE_TURN_SECTIONS, *played_class(doc[TASK]["name"], True).sections}
    else:
        played = set(played_class(doc[TASK]["name"], False).sections)
        classes = (*map(task_class, TASKS), *PROMPT_TASKS.values())
        others = {s for cls in classes for s in cls.sections} - played
        keep = set(doc) - {"cory"} - others
    stray = [o for o in overrides if o.partition(".")[0] not in keep]
    if stray:
        raise ConfigError(
            f"override(s) {', '.join(stray)} do not apply to algo {algo.value} (its sections: "
            f"{', '.join(s for s in doc if s in keep)})"
        )
    return {name: section for name, section in doc.items() if name in keep}


def check_baselines(plan: RunPlan, baselines: Sequence[str]) -> None:
    """ConfigError unless every baseline is a known name (BASELINES) whose algorithm and settings
    differ from the run's and from the other baselines' (it would repeat them), on valid parameters."""
    if baselines and plan.single_turn:
        raise ConfigError(
            f"--baselines apply to {', '.join(BASELINES)}, not to {plan.algo.value} (compare it with "
            f"{' or '.join(a.value for a in Algo if a.single_turn and a != plan.algo)} in a run of its own)"
        )
    seen = {identity(plan.doc): "the run itself"}
    bad, reasons = [], []
    for name in baselines:
        if name not in BASELINES:
            bad.append(name)
            reasons.append(f"{name} is none of {', '.join(BASELINES)}")
            continue
        doc = variant_doc(plan.doc, BASELINES[name])
        same = seen.setdefault(identity(doc), f"baseline {name}")
        if same != f"baseline {name}":
            bad.append(name)
            reasons.append(f"{name} would repeat {same} ({BASELINES[name].describe()} already)")
    if bad:
        raise ConfigError(f"baseline(s) {', '.join(bad)}: {'; '.join(reasons)}")
    for name in baselines:
        check_settings(variant_doc(plan.doc, BASELINES[name]), BASELINES[name])


def baseline_doc(plan: RunPlan, k: int, start: str, name: str) -> dict[str, Any]:
    """Iteration k's parameters for the baseline `name`: the same rollouts (iter-k/rollouts) and
    eval tasks, its own training and evaluation folders under iter-k/<name>/. A SWEET-RL one ranks
    the candidates the run's iteration samples (`train.candidates`) when those are the ones it
    would sample itself (same actor, rollouts and candidate settings): no second sampling."""
    own, folder = iteration_doc(plan, k, start), plan.iteration_dir(k) / name
    doc = variant_doc(own, BASELINES[name])
    doc["train"]["out_dir"] = str(folder)
    layout = TrainLayout(folder)
    doc["eval"].update(model=str(layout.actor_model), out_dir=str(layout.eval_dir))
    if "candidates" in plan.stages(k) and "candidates" in training_stages(doc["actor"]["algo"], doc):
        if _same_candidates(own, doc):
            doc["train"]["candidates"] = str(TrainLayout(Path(own["train"]["out_dir"])).candidates)
    return doc


def _same_candidates(own: dict[str, Any], doc: dict[str, Any]) -> bool:
    """Whether the candidates stage would sample the same candidates under both parameters."""
    where = ("out_dir", "candidates", "experiment")
    return all(
        {k: v for k, v in own[s].items() if k not in where} == {k: v for k, v in doc[s].items() if k not in where}
        for s in STAGES["candidates"].sections
    )


def baseline_stages(name: str, doc: dict[str, Any]) -> tuple[str, ...]:
    """A baseline's stages on its parameters `doc` (baseline_doc): its training stages, then the
    evaluation of its actor."""
    return (*training_stages(BASELINES[name].algo, doc), EVAL_ACTOR)


def write_baseline(plan: RunPlan, k: int, start: str, name: str, project: Path = Path(".")) -> Path:
    """iter-k/<name>/{params.yaml,dvc.yaml}: the baseline's training stages and evaluation."""
    doc = baseline_doc(plan, k, start, name)
    algo = BASELINES[name].algo
    return write_stages(plan.iteration_dir(k) / name, baseline_stages(name, doc), doc, algo, project)


def iteration_doc(plan: RunPlan, k: int, start: str) -> dict[str, Any]:
    """The parameters of iteration k, which starts from the model `start` (the base model, or the
    actor of the last iteration that trained one), with its own output folders."""
    doc, it = copy.deepcopy(plan.doc), plan.iteration_dir(k)
    if plan.single_turn:
        doc["cory"].update(model=start, out_dir=str(it / CORY))
        return doc
    doc["eval"].update(model=start if k == 0 else str(plan.trained_actor(k)), out_dir=str(plan.eval_dir(k)))
    if k > 0:
        doc["rollouts"].update(
            model=start,
            out_dir=str(it / "rollouts"),
            seed=doc["rollouts"]["seed"] + k - 1,
            offline=doc["rollouts"].get("offline") if k == 1 else None,
        )
        doc["train"].update(model=start, trajectories=str(it / "rollouts"), out_dir=str(it / "train"))
        doc["candidates"]["seed"] += k - 1
    return doc


def interpolate(value: Any, doc: dict[str, Any]) -> Any:
    """`${section.key}` in every string of `value` replaced by that value of `doc`."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: str(_lookup(doc, m.group(1))), value)
    if isinstance(value, (list, tuple)):
        return [interpolate(v, doc) for v in value]
    if isinstance(value, dict):
        return {interpolate(k, doc): interpolate(v, doc) for k, v in value.items()}
    return value


def _lookup(doc: dict[str, Any], dotted: str) -> Any:
    node: Any = doc
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            raise ConfigError(f"the stage catalogue refers to ${{{dotted}}}, which the run parameters do not have")
        node = node[key]
    return node


def _is_set(doc: dict[str, Any], dotted: str) -> bool:
    section, _, key = dotted.partition(".")
    return bool((doc.get(section) or {}).get(key))


def _out(out: Out) -> Any:
    flags = {k: v for k, v in (("cache", out.cache), ("persist", out.persist)) if v != (k == "cache")}
    return {out.path: flags} if flags else out.path


def dvc_stage(stage: Stage, task: str, algo: str | None = None, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stage as dvc.yaml declares it for `task`, `${section.key}` kept: the command, its code
    (every project file the module, the task it plays and its sections' config models import), its
    inputs and models, params sections, outs and metrics. Under run parameters `doc`, the outs of
    stages they make unnecessary are no deps (catalogue.skipped_outs)."""
    skipped = skipped_outs(algo, doc)
    plays = TASK in stage.sections or TASK_FILES in stage.inputs
    played = played_class(task, stage.kind == Kind.cory) if plays else None
    reads = [*stage.inputs_for(algo, played.file_keys() if played else ()), *stage.models]
    sections = list(stage.sections_for(played.sections if played else ()))
    code = [stage.module, *([played.__module__] if played else ()), *(section_module(s) for s in sections)]
    spec: dict[str, Any] = {
        "cmd": " ".join(["python -m", stage.module, *stage.args]),
        "deps": [*sorted({f for m in code for f in code_deps(m)}), *(d for d in reads if d not in skipped)],
    }
    if sections:
        spec["params"] = sections
    spec["outs"] = [_out(o) for o in stage.outs_for(algo)]
    if stage.metrics:
        spec["metrics"] = [{stage.metrics: {"cache": False}}]
    return spec


def root_dvc_yaml() -> str:
    """The root dvc.yaml: every catalogue stage on params.yaml's paths and task (`dvc repro` from the root)."""
    from components.config.sections import PARAMS, TaskSection, load_section

    task = load_section(TaskSection, TASK, path=CODE_ROOT / PARAMS).name
    stages = {name: dvc_stage(stage, task) for name, stage in STAGES.items()}
    return ROOT_HEADER + yaml.safe_dump({"stages": stages}, sort_keys=False, width=120)


ROOT_HEADER = """# GENERATED from the stage catalogue (components/stages/catalogue.py) by
# `python -m flows.planning.plan`; do not edit. Each step: its code (every project file its module
# imports), inputs, params sections, outs, metrics. `dvc repro` reproduces a run on params.yaml;
# dvc.lock is the version record.
"""


def _code_path(dep: str, project: Path) -> str:
    """A dep on this package's code, absolute when the project is not the checkout holding it."""
    if dep.startswith("components/") and project.resolve() != CODE_ROOT:
        return str(CODE_ROOT / dep)
    return dep


def resolved_stage(
    name: str, doc: dict[str, Any], algo: str | None, params_file: str, wdir: str, project: Path, produced: set[str]
) -> dict:
    """A catalogue stage on the run parameters `doc`: paths filled in, run from the project root
    with SWEETFLOW_PARAMS naming the run's params file. A model that is neither a local folder nor
    produced by a stage of the same file (a hub id) is not a dep."""
    stage = STAGES[name]
    spec = dvc_stage(stage, (doc.get(TASK) or {}).get("name", TaskSection().name), algo, doc)
    models = set(interpolate(list(stage.models), doc))
    spec["deps"] += [f"${{{key}}}" for key in stage.optional_inputs if _is_set(doc, key)]
    spec = interpolate(spec, doc)
    spec["cmd"] = f"{PARAMS_ENV}={params_file} {spec['cmd']}"
    spec["wdir"] = wdir
    spec["deps"] = [
        _code_path(d, project)
        for d in spec["deps"]
        if d not in models or d in produced or (project / d).is_dir() or Path(d).is_dir()
    ]
    if spec.get("params"):
        spec["params"] = [{params_file: spec["params"]}]
    return spec


def write_stages(
    folder: Path, names: Sequence[str], doc: dict[str, Any], algo: str | None = None, project: Path = Path(".")
) -> Path:
    """folder/params.yaml (`doc`) and folder/dvc.yaml (the named stages on it), rewritten only when they
    change, so that DVC sees no change in a re-run; returns the dvc.yaml path."""
    (project / folder).mkdir(parents=True, exist_ok=True)
    params_file = str(folder / "params.yaml")
    wdir = os.path.relpath(project, project / folder)
    produced = {o for n in names for o in interpolate([o.path for o in STAGES[n].outs_for(algo)], doc)}
    stages = {n: resolved_stage(n, doc, algo, params_file, wdir, project, produced) for n in names}
    _write_if_changed(project / params_file, yaml.safe_dump(doc, sort_keys=False))
    _write_if_changed(
        project / folder / "dvc.yaml",
        "# generated by sweetflow from the stage catalogue\n"
        + yaml.safe_dump({"stages": stages}, sort_keys=False, width=120),
    )
    return folder / "dvc.yaml"


def write_iteration(plan: RunPlan, k: int, start: str, project: Path = Path(".")) -> Path:
    """iter-k/params.yaml and iter-k/dvc.yaml for an iteration starting from the model `start`."""
    return write_stages(plan.iteration_dir(k), plan.stages(k), iteration_doc(plan, k, start), plan.algo.value, project)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


if __name__ == "__main__":
    (CODE_ROOT / "dvc.yaml").write_text(root_dvc_yaml())
    print(f"wrote {CODE_ROOT / 'dvc.yaml'}")
