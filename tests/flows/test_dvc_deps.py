"""DVC re-runs a stage when a file its module imports changes, and only then: the actor stage of the
generated root dvc.yaml, in a git + DVC project holding a copy of the code, with its command
replaced by one that writes the declared outputs (the deps under test are the catalogue's)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.stages.catalogue import CODE_ROOT, STAGES
from flows.planning.plan import dvc_stage, interpolate
from tests.conftest import git_dvc_init

pytestmark = pytest.mark.integration
DOC = {"train": {"out_dir": "train", "model": "base", "trajectories": "rollouts"}}


def _repro(project: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "dvc", "repro", "actor"], cwd=project, capture_output=True, text=True, check=True
    ).stdout
    return "didn't change, skipping" not in out


def test_editing_a_file_the_actor_imports_reruns_the_actor_and_other_edits_do_not(project_dir):
    shutil.copytree(CODE_ROOT / "components", project_dir / "components", ignore=shutil.ignore_patterns("__pycache__"))
    git_dvc_init(project_dir)
    spec = interpolate(dvc_stage(STAGES["actor"], "colbench-backend", "sweet"), DOC)
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in spec["outs"]]
    metrics = next(iter(spec["metrics"][0]))
    script = (
        "import pathlib,sys\nfor p in sys.argv[1:]: pathlib.Path(p).parent.mkdir(parents=True, exist_ok=True)"
        "\nfor p in sys.argv[1:]: pathlib.Path(p).mkdir(exist_ok=True) if p.endswith(('model', 'checkpoints')) "
        "else pathlib.Path(p).write_text('{}')\n"
    )
    (project_dir / "make_outs.py").write_text(script)
    spec["cmd"] = f"{sys.executable} make_outs.py {' '.join(outs + [metrics])}"
    del spec["params"]
    (project_dir / "base").mkdir()
    (project_dir / "base/config.json").write_text("{}")
    (project_dir / "train/ranking").mkdir(parents=True)
    (project_dir / "train/ranking/turn_pairs.jsonl").write_text("")
    (project_dir / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"actor": spec}}))

    assert _repro(project_dir)  # first run
    assert not _repro(project_dir)  # nothing changed: skipped
    with open(project_dir / "components/lm/logprobs.py", "a") as f:  # imported by lm/forward.py
        f.write("\n# edited\n")
    assert _repro(project_dir)  # a transitive import changed: the actor runs again
    with open(project_dir / "components/scoring/jail.py", "a") as f:  # the actor never imports it
        f.write("\n# edited\n")
    assert not _repro(project_dir)
