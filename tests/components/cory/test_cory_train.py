"""The CORY component end to end on the tiny model: files written, the policy moves, a killed run
resumes at the right iteration without duplicated rows, another config starts afresh; each
algorithm trains at its own learning rate; `shaping: trl` runs and resumes with its state."""

import json

import pytest
import torch

from components.cory import state
from components.cory.gsm8k import GSM8KTask
from components.stages import cory as cory_train
from tests.cory_helpers import tiny_config, tiny_task


def run(cfg, task=None):
    """The stage on the parity-rewarded tiny GSM8K beside cfg.out_dir (unless another task is given)."""
    return cory_train.run(cfg, task or tiny_task(cfg.out_dir.parent))


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
    assert (
        row["tokens_generated"] > 0 and row["train/agent0/optimizer_steps"] == cfg.ppo_epochs
    )  # as many as a CORY agent
    assert row["train/agent0/grad_norm"] > 0 and row["train/agent0/value_loss"] > 0
    for key in ("pass_at_1", "reward", "kl", "objective", "sampled_reward", "sampled_kl", "entropy", "distinct_2"):
        assert f"eval/agent0/{key}" in row
    prompts = state.read_rows(out / state.PROMPTS)
    assert [(p["iteration"], p["prompt"]) for p in prompts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    final = [p["sampled_reward"] for p in prompts[2:]]
    assert sum(final) / 2 == pytest.approx(row["eval/agent0/sampled_reward"])
    assert all(isinstance(p["answer"], str) and isinstance(p["sample"], str) for p in prompts)  # readable answers
    base = json.loads((out / "eval_initial.json").read_text())
    assert base["sampled_kl"] == 0.0 and base["kl"] == 0.0  # agent0 before its first update is pi_0
    assert base["entropy"] > 0 and 0 < base["distinct_2"] <= 1 and base["tokens"] > base["response_tokens"] * 2
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
    prompts = [(p["iteration"], p["agent"]) for p in state.read_rows(cfg.out_dir / state.PROMPTS)]
    assert prompts == [(0, "agent0")] * 2 + [(k, a) for k in (1, 2, 3) for a in ("agent0", "agent1") for _ in range(2)]
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


def checkpoint_of(cfg):
    return torch.load(cfg.out_dir / state.CHECKPOINT, weights_only=False)


@pytest.mark.parametrize("algo, agents", [("cory", ["agent0", "agent1"]), ("ppo", ["agent0"])])
def test_trl_shaping_runs_one_iteration_with_its_state_in_the_checkpoint(tiny_model_dir, tmp_path, algo, agents):
    cfg = tiny_config(tiny_model_dir, tmp_path, algo=algo, shaping="trl", lr=1e-2, ppo_lr=2e-2)
    run(cfg)
    [row] = rows_of(cfg.out_dir)
    saved = checkpoint_of(cfg)["agents"]
    for agent in agents:
        assert row[f"train/{agent}/lr"] == cfg.learning_rate == (2e-2 if algo == "ppo" else 1e-2)
        assert row[f"train/{agent}/kl_coef"] == cfg.trl.init_kl_coef  # the first iteration uses the initial one
        assert row[f"train/{agent}/kl"] == pytest.approx(row[f"train/{agent}/kl_full"])  # the penalty's KL
        assert row[f"train/{agent}/grad_norm"] > 0
        shaping = saved[agent]["shaping"]
        assert shaping["kl_coef"] != cfg.trl.init_kl_coef  # updated from the iteration's KL (far below target 6)
        assert shaping["kl_coef"] == pytest.approx(0.4 * (1 - 0.2 * cfg.samples_per_agent / 10000))
        assert shaping["moments"]["count"] == pytest.approx(cfg.samples_per_agent)
        assert shaping["moments"]["mean"] == pytest.approx(row[f"train/{agent}/task_reward"])


def test_paper_shaping_penalises_the_sampled_kl_at_fixed_eta(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, algo="ppo")
    run(cfg)
    [row] = rows_of(cfg.out_dir)
    assert row["train/agent0/lr"] == cfg.ppo_lr and row["train/agent0/kl_coef"] == cfg.eta
    assert row["train/agent0/kl"] == row["train/agent0/kl_sampled"]
    assert row["train/agent0/score"] == row["train/agent0/task_reward"]  # raw rewards
    assert checkpoint_of(cfg)["agents"]["agent0"]["shaping"]["kl_coef"] == cfg.eta


def test_a_resumed_trl_run_continues_as_an_uninterrupted_one(tiny_model_dir, tmp_path):
    trl = {"horizon": 10.0, "target": 0.01}  # a coefficient that moves visibly every iteration
    straight = tiny_config(tiny_model_dir, tmp_path / "a", shaping="trl", trl=trl, iterations=2)
    run(straight)
    resumed = tiny_config(tiny_model_dir, tmp_path / "b", shaping="trl", trl=trl, iterations=1)
    run(resumed)  # a fresh process would load the checkpoint the same way: a new pool, then resume
    run(resumed.model_copy(update={"iterations": 2}))
    a, b = rows_of(straight.out_dir)[1], rows_of(resumed.out_dir)[1]
    for agent in ("agent0", "agent1"):
        assert a[f"train/{agent}/kl_coef"] != 0.4  # iteration 2 uses the coefficient iteration 1 left
    train_keys = [k for k in a if k.startswith("train/")]
    assert {k: b[k] for k in train_keys} == pytest.approx({k: a[k] for k in train_keys}, rel=1e-5, abs=1e-7)
    for agent in ("agent0", "agent1"):
        sa, sb = (checkpoint_of(c)["agents"][agent]["shaping"] for c in (straight, resumed))
        assert sb["kl_coef"] == pytest.approx(sa["kl_coef"]) and sb["moments"] == pytest.approx(sa["moments"])
        assert sa["kl_coef"] == pytest.approx(0.4 * 0.96 * 1.04)  # KL 0 (< target) then above it; n 2, horizon 10


class ZeroTask(GSM8KTask):
    """Every answer scores 0: the task gives PPO nothing to follow."""

    def rewards(self, rows, answers):
        return [0.0] * len(answers)


@pytest.mark.parametrize("algo", ["ppo", "cory"])
def test_equal_rewards_give_a_zero_update_and_the_no_signal_flag(tiny_model_dir, tmp_path, caplog, algo):
    cfg = tiny_config(tiny_model_dir, tmp_path, algo=algo)
    with caplog.at_level("WARNING"):
        metrics = run(cfg, tiny_task(tmp_path, ZeroTask)).metrics
    [row] = rows_of(cfg.out_dir)
    assert row["no_signal"] and metrics["no_signal_iterations"] == 1.0
    assert "no signal" in caplog.text and "--task reviews" in caplog.text
    adapters = torch.load(cfg.out_dir / state.CHECKPOINT, weights_only=False)["agents"]
    for agent, saved in adapters.items():
        assert row[f"train/{agent}/grad_norm"] == 0.0
        assert all(v.abs().sum() == 0 for k, v in saved["adapter"].items() if "lora_B" in k)  # B stays at zero
    assert row[f"eval/{agent}/kl"] == 0.0


def test_a_rewarded_iteration_is_not_flagged(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, algo="ppo")
    assert run(cfg).metrics["no_signal_iterations"] == 0.0 and not rows_of(cfg.out_dir)[0]["no_signal"]
