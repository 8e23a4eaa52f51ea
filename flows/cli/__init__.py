"""The `sweetflow` command: its Typer app (app.py), the pipeline and step commands (commands.py), and those
that render pages or run services (render.py, services.py)."""


def main() -> None:
    """The console script (pyproject's `flows.cli:main`): the commands are imported only when it runs."""
    from flows.cli.commands import main as run

    run()
