"""Train SWEET-RL's asymmetric critic with a trajectory-level Bradley-Terry objective.

Reads: the scored rollouts (`trajectories.jsonl`), their trajectory pairs (`pairs.jsonl`, from
components.stages.pairs) and the run task's records (for its training-time information c,
`Task.training_info`: ColBench backend's hidden information, the elicitation task's preferences). Writes to out_dir:
`reference_logprobs.jsonl` (the frozen reference critic's per-turn sums, one pass, cached),
`checkpoints/step-N/`, `train_metrics.jsonl` (one row per step, with the Bradley-Terry loss and
accuracy on the held-out pairs after the step's update), `model/` (the trained critic,
an HF folder with `train_config.json`), `advantages.md` (the trained critic's per-turn advantages
on the first pairs' dialogues) and `metrics.json`.

The pairs of a `critic.heldout_fraction` share of the tasks (by hash of the task id) are held out:
the critic never trains on them, and its loss and accuracy on them are its learning curve (the loss
on training batches before each update says little: log 2 at step 1 by construction).

Implements Zhou et al. 2025, eq. 1-2 (docs/algorithms.md SWEET-RL 3): score(tau) = sum over agent turns
of beta * mean_l [log pi_critic - log pi_ref] with c in context; loss = -log sigmoid(score(chosen)
- score(rejected)). The reference is the initial critic (same base model), as in the paper.
Option `normalize: joint` takes the authors' code's single mean over all agent tokens.
Run as `python -m components.stages.critic` (one process per step, or `cluster.train_processes`
data-parallel ones under `accelerate launch`: training/launch.py; then only rank 0 writes).
"""

from __future__ import annotations

import json
import logging
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from components.config.training import REFERENCE_LOGPROBS, CriticConfig, Information, TrainLayout
from components.data.records import Trajectory, TrajectoryPair, read_jsonl
from components.data.split import hashed_below
from components.lm.advantage import pair_accuracy, trajectory_scores
from components.lm.critic_inputs import (
    critic_info,
    critic_sequence,
    dialogue_advantages,
    pad_sums,
    render_advantages,
    task_of,
)
from components.lm.forward import frozen_reference_sums, turn_logprob_sums
from components.lm.losses import bradley_terry_loss
from components.lm.sequences import TokenSequence, collate
from components.stages.cli import stage_cli
from components.stages.result import StageResult
from components.tasks.base import Task
from components.tasks.registry import task_from_sections, task_sections
from components.training import distributed
from components.training.launch import train_processes
from components.training.loop import resume_point, summarize_history, train, whole_model
from components.training.models import load_trainable, save_model

log = logging.getLogger(__name__)
SAMPLE_PAIRS = 3  # pairs whose dialogues get the per-turn advantage view
MODULE = "components.stages.critic"


@dataclass(frozen=True)
class CriticPair:
    chosen: TokenSequence
    rejected: TokenSequence
    ref_chosen: list[float]
    ref_rejected: list[float]


def pair_sequences(
    pairs: list[TrajectoryPair],
    trajs: dict[str, Trajectory],
    task: Task,
    tokenizer,
    max_length: int,
    information: Information = Information.full,
) -> tuple[list[tuple[TokenSequence, TokenSequence]], list[TrajectoryPair]]:
    """(chosen, rejected) critic sequences of the pairs that fit `max_length`, and those pairs."""
    from components.data.split import Split

    records = task.records(Split.train)
    seq_of: dict[str, TokenSequence] = {}
    for key in {k for p in pairs for k in (p.chosen, p.rejected)}:
        if key not in trajs:
            raise ValueError(f"pairs name trajectory {key}, which the trajectories file does not hold")
        info = critic_info(task, task_of(trajs[key].task_id, trajs[key].task_index, records), information)
        seq_of[key] = critic_sequence(trajs[key], info, tokenizer)
    kept = [p for p in pairs if max(len(seq_of[p.chosen].ids), len(seq_of[p.rejected].ids)) <= max_length]
    return [(seq_of[p.chosen], seq_of[p.rejected]) for p in kept], kept


def held_out(task_id: str, fraction: float) -> bool:
    """Whether the critic never trains on this task's pairs (its held-out pair accuracy is measured on them)."""
    return hashed_below(f"critic-heldout/{task_id}", fraction)


def bt_loss_fn(beta: float, normalize, pad_id: int, tolerance: float):
    """Loss of a micro-batch of CriticPairs: mean Bradley-Terry loss, with accuracy (ties within
    `tolerance` half right) and margin."""

    def loss_fn(model, part: list[CriticPair]):
        batch = collate([p.chosen for p in part] + [p.rejected for p in part], pad_id)
        sums = turn_logprob_sums(model, batch)
        ref = pad_sums([p.ref_chosen for p in part] + [p.ref_rejected for p in part], batch.num_turns)
        scores = trajectory_scores(sums, ref.to(sums.device), batch.counts.to(sums.device), beta, normalize)
        chosen, rejected = scores.chunk(2)
        margin = (chosen - rejected).detach()
        return bradley_terry_loss(chosen, rejected).mean(), {
            "accuracy": pair_accuracy(margin, tolerance),
            "margin": margin.mean().item(),
            "chosen_score": chosen.detach().mean().item(),
            "rejected_score": rejected.detach().mean().item(),
        }

    return loss_fn


def heldout_fn(loss_fn, heldout: list[CriticPair], micro: int):
    """Held-out Bradley-Terry loss and accuracy of the model as it is (after the step's update)."""

    def evaluate(model) -> dict[str, float]:
        loss = accuracy = 0.0
        for start in range(0, len(heldout), micro):
            part = heldout[start : start + micro]
            part_loss, numbers = loss_fn(model, part)
            loss += part_loss.item() * len(part) / len(heldout)
            accuracy += numbers["accuracy"] * len(part) / len(heldout)
        return {"heldout_loss": loss, "heldout_accuracy": accuracy}

    return evaluate


