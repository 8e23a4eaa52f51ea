"""The run's one engine (flows/runtime/run_engine.py): when a run gets one, and a real vLLM server on
the default model serving the base and a LoRA actor, launched again after it died, and gone after
the run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from components.config.cluster import ClusterConfig
from components.config.training import ADAPTER
from components.engines.base import SamplingConfig
from components.engines.served import ENV, served_engine, wait_ready
from flows.runtime.processes import group_alive
from flows.runtime.run_engine import RunEngine, run_engine, wanted

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=12)


def _doc(engine: str = "auto") -> dict:
    return {s: {"engine": engine} for s in ("eval", "rollouts", "candidates")} | {"episode": {"max_model_len": 1024}}


def test_a_run_gets_one_engine_only_where_every_step_could_use_it():
    pytest.importorskip("vllm")
    run = ClusterConfig(engine_scope="run")
    assert wanted(_doc(), run) is None and wanted(_doc("vllm"), run) is None
    assert wanted(_doc(), ClusterConfig()) == "engine_scope step"  # the default
    assert "Ray" in wanted(_doc(), ClusterConfig(engine_scope="run", backend="ray"))
    assert "not vllm alone" in wanted(_doc("hf"), run)
    assert wanted({"cory": {}}, run) == "no step samples from the actor"


def test_no_engine_leaves_the_environment_alone(tmp_path):
    with run_engine(_doc(), ClusterConfig(), "models/x", tmp_path) as engine:
        assert engine is None and ENV not in os.environ


def _lora_actor(base: Path, out: Path) -> Path:
    """An actor trained on `base` as the actor stage saves one: the merged folder with its adapter
    (random LoRA weights, so that it samples differently from the base)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from components.training.models import save_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "v_proj"]))
    for name, weight in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(weight, std=0.05)
    return save_model(model, AutoTokenizer.from_pretrained(base), out, {}, keep_adapter=True)


@pytest.mark.integration  # a vLLM server on the 135M model: ~1 min on 2 cores
def test_the_run_engine_serves_the_base_and_a_lora_actor_and_comes_back_after_dying(prepared_model_dir, tmp_path):
    pytest.importorskip("vllm")
    actor = _lora_actor(prepared_model_dir, tmp_path / "actor" / "model")
    assert (actor / ADAPTER / "adapter_config.json").is_file() and (actor / "config.json").is_file()
    engine = RunEngine(str(prepared_model_dir), 1024, 16, tmp_path / "logs")
    try:
        engine.ensure()
        prompt = [[1, 9690, 198, 28120, 30, 2]]
        base = served_engine(str(prepared_model_dir), 0, {})  # waits until the server answers
        [from_base] = base.generate(prompt, SAMPLING, [7])
        assert from_base.token_ids and len(from_base.logprobs) == len(from_base.token_ids)
        assert base.generate(prompt, SAMPLING, [7])[0].token_ids == from_base.token_ids  # seeded per request
        tuned = served_engine(str(actor), 0, {})
        [from_actor] = tuned.generate(prompt, SAMPLING, [7])
        assert from_actor.token_ids != from_base.token_ids  # the adapter's weights, on the same server
        tuned.close()
        base.close()

        first = engine.running.proc.pid
        os.killpg(first, signal.SIGKILL)  # the engine crashes
        engine.running.proc.wait()
        with pytest.raises(ConnectionError, match="exited; its log: .*engine.log"):
            wait_ready(json.loads(os.environ[ENV]), timeout_s=60)
        engine.ensure()  # before the next step: a new server
        assert engine.launches == 2 and engine.running.proc.pid != first
        assert json.loads(os.environ[ENV])["pid"] == engine.running.proc.pid
    finally:
        engine.stop()
    assert not group_alive(engine.running.proc.pid) and ENV not in os.environ
