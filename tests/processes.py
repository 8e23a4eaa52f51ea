"""Process checks shared by the tests that send real signals."""

from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie, exited but not yet reaped, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
