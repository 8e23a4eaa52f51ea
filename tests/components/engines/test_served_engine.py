"""The run's one engine as a sampling step sees it (components/engines/served.py), against the small
OpenAI-compatible server of tests/openai_server.py: which models it serves, weights reloaded only
when the server holds others, token-level requests only, a clear error when the server is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from components.engines.base import SamplingConfig
from components.engines.served import ENV, ServedEngine, served_engine, wait_ready, weights_id
from components.episodes.build import engine_for
from tests.openai_server import FakeServer

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=3)


@pytest.fixture
def run(server_url, prepared_model_dir, monkeypatch, tmp_path):
    """The environment a pipeline gives its steps when the fake server is the run's engine, which
    holds the base model's weights."""
    FakeServer.calls.clear()
    holds = tmp_path / "engine.holds"
    holds.write_text(weights_id(str(prepared_model_dir)))
    where = {"url": server_url, "base": str(prepared_model_dir), "pid": os.getpid(), "log": "runs/x/logs/engine.log"}
    monkeypatch.setenv(ENV, json.dumps(where | {"holds": str(holds)}))
    return where | {"holds": holds}


def _actor(root: Path, base: Path, weights: bytes, **config) -> Path:
    """An actor folder: the base's config (changed by `config`) and tokenizer, its own weights file."""
    model = root / "actor" / "model"
    shutil.copytree(base, model, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    (model / "config.json").write_text(json.dumps(json.loads((base / "config.json").read_text()) | config))
    (model / "model.safetensors").write_bytes(weights)
    return model


def _reloads() -> list[str]:
    return [c["kwargs"]["weights_path"] for c in FakeServer.calls if c["path"] == "/collective_rpc"]


def test_without_a_run_engine_a_step_builds_its_own(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert served_engine("models/anything", 0, {}) is None


def test_the_base_model_is_sampled_token_level_without_a_reload(run, prepared_model_dir):
    engine = engine_for("vllm", str(prepared_model_dir), 0, 4096, {"max_retries": 0})  # what a step calls
    assert isinstance(engine, ServedEngine) and engine.model_name == str(prepared_model_dir)
    [gen] = engine.generate([[5, 6, 7]], SAMPLING, [3])
    assert gen.token_ids == [103, 203, 2] and gen.logprobs == [-0.5] * 3
    engine.chat([[{"role": "user", "content": "hi"}]], SAMPLING, [4])  # the template rendered here
    assert [c["path"] for c in FakeServer.calls] == ["/v1/completions", "/v1/completions"]
    assert FakeServer.calls[1]["prompt"] == engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    engine.close()


def test_an_actor_is_reloaded_into_the_server_once_and_the_base_after_it(run, prepared_model_dir, tmp_path):
    actor = _actor(tmp_path, prepared_model_dir, b"weights-1")
    engine = served_engine(str(actor), 0, {})
    assert _reloads() == [str(actor)] and FakeServer.calls[1]["path"] == "/reset_prefix_cache"
    assert run["holds"].read_text() == weights_id(str(actor))
    engine.generate([[5, 6]], SAMPLING, [1])
    assert FakeServer.calls[-1]["model"] == str(prepared_model_dir)  # the server's one model name
    served_engine(str(actor), 0, {}).close()  # the same weights again: no reload
    assert _reloads() == [str(actor)]
    (actor / "model.safetensors").write_bytes(b"weights-2, retrained in place")
    served_engine(str(actor), 0, {}).close()
    served_engine(str(prepared_model_dir), 0, {}).close()
    assert _reloads() == [str(actor), str(actor), str(Path(prepared_model_dir).resolve())]


def test_a_model_of_another_architecture_gets_its_own_engine(run, prepared_model_dir, tmp_path):
    other = _actor(tmp_path, prepared_model_dir, b"w", num_hidden_layers=2)
    assert served_engine(str(other), 0, {}) is None and FakeServer.calls == []


def test_a_server_that_is_gone_fails_at_once_naming_its_log(run):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = run | {"url": "http://127.0.0.1:9/v1", "pid": gone.pid}
    with pytest.raises(ConnectionError, match="exited; its log: runs/x/logs/engine.log"):
        wait_ready(dead, timeout_s=60)
    wait_ready(run, timeout_s=5)  # the live one answers /health
