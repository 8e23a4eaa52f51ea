"""`--baselines` names (flows/planning/baselines.py): the SWEET-RL ablations' parameters, stages and deps, and
the refusal of a baseline that would repeat the run."""

from __future__ import annotations

import pytest
import yaml

from components.config.sections import ConfigError
from flows.planning import plan as pp
from flows.planning.baselines import BASELINES

SWEET_STAGES = ["train_pairs", "critic", "ranking", "turn_pairs", "critic_quality", "actor", "eval_actor"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((pp.CODE_ROOT / "params.yaml").read_text())
    return tmp_path


def _stages(plan: pp.RunPlan, name: str) -> dict:
    return yaml.safe_load(pp.write_baseline(plan, 1, "m", name).read_text())["stages"]


def test_sweet_untrained_ranks_with_the_base_model_on_the_runs_candidates_without_training_a_critic(project):
    plan = pp.plan_run("sweet", "smoke", ["ranking.baseline=actor"])
    pp.check_baselines(plan, ["sweet-untrained"])
    it = plan.run_dir / "iter-1"
    doc = pp.baseline_doc(plan, 1, "m", "sweet-untrained")
    assert doc["ranking"]["critic"] == "untrained" and doc["actor"]["algo"] == "sweet"
    assert doc["train"]["candidates"] == str(it / "train" / "candidates" / "candidates.jsonl")
    stages = _stages(plan, "sweet-untrained")
    assert list(stages) == [s for s in SWEET_STAGES if s != "critic"]  # no critic training, no sampling
    for name in ("ranking", "critic_quality"):
        assert not any("critic/model" in d for d in stages[name]["deps"]), name
    assert str(it / "train" / "candidates" / "candidates.jsonl") in stages["ranking"]["deps"]
    assert not any(str(it / "sweet-untrained" / "candidates") in d for d in stages["ranking"]["deps"])
    saved = yaml.safe_load((project / it / "sweet-untrained" / "params.yaml").read_text())
    assert saved["ranking"]["critic"] == "untrained" and saved["eval"]["out_dir"] == str(it / "sweet-untrained/eval")


def test_sweet_untrained_under_the_reference_baseline_is_refused_every_score_would_be_0(project):
    plan = pp.plan_run("sweet", "smoke")  # smoke ranks against the reference
    with pytest.raises(ConfigError, match="(?s)sweet-untrained .*every candidate 0.*ranking.baseline=actor"):
        pp.check_baselines(plan, ["sweet-untrained"])
    with pytest.raises(ConfigError, match="every candidate 0"):
        pp.plan_run("sweet", "smoke", ["ranking.critic=untrained"])


def test_sweet_noc_trains_its_own_critic_without_c_on_the_runs_candidates(project):
    plan = pp.plan_run("sweet", "smoke")
    doc = pp.baseline_doc(plan, 1, "m", "sweet-noc")
    assert doc["critic"]["information"] == "none" and plan.doc["critic"]["information"] == "full"
    stages = _stages(plan, "sweet-noc")
    assert list(stages) == SWEET_STAGES
    folder = plan.run_dir / "iter-1" / "sweet-noc"
    assert f"{folder}/critic/model" in stages["ranking"]["deps"]
    assert stages["critic"]["outs"][0] == f"{folder}/critic/model"


def test_a_sweet_ablation_of_a_run_that_sampled_no_candidates_samples_its_own(project):
    plan = pp.plan_run("mtdpo", "smoke")
    pp.check_baselines(plan, ["sweet-noc", "rft"])
    assert pp.baseline_doc(plan, 1, "m", "sweet-noc")["train"]["candidates"] is None
    assert list(_stages(plan, "sweet-noc")) == ["train_pairs", "critic", "candidates", *SWEET_STAGES[2:]]
    assert list(_stages(plan, "rft")) == ["actor", "eval_actor"]  # other algorithms unchanged


def test_the_ranking_baseline_the_run_already_has_is_refused(project):
    reference = pp.plan_run("sweet", "smoke")
    pp.check_baselines(reference, ["sweet-actor", "mtdpo"])
    with pytest.raises(ConfigError, match="sweet-reference would repeat the run itself .*ranking.baseline=reference"):
        pp.check_baselines(reference, ["sweet-reference"])
    actor = pp.plan_run("sweet", "smoke", ["ranking.baseline=actor"])
    pp.check_baselines(actor, ["sweet-reference"])
    with pytest.raises(ConfigError, match="baseline\\(s\\) sweet-actor"):
        pp.check_baselines(actor, ["sweet-actor"])
    assert pp.baseline_doc(actor, 1, "m", "sweet-reference")["ranking"]["baseline"] == "reference"
    with pytest.raises(ConfigError, match="sweet-reference would repeat baseline sweet"):
        pp.check_baselines(pp.plan_run("mtdpo", "smoke"), ["sweet", "sweet-reference"])


def test_a_run_with_an_untrained_critic_trains_none(project):
    plan = pp.plan_run("sweet", "smoke", ["ranking.critic=untrained", "ranking.baseline=actor"])
    stages = yaml.safe_load(pp.write_iteration(plan, 1, "m").read_text())["stages"]
    assert "critic" not in stages and "candidates" in stages
    assert not any("critic/model" in d for d in stages["ranking"]["deps"])


def test_every_name_is_documented_in_the_pipeline_parameters():
    doc = pp.PipelineParams.model_fields["baselines"].description
    assert all(name in doc for name in BASELINES)
    assert {c.algo for c in BASELINES.values()} == {"sweet", "mtdpo", "rft"}
    assert pp.PipelineParams(baselines="sweet-untrained,sweet-noc").baselines == ["sweet-untrained", "sweet-noc"]
