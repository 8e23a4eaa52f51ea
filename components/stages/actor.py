"""Improve the actor: SWEET-RL's turn-level DPO, or one of the two training baselines.

Algorithms (`actor.algo`, docs/algorithms.md SWEET-RL 7 and "Baselines"):
- `sweet`: DPO (Rafailov et al. 2023, eq. 7; beta 0.1) on critic-ranked turn pairs
  (`turn_pairs.jsonl`): each example is one state's prompt ids with a chosen and a rejected
  candidate action; plus `nll_coef` x the per-token NLL of the chosen action (authors: 0.01).
  Departure of the authors' code: their pairs carry no prompt, so their NLL covers the whole
  chosen sequence (state included); `actor.nll_scope: sequence` does that, `action` (default)
  follows the paper's description.
- `mtdpo`: multi-turn DPO: DPO on the trajectory pairs (`pairs.jsonl` + `trajectories.jsonl`),
  the log-prob of a trajectory being the sum over all its agent tokens; no critic, no c. It uses
  the same DPO loss, so it gets the NLL term too (`actor.nll_coef` 0 for plain DPO).
- `rft`: rejection fine-tuning: SFT (per-token NLL) on the agent turns of the successful
  trajectories (those scoring at least `rft_min_score`; 1.0, the paper's, keeps the successes).
The DPO reference is the initial actor; its log-probs come from one separate, cached pass
(components.lm.forward.reference_sums). Writes to out_dir: `checkpoints/`, `train_metrics.jsonl`,
`model/` (the new actor, an HF folder that eval and vLLM load) and `metrics.json`.
Run as `python -m components.stages.actor [--config JSON]` (one process, or `cluster.train_processes`
data-parallel ones under `accelerate launch`: training/launch.py; then only rank 0 writes).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from components.config.training import REFERENCE_LOGPROBS, ActorConfig, Algo, NllScope, TrainLayout
from components.data.records import Trajectory, TrajectoryPair, TurnPair, read_jsonl
from components.lm.forward import frozen_reference_sums, turn_logprob_sums
from components.lm.losses import dpo_loss
from components.lm.sequences import TokenSequence, action_sequence, collate, dialogue_sequence, whole_sequence
from components.stages.cli import stage_cli
from components.stages.result import StageResult
from components.training import distributed
from components.training.launch import train_processes
from components.training.loop import resume_point, summarize_history, train, whole_model
from components.training.models import load_trainable, save_model

log = logging.getLogger(__name__)
MODULE = "components.stages.actor"


@dataclass(frozen=True)
class ActorInputs:
    trajectories: Path | None = None  # mtdpo, rft
    pairs: Path | None = None  # mtdpo
    turn_pairs: Path | None = None  # sweet


@dataclass(frozen=True)
class DpoExample:
    chosen: TokenSequence
    rejected: TokenSequence
    ref_chosen: float = 0.0
    ref_rejected: float = 0.0


def _need(path: Path | None, what: str, algo: Algo) -> Path:
    if path is None or not Path(path).exists():
        raise FileNotFoundError(f"actor.algo={algo.value} needs {what} ({path} not found)")
    return Path(path)


def sweet_pairs(inputs: ActorInputs) -> list[tuple[TokenSequence, TokenSequence]]:
    rows = read_jsonl(_need(inputs.turn_pairs, "turn pairs (turn_pairs.jsonl)", Algo.sweet), TurnPair)
    return [(action_sequence(p.prompt_ids, p.chosen_ids), action_sequence(p.prompt_ids, p.rejected_ids)) for p in rows]


def trajectory_dpo_pairs(inputs: ActorInputs) -> list[tuple[TokenSequence, TokenSequence]]:
    trajs = {t.key: t for t in read_jsonl(_need(inputs.trajectories, "rollouts", Algo.mtdpo), Trajectory)}
    rows = read_jsonl(_need(inputs.pairs, "trajectory pairs (pairs.jsonl)", Algo.mtdpo), TrajectoryPair)
    return [(dialogue_sequence(trajs[p.chosen]), dialogue_sequence(trajs[p.rejected])) for p in rows]


def successful_dialogues(inputs: ActorInputs, min_score: float = 1.0) -> list[TokenSequence]:
    trajs = read_jsonl(_need(inputs.trajectories, "rollouts", Algo.rft), Trajectory)
    return [dialogue_sequence(t) for t in trajs if t.success or (t.score or 0.0) >= min_score]


def action_nll(model, part: list[DpoExample], chosen: torch.Tensor, tokens: torch.Tensor, pad_id: int):
    """Per-token NLL of the chosen actions, from the DPO pass's sums (no extra forward)."""
    return -(chosen / tokens).mean()


def sequence_nll(model, part: list[DpoExample], chosen: torch.Tensor, tokens: torch.Tensor, pad_id: int):
    """Per-token NLL of every token of the chosen sequences (one more forward pass)."""
    batch = collate([whole_sequence(e.chosen) for e in part], pad_id)
    sums = turn_logprob_sums(model, batch).sum(-1)
    return -(sums / batch.counts.sum(-1).to(sums.device).clamp(min=1.0)).mean()


NLL_TERMS = {NllScope.action: action_nll, NllScope.sequence: sequence_nll}


