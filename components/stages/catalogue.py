"""The stage catalogue: every DVC stage of sweetflow declared once.

A `Stage` says which module runs it (`python -m <module> <args>`), which params.yaml sections it
reads, which data and model files it reads (`inputs`, `${section.key}` templates), what it writes
(`outs`, `metrics`, `curves`, `artifacts`, `dialogues`), how MLflow should see it (`kind`) and
which algorithms use it. Everything else reads this table: the root dvc.yaml is generated from it
(`python -m flows.planning.plan`, checked by tests/flows/planning/test_catalogue.py), the pipeline's per-iteration
dvc.yaml files, the flows' step order, the MLflow trackers and each stage module's command line.

The catalogue knows no task: a stage that plays one reads TASK among its sections and TASKS among
its inputs, which the caller resolves with the task's sections and records files (components/tasks
for the collaborative tasks, components/cory/tasks.py for the single-turn ones CORY plays), so
that a stage that plays no task does not depend on the tasks' code.

A stage's code dependencies are not typed here: `code_deps` computes them as every project file
its module imports, transitively (including imports inside functions, and the scripts a module
starts by file name, such as the scoring fork-server), so editing any of them re-runs the stage.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from components.config.training import REFERENCE_LOGPROBS, Algo, CriticChoice, Family, TrainLayout

CODE_ROOT = Path(__file__).resolve().parents[2]  # the checkout holding components/
PACKAGE = "components"
TRAIN = TrainLayout(Path("${train.out_dir}"))  # the training stages' files, as templates


class Kind(str, Enum):
    eval = "eval"  # evaluates a model: an MLflow eval run, a registry gate, the run's score
    episodes = "episodes"  # plays episodes for training data (retried once: it resumes)
    train = "train"  # a SWEET-RL / baseline training step
    cory = "cory"  # CORY/PPO on a single-turn task: iterates itself, logs per-iteration eval runs
    model = "model"  # prepares the embedded default model (the root dvc.yaml only)
    data = "data"  # generates a task's records (a task with `generator`; the pipeline's first stage)


@dataclass(frozen=True)
class Out:
    path: str
    persist: bool = False  # kept across a re-run: the stage resumes from it
    cache: bool = True  # false: small files DVC tracks without caching
    reference: bool = False  # a frozen reference model's log-probs: written only by algorithms that have one


@dataclass(frozen=True)
class Unless:
    """A run setting that makes a stage unnecessary: `key` (`section.key`) equal to `value`, or, with
    `value` None, set at all (not null). Such a stage does not run, and no stage of the run depends
    on its outs (`skipped_outs`)."""

    key: str
    value: str | None = None

    def holds(self, doc: Mapping[str, Any]) -> bool:
        section, _, name = self.key.partition(".")
        got = (doc.get(section) or {}).get(name)
        return got is not None if self.value is None else got == self.value


@dataclass(frozen=True)
class Stage:
    name: str
    label: str  # what the console and MLflow call it
    module: str
    outs: tuple[Out, ...]
    kind: Kind
    sections: tuple[str, ...] = ()  # params.yaml sections it reads
    inputs: tuple[str, ...] = ()  # data files (and other stages' outputs) it reads
    models: tuple[str, ...] = ()  # models it loads: a dep when a local folder (a hub id is not a file)
    metrics: str | None = None  # its metrics.json
    algos: frozenset[str] = frozenset()  # the algorithms whose runs have it (none: a set-up stage)
    args: tuple[str, ...] = ()
    input_by_algo: tuple[tuple[Algo, str], ...] = ()  # (algorithm, its own input beside `inputs`)
    optional_inputs: tuple[str, ...] = ()  # `section.key`: an input only when that value is set
    curves: str | None = None  # JSONL of per-step numbers, logged as MLflow curves
    artifacts: tuple[str, ...] = ()  # further files kept in MLflow
    dialogues: str | None = None  # trajectories rendered as sample dialogues
    sample_key: str | None = None  # `section.key` giving how many dialogues to render
    trace_key: str | None = None  # `section.key` giving how many episodes to log as MLflow traces
    unless: Unless | None = None  # a run setting under which the stage does not run

    def sections_for(self, task_sections: Sequence[str]) -> tuple[str, ...]:
        """The sections it reads when playing a task whose own sections are `task_sections`
        (Task.sections): TASK stands for `task` and those."""
        out: list[str] = []
        for name in self.sections:
            out += [TASK, *task_sections] if name == TASK else [name]
        return tuple(out)

    def outs_for(self, algo: str | None) -> tuple[Out, ...]:
        """The outs under `algo` (an algorithm without a reference model, rft's SFT, caches no reference pass)."""
        if algo is not None and not Algo(algo).traits.reference:
            return tuple(o for o in self.outs if not o.reference)
        return self.outs

    def inputs_for(self, algo: str | None, file_keys: Sequence[str]) -> tuple[str, ...]:
        """The inputs under `algo` (`input_by_algo`: the actor trains on another file per algorithm;
        the default algorithm's when none is named), TASKS being the records files of the task played
        (`file_keys`: its file_keys())."""
        inputs: tuple[str, ...] = ()
        for i in self.inputs:
            inputs += tuple(f"${{{key}}}" for key in file_keys) if i == TASKS else (i,)
        own = dict(self.input_by_algo).get(Algo(algo or DEFAULT_ALGO))
        return inputs + ((own,) if own else ())


COLBENCH = Algo.of(Family.collaborative)  # the collaborative-task algorithms (any task)
DEFAULT_ALGO = Algo.sweet  # the root dvc.yaml's (params.yaml actor.algo)
TASK = "task"  # in `sections`: the `task` section and the sections of the task it names
TASKS = "<tasks file>"  # in `inputs`: the records files of the run's task (its file_keys())
ROLLOUTS = "${train.trajectories}/trajectories.jsonl"
ACTOR_INPUT = {
    Algo.sweet: str(TRAIN.ranking_dir / "turn_pairs.jsonl"),
    Algo.mtdpo: str(TRAIN.pairs),
    Algo.rft: ROLLOUTS,
}


def _episode_outs(out_dir: str, scores: bool) -> tuple[Out, ...]:
    outs = (Out(f"{out_dir}/trajectories.jsonl", persist=True),)  # episodes survive a crash
    return outs + ((Out(f"{out_dir}/scores.jsonl"),) if scores else ())


def _training_outs(folder: Path) -> tuple[Out, ...]:
    return (
        Out(str(folder / "model")),
        Out(str(folder / "checkpoints"), persist=True),
        Out(str(folder / REFERENCE_LOGPROBS), persist=True, reference=True),
        Out(str(folder / "train_metrics.jsonl"), persist=True, cache=False),
    )


STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage(
            name="prepare_model",
            label="default model",
            module="components.data.model_prepare",
            outs=(Out("${model.out_dir}"),),
            kind=Kind.model,
            args=("--out", "${model.out_dir}"),
        ),
        Stage(
            name="elicitation_tasks",
            label="task generation",
            module="components.tasks.elicitation.generate",
            sections=("elicitation",),
            outs=(Out("${elicitation.file}"),),
            kind=Kind.data,
        ),
        Stage(
            name="reviews_openers",
            label="opener generation",
            module="components.cory.reviews_generate",
            sections=("reviews",),
            outs=(Out("${reviews.file}"),),
            kind=Kind.data,
        ),
        Stage(
            name="eval_zero_shot",
            label="evaluation",
            module="components.stages.evaluate",
            sections=(TASK, "episode", "eval"),
            inputs=(TASKS,),
            models=("${eval.model}",),
            outs=_episode_outs("${eval.out_dir}", True),
            metrics="${eval.out_dir}/metrics.json",
            kind=Kind.eval,
            algos=COLBENCH,
            artifacts=("${eval.out_dir}/scores.jsonl",),
            dialogues="${eval.out_dir}/trajectories.jsonl",
            sample_key="eval.sample_dialogues",
            trace_key="eval.trace_dialogues",
        ),
        Stage(
            name="rollouts",
            label="rollouts",
            module="components.stages.rollouts",
            sections=(TASK, "episode", "rollouts"),
            inputs=(TASKS,),
            models=("${rollouts.model}",),
            outs=_episode_outs("${rollouts.out_dir}", False),
            metrics="${rollouts.out_dir}/metrics.json",
            kind=Kind.episodes,
            algos=COLBENCH,
            optional_inputs=("rollouts.offline",),
            dialogues="${rollouts.out_dir}/trajectories.jsonl",
            sample_key="rollouts.sample_dialogues",
            trace_key="rollouts.trace_dialogues",
        ),
        Stage(
            name="train_pairs",
            label="trajectory pairs",
            module="components.stages.pairs",
            sections=("pairs", "train", TASK),
            inputs=(ROLLOUTS,),
            outs=(Out(str(TRAIN.pairs)),),
            metrics=str(TRAIN.pairs.parent / "pairs_metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet, Algo.mtdpo}),
            args=("trajectory",),
        ),
        Stage(
            name="critic",
            label="critic",
            module="components.stages.critic",
            sections=("critic", "train", TASK),
            inputs=(ROLLOUTS, str(TRAIN.pairs), TASKS),
            models=("${critic.model}",),
            outs=_training_outs(TRAIN.critic_dir),
            metrics=str(TRAIN.critic_dir / "metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet}),
            curves=str(TRAIN.critic_dir / "train_metrics.jsonl"),
            artifacts=(str(TRAIN.critic_dir / "advantages.md"),),
            unless=Unless("ranking.critic", CriticChoice.untrained.value),  # the base model ranks: nothing to train
        ),
        Stage(
            name="candidates",
            label="candidates",
            module="components.stages.candidates",
            sections=("candidates", "train", "episode"),
            inputs=(ROLLOUTS,),
            models=("${train.model}",),
            outs=(Out(str(TRAIN.candidates), persist=True),),  # sampled states survive a crash
            metrics=str(TRAIN.candidates.parent / "candidates_metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet}),
            unless=Unless("train.candidates"),  # the run ranks candidates sampled before (another run's)
        ),
        Stage(
            name="ranking",
            label="ranking",
            module="components.stages.ranking",
            sections=("ranking", "critic", "train", TASK),
            inputs=(str(TRAIN.candidates), TASKS),
            models=(str(TRAIN.critic_model), "${critic.model}", "${train.model}"),
            outs=(
                Out(str(TRAIN.ranking_dir / "ranked.jsonl")),
                Out(str(TRAIN.ranking_dir / "baseline_means.jsonl"), persist=True),
                Out(str(TRAIN.ranking_dir / "critic_means.jsonl")),
            ),
            metrics=str(TRAIN.ranking_dir / "ranking_metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet}),
            optional_inputs=("train.candidates",),
        ),
        Stage(
            name="turn_pairs",
            label="turn pairs",
            module="components.stages.pairs",
            sections=("pairs", "train", TASK),
            inputs=(str(TRAIN.ranking_dir / "ranked.jsonl"),),
            outs=(Out(ACTOR_INPUT[Algo.sweet]),),
            metrics=str(TRAIN.ranking_dir / "turn_pairs_metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet}),
            args=("turn",),
        ),
        Stage(
            name="critic_quality",
            label="critic quality",
            module="components.stages.critic_quality",
            sections=("critic", "ranking", "train", "episode", TASK),
            inputs=(
                ROLLOUTS,
                str(TRAIN.pairs),
                *(str(TRAIN.ranking_dir / f) for f in ("ranked.jsonl", "critic_means.jsonl", "baseline_means.jsonl")),
                str(TRAIN.critic_dir / REFERENCE_LOGPROBS),
                ACTOR_INPUT[Algo.sweet],
                TASKS,
            ),
            models=(str(TRAIN.critic_model), "${critic.model}", "${train.model}"),
            outs=(Out(str(TRAIN.quality_dir / "quality.md")),),
            metrics=str(TRAIN.quality_dir / "metrics.json"),
            kind=Kind.train,
            algos=frozenset({Algo.sweet}),
            artifacts=(str(TRAIN.quality_dir / "quality.md"),),
        ),
        Stage(
            name="actor",
            label="actor",
            module="components.stages.actor",
            sections=("actor", "train"),
            input_by_algo=tuple(ACTOR_INPUT.items()),
            models=("${train.model}",),
            outs=_training_outs(TRAIN.actor_dir),
            metrics=str(TRAIN.actor_dir / "metrics.json"),
            kind=Kind.train,
            algos=COLBENCH,
            curves=str(TRAIN.actor_dir / "train_metrics.jsonl"),
        ),
        Stage(
            name="eval_actor",
            label="evaluation",
            module="components.stages.evaluate",
            sections=(TASK, "episode", "eval"),
            inputs=(TASKS,),
            models=(str(TRAIN.actor_model),),
            outs=_episode_outs(str(TRAIN.eval_dir), True),
            metrics=str(TRAIN.root / "eval" / "metrics.json"),
            kind=Kind.eval,
            algos=COLBENCH,
            args=("--model", str(TRAIN.actor_model), "--out", str(TRAIN.eval_dir)),
            artifacts=(str(TRAIN.root / "eval" / "scores.jsonl"),),
            dialogues=str(TRAIN.root / "eval" / "trajectories.jsonl"),
            sample_key="eval.sample_dialogues",
            trace_key="eval.trace_dialogues",
        ),
        Stage(
            name="cory",
            label="CORY/PPO",
            module="components.stages.cory",
            sections=("cory", TASK),
            inputs=(TASKS,),
            models=("${cory.model}",),
            outs=(
                Out("${cory.out_dir}/adapters"),
                Out("${cory.out_dir}/checkpoint", persist=True),
                Out("${cory.out_dir}/eval_initial.json", persist=True),
                Out("${cory.out_dir}/iterations.jsonl", persist=True, cache=False),  # one row per finished iteration
                Out("${cory.out_dir}/samples.jsonl", persist=True, cache=False),
                Out("${cory.out_dir}/eval_prompts.jsonl", persist=True, cache=False),
            ),
            metrics="${cory.out_dir}/metrics.json",
            kind=Kind.cory,
            algos=Algo.of(Family.single_turn),
            curves="${cory.out_dir}/iterations.jsonl",
        ),
    )
}
TRAIN_ORDER = ("train_pairs", "critic", "candidates", "ranking", "turn_pairs", "critic_quality", "actor")


def training_stages(algo: str, doc: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The training stages `algo` runs, in order; under the run parameters `doc`, less the stages
    its settings make unnecessary (`Stage.unless`: no critic training for an untrained critic, no
    sampling when the candidates come from elsewhere)."""
    return tuple(name for name in TRAIN_ORDER if algo in STAGES[name].algos and not _unneeded(STAGES[name], doc))


def _unneeded(stage: Stage, doc: Mapping[str, Any] | None) -> bool:
    return doc is not None and stage.unless is not None and stage.unless.holds(doc)


def skipped_outs(algo: str | None, doc: Mapping[str, Any] | None) -> set[str]:
    """The outs (templates) of `algo`'s training stages that `doc` makes unnecessary: nothing of the
    run writes them, so no stage of it declares them as deps (its module reads another file then)."""
    if algo is None or doc is None:
        return set()
    return {o.path for s in STAGES.values() if algo in s.algos and _unneeded(s, doc) for o in s.outs}


def stages_of_module(module: str) -> list[Stage]:
    return [s for s in STAGES.values() if s.module == module]


def _module_file(name: str) -> Path | None:
    """The project file of a dotted module name (a package's __init__.py), None outside the project."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    base = CODE_ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """A project file parsed once: every stage's code deps read the same files."""
    return ast.parse(path.read_text(), str(path))


def _runs(tree: ast.Module) -> Iterator[ast.AST]:
    """Every node of `tree` that can run: `if TYPE_CHECKING:` blocks (annotations only) left out."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        yield node
        checking = isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        todo.extend(node.orelse if checking else ast.iter_child_nodes(node))


def _has_code(path: Path) -> bool:
    """Whether the file holds more than a docstring (a package's one-line purpose changes no behaviour)."""
    body = _tree(path).body
    return not (len(body) <= 1 and all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body))


def _imported(path: Path) -> set[Path]:
    """The project files a file imports (anywhere in it but `if TYPE_CHECKING:`, with the packages on
    the way; a script's `import sibling`) and the sibling files it names
    (`Path(__file__).with_name("server.py")`)."""
    names: set[str] = set()
    files: set[Path] = set()
    for node in _runs(_tree(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            files.update(f for f in (path.with_name(f"{a.name}.py") for a in node.names) if f.exists())
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".py"):
            sibling = path.with_name(node.value) if "/" not in node.value else None
            files.update([sibling] if sibling is not None and sibling.exists() else [])
    for name in names:
        parts = name.split(".")
        files.update(f for f in (_module_file(".".join(parts[:i])) for i in range(1, len(parts) + 1)) if f)
    return files


# How a stage process starts (in a fork of the run's stage server or on its own), never what it
# computes: editing these must not re-run finished steps.
WHERE_A_STAGE_RUNS = ("components/stages/__init__.py", "components/stages/handover.py")


@lru_cache(maxsize=None)
def code_deps(module: str) -> tuple[str, ...]:
    """Every project file `module` imports, transitively, itself included (paths relative to CODE_ROOT),
    with the __init__.py of each package on the way that holds code. A module that a registry
    imports by name (a task, a params section's config) is not among them: flows/planning/plan.py adds the
    ones a run's stage plays and reads."""
    start = _module_file(module)
    if start is None:
        raise ValueError(f"module {module} is not a file of {CODE_ROOT / PACKAGE}")
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(_imported(path) - seen)
    files = (str(p.relative_to(CODE_ROOT)) for p in seen if _has_code(p))
    return tuple(sorted(f for f in files if f not in WHERE_A_STAGE_RUNS))


def uncovered(module: str, deps: list[str]) -> list[str]:
    """The project files `module` imports that `deps` (files or folders) do not cover."""

    def covered(path: str) -> bool:
        return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)

    return [path for path in code_deps(module) if not covered(path)]
