import numpy as np
import pytest

from components.config.sections import ConfigError, EpisodeSection, EvalConfig, load_section
from components.episodes.metrics import bootstrap_ci, per_seed, summarize
from tests.factories import make_trajectory


def write_params(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_overrides_win_and_none_keeps_the_file_value(tmp_path):
    path = write_params(tmp_path, "eval:\n  limit: 5\n  engine: hf\n")
    cfg = load_section(EvalConfig, "eval", {"limit": 3, "engine": None}, path=path)
    assert cfg.limit == 3 and cfg.engine == "hf"


@pytest.mark.parametrize(
    "text, field",
    [
        ("eval:\n  limit: 0\n", "eval.limit"),
        ("eval:\n  engine: tpu\n", "eval.engine"),
        ("eval:\n  seeds: [1, 1]\n", "seeds must be distinct"),
        ("eval:\n  simulator: retrieval\n  simulator_model: http://x\n", "simulator_model is only used"),
        ("eval:\n  limt: 3\n", "eval.limt"),
        ("episode:\n  max_tokens: 5000\n  max_model_len: 4096\n", "must be below max_model_len"),
    ],
)
def test_bad_params_are_rejected_with_the_field_named(tmp_path, text, field):
    section = text.split(":")[0]
    model = EvalConfig if section == "eval" else EpisodeSection
    with pytest.raises(ConfigError, match=field):
        load_section(model, section, path=write_params(tmp_path, text))


def test_repo_params_file_is_valid():
    assert load_section(EvalConfig, "eval").limit >= 1
    load_section(EpisodeSection, "episode")


def scored(task, seed, score):
    return make_trajectory(
        task, seed, score, task_id=str(task), answered=True, passed=int(score * 10), total=10, success=score == 1.0
    )


def test_summary_pools_seeds_per_task():
    trajs = [scored(0, 0, 1.0), scored(0, 1, 0.5), scored(1, 0, 0.0), scored(1, 1, 0.0)]
    m = summarize(trajs, 500, alias="tests_passed")
    assert m["n"] == 2 and m["episodes"] == 4
    assert m["success_rate"] == pytest.approx(0.25) and m["tests_passed"] == pytest.approx(0.375)
    assert m["mean_score"] == m["tests_passed"] and m["mean_score_ci_high"] == m["tests_passed_ci_high"]
    assert m["success_rate_ci_low"] <= m["success_rate"] <= m["success_rate_ci_high"]
    assert m["mean_score_ci_low"] <= m["mean_score"] <= m["mean_score_ci_high"]
    assert per_seed(trajs) == {
        0: {"success_rate": 0.5, "mean_score": 0.5},
        1: {"success_rate": 0.0, "mean_score": 0.25},
    }
    assert "tests_passed" not in summarize(trajs, 500)  # only a task with that alias keeps the old name


def test_summary_reports_each_task_group_apart():
    trajs = [scored(0, 0, 1.0), scored(1, 0, 0.0), scored(2, 0, 0.5)]
    m = summarize(trajs, 500, groups={0: "heldout", 1: "seen", 2: "seen"})
    assert m["n_heldout"] == 1 and m["mean_score_heldout"] == 1.0 and m["success_rate_heldout"] == 1.0
    assert m["n_seen"] == 2 and m["mean_score_seen"] == pytest.approx(0.25) and m["success_rate_seen"] == 0.0
    assert m["mean_score"] == pytest.approx(0.5)


def test_bootstrap_interval_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small = bootstrap_ci(rng.binomial(1, 0.3, 20), 2000)
    large = bootstrap_ci(rng.binomial(1, 0.3, 2000), 2000)
    assert small[0] < 0.3 < small[1] and large[0] < 0.3 < large[1]
    assert large[1] - large[0] < small[1] - small[0]
    assert bootstrap_ci([1.0], 100) == (1.0, 1.0)


def test_hub_source_uses_the_official_files(tmp_path):
    from components.config.sections import DataConfig
    from components.data.split import Split

    dvc = DataConfig()
    assert dvc.tasks_file(Split.train) == dvc.tasks_file(Split.eval) == dvc.backend_tasks
    hub = DataConfig(source="hub", hub_dir=tmp_path)
    assert hub.tasks_file(Split.train) == tmp_path / "backend_tasks" / "train.jsonl"
    assert hub.tasks_file(Split.eval) == tmp_path / "backend_tasks" / "test.jsonl"
    with pytest.raises(ConfigError, match="split 'all'"):
        hub.tasks_file(Split.all)
