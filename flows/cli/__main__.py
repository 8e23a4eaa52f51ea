"""`python -m flows.cli`: the `sweetflow` command."""

from flows.cli import main

main()
