"""OpenAIEngine's request stream (submit / collect) against the tiny local server of tests/openai_server.py."""

from __future__ import annotations

import time

import pytest

from components.engines.base import SamplingConfig, StreamingEngine
from components.engines.openai_engine import EndpointError, OpenAIEngine
from tests.openai_server import DELAY_S


def drain(engine: OpenAIEngine) -> dict:
    got = {}
    while engine.in_flight():
        got.update(engine.collect())
    return got


def test_many_requests_in_flight_come_back_under_their_keys(server_url, prepared_model_dir):
    engine = OpenAIEngine(server_url, "m", tokenizer=str(prepared_model_dir))
    assert isinstance(engine, StreamingEngine)
    start = time.perf_counter()
    for i in range(8):
        engine.submit(("agent", i), [1] * (i + 1), SamplingConfig(max_tokens=3), seed=i)
    engine.submit_chat(("sim", 0), [{"role": "user", "content": "hi"}], SamplingConfig(), seed=5)
    got = drain(engine)
    assert time.perf_counter() - start < 9 * DELAY_S / 2  # concurrent, not one after another
    assert {k: g.token_ids for k, g in got.items() if k[0] == "agent"} == {
        ("agent", i): [100 + i, 201 + i, 2] for i in range(8)
    }
    assert got[("sim", 0)].text == "echo:hi|seed=5"
    with pytest.raises(RuntimeError, match="no request in flight"):
        engine.collect()
    engine.close()


def test_streamed_requests_keep_the_retries(server_url, misbehave):
    engine = OpenAIEngine(server_url, "m", backoff_s=0.01)
    misbehave.failures_left["n"] = 2
    engine.submit_chat("a", [{"role": "user", "content": "x"}], SamplingConfig(), seed=1)
    assert drain(engine)["a"].text == "echo:x|seed=1"
    misbehave.failures_left["n"] = 10
    failing = OpenAIEngine(server_url, "m", backoff_s=0.01, max_retries=1)
    failing.submit_chat("b", [{"role": "user", "content": "x"}], SamplingConfig(), seed=1)
    with pytest.raises(EndpointError, match="failed 2 times"):
        drain(failing)
    engine.close()
    failing.close()
