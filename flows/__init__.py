"""Orchestration: the CLI, run planning and the Prefect flows (wiring only)."""
