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


def test_the_tiny_profile_writes_its_demonstrations_once_and_only_for_its_own_file(project_dir, tiny_model_dir):
    from components.data.records import Trajectory, read_jsonl

    git_dvc_project(project_dir)
    plan = plan_run("sweet", "tiny")
    path = project_dir / plan.doc["rollouts"]["offline"]
    inputs.prepare_demonstrations(plan, str(tiny_model_dir))
    demos = list(read_jsonl(path, Trajectory))
    assert len(demos) == 2 * plan.doc["rollouts"]["limit"] and {t.score for t in demos} == {0.0, 1.0}
    written = path.stat().st_mtime_ns
    inputs.prepare_demonstrations(plan, str(tiny_model_dir))
    assert path.stat().st_mtime_ns == written  # present: left as it is
    other = plan_run("sweet", "tiny", ["rollouts.offline=world/mine.jsonl"])
    inputs.prepare_demonstrations(other, str(tiny_model_dir))
    assert not (project_dir / "world").exists()  # a user's own offline file is never made up
