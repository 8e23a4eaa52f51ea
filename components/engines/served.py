"""The run's one engine as a sampling step sees it: a vLLM server started once per pipeline run
(flows/runtime/run_engine.py) that serves the run's base model and, as LoRA adapters loaded when a
step asks for them, every actor trained from that base.

Reads: `$SWEETFLOW_RUN_ENGINE`, which the pipeline sets for its steps: JSON with the server's `url`
(".../v1"), its `base` model folder, its `pid` and its `log`; a trained model folder's `adapter/`
(components/training/models.py `save_model`). Writes nothing.

The server is launched without waiting for it, so the first engine built on it waits until it
answers (`wait_ready`, up to START_TIMEOUT_S), and fails at once, naming its log, when the server
process is gone.

`served_engine(model, seed, options)` is an engine on that server when there is one and it can serve
`model`: the base itself, or a folder whose adapter was trained on the base. Otherwise it is None
and the step builds its own engine, as without a run engine (a fully fine-tuned actor, an actor of
a later iteration trained from a merged one, another model). An adapter is named by the hash of
its weights, so an actor retrained at the same path is a new adapter; it is loaded when the
engine is built and unloaded when the engine is closed.

Requests are token level (`/completions` with prompt token ids, the sampled ids and raw log-probs
back, components/engines/openai_engine.py); `chat` renders the chat template here and generates
token level too, as the in-process engines do, so a simulator sharing the agent's engine sees the
same prompts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import httpx

from components.config.training import ADAPTER
from components.engines.base import Message, SamplingConfig, TemplateChat, render_chat
from components.engines.openai_engine import EndpointError, OpenAIEngine

ENV = "SWEETFLOW_RUN_ENGINE"
START_TIMEOUT_S = 900.0  # a vLLM server's start on 2 busy CPU cores takes 30-120 s

log = logging.getLogger(__name__)


class ServedEngine(TemplateChat, OpenAIEngine):
    """The run's server, sampling the base model or one adapter (`model_name`)."""

    name = "vllm-run"

    def __init__(self, base_url: str, model: str, adapter: Path | None, **options: Any) -> None:
        self.adapter_name = adapter_name(adapter) if adapter is not None else None
        super().__init__(base_url, self.adapter_name or model, tokenizer=model, **options)
        if adapter is not None:
            self._adapter_call("load_lora_adapter", {"lora_name": self.adapter_name, "lora_path": str(adapter)})

    def submit_chat(self, key: Hashable, conversation: list[Message], sampling: SamplingConfig, seed: int) -> None:
        self.submit(key, render_chat(self.tokenizer, conversation), sampling, seed)

    def close(self) -> None:
        if self.adapter_name is not None:
            try:
                self._adapter_call("unload_lora_adapter", {"lora_name": self.adapter_name})
            except (EndpointError, OSError) as exc:  # a server that died holds no adapter
                log.warning("could not unload adapter %s: %s", self.adapter_name, exc)
        super().close()

    def _adapter_call(self, path: str, payload: dict) -> None:
        """POST /load_lora_adapter or /unload_lora_adapter (they answer text, not JSON); an adapter
        already loaded, or already gone, is not an error."""
        response = self._client.post(f"{self.base_url}/{path}", json=payload)
        benign = "already been loaded" in response.text or "cannot be found" in response.text
        if response.status_code >= 400 and not benign:
            raise EndpointError(f"POST {self.base_url}/{path} -> HTTP {response.status_code}: {response.text[:300]}")


def adapter_name(adapter: Path) -> str:
    """`actor-<12 hex>`: the hash of the adapter's weights."""
    digest = hashlib.sha256()
    for weights in sorted(Path(adapter).glob("adapter_model.*")):
        digest.update(weights.read_bytes())
    return f"actor-{digest.hexdigest()[:12]}"


def servable_adapter(model: str, base: str) -> Path | None:
    """`model`'s adapter when it was trained on `base` (both local folders), else None."""
    adapter = Path(model) / ADAPTER
    config = adapter / "adapter_config.json"
    if not config.is_file():
        return None
    trained_on = json.loads(config.read_text()).get("base_model_name_or_path") or ""
    return adapter if Path(trained_on).resolve() == Path(base).resolve() else None


def served_engine(model: str, seed: int, options: dict[str, Any]) -> ServedEngine | None:
    """An engine on the run's server for `model`, or None (see the module docstring); `options` are
    the OpenAI engine's retry options."""
    if not (raw := os.environ.get(ENV)):
        return None
    from components.data.model_prepare import resolve_model

    run, model = json.loads(raw), resolve_model(model)
    if Path(model).resolve() == Path(run["base"]).resolve():
        adapter = None
    elif (adapter := servable_adapter(model, run["base"])) is None:
        log.info("the run's engine serves %s and its LoRA actors; %s gets an engine of its own", run["base"], model)
        return None
    wait_ready(run)
    return ServedEngine(run["url"], run["base"] if adapter is None else model, adapter, seed=seed, **options)


def wait_ready(run: dict, timeout_s: float = START_TIMEOUT_S) -> None:
    """Until the run's server answers; ConnectionError when its process is gone or time is up."""
    health = run["url"].removesuffix("/v1") + "/health"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(health, timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if not _alive(int(run["pid"])):
            raise ConnectionError(f"the run's engine (pid {run['pid']}) exited; its log: {run['log']}")
        if time.monotonic() > deadline:
            raise ConnectionError(f"the run's engine did not answer {health} in {timeout_s:.0f} s (log: {run['log']})")
        time.sleep(1.0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
