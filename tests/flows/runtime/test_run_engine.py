"""The run's one engine (flows/runtime/run_engine.py): when a run gets one, and a real vLLM server on
the default model serving the base and a trained actor's weights reloaded into it, launched again
after it died, and gone after the run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from components.config.cluster import ClusterConfig
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


def _actor(base: Path, out: Path) -> Path:
    """A trained actor's merged folder: the base's weights, perturbed so that it samples otherwise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "v_proj" in name:
                weight.add_(torch.randn_like(weight) * 0.05)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


@pytest.mark.manual  # a vLLM server on the 135M model, 50-80 s on 2 cores, for an option that is off by default;
# CI guards the client's logic with tests/components/engines/test_served_engine.py (`make test-manual` runs it)
def test_the_run_engine_serves_the_base_and_an_actor_and_comes_back_after_dying(prepared_model_dir, tmp_path):
    pytest.importorskip("vllm")
    actor = _actor(prepared_model_dir, tmp_path / "actor" / "model")
    engine = RunEngine(str(prepared_model_dir), 1024, tmp_path / "logs")
    try:
        engine.ensure()
        prompt = [[1, 9690, 198, 28120, 30, 2]]
        base = served_engine(str(prepared_model_dir), 0, {})  # waits until the server answers
        [from_base] = base.generate(prompt, SAMPLING, [7])
        assert from_base.token_ids and len(from_base.logprobs) == len(from_base.token_ids)
        assert base.generate(prompt, SAMPLING, [7])[0].token_ids == from_base.token_ids  # seeded per request
        base.close()
        tuned = served_engine(str(actor), 0, {})  # its weights reloaded into the server
        [from_actor] = tuned.generate(prompt, SAMPLING, [7])
        assert from_actor.token_ids != from_base.token_ids
        tuned.close()
        back = served_engine(str(prepared_model_dir), 0, {})  # the base's weights again, bit for bit
        assert back.generate(prompt, SAMPLING, [7])[0] == from_base
        back.close()

        first = engine.running.proc.pid
        os.killpg(first, signal.SIGKILL)  # the engine crashes
        engine.running.proc.wait()
        with pytest.raises(ConnectionError, match="exited; its log: .*engine.log"):
            wait_ready(json.loads(os.environ[ENV]), timeout_s=60)
        engine.ensure()  # before the next step: a new server, holding the base model
        assert engine.launches == 2 and engine.running.proc.pid != first
        assert json.loads(os.environ[ENV])["pid"] == engine.running.proc.pid
    finally:
        engine.stop()
    assert not group_alive(engine.running.proc.pid) and ENV not in os.environ
