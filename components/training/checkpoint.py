"""Training checkpoints: `out_dir/checkpoints/step-N/` holds the model as an HF folder (or the PEFT
adapter), `trainer_state.pt` (optimizer, scheduler, step, RNG state) and the resolved config. A model sharded
over several processes (training/sharding.py) is gathered whole first, so a checkpoint is the same
files whatever the number of processes.

A checkpoint is written to a temporary folder and renamed, so a crash mid-write leaves the
previous checkpoint intact; only the newest `keep` are kept. `latest` finds where to resume.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import torch

from components.training import sharding

STATE_FILE = "trainer_state.pt"
log = logging.getLogger(__name__)


def checkpoint_dir(out_dir: Path) -> Path:
    return Path(out_dir) / "checkpoints"


def latest(out_dir: Path, config: dict | None = None) -> Path | None:
    """The newest complete checkpoint under `out_dir`, if any. With `config`, only a checkpoint saved
    under that same config counts: checkpoints of another config or other data (a stage re-run by
    DVC after its inputs changed) are deleted, so training starts afresh instead of resuming them."""
    root = checkpoint_dir(out_dir)
    done = [p for p in root.glob("step-*") if (p / STATE_FILE).exists() and p.name.split("-")[1].isdigit()]
    if config is not None and any(_saved_config(p) != json.loads(json.dumps(config)) for p in done):
        log.info("checkpoints in %s were saved under another config or other data: starting afresh", root)
        shutil.rmtree(root, ignore_errors=True)
        return None
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def _saved_config(path: Path) -> dict | None:
    saved = path / "train_config.json"
    return json.loads(saved.read_text()) if saved.exists() else None


def save(
    out_dir: Path, step: int, model, optimizer, scheduler, config: dict, keep: int, whole: tuple | None = None
) -> Path:
    """Write checkpoint `step`. `whole`: the (model, optimizer) state dicts gathered from a sharded model
    (training/sharding.py), written instead of `model`'s and `optimizer`'s own (which hold shards)."""
    model_state, optimizer_state = whole or (None, optimizer.state_dict())
    root = checkpoint_dir(out_dir)
    final, tmp = root / f"step-{step}", root / f"step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, state_dict=model_state)
    with (tmp / STATE_FILE).open("wb") as fh:  # a Python file: a full disk raises OSError, not "iostream error"
        torch.save(
            {
                "step": step,
                "optimizer": optimizer_state,
                "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
            },
            fh,
        )
    (tmp / "train_config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    steps = sorted(
        (p for p in root.glob("step-*") if p.name.split("-")[1].isdigit()), key=lambda p: int(p.name.split("-")[1])
    )
    for old in steps[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def restore(path: Path, optimizer, scheduler, model=None) -> int:
    """Load optimizer, scheduler and RNG state from a checkpoint; return its step. With the `model` the
    optimizer steps, when it is sharded, the whole saved optimizer state is cut into this process's shards."""
    state = torch.load(Path(path) / STATE_FILE, weights_only=False)
    sharded = model is not None and sharding.is_sharded(model)
    optimizer.load_state_dict(sharding.shard_like_params(state["optimizer"], model) if sharded else state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    return int(state["step"])