def critic_pairs(cfg: CriticConfig, seq_pairs, tokenizer, out_dir: Path) -> list[CriticPair]:
    """Attach the frozen reference's per-turn sums (one pass, cached) to every sequence pair."""
    flat = [s for pair in seq_pairs for s in pair]
    with distributed.main_first():  # rank 0 fills the cache, the other processes read it
        sums = frozen_reference_sums(
            cfg.model,
            cfg.optim.dtype,
            flat,
            out_dir / REFERENCE_LOGPROBS,
            tokenizer.pad_token_id,
            cfg.ref_batch_size,
        )
    return [CriticPair(c, r, sums[2 * i], sums[2 * i + 1]) for i, (c, r) in enumerate(seq_pairs)]


def write_advantage_view(
    model,
    examples: list[CriticPair],
    pairs: list[TrajectoryPair],
    trajs: dict[str, Trajectory],
    beta: float,
    pad_id: int,
    path: Path,
) -> None:
    """advantages.md: the trained critic's per-turn advantages on the first pairs' two dialogues."""
    seqs = [s for e in examples for s in (e.chosen, e.rejected)]
    refs = [r for e in examples for r in (e.ref_chosen, e.ref_rejected)]
    adv = dialogue_advantages(model, seqs, refs, beta, pad_id)
    items = [
        (
            f"pair {i // 2 + 1} {'chosen' if i % 2 == 0 else 'rejected'}",
            trajs[pairs[i // 2].chosen if i % 2 == 0 else pairs[i // 2].rejected],
            a,
        )
        for i, a in enumerate(adv)
    ]
    path.write_text(render_advantages(items))


def run(cfg: CriticConfig, trajectories: Path, pairs: Path, task: Task, out_dir: Path) -> StageResult:
    """Train the critic; see the module docstring for the files written."""
    from transformers import AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(cfg.model)
    trajs = {t.key: t for t in read_jsonl(trajectories, Trajectory)}
    pair_rows = list(read_jsonl(pairs, TrajectoryPair))
    if not pair_rows:
        raise ValueError(
            f"{pairs} holds no trajectory pairs: no task had trajectories far enough apart in the rollouts "
            "(lower pairs.min_chosen_score, or pairs.min_gap under rule gap, or collect more rollouts)"
        )
    seq_pairs, kept = pair_sequences(pair_rows, trajs, task, tokenizer, cfg.max_length, cfg.information)
    too_long = len(pair_rows) - len(kept)
    if too_long:
        log.warning("%d of %d pairs exceed max_length %d and are left out", too_long, len(pair_rows), cfg.max_length)
    every = critic_pairs(cfg, seq_pairs, tokenizer, out_dir)
    is_heldout = [held_out(p.task_id, cfg.heldout_fraction) for p in kept]
    examples = [e for e, h in zip(every, is_heldout) if not h]
    heldout = [e for e, h in zip(every, is_heldout) if h]
    kept = [p for p, h in zip(kept, is_heldout) if not h]
    if not examples:
        raise ValueError(
            f"all {len(every)} trajectory pairs fall in the critic's held-out tasks (critic.heldout_fraction "
            f"{cfg.heldout_fraction}): collect more rollouts or lower the fraction"
        )
    log.info("critic: %d training pairs, %d held-out pairs", len(examples), len(heldout))
    config = {"critic": cfg.model_dump(mode="json"), "trajectories": str(trajectories), "pairs": str(pairs)}
    model = load_trainable(cfg.model, cfg.optim, resume_point(out_dir, config, examples))
    loss_fn = bt_loss_fn(cfg.beta, cfg.normalize, tokenizer.pad_token_id, cfg.tie_tolerance)
    history = train(
        model,
        examples,
        loss_fn,
        cfg.optim,
        out_dir,
        config,
        tokens_of=lambda part: sum(len(p.chosen.ids) + len(p.rejected.ids) for p in part),
        evaluate=heldout_fn(loss_fn, heldout, cfg.optim.micro_batch_size) if heldout else None,
    )
    if not distributed.is_main():
        return StageResult()  # the other training processes are done: rank 0 writes the outputs
    model = whole_model(model, cfg.model, cfg.optim, out_dir)
    write_advantage_view(
        model,
        examples[:SAMPLE_PAIRS],
        kept[:SAMPLE_PAIRS],
        trajs,
        cfg.beta,
        tokenizer.pad_token_id,
        out_dir / "advantages.md",
    )
    model_dir = save_model(model, tokenizer, out_dir / "model", config)
    metrics = summarize_history(history) | {
        "pairs": len(examples),
        "heldout_pairs": len(heldout),
        **{k: history[-1][k] for k in ("heldout_loss", "heldout_accuracy") if k in history[-1]},
        "pairs_too_long": too_long,
        "seconds": time.perf_counter() - started,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"model": model_dir, "metrics": out_dir / "metrics.json"}, metrics=metrics)


def main() -> None:
    sections, args = stage_cli(MODULE, task_sections)
    cfg, train_cfg = sections["critic"], sections["train"]
    train_processes(MODULE, args, cfg.optim)
    torch.manual_seed(cfg.optim.seed)
    layout = TrainLayout(train_cfg.out_dir)
    result = run(
        cfg,
        train_cfg.trajectories / "trajectories.jsonl",
        layout.pairs,
        task_from_sections(sections),
        layout.critic_dir,
    )
    if distributed.is_main():
        print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
