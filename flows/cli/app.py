"""The `sweetflow` Typer app, its global options and the helpers every command module shares
(`setup`, `fail`). flows/cli/commands.py, flows/cli/render.py and flows/cli/services.py add their commands
to `app`; flows/cli/commands.py's `main` is the console script."""

from __future__ import annotations

import logging
import os
import signal

import typer

SERVICES = "UI, schedules and pages"  # the help panel of ui, serve and render, after the pipeline's commands
app = typer.Typer(
    help="sweetflow: SWEET-RL training pipeline for collaborative LLM agents (ColBench).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Data sets (DVC-tracked).", no_args_is_help=True)
model_app = typer.Typer(help="Models.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(model_app, name="model")


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def setup(env_only: bool = False) -> None:
    """Environment defaults and logging; SIGTERM unwinds like Ctrl-C, so the step's child process and
    Prefect's ephemeral API server are stopped instead of left running. `env_only`: the environment
    defaults alone (the app callback, before a command imports Prefect and MLflow, which read them).

    A quiet console unless --verbose ($SWEETFLOW_VERBOSE): libraries log at WARNING and above;
    Prefect's console handler shows warnings and errors only (its flow/task-run INFO lines, e.g.
    "Finished in state Completed()", still reach the Prefect API and UI); MLflow logs warnings only.
    The CLI's own messages go through typer.echo, a step's through flows.runtime.console (its log file
    gets all the rest)."""
    import sys

    from flows.runtime.console import is_verbose

    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    verbose = is_verbose()
    if not verbose:  # read by Prefect's logging.yml and MLflow when they configure logging at import
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    if env_only:
        return
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    level = logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    before = set(root.handlers)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root.setLevel(level)  # basicConfig leaves the level alone once Prefect has set up logging
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Prefect's API calls, one INFO line each
    # the console handler (Prefect's, set up when prefect was imported before this call, or
    # basicConfig's, which Prefect then leaves in place) also gets the records Prefect's own loggers
    # pass at INFO: keep it at WARNING
    console_level = os.environ.get("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "NOTSET").upper()
    prefect_console = sys.modules.get("prefect.logging.handlers")
    for handler in root.handlers:
        if handler not in before or (prefect_console and isinstance(handler, prefect_console.PrefectConsoleHandler)):
            handler.setLevel(console_level)
    if "mlflow" in sys.modules:
        logging.getLogger("mlflow").setLevel(os.environ.get("MLFLOW_LOGGING_LEVEL", "INFO").upper())


@app.callback()
def _global_options(
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="show everything on the console: each step's engine and library output "
        "(otherwise only in the step's log file, runs/.../logs/<stage>.log) and INFO logging",
    ),
) -> None:
    # runs before every command and its imports: the steps' children and _setup() read the env var,
    # Prefect and MLflow read the logging defaults when imported
    from flows.runtime.console import VERBOSE_ENV

    if verbose:
        os.environ[VERBOSE_ENV] = "1"
        logging.getLogger().setLevel(logging.INFO)
    setup(env_only=True)


def fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)
