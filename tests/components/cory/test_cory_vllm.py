"""CORY's in-place vLLM server on the default model: one engine serves both agents and each agent's
new weights, with no rebuild (one engine build, ~75 s on CPU)."""

from __future__ import annotations

import pytest
import torch

from components.config.cory import CoryConfig
from components.cory.agents import AgentPool
from components.engines.base import SamplingConfig
from tests.cory_helpers import QUESTIONS

pytestmark = pytest.mark.integration


def set_lora_b(pool: AgentPool, agent: str, std: float) -> None:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for key, param in pool.model.named_parameters():
            if f"lora_B.{agent}." in key:
                param.copy_(torch.randn(param.shape, generator=generator) * std)


def test_inplace_server_switches_agents_and_follows_updates_without_rebuilding(prepared_model_dir, tmp_path):
    from components.engines.factory import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not importable here")
    from components.cory.rollout import encode_prompt
    from components.cory.serving import VLLM_OPTIONS_CPU, InPlaceServer

    cfg = CoryConfig(model=str(prepared_model_dir), engine="vllm")
    pool = AgentPool(cfg, ["agent0", "agent1"])
    set_lora_b(pool, "agent0", 0.02)  # agent0 looks trained; agent1 is still the base model
    server = InPlaceServer(pool, cfg.model, tmp_path / "serving", seed=0, options=VLLM_OPTIONS_CPU)
    prompts = [encode_prompt(pool.tokenizer, q, True) for q, _ in QUESTIONS[:3]]
    greedy = SamplingConfig(temperature=0.0, max_tokens=24)

    def answers(agent):
        return [g.token_ids for g in server.engine_for(agent).generate(prompts, greedy, [0, 1, 2])]

    try:
        base = answers("agent1")
        engine = server.engine
        assert answers("agent0") != base
        assert answers("agent1") == base  # switching back restores the other agent exactly
        set_lora_b(pool, "agent0", 0.0)  # an "update" that returns agent0 to the base
        server.updated("agent0")
        assert answers("agent0") == base
        assert server.engine is engine  # one build for all of it
    finally:
        server.close()
