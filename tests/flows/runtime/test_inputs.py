"""A run's inputs (flows/runtime/inputs.py): the base model prepared when missing."""

from __future__ import annotations

from components.data.model_prepare import is_complete
from flows.planning.plan import plan_run
from flows.runtime import inputs
from tests.conftest import git_dvc_project


def test_the_tiny_profile_makes_the_tiny_model_on_the_default_one(project_dir, prepared_model_dir):
    git_dvc_project(project_dir)
    (project_dir / "models").mkdir()
    (project_dir / "models" / prepared_model_dir.name).symlink_to(prepared_model_dir)
    plan = plan_run("sweet", "tiny")
    assert inputs.prepare_model(plan) == "models/tiny-llama"
    assert is_complete(project_dir / "models" / "tiny-llama")
