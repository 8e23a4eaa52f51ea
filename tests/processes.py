"""Process checks shared by the tests that send real signals, and a free local port for the ones that
start servers (flows/runtime/services.py's)."""

from pathlib import Path

from flows.runtime.services import free_port  # noqa: F401 - the tests' import path


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
