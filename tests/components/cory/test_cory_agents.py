"""CORY's agents on the tiny model: the reference stays frozen, role exchange keeps every agent's
parameters and optimizer state, checkpoints round-trip (shaping state included), merged exports
equal the adapter."""

import pytest
import torch

from components.cory.agents import AgentPool, agent_names
from components.cory.ppo import ppo_update
from components.cory.rollout import Sample, collate, forward
from components.cory.serving import InMemoryServer, ReloadServer
from components.cory.shaping import ScoreMoments, ShapingState
from components.engines.base import SamplingConfig
from components.stages import cory as train
from tests.cory_helpers import tiny_config, tiny_task


@pytest.fixture
def cfg(tiny_model_dir, tmp_path):
    return tiny_config(tiny_model_dir, tmp_path)


@pytest.fixture
def pool(cfg):
    return AgentPool(cfg, agent_names(cfg.algo))


def synthetic_samples(pool, agent, n=4):
    """n answers of 3-6 fixed tokens to one prompt, rewarded 0/1 alternately."""
    prompt = pool.tokenizer.encode("Question: 2 + 2?\nAnswer:", add_special_tokens=False)
    out = []
    for i in range(n):
        response = [100 + 7 * i + j for j in range(3 + i % 4)]
        out.append(Sample(i, "pioneer", agent, prompt, response, "", float(i % 2), float(i % 2), [0.0] * len(response)))
    return out


def snapshot(pool, name):
    agent = pool.agents[name]
    params = [p.detach().clone() for p in agent.parameters()]
    moments = {
        i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for i, s in enumerate(agent.optimizer.state_dict()["state"].values())
    }
    return params, moments


def same(a, b):
    params_a, moments_a = a
    params_b, moments_b = b
    if len(params_a) != len(params_b) or moments_a.keys() != moments_b.keys():
        return False
    if not all(torch.equal(x, y) for x, y in zip(params_a, params_b)):
        return False
    return all(
        torch.equal(torch.as_tensor(moments_a[i][k]), torch.as_tensor(moments_b[i][k]))
        for i in moments_a
        for k in moments_a[i]
    )


def logits_of(pool, samples, reference):
    batch = collate([(s.prompt_ids, s.response_ids) for s in samples], 0, pool.device)
    with torch.no_grad():
        if reference:
            with pool.reference():
                return forward(pool.model, None, batch)[0]
        return forward(pool.model, None, batch)[0]


def test_training_moves_the_agent_but_not_the_reference_or_the_other_agent(pool, cfg):
    samples = synthetic_samples(pool, "agent0")
    ref_before = logits_of(pool, samples, reference=True)
    pool.activate("agent1")
    other_before = logits_of(pool, samples, reference=False)
    stats = ppo_update(pool, "agent0", samples, cfg, iteration=1)
    assert stats["optimizer_steps"] == cfg.ppo_epochs * 2 and stats["grad_norm"] > 0
    assert torch.equal(logits_of(pool, samples, reference=True), ref_before)
    pool.activate("agent1")
    assert torch.equal(logits_of(pool, samples, reference=False), other_before)
    pool.activate("agent0")
    assert not torch.allclose(logits_of(pool, samples, reference=False), ref_before)
    assert all(not p.requires_grad for n, p in pool.model.named_parameters() if "lora_" not in n)


