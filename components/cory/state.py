"""CORY's resumable state: one checkpoint file and the per-iteration JSONL files it keeps in step.

Reads and writes under out_dir:
- `checkpoint/state.pt`: after the initial evaluation (iteration 0) and after every iteration,
  every agent's adapter, value head, optimizer state and shaping state (KL coefficient, running
  score moments), the completed iteration, the torch/Python RNG states and the config
  fingerprint. Written to a temporary file and renamed, so a crash mid-write leaves the previous
  one intact.
- `iterations.jsonl`, `samples.jsonl`: one or more rows per iteration, appended BEFORE the
  checkpoint. On resume, rows of iterations after the checkpoint (work that was lost in the crash)
  are dropped, so the re-run iteration appears once.
A checkpoint saved under another config (`CoryConfig.fingerprint`: everything but the number of
iterations, the output folder and the other algorithm's learning rate) is not resumed: the run
starts afresh and the old files go.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import torch

from components.cory.agents import AgentPool

log = logging.getLogger(__name__)
CHECKPOINT = Path("checkpoint") / "state.pt"
ITERATIONS = "iterations.jsonl"
SAMPLES = "samples.jsonl"
PROMPTS = "eval_prompts.jsonl"  # per held-out prompt and evaluation: the rewards (paired analyses)
INITIAL_EVAL = "eval_initial.json"
RUN_FILES = (ITERATIONS, SAMPLES, PROMPTS, INITIAL_EVAL)


def save_checkpoint(out_dir: Path, pool: AgentPool, iteration: int, fingerprint: dict) -> Path:
    path = Path(out_dir) / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:  # a Python file: a full disk raises OSError, not C++'s "iostream error"
        torch.save(
            {
                "iteration": iteration,
                "config": fingerprint,
                "agents": pool.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
            },
            fh,
        )
    os.replace(tmp, path)
    return path


def resume(out_dir: Path, pool: AgentPool, fingerprint: dict) -> int:
    """Load the checkpoint into `pool` and return its iteration (0 when starting afresh); trim the
    JSONL files to the iterations it holds. A checkpoint of another config is deleted with its files."""
    out_dir = Path(out_dir)
    path = out_dir / CHECKPOINT
    if not path.exists():
        _clear(out_dir)  # files without a checkpoint belong to no resumable run
        return 0
    state = torch.load(path, weights_only=False, map_location=pool.device)
    if state["config"] != json.loads(json.dumps(fingerprint)):
        log.info("checkpoint %s was saved under another config: starting afresh", path)
        shutil.rmtree(path.parent, ignore_errors=True)
        _clear(out_dir)
        return 0
    pool.load_state_dict(state["agents"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    iteration = int(state["iteration"])
    for name in (ITERATIONS, SAMPLES, PROMPTS):
        trim_rows(out_dir / name, iteration)
    log.info("resuming after iteration %d from %s", iteration, path)
    return iteration


def _clear(out_dir: Path) -> None:
    for name in RUN_FILES:
        (out_dir / name).unlink(missing_ok=True)


def trim_rows(path: Path, upto: int) -> list[dict]:
    """Keep the rows of `path` whose iteration is <= upto (rewriting the file); return them."""
    rows = read_rows(path)
    kept = [r for r in rows if r["iteration"] <= upto]
    if len(kept) != len(rows):
        log.info("dropping %d rows of %s written after the checkpoint", len(rows) - len(kept), path.name)
        path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return kept


def read_rows(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def append_rows(path: Path, rows: list[dict]) -> None:
    with Path(path).open("a") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)
        fh.flush()
        os.fsync(fh.fileno())
