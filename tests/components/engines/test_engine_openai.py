"""OpenAIEngine against a tiny local OpenAI-compatible server (http.server on 127.0.0.1), including
its retries of busy, dropping, stalling and vanished servers, and the stages' retry settings."""

from __future__ import annotations

import socket
import time

import pytest

from components.config.sections import DataConfig, EpisodeSection, EvalConfig, RolloutsConfig
from components.config.training import CandidatesConfig
from components.engines.base import Engine, SamplingConfig
from components.engines.factory import make_engine
from components.engines.openai_engine import EndpointError, OpenAIEngine
from components.episodes import build
from components.tasks.colbench_backend.task import ColbenchBackend
from tests.openai_server import DELAY_S, FakeServer, start_server, stop_server


def ask(engine: OpenAIEngine) -> str:
    return engine.chat([[{"role": "user", "content": "x"}]], SamplingConfig(), [1])[0].text


def test_chat_in_order_concurrently_with_seeds(server_url, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    engine = OpenAIEngine(server_url)
    assert isinstance(engine, Engine) and engine.model_name == "fake-model"
    convs = [[{"role": "user", "content": f"q{i}"}] for i in range(8)]
    start = time.perf_counter()
    outs = engine.chat(convs, SamplingConfig(temperature=0.5, max_tokens=9), list(range(10, 18)))
    elapsed = time.perf_counter() - start
    assert [g.text for g in outs] == [f"echo:q{i}|seed={10 + i}" for i in range(8)]
    assert all(g.finish_reason == "stop" for g in outs)
    assert elapsed < 8 * DELAY_S / 2  # sent concurrently
    last = FakeServer.calls[-1]
    assert last["auth"] == "Bearer sk-test" and last["model"] == "fake-model"
    assert last["max_tokens"] == 9 and last["temperature"] == 0.5
    engine.close()


def test_generate_returns_exact_ids_and_logprobs(server_url, prepared_model_dir):
    engine = make_engine("openai", f"{server_url}#served-name", tokenizer=str(prepared_model_dir))
    assert engine.model_name == "served-name"
    outs = engine.generate([[1, 2, 3], [4, 5]], SamplingConfig(max_tokens=3), [7, 8])
    assert [g.token_ids for g in outs] == [[107, 203, 2], [108, 202, 2]]
    assert all(g.logprobs == [-0.5] * 3 and g.finish_reason == "stop" for g in outs)
    call = FakeServer.calls[-1]
    assert call["prompt"] in ([1, 2, 3], [4, 5]) and call["return_tokens_as_token_ids"] is True
    short = engine.generate([[1]], SamplingConfig(max_tokens=2), [0])[0]
    assert short.finish_reason == "length" and len(short.token_ids) == 2


def test_generate_without_tokenizer_is_not_implemented(server_url):
    engine = OpenAIEngine(server_url, "m")
    with pytest.raises(NotImplementedError, match="tokenizer"):
        engine.generate([[1]], SamplingConfig(), [0])


def test_retries_busy_server(server_url, misbehave):
    engine = OpenAIEngine(server_url, "m", backoff_s=0.01)
    misbehave.failures_left["n"] = 2
    before = len(misbehave.calls)
    assert ask(engine) == "echo:x|seed=1"
    assert len(misbehave.calls) - before == 3  # 503, 503, 200
    misbehave.failures_left["n"] = 10
    with pytest.raises(EndpointError, match="HTTP 503") as err:
        ask(OpenAIEngine(server_url, "m", backoff_s=0.01, max_retries=1))
    assert "failed 2 times" in str(err.value) and "/v1/chat/completions" in str(err.value)


def test_retries_dropped_connection(server_url, misbehave):
    engine = OpenAIEngine(server_url, "m", backoff_s=0.01, max_retries=2)
    misbehave.drops_left["n"] = 2
    before = len(misbehave.calls)
    assert ask(engine) == "echo:x|seed=1"
    assert len(misbehave.calls) - before == 3  # dropped, dropped, answered
    misbehave.drops_left["n"] = 10
    with pytest.raises(EndpointError, match="connection lost"):
        ask(OpenAIEngine(server_url, "m", backoff_s=0.01, max_retries=1))


def test_stalled_server_fails_after_retries_with_clear_message(server_url, misbehave):
    retries, backoff, timeout = 2, 0.05, 0.2
    engine = OpenAIEngine(
        server_url, "m", timeout_s=timeout, max_retries=retries, backoff_s=backoff, retry_setting="eval.openai_retries"
    )
    misbehave.stall_s["s"] = 1.0
    before = len(misbehave.calls)
    start = time.perf_counter()
    with pytest.raises(EndpointError) as err:
        ask(engine)
    elapsed = time.perf_counter() - start
    message = str(err.value)
    assert f"{server_url}/chat/completions" in message and "failed 3 times" in message
    assert "timed out" in message and "eval.openai_retries (now 2)" in message
    assert len(misbehave.calls) - before == retries + 1
    waits = sum(engine.wait_s(i) for i in range(retries))  # 0.05 + 0.1
    assert (retries + 1) * timeout + waits - 0.05 < elapsed < (retries + 1) * timeout + waits + 1.0


def test_backoff_doubles_and_is_capped(server_url):
    engine = OpenAIEngine(server_url, "m", backoff_s=1.0, max_backoff_s=30.0)
    assert [engine.wait_s(i) for i in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIEngine(server_url, "m", max_retries=-1)


def test_server_gone_after_start_is_retried_then_fails(misbehave):
    server, url = start_server()
    engine = OpenAIEngine(url, "m", backoff_s=0.01, max_retries=2)  # the probe reaches it
    stop_server(server)  # then the server goes away (e.g. restarting)
    with pytest.raises(EndpointError, match="failed 3 times .last: connection failed") as err:
        ask(engine)
    assert "max_retries (now 2)" in str(err.value)


def test_connection_refused_fails_fast():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start = time.perf_counter()
    with pytest.raises(ConnectionError, match="cannot reach"):
        OpenAIEngine(f"http://127.0.0.1:{port}/v1")
    assert time.perf_counter() - start < 2
    with pytest.raises(ValueError, match="http"):
        make_engine("openai", "not-a-url")
    with pytest.raises(ConnectionError, match="cannot reach"):
        OpenAIEngine(f"http://127.0.0.1:{port}/v1", "named-model", max_retries=5, backoff_s=1.0)
    assert time.perf_counter() - start < 2  # the probe runs, and does not retry, with a name too


def test_stage_retry_settings_reach_agent_and_simulator(server_url, tmp_path, monkeypatch):
    assert build.openai_options(EvalConfig())["retry_setting"] == "eval.openai_retries"
    assert build.openai_options(CandidatesConfig(openai_retries=4)) == {  # the candidates stage's engine
        "max_retries": 4,
        "backoff_s": 1.0,
        "retry_setting": "candidates.openai_retries",
    }
    cfg = RolloutsConfig(
        engine="openai",
        model=f"{server_url}#agent",
        simulator="llm",
        simulator_model=f"{server_url}#sim",
        openai_retries=5,
        openai_backoff_s=0.25,
    )
    monkeypatch.setattr(build, "EpisodeDriver", lambda agent, simulator, ep_cfg, task: (agent, simulator))
    task = ColbenchBackend({"data": DataConfig(backend_tasks=tmp_path / "tasks.jsonl")})
    agent, simulator = build.build_driver(cfg, EpisodeSection(), 0, task)
    assert (agent.model_name, simulator.engine.model_name) == ("agent", "sim")
    for engine in (agent, simulator.engine):
        assert (engine.max_retries, engine.backoff_s) == (5, 0.25)
        assert engine.retry_setting == "rollouts.openai_retries"
        engine.close()
    with pytest.raises(ValueError, match="openai_retries"):
        RolloutsConfig(openai_retries=11)
