"""Keeping a generation engine on each agent's CURRENT weights, behind the Engine interface.

Reads: the base model folder. Writes: `<work_dir>/<agent>/`, each agent's merged HF folder,
rewritten after every update it receives (vllm only); scratch, removed on `close`.

Three ways; `cory.engine` and `cory.vllm_sync` pick one:
- `InMemoryServer` (hf): one transformers engine over the training model itself
  (`HFEngine.from_model`); serving an agent is activating its adapter, so the engine always
  generates with the latest weights and nothing is copied.
- `InPlaceServer` (vllm, vllm_sync inplace, the default): ONE vLLM engine, built once; serving an
  agent whose weights the engine does not hold writes the agent's merged folder (only after it
  changed) and has the running engine reload its weights from it (`reload_weights`, vLLM's
  in-place reload), then drops the prefix cache. Measured on CPU with the 135M model
  (benchmarks/cory_weights.py, eager engines): 3.9 s per switch (folder write included) against
  41.8 s for a rebuild (85.6 s while CPU engines were still compiled).
- `ReloadServer` (vllm, vllm_sync reload; any kind that loads a folder, the tests use "hf"):
  after an agent's update, its engine is rebuilt from its merged folder on the next request (one
  build per agent and iteration; both agents keep an engine).
`auto` picks vLLM wherever it imports (as components.engines.factory does), else hf.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any, Protocol

import torch

from components.config.cory import CoryEngine, VllmSync
from components.cory.agents import AgentPool
from components.engines.base import Engine

log = logging.getLogger(__name__)
VLLM_OPTIONS_CPU = {"kv_cache_gb": 1, "max_model_len": 2048}  # beside the trainer (reload: two engines)
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

    def __init__(
        self,
        pool: AgentPool,
        kind: str,
        base_model: str,
        work_dir: Path,
        seed: int,
        options: dict[str, Any] | None = None,
    ) -> None:
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
        shutil.rmtree(self.work_dir, ignore_errors=True)  # scratch copies of the agents' weights


def reload_in_place(engine, folder: Path) -> None:
    """Have a running VLLMEngine load the weights of HF folder `folder` (same architecture) in
    place, then forget cached prefixes computed with the old weights."""
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder), "is_checkpoint_format": True})
    engine.llm.reset_prefix_cache()


class InPlaceServer:
    """vllm: one engine built once; an agent is served by reloading its merged weights in place."""

    def __init__(
        self, pool: AgentPool, base_model: str, work_dir: Path, seed: int, options: dict[str, Any] | None = None
    ) -> None:
        self.pool, self.base_model, self.work_dir = pool, base_model, Path(work_dir)
        self.seed, self.options = seed, dict(options or {})
        self.engine: Engine | None = None
        self.loaded: str | None = None  # the agent whose weights the engine holds
        self.exported: set[str] = set()  # agents whose folder holds their current weights
        self.rebuild_seconds = 0.0  # building once, then every export and reload

    def engine_for(self, agent: str) -> Engine:
        began = time.perf_counter()
        if self.engine is None:
            from components.engines.vllm_engine import VLLMEngine

            self.engine = VLLMEngine(self.base_model, seed=self.seed, **self.options)
        if self.loaded != agent:
            folder = self.work_dir / agent
            if agent not in self.exported:
                self.pool.export_merged(agent, self.base_model, folder)
                self.exported.add(agent)
            reload_in_place(self.engine, folder)
            self.loaded = agent
            spent = time.perf_counter() - began
            self.rebuild_seconds += spent
            log.info("vllm engine now serves %s (%.1f s)", agent, spent)
        return self.engine

    def updated(self, agent: str) -> None:
        self.exported.discard(agent)
        if self.loaded == agent:
            self.loaded = None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.loaded = None, None
        shutil.rmtree(self.work_dir, ignore_errors=True)  # scratch copies of the agents' weights


def resolve_engine(kind: CoryEngine) -> CoryEngine:
    """auto -> vllm where vLLM imports (CPU included: with in-place sync a CORY iteration of the
    CPU defaults took ~60 s against ~107 s with hf, after a one-time ~75 s build), else hf."""
    if kind != CoryEngine.auto:
        return kind
    from components.engines.factory import vllm_available

    return CoryEngine.vllm if vllm_available() else CoryEngine.hf


def make_server(
    kind: CoryEngine, sync: VllmSync, pool: AgentPool, base_model: str, work_dir: Path, seed: int, max_batch_size: int
) -> PolicyServer:
    """The server for `kind` (auto resolved first) and, for vllm, `sync`."""
    kind = resolve_engine(kind)
    if kind == CoryEngine.hf:
        return InMemoryServer(pool, max_batch_size)
    options = VLLM_OPTIONS_GPU if torch.cuda.is_available() else VLLM_OPTIONS_CPU
    if sync == VllmSync.inplace:
        return InPlaceServer(pool, base_model, work_dir, seed, options)
    return ReloadServer(pool, "vllm", base_model, work_dir, seed, options)
