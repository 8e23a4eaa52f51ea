"""The pipeline's per-iteration parameters and generated dvc.yaml (flows.planning.plan)."""

from __future__ import annotations

import pytest
import yaml

from components.config.sections import ConfigError
from components.stages.catalogue import STAGES, training_stages
from flows.planning import plan as pp


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((pp.CODE_ROOT / "params.yaml").read_text())
    return pp.plan_run("sweet", "smoke", ["rollouts.per_task=3"], task="colbench-backend")


def test_the_run_folder_names_the_run_and_hashes_its_parameters(plan, tmp_path):
    assert plan.run_dir.parent == pp.RUNS_ROOT and plan.run_dir.name.startswith("sweet-colbench-backend-smoke-")
    assert pp.plan_run("sweet", "smoke", ["rollouts.per_task=3", "task.name=colbench-backend"]).run_dir == plan.run_dir
    assert pp.plan_run("sweet", "smoke", ["rollouts.per_task=4"], task="colbench-backend").run_dir != plan.run_dir
    elicitation = pp.plan_run("sweet", "smoke", ["rollouts.per_task=3"], task="elicitation")
    assert elicitation.run_dir.name.startswith("sweet-elicitation-smoke-") and "data" not in elicitation.doc
    assert "elicitation" not in plan.doc  # a run holds only the sections of the task it plays
    with pytest.raises(ConfigError, match="unknown task 'chess'"):
        pp.plan_run("sweet", "smoke", task="chess")
    with pytest.raises(
        ConfigError, match="algo cory plays a single-turn task .*not the collaborative task elicitation"
    ):
        pp.plan_run("cory", "smoke", task="elicitation")
    with pytest.raises(ConfigError, match="task reviews is a single-turn task, for --algo cory or ppo"):
        pp.plan_run("sweet", "smoke", task="reviews")
    assert pp.plan_run("mtdpo", "smoke", ["rollouts.per_task=3"]).doc["actor"]["algo"] == "mtdpo"
    with pytest.raises(ConfigError, match="unknown algo 'ppo2'"):
        pp.plan_run("ppo2")


def test_where_the_steps_run_is_kept_in_the_run_but_not_in_its_folder_name(plan):
    on_ray = pp.plan_run("sweet", "smoke", ["rollouts.per_task=3", "cluster.backend=ray"], task="colbench-backend")
    assert on_ray.run_dir == plan.run_dir  # moving a run to Ray resumes it
    assert on_ray.doc["cluster"]["backend"] == "ray" and plan.doc["cluster"]["backend"] == "local"
    assert "cluster" not in pp.dvc_stage(STAGES["rollouts"], "elicitation")["params"]


def test_how_many_dialogues_are_logged_is_kept_in_the_run_but_not_in_its_folder_name(plan):
    assert set(pp.LOGGING_ONLY) == {
        f"{s}.{k}" for s in ("eval", "rollouts") for k in ("sample_dialogues", "trace_dialogues")
    }
    fewer = ["rollouts.per_task=3", "eval.trace_dialogues=0", "rollouts.sample_dialogues=1"]
    logged_less = pp.plan_run("sweet", "smoke", fewer, task="colbench-backend")
    assert logged_less.run_dir == plan.run_dir
    assert logged_less.doc["eval"]["trace_dialogues"] == 0 and plan.doc["eval"]["trace_dialogues"] == 2
    assert pp.plan_run("sweet", "smoke", [*fewer, "eval.limit=1"], task="colbench-backend").run_dir != plan.run_dir


def test_iteration_k_starts_from_the_last_actor_with_its_own_folders_and_seeds(plan):
    base = plan.doc["train"]["model"]
    zero, first, second = (
        pp.iteration_doc(plan, k, start) for k, start in [(0, base), (1, base), (2, str(plan.trained_actor(1)))]
    )
    assert zero["eval"]["model"] == base and zero["eval"]["out_dir"] == str(plan.run_dir / "iter-0" / "eval")
    assert first["rollouts"]["model"] == first["train"]["model"] == base
    assert second["rollouts"]["model"] == second["train"]["model"] == str(plan.run_dir / "iter-1/train/actor/model")
    assert second["train"]["out_dir"] == str(plan.run_dir / "iter-2" / "train")
    assert second["eval"]["model"] == str(plan.trained_actor(2))
    assert [d["rollouts"]["seed"] for d in (first, second)] == [0, 1]
    assert [d["eval"]["seeds"] for d in (zero, first, second)] == [[0]] * 3  # compared on the same episodes
    assert plan.doc["rollouts"]["out_dir"] == "runs/rollouts"  # the plan itself is not modified


