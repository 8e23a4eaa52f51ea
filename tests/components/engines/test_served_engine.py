"""The run's one engine as a sampling step sees it (components/engines/served.py), against the small
OpenAI-compatible server of tests/openai_server.py: which models it serves, adapters loaded by the
hash of their weights and unloaded on close, token-level requests only, a clear error when the
server is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.config.training import ADAPTER
from components.engines.base import SamplingConfig
from components.engines.served import ENV, ServedEngine, adapter_name, served_engine, wait_ready
from components.episodes.build import engine_for
from tests.openai_server import FakeServer

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=3)


@pytest.fixture
def run_engine_env(server_url, prepared_model_dir, monkeypatch):
    """The environment a pipeline gives its steps when the fake server is the run's engine."""
    FakeServer.calls.clear()
    FakeServer.adapters.clear()
    run = {"url": server_url, "base": str(prepared_model_dir), "pid": os.getpid(), "log": "runs/x/logs/engine.log"}
    monkeypatch.setenv(ENV, json.dumps(run))
    return run


def _actor(root: Path, base: Path, weights: bytes, trained_on: Path | None = None) -> Path:
    """A merged actor folder (the base's config and tokenizer, no weights needed here) with the
    LoRA adapter it was merged from, trained on `trained_on` (default: `base`)."""
    model = root / "actor" / "model"
    shutil.copytree(base, model, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    (model / ADAPTER).mkdir()
    config = {"base_model_name_or_path": str(trained_on or base), "r": 16}
    (model / ADAPTER / "adapter_config.json").write_text(json.dumps(config))
    (model / ADAPTER / "adapter_model.safetensors").write_bytes(weights)
    return model


def test_without_a_run_engine_a_step_builds_its_own(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert served_engine("models/anything", 0, {}) is None


def test_the_base_model_is_sampled_token_level_on_the_run_engine(run_engine_env, prepared_model_dir):
    engine = engine_for("vllm", str(prepared_model_dir), 0, 4096, {"max_retries": 0})  # what a step calls
    assert isinstance(engine, ServedEngine) and engine.model_name == str(Path(prepared_model_dir).resolve())
    [gen] = engine.generate([[5, 6, 7]], SAMPLING, [3])
    assert gen.token_ids == [103, 203, 2] and gen.logprobs == [-0.5] * 3
    engine.chat([[{"role": "user", "content": "hi"}]], SAMPLING, [4])  # the template rendered here
    assert [c["path"] for c in FakeServer.calls] == ["/v1/completions", "/v1/completions"]
    assert FakeServer.calls[1]["prompt"] == engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    engine.close()
    assert FakeServer.adapters == {}


def test_an_actor_trained_on_the_base_is_its_adapter_while_the_engine_lives(
    run_engine_env, prepared_model_dir, tmp_path
):
    actor = _actor(tmp_path, prepared_model_dir, b"weights-1")
    engine = served_engine(str(actor), 0, {})
    name = adapter_name(actor / ADAPTER)
    assert engine.model_name == name and FakeServer.adapters == {name: str(actor / ADAPTER)}
    engine.generate([[5, 6]], SAMPLING, [1])
    assert FakeServer.calls[-1]["model"] == name
    again = served_engine(str(actor), 0, {})  # a second engine on the same adapter: loaded already is fine
    again.close()
    engine.close()  # unloaded already is fine too
    assert FakeServer.adapters == {}


def test_a_retrained_actor_at_the_same_path_is_a_new_adapter(prepared_model_dir, tmp_path):
    first = adapter_name(_actor(tmp_path / "a", prepared_model_dir, b"weights-1") / ADAPTER)
    second = adapter_name(_actor(tmp_path / "b", prepared_model_dir, b"weights-2") / ADAPTER)
    assert first != second and first.startswith("actor-")


def test_an_actor_of_another_base_or_without_adapter_gets_its_own_engine(run_engine_env, prepared_model_dir, tmp_path):
    other = _actor(tmp_path / "other", prepared_model_dir, b"w", trained_on=tmp_path / "elsewhere")
    assert served_engine(str(other), 0, {}) is None
    full = _actor(tmp_path / "full", prepared_model_dir, b"w")
    shutil.rmtree(full / ADAPTER)
    assert served_engine(str(full), 0, {}) is None
    assert not any(c["path"].endswith("load_lora_adapter") for c in FakeServer.calls)


def test_a_server_that_is_gone_fails_at_once_naming_its_log(run_engine_env):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = run_engine_env | {"url": "http://127.0.0.1:9/v1", "pid": gone.pid}
    with pytest.raises(ConnectionError, match="exited; its log: runs/x/logs/engine.log"):
        wait_ready(dead, timeout_s=60)
    wait_ready(run_engine_env, timeout_s=5)  # the live one answers /health
