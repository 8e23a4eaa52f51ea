"""EngineWatch wakes a caller blocked on a dead engine core's queue, and only then."""

from __future__ import annotations

import queue
from types import SimpleNamespace

import pytest

from components.engines.vllm_liveness import EngineWatch

pytest.importorskip("vllm")


def _client() -> SimpleNamespace:
    return SimpleNamespace(resources=SimpleNamespace(engine_dead=False), outputs_queue=queue.Queue())


def test_dead_engine_puts_engine_dead_error_in_the_queue():
    from vllm.v1.engine.exceptions import EngineDeadError

    client = _client()
    watch = EngineWatch(client, poll_s=0.01)
    client.resources.engine_dead = True
    assert isinstance(client.outputs_queue.get(timeout=5), EngineDeadError)
    watch.stop()
    assert client.outputs_queue.empty()


def test_deliberate_shutdown_puts_nothing():
    client = _client()
    watch = EngineWatch(client, poll_s=0.01)
    watch.stop()
    client.resources.engine_dead = True  # what vLLM's own shutdown does
    with pytest.raises(queue.Empty):
        client.outputs_queue.get(timeout=0.1)


def test_a_client_without_the_attributes_is_left_alone():
    watch = EngineWatch(None)
    assert not watch.supported
    watch.stop()
