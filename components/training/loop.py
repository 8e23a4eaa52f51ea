"""The one training loop shared by the critic and the actor (docs/design.md convention 7).

Written out, no Trainer hierarchy: seeded shuffling per epoch, batches of `batch_size` (a last one
under half that size is spread over the others, never a step of its own), gradient accumulation over
micro-batches (the loss of a step is the example-weighted mean of its micro-batches), AdamW (with
fp32 master weights for bf16 models: training/precision.py),
linear warm-up then cosine decay to `min_lr_ratio` x lr, global grad-norm clipping, checkpoints
every `checkpoint_every` steps and at the end, resume from the newest checkpoint (the data order
is a function of the seed and the epoch, so a resumed run sees exactly the batches it would
have), and one metrics row per optimizer step appended to `train_metrics.jsonl` (loss, the
loss function's own metrics, lr, grad norm, tokens/s, the batch's size, and what an optional
`evaluate(model)` measures after the update, e.g. a held-out loss). The model itself is loaded by the caller,
from the checkpoint when there is one (`training.models.load_trainable`).

With more than one process (cluster.train_processes; training/launch.py), each process runs its
share of every step's micro-batches (and a zero-weight pass when a short last batch leaves it none,
so every process runs as many passes) and the gradients, loss and metrics are summed across
processes before clipping (training/distributed.py), so a step is the 1-process step on the same
global batch; only rank 0 writes the metrics file and the checkpoints. With `fsdp2` the loop first
shards the model (training/sharding.py): backward then reduce-scatters the summed gradients itself,
the clipping norm is reduced over the shards, and each checkpoint is gathered whole by every process
for rank 0 to write.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
import random
import time
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import torch
from tqdm.auto import tqdm

from components.config.training import OptimConfig
from components.training import checkpoint, distributed, sharding
from components.training.models import load_trainable
from components.training.precision import adamw

log = logging.getLogger(__name__)
T = TypeVar("T")
LossFn = Callable[[object, list[T]], tuple[torch.Tensor, dict[str, float]]]
METRICS_FILE = "train_metrics.jsonl"


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    order = list(range(n))
    random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
    return order


def epoch_batches(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, end) positions of an epoch's batches in its shuffled order. A last batch of less than
    half `batch_size` is not a step of its own (one pair would move the model as much as eight): its
    examples are spread over the other batches, which then hold one more each."""
    count = math.ceil(n / batch_size)
    if count > 1 and 0 < n % batch_size < batch_size / 2:
        count -= 1
    size, extra = divmod(n, count)
    bounds, start = [], 0
    for i in range(count):
        end = start + size + (i < extra)
        bounds.append((start, end))
        start = end
    return bounds


def total_steps(n: int, optim: OptimConfig) -> int:
    steps = len(epoch_batches(n, optim.batch_size)) * optim.epochs
    return min(steps, optim.max_steps) if optim.max_steps else steps


def make_optimizer(model, optim: OptimConfig, steps: int):
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, optim.master_weights, lr=optim.lr, betas=optim.adam_betas, weight_decay=optim.weight_decay)
    sched = get_cosine_with_min_lr_schedule_with_warmup(
        opt, round(optim.warmup_ratio * steps), steps, min_lr_rate=optim.min_lr_ratio
    )
    return opt, sched


def _history(path: Path, upto: int, rewrite: bool) -> list[dict]:
    """Metric rows of steps <= upto; rows of steps after the checkpoint (lost work) are dropped, and
    from the file too when `rewrite` (rank 0)."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["step"] <= upto]
    if rewrite:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _accumulate(model, examples: list[T], loss_fn: LossFn, micro: int) -> tuple[float, dict[str, float]]:
    """Forward/backward this process's micro-batches of the step's global batch `examples` (all of them
    with one process); return its share of the step's mean loss and metrics."""
    total_loss, sums = 0.0, {}
    starts = range(0, len(examples), micro)
    for start in distributed.share(starts):
        part = examples[start : start + micro]
        weight = len(part) / len(examples)
        loss, metrics = loss_fn(model, part)
        (loss * weight).backward()
        total_loss += loss.item() * weight
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value) * weight
    for _ in range(distributed.missing_passes(len(starts))):  # as many passes as the other processes
        loss, _ = loss_fn(model, examples[:micro])
        (loss * 0.0).backward()
    return total_loss, sums


def fingerprinted(config: dict, examples: Sequence[T]) -> dict:
    """`config` with the hash of the training examples: a checkpoint resumes only the same config on the
    same data."""
    return {**config, "examples_sha256": hashlib.sha256(pickle.dumps(list(examples))).hexdigest()}


