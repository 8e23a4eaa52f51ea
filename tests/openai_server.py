"""A tiny OpenAI-compatible server (http.server on 127.0.0.1, one thread) for the OpenAIEngine tests:
chat echoes the last message and the seed, completions derive ids from the seed, and class-level
knobs make it busy (503), drop connections or stall. Like vLLM's server in development mode, it
answers /health, /collective_rpc and /reset_prefix_cache (recorded in `calls`, answered without JSON)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELAY_S = 0.3


class FakeServer(BaseHTTPRequestHandler):
    """Chat: echoes the last message and the seed. Completions: ids derived from the seed."""

    calls: list[dict] = []
    failures_left = {"n": 0}  # next POSTs answered 503
    drops_left = {"n": 0}  # next POSTs: connection closed without an answer
    stall_s = {"s": 0.0}  # every POST waits this long first (> the client's timeout: it times out)

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self._text(200, "")
        elif self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "fake-model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = json.loads(body) if body else {}
        FakeServer.calls.append({"path": self.path, "auth": self.headers.get("Authorization"), **payload})
        if FakeServer.drops_left["n"] > 0:
            FakeServer.drops_left["n"] -= 1
            self.close_connection = True  # returns without a status line: the server closes the socket
            return None
        if FakeServer.stall_s["s"]:
            time.sleep(FakeServer.stall_s["s"])
        if FakeServer.failures_left["n"] > 0:
            FakeServer.failures_left["n"] -= 1
            return self._send(503, {"error": "busy"})
        if self.path in ("/collective_rpc", "/reset_prefix_cache"):
            return self._text(200, "")
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


def start_server() -> tuple[ThreadingHTTPServer, str]:
    """A FakeServer on a free loopback port, served from a thread; (server, base URL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def stop_server(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
