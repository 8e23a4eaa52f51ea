"""The stage catalogue is the one declaration of each stage: the root dvc.yaml is generated from it,
every stage's code deps cover what its module imports, and components/ stays free of orchestration."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.stages.catalogue import CODE_ROOT, STAGES, WHERE_A_STAGE_RUNS, code_deps, training_stages, uncovered
from flows.planning.plan import dvc_stage, root_dvc_yaml


def root_stages() -> dict:
    return yaml.safe_load((CODE_ROOT / "dvc.yaml").read_text())["stages"]


def test_the_root_dvc_yaml_is_the_generated_one():
    assert (CODE_ROOT / "dvc.yaml").read_text() == root_dvc_yaml(), (
        "dvc.yaml differs from the stage catalogue: regenerate it with `python -m flows.planning.plan`"
    )
    assert list(root_stages()) == list(STAGES)


def test_every_stage_declares_every_project_file_its_module_imports():
    for name, spec in root_stages().items():
        assert uncovered(STAGES[name].module, spec["deps"]) == [], name


def test_a_planted_omission_in_a_stage_deps_is_caught():
    deps = [d for d in root_stages()["actor"]["deps"] if d != "components/lm/logprobs.py"]
    assert uncovered("components.stages.actor", deps) == ["components/lm/logprobs.py"]
    folder_deps = [d for d in deps if not d.startswith("components/lm/")] + ["components/lm"]
    assert uncovered("components.stages.actor", folder_deps) == []  # a folder covers its files


def test_code_deps_follow_imports_transitively_and_scripts_started_by_file_name():
    actor = code_deps("components.stages.actor")
    assert "components/lm/logprobs.py" in actor  # imported by lm/forward.py, not by the actor itself
    assert "components/training/loop.py" in actor and "components/scoring/sandbox.py" not in actor
    evaluate = dvc_stage(STAGES["eval_zero_shot"], "colbench-backend")["deps"]  # through the task it plays
    assert {"components/scoring/server.py", "components/scoring/jail.py"} <= set(evaluate)  # the fork-server


def test_a_stage_depends_on_the_task_it_plays_and_the_sections_it_reads_not_on_the_others():
    critic = dvc_stage(STAGES["critic"], "elicitation")["deps"]
    assert "components/tasks/elicitation/task.py" in critic and "components/tasks/elicitation/config.py" in critic
    others = (
        "components/tasks/colbench_frontend/render/",
        "components/scoring/",
        "components/tasks/colbench",
        "components/config/cory",
    )
    assert [d for d in critic if d.startswith(others)] == []
    assert len([d for d in critic if d.startswith("components/")]) <= 29  # 58 before the registries were lazy
    frontend = dvc_stage(STAGES["eval_actor"], "colbench-frontend")["deps"]
    assert (
        "components/tasks/colbench_frontend/render/browser.py" in frontend
        and "components/tasks/elicitation/task.py" not in frontend
    )


def test_package_inits_without_code_and_type_checking_imports_are_no_deps():
    deps = code_deps("components.stages.critic")
    assert "components/training/loop.py" in deps and "components/training/__init__.py" not in deps
    assert "components/data/split.py" in deps and "components/data/tasks.py" not in deps  # split's annotation


LOADED = """
import sys
from components.config.schema import SECTIONS
from components.tasks.registry import task_class
import {module}
task_class({task!r})
for name in {sections!r}:
    SECTIONS[name]
print("\\n".join(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith("components.") and m.__file__)))
"""


@pytest.mark.parametrize("stage, task", [("critic", "elicitation"), ("eval_actor", "colbench-frontend")])
def test_what_a_stage_loads_when_it_starts_is_among_its_deps(stage, task):
    spec = dvc_stage(STAGES[stage], task)
    script = LOADED.format(module=STAGES[stage].module, task=task, sections=spec["params"])
    out = subprocess.run([sys.executable, "-c", script], cwd=CODE_ROOT, capture_output=True, text=True, check=True)
    loaded = {str(Path(f).relative_to(CODE_ROOT)) for f in out.stdout.split()}
    assert loaded and {f for f in loaded if f not in spec["deps"]} <= {
        f for f in loaded if f.endswith("__init__.py") or f in WHERE_A_STAGE_RUNS
    }  # a package's docstring-only __init__ runs no code; where a stage runs is not what it computes
    others = [f for f in loaded if f.startswith("components/tasks/colbench") and task not in f.replace("_", "-")]
    assert others == [] and ("components/tasks/colbench_frontend/task.py" in loaded) == (task == "colbench-frontend")


def test_each_algorithm_runs_its_training_stages_in_order():
    assert training_stages("sweet") == (
        "train_pairs",
        "critic",
        "candidates",
        "ranking",
        "turn_pairs",
        "critic_quality",
        "actor",
    )
    assert training_stages("mtdpo") == ("train_pairs", "actor") and training_stages("rft") == ("actor",)
    assert "${train.out_dir}/pairs/pairs.jsonl" in dvc_stage(STAGES["actor"], "colbench-backend", "mtdpo")["deps"]


def imported_names(path) -> list[str]:
    """Every module name a file imports, anywhere in it (`from a import b` gives a and a.b)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_components_never_import_flows_or_prefect():
    offenders = [
        f"{path.relative_to(CODE_ROOT)}: {n}"
        for path in sorted((CODE_ROOT / "components").rglob("*.py"))
        for n in imported_names(path)
        if n.split(".")[0] in ("flows", "prefect", "prefect_ray")
    ]
    assert offenders == []


