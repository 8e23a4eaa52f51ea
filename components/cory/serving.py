"""Keeping a generation engine on each agent's CURRENT weights, behind the Engine interface.

Reads: the base model folder (reload). Writes: `<work_dir>/<agent>/`, each agent's merged HF
folder, rewritten after every update it receives (reload only).

Two ways, picked by `cory.engine`:
- `InMemoryServer` (hf): one transformers engine over the training model itself
  (`HFEngine.from_model`); serving an agent is activating its adapter, so the engine always
  generates with the latest weights and nothing is copied.
- `ReloadServer` (vllm): after an agent's update, its merged weights are saved as an HF folder and
  its engine is rebuilt from that folder on the next request (lazily, so one rebuild per agent
  per iteration). Both agents keep an engine, so evaluation and the next iteration's rollouts
  share one build. A vLLM build costs 75-115 s on CPU (ENVIRONMENT.md), two per CORY
  iteration, which is why `auto` picks vLLM only on a CUDA machine. Any engine kind that loads a
  folder works here (the tests use "hf").
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from components.cory.agents import AgentPool
from components.cory.config import CoryEngine
from components.engines.base import Engine

log = logging.getLogger(__name__)
VLLM_OPTIONS_CPU = {"kv_cache_gb": 1, "max_model_len": 2048}          # two engines beside the trainer
VLLM_OPTIONS_GPU = {"gpu_memory_utilization": 0.25, "max_model_len": 4096}


class PolicyServer(Protocol):
    def engine_for(self, agent: str) -> Engine:
        """An engine that generates with `agent`'s current weights."""

    def updated(self, agent: str) -> None:
        """`agent`'s weights changed: later requests must see the new ones."""

    def close(self) -> None: ...


class InMemoryServer:
    """hf: the training model is the engine's model; an agent is served by activating its adapter."""

    def __init__(self, pool: AgentPool, max_batch_size: int) -> None:
        from components.engines.hf_engine import HFEngine

        self.pool = pool
        self.engine = HFEngine.from_model(pool.model, pool.tokenizer, max_batch_size=max_batch_size)
        self.rebuild_seconds = 0.0

    def engine_for(self, agent: str) -> Engine:
        self.pool.activate(agent)
        self.pool.model.eval()
        return self.engine

    def updated(self, agent: str) -> None:
        pass  # the engine reads the live weights

    def close(self) -> None:
        self.engine = None


class ReloadServer:
    """Rebuild an agent's engine from its merged weights after each update (see the module doc)."""

    def __init__(self, pool: AgentPool, kind: str, base_model: str, work_dir: Path, seed: int,
                 options: dict[str, Any] | None = None) -> None:
        self.pool, self.kind, self.base_model = pool, kind, base_model
        self.work_dir, self.seed, self.options = Path(work_dir), seed, dict(options or {})
        self.engines: dict[str, Engine] = {}
        self.rebuild_seconds = 0.0  # total time spent exporting and building, for the logs

    def engine_for(self, agent: str) -> Engine:
        if agent not in self.engines:
            from components.engines.factory import make_engine

            began = time.perf_counter()
            folder = self.pool.export_merged(agent, self.base_model, self.work_dir / agent)
            self.engines[agent] = make_engine(self.kind, str(folder), seed=self.seed, **self.options)
            spent = time.perf_counter() - began
            self.rebuild_seconds += spent
            log.info("%s engine for %s rebuilt from %s in %.1f s", self.kind, agent, folder, spent)
        return self.engines[agent]

    def updated(self, agent: str) -> None:
        engine = self.engines.pop(agent, None)
        if engine is not None:
            engine.close()

    def close(self) -> None:
        for agent in list(self.engines):
            self.updated(agent)


def resolve_engine(kind: CoryEngine) -> CoryEngine:
    """auto -> vllm on a CUDA machine where vLLM imports, else hf (on CPU a rebuild per agent and
    iteration costs more than the generation it speeds up)."""
    if kind != CoryEngine.auto:
        return kind
    from components.engines.factory import vllm_available

    return CoryEngine.vllm if torch.cuda.is_available() and vllm_available() else CoryEngine.hf


def make_server(kind: CoryEngine, pool: AgentPool, base_model: str, work_dir: Path, seed: int,
                max_batch_size: int) -> PolicyServer:
    """The server for `kind` (auto resolved first)."""
    kind = resolve_engine(kind)
    if kind == CoryEngine.hf:
        return InMemoryServer(pool, max_batch_size)
    options = VLLM_OPTIONS_GPU if torch.cuda.is_available() else VLLM_OPTIONS_CPU
    return ReloadServer(pool, "vllm", base_model, work_dir, seed, options)
