"""Build an engine by kind: `make_engine("vllm" | "hf" | "openai" | "auto", model, seed=..., **options)`.

Reads: nothing itself (the engines read the model folder or reach the server). Writes: nothing.

`model` by kind:
- "vllm", "hf": a local Hugging Face folder or a hub id, resolved by
  `components.data.model_prepare.resolve_model` (hub ids fail fast and clearly when offline).
- "openai": "URL" or "URL#model_name", e.g. "http://127.0.0.1:8000/v1#meta-llama/Llama-3.3-70B";
  without "#model_name" the server's first listed model is used. Pass `tokenizer=<folder>` in
  options to enable token-level `generate` over HTTP, and `max_retries`, `backoff_s`,
  `retry_setting` for its retries of failed requests (the episode stages pass their
  `openai_retries`/`openai_backoff_s`, see components/episodes/build.py `openai_options`).
- "auto": "vllm" when vLLM imports on this machine, else "hf".

`options` go to the engine's constructor unchanged (see VLLMEngine, HFEngine, OpenAIEngine);
an option the engine does not take raises TypeError naming the engine.
"""

from __future__ import annotations

import importlib
from enum import Enum
from typing import Any

from components.engines.base import Engine


class EngineKind(str, Enum):
    VLLM = "vllm"
    HF = "hf"
    OPENAI = "openai"
    AUTO = "auto"


def vllm_available() -> bool:
    """True when `import vllm` works here (a CPU or GPU build is installed and loads)."""
    try:
        importlib.import_module("vllm")
    except Exception:  # ImportError, or a broken build (e.g. CUDA torchvision on CPU)
        return False
    return True


def resolve_kind(kind: str | EngineKind) -> EngineKind:
    try:
        resolved = EngineKind(kind.value if isinstance(kind, EngineKind) else str(kind).lower())
    except ValueError:
        choices = ", ".join(k.value for k in EngineKind)
        raise ValueError(f"unknown engine kind {kind!r}; choose one of: {choices}") from None
    if resolved is EngineKind.AUTO:
        return EngineKind.VLLM if vllm_available() else EngineKind.HF
    return resolved


def split_openai_model(model: str) -> tuple[str, str | None]:
    """'URL#name' -> (URL, name); 'URL' -> (URL, None)."""
    url, _, name = model.partition("#")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"openai engine needs 'http(s)://host:port/v1[#model_name]', got {model!r}")
    return url, (name or None)


def _build_vllm(model: str, seed: int, options: dict[str, Any]) -> Engine:
    from components.engines.vllm_engine import VLLMEngine

    return VLLMEngine(model, seed=seed, **options)


def _build_hf(model: str, seed: int, options: dict[str, Any]) -> Engine:
    from components.engines.hf_engine import HFEngine

    return HFEngine(model, seed=seed, **options)


def _build_openai(model: str, seed: int, options: dict[str, Any]) -> Engine:
    from components.engines.openai_engine import OpenAIEngine

    url, name = split_openai_model(model)
    return OpenAIEngine(url, name, seed=seed, **options)


_BUILDERS = {EngineKind.VLLM: _build_vllm, EngineKind.HF: _build_hf, EngineKind.OPENAI: _build_openai}


def make_engine(kind: str | EngineKind, model: str, *, seed: int = 0, **options: Any) -> Engine:
    """Build the engine of `kind` for `model` (see the module docstring for what `model` is)."""
    resolved = resolve_kind(kind)
    if not model:
        raise ValueError("no model given")
    if resolved is not EngineKind.OPENAI:
        from components.data.model_prepare import resolve_model

        model = resolve_model(str(model))
    try:
        return _BUILDERS[resolved](str(model), seed, dict(options))
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise TypeError(f"{resolved.value} engine: {exc}") from exc
        raise