def dpo_loss_fn(beta: float, nll_coef: float, pad_id: int, scope: NllScope = NllScope.action):
    """Mean DPO loss of a micro-batch (+ nll_coef x the chosen side's per-token NLL over `scope`),
    with reward metrics."""

    def loss_fn(model, part: list[DpoExample]):
        batch = collate([e.chosen for e in part] + [e.rejected for e in part], pad_id)
        totals = turn_logprob_sums(model, batch).sum(-1)
        ref = torch.tensor([e.ref_chosen for e in part] + [e.ref_rejected for e in part], device=totals.device)
        chosen, rejected = totals.chunk(2)
        ref_chosen, ref_rejected = ref.chunk(2)
        losses, chosen_r, rejected_r = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta)
        tokens = batch.counts.sum(-1).to(totals.device).chunk(2)[0].clamp(min=1.0)
        nll = NLL_TERMS[scope](model, part, chosen, tokens, pad_id)
        return losses.mean() + nll_coef * nll, {
            "dpo_loss": losses.mean().item(),
            "nll": nll.item(),
            "accuracy": (chosen_r > rejected_r).float().mean().item(),
            "margin": (chosen_r - rejected_r).mean().item(),
            "chosen_reward": chosen_r.mean().item(),
            "rejected_reward": rejected_r.mean().item(),
        }

    return loss_fn


def sft_loss_fn(pad_id: int):
    """Per-token NLL over the agent turns of a micro-batch of dialogues."""

    def loss_fn(model, part: list[TokenSequence]):
        batch = collate(part, pad_id)
        total = turn_logprob_sums(model, batch).sum()
        nll = -total / batch.counts.sum().clamp(min=1.0).to(total.device)
        return nll, {"nll": nll.item()}

    return loss_fn


def with_reference(
    cfg: ActorConfig, model: str, pairs: list[tuple[TokenSequence, TokenSequence]], pad_id: int, out_dir: Path
) -> list[DpoExample]:
    """DPO examples carrying the initial actor's summed log-probs (one cached pass)."""
    flat = [s for pair in pairs for s in pair]
    with distributed.main_first():  # rank 0 fills the cache, the other processes read it
        sums = frozen_reference_sums(
            model, cfg.optim.dtype, flat, out_dir / REFERENCE_LOGPROBS, pad_id, cfg.ref_batch_size
        )
    return [DpoExample(c, r, sum(sums[2 * i]), sum(sums[2 * i + 1])) for i, (c, r) in enumerate(pairs)]


def examples_and_loss(cfg: ActorConfig, model: str, inputs: ActorInputs, pad_id: int, out_dir: Path):
    """The algorithm's training examples (over-long ones left out) and its loss function."""
    fits = lambda s: len(s.ids) <= cfg.max_length  # noqa: E731
    if cfg.algo == Algo.rft:
        seqs = successful_dialogues(inputs, cfg.rft_min_score)
        kept = [s for s in seqs if fits(s)]
        return kept, len(seqs) - len(kept), sft_loss_fn(pad_id)
    pairs = sweet_pairs(inputs) if cfg.algo == Algo.sweet else trajectory_dpo_pairs(inputs)
    kept = [p for p in pairs if fits(p[0]) and fits(p[1])]
    return (
        with_reference(cfg, model, kept, pad_id, out_dir),
        len(pairs) - len(kept),
        dpo_loss_fn(cfg.beta, cfg.nll_coef, pad_id, cfg.nll_scope),
    )


def tokens_of(part) -> int:
    return sum(len(e.ids) if isinstance(e, TokenSequence) else len(e.chosen.ids) + len(e.rejected.ids) for e in part)


def run(cfg: ActorConfig, model: str, inputs: ActorInputs, out_dir: Path) -> StageResult:
    """Improve the actor `model` with `cfg.algo`; see the module docstring for the files written."""
    from transformers import AutoTokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model)
    examples, too_long, loss_fn = examples_and_loss(cfg, model, inputs, tokenizer.pad_token_id, out_dir)
    if too_long:
        log.warning("%d examples exceed max_length %d and are left out", too_long, cfg.max_length)
    if not examples:
        raise ValueError(f"actor.algo={cfg.algo.value}: no training examples in {inputs}")
    config = {
        "actor": cfg.model_dump(mode="json"),
        "model": model,
        "inputs": {k: str(v) for k, v in vars(inputs).items()},
    }
    policy = load_trainable(model, cfg.optim, resume_point(out_dir, config, examples))
    history = train(policy, examples, loss_fn, cfg.optim, out_dir, config, tokens_of)
    if not distributed.is_main():
        return StageResult()  # the other training processes are done: rank 0 writes the outputs
    model_dir = save_model(whole_model(policy, model, cfg.optim, out_dir), tokenizer, out_dir / "model", config)
    metrics = summarize_history(history) | {
        "examples": len(examples),
        "examples_too_long": too_long,
        "seconds": time.perf_counter() - started,
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return StageResult(paths={"model": model_dir, "metrics": out_dir / "metrics.json"}, metrics=metrics)


def main() -> None:
    sections, args = stage_cli(MODULE)
    cfg, train_cfg = sections["actor"], sections["train"]
    train_processes(MODULE, args, cfg.optim)
    torch.manual_seed(cfg.optim.seed)
    layout = TrainLayout(train_cfg.out_dir)
    inputs = ActorInputs(
        trajectories=train_cfg.trajectories / "trajectories.jsonl",
        pairs=layout.pairs,
        turn_pairs=layout.ranking_dir / "turn_pairs.jsonl",
    )
    result = run(cfg, train_cfg.model, inputs, layout.actor_dir)
    if distributed.is_main():
        print(json.dumps(result.metrics))


if __name__ == "__main__":
    main()
