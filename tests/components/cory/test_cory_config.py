"""CORY's config: defaults load, contradictions are rejected at load time; roles follow T."""

import pytest
import yaml
from pydantic import ValidationError

from components.config.cory import CoryConfig, ScoreScaling, Shaping
from components.config.training import Algo
from components.cory.agents import roles_at
from components.cory.registry import prompt_task_sections
from components.stages.cli import stage_cli


def test_defaults_are_valid_and_paper_values_where_cheap():
    cfg = CoryConfig()
    assert cfg.algo == Algo.cory
    assert (cfg.eta, cfg.clip, cfg.gamma, cfg.lam, cfg.exchange_every) == (0.01, 0.2, 1.0, 0.95, 5)
    assert cfg.samples_per_agent == cfg.questions_per_iteration


def test_ppo_trains_its_one_agent_on_twice_the_answers_in_as_many_steps_as_a_cory_agent():
    ppo, cory = (CoryConfig(algo=a, questions_per_iteration=4, minibatch_size=2) for a in ("ppo", "cory"))
    assert (ppo.samples_per_agent, ppo.agent_minibatch_size) == (8, 4)
    assert (cory.samples_per_agent, cory.agent_minibatch_size) == (4, 2)
    for algo in ("ppo", "cory"):
        with pytest.raises(ValidationError, match="exceeds questions_per_iteration"):
            CoryConfig(algo=algo, questions_per_iteration=2, minibatch_size=4)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"questions_per_iteration": 4, "minibatch_size": 8}, "exceeds"),
        ({"questions_per_iteration": 6, "minibatch_size": 4}, "must divide"),
        ({"temperature": 0.0}, "greater than 0"),
        ({"algo": "grpo"}, "cory"),
        ({"engine": "openai"}, "auto"),
        ({"vllm_sync": "nccl"}, "inplace"),
        ({"clip": 1.5}, "less than 1"),
        ({"lam": 1.2}, "less than or equal to 1"),
        ({"lora": {"r": 0}}, "greater than or equal to 1"),
        ({"learning_rate": 1e-4}, "Extra inputs"),
        ({"ppo_lr": 0.0}, "greater than 0"),
        ({"shaping": "adaptive"}, "paper"),
        ({"trl": {"score_scaling": "whiten"}}, "none"),
        ({"trl": {"kl_target": 6}}, "Extra inputs"),
        ({"shaping": "trl", "questions_per_iteration": 1, "minibatch_size": 1}, "running std of one score"),
    ],
)
def test_contradictions_and_bad_values_are_rejected(values, message):
    with pytest.raises(ValidationError, match=message):
        CoryConfig(**values)


def test_stage_cli_validates_the_stage_sections_of_the_params_file(tmp_path, monkeypatch):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"task": {"name": "reviews"}, "cory": {"algo": "ppo", "iterations": 3}}))
    monkeypatch.setenv("SWEETFLOW_PARAMS", str(params))
    monkeypatch.setattr("sys.argv", ["cory"])
    sections = stage_cli("components.stages.cory", prompt_task_sections)[0]
    assert sections["cory"].iterations == 3 and set(sections) == {"cory", "task", "reviews"}
    params.write_text(yaml.safe_dump({"cory": {"minibatch_size": 64}}))  # task.name: colbench-backend -> gsm8k
    with pytest.raises(SystemExit, match="minibatch_size"):
        stage_cli("components.stages.cory", prompt_task_sections)
    params.write_text(yaml.safe_dump({"task": {"name": "gsm8k"}, "gsm8k": {"train_file": "a", "test_file": "a"}}))
    with pytest.raises(SystemExit, match="same file"):
        stage_cli("components.stages.cory", prompt_task_sections)


def test_fingerprint_ignores_only_the_iteration_count_places_and_the_other_algorithms_lr():
    a = CoryConfig(iterations=3, out_dir="runs/a")
    assert a.fingerprint() == CoryConfig(iterations=9, out_dir="runs/b").fingerprint()
    assert a.fingerprint() != CoryConfig(iterations=3, lr=1e-5).fingerprint()
    assert a.fingerprint() == CoryConfig(iterations=3, ppo_lr=1e-5).fingerprint()  # cory does not use ppo_lr
    ppo = CoryConfig(algo="ppo")
    assert ppo.fingerprint() != CoryConfig(algo="ppo", ppo_lr=1e-5).fingerprint()
    assert ppo.fingerprint() == CoryConfig(algo="ppo", lr=1e-5).fingerprint()
    assert a.fingerprint() != CoryConfig(iterations=3, shaping="trl").fingerprint()


def test_each_algorithm_trains_at_its_own_learning_rate():
    assert CoryConfig(lr=1e-4, ppo_lr=1e-5).learning_rate == 1e-4
    assert (
        CoryConfig(algo="ppo", questions_per_iteration=2, minibatch_size=2, lr=1e-4, ppo_lr=1e-5).learning_rate == 1e-5
    )


def test_paper_shaping_is_the_default_and_trl_carries_the_authors_values():
    cfg = CoryConfig()
    assert cfg.shaping == Shaping.paper
    assert (cfg.trl.init_kl_coef, cfg.trl.target, cfg.trl.horizon) == (0.4, 6.0, 10000.0)
    assert cfg.trl.score_scaling == ScoreScaling.norm


def test_roles_exchange_every_t_iterations():
    pioneers = [roles_at(i, Algo.cory, 2)["pioneer"] for i in range(1, 8)]
    assert pioneers == ["agent0", "agent0", "agent1", "agent1", "agent0", "agent0", "agent1"]
    for i in range(1, 8):
        roles = roles_at(i, Algo.cory, 2)
        assert {roles["pioneer"], roles["observer"]} == {"agent0", "agent1"}
    assert roles_at(7, Algo.ppo, 2) == {"policy": "agent0"}
