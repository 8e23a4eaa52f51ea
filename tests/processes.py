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


def describe(roles: dict[str, list[int]]) -> str:
    """What a test that waited too long knows of its processes: per pid, its state, parent, signal
    masks and the kernel function it sleeps in (or that it is gone)."""
    keys = ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")
    lines = []
    for role, pids in roles.items():
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text().splitlines()
                wchan = Path(f"/proc/{pid}/wchan").read_text()
            except (FileNotFoundError, ProcessLookupError):
                lines.append(f"{role} {pid}: gone")
                continue
            fields = ", ".join(line.replace("\t", " ") for line in status if line.startswith(keys))
            lines.append(f"{role} {pid}: {fields}, waiting in {wchan or '-'}")
    return "timed out; processes:\n" + "\n".join(lines)
