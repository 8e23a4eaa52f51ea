"""Materialise the DVC-tracked data sets (ColBench, GSM8K), or fetch ColBench from the hub.

Reads: data/**/*.dvc pointers and the default DVC remote (../shared/dvcstore). Writes: the
pointed-to JSONL files under data/. After a pull every ColBench backend task is validated, so a
corrupt or foreign file is reported (file, line, field) before any step uses it.

`--from-hub` downloads the official files of `facebook/collaborative_agent_bench`
(backend_tasks/train.jsonl and backend_tasks/test.jsonl) into data/colbench/hub/. It checks that
the hub answers within a few seconds first, so offline it fails at once with a clear message
instead of hanging in retries.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

from components.data.tasks import load_backend_tasks

log = logging.getLogger(__name__)

HUB_REPO = "facebook/collaborative_agent_bench"
HUB_FILES = {"train": "backend_tasks/train.jsonl", "test": "backend_tasks/test.jsonl"}
HUB_HOST = ("huggingface.co", 443)
BACKEND_TEST = Path("data/colbench/backend_test.jsonl")


class DataError(RuntimeError):
    """The data could not be materialised."""


def dvc_pull(repo_root: Path = Path("."), targets: list[str] | None = None) -> None:
    """`dvc pull` the data pointers (default: every data/**/*.dvc) and validate ColBench backend.

    Only the data pointers are pulled: stage outputs of dvc.yaml (models, runs) are made by
    their stages, not fetched.
    """
    env = dict(os.environ, DVC_NO_ANALYTICS="1")
    targets = targets or sorted(str(p.relative_to(repo_root)) for p in (repo_root / "data").rglob("*.dvc"))
    if not targets:
        raise DataError(f"no .dvc pointers under {repo_root / 'data'}")
    cmd = [sys.executable, "-m", "dvc", "pull", *targets]
    proc = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DataError(f"dvc pull failed (exit {proc.returncode}):\n{proc.stderr.strip() or proc.stdout.strip()}")
    backend = repo_root / BACKEND_TEST
    if backend.exists():
        n = len(load_backend_tasks(backend))
        log.info("validated %d ColBench backend tasks in %s", n, backend)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """True when a TCP connection to the hub opens within `timeout_s`."""
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout_s):
            return True
    except OSError:
        return False


def pull_from_hub(out_dir: Path = Path("data/colbench/hub"), timeout_s: float = 3.0) -> dict[str, Path]:
    """Download the official backend train/test files; validate them; return split -> path."""
    if not hub_reachable(timeout_s):
        raise DataError(
            f"the Hugging Face hub ({HUB_HOST[0]}) is not reachable from this machine; "
            "use `sweetflow data pull` (DVC remote) instead, or run where the hub is reachable"
        )
    from huggingface_hub import hf_hub_download

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, name in HUB_FILES.items():
        local = Path(hf_hub_download(HUB_REPO, name, repo_type="dataset", local_dir=out_dir))
        n = len(load_backend_tasks(local))
        log.info("hub %s split: %d validated tasks in %s", split, n, local)
        paths[split] = local
    return paths
