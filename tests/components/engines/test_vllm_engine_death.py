"""A vLLM engine core killed while `generate` waits raises EngineDied instead of hanging.

Without components/engines/vllm_liveness.py the caller blocks forever on vLLM's output queue (the
rollouts step measured idle 12 minutes after the kill). The generation runs in a thread so that a
regression fails the test after 90 s instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from components.engines.base import SamplingConfig

pytestmark = pytest.mark.integration


def _engine_cores() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children(recursive=True)
        if (child.cmdline() or [""])[0].startswith("VLLM::EngineCore")
    ]


def test_engine_core_killed_mid_generation_raises(prepared_model_dir):
    from components.engines.factory import vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not importable here")
    from components.engines.vllm_engine import VLLMEngine
    from components.engines.vllm_liveness import EngineDied

    engine = VLLMEngine(prepared_model_dir, max_model_len=2048, kv_cache_gb=1)
    try:
        (core,) = _engine_cores()
        prompts = [[int(t) for t in engine.tokenizer.encode(f"story number {i}:")] for i in range(64)]
        sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=1500)
        outcome: dict[str, object] = {}

        def generate() -> None:
            try:
                outcome["result"] = engine.generate(prompts, sampling, seeds=list(range(64)))
            except BaseException as exc:  # the assertion below says which
                outcome["error"] = exc

        worker = threading.Thread(target=generate, daemon=True)
        worker.start()
        time.sleep(3.0)
        assert worker.is_alive(), "generation ended before the kill: make it longer"
        os.kill(core.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.join(timeout=90)
        assert not worker.is_alive(), "generate still blocked 90 s after the engine core died"
        assert isinstance(outcome.get("error"), EngineDied), outcome
        assert "engine core process died" in str(outcome["error"])
        assert time.monotonic() - killed < 30
    finally:
        engine.close()
    assert not _engine_cores()
