"""OpenAI-compatible HTTP engine, e.g. a vLLM server hosting a 70B human simulator.

Reads: the server at `base_url` (".../v1"); `OPENAI_API_KEY` from the environment (optional);
optionally a local tokenizer folder (needed for token-level `generate`). Writes: nothing.

- `chat`: POST {base_url}/chat/completions, one request per conversation, sent concurrently from a
  thread pool (the driver sends a whole turn of episodes at once). Returns `text` and
  `finish_reason`; `token_ids`/`logprobs` are empty (the chat API returns no token ids; the
  simulator's text is all that is used).
- `generate`: POST {base_url}/completions with `prompt` = the token-id list (vLLM servers accept
  it), `logprobs=1` and vLLM's `return_tokens_as_token_ids=True`, so that the exact sampled ids
  come back as "token_id:<id>" strings with their log-probs. Same conventions as the local engines
  as far as the server allows: log-probs are the server's (vLLM: raw temperature-1), and a
  final eos id is included when the server reports it. Needs the local tokenizer (to decode
  and, for servers that return token strings, to map them to ids); without it `generate` raises
  NotImplementedError.
- Streaming (base.py `StreamingEngine`): `submit`/`submit_chat` send one request from a thread
  pool of `concurrency` threads (the same request, payload and retries as in `generate`/`chat`),
  so up to `concurrency` requests are in flight; `collect` returns each as its answer arrives,
  and a request whose retries are spent raises its EndpointError there.
- `seeds[i]` is sent as the request's `seed`.
- Failures, by kind (a request is tried at most `max_retries + 1` times; the wait before retry i
  (0-based) is `backoff_s * 2**i`, capped at `max_backoff_s`; each retry is logged as a warning):
  wrong URL (unsupported scheme, invalid URL) and non-retryable HTTP statuses (4xx but 408/429)
  fail at once; timeouts, HTTP 408/429/5xx, connections refused or dropped mid-request (any
  httpx transport error: a server restarting, a proxy closing the socket) are retried. When the
  attempts are spent, EndpointError names the URL, the attempts, the last failure and the setting
  to raise (`retry_setting`, e.g. "rollouts.openai_retries").
  The constructor probes `{base_url}/models` so a dead server is reported before any work starts:
  there a refused or timed-out connection fails at once with ConnectionError (no retry), and
  the served model name is picked when none is given.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Hashable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Sequence

import httpx

from components.engines.base import Generation, Message, SamplingConfig

RETRY_STATUS = {408, 429, 500, 502, 503, 504}
WRONG_URL = (httpx.UnsupportedProtocol, httpx.InvalidURL)  # never retried
CONNECT_FAILED = (httpx.ConnectError, httpx.ConnectTimeout)  # not retried by the constructor's probe

log = logging.getLogger(__name__)


class EndpointError(RuntimeError):
    """An OpenAI-compatible endpoint failed for good: a non-retryable HTTP status, or retries spent."""


class _Retryable(Exception):
    """One failed attempt worth retrying; `str()` says what failed."""


class OpenAIEngine:
    """Client of an OpenAI-compatible server; requests of a batch are sent concurrently."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model_name: str | None = None,
        *,
        tokenizer: str | Path | None = None,
        timeout_s: float = 300.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        retry_setting: str = "max_retries",
        concurrency: int = 32,
        api_key: str | None = None,
        seed: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if max_retries < 0 or backoff_s < 0:
            raise ValueError(f"max_retries and backoff_s must be >= 0, got {max_retries} and {backoff_s}")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retry_setting = retry_setting
        self.concurrency = concurrency
        self.seed = seed  # unused: every request carries its own seed
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=concurrency),
        )
        self.tokenizer = None
        if tokenizer is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.model_name = self._probe(model_name)
        self._pool: ThreadPoolExecutor | None = None  # the stream's threads, started by the first submit
        self._futures: dict[Future, Hashable] = {}  # streamed requests in flight -> the caller's keys

    def _probe(self, model_name: str | None) -> str:
        """GET /models (a refused connection fails at once); `model_name` or the first served one."""
        models = self._request("GET", "/models", probe=True).get("data") or []
        if model_name:
            return model_name
        if not models:
            raise EndpointError(f"{self.base_url}/models lists no model; pass a model name")
        return str(models[0]["id"])

    def _request(self, method: str, path: str, payload: dict | None = None, *, probe: bool = False) -> dict:
        """The JSON answer of one call, retried with backoff (see the module docstring)."""
        url = self.base_url + path
        for attempt in range(self.max_retries + 1):
            try:
                return self._attempt(method, url, payload, probe)
            except _Retryable as exc:
                last = str(exc)
            if attempt < self.max_retries:
                wait = self.wait_s(attempt)
                log.warning("%s %s: %s; retry %d/%d in %.1f s", method, url, last, attempt + 1, self.max_retries, wait)
                time.sleep(wait)
        raise EndpointError(
            f"{method} {url} failed {self.max_retries + 1} times (last: {last}); if the server needs longer "
            f"to recover, raise {self.retry_setting} (now {self.max_retries}) or the backoff"
        )

    def wait_s(self, attempt: int) -> float:
        """Seconds slept after failed attempt `attempt` (0-based): exponential, capped."""
        return min(self.backoff_s * 2**attempt, self.max_backoff_s)

    def _attempt(self, method: str, url: str, payload: dict | None, probe: bool) -> dict:
        """One try: the JSON answer, _Retryable for a passing failure, an error for a permanent one."""
        try:
            response = self._client.request(method, url, json=payload)
        except WRONG_URL as exc:
            raise ConnectionError(f"cannot reach OpenAI-compatible server at {url}: {exc}") from exc
        except CONNECT_FAILED as exc:
            if probe:
                raise ConnectionError(f"cannot reach OpenAI-compatible server at {url}: {exc!r}") from exc
            raise _Retryable(f"connection failed: {exc!r}") from exc
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out: {exc!r}") from exc
        except httpx.TransportError as exc:  # dropped connection, read/write error, protocol error
            raise _Retryable(f"connection lost: {exc!r}") from exc
        if response.status_code < 400:
            return response.json()
        failure = f"HTTP {response.status_code}: {response.text[:500]}"
        if response.status_code in RETRY_STATUS:
            raise _Retryable(failure)
        raise EndpointError(f"{method} {url} -> {failure}")

    def _map(self, fn, payloads: list[dict]) -> list[Any]:
        if len(payloads) <= 1:
            return [fn(p) for p in payloads]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(payloads))) as pool:
            return list(pool.map(fn, payloads))  # keeps input order

    def _base_payload(self, sampling: SamplingConfig, seed: int) -> dict:
        return {
            "model": self.model_name,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": int(seed),
        }

    def chat(
        self, conversations: Sequence[list[Message]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        if len(conversations) != len(seeds):
            raise ValueError(f"{len(conversations)} conversations but {len(seeds)} seeds")
        payloads = [self._chat_payload(conv, sampling, seed) for conv, seed in zip(conversations, seeds)]
        return self._map(self._chat_one, payloads)

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        payloads = [self._completion_payload(prompt, sampling, seed) for prompt, seed in zip(prompts, seeds)]
        return self._map(self._completion_one, payloads)

    def submit(self, key: Hashable, prompt: list[int], sampling: SamplingConfig, seed: int) -> None:
        """Send one completion request from the stream's thread pool; `collect` returns it."""
        self._stream(key, self._completion_one, self._completion_payload(prompt, sampling, seed))

    def submit_chat(self, key: Hashable, conversation: list[Message], sampling: SamplingConfig, seed: int) -> None:
        self._stream(key, self._chat_one, self._chat_payload(conversation, sampling, seed))

    def _stream(self, key: Hashable, fn, payload: dict) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="openai-stream")
        self._futures[self._pool.submit(fn, payload)] = key

    def collect(self) -> list[tuple[Hashable, Generation]]:
        """Wait for the first requests in flight to end; a request that failed for good raises here."""
        if not self._futures:
            raise RuntimeError("collect() with no request in flight would wait forever")
        done, _ = wait(self._futures, return_when=FIRST_COMPLETED)
        return [(self._futures.pop(future), future.result()) for future in done]

    def in_flight(self) -> int:
        return len(self._futures)

    def cancel(self) -> None:
        """Drop the requests in flight: queued ones never start, running ones end unread."""
        for future in self._futures:
            future.cancel()
        self._futures = {}

    def _chat_payload(self, conversation: list[Message], sampling: SamplingConfig, seed: int) -> dict:
        return {**self._base_payload(sampling, seed), "messages": list(conversation)}

    def _chat_one(self, payload: dict) -> Generation:
        choice = self._request("POST", "/chat/completions", payload)["choices"][0]
        return Generation(text=(choice.get("message") or {}).get("content") or "", finish_reason=_finish_reason(choice))

    def _completion_payload(self, prompt: list[int], sampling: SamplingConfig, seed: int) -> dict:
        if self.tokenizer is None:
            raise NotImplementedError(
                "token-level generate over HTTP needs a local tokenizer: build the engine with "
                "tokenizer=<model folder> (factory option `tokenizer`)"
            )
        return {
            **self._base_payload(sampling, seed),
            "prompt": [int(t) for t in prompt],
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
        }

    def _completion_one(self, payload: dict) -> Generation:
        return self._completion_result(self._request("POST", "/completions", payload)["choices"][0])

    def _completion_result(self, choice: dict) -> Generation:
        block = choice.get("logprobs") or {}
        tokens = block.get("tokens") or []
        token_ids = [self._token_id(tok) for tok in tokens]
        logprobs = [float(lp) if lp is not None else 0.0 for lp in block.get("token_logprobs") or []]
        if len(logprobs) != len(token_ids):
            raise RuntimeError(f"server returned {len(logprobs)} log-probs for {len(token_ids)} tokens")
        text = choice.get("text")
        if text is None:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return Generation(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=_finish_reason(choice))

    def _token_id(self, token: str) -> int:
        if token.startswith("token_id:"):
            return int(token.split(":", 1)[1])
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == self.tokenizer.unk_token_id:
            raise RuntimeError(f"server returned token {token!r} that the local tokenizer lacks")
        return int(token_id)

    def close(self) -> None:
        if self._pool is not None:
            self.cancel()
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


def _finish_reason(choice: dict) -> str:
    reason = choice.get("finish_reason") or "stop"
    return "length" if reason == "length" else "stop" if reason in ("stop", "eos") else reason
