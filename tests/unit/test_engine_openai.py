"""OpenAIEngine against a tiny local OpenAI-compatible server (http.server on 127.0.0.1)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from components.engines.base import Engine, SamplingConfig
from components.engines.factory import make_engine
from components.engines.openai_engine import OpenAIEngine

DELAY_S = 0.3


class FakeServer(BaseHTTPRequestHandler):
    """Chat: echoes the last message and the seed. Completions: ids derived from the seed."""

    calls: list[dict] = []
    failures_left = {"n": 0}

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "fake-model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeServer.calls.append({"path": self.path, "auth": self.headers.get("Authorization"), **payload})
        if FakeServer.failures_left["n"] > 0:
            FakeServer.failures_left["n"] -= 1
            return self._send(503, {"error": "busy"})
        time.sleep(DELAY_S)
        if self.path == "/v1/chat/completions":
            text = f"echo:{payload['messages'][-1]['content']}|seed={payload['seed']}"
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return self._send(200, {"choices": [choice]})
        if self.path == "/v1/completions":
            ids = [100 + payload["seed"], 200 + len(payload["prompt"]), 2][: payload["max_tokens"]]
            choice = {
                "index": 0,
                "text": "ignored-by-test",
                "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.5] * len(ids)},
                "finish_reason": "stop" if ids[-1] == 2 else "length",
            }
            return self._send(200, {"choices": [choice]})
        self._send(404, {"error": "not found"})


@pytest.fixture(scope="module")
def server_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


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


def test_retries_busy_server(server_url):
    engine = OpenAIEngine(server_url, "m", backoff_s=0.01)
    FakeServer.failures_left["n"] = 2
    out = engine.chat([[{"role": "user", "content": "x"}]], SamplingConfig(), [1])[0]
    assert out.text == "echo:x|seed=1"
    FakeServer.failures_left["n"] = 10
    with pytest.raises(RuntimeError, match="HTTP 503"):
        OpenAIEngine(server_url, "m", backoff_s=0.01, max_retries=1).chat(
            [[{"role": "user", "content": "x"}]], SamplingConfig(), [1]
        )
    FakeServer.failures_left["n"] = 0


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