def test_generated_dvc_yaml_fills_paths_runs_from_the_root_and_tracks_the_iteration_params(plan, tmp_path):
    path = pp.write_iteration(plan, 1, plan.doc["train"]["model"])
    stages = yaml.safe_load(path.read_text())["stages"]
    assert list(stages) == ["rollouts", *training_stages(plan.algo.value), "eval_actor"]
    it = plan.run_dir / "iter-1"
    critic = stages["critic"]
    assert critic["wdir"] == "../../../.."
    assert critic["cmd"] == f"SWEETFLOW_PARAMS={it}/params.yaml python -m components.stages.critic"
    assert critic["params"] == [{f"{it}/params.yaml": ["critic", "train", "task", "data"]}]
    assert f"{it}/train/pairs/pairs.jsonl" in critic["deps"]
    assert str(pp.CODE_ROOT / "components/stages/critic.py") in critic["deps"]  # code outside this project: absolute
    assert "${" not in path.read_text()
    assert f"{it}/train/ranking/turn_pairs.jsonl" in stages["actor"]["deps"]
    saved = yaml.safe_load((tmp_path / it / "params.yaml").read_text())
    assert saved["train"]["out_dir"] == str(it / "train")

    mtime = path.stat().st_mtime_ns
    assert pp.write_iteration(plan, 1, plan.doc["train"]["model"]) == path and path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    "algo, stages, actor_input",
    [
        ("mtdpo", ["rollouts", "train_pairs", "actor", "eval_actor"], "train/pairs/pairs.jsonl"),
        ("rft", ["rollouts", "actor", "eval_actor"], "rollouts/trajectories.jsonl"),
    ],
)
def test_baselines_run_their_own_steps_and_train_on_their_own_input(plan, algo, stages, actor_input):
    other = pp.plan_run(algo, "smoke", ["rollouts.per_task=3"])
    generated = yaml.safe_load(pp.write_iteration(other, 1, "m").read_text())["stages"]
    assert list(generated) == stages
    deps = generated["actor"]["deps"]
    assert str(other.run_dir / "iter-1" / actor_input) in deps and not any("turn_pairs" in d for d in deps)


def test_offline_rollouts_feed_the_first_iteration_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((pp.CODE_ROOT / "params.yaml").read_text())
    plan = pp.plan_run("sweet", "smoke", ["rollouts.offline=old/trajectories.jsonl"])
    first = yaml.safe_load(pp.write_iteration(plan, 1, "m").read_text())["stages"]["rollouts"]
    assert "old/trajectories.jsonl" in first["deps"]
    assert pp.iteration_doc(plan, 2, "m")["rollouts"]["offline"] is None


def test_a_catalogue_variable_the_parameters_lack_is_a_clear_error(plan, monkeypatch):
    import dataclasses

    broken = dataclasses.replace(STAGES["eval_zero_shot"], args=("--x", "${eval.nope}"))
    monkeypatch.setitem(STAGES, "eval_zero_shot", broken)
    with pytest.raises(ConfigError, match=r"\$\{eval.nope\}"):
        pp.write_iteration(plan, 0, "m")


@pytest.fixture
def cory_plan(plan):
    return pp.plan_run("cory", "smoke", ["cory.lr=0.001"])


def test_a_cory_run_holds_only_its_sections_and_one_stage_that_iterates_itself(cory_plan):
    assert cory_plan.run_dir.name.startswith("cory-gsm8k-smoke-") and cory_plan.single_turn
    assert sorted(cory_plan.doc) == ["cluster", "cory", "gsm8k", "model", "task"]
    assert (
        cory_plan.doc["cory"]["algo"] == "cory" and cory_plan.task == "gsm8k"
    )  # the smoke profile's task is elicitation
    assert cory_plan.iterations(7) == [1] and cory_plan.stages(1) == ("cory",)
    assert cory_plan.trained_actor(1) == cory_plan.run_dir / "iter-1" / "cory" / "adapters"
    assert pp.plan_run("ppo", "smoke").doc["cory"]["algo"] == "ppo"
    assert pp.plan_run("sweet", "smoke").iterations(2) == [0, 1, 2] and "cory" not in pp.plan_run("sweet").doc


def test_a_longer_cory_run_keeps_its_folder_and_other_parameters_do_not(cory_plan):
    longer = pp.plan_run("cory", "smoke", ["cory.lr=0.001", "cory.iterations=9"])
    assert longer.run_dir == cory_plan.run_dir and longer.doc["cory"]["iterations"] == 9
    assert pp.plan_run("cory", "smoke", ["cory.lr=0.002"]).run_dir != cory_plan.run_dir
    assert pp.plan_run("ppo", "smoke", ["cory.lr=0.001"]).run_dir != cory_plan.run_dir