def test_config_imports_nothing_above_it():
    """config/ is the bottom layer: it imports itself and the train/eval split (a stdlib-only module),
    never a stage, task, episode, model or tracking module."""
    offenders = [
        f"{path.relative_to(CODE_ROOT)}: {n}"
        for path in sorted((CODE_ROOT / "components/config").rglob("*.py"))
        for n in imported_names(path)
        if n.startswith("components.") and not n.startswith(("components.config", "components.data.split"))
    ]
    assert offenders == []


def import_cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    """The modules on a cycle of the graph `modules` (module -> the modules it imports), one list per
    strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in modules[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in modules:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycles_in_components_or_flows():
    files = {
        ".".join(path.relative_to(CODE_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for package in ("components", "flows")
        for path in (CODE_ROOT / package).rglob("*.py")
    }
    graph = {m: {n for n in imported_names(path) if n in files and n != m} for m, path in files.items()}
    assert import_cycles(graph) == []
    planted = graph | {"components.data.records": graph["components.data.records"] | {"components.episodes.play"}}
    (cycle,) = import_cycles(planted)  # records <- play (through its imports) <- records
    assert {"components.data.records", "components.episodes.play"} <= set(cycle)


def test_a_stage_run_logs_the_sections_of_the_task_it_played():
    from flows.tracking.tracker import stage_sections

    colbench, elicitation = {"task": {"name": "colbench-backend"}}, {"task": {"name": "elicitation"}}
    for stage in ("eval_zero_shot", "rollouts", "critic", "eval_actor"):
        assert {"task", "data"} <= set(stage_sections(stage, colbench))  # data.simulator_prompt among them
        assert {"task", "elicitation"} <= set(stage_sections(stage, elicitation))
    assert stage_sections("actor", colbench) == STAGES["actor"].sections


def test_a_stage_the_run_settings_make_unnecessary_is_not_run_and_not_a_dep():
    untrained = {"ranking": {"critic": "untrained"}, "train": {"candidates": "other/candidates.jsonl"}}
    assert training_stages("sweet", untrained) == ("train_pairs", "ranking", "turn_pairs", "critic_quality", "actor")
    assert training_stages("sweet", {"ranking": {"critic": "trained"}, "train": {"candidates": None}}) == (
        training_stages("sweet")
    )
    deps = dvc_stage(STAGES["ranking"], "elicitation", "sweet", untrained)["deps"]
    assert "${train.out_dir}/critic/model" not in deps and "${train.out_dir}/candidates/candidates.jsonl" not in deps
    assert (
        "${critic.model}" in deps
        and "${train.out_dir}/critic/model" in dvc_stage(STAGES["ranking"], "elicitation")["deps"]
    )


def test_an_algorithm_without_a_reference_model_caches_no_reference_pass():
    actor = STAGES["actor"]
    assert any(o.reference for o in actor.outs_for("sweet")) and any(o.reference for o in actor.outs_for("mtdpo"))
    assert not any(o.reference for o in actor.outs_for("rft")) and len(actor.outs_for("rft")) == len(actor.outs) - 1


def test_no_test_module_imports_another():
    """What tests share lives in tests/*.py helpers or a conftest, never in a test module."""
    offenders = [
        f"{path.relative_to(CODE_ROOT)}: {n}"
        for path in sorted((CODE_ROOT / "tests").rglob("*.py"))
        for n in imported_names(path)
        if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert offenders == []
