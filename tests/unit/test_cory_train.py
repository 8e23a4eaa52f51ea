"""The CORY component end to end on the tiny model: files written, the policy moves, a killed run
resumes at the right iteration without duplicated rows, another config starts afresh."""

import json

import pytest
import torch

from components.cory import rollout, state
from components.stages import cory as cory_train
from components.stages.cory import run
from tests.cory_helpers import parity_reward, tiny_config


@pytest.fixture(autouse=True)
def rewarded(monkeypatch):
    monkeypatch.setattr(rollout, "reward", parity_reward)


def rows_of(out_dir):
    return state.read_rows(out_dir / state.ITERATIONS)


def test_one_ppo_iteration_moves_the_policy_and_writes_the_files(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, algo="ppo", save_merged=True)
    result = run(cfg)
    out = cfg.out_dir
    for name in (
        "iterations.jsonl",
        "samples.jsonl",
        "metrics.json",
        "eval_initial.json",
        "checkpoint/state.pt",
        "adapters/agent0/adapter_config.json",
        "agents/agent0/config.json",
    ):
        assert (out / name).exists(), name
    [row] = rows_of(out)
    assert row["iteration"] == 1 and row["roles"] == {"policy": "agent0"}
    assert row["tokens_generated"] > 0 and row["train/agent0/optimizer_steps"] == cfg.ppo_epochs * 2
    assert row["train/agent0/grad_norm"] > 0 and row["train/agent0/value_loss"] > 0
    for key in ("pass_at_1", "reward", "kl", "kl_sampled", "objective"):
        assert f"eval/agent0/{key}" in row
    assert row["eval/agent0/kl"] > 0  # the agent moved away from pi_0
    lora_b = [
        v
        for k, v in torch.load(out / state.CHECKPOINT, weights_only=False)["agents"]["agent0"]["adapter"].items()
        if "lora_B" in k
    ]
    assert any(v.abs().sum() > 0 for v in lora_b)  # B starts at zero
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics == result.metrics and metrics["iterations"] == 1
    assert all(isinstance(v, float) for v in metrics.values())


def test_cory_rows_carry_both_agents_and_roles(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, iterations=2, exchange_every=1)
    run(cfg)
    rows = rows_of(cfg.out_dir)
    assert [r["roles"]["pioneer"] for r in rows] == ["agent0", "agent1"]
    assert [r["exchanged"] for r in rows] == [False, True]
    for agent in ("agent0", "agent1"):
        assert rows[-1][f"train/{agent}/optimizer_steps"] == cfg.ppo_epochs
    samples = state.read_rows(cfg.out_dir / state.SAMPLES)
    assert {s["role"] for s in samples} == {"pioneer", "observer"}


def test_killed_run_resumes_at_the_next_iteration_without_duplicate_rows(tiny_model_dir, tmp_path, monkeypatch):
    cfg = tiny_config(tiny_model_dir, tmp_path, iterations=3)
    save = state.save_checkpoint

    def crash_at_2(out_dir, pool, iteration, fingerprint):
        if iteration == 2:  # the row of iteration 2 is written, its checkpoint is not
            raise KeyboardInterrupt("killed")
        return save(out_dir, pool, iteration, fingerprint)

    monkeypatch.setattr(state, "save_checkpoint", crash_at_2)
    with pytest.raises(KeyboardInterrupt):
        run(cfg)
    crashed = rows_of(cfg.out_dir)
    assert [r["iteration"] for r in crashed] == [1, 2]
    monkeypatch.setattr(state, "save_checkpoint", save)
    ran = []
    real = cory_train.run_iteration
    monkeypatch.setattr(cory_train, "run_iteration", lambda *a: ran.append(a[-1]) or real(*a))
    run(cfg)
    rows = rows_of(cfg.out_dir)
    assert ran == [2, 3]
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[0] == crashed[0]
    assert rows[1]["questions"] == crashed[1]["questions"]  # the re-run iteration draws the same questions
    assert [s["iteration"] for s in state.read_rows(cfg.out_dir / state.SAMPLES)].count(2) == 2 * 2
    run(cfg)  # complete: nothing to do, nothing appended
    assert ran == [2, 3] and len(rows_of(cfg.out_dir)) == 3


def test_a_longer_run_extends_and_another_config_starts_afresh(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, iterations=1)
    run(cfg)
    first = rows_of(cfg.out_dir)
    run(cfg.model_copy(update={"iterations": 2}))
    assert [r["iteration"] for r in rows_of(cfg.out_dir)] == [1, 2] and rows_of(cfg.out_dir)[0] == first[0]
    run(cfg.model_copy(update={"lr": 5e-3}))
    assert [r["iteration"] for r in rows_of(cfg.out_dir)] == [1]
    assert torch.load(cfg.out_dir / state.CHECKPOINT, weights_only=False)["config"]["lr"] == 5e-3