def test_an_override_of_a_section_the_algorithm_does_not_read_is_an_error(plan):
    with pytest.raises(ConfigError, match="critic.optim.lr=1 do not apply to algo cory"):
        pp.plan_run("cory", "smoke", ["critic.optim.lr=1"])
    with pytest.raises(ConfigError, match="cory.lr=0.1 do not apply to algo sweet"):
        pp.plan_run("sweet", "smoke", ["cory.lr=0.1"])


def test_the_cory_stage_writes_under_its_iteration_and_depends_on_the_start_model(cory_plan, tmp_path):
    model = tmp_path / "base-model"
    model.mkdir()
    stages = yaml.safe_load(pp.write_iteration(cory_plan, 1, str(model)).read_text())["stages"]
    assert list(stages) == ["cory"]
    it = cory_plan.run_dir / "iter-1"
    cory = stages["cory"]
    assert cory["cmd"] == f"SWEETFLOW_PARAMS={it}/params.yaml python -m components.stages.cory"
    assert cory["params"] == [{f"{it}/params.yaml": ["cory", "task", "gsm8k"]}]
    assert str(model) in cory["deps"] and "data/gsm8k/train.jsonl" in cory["deps"]
    assert f"{it}/cory/adapters" in cory["outs"] and {f"{it}/cory/checkpoint": {"persist": True}} in cory["outs"]
    saved = yaml.safe_load((tmp_path / it / "params.yaml").read_text())
    assert saved["cory"]["out_dir"] == str(it / "cory") and saved["cory"]["model"] == str(model)


def test_a_reviews_run_generates_its_openers_before_the_cory_stage_reads_them(tmp_path):
    plan = pp.plan_run("ppo", "smoke", task="reviews")
    assert plan.run_dir.name.startswith("ppo-reviews-smoke-") and plan.stages(1) == ("reviews_openers", "cory")
    assert sorted(plan.doc) == ["cluster", "cory", "model", "reviews", "task"]
    stages = yaml.safe_load((tmp_path / pp.write_iteration(plan, 1, "models/x", project=tmp_path)).read_text())[
        "stages"
    ]
    assert stages["reviews_openers"]["outs"] == ["data/reviews/openers.jsonl"]
    assert "data/reviews/openers.jsonl" in stages["cory"]["deps"]
    assert stages["cory"]["params"] == [{f"{plan.run_dir}/iter-1/params.yaml": ["cory", "task", "reviews"]}]
    with pytest.raises(ConfigError, match="reviews.reward=valence do not apply to algo ppo"):
        pp.plan_run("ppo", "smoke", ["reviews.reward=valence"])  # the run plays gsm8k


def test_baselines_train_on_the_same_rollouts_in_folders_of_their_own(plan):
    base = plan.doc["train"]["model"]
    doc = pp.baseline_doc(plan, 1, base, "mtdpo")
    it = plan.run_dir / "iter-1"
    assert doc["train"]["trajectories"] == str(it / "rollouts") and doc["actor"]["algo"] == "mtdpo"
    assert doc["train"]["out_dir"] == str(it / "mtdpo") and doc["eval"]["out_dir"] == str(it / "mtdpo" / "eval")
    assert doc["eval"]["seeds"] == pp.iteration_doc(plan, 1, base)["eval"]["seeds"]  # the same eval episodes
    stages = yaml.safe_load(pp.write_baseline(plan, 1, base, "mtdpo").read_text())["stages"]
    assert list(stages) == ["train_pairs", "actor", "eval_actor"]
    assert f"{it}/rollouts/trajectories.jsonl" in stages["train_pairs"]["deps"]
    assert pp.PipelineParams(baselines="mtdpo, rft").baselines == ["mtdpo", "rft"]
    assert pp.PipelineParams(baselines=["mtdpo,rft"]).baselines == ["mtdpo", "rft"]
    pp.check_baselines(plan, ["mtdpo", "rft"])
    with pytest.raises(ConfigError, match="baseline\\(s\\) sweet, dpo"):
        pp.check_baselines(plan, ["sweet", "dpo"])
    with pytest.raises(ConfigError, match="not to cory"):
        pp.check_baselines(pp.plan_run("cory", "smoke"), ["rft"])


def test_a_runs_root_outside_the_project_is_refused_before_any_step(tmp_path):
    """DVC 3 refuses outputs outside its repository, and said so only once the first step had run
    (a served run given runs_root=/tmp/...); the plan now refuses it up front."""
    from flows.pipeline_flow import resolve

    outside = tmp_path / "elsewhere"  # the tests run in the checkout; tmp_path lies outside it
    with pytest.raises(ConfigError, match=r"runs_root .*elsewhere lies outside the project"):
        resolve(pp.PipelineParams(runs_root=str(outside)))
    assert resolve(pp.PipelineParams(runs_root="runs")).run_dir.parent == pp.Path("runs")
