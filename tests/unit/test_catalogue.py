"""The stage catalogue is the one declaration of each stage: the root dvc.yaml is generated from it,
every stage's code deps cover what its module imports, and components/ stays free of orchestration."""

from __future__ import annotations

import ast

import yaml

from components.stages.catalogue import CODE_ROOT, STAGES, code_deps, training_stages, uncovered
from flows.plan import dvc_stage, root_dvc_yaml


def root_stages() -> dict:
    return yaml.safe_load((CODE_ROOT / "dvc.yaml").read_text())["stages"]


def test_the_root_dvc_yaml_is_the_generated_one():
    assert (CODE_ROOT / "dvc.yaml").read_text() == root_dvc_yaml(), (
        "dvc.yaml differs from the stage catalogue: regenerate it with `python -m flows.plan`"
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
    evaluate = code_deps("components.stages.evaluate")
    assert {"components/scoring/server.py", "components/scoring/jail.py"} <= set(evaluate)  # the fork-server


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
    from flows.tracking import stage_sections

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
