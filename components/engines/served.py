"""The run's one engine as a sampling step sees it: a vLLM server started once per pipeline run
(flows/runtime/run_engine.py) on the run's base model, into which a step that samples from a
trained actor has the actor's merged weights reloaded in place (and a later step on the base
model, the base's).

Reads: `$SWEETFLOW_RUN_ENGINE`, which the pipeline sets for its steps: JSON with the server's `url`
(".../v1"), its `base` model folder, its `pid`, its `log`, and `holds`, the file naming the weights
the server holds now. Writes: that file, after a reload.

`served_engine(model, seed, options)` is an engine on that server when there is one and `model` is
a local folder of the base model's architecture (the base itself, or any actor trained from it,
LoRA merged or fully fine-tuned); otherwise None, and the step builds its own engine. Why merged
weights and not LoRA adapters: on vLLM 0.32's CPU build an adapter decoded about five times slower
than the same actor's merged weights (benchmarks/pipeline_time.py, README "One engine per run"),
and a reload takes seconds. Steps of a run follow one another, so one step at a time owns the
server; the reload goes through vLLM's development endpoints (`/collective_rpc` `reload_weights`,
then `/reset_prefix_cache`, so that no prefix computed with other weights is reused).

The server is launched without waiting for it, so the first engine built on it waits until it
answers (`wait_ready`, up to START_TIMEOUT_S), and fails at once, naming its log, when the server
process is gone. Requests are token level (`/completions` with prompt token ids, the sampled ids
and raw log-probs back, components/engines/openai_engine.py); `chat` renders the chat template here
and generates token level too, as the in-process engines do.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import httpx

from components.engines.base import Message, SamplingConfig, TemplateChat, render_chat
from components.engines.openai_engine import EndpointError, OpenAIEngine

ENV = "SWEETFLOW_RUN_ENGINE"
START_TIMEOUT_S = 900.0  # a vLLM server's start on 2 busy CPU cores takes 30-120 s
RELOAD_TIMEOUT_S = 600.0

log = logging.getLogger(__name__)


class ServedEngine(TemplateChat, OpenAIEngine):
    """The run's server holding the weights of `model` (reloaded in place when it held others)."""

    name = "vllm-run"

    def __init__(self, run: dict, model: str, **options: Any) -> None:
        super().__init__(run["url"], run["base"], tokenizer=model, **options)
        holds, wanted = Path(run["holds"]), weights_id(model)
        if not holds.exists() or holds.read_text() != wanted:
            began = time.perf_counter()
            self._post("collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(model)}})
            self._post("reset_prefix_cache", None)
            holds.write_text(wanted)
            log.info("the run's engine now holds %s (%.1f s)", model, time.perf_counter() - began)

    def submit_chat(self, key: Hashable, conversation: list[Message], sampling: SamplingConfig, seed: int) -> None:
        self.submit(key, render_chat(self.tokenizer, conversation), sampling, seed)

    def _post(self, path: str, payload: dict | None) -> None:
        """POST one of the server's development endpoints (answered without JSON)."""
        url = f"{self.base_url.removesuffix('/v1')}/{path}"
        response = self._client.post(url, json=payload, timeout=RELOAD_TIMEOUT_S)
        if response.status_code >= 400:
            raise EndpointError(f"POST {url} -> HTTP {response.status_code}: {response.text[:300]}")


def weights_id(model: str) -> str:
    """The folder and its weight files' sizes and times: another actor, or one retrained in place,
    is other weights."""
    folder = Path(model).resolve()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    return json.dumps([str(folder), [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]])


def same_architecture(model: str, base: str) -> bool:
    """Whether `model`'s weights fit the base model's engine (same config but the weights' dtype)."""
    configs = [json.loads((Path(m) / "config.json").read_text()) for m in (model, base)]
    keep = ("architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    keep += ("num_key_value_heads", "vocab_size", "tie_word_embeddings")
    return all(configs[0].get(k) == configs[1].get(k) for k in keep)


def served_engine(model: str, seed: int, options: dict[str, Any]) -> ServedEngine | None:
    """An engine on the run's server holding `model`'s weights, or None (see the module docstring);
    `options` are the OpenAI engine's retry options."""
    if not (raw := os.environ.get(ENV)):
        return None
    from components.data.model_prepare import resolve_model

    run, model = json.loads(raw), resolve_model(model)
    if not same_architecture(model, run["base"]):
        log.info("the run's engine serves %s's architecture; %s gets an engine of its own", run["base"], model)
        return None
    wait_ready(run)
    return ServedEngine(run, model, seed=seed, **options)


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
