"""Process checks shared by the tests that send real signals, and a free local port for the ones that
start servers."""

import socket
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