def resume_point(out_dir: Path, config: dict, examples: Sequence[T]) -> Path | None:
    """The checkpoint `train` will resume for this config and these examples (stale ones are deleted, by
    rank 0 before the other processes look)."""
    with distributed.main_first():
        return checkpoint.latest(out_dir, fingerprinted(config, examples))


def train(
    model,
    examples: Sequence[T],
    loss_fn: LossFn,
    optim: OptimConfig,
    out_dir: Path,
    config: dict,
    tokens_of: Callable[[list[T]], int],
    evaluate: Callable[[object], dict[str, float]] | None = None,
) -> list[dict]:
    """Train `model` on `examples`; return every step's metrics (including steps done before a resume).
    `evaluate(model)`, when given, runs after each update (every process, no gradients) and its
    numbers join the step's row: e.g. a held-out loss, the model after the update."""
    if not examples:
        raise ValueError("no training examples")
    distributed.check_batch(optim.batch_size, optim.micro_batch_size)
    main = distributed.is_main()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = total_steps(len(examples), optim)
    bounds = epoch_batches(len(examples), optim.batch_size)
    per_epoch = len(bounds)
    sharded = sharding.active()
    if sharded:
        sharding.shard(model)
    opt, sched = make_optimizer(model, optim, steps)
    resume = resume_point(out_dir, config, examples)
    config = fingerprinted(config, examples)
    start = checkpoint.restore(resume, opt, sched, model) if resume else 0
    if resume:
        log.info("resuming from %s (step %d of %d)", resume, start, steps)
    if distributed.world() > 1 and main:
        log.info(
            "%s over %d processes, each runs its share of a step's micro-batches",
            "fsdp2 (sharded)" if sharded else "data parallel",
            distributed.world(),
        )
    with distributed.main_first():  # rank 0 drops the lost steps' rows before the others read the file
        history = _history(out_dir / METRICS_FILE, start, rewrite=main)
    params = [p for p in model.parameters() if p.requires_grad]
    model.train()
    bar = tqdm(total=steps, initial=start, desc="train", unit="step", disable=not main)
    for step in range(start, steps):
        epoch, i = divmod(step, per_epoch)
        order = epoch_order(len(examples), optim.seed, epoch)
        batch = [examples[j] for j in order[bounds[i][0] : bounds[i][1]]]
        began = time.perf_counter()
        loss, metrics = distributed.sum_metrics(*_accumulate(model, batch, loss_fn, optim.micro_batch_size))
        if not sharded:  # fsdp2's backward has reduce-scattered the summed gradients already
            distributed.sum_gradients(params)
        grad_norm = sharding.clip_gradients(params, optim.grad_clip)
        lr = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        row = {
            "step": step + 1,
            "epoch": epoch,
            "examples": len(batch),
            "loss": loss,
            **metrics,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens_per_s": tokens_of(batch) / max(time.perf_counter() - began, 1e-9),
            **_evaluated(model, evaluate),
        }
        history.append(row)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
        if main:
            with (out_dir / METRICS_FILE).open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        if (step + 1) % optim.checkpoint_every == 0 or step + 1 == steps:
            whole = sharding.whole_states(model, opt) if sharded else None  # every process gathers
            if main:
                checkpoint.save(out_dir, step + 1, model, opt, sched, config, optim.keep_checkpoints, whole)
    bar.close()
    return history


def _evaluated(model, evaluate: Callable[[object], dict[str, float]] | None) -> dict[str, float]:
    if evaluate is None:
        return {}
    model.eval()
    with torch.no_grad():
        numbers = evaluate(model)
    model.train()
    return numbers


def whole_model(model, base: str, optim: OptimConfig, out_dir: Path):
    """The trained `model` whole in this process: `model` itself, or, when `train` sharded it
    (training/sharding.py), the model of the newest checkpoint under `out_dir`, which `train` gathered
    and wrote at its last step."""
    if not sharding.is_sharded(model):
        return model
    return load_trainable(base, optim, checkpoint.latest(out_dir))


def summarize_history(history: list[dict]) -> dict[str, float]:
    """First and last step's loss, and the last epoch's mean of every step metric."""
    last_epoch = [r for r in history if r["epoch"] == history[-1]["epoch"]]
    keys = [k for k in history[-1] if k not in ("step", "epoch", "examples")]
    return {
        "steps": history[-1]["step"],
        "first_loss": history[0]["loss"],
        "final_loss": history[-1]["loss"],
        **{f"last_epoch_{k}": sum(r[k] for r in last_epoch) / len(last_epoch) for k in keys},
    }
