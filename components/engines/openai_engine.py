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
- `seeds[i]` is sent as the request's `seed`.
- Failures: connection refused / unknown host fail at once (no retry) with a clear
  ConnectionError; timeouts, 429 and 5xx are retried `max_retries` times with exponential backoff.
  The constructor probes `{base_url}/models` (short timeout) so a dead server is reported before
  any work starts, and picks the served model name when none is given.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

import httpx

from components.engines.base import Generation, Message, SamplingConfig

RETRY_STATUS = {408, 429, 500, 502, 503, 504}


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
        concurrency: int = 32,
        api_key: str | None = None,
        seed: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
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
        self.model_name = model_name or self._served_model()

    def _served_model(self) -> str:
        models = self._request("GET", "/models").get("data") or []
        if not models:
            raise RuntimeError(f"{self.base_url}/models lists no model; pass a model name")
        return str(models[0]["id"])

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        url = self.base_url + path
        for attempt in range(self.max_retries + 1):
            try:
                response = self._client.request(method, url, json=payload)
            except (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                raise ConnectionError(f"cannot reach OpenAI-compatible server at {url}: {exc}") from exc
            except httpx.TimeoutException as exc:
                if attempt == self.max_retries:
                    raise TimeoutError(f"{url} timed out {attempt + 1} times") from exc
            else:
                if response.status_code < 400:
                    return response.json()
                if response.status_code not in RETRY_STATUS or attempt == self.max_retries:
                    raise RuntimeError(f"{method} {url} -> HTTP {response.status_code}: {response.text[:500]}")
            time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

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
        payloads = [
            {**self._base_payload(sampling, seed), "messages": list(conv)} for conv, seed in zip(conversations, seeds)
        ]

        def one(payload: dict) -> Generation:
            choice = self._request("POST", "/chat/completions", payload)["choices"][0]
            return Generation(
                text=(choice.get("message") or {}).get("content") or "",
                finish_reason=_finish_reason(choice),
            )

        return self._map(one, payloads)

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        if self.tokenizer is None:
            raise NotImplementedError(
                "token-level generate over HTTP needs a local tokenizer: build the engine with "
                "tokenizer=<model folder> (factory option `tokenizer`)"
            )
        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        payloads = [
            {
                **self._base_payload(sampling, seed),
                "prompt": [int(t) for t in prompt],
                "logprobs": 1,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": True,
            }
            for prompt, seed in zip(prompts, seeds)
        ]

        def one(payload: dict) -> Generation:
            choice = self._request("POST", "/completions", payload)["choices"][0]
            return self._completion_result(choice)

        return self._map(one, payloads)

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
        self._client.close()


def _finish_reason(choice: dict) -> str:
    reason = choice.get("finish_reason") or "stop"
    return "length" if reason == "length" else "stop" if reason in ("stop", "eos") else reason