def test_role_exchange_keeps_parameters_and_optimizer_state(cfg, tmp_path, monkeypatch):
    cfg = tiny_config(cfg.model, tmp_path, exchange_every=1)
    pool = AgentPool(cfg, agent_names(cfg.algo))
    task = tiny_task(tmp_path)
    entries: dict[tuple[int, str], tuple] = {}
    exits: dict[tuple[int, str], tuple] = {}
    optimizers = {name: agent.optimizer for name, agent in pool.agents.items()}

    def spy(pool_, agent, samples, cfg_, iteration):
        entries[iteration, agent] = snapshot(pool_, agent)
        stats = ppo_update(pool_, agent, samples, cfg_, iteration)
        exits[iteration, agent] = snapshot(pool_, agent)
        return stats

    monkeypatch.setattr(train, "ppo_update", spy)
    server = InMemoryServer(pool, 8)
    rows = [
        train.run_iteration(cfg, pool, server, task, *train._load_data(cfg, task), iteration)[0] for iteration in (1, 2)
    ]
    assert rows[0]["roles"] == {"pioneer": "agent0", "observer": "agent1"}
    assert rows[1]["roles"] == {"pioneer": "agent1", "observer": "agent0"} and rows[1]["exchanged"]
    for name in ("agent0", "agent1"):
        assert pool.agents[name].optimizer is optimizers[name]
        assert same(entries[2, name], exits[1, name]), f"{name} changed at the exchange"
        assert not same(exits[2, name], exits[1, name]), f"{name} did not train after the exchange"
        steps = [s["step"] for s in pool.agents[name].optimizer.state_dict()["state"].values()]
        assert all(float(s) == 2 * cfg.ppo_epochs for s in steps), "Adam step count restarted at the exchange"


def test_checkpoint_state_round_trips(pool, cfg):
    for name in pool.agents:
        ppo_update(pool, name, synthetic_samples(pool, name), cfg, iteration=1)
    pool.agents["agent1"].shaping = ShapingState(0.123, ScoreMoments(1.5, 2.0, 1.7, 9.0))
    saved = {name: snapshot(pool, name) for name in pool.agents}
    fresh = AgentPool(cfg, agent_names(cfg.algo))
    assert not same(snapshot(fresh, "agent0"), saved["agent0"])
    assert fresh.agents["agent1"].shaping == ShapingState(cfg.eta)
    fresh.load_state_dict(pool.state_dict())
    for name in pool.agents:
        assert same(snapshot(fresh, name), saved[name])
        assert fresh.agents[name].shaping == pool.agents[name].shaping


def test_merged_export_and_reload_serve_the_trained_agent(pool, cfg, tmp_path):
    samples = synthetic_samples(pool, "agent1")
    ppo_update(pool, "agent1", samples, cfg, iteration=1)
    prompts = [s.prompt_ids for s in samples[:2]]
    greedy = SamplingConfig(temperature=0.0, max_tokens=6)
    live = InMemoryServer(pool, 8).engine_for("agent1").generate(prompts, greedy, [0, 1])
    reload = ReloadServer(pool, "hf", cfg.model, tmp_path / "serving", seed=0)
    served = reload.engine_for("agent1").generate(prompts, greedy, [0, 1])
    assert [g.token_ids for g in served] == [g.token_ids for g in live]
    assert served[0].logprobs == pytest.approx(live[0].logprobs, abs=1e-4)
    first = reload.engines["agent1"]
    reload.updated("agent1")
    assert reload.engine_for("agent1") is not first  # rebuilt after an update
    reload.close()
    assert not (tmp_path / "serving").exists()  # scratch weights are removed


def test_on_a_bf16_base_every_trained_parameter_is_fp32_and_moves_at_the_papers_rate(tiny_model_dir, tmp_path):
    cfg = tiny_config(tiny_model_dir, tmp_path, dtype="bfloat16", lr=2e-7)
    pool = AgentPool(cfg, agent_names(cfg.algo))
    assert pool.model.get_base_model().dtype == torch.bfloat16
    for agent in pool.agents.values():  # PEFT upcasts adapters; value heads are built fp32
        assert {p.dtype for p in agent.parameters()} == {torch.float32} and agent.optimizer.pairs == []
    before = [p.detach().clone() for p in pool.agents["agent0"].parameters()]
    ppo_update(pool, "agent0", synthetic_samples(pool, "agent0"), cfg, iteration=1)
    after = pool.agents["agent0"].parameters()
    assert sum(not torch.equal(a, b) for a, b in zip(before, after)) >= len(before) // 2
